package mytrigger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// fixture is a fresh database on the shared server and a pool playing the
// source application.
type fixture struct {
	*dbtest.Database
}

func newFixture(t *testing.T, ddl ...string) *fixture {
	t.Helper()
	return &fixture{dbtest.MariaEngine.Database(t, ddl...)}
}

func (f *fixture) open(t *testing.T, cfg Config, from sluice.Position) *Reader {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return dbtest.OpenReader(t, func(ctx context.Context) (*Reader, error) { return Open(ctx, f.URL, cfg, from) })
}

// collect reads until it holds n row changes, failing after a deadline,
// then checks that nothing more comes. Progress markers are dropped (see
// TestProgress).
func collect(t *testing.T, r *Reader, n, max int) []sluice.Change {
	t.Helper()
	return dbtest.CollectChanges(t, r, n, max, 20*time.Second)
}

func TestInstallIdempotent(t *testing.T) {
	f := newFixture(t,
		"CREATE TABLE a (id int PRIMARY KEY, v varchar(10))",
		"CREATE TABLE `Odd ``name'` (k2 varchar(5), k1 int, v text, PRIMARY KEY (k1, k2))")
	ctx := context.Background()
	tbls := []sluice.TableName{{Name: "a"}, {Schema: f.Name, Name: "Odd `name'"}}
	for range 2 {
		if err := Install(ctx, f.My, tbls); err != nil {
			t.Fatalf("Install: %v", err)
		}
	}
	triggers := func() int {
		return f.QueryInt(t, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME LIKE 'sluice\\_%'")
	}
	if n := triggers(); n != 6 {
		t.Fatalf("%d capture triggers, want 6", n)
	}
	// A second Install with everything current changes nothing, even with
	// a transaction holding a lock on the table (it would otherwise wait).
	holder := f.Session(t)
	dbtest.ExecSQL(t, holder, "START TRANSACTION", "INSERT INTO a VALUES (99, 'held')")
	start := time.Now()
	if err := Install(ctx, f.My, tbls); err != nil {
		t.Fatalf("Install while a transaction is open: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Install of a current setup took %v", d)
	}
	dbtest.ExecSQL(t, holder, "ROLLBACK")

	r := f.open(t, Config{Tables: tbls}, sluice.Position{})
	odd := r.Tables()[1]
	if got := strings.Join(odd.KeyNames(), ","); got != "k1,k2" {
		t.Errorf("key of %s = %s, want k1,k2", odd.Name, got)
	}
	var coll string
	if err := f.My.QueryRow("SELECT @@collation_database").Scan(&coll); err != nil {
		t.Fatal(err)
	}
	want := []sluice.Column{{Name: "k2", Type: "varchar(5)", Collation: coll}, {Name: "k1", Type: "int(11)"}, {Name: "v", Type: "text", Nullable: true, Collation: coll}}
	if fmt.Sprint(odd.Columns) != fmt.Sprint(want) {
		t.Errorf("columns of %s = %v, want %v", odd.Name, odd.Columns, want)
	}
	f.Exec(t, "INSERT INTO a VALUES (1, 'x')", "INSERT INTO `Odd ``name'` VALUES ('b', 2, 'y')")
	dbtest.ExpectChanges(t, collect(t, r, 2, 10), "insert a [1 x]", "insert Odd `name' [b 2 y]")

	// A new column makes the triggers stale: Open says so, Install fixes
	// it while the table is in use, Open with Install fixes it too.
	f.Exec(t, "ALTER TABLE a ADD COLUMN w int")
	_, err := Open(ctx, f.URL, Config{Tables: tbls, Logger: slog.New(slog.DiscardHandler)}, sluice.Position{})
	if err == nil || !strings.Contains(err.Error(), "stale: it captures (id, v) but the table has (id, v, w)") || !strings.Contains(err.Error(), "sluice source install") {
		t.Fatalf("Open with a stale trigger: %v", err)
	}
	f.Exec(t, "ALTER TABLE a MODIFY v varchar(20)")
	r2 := f.open(t, Config{Tables: tbls, Install: true}, r.pos.sluice())
	f.Exec(t, "INSERT INTO a VALUES (3, 'z', 7)")
	dbtest.ExpectChanges(t, collect(t, r2, 1, 10), "insert a [3 z 7]")
	if n := triggers(); n != 6 {
		t.Fatalf("%d capture triggers after the reinstall, want 6", n)
	}

	// A stale trigger cannot be replaced while a transaction holds the
	// table: Install gives up quickly with a message instead of stalling.
	f.Exec(t, "ALTER TABLE a ADD COLUMN x int")
	dbtest.ExecSQL(t, holder, "START TRANSACTION", "INSERT INTO a (id) VALUES (98)")
	start = time.Now()
	err = Install(ctx, f.My, tbls)
	if err == nil || !strings.Contains(err.Error(), "long-running transaction") {
		t.Fatalf("Install behind an open transaction: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Install waited %v", d)
	}
	dbtest.ExecSQL(t, holder, "ROLLBACK")
	if err := Install(ctx, f.My, tbls); err != nil {
		t.Fatal(err)
	}
}

// TestValuesExact checks every value's text against what `SELECT col`
// returns through go-sql-driver, with rows written by a session whose
// time_zone and character set differ from the reader's.
func TestValuesExact(t *testing.T) {
	cols := []struct{ name, typ string }{
		{"ti", "tinyint"}, {"tb", "tinyint(1)"}, {"si", "smallint unsigned"}, {"mi", "mediumint"}, {"i", "int"},
		{"iz", "int(6) unsigned zerofill"}, {"bi", "bigint"}, {"bu", "bigint unsigned"},
		{"de", "decimal(12,2)"}, {"de0", "decimal(30,10)"}, {"fl", "float"}, {"db", "double"},
		{"bt", "bit(10)"}, {"b1", "bit(1)"},
		{"ch", "char(5)"}, {"vc", "varchar(64)"}, {"tx", "text"}, {"l1", "varchar(10) CHARACTER SET latin1"},
		{"bn", "binary(4)"}, {"vb", "varbinary(16)"}, {"bl", "blob"},
		{"dt", "date"}, {"dtm", "datetime"}, {"dt6", "datetime(6)"}, {"ts", "timestamp NULL"}, {"ts3", "timestamp(3) NULL"},
		{"tm", "time"}, {"tm2", "time(2)"}, {"yr", "year"},
		{"en", "enum('a','b c','é')"}, {"st", "set('x','y','z')"}, {"js", "json"}, {"lt", "longtext"},
	}
	var ddl strings.Builder
	ddl.WriteString("CREATE TABLE v (id int PRIMARY KEY")
	for _, c := range cols {
		fmt.Fprintf(&ddl, ", %s %s", c.name, c.typ)
	}
	ddl.WriteString(")")
	f := newFixture(t, ddl.String())
	r := f.open(t, Config{Tables: dbtest.Tables("v"), Install: true}, sluice.Position{})

	writer := f.Session(t)
	dbtest.ExecSQL(t, writer, "SET time_zone = '-07:00'", "SET NAMES latin1", "SET sql_mode = ''")
	rows := []string{
		`(2, -128, 1, 65535, -8388608, -2147483648, 42, -9223372036854775808, 18446744073709551615,
			1.50, -12345678901234567890.0123456789, 1.1, 0.1,
			b'1010000001', b'1', 'ab', 'plain', 'quote''s \\ "dq"\nnew line', 'caf\xe9',
			0x00ff10, 0x0001, 0x00, '2024-02-29', '2024-01-01 12:34:56', '2024-01-01 12:34:56.789012',
			'2024-06-01 12:00:00', '2038-01-19 03:14:07.999', '-838:59:59', '12:00:00.5', 2024,
			'b c', 'x,z', ' {"b" : 1,  "a":[1, 2.50, "\\u00e9"]} ', 'x')`,
		`(3, 127, 0, 0, 8388607, 2147483647, 0, 9223372036854775807, 0,
			-0.01, 0, 3.40282e38, 1.7976931348623157e308,
			b'0', b'0', '', '', '', '',
			'', '', '', '0000-00-00', '0000-00-00 00:00:00', '1000-01-01 00:00:00.000001',
			'0000-00-00 00:00:00', '1970-01-01 00:00:01', '838:59:59', '-00:00:00.01', 0,
			'é', '', '[]', '')`,
		`(4, 0, 0, 1, 0, 0, 1, 0, 1,
			0, 0.0000000001, 123456789, 1234567,
			b'1111111111', b'1', 'x', 'é😀', repeat('long ', 1000), 'x',
			'abcd', 'a\0b', repeat('x', 3000), '9999-12-31', '9999-12-31 23:59:59', '2000-01-01',
			'2000-01-01 00:00:00', '2000-01-01 00:00:00.5', '00:00:00', '00:00:00', 1901,
			'a', 'x,y,z', 'null', 'null')`,
		`(5, 1, 1, 1, 1, 1, 1, 1, 1,
			1, 1, 0.3333335, 1e15,
			b'0', b'0', 'x', 'x', 'x', 'x',
			'x', 'x', 'x', '2000-01-01', '2000-01-01', '2000-01-01',
			'2000-01-01', '2000-01-01', '00:00:01', '00:00:01', 2155,
			'a', 'x', '"str"', '{"a":1}')`,
		`(6, 1, 1, 1, 1, 1, 1, 1, 1,
			1, 1, 1e-30, 1e-310,
			b'0', b'0', 'x', 'x', 'x', 'x',
			'x', 'x', 'x', '2000-01-01', '2000-01-01', '2000-01-01',
			'2000-01-01', '2000-01-01', '00:00:01', '00:00:01', 1999,
			'a', 'x', '123.40', '1.0E+2')`,
	}
	names := []string{"id"}
	for _, c := range cols {
		names = append(names, c.name)
	}
	dbtest.ExecSQL(t, writer, "INSERT INTO v (id) VALUES (1)") // all NULL but the key
	for _, row := range rows {
		dbtest.ExecSQL(t, writer, "INSERT INTO v ("+strings.Join(names, ", ")+") VALUES "+row)
	}
	dbtest.ExecSQL(t, writer, "UPDATE v SET de = 7.25, fl = 2.5, ts = '2030-01-01 00:00:00' WHERE id = 6", "DELETE FROM v WHERE id = 5")
	got := collect(t, r, len(rows)+3, 100)

	// What `SELECT col` returns, as bytes, on a default session.
	want := map[string][]sql.RawBytes{}
	res, err := f.My.Query("SELECT " + strings.Join(names, ", ") + " FROM v ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for res.Next() {
		vals := make([]sql.RawBytes, len(names))
		ptrs := make([]any, len(names))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := res.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		cp := make([]sql.RawBytes, len(vals))
		for i, v := range vals {
			if v != nil {
				cp[i] = append(sql.RawBytes{}, v...)
			}
		}
		want[string(cp[0])] = cp
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	tbl := r.Tables()[0]
	checked := 0
	for _, c := range got {
		if c.Op == sluice.OpDelete {
			if c.Key[0].Text != "5" {
				t.Errorf("delete key %v, want 5", c.Key)
			}
			continue
		}
		id := c.Row[0].Text
		if (c.Op == sluice.OpInsert && id == "6") || id == "5" {
			continue // changed since
		}
		w, ok := want[id]
		if !ok {
			t.Fatalf("change for id %s not in the table", id)
		}
		checked++
		for i, v := range c.Row {
			col := tbl.Columns[i]
			if col.Name == "fl" && w[i] != nil {
				// The text protocol shows a FLOAT rounded to 6 digits; the
				// reader sends its exact value (see TestFloatExact).
				f, err := strconv.ParseFloat(v.Text, 32)
				if shown := strconv.FormatFloat(f, 'g', 6, 64); err != nil || shown != string(w[i]) {
					t.Errorf("id %s column fl = %q, shown with 6 digits %q, text protocol %q", id, v.Text, shown, w[i])
				}
				continue
			}
			switch {
			case w[i] == nil && !v.Null:
				t.Errorf("id %s column %s (%s) = %q, want NULL", id, col.Name, col.Type, v.Text)
			case w[i] != nil && (v.Null || v.Text != string(w[i])):
				t.Errorf("id %s column %s (%s) = %q, want %q", id, col.Name, col.Type, v, string(w[i]))
			}
		}
	}
	if checked != len(rows) {
		t.Fatalf("checked %d row images, want %d", checked, len(rows))
	}
	types := map[string]string{}
	for _, c := range tbl.Columns {
		types[c.Name] = c.Type
	}
	for name, typ := range map[string]string{"de": "decimal(12,2)", "si": "smallint(5) unsigned", "tb": "tinyint(1)", "vc": "varchar(64)", "bu": "bigint(20) unsigned"} {
		if types[name] != typ {
			t.Errorf("column %s type %q, want %q", name, types[name], typ)
		}
	}
}

func TestInsertUpdateDelete(t *testing.T) {
	f := newFixture(t,
		"CREATE TABLE t (a int, b varchar(5), v text, PRIMARY KEY (b, a))",
		"CREATE TABLE u (id int PRIMARY KEY, v text)",
		"CREATE TABLE other (id int PRIMARY KEY)")
	r := f.open(t, Config{Tables: dbtest.Tables("t", "u"), Install: true}, sluice.Position{})
	if err := Install(context.Background(), f.My, dbtest.Tables("other")); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	f.Exec(t,
		"INSERT INTO t VALUES (1, 'x', 'one'), (2, 'y', 'two')",
		"INSERT INTO other VALUES (1)", // captured for another reader, skipped here
		"INSERT INTO u VALUES (1, 'u1')",
		"UPDATE t SET v = 'uno' WHERE a = 1",
		"UPDATE t SET a = 10, v = 'moved' WHERE a = 2",
		"DELETE FROM t WHERE a = 1",
		"DELETE FROM u",
	)
	got := collect(t, r, 7, 3)
	dbtest.ExpectChanges(t, got,
		"insert t [1 x one]", "insert t [2 y two]", "insert u [1 u1]",
		"update t(b=x, a=1) [1 x uno]",
		"update t(b=y, a=2) [10 y moved]",
		"delete t(b=x, a=1)",
		"delete u(id=1)")
	if d := got[0].Time.Sub(before); d < -2*time.Second || d > 10*time.Second {
		t.Fatalf("change time %v, written at about %v", got[0].Time, before)
	}
}

// TestLateVisibleID: a transaction takes changelog id N, another takes N+1
// and commits first. The reader must not pass N while its transaction is
// open, and must read it once it commits, after N+1.
func TestLateVisibleID(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY, v varchar(10))")
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 50 * time.Millisecond}, sluice.Position{})
	long := f.Session(t)
	dbtest.ExecSQL(t, long, "START TRANSACTION", "INSERT INTO t VALUES (1, 'long')")
	f.Exec(t, "INSERT INTO t VALUES (2, 'short')", "UPDATE t SET v = 'short2' WHERE id = 2")
	// The short transactions committed but lie behind the open one's id:
	// nothing may be returned yet.
	for range 5 {
		if c, err := r.Read(context.Background(), 10); err != nil || len(c) != 0 {
			t.Fatalf("Read while a lower id is open = %s, %v; want nothing", dbtest.DescribeChanges(c), err)
		}
	}
	dbtest.ExecSQL(t, long, "UPDATE t SET v = 'long2' WHERE id = 1", "COMMIT")
	got := collect(t, r, 4, 10)
	dbtest.ExpectChanges(t, got, "insert t [1 long]", "insert t [2 short]", "update t(id=2) [2 short2]", "update t(id=1) [1 long2]")
	for i := 1; i < len(got); i++ {
		if got[i].Pos.Token <= got[i-1].Pos.Token && len(got[i].Pos.Token) <= len(got[i-1].Pos.Token) {
			t.Fatalf("positions not increasing: %v then %v", got[i-1].Pos, got[i].Pos)
		}
	}
}

// TestRowOrderAcrossTransactions: two transactions modify one row; the
// second waits for the first's row lock. The changes come in commit order.
func TestRowOrderAcrossTransactions(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY, v int)", "CREATE TABLE o (id int PRIMARY KEY)")
	r := f.open(t, Config{Tables: dbtest.Tables("t", "o"), Install: true, PollInterval: 50 * time.Millisecond}, sluice.Position{})
	f.Exec(t, "INSERT INTO t VALUES (1, 0)")
	first, second := f.Session(t), f.Session(t)
	// second starts first and takes a low id on another table.
	dbtest.ExecSQL(t, second, "START TRANSACTION", "INSERT INTO o VALUES (1)")
	dbtest.ExecSQL(t, first, "START TRANSACTION", "UPDATE t SET v = 1 WHERE id = 1")
	done := make(chan error, 1)
	go func() {
		_, err := second.ExecContext(context.Background(), "UPDATE t SET v = 2 WHERE id = 1") // waits for first
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // let second block on the row lock (not a wait for changes)
	dbtest.ExecSQL(t, first, "COMMIT")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dbtest.ExecSQL(t, second, "COMMIT")
	dbtest.ExpectChanges(t, collect(t, r, 4, 10), "insert t [1 0]", "insert o [1]", "update t(id=1) [1 1]", "update t(id=1) [1 2]")
}

// TestRolledBackGap: the ids of a rolled-back transaction never appear;
// the reader passes them once the transactions that were running when it
// saw the gap have ended, even while new transactions keep running.
func TestRolledBackGap(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)")
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 50 * time.Millisecond}, sluice.Position{})
	rb := f.Session(t)
	dbtest.ExecSQL(t, rb, "START TRANSACTION", "INSERT INTO t VALUES (1), (2)")
	f.Exec(t, "INSERT INTO t VALUES (3)")
	if c, err := r.Read(context.Background(), 10); err != nil || len(c) != 0 {
		t.Fatalf("Read with an open gap = %s, %v", dbtest.DescribeChanges(c), err)
	}
	// A transaction that starts after the gap was seen must not hold it.
	later := f.Session(t)
	dbtest.ExecSQL(t, later, "START TRANSACTION", "INSERT INTO t VALUES (10)")
	dbtest.ExecSQL(t, rb, "ROLLBACK")
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), "insert t [3]")
	dbtest.ExecSQL(t, later, "COMMIT")
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), "insert t [10]")

	// A statement rolled back inside a transaction that commits.
	f.Exec(t, "INSERT INTO t VALUES (20)")
	if _, err := f.My.Exec("INSERT INTO t VALUES (21), (20)"); err == nil {
		t.Fatal("duplicate key insert succeeded")
	}
	f.Exec(t, "INSERT INTO t VALUES (22)")
	dbtest.ExpectChanges(t, collect(t, r, 2, 10), "insert t [20]", "insert t [22]")
}

// TestResume opens a reader at every position the first one emitted and
// checks it reads exactly the rest.
func TestResume(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY, v varchar(5))", "CREATE TABLE o (id int PRIMARY KEY)")
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
	if err := Install(context.Background(), f.My, dbtest.Tables("o")); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, "INSERT INTO t VALUES (1,'a'),(2,'a'),(3,'a'),(4,'a'),(5,'a'),(6,'a'),(7,'a')", "INSERT INTO o VALUES (1)")
	all := collect(t, r, 7, 3)
	rb := f.Session(t)
	dbtest.ExecSQL(t, rb, "START TRANSACTION", "INSERT INTO t VALUES (100, 'gone')", "ROLLBACK")
	f.Exec(t, "INSERT INTO t VALUES (8, 'b')", "UPDATE t SET v = 'c' WHERE id < 3")
	all = append(all, collect(t, r, 3, 2)...)
	f.Exec(t, "DELETE FROM t WHERE id > 6")
	all = append(all, collect(t, r, 2, 100)...)
	for i, c := range all {
		r2 := f.open(t, Config{Tables: dbtest.Tables("t")}, c.Pos)
		rest := collect(t, r2, len(all)-i-1, 2)
		if g, w := dbtest.DescribeChanges(rest), dbtest.DescribeChanges(all[i+1:]); g != w {
			t.Fatalf("resumed after change %d (%s):\n got %s\nwant %s", i, c.Pos, g, w)
		}
		r2.Close()
	}
}

func TestPruneAfterAck(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)")
	ctx := context.Background()
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 50 * time.Millisecond}, sluice.Position{})
	r.pruneEvery = 0
	f.Exec(t, "INSERT INTO t VALUES (1),(2),(3),(4),(5)")
	got := collect(t, r, 5, 2)
	// An open transaction's row is not read and must survive every prune;
	// the prune must not wait for it either.
	open := f.Session(t)
	dbtest.ExecSQL(t, open, "START TRANSACTION", "INSERT INTO t VALUES (100)")
	f.Exec(t, "INSERT INTO t VALUES (6)")
	logRows := func() int { return f.QueryInt(t, "SELECT COUNT(*) FROM sluice_changelog") }
	if err := r.Ack(ctx, got[2].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 3 { // 4, 5, 6 (100 is not committed)
		t.Fatalf("%d changelog rows left after acking change 3 of 5, want 3", n)
	}
	if err := r.Ack(ctx, got[4].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 1 {
		t.Fatalf("%d changelog rows left after acking all read, want 1", n)
	}
	dbtest.ExecSQL(t, open, "COMMIT")
	last := collect(t, r, 2, 10)
	dbtest.ExpectChanges(t, last, "insert t [100]", "insert t [6]")
	r.pruneEvery = time.Hour
	if err := r.Ack(ctx, last[1].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 2 {
		t.Fatalf("%d changelog rows after a rate-limited Ack, want 2", n)
	}
	r.pruneEvery = 0
	if err := r.Ack(ctx, last[1].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 0 {
		t.Fatalf("%d changelog rows after the last Ack, want 0", n)
	}
}

func TestOpenErrors(t *testing.T) {
	f := newFixture(t,
		"CREATE TABLE ok (id int PRIMARY KEY)",
		"CREATE TABLE nopk (id int)",
		"CREATE TABLE notrig (id int PRIMARY KEY)")
	ctx := context.Background()
	if err := Install(ctx, f.My, dbtest.Tables("ok")); err != nil {
		t.Fatal(err)
	}
	m := dbtest.Maria(t)
	badPassword := fmt.Sprintf("mysql://%s:wrong@%s/%s", m.User, m.Addr(), f.Name)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = m.User, m.Password, "tcp", closed, f.Name
	unreachable := cfg.FormatDSN()
	other := newFixture(t, "CREATE TABLE ok (id int PRIMARY KEY)")
	tests := []struct {
		name string
		url  string
		cfg  Config
		from sluice.Position
		want []string
	}{
		{"missing table", f.URL, Config{Tables: dbtest.Tables("nope")}, sluice.Position{},
			[]string{"source table " + f.Name + ".nope does not exist in database " + f.Name}},
		{"missing table with install", f.DSN, Config{Tables: dbtest.Tables("nope"), Install: true}, sluice.Position{},
			[]string{"source table " + f.Name + ".nope does not exist"}},
		{"no primary key", f.URL, Config{Tables: dbtest.Tables("nopk"), Install: true}, sluice.Position{},
			[]string{"table " + f.Name + ".nopk has no primary key; sluice needs one to apply changes idempotently: add one"}},
		{"trigger missing", f.URL, Config{Tables: dbtest.Tables("notrig")}, sluice.Position{},
			[]string{f.Name + ".notrig has no capture trigger sluice_notrig_ai", "run `sluice source install`"}},
		{"changelog missing", other.URL, Config{Tables: dbtest.Tables("ok")}, sluice.Position{},
			[]string{"changelog " + other.Name + ".sluice_changelog is missing", "run `sluice source install`"}},
		{"wrong password", badPassword, Config{Tables: dbtest.Tables("ok")}, sluice.Position{},
			[]string{"access denied for user root", "check the user and password"}},
		{"unreachable", unreachable, Config{Tables: dbtest.Tables("ok")}, sluice.Position{},
			[]string{"cannot reach MySQL source at " + closed, "check the host and port"}},
		{"unknown database", fmt.Sprintf("mysql://%s:%s@%s/nodb_here", m.User, m.Password, m.Addr()), Config{Tables: dbtest.Tables("ok")}, sluice.Position{},
			[]string{"has no database nodb_here"}},
		{"no database", fmt.Sprintf("mysql://%s:%s@%s/", m.User, m.Password, m.Addr()), Config{Tables: dbtest.Tables("ok")}, sluice.Position{},
			[]string{"names no database"}},
		{"foreign position", f.URL, Config{Tables: dbtest.Tables("ok")}, sluice.Position{Kind: "binlog", Token: "mysql-bin.000001:4"},
			[]string{"not a mytrigger position"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = slog.New(slog.DiscardHandler)
			r, err := Open(ctx, tt.url, tt.cfg, tt.from)
			if err == nil {
				r.Close()
				t.Fatal("Open succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), m.Password) || strings.Contains(err.Error(), "wrong") {
				t.Errorf("Open error %q shows the password", err)
			}
		})
	}
}

func TestNoProcessPrivilege(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)")
	if err := Install(context.Background(), f.My, dbtest.Tables("t")); err != nil {
		t.Fatal(err)
	}
	user := "mytrig_" + f.Name[len(f.Name)-4:]
	user = strings.ReplaceAll(user, "_", "x")
	f.Exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT, DELETE ON "+f.Name+".* TO '"+user+"'@'%'")
	t.Cleanup(func() { f.My.Exec("DROP USER '" + user + "'@'%'") })
	m := dbtest.Maria(t)
	_, err := Open(context.Background(), fmt.Sprintf("mysql://%s:pw@%s/%s", user, m.Addr(), f.Name),
		Config{Tables: dbtest.Tables("t"), Logger: slog.New(slog.DiscardHandler)}, sluice.Position{})
	if err == nil || !strings.Contains(err.Error(), "GRANT PROCESS") {
		t.Fatalf("Open without PROCESS: %v, want an error asking for it", err)
	}
}

func TestUninstall(t *testing.T) {
	f := newFixture(t, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)")
	ctx := context.Background()
	if err := Install(ctx, f.My, dbtest.Tables("a", "b")); err != nil {
		t.Fatal(err)
	}
	triggers := func() int {
		return f.QueryInt(t, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()")
	}
	changelog := func() int {
		return f.QueryInt(t, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'sluice_changelog'")
	}
	if err := Uninstall(ctx, f.My, dbtest.Tables("a", "gone")); err != nil {
		t.Fatal(err)
	}
	if n := triggers(); n != 3 {
		t.Fatalf("%d triggers after uninstalling a, want 3", n)
	}
	if changelog() != 1 {
		t.Fatal("changelog dropped while b is still captured")
	}
	f.Exec(t, "INSERT INTO a VALUES (1)", "INSERT INTO b VALUES (1)")
	if n := f.QueryInt(t, "SELECT COUNT(*) FROM sluice_changelog"); n != 1 {
		t.Fatalf("%d changelog rows, want 1 (b only)", n)
	}
	for range 2 {
		if err := Uninstall(ctx, f.My, dbtest.Tables("b")); err != nil {
			t.Fatal(err)
		}
	}
	if n := triggers(); n != 0 {
		t.Fatalf("%d triggers after uninstalling all, want 0", n)
	}
	if changelog() != 0 {
		t.Fatal("changelog left after uninstalling every table")
	}
	f.Exec(t, "INSERT INTO a VALUES (2)", "INSERT INTO b VALUES (2)")
}

func TestReadIdle(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)")
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 100 * time.Millisecond}, sluice.Position{})
	start := time.Now()
	c, err := r.Read(context.Background(), 10)
	if err != nil || len(c) != 0 {
		t.Fatalf("Read on an idle source = %v, %v", c, err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("idle Read took %v, want about the poll interval", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Read(ctx, 10); err == nil {
		t.Fatal("Read with a cancelled context succeeded")
	}
}

// TestConcurrentWritersConverge: writers race on a few rows (upserts,
// deletes, key changes, some rolled back) while the reader reads in small
// pages; replaying what it read must give exactly the source's rows.
func TestConcurrentWritersConverge(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, w varchar(10))")
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 20 * time.Millisecond}, sluice.Position{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	const writers, txPerWriter, keys = 4, 60, 8
	errs := make(chan error, writers)
	for w := range writers {
		conn := f.Session(t)
		go func() {
			errs <- func() error {
				for i := range txPerWriter {
					k1 := (w + i) % keys
					k2 := k1 + 1 + (i*7+w)%(keys-k1)
					stmts := []string{
						fmt.Sprintf("INSERT INTO t VALUES (%d, 1, 'w%d') ON DUPLICATE KEY UPDATE v = v + 1, w = 'w%d'", k1, w, w),
						fmt.Sprintf("DO SLEEP(0.00%d)", i%3),
					}
					switch i % 4 {
					case 1:
						stmts = append(stmts, fmt.Sprintf("DELETE FROM t WHERE id = %d", k2))
					case 2:
						stmts = append(stmts,
							fmt.Sprintf("UPDATE t SET id = %d WHERE id = %d", 1000+w, k2),
							fmt.Sprintf("UPDATE t SET id = %d, v = v + 10 WHERE id = %d", k2, 1000+w))
					default:
						stmts = append(stmts, fmt.Sprintf("INSERT INTO t VALUES (%d, 1, 'w%d') ON DUPLICATE KEY UPDATE v = v + 1, w = 'w%d'", k2, w, w))
					}
					end := "COMMIT"
					if i%5 == 4 {
						end = "ROLLBACK"
					}
					stmts = append([]string{"START TRANSACTION"}, append(stmts, end)...)
					for _, s := range stmts {
						if _, err := conn.ExecContext(ctx, s); err != nil {
							var me *mysql.MySQLError
							if errors.As(err, &me) && me.Number == 1213 { // deadlock: the transaction is rolled back
								break
							}
							conn.ExecContext(ctx, "ROLLBACK")
							return fmt.Errorf("%s: %w", s, err)
						}
					}
				}
				return nil
			}()
		}()
	}

	replica := map[string]string{}
	apply := func(cs []sluice.Change) {
		for _, c := range cs {
			switch c.Op {
			case sluice.OpInsert:
				replica[c.Row[0].Text] = fmt.Sprint(c.Row)
			case sluice.OpUpdate:
				delete(replica, c.Key[0].Text)
				replica[c.Row[0].Text] = fmt.Sprint(c.Row)
			case sluice.OpDelete:
				delete(replica, c.Key[0].Text)
			}
		}
	}
	read, done := 0, 0
	for done < writers {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("writer: %v", err)
			}
			done++
		default:
		}
		cs, err := r.Read(ctx, 7)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		cs = dbtest.WithoutProgress(cs)
		apply(cs)
		read += len(cs)
	}
	written := f.QueryInt(t, "SELECT COUNT(*) FROM sluice_changelog")
	apply(collect(t, r, written-read, 7))

	want := map[string]string{}
	rows, err := f.My.QueryContext(ctx, "SELECT id, v, w FROM t")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, v, w string
		if err := rows.Scan(&id, &v, &w); err != nil {
			t.Fatal(err)
		}
		want[id] = fmt.Sprint([]sluice.Value{sluice.Text(id), sluice.Text(v), sluice.Text(w)})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(replica) != fmt.Sprint(want) {
		t.Fatalf("replayed changes give\n%v\nsource has\n%v", replica, want)
	}
	t.Logf("%d changes from %d transactions", written, writers*txPerWriter)
}

// TestGeneratedColumnsCarried: an AFTER trigger sees a generated column's
// computed value, VIRTUAL ones too; the reader describes them with their
// expressions.
func TestGeneratedColumnsCarried(t *testing.T) {
	f := newFixture(t, "CREATE TABLE g (id int PRIMARY KEY, price decimal(10,2), qty int, "+
		"total decimal(12,2) AS (price * qty) STORED, half decimal(12,3) AS (price / 2) VIRTUAL)")
	r := f.open(t, Config{Tables: dbtest.Tables("g"), Install: true}, sluice.Position{})
	var gen []string
	for _, c := range r.Tables()[0].Columns {
		gen = append(gen, c.Generated)
	}
	if want := []string{"", "", "", "`price` * `qty`", "`price` / 2"}; !slices.Equal(gen, want) {
		t.Errorf("generation expressions %q, want %q", gen, want)
	}
	f.Exec(t, "INSERT INTO g (id, price, qty) VALUES (1, 1.5, 2)", "UPDATE g SET qty = 3, id = 2 WHERE id = 1", "DELETE FROM g")
	dbtest.ExpectChanges(t, collect(t, r, 3, 5),
		"insert g [1 1.50 2 3.00 0.750]", "update g(id=1) [2 1.50 3 4.50 0.750]", "delete g(id=2)")
}
