package pglogical

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// fixture is a fresh database on the shared server, a session on it playing
// the source application, and a slot and publication named after the
// database that are dropped when the test ends.
type fixture struct {
	*dbtest.Database
	cfg Config
}

func newFixture(t *testing.T, tbls []string, ddl ...string) *fixture {
	t.Helper()
	f := &fixture{Database: dbtest.PGEngine.Database(t, ddl...)}
	f.cfg = Config{Tables: dbtest.Tables(tbls...), Slot: f.Name, Publication: f.Name, StatusInterval: 200 * time.Millisecond, ProgressInterval: time.Second,
		// Every reader that opens behind a backlog catches up through
		// the SQL interface, however small the backlog.
		CatchUpMinWAL: 1, Logger: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() {
		// A slot left behind retains WAL on the shared server and blocks
		// DROP DATABASE.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := Uninstall(ctx, f.URL, f.cfg); err != nil {
			t.Errorf("Uninstall: %v", err)
		}
		// A catch-up's temporary slot goes with its session, which the
		// server ends a moment after the reader closed it.
		for ctx.Err() == nil {
			var n int
			if err := f.PG.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`).Scan(&n); err != nil || n == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
	})
	return f
}

// open opens a reader that is closed when the test ends (or earlier by
// the test).
func (f *fixture) open(t *testing.T, cfg Config, from sluice.Position) *Reader {
	t.Helper()
	return dbtest.OpenReader(t, func(ctx context.Context) (*Reader, error) { return Open(ctx, f.URL, cfg, from) })
}

// collect reads until it holds n changes, failing after a deadline, then
// checks that nothing more comes.
func collect(t *testing.T, r *Reader, n, max int) []sluice.Change {
	t.Helper()
	got := collectN(t, r, n, max)
	c, err := r.Read(context.Background(), max)
	c = slices.DeleteFunc(c, func(c sluice.Change) bool { return c.Op == sluice.OpProgress })
	if err != nil || len(c) != 0 {
		t.Fatalf("Read after the last change = %s, %v; want nothing", dbtest.DescribeChanges(c), err)
	}
	return got
}

func collectN(t *testing.T, r *Reader, n, max int) []sluice.Change {
	t.Helper()
	var got []sluice.Change
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("read %d changes before the deadline, want %d: %s", len(got), n, dbtest.DescribeChanges(got))
		}
		m := min(max, n-len(got))
		c, err := r.Read(context.Background(), m)
		if err != nil {
			t.Fatalf("Read after %s: %v", dbtest.DescribeChanges(got), err)
		}
		if len(c) > m {
			t.Fatalf("Read(%d) returned %d changes", max, len(c))
		}
		for _, ch := range c {
			// Progress markers come when the stream is quiet; the
			// tests that look for them do so themselves.
			if ch.Op != sluice.OpProgress {
				got = append(got, ch)
			}
		}
	}
	if len(got) > n {
		t.Fatalf("read %d changes, want %d: %s", len(got), n, dbtest.DescribeChanges(got))
	}
	return got
}

// readErr reads until Read fails, collecting the changes before.
func readErr(t *testing.T, r *Reader) ([]sluice.Change, error) {
	t.Helper()
	return dbtest.ReadUntilErr(t, r, 20*time.Second)
}

func lsnOf(t *testing.T, p sluice.Position) position {
	t.Helper()
	pos, ok, err := parsePosition(p)
	if err != nil || !ok {
		t.Fatalf("position %v: %v", p, err)
	}
	return pos
}

func (f *fixture) confirmedFlush(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := f.PG.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, f.cfg.Slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// waitFlush polls until the slot's confirmed_flush_lsn satisfies ok.
func (f *fixture) waitFlush(t *testing.T, what string, ok func(pglogrepl.LSN) bool) pglogrepl.LSN {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lsn := f.confirmedFlush(t)
		if ok(lsn) {
			return lsn
		}
		if time.Now().After(deadline) {
			t.Fatalf("confirmed_flush_lsn %s: want %s", lsn, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSetupIdempotentAndUninstall(t *testing.T) {
	f := newFixture(t, []string{"a"},
		`CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`)
	ctx := context.Background()
	count := func(sql string, args ...any) int {
		var n int
		if err := f.PG.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 2 {
		if err := Setup(ctx, f.URL, f.cfg); err != nil {
			t.Fatalf("Setup: %v", err)
		}
	}
	if n := count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND plugin = 'pgoutput'`, f.cfg.Slot); n != 1 {
		t.Fatalf("%d slots, want 1", n)
	}
	if n := count(`SELECT count(*) FROM pg_publication_tables WHERE pubname = $1`, f.cfg.Publication); n != 1 {
		t.Fatalf("publication has %d tables, want 1", n)
	}
	// A table added to the configuration is added to the publication.
	cfg := f.cfg
	cfg.Tables = dbtest.Tables("a", "b")
	if err := Setup(ctx, f.URL, cfg); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM pg_publication_tables WHERE pubname = $1`, f.cfg.Publication); n != 2 {
		t.Fatalf("publication has %d tables, want 2", n)
	}
	// The default names come from the stream.
	if got := DefaultName("Orders-EU 1"); got != "sluice_orders_eu_1" {
		t.Errorf("DefaultName = %q", got)
	}
	if err := Uninstall(ctx, f.URL, f.cfg); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, f.cfg.Slot); n != 0 {
		t.Fatalf("slot still there after Uninstall")
	}
	if n := count(`SELECT count(*) FROM pg_publication WHERE pubname = $1`, f.cfg.Publication); n != 0 {
		t.Fatalf("publication still there after Uninstall")
	}
	if err := Uninstall(ctx, f.URL, f.cfg); err != nil {
		t.Fatalf("second Uninstall: %v", err)
	}
}

func TestPreflightErrors(t *testing.T) {
	f := newFixture(t, nil,
		`CREATE TABLE ok (id int PRIMARY KEY)`,
		`CREATE TABLE nopk (id int, v text)`,
		`CREATE TABLE full_nopk (id int, v text)`, `ALTER TABLE full_nopk REPLICA IDENTITY FULL`,
		`CREATE TABLE nothing (id int PRIMARY KEY)`, `ALTER TABLE nothing REPLICA IDENTITY NOTHING`,
		`CREATE ROLE norepl LOGIN PASSWORD 'pw'`, `GRANT ALL ON ALL TABLES IN SCHEMA public TO norepl`)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), f.URL)
		if err == nil {
			c.Exec(context.Background(), `DROP OWNED BY norepl`)
			c.Exec(context.Background(), `DROP ROLE norepl`)
			c.Close(context.Background())
		}
	})
	ctx := context.Background()
	for _, tc := range []struct {
		table string
		want  []string
	}{
		{"missing", []string{"public.missing does not exist", f.Name}},
		{"nopk", []string{"public.nopk has no primary key", "add one"}},
		{"full_nopk", []string{"public.full_nopk has no primary key", "REPLICA IDENTITY FULL", "add a primary key"}},
		{"nothing", []string{"REPLICA IDENTITY NOTHING", "REPLICA IDENTITY DEFAULT"}},
	} {
		cfg := f.cfg
		cfg.Tables = dbtest.Tables("ok", tc.table)
		err := Setup(ctx, f.URL, cfg)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Setup with table %s: %v, want an error with %q", tc.table, err, w)
			}
		}
		if _, err := Open(ctx, f.URL, cfg, sluice.Position{}); err == nil {
			t.Errorf("Open with table %s succeeded", tc.table)
		}
	}
	// A role without REPLICATION.
	u, _ := url.Parse(f.URL)
	u.User = url.UserPassword("norepl", "pw")
	cfg := f.cfg
	cfg.Tables = dbtest.Tables("ok")
	if err := Setup(ctx, u.String(), cfg); err == nil || !strings.Contains(err.Error(), "lacks the REPLICATION attribute") || !strings.Contains(err.Error(), `ALTER ROLE "norepl" REPLICATION`) {
		t.Errorf("Setup as a role without REPLICATION: %v", err)
	}
	// A bad position.
	if _, err := Open(ctx, f.URL, cfg, sluice.Position{Kind: "pgtrigger", Token: "1:1:/"}); err == nil || !strings.Contains(err.Error(), "not a pglogical position") {
		t.Errorf("Open with a pgtrigger position: %v", err)
	}
	if _, err := Open(ctx, f.URL, cfg, sluice.Position{Kind: Kind, Token: "x/1"}); err == nil {
		t.Errorf("Open with a bad token succeeded")
	}
	if err := Setup(ctx, f.URL, Config{Tables: dbtest.Tables("ok")}); err == nil || !strings.Contains(err.Error(), "stream name") {
		t.Errorf("Setup without names: %v", err)
	}
}

// TestWalLevel runs on a private server: wal_level needs a restart.
func TestWalLevel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private PostgreSQL server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := dbtest.StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	dbtest.ExecPG(t, conn, `ALTER SYSTEM SET wal_level = replica`, `CREATE TABLE t (id int PRIMARY KEY)`)
	conn.Close(ctx)
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	err = Setup(ctx, pg.URL("postgres"), Config{Tables: dbtest.Tables("t"), Stream: "s"})
	if err == nil || !strings.Contains(err.Error(), "wal_level=replica") || !strings.Contains(err.Error(), "set wal_level=logical") || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("Setup with wal_level=replica: %v", err)
	}
}

// TestValuesExact checks every value's text against col::text under
// pgtrigger.SessionSettings, with the rows written by a session whose
// settings differ in every way that changes value text.
func TestValuesExact(t *testing.T) {
	cols := []struct{ name, typ string }{
		{"i2", "smallint"}, {"i4", "integer"}, {"i8", "bigint"},
		{"num", "numeric"}, {"num2", "numeric(12,2)"},
		{"f4", "real"}, {"f8", "double precision"},
		{"t", "text"}, {"vc", "varchar(10)"}, {"ch", "char(5)"}, {"b", "boolean"}, {"by", "bytea"},
		{"d", "date"}, {"ts", "timestamp"}, {"tstz", "timestamptz"}, {"tm", "time"}, {"iv", "interval"},
		{"u", "uuid"}, {"j", "json"}, {"jb", "jsonb"}, {"ta", "text[]"}, {"ia", "integer[]"},
		{"ip", "inet"}, {"bd", "boolish"}, {"ca", "char(3)[]"}, {"ba", "boolean[]"},
	}
	var ddl strings.Builder
	ddl.WriteString("CREATE TABLE v (id int PRIMARY KEY, jn json NOT NULL")
	for _, c := range cols {
		fmt.Fprintf(&ddl, ", %s %s", c.name, c.typ)
	}
	ddl.WriteString(")")
	f := newFixture(t, []string{"v"}, `CREATE DOMAIN boolish AS boolean`, ddl.String())
	r := f.open(t, f.cfg, sluice.Position{})

	writer := f.ConnectPG(t, map[string]string{
		"TimeZone": "Asia/Kathmandu", "DateStyle": "SQL, DMY", "IntervalStyle": "sql_standard",
		"extra_float_digits": "-3", "bytea_output": "escape",
	})
	rows := []string{
		`(2, '{}', 32767, 2147483647, 9223372036854775807, 1.50, 12.30, 1.1, 0.1, 'plain', 'abc', 'ab', true, '\x00ff10',
			'2024-02-29', '2024-01-01 12:34:56.789012', '2024-06-01 12:00:00.5+00', '13:14:15.123456', '1 year 2 mons -3 days 04:05:06.789',
			'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', ' {"b" : 1,  "a":[1, 2.50]} ', '{"b": 1, "a": [1, 2.50]}',
			'{a,NULL,"b c","\"q\"","",NULL,"NULL","x\\y"}', '{1,NULL,3}', '10.1.2.3', true, '{a,NULL}', '{t,NULL,f}')`,
		`(3, ' [1, "\u00e9"] ', -32768, -2147483648, -9223372036854775808, 'NaN', -0.01, 'NaN', 'NaN', E'quote''s \\ "dq"\nnew line é 😀', '', '     ', false, '',
			'infinity', '-infinity', 'infinity', '24:00:00', '-1 day +02:03:04.5',
			'00000000-0000-0000-0000-000000000000', '"\u00e9\/\"x"', '"\u00e9"', '{}', '{{1,2},{3,NULL}}', '::1', false, '{}', '{}')`,
		`(4, '1.0E+2', 0, 0, 0, 123456789012345678901234567890.123456789, 0, 'Infinity', '-Infinity', 'x', 'é', 'é', NULL, NULL,
			'0044-03-15 BC', '0044-03-15 12:00:00 BC', '1900-01-01 00:00:00+00:19:32', '00:00:00', '@ 1 year ago',
			NULL, '  1.0E+2  ', '[1.0, {"z": null}]', '{""}', '{}', '10.0.0.0/8', NULL, '{""}', '{}')`,
		`(5, '"x"', 1, 1, 1, -0.000001, 1, '-0', '-0', 't', 't', 't', true, 'abc',
			'1970-01-01', '1999-12-31 23:59:59.999999', '2024-03-31 01:30:00+01', '00:00:00.000001', '0',
			NULL, 'true', 'null', '{"{}",",",NULL}', '{-1}', '2001:db8::1/64', true, '{abc}', '{t}')`,
		`(6, '0', 1, 1, 1, 1e-30, 1, 3.4028235e38, 1e-310, 't', 't', 't', true, 'abc',
			'2000-01-01', '2000-01-01', '2000-01-01 00:00:00+14', '23:59:59.999999', '1 mon 2 days 00:00:00.000001',
			NULL, '123', '1e400', '{}', '{}', NULL, NULL, NULL, NULL)`,
	}
	all := []string{"id", "jn"}
	for _, c := range cols {
		all = append(all, c.name)
	}
	dbtest.ExecPG(t, writer, `INSERT INTO v (id, jn) VALUES (1, 'null')`)
	for _, row := range rows {
		dbtest.ExecPG(t, writer, `INSERT INTO v (`+strings.Join(all, ", ")+`) VALUES `+row)
	}
	dbtest.ExecPG(t, writer, `UPDATE v SET num2 = 7.25, iv = '-1 days -02:03:04', j = ' { } ' WHERE id = 6`, `DELETE FROM v WHERE id = 5`)
	got := collect(t, r, len(rows)+3, 100)

	check := f.ConnectPG(t, pgtrigger.SessionSettings())
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
		if c.Table != tbl {
			t.Fatalf("change carries table %p, Tables() has %p", c.Table, tbl)
		}
		if c.Op == sluice.OpDelete {
			if len(c.Key) != 1 || c.Key[0].Text != "5" {
				t.Errorf("delete key %v, want 5", c.Key)
			}
			continue
		}
		id := c.Row[0].Text
		if c.Op == sluice.OpInsert && (id == "6" || id == "5") {
			continue // changed since; the update is checked
		}
		w, ok := want[id]
		if !ok {
			t.Fatalf("change for id %s not in the table", id)
		}
		checked++
		for i, v := range c.Row {
			col := tbl.Columns[i]
			switch {
			case v.Unchanged:
				t.Errorf("id %s column %s (%s) unchanged", id, col.Name, col.Type)
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

func TestTransactions(t *testing.T) {
	f := newFixture(t, []string{"t", "u"},
		`CREATE TABLE t (a int, b text, v text, PRIMARY KEY (b, a))`,
		`CREATE TABLE u (id int PRIMARY KEY, v text)`,
		`CREATE TABLE other (id int PRIMARY KEY)`)
	r := f.open(t, f.cfg, sluice.Position{})
	before := time.Now()
	f.Exec(t,
		`INSERT INTO t VALUES (1, 'x', 'one'), (2, 'y', 'two')`,
		`BEGIN`,
		`INSERT INTO u VALUES (1, 'u1')`,
		`INSERT INTO other VALUES (1)`,
		`UPDATE t SET v = 'uno' WHERE a = 1`,
		`UPDATE t SET a = 10, v = 'moved' WHERE a = 2`,
		`DELETE FROM t WHERE a = 1`,
		`COMMIT`,
		`DELETE FROM u`,
	)
	got := collect(t, r, 7, 3)
	dbtest.ExpectChanges(t, got,
		`insert t [1 x one]`, `insert t [2 y two]`, `insert u [1 u1]`,
		`update t(b=x, a=1) [1 x uno]`,
		`update t(b=y, a=2) [10 y moved]`,
		`delete t(b=x, a=1)`,
		`delete u(id=1)`)
	// Positions: the last change of a transaction ends on a boundary, the
	// others name their WAL record inside the transaction.
	var toks []string
	for _, c := range got {
		toks = append(toks, c.Pos.Token)
		if c.Pos.Kind != Kind {
			t.Fatalf("position kind %q", c.Pos.Kind)
		}
		if d := c.Time.Sub(before); d < -time.Second || d > 10*time.Second {
			t.Errorf("change time %v, written at about %v", c.Time, before)
		}
	}
	p := make([]position, len(got))
	for i, c := range got {
		p[i] = lsnOf(t, c.Pos)
	}
	wantInTx := []bool{true, false, true, true, true, false, false}
	for i := range p {
		if p[i].inTx() != wantInTx[i] || p[i].k != 0 {
			t.Fatalf("positions %v: want inside a transaction %v", toks, wantInTx)
		}
	}
	if !(p[0].lsn < p[1].lsn && p[1].lsn < p[2].lsn && p[2].lsn == p[3].lsn && p[3].lsn == p[4].lsn && p[4].lsn < p[5].lsn && p[5].lsn < p[6].lsn) ||
		!(p[2].at < p[3].at && p[3].at < p[4].at) {
		t.Fatalf("positions %v not ordered", toks)
	}
	for i := 1; i < len(got); i++ {
		if covered, done, err := Covers(got[i-1].Pos, got[i].Pos); err != nil || covered || !done {
			t.Fatalf("Covers(%s, %s) = %v, %v, %v: want each change after the one before", got[i-1].Pos, got[i].Pos, covered, done, err)
		}
		if covered, _, err := Covers(got[i].Pos, got[i-1].Pos); err != nil || !covered {
			t.Fatalf("Covers(%s, %s) = %v, %v: want each change before the one after", got[i].Pos, got[i-1].Pos, covered, err)
		}
	}
	if !got[2].Time.Equal(got[5].Time) {
		t.Errorf("changes of one transaction have times %v and %v", got[2].Time, got[5].Time)
	}
}

// md5chain is an incompressible text of n hex digits.
func md5chain(seed string, n int) string {
	var b strings.Builder
	h := md5.Sum([]byte(seed))
	for b.Len() < n {
		b.WriteString(hex.EncodeToString(h[:]))
		h = md5.Sum(h[:])
	}
	return b.String()[:n]
}

func TestUnchangedToast(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, big text, n int)`)
	r := f.open(t, f.cfg, sluice.Position{})
	big := md5chain("x", 20000)
	if _, err := f.PG.Exec(context.Background(), `INSERT INTO t VALUES (1, $1, 1)`, big); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `UPDATE t SET n = 2 WHERE id = 1`, `UPDATE t SET id = 3 WHERE id = 1`)
	got := collect(t, r, 3, 10)
	if got[0].Row[1].Text != big {
		t.Fatalf("inserted big value has %d bytes, want the %d written", len(got[0].Row[1].Text), len(big))
	}
	for _, c := range got[1:] {
		if !c.Row[1].Unchanged || c.Row[1].Text != "" || c.Row[1].Null {
			t.Fatalf("update: big column = %q (null %v, unchanged %v), want Unchanged", c.Row[1].Text[:min(20, len(c.Row[1].Text))], c.Row[1].Null, c.Row[1].Unchanged)
		}
	}
	if got[1].Row[2].Text != "2" || got[1].Key[0].Text != "1" {
		t.Fatalf("update = %s", dbtest.DescribeChanges(got[1:2]))
	}
	if got[2].Key[0].Text != "1" || got[2].Row[0].Text != "3" {
		t.Fatalf("key change = %s", dbtest.DescribeChanges(got[2:3]))
	}
}

func TestAddColumn(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO t VALUES (1, 'a')`,
		`BEGIN`, `INSERT INTO t VALUES (2, 'b')`, `ALTER TABLE t ADD COLUMN w numeric(5,1) DEFAULT 1.5`, `INSERT INTO t VALUES (3, 'c', 2)`, `COMMIT`,
		`UPDATE t SET v = 'A' WHERE id = 1`)
	got := collect(t, r, 5, 10)
	dbtest.ExpectChanges(t, got, `insert t [1 a]`, `insert t [2 b]`, `schema change t [add w=1.5]`, `insert t [3 c 2.0]`, `update t(id=1) [1 A 1.5]`)
	orig := r.Tables()[0]
	if got[0].Table != orig || got[1].Table != orig || got[2].Schema.Before != orig {
		t.Fatalf("changes before the ALTER carry a new table")
	}
	nt := got[2].Table
	if nt == orig || got[3].Table != nt || got[4].Table != nt {
		t.Fatalf("changes after the ALTER: want one new *Table")
	}
	if got[2].Pos != got[1].Pos {
		t.Fatalf("the schema change is at %s, want the position of the change before it, %s", got[2].Pos, got[1].Pos)
	}
	if len(orig.Columns) != 2 {
		t.Fatalf("the original table changed: %v", orig.Columns)
	}
	if c := nt.Columns[2]; c.Name != "w" || c.Type != "numeric(5,1)" {
		t.Fatalf("added column %+v", c)
	}
	if fmt.Sprint(nt.Key) != fmt.Sprint(orig.Key) {
		t.Fatalf("key %v, want %v", nt.Key, orig.Key)
	}

	// A reader resuming from before the ALTER, opened after it, streams
	// the old shape first and then the new one.
	r.Close()
	r2 := f.open(t, f.cfg, got[0].Pos)
	again := collect(t, r2, 4, 10)
	dbtest.ExpectChanges(t, again, `insert t [2 b]`, `schema change t [add w=1.5]`, `insert t [3 c 2.0]`, `update t(id=1) [1 A 1.5]`)
	if len(again[0].Table.Columns) != 2 || len(again[2].Table.Columns) != 3 {
		t.Fatalf("resumed reader: tables %v then %v", again[0].Table.Columns, again[2].Table.Columns)
	}
}

// TestSchemaChanges: each DDL reaches the reader's output as a schema
// change saying what changed: added, dropped, renamed and retyped columns
// at their place in the change order (after the transaction's insert that
// came before the DDL), an added column with the value the rows that
// existed before it hold; a rename told apart from a drop and an add by
// the column's number. Nullability and indexes come from the catalog with
// the table's next change, or, when unsafe early (SET NOT NULL, a unique
// index), once the stream passed the catalog's WAL position (the next
// transaction's change).
func TestSchemaChanges(t *testing.T) {
	for _, tc := range []struct {
		name string
		ddl  []string
		want []string // the schema edits, in any order
	}{
		{"drop", []string{`ALTER TABLE t DROP COLUMN w`}, []string{`drop w`}},
		// Dropping x drops the index on it: the catalog tells that first.
		{"drop_last", []string{`ALTER TABLE t DROP COLUMN x`}, []string{`drop index t_old_idx`, `drop x`}},
		{"rename", []string{`ALTER TABLE t RENAME COLUMN w TO w2`}, []string{`rename w to w2`}},
		{"drop_and_add", []string{`ALTER TABLE t DROP COLUMN x`, `ALTER TABLE t ADD COLUMN y int`}, []string{`drop index t_old_idx`, `drop x`, `add y=NULL`}},
		{"type", []string{`ALTER TABLE t ALTER COLUMN w TYPE bigint`}, []string{`retype w`}},
		{"constant_default", []string{`ALTER TABLE t ADD COLUMN d text DEFAULT 'it''s'`}, []string{`add d=it's`}},
		{"boolean_default", []string{`ALTER TABLE t ADD COLUMN d boolean NOT NULL DEFAULT true`}, []string{`add d=true`, `not null d`}},
		{"volatile_default", []string{`ALTER TABLE t ADD COLUMN d float8 DEFAULT random()`}, []string{`add d volatile`}},
		{"drop_not_null", []string{`ALTER TABLE t ALTER COLUMN x DROP NOT NULL`}, []string{`null x`}},
		{"set_not_null", []string{`ALTER TABLE t ALTER COLUMN w SET NOT NULL`}, []string{`not null w`}},
		{"index", []string{`CREATE INDEX t_w_idx ON t (w, x)`, `CREATE UNIQUE INDEX t_x_key ON t (x)`, `DROP INDEX t_old_idx`},
			[]string{`index t_w_idx(w,x)`, `drop index t_old_idx`, `unique t_x_key(x)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, w int, x int NOT NULL DEFAULT 0)`, `CREATE INDEX t_old_idx ON t (x)`)
			r := f.open(t, f.cfg, sluice.Position{})
			f.Exec(t, `INSERT INTO t VALUES (1, 1, 1)`)
			got := rowChanges(t, r, 1)
			stmts := append([]string{`BEGIN`, `INSERT INTO t (id, w, x) VALUES (2, 2, 2)`}, tc.ddl...)
			f.Exec(t, append(stmts, `UPDATE t SET id = id WHERE id = 2`, `COMMIT`, `UPDATE t SET id = id WHERE id = 1`)...)
			got = append(got, rowChanges(t, r, 3)...)
			// A change past the catalog's position brings what waits for
			// it.
			f.Exec(t, `UPDATE t SET id = id WHERE id = 1`)
			got = append(got, rowChanges(t, r, 1)...)
			// Whether pgoutput sends the relation message again before
			// the transaction's first change as well as after the DDL
			// depends on when the invalidation is processed: what changed
			// may come in one schema change or two. Compared as a set.
			var schema []string
			insert2, update2 := -1, -1
			for i, c := range got {
				switch {
				case c.Op == sluice.OpSchema:
					for _, e := range c.Schema.Edits {
						schema = append(schema, dbtest.DescribeEdit(e))
					}
					for _, e := range c.Schema.Edits {
						column := e.Kind == sluice.AddColumn || e.Kind == sluice.DropColumn || e.Kind == sluice.RenameColumn || e.Kind == sluice.AlterColumnType
						if column && (insert2 < 0 || update2 >= 0) {
							t.Errorf("column edit %s not between the insert before the DDL and the update after it: %s", dbtest.DescribeEdit(e), dbtest.DescribeChanges(got))
						}
					}
				case c.Op == sluice.OpInsert && c.Row[0].Text == "2":
					insert2 = i
				case c.Op == sluice.OpUpdate && c.Row[0].Text == "2":
					update2 = i
				}
			}
			slices.Sort(schema)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if strings.Join(schema, "; ") != strings.Join(want, "; ") {
				t.Fatalf("schema edits:\n got %s\nwant %s\nall: %s", strings.Join(schema, "; "), strings.Join(want, "; "), dbtest.DescribeChanges(got))
			}
		})
	}
}

// rowChanges reads until n changes of rows arrived, and returns them with
// the schema changes among them.
func rowChanges(t *testing.T, r *Reader, n int) []sluice.Change {
	t.Helper()
	var got []sluice.Change
	rows := 0
	for rows < n {
		c := collectN(t, r, 1, 1)[0]
		got = append(got, c)
		if c.Op != sluice.OpSchema {
			rows++
		}
	}
	return got
}

func TestTruncateRefused(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, w int, x int)`)
	cfg := f.cfg
	cfg.Truncate = "refuse"
	r := f.open(t, cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO t VALUES (1, 1, 1)`, `BEGIN`, `INSERT INTO t VALUES (2, 2, 2)`, `TRUNCATE t`,
		`INSERT INTO t VALUES (3, 3)`, `COMMIT`, `INSERT INTO t VALUES (4, 4)`)
	got, err := readErr(t, r)
	// The transaction with the change stops the stream where the change
	// is: its first insert came before it.
	dbtest.ExpectChanges(t, got, `insert t [1 1 1]`, `insert t [2 2 2]`)
	last := got[len(got)-1].Pos.String()
	for _, w := range []string{"TRUNCATE of public.t at LSN", `truncate setting is "refuse"`, last} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q, want it to contain %q", err, w)
		}
	}
	if _, err2 := r.Read(context.Background(), 10); err2 == nil {
		t.Fatalf("Read after the error succeeded")
	}
}

// workload writes transactions of 1, 3, 2 and 4 changes with writes to a
// table outside the publication in between, and returns the count.
func workload(t *testing.T, f *fixture, base int) int {
	t.Helper()
	b := func(i int) string { return fmt.Sprint(base + i) }
	f.Exec(t,
		`INSERT INTO t VALUES (`+b(1)+`, 'a')`,
		`INSERT INTO other VALUES (`+b(1)+`)`,
		`BEGIN`, `INSERT INTO t VALUES (`+b(2)+`, 'b')`, `UPDATE t SET v = 'bb' WHERE id = `+b(2), `INSERT INTO t VALUES (`+b(3)+`, 'c')`, `COMMIT`,
		`BEGIN`, `UPDATE t SET id = `+b(4)+` WHERE id = `+b(1), `DELETE FROM t WHERE id = `+b(3), `COMMIT`,
		`INSERT INTO other VALUES (`+b(2)+`)`,
		`BEGIN`, `INSERT INTO t VALUES (`+b(5)+`, 'e')`, `INSERT INTO other VALUES (`+b(3)+`)`, `INSERT INTO t VALUES (`+b(6)+`, 'f')`,
		`UPDATE t SET v = 'ee' WHERE id = `+b(5), `DELETE FROM t WHERE id = `+b(6), `COMMIT`)
	return 10
}

func TestResumeFromEveryPosition(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE other (id int PRIMARY KEY)`)
	r := f.open(t, f.cfg, sluice.Position{})
	n := workload(t, f, 0)
	all := collect(t, r, n, 3)
	r.Close()
	want := dbtest.DescribeChanges(all)
	for i := -1; i < n; i++ {
		from := sluice.Position{}
		if i >= 0 {
			from = all[i].Pos
		}
		r := f.open(t, f.cfg, from)
		got := collect(t, r, n-i-1, 2)
		if g, w := dbtest.DescribeChanges(got), dbtest.DescribeChanges(all[i+1:]); g != w {
			t.Fatalf("resumed from %s:\n got %s\nwant %s", from, g, w)
		}
		for j := range got {
			if got[j].Pos != all[i+1+j].Pos {
				t.Fatalf("resumed from %s: change %d at %s, first read at %s", from, j, got[j].Pos, all[i+1+j].Pos)
			}
		}
		r.Close()
	}
	_ = want
}

func TestAckMovesConfirmedFlush(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE other (id int PRIMARY KEY)`)
	logs := &logCapture{}
	cfg := f.cfg
	cfg.Logger = slog.New(logs)
	r := f.open(t, cfg, sluice.Position{})
	defer func() {
		if logs.has("WARN") {
			t.Errorf("warnings logged: %v", logs.msgs)
		}
	}()
	start := f.confirmedFlush(t)
	n := workload(t, f, 0)
	all := collect(t, r, n, 100)
	ctx := context.Background()
	// Positions: [0] 1st tx end; [1..3] tx2 (k=1,2,0); [4,5] tx3; [6..9] tx4.
	// Acking inside tx2 confirms only tx1.
	if err := r.Ack(ctx, all[2].Pos); err != nil {
		t.Fatal(err)
	}
	end1 := lsnOf(t, all[0].Pos).lsn
	tx2 := lsnOf(t, all[2].Pos).lsn
	// Nothing moves it past tx1 while tx2 is acked in part, not even the
	// keepalives: wait for a few status intervals.
	f.waitFlush(t, "the end of tx1", func(l pglogrepl.LSN) bool { return l == end1 })
	time.Sleep(3 * f.cfg.StatusInterval) // give a wrong status update the chance to arrive
	if l := f.confirmedFlush(t); l != end1 || l >= tx2 || l <= start {
		t.Fatalf("confirmed_flush_lsn %s after acking inside tx2 (tx1 ends at %s, tx2 commits at %s)", l, end1, tx2)
	}
	// Acking the last change of tx3 confirms its end.
	if err := r.Ack(ctx, all[5].Pos); err != nil {
		t.Fatal(err)
	}
	end3 := lsnOf(t, all[5].Pos).lsn
	f.waitFlush(t, "the end of tx3", func(l pglogrepl.LSN) bool { return l == end3 })
	// Acking inside tx4 keeps it at tx3's end.
	if err := r.Ack(ctx, all[7].Pos); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * f.cfg.StatusInterval)
	if l := f.confirmedFlush(t); l != end3 {
		t.Fatalf("confirmed_flush_lsn %s after acking inside tx4, want %s", l, end3)
	}
	// Everything acked: writes elsewhere (WAL the slot would otherwise
	// retain) let the slot move past the last change.
	if err := r.Ack(ctx, all[9].Pos); err != nil {
		t.Fatal(err)
	}
	end4 := lsnOf(t, all[9].Pos).lsn
	f.waitFlush(t, "the end of tx4", func(l pglogrepl.LSN) bool { return l >= end4 })
	// The reader hands out a progress marker past them (after the
	// progress interval), and only acking it moves the slot: the slot
	// never moves past what the target's checkpoint holds.
	f.Exec(t, `INSERT INTO other SELECT generate_series(100, 200)`)
	deadline := time.Now().Add(20 * time.Second)
	var marker sluice.Change
	for marker.Op != sluice.OpProgress {
		if time.Now().After(deadline) {
			t.Fatalf("no progress marker past %s", end4)
		}
		c, err := r.Read(ctx, 10)
		if err != nil || (len(c) > 0 && c[0].Op != sluice.OpProgress) {
			t.Fatalf("Read = %s, %v", dbtest.DescribeChanges(c), err)
		}
		if len(c) > 0 {
			marker = c[0]
		}
	}
	if l := lsnOf(t, marker.Pos); l.inTx() || l.lsn <= end4 {
		t.Fatalf("marker at %s, want a boundary past %s", marker.Pos, end4)
	}
	if l := f.confirmedFlush(t); l > end4 {
		t.Fatalf("the slot moved to %s before the marker was acked", l)
	}
	if err := r.Ack(ctx, marker.Pos); err != nil {
		t.Fatal(err)
	}
	f.waitFlush(t, "the marker", func(l pglogrepl.LSN) bool { return l > end4 })
	// A change after the idle move is still streamed.
	f.Exec(t, `INSERT INTO t VALUES (100, 'z')`)
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), `insert t [100 z]`)
}

func TestReconnect(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY)`)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO t SELECT generate_series(1, 5)`, `INSERT INTO t VALUES (6)`)
	first := collectN(t, r, 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dbtest.PG(t).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	f.PG = f.ConnectPG(t, nil)
	f.Exec(t, `INSERT INTO t VALUES (7)`, `BEGIN`, `INSERT INTO t VALUES (8)`, `INSERT INTO t VALUES (9)`, `COMMIT`)
	rest := collect(t, r, 7, 3)
	dbtest.ExpectChanges(t, append(first, rest...), `insert t [1]`, `insert t [2]`, `insert t [3]`, `insert t [4]`, `insert t [5]`, `insert t [6]`, `insert t [7]`, `insert t [8]`, `insert t [9]`)
}

func TestFromNow(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY)`)
	if err := Setup(context.Background(), f.URL, f.cfg); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `INSERT INTO t VALUES (1)`)
	cfg := f.cfg
	cfg.FromNow = true
	r := f.open(t, cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO t VALUES (2)`)
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), `insert t [2]`)
	// One reader per slot.
	if _, err := Open(context.Background(), f.URL, f.cfg, sluice.Position{}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second Open on the slot: %v", err)
	}
	r.Close()
	// Without FromNow the slot streams what it holds since Setup.
	f.Exec(t, `INSERT INTO t VALUES (3)`)
	f2 := *f
	f2.cfg.Slot = f.Name + "_b"
	t.Cleanup(func() { Uninstall(context.Background(), f.URL, f2.cfg) })
	if err := Setup(context.Background(), f.URL, f2.cfg); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `INSERT INTO t VALUES (4)`)
	r2 := f.open(t, f2.cfg, sluice.Position{})
	dbtest.ExpectChanges(t, collect(t, r2, 1, 10), `insert t [4]`)
}

type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	msg := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	l.msgs = append(l.msgs, msg)
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }
func (l *logCapture) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// waitLog polls until a message containing s is logged.
func waitLog(t *testing.T, logs *logCapture, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !logs.has(s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged: %v", s, logs.msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSlotHealth(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	logs := &logCapture{}
	cfg := f.cfg
	cfg.Logger = slog.New(logs)
	cfg.MaxRetainedWAL = 1000
	r := f.open(t, cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO t SELECT i, repeat('x', 100) FROM generate_series(1, 1000) i`)
	n, err := r.SlotHealth(context.Background())
	if err != nil || n < 100000 {
		t.Fatalf("SlotHealth = %d, %v; want the WAL of 1000 rows", n, err)
	}
	waitLog(t, logs, "WARN replication slot retains more WAL than configured")
}

// TestBackpressureAndDropMidTransaction streams a transaction larger than
// the reader's buffer, drops the replication connection in the middle of
// it and checks every change arrives once, in order.
func TestBackpressureAndDropMidTransaction(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	logs := &logCapture{}
	cfg := f.cfg
	cfg.Logger = slog.New(logs)
	r := f.open(t, cfg, sluice.Position{})
	const n = 3 * bufferChanges
	f.Exec(t, fmt.Sprintf(`INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, %d) i`, n), `INSERT INTO t VALUES (0, 'last')`)
	got := collectN(t, r, 100, 100)
	// The receiver is blocked on the full buffer, holding the stream.
	// Kill its walsender.
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f.PG.QueryRow(context.Background(), `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, f.cfg.Slot).Scan(&pid)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot never active: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	dbtest.ExecPG(t, f.PG, fmt.Sprintf(`SELECT pg_terminate_backend(%d)`, pid))
	got = append(got, collect(t, r, n+1-100, 1000)...)
	for i, c := range got[:n] {
		if c.Row[0].Text != fmt.Sprint(i+1) {
			t.Fatalf("change %d is %s", i, dbtest.DescribeChanges([]sluice.Change{c}))
		}
		if p := lsnOf(t, c.Pos); p.inTx() != (i < n-1) {
			t.Fatalf("change %d at %s", i, c.Pos)
		}
		if i > 0 {
			if covered, _, err := Covers(got[i-1].Pos, c.Pos); err != nil || covered {
				t.Fatalf("change %d at %s is not after change %d at %s (%v)", i, c.Pos, i-1, got[i-1].Pos, err)
			}
		}
	}
	if !logs.has("replication connection re-established") {
		t.Errorf("the connection was not dropped: %v", logs.msgs)
	}
	if got[n].Row[1].Text != "last" {
		t.Fatalf("last change %s", dbtest.DescribeChanges(got[n:]))
	}
}

// TestReadAheadBoundedByBytes: with 40 rows of 1 MB waiting and a 4 MB
// read-ahead budget, the reader decodes at most the budget (plus the one
// change it holds back for its position) while nothing is read, and every
// row still arrives when they are.
func TestReadAheadBoundedByBytes(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, big text)`)
	cfg := f.cfg
	cfg.BufferBytes = 4 << 20
	r := f.open(t, cfg, sluice.Position{})
	const rows, size = 40, 1 << 20
	f.Exec(t, fmt.Sprintf(`INSERT INTO t SELECT g, repeat(md5(g::text), %d) FROM generate_series(1, %d) g`, size/32, rows))
	// Wait until the read-ahead is full, then watch it stay bounded.
	deadline := time.Now().Add(20 * time.Second)
	for r.budget.Used() < 3<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the reader decoded only %d bytes ahead", r.budget.Used())
		}
		time.Sleep(20 * time.Millisecond) // polling the reader's state
	}
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		if used := r.budget.Used(); used > cfg.BufferBytes+2*size {
			t.Fatalf("the reader decoded %d bytes ahead, budget %d", used, cfg.BufferBytes)
		}
		time.Sleep(20 * time.Millisecond) // sampling interval
	}
	got := collect(t, r, rows, 7)
	for i, c := range got {
		if len(c.Row[1].Text) != size {
			t.Fatalf("row %d: %d bytes, want %d", i, len(c.Row[1].Text), size)
		}
	}
}

// TestDroppedSlotIsLost: a stream whose slot was dropped while it was
// stopped is refused with ErrSlotLost (exit 7: changes were lost), never
// resumed from a new slot.
func TestDroppedSlotIsLost(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY)`)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO t VALUES (1)`)
	got := collectN(t, r, 1, 1)
	r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The walsender lets the slot go a moment after Close: poll until the
	// drop is taken.
	for {
		_, err := f.PG.Exec(ctx, "SELECT pg_drop_replication_slot($1)", f.cfg.Slot)
		if err == nil {
			break
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" || ctx.Err() != nil {
			t.Fatalf("drop the slot: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r2, err := Open(ctx, f.URL, f.cfg, got[0].Pos)
	if err == nil {
		_, err = readErr(t, r2)
		r2.Close()
	}
	if !errors.Is(err, ErrSlotLost) {
		t.Fatalf("resume after the slot was dropped: %v, want ErrSlotLost", err)
	}
}

// TestGeneratedColumnsOmitted: pgoutput sends no generated column, so the
// reader describes the table without them and lists them in Omitted, with
// their expressions, for the target to compute them itself (or refuse); a
// relation message (the table altered) keeps the list.
func TestGeneratedColumnsOmitted(t *testing.T) {
	f := newFixture(t, []string{"g"}, `CREATE TABLE g (id int PRIMARY KEY, price numeric(10,2), qty int,
		total numeric(12,2) GENERATED ALWAYS AS (price * qty) STORED, note text)`)
	r := f.open(t, f.cfg, sluice.Position{})
	tbl := r.Tables()[0]
	if fmt.Sprint(tbl.Columns) != "[{id integer false   } {price numeric(10,2) true   } {qty integer true   } {note text true   }]" {
		t.Errorf("columns %v", tbl.Columns)
	}
	if len(tbl.Omitted) != 1 || tbl.Omitted[0].Name != "total" || tbl.Omitted[0].Generated != "(price * (qty)::numeric)" || tbl.Omitted[0].Type != "numeric(12,2)" {
		t.Errorf("omitted %+v, want total with its expression", tbl.Omitted)
	}
	f.Exec(t, `INSERT INTO g (id, price, qty, note) VALUES (1, 1.5, 2, 'a')`, `ALTER TABLE g ADD COLUMN w int`, `UPDATE g SET qty = 3 WHERE id = 1`)
	// The ALTER is a schema change of its own, before the update.
	got := collect(t, r, 3, 10)
	dbtest.ExpectChanges(t, got, `insert g [1 1.50 2 a]`, `schema change g [add w=NULL]`, `update g(id=1) [1 1.50 3 a NULL]`)
	if o := got[2].Table.Omitted; len(o) != 1 || o[0].Name != "total" {
		t.Errorf("after the ALTER: omitted %+v", o)
	}
}
