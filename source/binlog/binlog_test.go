package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// utcDatabase is a fresh database whose session is in UTC, the convention
// for TIMESTAMP, and runs multi-statement strings.
func utcDatabase(t testing.TB, ddl ...string) *dbtest.Database {
	t.Helper()
	return dbtest.MariaEngine.DatabaseWith(t, map[string]string{"time_zone": "'+00:00'", "multiStatements": "true"}, ddl...)
}

func open(t testing.TB, dsn string, cfg Config, from sluice.Position) *Reader {
	t.Helper()
	return dbtest.OpenReader(t, func(ctx context.Context) (*Reader, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return Open(ctx, dsn, cfg, from)
	})
}

// readN reads until n changes arrived (or the deadline), then checks for a
// short while that nothing more comes. Progress markers are not changes
// of a table: they are dropped.
func readN(t testing.TB, r *Reader, n int, quiet bool) []sluice.Change {
	t.Helper()
	ctx := context.Background()
	var out []sluice.Change
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d changes, want %d: %v", len(out), n, summary(out))
		}
		cs, err := r.Read(ctx, n-len(out))
		if err != nil {
			t.Fatalf("Read after %d changes: %v", len(out), err)
		}
		out = append(out, dbtest.WithoutProgress(cs)...)
	}
	if quiet {
		cs, err := r.Read(ctx, 100)
		if cs = dbtest.WithoutProgress(cs); err != nil || len(cs) != 0 {
			t.Fatalf("after %d changes: got %d more (%v), err %v", n, len(cs), summary(cs), err)
		}
	}
	return out
}

func summary(cs []sluice.Change) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(describe(c) + "; ")
	}
	return b.String()
}

func tn(db, name string) sluice.TableName { return sluice.TableName{Schema: db, Name: name} }

func TestTypesMatchTextProtocol(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, `CREATE TABLE ty (
		id INT PRIMARY KEY,
		ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
		mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
		de DECIMAL(12,3), de0 DECIMAL(5,0), debig DECIMAL(65,30), f FLOAT, d DOUBLE,
		ch CHAR(10), vc VARCHAR(64), tx TEXT, bn BINARY(6), vb VARBINARY(20), bl BLOB,
		dt DATE, dtm DATETIME(6), dtm0 DATETIME, dtm3 DATETIME(3), ts TIMESTAMP(6) NULL, ts0 TIMESTAMP NULL, tm TIME(6), tm0 TIME, tm2 TIME(2), yr YEAR,
		js JSON, en ENUM('a','b c','ü'), st SET('x','y','z'), b1 BIT(1), b10 BIT(10), b64 BIT(64), bool1 TINYINT(1)
	) DEFAULT CHARSET=utf8mb4`)
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "ty")}}, sluice.Position{})
	dbtest.ExecSQL(t, db,
		`INSERT INTO ty VALUES (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
			-9223372036854775808, 18446744073709551615, -123456789.125, 42, 12345678901234567890.000000000000000000000000000001,
			3.14159, 2.718281828459045, 'ab', 'héllo ✓', 'long text', 'ab', x'00ff10', x'deadbeef',
			'2024-02-29', '2024-02-29 13:14:15.123456', '1999-12-31 23:59:59', '2000-01-01 00:00:00.5', '2024-03-01 01:02:03.000001', '2038-01-19 03:14:07',
			'-838:59:59.000000', '12:00:00', '01:02:03.4', 2155,
			'{"a": [1, 2.5, "x"], "b": null}', 'b c', 'x,z', b'1', b'1010101010', x'ffffffffffffffff', 1)`,
		`INSERT INTO ty (id, f, d, de, tm, dtm, ts, yr, en, st, bn, b10) VALUES
			(2, 1e20, 1.5e-7, 0.5, '00:00:00', '2000-01-01 00:00:00', '1970-01-01 00:00:01', 1901, 'ü', '', '', b'0'),
			(3, -0.1, 123456789012345678, -0.001, '-00:00:01.5', '9999-12-31 23:59:59.999999', '2024-01-01 00:00:00.000000', 2000, 'a', 'x,y,z', 'abcdef', b'1111111111'),
			(4, 100, 1e15, 99999.999, '838:59:59', '1000-01-01 00:00:00', NULL, NULL, NULL, NULL, NULL, NULL),
			(5, 123456, 0.1, 0, '10:00:00.000001', NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(6, 1234567, 1e-5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(7, 0.000123, 12345.678, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(9, 16777215, 123456789012345, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(10, 3.4e38, -1.7976931348623157e308, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(11, 1.17549435e-38, 5e-324, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(12, 0.5, 0.3333333333333333, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(13, 999999.5, 999999999999999.9, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(14, -0.0001, 0.0001, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`)
	cs := readN(t, r, 14, true)
	rows, err := db.Query("SELECT * FROM ty ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for n := 0; rows.Next(); n++ {
		raw := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		c := cs[n]
		if c.Op != sluice.OpInsert || len(c.Row) != len(cols) {
			t.Fatalf("change %d: %s with %d values", n, c.Op, len(c.Row))
		}
		for i, col := range cols {
			got := c.Row[i]
			if c.Table.Columns[i].Name != col {
				t.Fatalf("column %d: %s, want %s", i, c.Table.Columns[i].Name, col)
			}
			if raw[i] == nil {
				if !got.Null {
					t.Errorf("row %d %s: got %q, want NULL", n+1, col, got.Text)
				}
				continue
			}
			if col == "f" {
				// The text protocol rounds FLOAT to 6 digits; the
				// reader must carry the value (TestFloatExact).
				continue
			}
			if got.Null || got.Text != string(raw[i]) {
				t.Errorf("row %d %s (%s): got %q (null=%v), want %q", n+1, col, c.Table.Columns[i].Type, got.Text, got.Null, string(raw[i]))
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// workload writes a mix of transactions: multi-statement ones with
// inserts, updates, deletes and a primary key change, a rolled back one, a
// DDL on another table and single statements.
func workload(t testing.TB, db *sql.DB) {
	dbtest.ExecSQL(t, db,
		"BEGIN; INSERT INTO a VALUES (1,'one'),(2,'two'),(3,'three'); UPDATE a SET v='TWO' WHERE id=2; INSERT INTO b VALUES (10, 1); DELETE FROM a WHERE id=3; COMMIT",
		"INSERT INTO other VALUES (1)",
		"BEGIN; UPDATE a SET id=20 WHERE id=2; UPDATE b SET n=n+1; INSERT INTO other VALUES (2); INSERT INTO a VALUES (4,'four'); COMMIT",
		"BEGIN; INSERT INTO a VALUES (99,'rolled back'); ROLLBACK",
		"CREATE TABLE other2 (id INT PRIMARY KEY)",
		"UPDATE a SET v=CONCAT(v,'!')",
		"DELETE FROM b",
		"INSERT INTO a VALUES (5,'five')",
	)
}

// expected changes of workload: 3+1+1+1 + 1+1+1 + 3 + 1 + 1 = 14
const workloadChanges = 14

func setupWorkloadTables(t testing.TB, db *sql.DB) {
	dbtest.ExecSQL(t, db,
		"CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))",
		"CREATE TABLE b (id INT PRIMARY KEY, n INT)",
		"CREATE TABLE other (id INT PRIMARY KEY)")
}

func describe(c sluice.Change) string {
	if c.Table == nil {
		return fmt.Sprintf("%s @%s", c.Op, c.Pos)
	}
	return fmt.Sprintf("%s %s key=%v row=%v", c.Op, c.Table.Name.Name, c.Key, c.Row)
}

func testResumeEverywhere(t *testing.T, filePos bool) {
	m := dbtest.Maria(t)
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	setupWorkloadTables(t, db)
	cfg := Config{Tables: []sluice.TableName{tn(dbn, "a"), tn(dbn, "b")}, FilePositions: filePos}
	r := open(t, m.URL(dbn), cfg, sluice.Position{})
	start := time.Now()
	workload(t, db)
	all := readN(t, r, workloadChanges, true)
	want := []string{
		"insert a key=[] row=[1 one]", "insert a key=[] row=[2 two]", "insert a key=[] row=[3 three]",
		"update a key=[2] row=[2 TWO]", "insert b key=[] row=[10 1]", "delete a key=[3] row=[]",
		"update a key=[2] row=[20 TWO]", "update b key=[10] row=[10 2]", "insert a key=[] row=[4 four]",
		"update a key=[1] row=[1 one!]", "update a key=[4] row=[4 four!]", "update a key=[20] row=[20 TWO!]",
		"delete b key=[10] row=[]", "insert a key=[] row=[5 five]",
	}
	for i, c := range all {
		if got := describe(c); got != want[i] {
			t.Errorf("change %d: %s, want %s", i, got, want[i])
		}
		if c.Pos.Kind != Kind || c.Time.Before(start.Add(-2*time.Second).Truncate(time.Second)) {
			t.Errorf("change %d: pos %s time %s", i, c.Pos, c.Time)
		}
		if filePos != strings.HasPrefix(c.Pos.Token, "file:") {
			t.Errorf("change %d: position %s", i, c.Pos)
		}
	}
	t.Logf("positions: first %s, last %s", all[0].Pos, all[len(all)-1].Pos)
	r.Close()
	// A position inside a transaction that the server does not send first
	// (another binlog) is refused, not silently misapplied.
	tok := strings.Split(all[1].Pos.Token, "|")
	tok[1] = "0-1-999999"
	r3 := open(t, d.DSN, cfg, sluice.Position{Kind: Kind, Token: strings.Join(tok, "|")})
	for deadline := time.Now().Add(20 * time.Second); ; {
		cs, err := r3.Read(context.Background(), 100)
		if err != nil {
			if !strings.Contains(err.Error(), "0-1-999999") {
				t.Errorf("foreign position: %v", err)
			}
			break
		}
		if len(cs) > 0 {
			t.Fatalf("foreign position: changes %s", summary(cs))
		}
		if time.Now().After(deadline) {
			t.Fatal("foreign position: no error")
		}
	}
	r3.Close()
	for i := range all {
		r2 := open(t, d.DSN, cfg, all[i].Pos)
		rest := readN(t, r2, len(all)-i-1, true)
		for j, c := range rest {
			if describe(c) != describe(all[i+1+j]) || c.Pos != all[i+1+j].Pos {
				t.Fatalf("resume from %d (%s): change %d is %s @%s, want %s @%s", i, all[i].Pos, j, describe(c), c.Pos, describe(all[i+1+j]), all[i+1+j].Pos)
			}
		}
		r2.Close()
	}
}

func TestResumeFromEveryPositionGTID(t *testing.T) { testResumeEverywhere(t, false) }
func TestResumeFromEveryPositionFile(t *testing.T) { testResumeEverywhere(t, true) }

// TestSchemaChangesFollowed: the DDL of a streamed table reaches the
// reader's output as a schema change at its place, saying what changed:
// an added column with the value the rows that existed then got (its
// default, or a NOT NULL column's zero), a dropped and a retyped column,
// nullability and indexes; the table's new shape is the changes' after
// it, as the next table map confirms.
func TestSchemaChangesFollowed(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE z (id INT PRIMARY KEY)")
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a"), tn(dbn, "z")}}, sluice.Position{})
	dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (1,'x')",
		"ALTER TABLE a ADD COLUMN w INT NOT NULL DEFAULT 7",
		"INSERT INTO a VALUES (2,'y',8)", "UPDATE a SET v='xx' WHERE id=1")
	cs := readN(t, r, 4, true)
	if cs[0].Table != r.Tables()[0] || len(cs[0].Table.Columns) != 2 {
		t.Errorf("first change: table %p with %d columns, want the described one", cs[0].Table, len(cs[0].Table.Columns))
	}
	if got := dbtest.DescribeChanges(cs[1:2]); got != "schema change a [add w=7, not null w]" || cs[1].Schema.Before != cs[0].Table {
		t.Errorf("schema change: %s", got)
	}
	nt := cs[2].Table
	if nt == cs[0].Table || len(nt.Columns) != 3 || nt.Columns[2].Name != "w" || nt.Columns[2].Type != "int(11)" || nt.Columns[1].Type != "varchar(20)" {
		t.Fatalf("after ADD COLUMN: %+v", nt)
	}
	if describe(cs[2]) != "insert a key=[] row=[2 y 8]" || describe(cs[3]) != "update a key=[1] row=[1 xx 7]" || cs[3].Table != nt {
		t.Errorf("after ADD COLUMN: %s; %s", describe(cs[2]), describe(cs[3]))
	}
	dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (3,'z',9)", "ALTER TABLE a DROP COLUMN v", "INSERT INTO z VALUES (1)", "INSERT INTO a VALUES (4,10)",
		"ALTER TABLE a MODIFY w BIGINT NULL, ADD COLUMN n INT, ADD UNIQUE KEY a_w (w)", "CREATE INDEX a_n ON a (n)", "DROP INDEX a_w ON a",
		"ALTER TABLE a ADD COLUMN s ENUM('p','q') NOT NULL, ADD COLUMN ts DATETIME DEFAULT CURRENT_TIMESTAMP", "INSERT INTO a (id) VALUES (5)")
	got := dbtest.DescribeChanges(readN(t, r, 9, true))
	want := "insert a [3 z 9]; schema change a [drop v]; insert z [1]; insert a [4 10]; " +
		"schema change a [retype w, null w, add n=NULL, unique a_w(w)]; schema change a [index a_n(n)]; schema change a [drop index a_w]; " +
		"schema change a [add s=p, not null s, add ts volatile]; insert a [5 NULL NULL p"
	if !strings.HasPrefix(got, want) {
		t.Fatalf("changes:\n got %s\nwant %s…", got, want)
	}
}

// TestAlterEdits: what each ALTER TABLE clause changes, as the reader reads
// the statement.
func TestAlterEdits(t *testing.T) {
	for q, want := range map[string]string{
		"ALTER TABLE t ADD COLUMN x INT":                                    "add x=NULL",
		"alter table t add `x` int not null":                                "add x=0",
		"ALTER TABLE t ADD x varchar(10) NOT NULL DEFAULT 'a''b' AFTER v":   "add x=a'b",
		"ALTER TABLE t ADD x decimal(5,2) DEFAULT -1.5":                     "add x=-1.5",
		"ALTER TABLE t ADD x int DEFAULT NULL":                              "add x=NULL",
		"ALTER TABLE t ADD x datetime(6) DEFAULT CURRENT_TIMESTAMP(6)":      "add x volatile",
		"ALTER TABLE t ADD x varchar(40) DEFAULT (uuid())":                  "add x volatile",
		"ALTER TABLE t ADD COLUMN (x INT, y INT DEFAULT 3)":                 "add x=NULL; add y=3",
		"ALTER TABLE t ADD COLUMN IF NOT EXISTS x INT":                      "add x=NULL",
		"ALTER TABLE t ADD x INT GENERATED ALWAYS AS (id * 2)":              "add x=NULL",
		"ALTER TABLE t DROP COLUMN v":                                       "drop v",
		"ALTER TABLE t DROP v, DROP INDEX i":                                "drop v; drop index i",
		"ALTER TABLE t CHANGE COLUMN v w INT":                               "rename v to w",
		"ALTER TABLE t RENAME COLUMN v TO w":                                "rename v to w",
		"ALTER TABLE t ADD INDEX i (a, b(10) DESC)":                         "index i(a,b)",
		"ALTER TABLE t ADD CONSTRAINT u UNIQUE KEY (a)":                     "unique a(a)",
		"ALTER TABLE t ADD FULLTEXT ft (a)":                                 "index ft(a)",
		"ALTER TABLE t ADD PRIMARY KEY (a)":                                 "refused: a primary key was added: the stream keys rows by the primary key and cannot follow a change of it",
		"ALTER TABLE t ADD CONSTRAINT fk FOREIGN KEY (a) REFERENCES p (id)": "",
		"ALTER TABLE t ALTER COLUMN v SET DEFAULT 'x'":                      "",
		"ALTER TABLE t ENGINE=InnoDB":                                       "",
	} {
		toks := tokenize(q)
		var parts []string
		for _, c := range splitTop(toks[3:]) {
			for _, e := range alterEdits(c) {
				parts = append(parts, dbtest.DescribeEdit(e.SchemaEdit))
			}
		}
		if got := strings.Join(parts, "; "); got != want {
			t.Errorf("%s: %q, want %q", q, got, want)
		}
	}
}

func TestRotation(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
	for _, filePos := range []bool{false, true} {
		dbtest.ExecSQL(t, db, "DELETE FROM a")
		cfg := Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos}
		r := open(t, d.DSN, cfg, sluice.Position{})
		dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (1,'a')", "FLUSH BINARY LOGS", "INSERT INTO a VALUES (2,'b')", "FLUSH BINARY LOGS", "FLUSH BINARY LOGS", "INSERT INTO a VALUES (3,'c')")
		cs := readN(t, r, 3, true)
		for i, c := range cs {
			if c.Row[0].Text != fmt.Sprint(i+1) {
				t.Errorf("file=%v change %d: %s", filePos, i, describe(c))
			}
		}
		// Resume from before the rotations.
		r2 := open(t, d.DSN, cfg, cs[0].Pos)
		rest := readN(t, r2, 2, true)
		if rest[0].Pos != cs[1].Pos || rest[1].Pos != cs[2].Pos {
			t.Errorf("file=%v resume across rotation: %s %s, want %s %s", filePos, rest[0].Pos, rest[1].Pos, cs[1].Pos, cs[2].Pos)
		}
		t.Logf("file=%v positions: %s .. %s", filePos, cs[0].Pos, cs[2].Pos)
		r.Close()
		r2.Close()
	}
}

func TestReconnectAfterRestart(t *testing.T) {
	m := dbtest.Maria(t)
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
	const big = 20000
	for _, filePos := range []bool{false, true} {
		dbtest.ExecSQL(t, db, "DELETE FROM a")
		// A small buffer, so that the reader is in the middle of the big
		// transaction's events when the server goes away.
		r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos,
			HeartbeatPeriod: time.Second, BufferChanges: 256}, sluice.Position{})
		dbtest.ExecSQL(t, db, fmt.Sprintf("INSERT INTO a SELECT seq, 'x' FROM seq_1_to_%d", big))
		got := readN(t, r, 300, false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := m.Restart(ctx); err != nil {
			cancel()
			t.Fatal(err)
		}
		cancel()
		dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (0,'f')", "UPDATE a SET v='y' WHERE id=1")
		got = append(got, readN(t, r, big+2-300, true)...)
		for i := 0; i < big; i++ {
			if c := got[i]; c.Op != sluice.OpInsert || c.Row[0].Text != fmt.Sprint(i+1) {
				t.Fatalf("file=%v change %d after restart: %s", filePos, i, describe(c))
			}
		}
		if describe(got[big]) != "insert a key=[] row=[0 f]" || describe(got[big+1]) != "update a key=[1] row=[1 y]" {
			t.Errorf("file=%v after restart: %s; %s", filePos, describe(got[big]), describe(got[big+1]))
		}
		r.Close()
	}
}

func TestPreflight(t *testing.T) {
	m := dbtest.Maria(t)
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE nopk (v INT)", "CREATE TABLE a (id INT PRIMARY KEY)",
		"DROP USER IF EXISTS 'norepl'@'%'", "CREATE USER 'norepl'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT ON "+dbn+".* TO 'norepl'@'%'")
	t.Cleanup(func() { db.Exec("DROP USER IF EXISTS 'norepl'@'%'") })
	ctx := context.Background()
	try := func(dsn string, cfg Config) error {
		r, err := Open(ctx, dsn, cfg, sluice.Position{})
		if err == nil {
			r.Close()
		}
		return err
	}
	restricted := fmt.Sprintf("mysql://norepl:pw@%s/%s", m.Addr(), dbn)
	cases := []struct {
		name string
		dsn  string
		cfg  Config
		want []string
	}{
		{"privileges", restricted, Config{Tables: []sluice.TableName{{Name: "a"}}}, []string{"REPLICATION SLAVE", "REPLICATION CLIENT", "GRANT"}},
		{"no pk", d.DSN, Config{Tables: []sluice.TableName{{Name: "nopk"}}}, []string{dbn + ".nopk", "no primary key"}},
		{"missing", d.DSN, Config{Tables: []sluice.TableName{{Name: "nope"}}}, []string{dbn + ".nope", "does not exist"}},
		{"server id", d.DSN, Config{Tables: []sluice.TableName{{Name: "a"}}, ServerID: 1}, []string{"server_id 1", "the source itself"}},
	}
	for _, c := range cases {
		err := try(c.dsn, c.cfg)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
		t.Logf("%s: %v", c.name, err)
	}
	// With only REPLICATION CLIENT the privilege check still names SLAVE.
	dbtest.ExecSQL(t, db, "GRANT REPLICATION CLIENT ON *.* TO 'norepl'@'%'")
	if err := try(restricted, Config{Tables: []sluice.TableName{{Name: "a"}}}); err == nil || !strings.Contains(err.Error(), "REPLICATION SLAVE") || strings.Contains(err.Error(), "REPLICATION CLIENT privilege") {
		t.Errorf("REPLICATION CLIENT only: %v", err)
	}
	dbtest.ExecSQL(t, db, "GRANT REPLICATION SLAVE ON *.* TO 'norepl'@'%'")
	if err := try(restricted, Config{Tables: []sluice.TableName{{Name: "a"}}}); err != nil {
		t.Errorf("with both privileges: %v", err)
	}
}

// Settings the harness server cannot be started without are tested on the
// message logic.
func TestCheckVars(t *testing.T) {
	good := map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}
	if err := checkVars(good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ k, v, want string }{
		{"log_bin", "OFF", "log_bin=OFF"},
		{"binlog_format", "MIXED", "binlog_format is MIXED, need ROW"},
		{"binlog_row_image", "MINIMAL", "binlog_row_image is MINIMAL, need FULL"},
		{"binlog_row_metadata", "MINIMAL", "binlog_row_metadata is MINIMAL, need FULL"},
		{"binlog_row_metadata", "", "no binlog_row_metadata setting"},
		{"binlog_row_value_options", "PARTIAL_JSON", "PARTIAL_JSON"},
	} {
		v := map[string]string{}
		for k, x := range good {
			v[k] = x
		}
		if c.v == "" {
			delete(v, c.k)
		} else {
			v[c.k] = c.v
		}
		err := checkVars(v)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: %v", c.k, c.v, err)
		}
	}
	if err := checkGrants([]string{"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `u`@`%`"}, "u"); err != nil {
		t.Error(err)
	}
	if err := checkGrants([]string{"GRANT ALL PRIVILEGES ON `db`.* TO `u`@`%`"}, "u"); err == nil {
		t.Error("database-level ALL accepted")
	}
}

func TestDDLCheck(t *testing.T) {
	repl := func(s, tb string) bool { return s == "d" && tb == "t" }
	for q, want := range map[string]string{
		"ALTER TABLE t ADD COLUMN x INT":               "",
		"alter table `d`.`t` add x int, add index (x)": "",
		"ALTER TABLE t MODIFY v BIGINT":                "",
		"ALTER TABLE t CHANGE v v BIGINT":              "",
		"ALTER TABLE other DROP COLUMN v":              "",
		"ALTER TABLE t DROP INDEX i":                   "",
		"ALTER TABLE t DROP COLUMN v":                  "", // followed (follow.go)
		"ALTER TABLE t ADD y INT, DROP `v`":            "",
		"ALTER TABLE t CHANGE COLUMN v w INT":          "", // refused by the schema change
		"ALTER TABLE t RENAME COLUMN v TO w":           "",
		"ALTER TABLE t RENAME TO t2":                   "d.t was renamed",
		"DROP TABLE IF EXISTS x, t":                    "d.t was dropped",
		"DROP TABLE `d`.`t` /* generated by server */": "d.t was dropped",
		"TRUNCATE t":                          "", // followed: an OpTruncate change
		"RENAME TABLE t TO t_old, t_new TO t": "d.t was renamed",
		"ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (v)": "primary key was dropped",
		// Rows changed without row events: partition and tablespace
		// operations, and a table dropped by CREATE OR REPLACE.
		"ALTER TABLE t DROP PARTITION p0":                                    "partitions were dropped",
		"ALTER TABLE t TRUNCATE PARTITION p0, p1":                            "partitions were truncated",
		"ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE x":                   "exchanged",
		"ALTER TABLE t CONVERT PARTITION p0 TO TABLE x":                      "moved",
		"ALTER TABLE t CONVERT TABLE x TO PARTITION p1 VALUES LESS THAN (9)": "moved",
		"ALTER TABLE t IMPORT TABLESPACE":                                    "replaced",
		"ALTER TABLE t DISCARD TABLESPACE":                                   "discarded",
		"ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4":                     "",
		"ALTER TABLE t ADD PARTITION (PARTITION p9 VALUES LESS THAN (99))":   "",
		"ALTER TABLE t REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (10))": "",
		"ALTER TABLE other DROP PARTITION p0":               "",
		"CREATE OR REPLACE TABLE t (id INT PRIMARY KEY)":    "dropped and created again",
		"CREATE OR REPLACE TABLE d.t2 (id INT PRIMARY KEY)": "",
		"CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY)": "",
	} {
		err := ddlCheck(q, "d", repl)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", q, err, want)
		}
	}
}

func TestPositionToken(t *testing.T) {
	for _, s := range []string{"mariadb:0-1-42", "mariadb:0-1-42,1-2-3|0-1-43|2", "file:mysql-bin.000003:1234|0-1-9|1",
		"mysql:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57|3e11fa47-71ca-11e1-9e33-c80aa9429562:58|4", "file:mysql-bin.000001:4",
		"mariadb:0-1-42|0-1-43|@1789:0", "file:mysql-bin.000003:1234||@2000:17",
		"mysql:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57|3e11fa47-71ca-11e1-9e33-c80aa9429562:58|@9000+3:2"} {
		p, err := parseToken(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if p.token() != s {
			t.Errorf("%s: round trip %s", s, p.token())
		}
	}
	for _, s := range []string{"", "x:1", "file:nope", "mariadb:0-1-2|x", "mariadb:0-1-2|t|-1",
		"mariadb:0-1-2|t|@", "mariadb:0-1-2|t|@12", "mariadb:0-1-2|t|@x:1", "mariadb:0-1-2|t|@12:-1", "mariadb:0-1-2|t|@12+0:1", "mariadb:0-1-2|t|@12+:1"} {
		if _, err := parseToken(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

func TestFormatFloat(t *testing.T) {
	// MySQL's DOUBLE layout (bare exponent), which is exact.
	for _, c := range []struct {
		f    float64
		bits int
		want string
	}{{1e20, 64, "1e20"}, {1.5e-7, 64, "1.5e-7"}, {0.1, 64, "0.1"}, {123456789012345678, 64, "1.2345678901234568e17"},
		{1e15, 64, "1e15"}, {100, 64, "100"}, {-0.001, 64, "-0.001"}, {123456789012345, 64, "123456789012345"}} {
		if got := formatFloat(c.f, c.bits, false); got != c.want {
			t.Errorf("%v/%d: %s, want %s", c.f, c.bits, got, c.want)
		}
	}
	// FLOAT in both flavors: the shortest text of the identical float32.
	for _, c := range []struct {
		f    float32
		want string
	}{{1234567, "1.234567e+06"}, {16777216, "1.6777216e+07"}, {16777217, "1.6777216e+07"}, {0.1234567, "0.1234567"},
		{3.4028235e38, "3.4028235e+38"}, {1.17549435e-38, "1.1754944e-38"}, {1e-45, "1e-45"}, {0.1, "0.1"},
		{1e15, "1e+15"}, {123456, "123456"}, {3.14159, "3.14159"}, {float32(math.Copysign(0, -1)), "-0"}} {
		for _, maria := range []bool{true, false} {
			if got := formatFloat(float64(c.f), 32, maria); got != c.want {
				t.Errorf("FLOAT %v (mariadb=%v): %s, want %s", c.f, maria, got, c.want)
			}
		}
	}
	// Both flavors and widths read back to the identical value.
	rnd := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		d := math.Float64frombits(rnd.Uint64())
		f := math.Float32frombits(rnd.Uint32())
		if math.IsNaN(d) || math.IsInf(d, 0) || math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			continue
		}
		for _, maria := range []bool{true, false} {
			if s := formatFloat(d, 64, maria); mustParse(t, s, 64) != d {
				t.Fatalf("DOUBLE %v (mariadb=%v) as %s reads back as %v", d, maria, s, mustParse(t, s, 64))
			}
			if s := formatFloat(float64(f), 32, maria); float32(mustParse(t, s, 32)) != f {
				t.Fatalf("FLOAT %v (mariadb=%v) as %s reads back as %v", f, maria, s, float32(mustParse(t, s, 32)))
			}
		}
	}
}

func mustParse(t testing.TB, s string, bits int) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, bits)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return f
}

// TestThroughput measures the reader's own ceiling: read and decode a
// 100k-change backlog, nothing applied.
func TestThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT, d DECIMAL(10,2), ts DATETIME(6))")
	cfg := Config{Tables: []sluice.TableName{tn(dbn, "a")}}
	r := open(t, d.DSN, cfg, sluice.Position{})
	const total = 100000
	for i := 0; i < total; i += 1000 {
		var b strings.Builder
		b.WriteString("INSERT INTO a VALUES ")
		for j := i; j < i+1000; j++ {
			if j > i {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,'value number %d',%d,%d.25,'2024-01-01 00:00:00.%06d')", j, j, j*7, j, j%1000000)
		}
		dbtest.ExecSQL(t, db, b.String())
	}
	// Read the backlog from the start with a fresh reader.
	first := readN(t, r, 1, false)
	r.Close()
	_ = first
	r2 := open(t, d.DSN, cfg, sluice.Position{Kind: Kind, Token: strings.SplitN(first[0].Pos.Token, "|", 2)[0]})
	start := time.Now()
	n := 0
	for n < total {
		cs, err := r2.Read(context.Background(), 4096)
		if err != nil {
			t.Fatal(err)
		}
		n += len(cs)
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("only %d changes in 2 minutes", n)
		}
	}
	el := time.Since(start)
	t.Logf("read and decoded %d changes in %s: %.0f changes/s", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
}

// An idle source keeps the connection through heartbeats: no reconnect
// while nothing happens for several read timeouts.
func TestHeartbeatKeepsIdleConnection(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY)")
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}, HeartbeatPeriod: 500 * time.Millisecond}, sluice.Position{})
	end := time.Now().Add(4 * time.Second) // 8 heartbeat periods, > 2 read timeouts
	for time.Now().Before(end) {
		cs, err := r.Read(context.Background(), 10)
		if err != nil || len(cs) > 0 {
			t.Fatalf("idle read: %v %v", cs, err)
		}
	}
	if n := r.reconnects.Load(); n != 0 {
		t.Errorf("%d reconnects while idle", n)
	}
	dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (1)")
	readN(t, r, 1, true)
	if err := r.Ack(context.Background(), sluice.Position{Kind: Kind, Token: "x"}); err != nil || r.Acked().Token != "x" {
		t.Errorf("Ack: %v %v", err, r.Acked())
	}
}

// A position the server no longer (or never) had fails Open with a hint.
func TestUnknownPositionRefused(t *testing.T) {
	d := utcDatabase(t)
	db := d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY)")
	for _, tok := range []string{"mariadb:0-1-999999999", "file:mysql-bin.999999:4"} {
		r, err := Open(context.Background(), d.DSN, Config{Tables: []sluice.TableName{{Name: "a"}}}, sluice.Position{Kind: Kind, Token: tok})
		if err == nil {
			r.Close()
			t.Errorf("%s: no error", tok)
			continue
		}
		if !strings.Contains(err.Error(), "start reading the binary log") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v", tok, err)
		}
		t.Logf("%s: %v", tok, firstLine(err))
	}
}

// A consumer slower than the heartbeat timeout (backpressure) does not
// make the reader think the source is gone.
func TestBackpressureNoReconnect(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}, HeartbeatPeriod: 300 * time.Millisecond, BufferChanges: 256}, sluice.Position{})
	dbtest.ExecSQL(t, db, "INSERT INTO a SELECT seq, 'x' FROM seq_1_to_50000")
	readN(t, r, 100, false)
	time.Sleep(2 * time.Second) // the consumer stalls for > 6 heartbeat periods
	cs := readN(t, r, 50000-100, true)
	if cs[len(cs)-1].Row[0].Text != "50000" {
		t.Errorf("last change %s", describe(cs[len(cs)-1]))
	}
	if n := r.reconnects.Load(); n != 0 {
		t.Errorf("%d reconnects under backpressure", n)
	}
}

// TestReadAheadBoundedByBytes: with 40 rows of 256 KiB waiting and a 2 MiB
// read-ahead budget, the reader decodes at most the budget (plus one
// batch) while nothing is read, and every row still arrives when they are.
func TestReadAheadBoundedByBytes(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE big (id INT PRIMARY KEY, v LONGTEXT)")
	const rows, size, budget = 40, 256 << 10, 2 << 20
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "big")}, BufferBytes: budget}, sluice.Position{})
	for i := 1; i <= rows; i++ {
		// One transaction per row: each is its own batch.
		dbtest.ExecSQL(t, db, fmt.Sprintf("INSERT INTO big VALUES (%d, REPEAT('x', %d))", i, size))
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.budget.Used() < budget-2*size {
		if time.Now().After(deadline) {
			t.Fatalf("the reader decoded only %d bytes ahead", r.budget.Used())
		}
		time.Sleep(20 * time.Millisecond) // polling the reader's state
	}
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		if used := r.budget.Used(); used > budget+2*size {
			t.Fatalf("the reader decoded %d bytes ahead, budget %d", used, budget)
		}
		time.Sleep(20 * time.Millisecond) // sampling interval
	}
	cs := readN(t, r, rows, true)
	for i, c := range cs {
		if len(c.Row[1].Text) != size {
			t.Fatalf("row %d: %d bytes, want %d", i, len(c.Row[1].Text), size)
		}
	}
}
