package postgres

import (
	"context"

	"fmt"
	"net"

	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testDB creates a fresh database, runs ddl in it and returns its URL and an
// admin connection for checks.
func testDB(t *testing.T, ddl ...string) (string, *pgx.Conn) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	d := dbtest.PGEngine.DatabaseWith(t, map[string]string{"timezone": "UTC"}, ddl...)
	return d.URL, d.PG
}

func openTarget(t *testing.T, connString string, mode Mode) *Target {
	t.Helper()
	tg, err := Open(context.Background(), connString, Config{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close(context.Background()) })
	return tg
}

func modes(t *testing.T, f func(t *testing.T, mode Mode)) {
	for _, m := range []Mode{Pipelined, PerRow} {
		t.Run(m.String(), func(t *testing.T) { f(t, m) })
	}
}

// dump returns a table's rows in text form, sorted.
func dump(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT x::text FROM "+table+" x ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ins(tbl *sluice.Table, vals ...string) sluice.Change {
	return sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: row(vals...)}
}

func upd(tbl *sluice.Table, vals ...string) sluice.Change {
	return sluice.Change{Table: tbl, Op: sluice.OpUpdate, Row: row(vals...)}
}

func del(tbl *sluice.Table, key ...string) sluice.Change {
	return sluice.Change{Table: tbl, Op: sluice.OpDelete, Key: row(key...)}
}

// row makes a Row from text; "\x00" stands for NULL.
func row(vals ...string) sluice.Row {
	r := make(sluice.Row, len(vals))
	for i, v := range vals {
		if v == "\x00" {
			r[i] = sluice.Null
		} else {
			r[i] = sluice.Text(v)
		}
	}
	return r
}

const null = "\x00"

// typeCol is a column of TestTypesRoundTrip.
type typeCol struct {
	name, typ string
	vals      []string // one per row; row 0 holds NULLs except id
}

func TestTypesRoundTrip(t *testing.T) {
	cols := []typeCol{
		{"id", "integer", []string{"1", "2", "3"}},
		{"c_int2", "smallint", []string{null, "-32768", "32767"}},
		{"c_int4", "integer", []string{null, "-2147483648", "0"}},
		{"c_int8", "bigint", []string{null, "-9223372036854775808", "9223372036854775807"}},
		{"c_numeric", "numeric", []string{null, "12345678901234567890.000000001", "NaN"}},
		{"c_numeric_ps", "numeric(12,4)", []string{null, "-12345678.1234", "0.0100"}},
		{"c_real", "real", []string{null, "3.4028235e+38", "-1.1"}},
		{"c_double", "double precision", []string{null, "0.1", "-Infinity"}},
		{"c_text", "text", []string{null, "héllo \"q\" 'single' \\back, {brace} NULL\nnew line\ttab", ""}},
		{"c_varchar", "varchar(12)", []string{null, "abcdefghijkl", "NULL"}},
		{"c_char", "char(5)", []string{null, "ab", "abcde"}},
		{"c_bool", "boolean", []string{null, "true", "false"}},
		{"c_bytea", "bytea", []string{null, `\x00ff5c22275c`, `\x`}},
		{"c_date", "date", []string{null, "2024-02-29", "infinity"}},
		{"c_ts", "timestamp", []string{null, "2024-01-02 03:04:05.123456", "1999-12-31 23:59:59"}},
		{"c_tstz", "timestamp with time zone", []string{null, "2024-01-02 03:04:05.123+00", "-infinity"}},
		{"c_time", "time", []string{null, "23:59:59.999999", "00:00:00"}},
		{"c_interval", "interval", []string{null, "1 year 2 mons 3 days 04:05:06.789", "-00:00:01"}},
		{"c_uuid", "uuid", []string{null, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "00000000-0000-0000-0000-000000000000"}},
		{"c_json", "json", []string{null, `{"b": 1,  "a": [1, 2], "s": "x\"y"}`, `null`}},
		{"c_jsonb", "jsonb", []string{null, `{"a": [1, 2], "b": 1, "s": "x\"y"}`, `"NULL"`}},
		{"c_text_arr", "text[]", []string{null, `{a,"b c","d\"e",NULL,"NULL","{x}",""}`, `{}`}},
		{"c_int_arr", "integer[]", []string{null, `{1,2,NULL,3}`, `{{1,2},{3,4}}`}},
	}
	var defs []string
	tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "all_types"}, Key: []int{0}}
	for _, c := range cols {
		defs = append(defs, pgx.Identifier{c.name}.Sanitize()+" "+c.typ)
		tbl.Columns = append(tbl.Columns, sluice.Column{Name: c.name, Type: c.typ, Nullable: c.name != "id"})
	}
	// Server defaults that read and print values differently: a target's
	// sessions get them unless every transaction sets its own (the
	// settings are not in the startup packet, which a pooler would
	// refuse).
	for _, odd := range []bool{false, true} {
		name := "server_defaults"
		if odd {
			name = "odd_server_defaults"
		}
		t.Run(name, func(t *testing.T) { typesRoundTrip(t, cols, defs, tbl, odd) })
	}
}

func typesRoundTrip(t *testing.T, cols []typeCol, defs []string, tbl *sluice.Table, odd bool) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn := testDB(t, "CREATE TABLE all_types ("+strings.Join(defs, ", ")+", PRIMARY KEY (id))")
		ctx := context.Background()
		if odd {
			oddDefaults(t, conn)
		}
		tg := openTarget(t, url, mode)
		if err := tg.Preflight(ctx, []*sluice.Table{tbl}); err != nil {
			t.Fatal(err)
		}
		var changes []sluice.Change
		for r := range cols[0].vals {
			vals := make([]string, len(cols))
			for i, c := range cols {
				vals[i] = c.vals[r]
			}
			changes = append(changes, ins(tbl, vals...))
		}
		if err := tg.Apply(ctx, apply.Compact(changes, nil), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		for _, c := range cols {
			rows, err := conn.Query(ctx, "SELECT "+pgx.Identifier{c.name}.Sanitize()+"::text FROM all_types ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[*string])
			if err != nil {
				t.Fatal(err)
			}
			for r, want := range c.vals {
				switch {
				case got[r] == nil && want != null:
					t.Errorf("%s row %d: got NULL, want %q", c.name, r, want)
				case got[r] != nil && want == null:
					t.Errorf("%s row %d: got %q, want NULL", c.name, r, *got[r])
				case got[r] != nil && *got[r] != want:
					t.Errorf("%s row %d: got %q, want %q", c.name, r, *got[r], want)
				}
			}
		}
	})
}

// oddDefaults gives conn's database defaults under which values read and
// print otherwise than sluice writes them; sessions opened later get them.
func oddDefaults(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"TimeZone", "Asia/Kathmandu"}, {"DateStyle", "SQL, DMY"}, {"IntervalStyle", "sql_standard"}} {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET "+kv[0]+" = '"+kv[1]+"'"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCompositeKeysDeletesIdempotence(t *testing.T) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn := testDB(t,
			"CREATE TABLE lines (order_id bigint, line integer, sku text, qty integer, PRIMARY KEY (order_id, line))",
			"INSERT INTO lines VALUES (1, 1, 'old', 1), (1, 2, 'gone', 2), (2, 1, 'keep', 3)")
		lines := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "lines"}, Key: []int{0, 1},
			Columns: []sluice.Column{{Name: "order_id", Type: "bigint"}, {Name: "line", Type: "integer"},
				{Name: "sku", Type: "text", Nullable: true}, {Name: "qty", Type: "integer", Nullable: true}}}
		tg := openTarget(t, url, mode)
		ctx := context.Background()
		if err := tg.Preflight(ctx, []*sluice.Table{lines}); err != nil {
			t.Fatal(err)
		}
		b := apply.Compact([]sluice.Change{
			upd(lines, "1", "1", "new", "10"),
			del(lines, "1", "2"),
			ins(lines, "3", "1", "added", null),
			ins(lines, "3", "2", "transient", "1"),
			del(lines, "3", "2"),
			del(lines, "9", "9"), // absent on the target: a no-op
		}, nil)
		want := []string{"(1,1,new,10)", "(2,1,keep,3)", "(3,1,added,)"}
		for i := range 2 { // the second apply is a replay and must change nothing
			if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
				t.Fatalf("apply %d: %v", i, err)
			}
			if got := dump(t, conn, "lines"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("apply %d: got %v, want %v", i, got, want)
			}
		}
	})
}

func TestUnchangedColumnsKept(t *testing.T) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn := testDB(t,
			"CREATE TABLE docs (id int PRIMARY KEY, title text, body text)",
			"INSERT INTO docs VALUES (1, 't1', 'big body 1'), (2, 't2', 'big body 2')")
		docs := &sluice.Table{Name: sluice.TableName{Name: "docs"}, Key: []int{0},
			Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "title", Type: "text"}, {Name: "body", Type: "text"}}}
		tg := openTarget(t, url, mode)
		ctx := context.Background()
		unchanged := sluice.Value{Unchanged: true}
		b := &apply.Batch{Tables: []*apply.TableBatch{{Table: docs, Upserts: []sluice.Row{
			{sluice.Text("1"), sluice.Text("t1 new"), unchanged},
			{sluice.Text("2"), sluice.Text("t2 new"), sluice.Text("body 2 new")},
		}}}}
		if err := tg.Apply(ctx, b, sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		want := []string{`(1,"t1 new","big body 1")`, `(2,"t2 new","body 2 new")`}
		if got := dump(t, conn, "docs"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
}

func TestCheckpoint(t *testing.T) {
	url, _ := testDB(t)
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	if _, ok, err := tg.ReadCheckpoint(ctx, "s1"); err != nil || ok {
		t.Fatalf("ReadCheckpoint of a new stream = %v, %v; want false, nil", ok, err)
	}
	at := time.Date(2026, 11, 30, 7, 0, 0, 123456000, time.UTC)
	for seq := uint64(1); seq <= 2; seq++ {
		cp := sluice.Checkpoint{Stream: "s1", Seq: seq, Applied: 1000 * seq,
			Position: sluice.Position{Kind: "pglogical", Token: "0/16B3748:" + strconv.FormatUint(seq, 10)}, Time: at}
		if err := tg.Apply(ctx, &apply.Batch{}, cp); err != nil {
			t.Fatal(err)
		}
		got, ok, err := tg.ReadCheckpoint(ctx, "s1")
		if err != nil || !ok {
			t.Fatalf("ReadCheckpoint = %v, %v", ok, err)
		}
		if got.Seq != cp.Seq || got.Applied != cp.Applied || got.Position != cp.Position || !got.Time.Equal(at) {
			t.Fatalf("ReadCheckpoint = %+v, want %+v", got, cp)
		}
	}
	// A second Open (a restart) finds the table and the checkpoint.
	tg2 := openTarget(t, url, PerRow)
	if got, ok, err := tg2.ReadCheckpoint(ctx, "s1"); err != nil || !ok || got.Seq != 2 {
		t.Fatalf("after reopen: %+v, %v, %v", got, ok, err)
	}
}

func TestFailedStatementRollsBack(t *testing.T) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn := testDB(t,
			"CREATE TABLE stock (sku text PRIMARY KEY, qty integer CHECK (qty >= 0))",
			"CREATE TABLE audit (id int PRIMARY KEY, note text)")
		stock := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "stock"}, Key: []int{0},
			Columns: []sluice.Column{{Name: "sku", Type: "text"}, {Name: "qty", Type: "integer", Nullable: true}}}
		audit := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "audit"}, Key: []int{0},
			Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "note", Type: "text", Nullable: true}}}
		tg := openTarget(t, url, mode)
		ctx := context.Background()
		cp1 := sluice.Checkpoint{Stream: "s", Seq: 1, Position: sluice.Position{Kind: "test", Token: "1"}}
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(stock, "a", "1"), ins(audit, "1", "first")}, nil), cp1); err != nil {
			t.Fatal(err)
		}
		before := append(dump(t, conn, "stock"), dump(t, conn, "audit")...)

		bad := apply.Compact([]sluice.Change{ins(audit, "2", "second"), del(stock, "a"), ins(stock, "b", "2"), ins(stock, "c", "-1")}, nil)
		err := tg.Apply(ctx, bad, sluice.Checkpoint{Stream: "s", Seq: 2, Position: sluice.Position{Kind: "test", Token: "2"}})
		if err == nil {
			t.Fatal("Apply of a row violating a CHECK constraint succeeded")
		}
		t.Logf("error: %v", err)
		if tn, ok := sluice.ErrTable(err); !ok || tn != stock.Name {
			t.Errorf("the error names table %v (%v) for the log, want stock", tn, ok)
		}
		for _, want := range []string{"upsert", "public.stock", "23514"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
		if after := append(dump(t, conn, "stock"), dump(t, conn, "audit")...); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("rows changed by a failed batch: %v, want %v", after, before)
		}
		if st := tg.conn.PgConn().TxStatus(); st != 'I' {
			t.Errorf("connection left in transaction status %c after a failed batch", st)
		}
		if got, _, err := tg.ReadCheckpoint(ctx, "s"); err != nil || got.Seq != 1 {
			t.Errorf("checkpoint after a failed batch = %+v, %v; want seq 1", got, err)
		}
		// The target stays usable.
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(stock, "c", "5")}, nil), sluice.Checkpoint{Stream: "s", Seq: 2}); err != nil {
			t.Fatalf("Apply after a failure: %v", err)
		}
		if got := dump(t, conn, "stock"); fmt.Sprint(got) != "[(a,1) (c,5)]" {
			t.Errorf("stock = %v", got)
		}
	})
}

// TestRoundTrips counts the round trips a 1,000-change batch costs through a
// 0 ms WAN proxy.
func TestRoundTrips(t *testing.T) {
	pg := dbtest.PG(t)
	url, conn := testDB(t,
		"CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, balance numeric(12,2))",
		"CREATE TABLE events (account_id bigint, n integer, kind text, PRIMARY KEY (account_id, n))",
		"INSERT INTO accounts SELECT g, 'owner ' || g, g * 10 FROM generate_series(1, 300) g",
		"INSERT INTO events SELECT g, 1, 'seed' FROM generate_series(1, 200) g")
	proxied, proxy := dbtest.ViaProxy(t, url, pg.Addr(), 0)

	accounts := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "accounts"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "owner", Type: "text", Nullable: true}, {Name: "balance", Type: "numeric(12,2)", Nullable: true}}}
	events := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "events"}, Key: []int{0, 1},
		Columns: []sluice.Column{{Name: "account_id", Type: "bigint"}, {Name: "n", Type: "integer"}, {Name: "kind", Type: "text", Nullable: true}}}

	// 1,000 changes to distinct keys, so compaction leaves 1,000 row
	// operations: updates and deletes of existing rows, new inserts.
	batch := func(round int) *apply.Batch {
		var cs []sluice.Change
		for i := 1; i <= 200; i++ {
			cs = append(cs, upd(accounts, strconv.Itoa(i), "owner "+strconv.Itoa(i), strconv.Itoa(i*round)+".50"))
		}
		for i := 201; i <= 300; i++ {
			cs = append(cs, del(accounts, strconv.Itoa(i)))
		}
		for i := 1; i <= 200; i++ {
			cs = append(cs, ins(accounts, strconv.Itoa(1000*round+i), "new", "0.01"))
		}
		for i := 1; i <= 100; i++ {
			cs = append(cs, del(events, strconv.Itoa(i), "1"))
		}
		for i := 1; i <= 400; i++ {
			cs = append(cs, ins(events, strconv.Itoa(i), strconv.Itoa(round+1), "k"))
		}
		if len(cs) != 1000 {
			t.Fatalf("%d changes", len(cs))
		}
		b := apply.Compact(cs, nil)
		if b.Rows != 1000 {
			t.Fatalf("compacted to %d rows", b.Rows)
		}
		return b
	}
	var counts []string
	for round, mode := range []Mode{Pipelined, PerRow} {
		tg := openTarget(t, proxied, mode)
		ctx := context.Background()
		if err := tg.Preflight(ctx, []*sluice.Table{accounts, events}); err != nil {
			t.Fatal(err)
		}
		proxy.ResetRoundTrips()
		start := time.Now()
		if err := tg.Apply(ctx, batch(round+1), sluice.Checkpoint{Stream: "rt", Seq: uint64(round + 1)}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		n := proxy.RoundTrips()
		counts = append(counts, fmt.Sprintf("%v: %d round trips, %v", mode, n, took))
		switch mode {
		case Pipelined:
			if n > 2 {
				t.Errorf("pipelined 1,000-change batch cost %d round trips, want ≤ 2", n)
			}
		case PerRow:
			if n < 1000 {
				t.Errorf("per-row 1,000-change batch cost %d round trips, want ≥ 1,000", n)
			}
		}
		var accountsN, eventsN int
		if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM events)").Scan(&accountsN, &eventsN); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s; accounts=%d events=%d", counts[len(counts)-1], accountsN, eventsN)

		proxy.ResetRoundTrips()
		if _, err := tg.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if n := proxy.RoundTrips(); n != 1 {
			t.Errorf("Ping cost %d round trips, want 1", n)
		}
	}
}

func TestPreflightErrors(t *testing.T) {
	pg := dbtest.PG(t)
	url, _ := testDB(t,
		"CREATE TABLE ok (id bigint PRIMARY KEY, small integer, name varchar(200), note text, amount numeric(14,4), f double precision, code char(3), extra text, extra2 int NOT NULL DEFAULT 0)",
		"CREATE TABLE nokey (id bigint, v text)",
		"CREATE TABLE wrongkey (a int, b int, v text, PRIMARY KEY (a))",
		"CREATE TABLE narrow (id int PRIMARY KEY, n integer, s varchar(10), t varchar(10), m numeric(10,2), ts timestamp, c char(4))",
		"CREATE TABLE missingcol (id int PRIMARY KEY)",
		"CREATE TABLE mandatory (id int PRIMARY KEY, must text NOT NULL)")
	ctx := context.Background()

	t.Run("unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, err = Open(ctx, "postgres://u:p@"+addr+"/db?sslmode=disable&connect_timeout=5", Config{})
		wantErr(t, err, "cannot reach target PostgreSQL at "+addr)
	})
	t.Run("wrong password", func(t *testing.T) {
		u := fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable", pg.User, "wrong", pg.Addr())
		_, err := Open(ctx, u, Config{})
		wantErr(t, err, "authentication failed for user \""+pg.User+"\"", pg.Addr())
	})
	t.Run("missing database", func(t *testing.T) {
		_, err := Open(ctx, pg.URL("no_such_db"), Config{})
		wantErr(t, err, `database "no_such_db" does not exist`)
	})

	tg := openTarget(t, url, Pipelined)
	table := func(name string, key []int, cols ...string) *sluice.Table {
		tb := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: name}, Key: key}
		for _, c := range cols {
			n, typ, _ := strings.Cut(c, " ")
			tb.Columns = append(tb.Columns, sluice.Column{Name: n, Type: typ, Nullable: true})
		}
		tb.Columns[key[0]].Nullable = false
		return tb
	}
	t.Run("compatible", func(t *testing.T) {
		err := tg.Preflight(ctx, []*sluice.Table{table("ok", []int{0},
			"id integer", "small smallint", "name varchar(100)", "note varchar(20)", "amount numeric(12,4)", "f real", "code character(3)")})
		if err != nil {
			t.Fatal(err)
		}
	})
	cases := []struct {
		name  string
		table *sluice.Table
		want  []string
	}{
		{"missing table", table("absent", []int{0}, "id integer"),
			[]string{"target table public.absent does not exist in database", "create it with the source's columns"}},
		{"no primary key", table("nokey", []int{0}, "id bigint", "v text"),
			[]string{"target table public.nokey has no primary key: add PRIMARY KEY (id)"}},
		{"primary key mismatch", table("wrongkey", []int{0, 1}, "a integer", "b integer", "v text"),
			[]string{"primary key of public.wrongkey is (a) on the target but (a, b) on the source"}},
		{"missing column", table("missingcol", []int{0}, "id integer", "gone text"),
			[]string{"column public.missingcol.gone is missing on the target", "ADD COLUMN gone text"}},
		{"target-only NOT NULL column", table("mandatory", []int{0}, "id integer"),
			[]string{"column public.mandatory.must exists only on the target and is NOT NULL without a default"}},
		{"narrow types", table("narrow", []int{0}, "id integer", "n bigint", "s varchar(100)", "t text", "m numeric(12,4)", "ts timestamp with time zone", "c char(5)"),
			[]string{
				"column public.narrow.n is integer on the target but bigint on the source: values may not fit",
				"alter the target column to bigint",
				"column public.narrow.s is character varying(10) on the target but varchar(100) on the source",
				"column public.narrow.t is character varying(10) on the target but text on the source",
				"column public.narrow.m is numeric(10,2) on the target but numeric(12,4) on the source",
				"column public.narrow.ts is timestamp without time zone on the target but timestamp with time zone on the source",
				"column public.narrow.c is character(4) on the target but char(5) on the source",
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := tg.Preflight(ctx, []*sluice.Table{c.table})
			wantErr(t, err, c.want...)
		})
	}
}

func wantErr(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", want)
	}
	t.Logf("error: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q", w)
		}
	}
}

// TestTooLongValueFails checks that a value too long for the target column
// is an error, not silently truncated by the cast.
func TestTooLongValueFails(t *testing.T) {
	url, conn := testDB(t, "CREATE TABLE short (id int PRIMARY KEY, s varchar(3), c char(2), m numeric(4,1))")
	short := &sluice.Table{Name: sluice.TableName{Name: "short"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "s", Type: "varchar(3)"}, {Name: "c", Type: "char(2)"}, {Name: "m", Type: "numeric(4,1)"}}}
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	for _, vals := range [][]string{{"1", "abcd", "ab", "1.0"}, {"2", "abc", "abc", "1.0"}, {"3", "abc", "ab", "12345.0"}} {
		err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(short, vals...)}, nil), sluice.Checkpoint{})
		if err == nil {
			t.Errorf("Apply of %v succeeded; rows now %v", vals, dump(t, conn, "short"))
			continue
		}
		if retry, _ := apply.IsRetryable(err); retry {
			t.Errorf("a data error is marked retryable: %v", err)
		}
	}
}

// TestKilledTransaction kills the target's backend while its pipelined
// transaction waits on a lock, as a transaction killer would: Apply must say
// the batch was killed and may be retried, and the next Apply must work.
func TestKilledTransaction(t *testing.T) {
	url, admin := testDB(t, "CREATE TABLE k (id int PRIMARY KEY, v text)")
	k := &sluice.Table{Name: sluice.TableName{Name: "k"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "v", Type: "text"}}}
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	if err := tg.Preflight(ctx, []*sluice.Table{k}); err != nil {
		t.Fatal(err)
	}
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE k"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- tg.Apply(ctx, apply.Compact([]sluice.Change{ins(k, "1", "a")}, nil), sluice.Checkpoint{Stream: "s", Seq: 1})
	}()
	// A second connection does the killing, as txkiller does.
	killer, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var killed bool
		err := killer.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'sluice' AND wait_event_type = 'Lock'`).Scan(&killed)
		if err != nil {
			t.Fatal(err)
		}
		if killed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the target's transaction never waited on the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = <-errc
	tx.Rollback(ctx)
	t.Logf("error: %v", err)
	retry, killed := apply.IsRetryable(err)
	if !retry || !killed {
		t.Fatalf("IsRetryable(%v) = %v, %v; want true, true", err, retry, killed)
	}
	if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(k, "1", "a")}, nil), sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
		t.Fatalf("Apply after the kill: %v", err)
	}
	if got := dump(t, admin, "k"); fmt.Sprint(got) != "[(1,a)]" {
		t.Fatalf("k = %v", got)
	}
}

// TestDroppedConnection breaks the link between applies: the Target
// reconnects by itself, and a failed Apply is retryable.
func TestDroppedConnection(t *testing.T) {
	pg := dbtest.PG(t)
	url, admin := testDB(t, "CREATE TABLE d (id int PRIMARY KEY)")
	proxied, proxy := dbtest.ViaProxy(t, url, pg.Addr(), 0)
	d := &sluice.Table{Name: sluice.TableName{Name: "d"}, Key: []int{0}, Columns: []sluice.Column{{Name: "id", Type: "integer"}}}
	tg := openTarget(t, proxied, Pipelined)
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		proxy.DropConnections()
		var err error
		for range 3 {
			err = tg.Apply(ctx, apply.Compact([]sluice.Change{ins(d, strconv.Itoa(i))}, nil), sluice.Checkpoint{Stream: "s", Seq: uint64(i)})
			if err == nil {
				break
			}
			if retry, _ := apply.IsRetryable(err); !retry {
				t.Fatalf("error after a dropped connection is not retryable: %v", err)
			}
			t.Logf("retrying after: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := dump(t, admin, "d"); fmt.Sprint(got) != "[(1) (2) (3)]" {
		t.Fatalf("d = %v", got)
	}
}

// TestOddIdentifiers applies rows to a table whose schema, table and column
// names need quoting, including a domain-typed column, so the server parses
// the generated SQL.
func TestOddIdentifiers(t *testing.T) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn := testDB(t,
			`CREATE SCHEMA "My ""Schema"""`,
			`CREATE DOMAIN "My ""Schema""".short AS varchar(3) CHECK (VALUE <> 'bad')`,
			`CREATE TABLE "My ""Schema"""."Tä ble" ("a""b" int, "select" text, "ü c" "My ""Schema""".short, "$1" text, PRIMARY KEY ("a""b", "select"))`)
		tbl := &sluice.Table{Name: sluice.TableName{Schema: `My "Schema"`, Name: "Tä ble"}, Key: []int{0, 1},
			Columns: []sluice.Column{{Name: `a"b`, Type: "integer"}, {Name: "select", Type: "text"},
				{Name: "ü c", Type: `"My ""Schema""".short`, Nullable: true}, {Name: "$1", Type: "text", Nullable: true}}}
		tg := openTarget(t, url, mode)
		ctx := context.Background()
		if err := tg.Preflight(ctx, []*sluice.Table{tbl}); err != nil {
			t.Fatal(err)
		}
		b := apply.Compact([]sluice.Change{ins(tbl, "1", "x", "abc", "$2"), ins(tbl, "2", "y", null, null), del(tbl, "3", "z")}, nil)
		if err := tg.Apply(ctx, b, sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		table := `"My ""Schema"""."Tä ble"`
		if got := dump(t, conn, table); fmt.Sprint(got) != `[(1,x,abc,$2) (2,y,,)]` {
			t.Fatalf("rows = %v", got)
		}
		// The domain's length and CHECK still apply: the cast goes to the
		// base type without its typmod, the assignment to the domain.
		for _, v := range []string{"abcd", "bad"} {
			err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(tbl, "1", "x", v, null)}, nil), sluice.Checkpoint{})
			if err == nil {
				t.Errorf("value %q accepted for a varchar(3) domain excluding 'bad'", v)
			}
		}
	})
}

// TestTxTimeout reads the limits the server puts on the applier's session:
// none by default; the shortest of statement_timeout and
// idle_in_transaction_session_timeout when the database sets them.
func TestTxTimeout(t *testing.T) {
	url, conn := testDB(t)
	ctx := context.Background()
	tg := openTarget(t, url, Pipelined)
	if d, what, err := tg.TxTimeout(ctx); err != nil || d != 0 {
		t.Fatalf("TxTimeout = %s (%s), %v; want none", d, what, err)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		fmt.Sprintf("ALTER DATABASE %q SET statement_timeout = '90s'", db),
		fmt.Sprintf("ALTER DATABASE %q SET idle_in_transaction_session_timeout = '1min'", db),
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	tg = openTarget(t, url, Pipelined) // a new session sees the database's settings
	d, what, err := tg.TxTimeout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d != time.Minute || !strings.Contains(what, "idle_in_transaction_session_timeout") {
		t.Errorf("TxTimeout = %s (%s), want 1m0s from idle_in_transaction_session_timeout", d, what)
	}
}

// TestOldestTransaction: the stall diagnosis names the session whose open
// transaction holds the target back.
func TestOldestTransaction(t *testing.T) {
	url, conn := testDB(t, "CREATE TABLE k (id int PRIMARY KEY)")
	ctx := context.Background()
	// A transaction open in another database does not hold this one back.
	other, err := pgx.Connect(ctx, dbtest.PG(t).URL(dbtest.PGDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	otherTx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer otherTx.Rollback(ctx)
	if _, err := otherTx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	tg := openTarget(t, url, Pipelined)
	if what, err := tg.OldestTransaction(ctx); err != nil || what != "" {
		t.Fatalf("OldestTransaction = %q, %v; want none", what, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE k IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	what, err := tg.OldestTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("pg_terminate_backend(%d)", pid); !strings.Contains(what, want) || !strings.Contains(what, "idle in transaction") {
		t.Errorf("OldestTransaction = %q, want it to name pid %d idle in transaction", what, pid)
	}
}
