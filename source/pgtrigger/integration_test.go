package pgtrigger

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// fixture is a fresh database on the shared server and a session on it
// playing the source application.
type fixture struct {
	*dbtest.Database
}

func newFixture(t *testing.T, ddl ...string) *fixture {
	t.Helper()
	return &fixture{dbtest.PGEngine.Database(t, ddl...)}
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
	return dbtest.CollectChanges(t, r, n, max, 15*time.Second)
}

func count(t *testing.T, conn *pgx.Conn, sql string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestInstallIdempotent(t *testing.T) {
	f := newFixture(t,
		`CREATE TABLE a (id int PRIMARY KEY, v text)`,
		`CREATE TABLE "Odd ""name""" (k2 text, k1 int, v text, PRIMARY KEY (k1, k2))`)
	ctx := context.Background()
	tbls := []sluice.TableName{{Name: "a"}, {Schema: "public", Name: `Odd "name"`}}
	for range 2 {
		if err := Install(ctx, f.PG, "", tbls); err != nil {
			t.Fatalf("Install: %v", err)
		}
	}
	if n := f.QueryInt(t, `SELECT count(*) FROM pg_trigger WHERE tgname = 'sluice_capture'`); n != 2 {
		t.Fatalf("%d capture triggers, want 2", n)
	}
	r := f.open(t, Config{Tables: tbls}, sluice.Position{})
	odd := r.Tables()[1]
	if got := strings.Join(odd.KeyNames(), ","); got != "k1,k2" {
		t.Errorf("key of %s = %s, want k1,k2 (pg_index order)", odd.Name, got)
	}
	want := []sluice.Column{{Name: "k2", Type: "text"}, {Name: "k1", Type: "integer"}, {Name: "v", Type: "text", Nullable: true}}
	if fmt.Sprint(odd.Columns) != fmt.Sprint(want) {
		t.Errorf("columns of %s = %v, want %v", odd.Name, odd.Columns, want)
	}
	f.Exec(t, `INSERT INTO a VALUES (1, 'x')`, `INSERT INTO "Odd ""name""" VALUES ('b', 2, 'y')`)
	dbtest.ExpectChanges(t, collect(t, r, 2, 10), `insert a [1 x]`, `insert Odd "name" [b 2 y]`)

	// A changed primary key makes Open ask for a reinstall, which fixes it.
	f.Exec(t, `ALTER TABLE a DROP CONSTRAINT a_pkey`, `ALTER TABLE a ADD PRIMARY KEY (v)`)
	if _, err := Open(ctx, f.URL, Config{Tables: tbls}, sluice.Position{}); err == nil || !strings.Contains(err.Error(), "sluice source install") {
		t.Fatalf("Open after a primary key change: %v, want an error asking to install", err)
	}
	if err := Install(ctx, f.PG, "", tbls); err != nil {
		t.Fatal(err)
	}
	f.open(t, Config{Tables: tbls}, sluice.Position{})
}

// TestValuesExact checks every value's text against col::text under the
// reader's session settings, with the rows written by a session whose
// settings differ in every way that changes value text.
func TestValuesExact(t *testing.T) {
	cols := []struct{ name, typ string }{
		{"i2", "smallint"}, {"i4", "integer"}, {"i8", "bigint"},
		{"num", "numeric"}, {"num2", "numeric(12,2)"},
		{"f4", "real"}, {"f8", "double precision"},
		{"t", "text"}, {"vc", "varchar(10)"}, {"ch", "char(5)"}, {"b", "boolean"}, {"by", "bytea"},
		{"d", "date"}, {"ts", "timestamp"}, {"tstz", "timestamptz"}, {"tm", "time"}, {"iv", "interval"},
		{"u", "uuid"}, {"j", "json"}, {"jb", "jsonb"}, {"ta", "text[]"}, {"ia", "integer[]"},
	}
	var ddl strings.Builder
	ddl.WriteString("CREATE TABLE v (id int PRIMARY KEY, jn json NOT NULL")
	for _, c := range cols {
		fmt.Fprintf(&ddl, ", %s %s", c.name, c.typ)
	}
	ddl.WriteString(")")
	f := newFixture(t, ddl.String())
	r := f.open(t, Config{Tables: dbtest.Tables("v"), Install: true}, sluice.Position{})

	writer := f.ConnectPG(t, map[string]string{
		"TimeZone": "Asia/Kathmandu", "DateStyle": "SQL, DMY", "IntervalStyle": "sql_standard",
		"extra_float_digits": "-3", "bytea_output": "escape",
	})
	rows := []string{
		`(2, '{}', 32767, 2147483647, 9223372036854775807, 1.50, 12.30, 1.1, 0.1, 'plain', 'abc', 'ab', true, '\x00ff10',
			'2024-02-29', '2024-01-01 12:34:56.789012', '2024-06-01 12:00:00.5+00', '13:14:15.123456', '1 year 2 mons -3 days 04:05:06.789',
			'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', ' {"b" : 1,  "a":[1, 2.50]} ', '{"b": 1, "a": [1, 2.50]}',
			'{a,NULL,"b c","\"q\"","",NULL,"NULL","x\\y"}', '{1,NULL,3}')`,
		`(3, ' [1, "\u00e9"] ', -32768, -2147483648, -9223372036854775808, 'NaN', -0.01, 'NaN', 'NaN', E'quote''s \\ "dq"\nnew line é 😀', '', '     ', false, '',
			'infinity', '-infinity', 'infinity', '24:00:00', '-1 day +02:03:04.5',
			'00000000-0000-0000-0000-000000000000', '"\u00e9\/\"x"', '"\u00e9"', '{}', '{{1,2},{3,NULL}}')`,
		`(4, '1.0E+2', 0, 0, 0, 123456789012345678901234567890.123456789, 0, 'Infinity', '-Infinity', 'x', 'é', 'é', NULL, NULL,
			'0044-03-15 BC', '0044-03-15 12:00:00 BC', '1900-01-01 00:00:00+00:19:32', '00:00:00', '@ 1 year ago',
			NULL, '  1.0E+2  ', '[1.0, {"z": null}]', '{""}', '{}')`,
		`(5, '"x"', 1, 1, 1, -0.000001, 1, '-0', '-0', 't', 't', 't', true, 'abc',
			'1970-01-01', '1999-12-31 23:59:59.999999', '2024-03-31 01:30:00+01', '00:00:00.000001', '0',
			NULL, 'true', 'null', '{"{}",",",NULL}', '{-1}')`,
		`(6, '0', 1, 1, 1, 1e-30, 1, 3.4028235e38, 1e-310, 't', 't', 't', true, 'abc',
			'2000-01-01', '2000-01-01', '2000-01-01 00:00:00+14', '23:59:59.999999', '1 mon 2 days 00:00:00.000001',
			NULL, '123', '1e400', '{}', '{}')`,
	}
	all := append([]string{"id", "jn"}, func() []string {
		var n []string
		for _, c := range cols {
			n = append(n, c.name)
		}
		return n
	}()...)
	// All NULL but the key, and JSON null in a NOT NULL json column.
	dbtest.ExecPG(t, writer, `INSERT INTO v (id, jn) VALUES (1, 'null')`)
	for _, row := range rows {
		dbtest.ExecPG(t, writer, `INSERT INTO v (`+strings.Join(all, ", ")+`) VALUES `+row)
	}
	// An update and a delete carry the same text.
	dbtest.ExecPG(t, writer, `UPDATE v SET num2 = 7.25, iv = '-1 days -02:03:04', j = ' { } ' WHERE id = 6`, `DELETE FROM v WHERE id = 5`)
	got := collect(t, r, len(rows)+3, 100)

	// The text the target would get from the source itself.
	check := f.ConnectPG(t, SessionSettings())
	sel := make([]string, len(all))
	for i, c := range all {
		sel[i] = c + "::text"
	}
	want := map[string][]*string{}
	res, err := check.Query(context.Background(), `SELECT `+strings.Join(sel, ", ")+` FROM v ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for res.Next() {
		vals := make([]*string, len(all))
		ptrs := make([]any, len(all))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := res.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		want[*vals[0]] = vals
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
		if c.Op == sluice.OpInsert && id == "6" {
			continue // updated since; the update below is checked
		}
		w, ok := want[id]
		if c.Op == sluice.OpInsert && id == "5" {
			continue // deleted since
		}
		if !ok {
			t.Fatalf("change for id %s not in the table", id)
		}
		checked++
		for i, v := range c.Row {
			col := tbl.Columns[i]
			if testing.Verbose() {
				t.Logf("id %s %s %s: %v", id, c.Op, col.Name, v)
			}
			switch {
			case w[i] == nil && !v.Null:
				t.Errorf("id %s column %s (%s) = %q, want NULL", id, col.Name, col.Type, v.Text)
			case w[i] != nil && (v.Null || v.Text != *w[i]):
				t.Errorf("id %s column %s (%s) = %v, want %q", id, col.Name, col.Type, v, *w[i])
			}
		}
	}
	if checked != len(rows) {
		t.Fatalf("checked %d row images, want %d", checked, len(rows))
	}
}

func TestInsertUpdateDelete(t *testing.T) {
	f := newFixture(t,
		`CREATE TABLE t (a int, b text, v text, PRIMARY KEY (b, a))`,
		`CREATE TABLE u (id int PRIMARY KEY, v text)`)
	r := f.open(t, Config{Tables: dbtest.Tables("t", "u"), Install: true}, sluice.Position{})
	f.Exec(t,
		`INSERT INTO t VALUES (1, 'x', 'one'), (2, 'y', 'two')`,
		`INSERT INTO u VALUES (1, 'u1')`,
		`UPDATE t SET v = 'uno' WHERE a = 1`,
		`UPDATE t SET a = 10, v = 'moved' WHERE a = 2`,
		`DELETE FROM t WHERE a = 1`,
		`DELETE FROM u`,
	)
	dbtest.ExpectChanges(t, collect(t, r, 7, 3),
		`insert t [1 x one]`, `insert t [2 y two]`, `insert u [1 u1]`,
		`update t(b=x, a=1) [1 x uno]`,
		`update t(b=y, a=2) [10 y moved]`,
		`delete t(b=x, a=1)`,
		`delete u(id=1)`)
}

func TestChangeTime(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
	before := time.Now()
	f.Exec(t, `INSERT INTO t VALUES (1)`)
	c := collect(t, r, 1, 10)[0]
	if d := c.Time.Sub(before); d < -time.Second || d > 10*time.Second {
		t.Fatalf("change time %v, written at about %v", c.Time, before)
	}
}

// TestReconnect: after the reader's session is killed, a Read fails and
// the next one reconnects and goes on where the last change left off.
func TestReconnect(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
	f.Exec(t, `INSERT INTO t SELECT generate_series(1, 5)`)
	ctx := context.Background()
	first, err := r.Read(ctx, 2)
	if err != nil || len(first) != 2 {
		t.Fatalf("Read = %s, %v", dbtest.DescribeChanges(first), err)
	}
	pid := r.conn.PgConn().PID()
	f.Exec(t, fmt.Sprintf(`SELECT pg_terminate_backend(%d)`, pid))
	deadline := time.Now().Add(15 * time.Second)
	for f.QueryInt(t, fmt.Sprintf(`SELECT count(*) FROM pg_stat_activity WHERE pid = %d`, pid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("reader session %d still there after pg_terminate_backend", pid)
		}
	}
	if c, err := r.Read(ctx, 1); err == nil {
		t.Fatalf("Read on a terminated session = %s, want an error", dbtest.DescribeChanges(c))
	}
	dbtest.ExpectChanges(t, collect(t, r, 3, 10), `insert t [3]`, `insert t [4]`, `insert t [5]`)
}

// TestLongTransaction: a transaction that wrote first (lower changelog id)
// and commits last is read, after the others.
func TestLongTransaction(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
	ctx := context.Background()
	long, err := f.ConnectPG(t, nil).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbtest.ExecPG(t, long, `INSERT INTO t VALUES (1, 'long')`)
	f.Exec(t, `INSERT INTO t VALUES (2, 'short')`)
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), `insert t [2 short]`)
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), `insert t [1 long]`)
}

// TestOlderXidModifiesLater: a transaction with an older xid modifies a row
// after a newer-xid transaction committed its change to that row; the
// older one's change must come last, whether or not the reader looked in
// between.
func TestOlderXidModifiesLater(t *testing.T) {
	for _, readBetween := range []bool{false, true} {
		t.Run(fmt.Sprintf("readBetween=%v", readBetween), func(t *testing.T) {
			f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE other (id int)`)
			r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
			f.Exec(t, `INSERT INTO t VALUES (1, 'initial')`)
			dbtest.ExpectChanges(t, collect(t, r, 1, 10), `insert t [1 initial]`)
			ctx := context.Background()
			older, err := f.ConnectPG(t, nil).Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var oldXid, newXid uint64
			if err := older.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&oldXid); err != nil {
				t.Fatal(err)
			}
			newer, err := f.ConnectPG(t, nil).Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			dbtest.ExecPG(t, newer, `UPDATE t SET v = 'newer' WHERE id = 1`)
			if err := newer.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&newXid); err != nil {
				t.Fatal(err)
			}
			if oldXid >= newXid {
				t.Fatalf("xids %d, %d: want the first older", oldXid, newXid)
			}
			if err := newer.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var got []sluice.Change
			if readBetween {
				got = collect(t, r, 1, 10)
			}
			dbtest.ExecPG(t, older, `UPDATE t SET v = 'older' WHERE id = 1`)
			if err := older.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			got = append(got, collect(t, r, 2-len(got), 10)...)
			dbtest.ExpectChanges(t, got, `update t(id=1) [1 newer]`, `update t(id=1) [1 older]`)
		})
	}
}

// TestResume opens a reader at every position the first one emitted, over
// several windows and pages, and checks it reads exactly the rest.
func TestResume(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
	f.Exec(t, `INSERT INTO t SELECT g, 'a' FROM generate_series(1, 7) g`)
	all := collect(t, r, 7, 3) // one window, three pages
	f.Exec(t, `INSERT INTO t VALUES (8, 'b')`, `UPDATE t SET v = 'c' WHERE id < 3`)
	all = append(all, collect(t, r, 3, 2)...)
	f.Exec(t, `DELETE FROM t WHERE id > 6`)
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

func TestPositionAt(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	ctx := context.Background()
	if err := Install(ctx, f.PG, "", dbtest.Tables("t")); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `INSERT INTO t VALUES (1)`)
	copier := f.ConnectPG(t, nil)
	tx, err := copier.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	pos, err := PositionAt(ctx, copier)
	if err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `INSERT INTO t VALUES (2)`)
	if n := count(t, copier, `SELECT count(*) FROM t`); n != 1 {
		t.Fatalf("copy sees %d rows, want 1", n)
	}
	tx.Rollback(ctx)
	r := f.open(t, Config{Tables: dbtest.Tables("t")}, pos)
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), `insert t [2]`)
}

func TestPruneAfterAck(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	ctx := context.Background()
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
	r.pruneEvery = 0
	f.Exec(t, `INSERT INTO t SELECT generate_series(1, 5)`)
	got := collect(t, r, 5, 2)
	// An open transaction's row is not read and must survive every prune.
	open, err := f.ConnectPG(t, nil).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbtest.ExecPG(t, open, `INSERT INTO t VALUES (100)`)
	f.Exec(t, `INSERT INTO t VALUES (6)`)
	got = append(got, collect(t, r, 1, 10)...)

	logRows := func() int { return f.QueryInt(t, `SELECT count(*) FROM sluice.changelog`) }
	if err := r.Ack(ctx, got[2].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 3 {
		t.Fatalf("%d changelog rows left after acking change 3 of 6, want 3", n)
	}
	if err := r.Ack(ctx, got[5].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 0 {
		t.Fatalf("%d changelog rows left after acking all, want 0", n)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 1 {
		t.Fatalf("%d changelog rows after the open transaction committed, want 1", n)
	}
	last := collect(t, r, 1, 10)
	dbtest.ExpectChanges(t, last, `insert t [100]`)

	// Rate limit: an Ack right after a prune waits for the next one.
	r.pruneEvery = time.Hour
	if err := r.Ack(ctx, last[0].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 1 {
		t.Fatalf("%d changelog rows after a rate-limited Ack, want 1", n)
	}
	r.pruneEvery = 0
	if err := r.Ack(ctx, last[0].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 0 {
		t.Fatalf("%d changelog rows after the last Ack, want 0", n)
	}
}

func TestOpenErrors(t *testing.T) {
	f := newFixture(t,
		`CREATE TABLE ok (id int PRIMARY KEY)`,
		`CREATE TABLE nopk (id int)`,
		`CREATE TABLE notrig (id int PRIMARY KEY)`)
	ctx := context.Background()
	if err := Install(ctx, f.PG, "", dbtest.Tables("ok")); err != nil {
		t.Fatal(err)
	}
	badPassword := func() string {
		u, _ := url.Parse(f.URL)
		u.User = url.UserPassword(u.User.Username(), "wrong")
		return u.String()
	}()
	closedPort := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		u, _ := url.Parse(f.URL)
		u.Host = addr
		return u.String() + "&connect_timeout=5"
	}()
	tests := []struct {
		name    string
		url     string
		cfg     Config
		want    []string
		install bool
	}{
		{"missing table", f.URL, Config{Tables: dbtest.Tables("nope")},
			[]string{"source table public.nope does not exist in database " + f.Name}, false},
		{"missing table with install", f.URL, Config{Tables: dbtest.Tables("nope"), Install: true},
			[]string{"source table public.nope does not exist in database " + f.Name}, false},
		{"no primary key", f.URL, Config{Tables: dbtest.Tables("nopk"), Install: true},
			[]string{"table public.nopk has no primary key; sluice needs one to apply changes idempotently: add one"}, false},
		{"trigger missing", f.URL, Config{Tables: dbtest.Tables("notrig")},
			[]string{"public.notrig", "run `sluice source install`"}, false},
		{"changelog missing", f.URL, Config{Tables: dbtest.Tables("ok"), Schema: "other"},
			[]string{"other.changelog", "run `sluice source install`"}, false},
		{"wrong password", badPassword, Config{Tables: dbtest.Tables("ok")},
			[]string{"password authentication failed", "check the password"}, false},
		{"unreachable", closedPort, Config{Tables: dbtest.Tables("ok")},
			[]string{"cannot reach PostgreSQL source at 127.0.0.1:", "check the host and port"}, false},
		{"foreign position", f.URL, Config{Tables: dbtest.Tables("ok")},
			[]string{"not a pgtrigger position"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from := sluice.Position{}
			if tt.name == "foreign position" {
				from = sluice.Position{Kind: "binlog", Token: "mysql-bin.000001:4"}
			}
			r, err := Open(ctx, tt.url, tt.cfg, from)
			if err == nil {
				r.Close()
				t.Fatal("Open succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "wrong") {
				t.Errorf("Open error %q shows the password", err)
			}
		})
	}
}

// TestSourceWritesSurviveChanges: schema changes on the source never make
// the capture trigger fail the application's writes.
func TestSourceWritesSurviveChanges(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY, a text, b text)`, `CREATE ROLE app_writer_pgtrigger_test`)
	t.Cleanup(func() {
		f.PG.Exec(context.Background(), `DROP OWNED BY app_writer_pgtrigger_test`)
		f.PG.Exec(context.Background(), `DROP ROLE app_writer_pgtrigger_test`)
	})
	if err := Install(context.Background(), f.PG, "", dbtest.Tables("t")); err != nil {
		t.Fatal(err)
	}
	f.Exec(t,
		`ALTER TABLE t ADD COLUMN c int`,
		`ALTER TABLE t DROP COLUMN a`,
		`ALTER TABLE t RENAME COLUMN b TO bb`,
		`ALTER TABLE t ALTER COLUMN c TYPE bigint`,
		`INSERT INTO t VALUES (1, 'x', 2)`,
		`UPDATE t SET c = 3`,
		`ALTER TABLE t RENAME COLUMN id TO ident`,
		`UPDATE t SET c = 4`,
		`DELETE FROM t`,
		// A role with rights on the table only, none on sluice's schema.
		`GRANT ALL ON t TO app_writer_pgtrigger_test`,
		`SET ROLE app_writer_pgtrigger_test`,
		`INSERT INTO t VALUES (2, 'y', 5)`,
		`UPDATE t SET c = 6`,
		`DELETE FROM t`,
		`RESET ROLE`,
	)
	if n := f.QueryInt(t, `SELECT count(*) FROM sluice.changelog`); n != 7 {
		t.Fatalf("%d changelog rows, want 7", n)
	}
}

func TestUninstall(t *testing.T) {
	f := newFixture(t, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`)
	ctx := context.Background()
	if err := Install(ctx, f.PG, "", dbtest.Tables("a", "b")); err != nil {
		t.Fatal(err)
	}
	triggers := func() int { return f.QueryInt(t, `SELECT count(*) FROM pg_trigger WHERE tgname = 'sluice_capture'`) }
	if err := Uninstall(ctx, f.PG, "", dbtest.Tables("a", "gone")); err != nil {
		t.Fatal(err)
	}
	if n := triggers(); n != 1 {
		t.Fatalf("%d capture triggers after uninstalling a, want 1", n)
	}
	if n := f.QueryInt(t, `SELECT count(*) FROM pg_namespace WHERE nspname = 'sluice'`); n != 1 {
		t.Fatal("schema sluice dropped while b is still captured")
	}
	f.Exec(t, `INSERT INTO a VALUES (1)`, `INSERT INTO b VALUES (1)`)
	if n := f.QueryInt(t, `SELECT count(*) FROM sluice.changelog`); n != 1 {
		t.Fatalf("%d changelog rows, want 1 (b only)", n)
	}
	for range 2 {
		if err := Uninstall(ctx, f.PG, "", dbtest.Tables("b")); err != nil {
			t.Fatal(err)
		}
	}
	if n := triggers(); n != 0 {
		t.Fatalf("%d capture triggers after uninstalling all, want 0", n)
	}
	if n := f.QueryInt(t, `SELECT count(*) FROM pg_namespace WHERE nspname = 'sluice'`); n != 0 {
		t.Fatal("schema sluice left after uninstalling every table")
	}
	f.Exec(t, `INSERT INTO a VALUES (2)`, `INSERT INTO b VALUES (2)`)
}

func TestReadIdle(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
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
// deletes, key changes) while the reader reads in small pages; replaying
// what it read must give exactly the source's final rows, and every
// change must be read once.
func TestConcurrentWritersConverge(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, w text)`)
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 20 * time.Millisecond}, sluice.Position{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const writers, txPerWriter, keys = 4, 60, 8
	errs := make(chan error, writers)
	for w := range writers {
		conn := f.ConnectPG(t, nil)
		go func() {
			errs <- func() error {
				for i := range txPerWriter {
					// Keys ascending within a transaction: no deadlocks.
					k1 := (w + i) % keys
					k2 := k1 + 1 + (i*7+w)%(keys-k1)
					stmts := []string{
						fmt.Sprintf(`INSERT INTO t VALUES (%d, 1, 'w%d') ON CONFLICT (id) DO UPDATE SET v = t.v + 1, w = 'w%d'`, k1, w, w),
						fmt.Sprintf(`SELECT pg_sleep(0.00%d)`, i%3),
					}
					switch i % 4 {
					case 1:
						stmts = append(stmts, fmt.Sprintf(`DELETE FROM t WHERE id = %d`, k2))
					case 2:
						// Move k2 to a key no one else uses, then back.
						stmts = append(stmts,
							fmt.Sprintf(`UPDATE t SET id = %d WHERE id = %d`, 1000+w, k2),
							fmt.Sprintf(`UPDATE t SET id = %d, v = v + 10 WHERE id = %d`, k2, 1000+w))
					default:
						stmts = append(stmts, fmt.Sprintf(`INSERT INTO t VALUES (%d, 1, 'w%d') ON CONFLICT (id) DO UPDATE SET v = t.v + 1, w = 'w%d'`, k2, w, w))
					}
					tx, err := conn.Begin(ctx)
					if err != nil {
						return err
					}
					for _, s := range stmts {
						if _, err := tx.Exec(ctx, s); err != nil {
							tx.Rollback(ctx)
							return fmt.Errorf("%s: %w", s, err)
						}
					}
					if err := tx.Commit(ctx); err != nil {
						return err
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
	read := 0
	done := 0
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
	written := f.QueryInt(t, `SELECT count(*) FROM sluice.changelog`)
	apply(collect(t, r, written-read, 7))

	want := map[string]string{}
	rows, err := f.ConnectPG(t, SessionSettings()).Query(ctx, `SELECT id::text, v::text, w FROM t`)
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

// TestInstallRetriesDeadlock: an application transaction holds a row of b
// and then wants a, which the install has locked while it waits for b.
// PostgreSQL fails the install (it waited first, so its deadlock check
// runs first); the install is tried again once the application's
// transaction has committed, and succeeds.
func TestInstallRetriesDeadlock(t *testing.T) {
	f := newFixture(t, `CREATE TABLE a (id int PRIMARY KEY, v int)`, `CREATE TABLE b (id int PRIMARY KEY, v int)`,
		`INSERT INTO a VALUES (1, 0)`, `INSERT INTO b VALUES (1, 0)`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := pgx.Connect(ctx, f.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `UPDATE b SET v = v + 1`); err != nil {
		t.Fatal(err)
	}
	inst, err := pgx.Connect(ctx, f.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	done := make(chan error, 1)
	go func() { done <- Install(ctx, inst, "", dbtest.Tables("a", "b")) }()
	// The install holds a and waits for b.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n := f.QueryInt(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'CREATE TRIGGER%ON "public"."b"%'`); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the install never waited for table b")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := tx.Exec(ctx, `UPDATE a SET v = v + 1`); err != nil {
		t.Fatalf("the application's transaction was the deadlock's victim: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Install: %v", err)
	}
	if n := f.QueryInt(t, `SELECT count(*) FROM pg_trigger WHERE tgname = 'sluice_capture'`); n != 2 {
		t.Fatalf("%d capture triggers, want 2", n)
	}
}

// TestGeneratedColumnsCarried: the capture trigger runs after the row is
// written, so its image holds the generated columns' computed values; the
// reader describes them with their expressions.
func TestGeneratedColumnsCarried(t *testing.T) {
	f := newFixture(t, `CREATE TABLE g (id int PRIMARY KEY, price numeric(10,2), qty int,
		total numeric(12,2) GENERATED ALWAYS AS (price * qty) STORED, doc jsonb, j_name text GENERATED ALWAYS AS (doc ->> 'name') STORED)`)
	r := f.open(t, Config{Tables: dbtest.Tables("g"), Install: true}, sluice.Position{})
	var gen []string
	for _, c := range r.Tables()[0].Columns {
		gen = append(gen, c.Generated)
	}
	if want := []string{"", "", "", "(price * (qty)::numeric)", "", "(doc ->> 'name'::text)"}; !slices.Equal(gen, want) {
		t.Errorf("generation expressions %q, want %q", gen, want)
	}
	f.Exec(t, `INSERT INTO g (id, price, qty, doc) VALUES (1, 1.5, 2, '{"name": "a"}')`, `UPDATE g SET qty = 3, id = 2 WHERE id = 1`, `DELETE FROM g`)
	dbtest.ExpectChanges(t, collect(t, r, 3, 5),
		`insert g [1 1.50 2 3.00 {"name": "a"} a]`, `update g(id=1) [2 1.50 3 4.50 {"name": "a"} a]`, `delete g(id=2)`)
}
