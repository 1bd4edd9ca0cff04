package binlog

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestSessionLogForms: a session may log its writes with fewer columns
// than the row has (binlog_row_image NOBLOB or MINIMAL) or as SQL text
// (binlog_format STATEMENT or MIXED), whatever the server's global
// settings, which Open checks. The reader must never hand out a row it did
// not fully receive and never pass over a statement that changed rows of a
// streamed table: it stops at that event, before any change of it, naming
// the table, the position and the setting. Events that are whole (NOBLOB
// on a table without BLOB or TEXT columns, an insert of every column under
// MINIMAL) and statements in a database that holds no streamed table are
// followed.
func TestSessionLogForms(t *testing.T) {
	const ddl = "CREATE TABLE t (id INT PRIMARY KEY, a INT, body TEXT, note VARCHAR(20) DEFAULT 'dflt')"
	elsewhere := dbtest.MariaEngine.Database(t, "CREATE TABLE x (id INT PRIMARY KEY, a INT)")
	gomysql.RegisterReaderHandler("sluice-sessionlog", func() io.Reader { return strings.NewReader("20\t1\tloaded\tn\n") })
	t.Cleanup(func() { gomysql.DeregisterReaderHandler("sluice-sessionlog") })
	cases := []struct {
		name    string
		setting string   // SET SESSION … for the writes
		writes  []string // run in one session after the setting
		before  string   // the changes handed out before the stop (or all of them)
		stop    string   // the error's kind: "rows", "statement", or "" for none
		table   string   // the table the error names ("" for none)
		want    []string // in the error
	}{
		{name: "noblob update", setting: "binlog_row_image = 'NOBLOB'",
			writes: []string{"INSERT INTO t VALUES (10, 1, 'x', 'y')", "UPDATE t SET a = a + 10 WHERE id = 1"},
			before: "insert t key=[] row=[10 1 x y]; ", stop: "rows", table: "t",
			want: []string{"binlog_row_image=NOBLOB", "body", "SET SESSION binlog_row_image = 'FULL'"}},
		{name: "noblob delete", setting: "binlog_row_image = 'NOBLOB'",
			writes: []string{"DELETE FROM t WHERE id = 2"}, stop: "rows", table: "t",
			want: []string{"binlog_row_image=NOBLOB", "body"}},
		{name: "noblob without blob columns", setting: "binlog_row_image = 'NOBLOB'",
			writes: []string{"UPDATE plain SET a = a + 1 WHERE id = 1", "DELETE FROM plain WHERE id = 2"},
			before: "update plain key=[1] row=[1 2]; delete plain key=[2] row=[]; "},
		{name: "minimal update", setting: "binlog_row_image = 'MINIMAL'",
			writes: []string{"UPDATE t SET a = 5 WHERE id = 1"}, stop: "rows", table: "t",
			want: []string{"binlog_row_image=MINIMAL", "note"}},
		{name: "minimal delete", setting: "binlog_row_image = 'MINIMAL'",
			writes: []string{"DELETE FROM t WHERE id = 3"}, stop: "rows", table: "t",
			want: []string{"binlog_row_image=MINIMAL"}},
		{name: "minimal insert of some columns", setting: "binlog_row_image = 'MINIMAL'",
			writes: []string{"INSERT INTO t VALUES (11, 1, 'every', 'column')", "INSERT INTO t (id, a) VALUES (12, 1)"},
			before: "insert t key=[] row=[11 1 every column]; ", stop: "rows", table: "t",
			want: []string{"binlog_row_image=MINIMAL", "body", "note"}},
		{name: "statement update", setting: "binlog_format = 'STATEMENT'",
			writes: []string{"UPDATE t SET a = a + 10"}, stop: "statement", table: "t",
			want: []string{"binlog_format=STATEMENT", "UPDATE t SET a = a + 10", "SET SESSION binlog_format = 'ROW'"}},
		{name: "statement delete in a transaction", setting: "binlog_format = 'STATEMENT'",
			writes: []string{"BEGIN", "INSERT INTO other VALUES (7, 7)", "DELETE FROM `t` WHERE id = 3", "COMMIT"}, stop: "statement",
			want: []string{"binlog_format=STATEMENT", "INSERT INTO other"}},
		{name: "mixed insert", setting: "binlog_format = 'MIXED'",
			writes: []string{"INSERT INTO t VALUES (13, 1, 'x', 'y')"}, stop: "statement", table: "t",
			want: []string{"binlog_format=STATEMENT or MIXED"}},
		{name: "statement names no streamed table but is in their database", setting: "binlog_format = 'STATEMENT'",
			writes: []string{"UPDATE other SET a = 1"}, stop: "statement",
			want: []string{"trigger, view or stored function", "UPDATE other SET a = 1"}},
		{name: "statement qualified from another database", setting: "binlog_format = 'STATEMENT'",
			writes: []string{"USE " + elsewhere.Name, "UPDATE {db}.t SET a = 0 WHERE id = 1"}, stop: "statement", table: "t",
			want: []string{"binlog_format=STATEMENT"}},
		{name: "statement in another database is followed", setting: "binlog_format = 'STATEMENT'",
			writes: []string{"USE " + elsewhere.Name, "INSERT INTO x VALUES (1, 1)", "UPDATE x SET a = 2",
				"SET SESSION binlog_format = 'ROW'", "USE {db}", "UPDATE t SET a = 6 WHERE id = 1"},
			before: "update t key=[1] row=[1 6 one dflt]; "},
		{name: "load data as a statement", setting: "binlog_format = 'STATEMENT'",
			writes: []string{"LOAD DATA LOCAL INFILE 'Reader::sluice-sessionlog' INTO TABLE t"}, stop: "statement", table: "t",
			want: []string{"LOAD DATA", "binlog_format=STATEMENT"}},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			d := utcDatabase(t, ddl, "CREATE TABLE plain (id INT PRIMARY KEY, a INT)", "CREATE TABLE other (id INT PRIMARY KEY, a INT)",
				"INSERT INTO t VALUES (1, 1, 'one', DEFAULT), (2, 2, 'two', DEFAULT), (3, 3, 'three', DEFAULT)",
				"INSERT INTO plain VALUES (1, 1), (2, 2)")
			r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(d.Name, "t"), tn(d.Name, "plain")}}, sluice.Position{})
			conn := d.Session(t)
			ctx := context.Background()
			for _, q := range append([]string{"SET SESSION " + c.setting}, c.writes...) {
				if _, err := conn.ExecContext(ctx, strings.ReplaceAll(q, "{db}", d.Name)); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if c.stop == "" {
				got := readN(t, r, strings.Count(c.before, "; "), true)
				if summary(got) != c.before {
					t.Errorf("changes: %s, want %s", summary(got), c.before)
				}
				return
			}
			got, err := readUntilErr(t, r)
			if summary(got) != c.before {
				t.Errorf("changes before the stop: %s, want %s", summary(got), c.before)
			}
			var se *SessionLogError
			if !errors.As(err, &se) {
				t.Fatalf("%v, want a SessionLogError", err)
			}
			if se.Statement != (c.stop == "statement") {
				t.Errorf("statement %v, want %v: %v", se.Statement, c.stop == "statement", err)
			}
			tbl, ok := sluice.ErrTable(err)
			if c.table == "" && ok || c.table != "" && tbl != tn(d.Name, c.table) {
				t.Errorf("error's table %v %v, want %q", tbl, ok, c.table)
			}
			for _, w := range append(c.want, "mysql-bin.", "The event stays in the binlog") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			t.Logf("%v", err)
		})
	}
}

// TestSessionLogStopsAgainOnResume: the event stays in the binlog, so a
// reader started from the last change handed out before the stop stops
// at the same event again, with nothing of it handed out.
func TestSessionLogStopsAgainOnResume(t *testing.T) {
	d := utcDatabase(t, "CREATE TABLE t (id INT PRIMARY KEY, a INT, body TEXT)", "INSERT INTO t VALUES (1, 1, 'one')")
	cfg := Config{Tables: []sluice.TableName{tn(d.Name, "t")}}
	r := open(t, d.DSN, cfg, sluice.Position{})
	conn := d.Session(t)
	for _, q := range []string{"BEGIN", "INSERT INTO t VALUES (2, 2, 'two')", "SET @x = 1", "COMMIT",
		"SET SESSION binlog_row_image = 'NOBLOB'", "BEGIN", "INSERT INTO t VALUES (3, 3, 'three')", "UPDATE t SET a = 9 WHERE id = 1", "COMMIT"} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	got, err := readUntilErr(t, r)
	if len(got) != 2 || err == nil {
		t.Fatalf("first run: %s, %v", summary(got), err)
	}
	r.Close()
	r2 := open(t, d.DSN, cfg, got[len(got)-1].Pos)
	again, err2 := readUntilErr(t, r2)
	if len(again) != 0 || err2 == nil || err2.Error() != err.Error() {
		t.Errorf("resumed after %s: %s, %v; want no change and the same error %v", got[len(got)-1].Pos, summary(again), err2, err)
	}
}

// TestStatementTouchesStreamed: which statements logged as SQL text stop
// the stream. Streamed: shop.orders and shop.lines.
func TestStatementTouchesStreamed(t *testing.T) {
	r := &Reader{tables: []*sluice.Table{{Name: tn("shop", "orders")}, {Name: tn("shop", "lines")}}}
	cases := []struct {
		db, q string
		rows  bool   // a statement that changes rows
		stop  string // "table", "db" or ""
	}{
		{"shop", "UPDATE orders SET a = 1", true, "table"},
		{"shop", "update `ORDERS` set a = 1", true, "table"},
		{"other", "DELETE FROM shop.lines WHERE id = 1", true, "table"},
		{"other", "DELETE FROM `shop` . `lines`", true, "table"},
		{"other", "INSERT INTO x SELECT * FROM shop.orders", true, "table"},
		{"other", "REPLACE INTO x VALUES (1)", true, ""},
		{"other", "INSERT INTO x VALUES ('orders')", true, ""},
		{"shop", "INSERT INTO audit VALUES (1)", true, "db"},
		{"other", "UPDATE x JOIN shop.audit a ON a.id = x.id SET x.n = 1", true, "db"},
		{"other", "SELECT shop.f(1)", true, "db"},
		{"shop", "CALL p()", true, "db"},
		{"shop", "DO f()", true, "db"},
		{"other", "/* c */ ( SELECT 1 )", true, ""},
		{"other", "/*!40101 UPDATE shop.orders SET a = 1 */", true, "table"},
		{"other", "/*M!100100 DELETE FROM `shop`.`orders` */", true, "table"},
		{"other", "SET STATEMENT max_statement_time=1 FOR UPDATE shop.orders SET a = 2", true, "table"},
		{"other", "SET STATEMENT max_statement_time=1 FOR CREATE TABLE y (id int)", false, ""},
		{"shop", "LOAD DATA INFILE '/x' INTO TABLE orders", true, "table"},
		{"shop", "LOAD INDEX INTO CACHE orders", false, ""},
		{"shop", "WITH c AS (SELECT 1) UPDATE orders SET a = 1", true, "table"},
		{"shop", "ALTER TABLE orders ADD COLUMN c INT", false, ""},
		{"shop", "CREATE TRIGGER tr AFTER INSERT ON audit FOR EACH ROW INSERT INTO orders VALUES (1)", false, ""},
		{"shop", "GRANT SELECT ON orders TO u", false, ""},
		{"shop", "SAVEPOINT a", false, ""},
		{"shop", "SET @x = 1", false, ""},
		{"", "", false, ""},
	}
	for _, c := range cases {
		toks := tokenize(executableComments(c.q))
		if got := changesRows(toks); got != c.rows {
			t.Errorf("%q: changesRows %v, want %v", c.q, got, c.rows)
			continue
		}
		if !c.rows {
			continue
		}
		table, db, ok := r.streamedIn(toks, c.db)
		got := ""
		switch {
		case ok && table != (sluice.TableName{}):
			got = "table"
		case ok:
			got = "db"
		}
		if got != c.stop {
			t.Errorf("in %s, %q: %s (%v %q), want %q", c.db, c.q, got, table, db, c.stop)
		}
	}
}

// FuzzStatementCheck: no statement text or event makes the checks panic.
func FuzzStatementCheck(f *testing.F) {
	for _, s := range []string{"UPDATE t SET a = 1", "/*!40101 DELETE FROM `d`.`t` */", "SET STATEMENT x=1 FOR (INSERT", "/*M!", "`", "LOAD DATA x"} {
		f.Add(s)
	}
	r := &Reader{tables: []*sluice.Table{{Name: tn("d", "t")}}}
	f.Fuzz(func(t *testing.T, q string) {
		toks := tokenize(executableComments(q))
		if changesRows(toks) {
			r.streamedIn(toks, "d")
		}
		loadQuery([]byte(q))
	})
}

// TestSessionLogGlobalMixed: a server whose global binlog_format becomes
// MIXED after the reader started logs the new sessions' writes as
// statements; the reader stops at the first one of a streamed table. (A
// reader opened while the global format is MIXED is refused at Open.) It
// needs a private server, whose global setting the other tests must not
// see: set SLUICE_TEST_PRIVATE_SERVER=1 to run it (about 10 s).
func TestSessionLogGlobalMixed(t *testing.T) {
	if os.Getenv("SLUICE_TEST_PRIVATE_SERVER") == "" {
		t.Skip("starts a private MariaDB server: set SLUICE_TEST_PRIVATE_SERVER=1")
	}
	ctx := context.Background()
	m, err := dbtest.StartMariaDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop() })
	if err := m.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	db := dbtest.OpenMy(t, m.DSN("shop"), nil)
	dbtest.ExecSQL(t, db, "CREATE TABLE t (id INT PRIMARY KEY, a INT)", "INSERT INTO t VALUES (1, 1)")
	cfg := Config{Tables: []sluice.TableName{tn("shop", "t")}}
	r := open(t, m.DSN("shop"), cfg, sluice.Position{})
	dbtest.ExecSQL(t, db, "SET GLOBAL binlog_format = 'MIXED'")
	writer := dbtest.OpenMy(t, m.DSN("shop"), nil) // new sessions take the new global value
	dbtest.ExecSQL(t, writer, "UPDATE t SET a = a + 1")
	got, err := readUntilErr(t, r)
	var se *SessionLogError
	if len(got) != 0 || !errors.As(err, &se) || !se.Statement || se.Table != tn("shop", "t") {
		t.Fatalf("after the global format became MIXED: %s, %v; want a stop at the statement", summary(got), err)
	}
	t.Logf("%v", err)
	if _, err := Open(ctx, m.DSN("shop"), cfg, sluice.Position{}); err == nil || !strings.Contains(err.Error(), "binlog_format is MIXED, need ROW") {
		t.Errorf("Open with the global format MIXED: %v, want it refused", err)
	}
}
