package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/txkiller"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testDB creates a fresh database, runs ddl in it and returns its DSN and an
// admin connection pool for checks.
func testDB(t *testing.T, ddl ...string) (string, *sql.DB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs MariaDB")
	}
	d := dbtest.MariaEngine.DatabaseWith(t, map[string]string{"multiStatements": "true", "time_zone": "'+00:00'"}, ddl...)
	return d.DSN, d.My
}

func boolp(b bool) *bool { return &b }

func openTarget(t *testing.T, dsn string, mode Mode, multi *bool) *Target {
	t.Helper()
	tg, err := Open(context.Background(), dsn, Config{Mode: mode, MultiStatements: multi})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close(context.Background()) })
	return tg
}

type variant struct {
	name  string
	mode  Mode
	multi *bool
}

var variants = []variant{
	{"multi", Pipelined, nil},
	{"no-multi", Pipelined, boolp(false)},
	{"per-row", PerRow, nil},
}

func each(t *testing.T, f func(t *testing.T, v variant)) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { f(t, v) })
	}
}

// dump returns a table's rows, each as its columns' text joined by |, sorted
// by the first column.
func dump(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query("SELECT * FROM " + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(cols))
		for i, v := range vals {
			if v == nil {
				parts[i] = "NULL"
			} else {
				parts[i] = string(v)
			}
		}
		out = append(out, strings.Join(parts, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
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

// row makes a Row from text; "\x00" alone stands for NULL.
func row(vals ...string) sluice.Row {
	r := make(sluice.Row, len(vals))
	for i, v := range vals {
		if v == null {
			r[i] = sluice.Null
		} else {
			r[i] = sluice.Text(v)
		}
	}
	return r
}

const null = "\x00"

func table(name string, key []int, cols ...string) *sluice.Table {
	tb := &sluice.Table{Name: sluice.TableName{Name: name}, Key: key}
	for _, c := range cols {
		n, typ, _ := strings.Cut(c, " ")
		tb.Columns = append(tb.Columns, sluice.Column{Name: n, Type: typ, Nullable: true})
	}
	for _, k := range key {
		tb.Columns[k].Nullable = false
	}
	return tb
}

func TestTypesRoundTrip(t *testing.T) {
	type col struct {
		name, typ string
		vals      []string // one per row; row 0 holds NULLs except id
	}
	cols := []col{
		{"id", "int", []string{"1", "2", "3", "4"}},
		{"c_tinyint", "tinyint", []string{null, "-128", "127", "0"}},
		{"c_utinyint", "tinyint unsigned", []string{null, "0", "255", "7"}},
		{"c_smallint", "smallint", []string{null, "-32768", "32767", "0"}},
		{"c_mediumint", "mediumint", []string{null, "-8388608", "8388607", "0"}},
		{"c_umediumint", "mediumint unsigned", []string{null, "16777215", "0", "1"}},
		{"c_int", "int", []string{null, "-2147483648", "2147483647", "0"}},
		{"c_uint", "int unsigned", []string{null, "4294967295", "0", "1"}},
		{"c_bigint", "bigint", []string{null, "-9223372036854775808", "9223372036854775807", "9007199254740993"}},
		{"c_ubigint", "bigint unsigned", []string{null, "18446744073709551615", "0", "9007199254740993"}},
		{"c_decimal", "decimal(30,10)", []string{null, "-12345678901234567890.1234567890", "0.0000000001", "0.0000000000"}},
		{"c_udecimal", "decimal(5,2) unsigned", []string{null, "999.99", "0.00", "1.50"}},
		{"c_float", "float", []string{null, "3.40282e+38", "-1.1", "0"}},
		{"c_double", "double", []string{null, "0.1", "-1.7976931348623157e+308", "2.2250738585072014e-308"}},
		{"c_char", "char(5)", []string{null, "ab", "abcde", ""}},
		{"c_varchar", "varchar(40)", []string{null, "héllo 'q' \"dq\" \\back\\ \\' ''", "NULL", "ü€😀"}},
		{"c_text", "text", []string{null, "line\nnew\ttab\r\x1a \\0 \\n", "", "\\"}},
		{"c_binary", "binary(4)", []string{null, "\x00\x01'\\", "\xff\xfe\x00\x00", "ab\x00\x00"}},
		{"c_varbinary", "varbinary(20)", []string{null, "\x00'\"\\\n\r\x1a\xff", "", "plain"}},
		{"c_blob", "blob", []string{null, "\x00\x00\xc3\x28 invalid utf8 \xff", "", "'"}},
		{"c_date", "date", []string{null, "2024-02-29", "1000-01-01", "0000-00-00"}},
		{"c_datetime", "datetime(6)", []string{null, "2024-01-02 03:04:05.123456", "9999-12-31 23:59:59.999999", "1970-01-01 00:00:00.000000"}},
		{"c_timestamp", "timestamp(6) NULL", []string{null, "2024-01-02 03:04:05.123456", "2038-01-19 03:14:07.999999", "1970-01-01 00:00:01.000000"}},
		{"c_time", "time(6)", []string{null, "-838:59:59.000000", "838:59:59.000000", "12:34:56.789012"}},
		{"c_year", "year", []string{null, "2024", "1901", "0"}},
		{"c_json", "json", []string{null, `{"a": [1, 2], "b": "x\"y", "c": "\\u00e9"}`, `null`, `"NULL"`}},
		{"c_enum", "enum('a','b c','it''s')", []string{null, "a", "b c", "it's"}},
		{"c_set", "set('x','y','z')", []string{null, "x,z", "", "x,y,z"}},
		{"c_bit", "bit(10)", []string{null, "\x03\xff", "\x00\x00", "\x01\x00"}},
		{"c_bool", "tinyint(1)", []string{null, "1", "0", "-1"}},
	}
	var defs []string
	var srcCols []string
	for _, c := range cols {
		defs = append(defs, quoteIdent(c.name)+" "+c.typ)
		srcCols = append(srcCols, c.name+" "+strings.TrimSuffix(c.typ, " NULL"))
	}
	tbl := table("all_types", []int{0}, srcCols...)
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t, "CREATE TABLE all_types ("+strings.Join(defs, ", ")+", PRIMARY KEY (id)) DEFAULT CHARSET=utf8mb4")
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
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
		for range 2 { // the second apply is a replay (updates in place)
			if err := tg.Apply(ctx, apply.Compact(changes, nil), sluice.Checkpoint{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cols {
			rows, err := db.Query("SELECT " + quoteIdent(c.name) + " FROM all_types ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			r := 0
			for rows.Next() {
				var got sql.RawBytes
				if err := rows.Scan(&got); err != nil {
					t.Fatal(err)
				}
				want := c.vals[r]
				switch {
				case got == nil && want != null:
					t.Errorf("%s row %d: got NULL, want %q", c.name, r, want)
				case got != nil && want == null:
					t.Errorf("%s row %d: got %q, want NULL", c.name, r, got)
				case got != nil && string(got) != want:
					t.Errorf("%s row %d: got %q, want %q", c.name, r, got, want)
				}
				r++
			}
			rows.Close()
		}
	})
}

func TestCompositeKeysDeletesIdempotence(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t,
			"CREATE TABLE `lines` (order_id bigint, line int, sku text, qty int, PRIMARY KEY (order_id, line))",
			"INSERT INTO `lines` VALUES (1, 1, 'old', 1), (1, 2, 'gone', 2), (2, 1, 'keep', 3)")
		lines := table("lines", []int{0, 1}, "order_id bigint", "line int", "sku text", "qty int")
		tg := openTarget(t, dsn, v.mode, v.multi)
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
		want := []string{"1|1|new|10", "2|1|keep|3", "3|1|added|NULL"}
		for i := range 2 { // the second apply is a replay and must change nothing
			if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
				t.Fatalf("apply %d: %v", i, err)
			}
			if got := dump(t, db, "`lines`"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("apply %d: got %v, want %v", i, got, want)
			}
		}
	})
}

func TestUnchangedColumnsKept(t *testing.T) {
	dsn, db := testDB(t,
		"CREATE TABLE docs (id int PRIMARY KEY, title text, body text)",
		"INSERT INTO docs VALUES (1, 't1', 'big body 1'), (2, 't2', 'big body 2')")
	docs := table("docs", []int{0}, "id int", "title text", "body text")
	tg := openTarget(t, dsn, Pipelined, nil)
	unchanged := sluice.Value{Unchanged: true}
	b := &apply.Batch{Tables: []*apply.TableBatch{{Table: docs, Upserts: []sluice.Row{
		{sluice.Text("1"), sluice.Text("t1 new"), unchanged},
		{sluice.Text("2"), sluice.Text("t2 new"), sluice.Text("body 2 new")},
	}}}}
	if err := tg.Apply(context.Background(), b, sluice.Checkpoint{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"1|t1 new|big body 1", "2|t2 new|body 2 new"}
	if got := dump(t, db, "docs"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestOpenURLSchemes: every MySQL connection-string form sluice accepts
// (config and connstr take mariadb:// as well as mysql://) opens a target
// that writes rows and its checkpoint.
func TestOpenURLSchemes(t *testing.T) {
	m := dbtest.Maria(t)
	for _, c := range []struct{ name, scheme string }{
		{"mysql", "mysql://"},
		{"mariadb", "mariadb://"},
		{"upper case", "MariaDB://"},
		{"dsn", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn, db := testDB(t, "CREATE TABLE t (id int PRIMARY KEY, v text)")
			conn := dsn
			if c.scheme != "" {
				name := dsn[strings.LastIndexByte(dsn, '/')+1:]
				conn = c.scheme + strings.TrimPrefix(m.URL(name), "mysql://")
			}
			tg := openTarget(t, conn, Pipelined, nil)
			ctx := context.Background()
			tt := table("t", []int{0}, "id int", "v text")
			cp := sluice.Checkpoint{Stream: "s", Seq: 1, Position: sluice.Position{Kind: "test", Token: "1"}}
			if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(tt, "1", "a"), ins(tt, "2", "b")}, nil), cp); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := tg.ReadCheckpoint(ctx, "s"); err != nil || !ok || got.Seq != 1 {
				t.Fatalf("ReadCheckpoint = %+v, %v, %v", got, ok, err)
			}
			if got, want := dump(t, db, "t"), []string{"1|a", "2|b"}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("rows %v, want %v", got, want)
			}
		})
	}
}

func TestCheckpoint(t *testing.T) {
	m := dbtest.Maria(t)
	dsn, _ := testDB(t)
	// The mysql:// URL form.
	name := dsn[strings.LastIndexByte(dsn, '/')+1:]
	tg := openTarget(t, m.URL(name), Pipelined, nil)
	ctx := context.Background()
	if _, ok, err := tg.ReadCheckpoint(ctx, "s1"); err != nil || ok {
		t.Fatalf("ReadCheckpoint of a new stream = %v, %v; want false, nil", ok, err)
	}
	at := time.Date(2026, 11, 30, 7, 0, 0, 123456000, time.UTC)
	for seq := uint64(1); seq <= 2; seq++ {
		cp := sluice.Checkpoint{Stream: "s1", Seq: seq, Applied: 1000 * seq,
			Position: sluice.Position{Kind: "binlog", Token: "mysql-bin.000001:'" + strconv.FormatUint(seq, 10)}, Time: at}
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
	tg2 := openTarget(t, dsn, PerRow, nil)
	if got, ok, err := tg2.ReadCheckpoint(ctx, "s1"); err != nil || !ok || got.Seq != 2 {
		t.Fatalf("after reopen: %+v, %v, %v", got, ok, err)
	}
}

func TestFailedStatementRollsBack(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t,
			"CREATE TABLE stock (sku varchar(10) PRIMARY KEY, qty int CHECK (qty >= 0))",
			"CREATE TABLE audit (id int PRIMARY KEY, note text)")
		stock := table("stock", []int{0}, "sku varchar(10)", "qty int")
		stock.Columns[0].Collation = "utf8mb4_unicode_ci" // the target's, as from a MySQL source
		audit := table("audit", []int{0}, "id int", "note text")
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		cp1 := sluice.Checkpoint{Stream: "s", Seq: 1, Position: sluice.Position{Kind: "test", Token: "1"}}
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(stock, "a", "1"), ins(audit, "1", "first")}, nil), cp1); err != nil {
			t.Fatal(err)
		}
		before := append(dump(t, db, "stock"), dump(t, db, "audit")...)

		// audit's upsert runs first and succeeds; stock's delete succeeds;
		// stock's upsert fails on the CHECK constraint.
		bad := apply.Compact([]sluice.Change{ins(audit, "2", "second"), del(stock, "a"), ins(stock, "b", "2"), ins(stock, "c", "-1"),
			ins(audit, "3", "third")}, nil)
		err := tg.Apply(ctx, bad, sluice.Checkpoint{Stream: "s", Seq: 2, Position: sluice.Position{Kind: "test", Token: "2"}})
		if err == nil {
			t.Fatal("Apply of a row violating a CHECK constraint succeeded")
		}
		t.Logf("error: %v", err)
		if tn, ok := sluice.ErrTable(err); !ok || tn != stock.Name {
			t.Errorf("the error names table %v (%v) for the log, want stock", tn, ok)
		}
		for _, want := range []string{"upsert", "stock", "4025"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
		if retry, _ := apply.IsRetryable(err); retry {
			t.Errorf("a constraint violation is marked retryable")
		}
		if after := append(dump(t, db, "stock"), dump(t, db, "audit")...); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("rows changed by a failed batch: %v, want %v", after, before)
		}
		if got, _, err := tg.ReadCheckpoint(ctx, "s"); err != nil || got.Seq != 1 {
			t.Errorf("checkpoint after a failed batch = %+v, %v; want seq 1", got, err)
		}
		// The connection is not left inside a transaction.
		var inTx int
		if err := tg.conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTx); err != nil || inTx != 0 {
			t.Errorf("@@in_transaction after a failed batch = %d, %v", inTx, err)
		}
		// The target stays usable.
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(stock, "c", "5")}, nil), sluice.Checkpoint{Stream: "s", Seq: 2}); err != nil {
			t.Fatalf("Apply after a failure: %v", err)
		}
		if got := dump(t, db, "stock"); fmt.Sprint(got) != "[a|1 c|5]" {
			t.Errorf("stock = %v", got)
		}
	})
}

// TestRoundTrips counts the round trips a 1,000-change batch over three
// tables costs through a 0 ms WAN proxy.
func TestRoundTrips(t *testing.T) {
	m := dbtest.Maria(t)
	dsn, db := testDB(t,
		"CREATE TABLE accounts (id bigint PRIMARY KEY, owner varchar(50), balance decimal(12,2))",
		"CREATE TABLE events (account_id bigint, n int, kind varchar(10), PRIMARY KEY (account_id, n))",
		"CREATE TABLE users (id int PRIMARY KEY, email varchar(100) NULL UNIQUE, name text)",
		"INSERT INTO accounts SELECT seq, CONCAT('owner ', seq), seq * 10 FROM seq_1_to_300",
		"INSERT INTO events SELECT seq, 1, 'seed' FROM seq_1_to_200",
		"INSERT INTO users SELECT seq, CONCAT('u', seq, '@x'), 'n' FROM seq_1_to_100")
	proxied, proxy := dbtest.ViaProxy(t, dsn, m.Addr(), 0)

	accounts := table("accounts", []int{0}, "id bigint", "owner varchar(50)", "balance decimal(12,2)")
	events := table("events", []int{0, 1}, "account_id bigint", "n int", "kind varchar(10)")
	users := table("users", []int{0}, "id int", "email varchar(100)", "name text")
	users.Columns[1].Collation = "utf8mb4_unicode_ci" // the target's, as from a MySQL source

	batch := func(round int) *apply.Batch {
		var cs []sluice.Change
		for i := 1; i <= 150; i++ {
			cs = append(cs, upd(accounts, strconv.Itoa(i), "owner "+strconv.Itoa(i), strconv.Itoa(i*round)+".50"))
		}
		for i := 201; i <= 300; i++ {
			cs = append(cs, del(accounts, strconv.Itoa(i)))
		}
		for i := 1; i <= 150; i++ {
			cs = append(cs, ins(accounts, strconv.Itoa(1000*round+i), "new", "0.01"))
		}
		for i := 1; i <= 100; i++ {
			cs = append(cs, del(events, strconv.Itoa(i), "1"))
		}
		for i := 1; i <= 300; i++ {
			cs = append(cs, ins(events, strconv.Itoa(i), strconv.Itoa(round+1), "k"))
		}
		// users: the unique emails rotate by one among the first 100 rows
		// (every row takes the value another row gives up), 100 rows are
		// inserted.
		for i := 1; i <= 100; i++ {
			next := (i+round-1)%100 + 1
			cs = append(cs, upd(users, strconv.Itoa(i), "u"+strconv.Itoa(next)+"@x", "n"+strconv.Itoa(round)))
		}
		for i := 1; i <= 100; i++ {
			cs = append(cs, ins(users, strconv.Itoa(1000*round+i), null, "new"))
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
	for round, v := range variants {
		tg := openTarget(t, proxied, v.mode, v.multi)
		ctx := context.Background()
		if err := tg.Preflight(ctx, []*sluice.Table{accounts, events, users}); err != nil {
			t.Fatal(err)
		}
		if v.multi == nil && !tg.multi {
			t.Fatal("multi-statements not detected on MariaDB")
		}
		proxy.ResetRoundTrips()
		start := time.Now()
		if err := tg.Apply(ctx, batch(round+1), sluice.Checkpoint{Stream: "rt", Seq: uint64(round + 1)}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		n := proxy.RoundTrips()
		t.Logf("%s: %d round trips, %v", v.name, n, took)
		switch v.name {
		case "multi":
			if n != 1 {
				t.Errorf("multi-statement 1,000-change batch cost %d round trips, want 1", n)
			}
		case "no-multi":
			if n > 8 {
				t.Errorf("1,000-change batch without multi-statements cost %d round trips, want ≤ 8", n)
			}
		case "per-row":
			if n < 1000 {
				t.Errorf("per-row 1,000-change batch cost %d round trips, want ≥ 1,000", n)
			}
		}
		var accountsN, eventsN, usersN, distinct int
		if err := db.QueryRow("SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM events), (SELECT count(*) FROM users), (SELECT count(DISTINCT email) FROM users WHERE id <= 100)").
			Scan(&accountsN, &eventsN, &usersN, &distinct); err != nil {
			t.Fatal(err)
		}
		var email string
		if err := db.QueryRow("SELECT email FROM users WHERE id = 1").Scan(&email); err != nil {
			t.Fatal(err)
		}
		if wantEmail := "u" + strconv.Itoa(round+2) + "@x"; email != wantEmail || distinct != 100 {
			t.Errorf("users: id 1 has %s (want %s), %d distinct emails (want 100)", email, wantEmail, distinct)
		}
		t.Logf("accounts=%d events=%d users=%d", accountsN, eventsN, usersN)

		proxy.ResetRoundTrips()
		if _, err := tg.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if n := proxy.RoundTrips(); n != 1 {
			t.Errorf("Ping cost %d round trips, want 1", n)
		}
	}
}

// TestUniqueKeys applies, in one batch, a swap of two unique values and a
// value released by one row and taken by another (an existing row and a new
// one), on a table with two unique indexes, one of them composite.
func TestUniqueKeys(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t,
			"CREATE TABLE people (id int PRIMARY KEY, email varchar(50) NULL, a int NULL, b int NULL, note text, UNIQUE KEY email (email), UNIQUE KEY ab (a, b))",
			"INSERT INTO people VALUES (1, 'x@x', 1, 1, 'one'), (2, 'y@y', 2, 2, 'two'), (3, 'z@z', 3, 3, 'three'), (4, 'w@w', 4, 4, 'four'), (5, 'v@v', 5, 5, 'five')")
		people := table("people", []int{0}, "id int", "email varchar(50)", "a int", "b int", "note text")
		people.Columns[1].Collation = "utf8mb4_unicode_ci" // the target's, as from a MySQL source
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		if err := tg.Preflight(ctx, []*sluice.Table{people}); err != nil {
			t.Fatal(err)
		}
		b := apply.Compact([]sluice.Change{
			// Swap emails and (a, b) of 1 and 2, through a temporary value
			// as the source must do it.
			upd(people, "1", "tmp", "1", "1", "one"),
			upd(people, "2", "x@x", "1", "1", "two"),
			upd(people, "1", "y@y", "2", "2", "one"),
			// 3 gives z@z up, new row 6 takes it; 4 is deleted, 7 takes
			// its (a, b).
			ins(people, "6", "z@z", "6", "6", "six"),
			del(people, "4"),
			ins(people, "7", "q@q", "4", "4", "seven"),
			upd(people, "3", "zz@z", "3", "3", "three"),
			// 5 keeps its values.
			upd(people, "5", "v@v", "5", "5", "five!"),
		}, nil)
		// Compaction put 1 and 2 before 3 and 6 … whatever the order, the
		// batch must apply.
		want := []string{"1|y@y|2|2|one", "2|x@x|1|1|two", "3|zz@z|3|3|three", "5|v@v|5|5|five!", "6|z@z|6|6|six", "7|q@q|4|4|seven"}
		for i := range 2 {
			if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "u", Seq: 1}); err != nil {
				t.Fatalf("apply %d: %v", i, err)
			}
			if got := dump(t, db, "people"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("apply %d: got %v, want %v", i, got, want)
			}
		}
		// A collision with a row the batch does not touch fails, naming the
		// table, instead of overwriting that row.
		err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(people, "8", "x@x", null, null, "eight"), ins(people, "9", null, null, null, "nine")}, nil), sluice.Checkpoint{})
		if err == nil {
			t.Fatalf("a collision with an untouched row applied: %v", dump(t, db, "people"))
		}
		t.Logf("error: %v", err)
		if !strings.Contains(err.Error(), "people") {
			t.Errorf("error does not name the table: %v", err)
		}
		if got := dump(t, db, "people"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after the failed batch: got %v, want %v", got, want)
		}
	})
}

// TestKilledTransaction runs a batch that waits on a row lock held by
// another session while the transaction killer kills transactions older
// than 1 s: Apply must say the batch was killed and may be retried, nothing
// of it may be committed, and the next Apply must work.
func TestKilledTransaction(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		if v.mode == PerRow {
			t.Skip("same path as no-multi")
		}
		dsn, db := testDB(t, "CREATE TABLE k (id int PRIMARY KEY, v text)", "CREATE TABLE other (id int PRIMARY KEY)",
			"INSERT INTO k VALUES (1, 'locked')")
		k := table("k", []int{0}, "id int", "v text")
		other := table("other", []int{0}, "id int")
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		if err := tg.Preflight(ctx, []*sluice.Table{k, other}); err != nil {
			t.Fatal(err)
		}
		// Hold the row lock in a session of another database, so the
		// killer (limited to the test's database) leaves it alone.
		m := dbtest.Maria(t)
		locker, err := sql.Open("mysql", m.DSN("mysql"))
		if err != nil {
			t.Fatal(err)
		}
		defer locker.Close()
		lconn, err := locker.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer lconn.Close()
		name := dsn[strings.LastIndexByte(dsn, '/')+1:]
		if _, err := lconn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			t.Fatal(err)
		}
		if _, err := lconn.ExecContext(ctx, "SELECT * FROM "+quoteIdent(name)+".k WHERE id = 1 FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		killer, err := txkiller.StartMariaDB(ctx, dsn, time.Second, 250*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer killer.Stop()
		start := time.Now()
		err = tg.Apply(ctx, apply.Compact([]sluice.Change{ins(other, "1"), upd(k, "1", "new")}, nil), sluice.Checkpoint{Stream: "s", Seq: 1})
		t.Logf("after %v: error: %v", time.Since(start), err)
		lconn.ExecContext(ctx, "ROLLBACK")
		retry, killed := apply.IsRetryable(err)
		if !retry || !killed {
			t.Fatalf("IsRetryable(%v) = %v, %v; want true, true", err, retry, killed)
		}
		if got := dump(t, db, "other"); len(got) != 0 {
			t.Errorf("the killed batch committed rows: %v", got)
		}
		if _, ok, err := tg.ReadCheckpoint(ctx, "s"); ok || err != nil {
			t.Errorf("the killed batch committed its checkpoint (%v, %v)", ok, err)
		}
		killer.Stop()
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(other, "1"), upd(k, "1", "new")}, nil), sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
			t.Fatalf("Apply after the kill: %v", err)
		}
		if got := dump(t, db, "k"); fmt.Sprint(got) != "[1|new]" {
			t.Fatalf("k = %v", got)
		}
	})
}

// TestDroppedConnection breaks the link between applies: the Target
// reconnects by itself, and a failed Apply is retryable.
func TestDroppedConnection(t *testing.T) {
	m := dbtest.Maria(t)
	dsn, db := testDB(t, "CREATE TABLE d (id int PRIMARY KEY)")
	proxied, proxy := dbtest.ViaProxy(t, dsn, m.Addr(), 0)
	d := table("d", []int{0}, "id int")
	tg := openTarget(t, proxied, Pipelined, nil)
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
	if got := dump(t, db, "d"); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("d = %v", got)
	}
}

// TestPacketSplit applies a batch larger than the packet limit: statements
// are split and the packets are sent inside one transaction.
func TestPacketSplit(t *testing.T) {
	for _, v := range variants[:2] {
		t.Run(v.name, func(t *testing.T) {
			dsn, db := testDB(t, "CREATE TABLE big (id int PRIMARY KEY, v varchar(200))", "CREATE TABLE c (id int PRIMARY KEY, n int CHECK (n >= 0))")
			big := table("big", []int{0}, "id int", "v varchar(200)")
			c := table("c", []int{0}, "id int", "n int")
			tg := openTarget(t, dsn, v.mode, v.multi)
			tg.maxPacket = 4096
			ctx := context.Background()
			var cs []sluice.Change
			for i := range 500 {
				cs = append(cs, ins(big, strconv.Itoa(i), strings.Repeat("v", 100)+strconv.Itoa(i)))
			}
			if err := tg.Apply(ctx, apply.Compact(cs, nil), sluice.Checkpoint{Stream: "p", Seq: 1}); err != nil {
				t.Fatal(err)
			}
			var n int
			db.QueryRow("SELECT count(*) FROM big").Scan(&n)
			if n != 500 {
				t.Fatalf("big has %d rows, want 500", n)
			}
			// A failure in the last packet rolls back the earlier ones.
			cs = cs[:0]
			for i := range 500 {
				cs = append(cs, del(big, strconv.Itoa(i)))
			}
			cs = append(cs, ins(c, "1", "-1"))
			err := tg.Apply(ctx, apply.Compact(cs, nil), sluice.Checkpoint{Stream: "p", Seq: 2})
			t.Logf("error: %v", err)
			if err == nil || !strings.Contains(err.Error(), "upsert of (id=1) to") {
				t.Fatalf("error = %v", err)
			}
			db.QueryRow("SELECT count(*) FROM big").Scan(&n)
			if n != 500 {
				t.Fatalf("big has %d rows after a failed batch, want 500", n)
			}
		})
	}
}

func TestPreflightErrors(t *testing.T) {
	m := dbtest.Maria(t)
	dsn, _ := testDB(t,
		"CREATE TABLE ok (id bigint PRIMARY KEY, small int, name varchar(200), note text, amount decimal(14,4), f double, code char(3), extra text, extra2 int NOT NULL DEFAULT 0, d datetime(6), e enum('a','b','c'))",
		"CREATE TABLE nokey (id bigint, v text)",
		"CREATE TABLE wrongkey (a int, b int, v text, PRIMARY KEY (a))",
		"CREATE TABLE narrow (id int PRIMARY KEY, n int, u int unsigned, s varchar(10), t varchar(10), m decimal(10,2), ts datetime, c char(4), e enum('a'))",
		"CREATE TABLE missingcol (id int PRIMARY KEY)",
		"CREATE TABLE mandatory (id int PRIMARY KEY, must text NOT NULL)")
	ctx := context.Background()
	name := dsn[strings.LastIndexByte(dsn, '/')+1:]

	t.Run("unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, err = Open(ctx, "mysql://u:p@"+addr+"/db?timeout=5s", Config{})
		wantErr(t, err, "cannot reach target MySQL at "+addr)
	})
	t.Run("wrong password", func(t *testing.T) {
		cfg := mysql.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = m.User, "wrong", "tcp", m.Addr(), name
		_, err := Open(ctx, cfg.FormatDSN(), Config{})
		wantErr(t, err, "authentication failed for user \""+m.User+"\"", m.Addr())
	})
	t.Run("missing database", func(t *testing.T) {
		_, err := Open(ctx, m.URL("no_such_db"), Config{})
		wantErr(t, err, `database "no_such_db" does not exist`)
	})
	t.Run("no database", func(t *testing.T) {
		_, err := Open(ctx, m.URL(""), Config{})
		wantErr(t, err, "names no database")
	})

	tg := openTarget(t, dsn, Pipelined, nil)
	t.Run("compatible", func(t *testing.T) {
		err := tg.Preflight(ctx, []*sluice.Table{table("ok", []int{0},
			"id int", "small smallint", "name varchar(100)", "note varchar(20)", "amount decimal(12,4)", "f float", "code char(3)", "d datetime(3)", "e enum('a','b')")})
		if err != nil {
			t.Fatal(err)
		}
	})
	cases := []struct {
		name  string
		table *sluice.Table
		want  []string
	}{
		{"missing table", table("absent", []int{0}, "id int"),
			[]string{"target table " + name + ".absent does not exist in database " + name, "create it with the source's columns"}},
		{"no primary key", table("nokey", []int{0}, "id bigint", "v text"),
			[]string{"target table " + name + ".nokey has no primary key", "ADD PRIMARY KEY (id)"}},
		{"primary key mismatch", table("wrongkey", []int{0, 1}, "a int", "b int", "v text"),
			[]string{"primary key of " + name + ".wrongkey is (a) on the target but (a, b) on the source"}},
		{"missing column", table("missingcol", []int{0}, "id int", "gone text"),
			[]string{"column " + name + ".missingcol.gone is missing on the target", "ADD COLUMN `gone` text"}},
		{"target-only NOT NULL column", table("mandatory", []int{0}, "id int"),
			[]string{"column " + name + ".mandatory.must exists only on the target and is NOT NULL without a default"}},
		{"narrow types", table("narrow", []int{0}, "id int", "n bigint", "u bigint unsigned", "s varchar(100)", "t text", "m decimal(12,4)", "ts datetime(6)", "c char(5)", "e enum('a','b')"),
			[]string{
				"column " + name + ".narrow.n is int(11) on the target but bigint on the source: values may not fit (the target integer type is narrower)",
				"ALTER TABLE " + name + ".narrow MODIFY `n` bigint",
				"narrow.u is int(10) unsigned on the target but bigint unsigned",
				"narrow.s is varchar(10) on the target but varchar(100)",
				"narrow.t is varchar(10) on the target but text",
				"narrow.m is decimal(10,2) on the target but decimal(12,4)",
				"narrow.ts is datetime on the target but datetime(6)",
				"narrow.c is char(4) on the target but char(5)",
				`narrow.e is enum('a') on the target but enum('a','b') on the source: values may not fit (the target lacks the member "b")`,
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
// is an error (strict mode), not silently truncated.
func TestTooLongValueFails(t *testing.T) {
	dsn, db := testDB(t, "CREATE TABLE short (id int PRIMARY KEY, s varchar(3), m decimal(4,1), n tinyint)")
	short := table("short", []int{0}, "id int", "s varchar(3)", "m decimal(4,1)", "n tinyint")
	tg := openTarget(t, dsn, Pipelined, nil)
	ctx := context.Background()
	for _, vals := range [][]string{{"1", "abcd", "1.0", "1"}, {"2", "abc", "12345.0", "1"}, {"3", "abc", "1.0", "300"}, {"4", "abc", "1.0", "x"}} {
		err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(short, vals...)}, nil), sluice.Checkpoint{})
		if err == nil {
			t.Errorf("Apply of %v succeeded; rows now %v", vals, dump(t, db, "short"))
			continue
		}
		if retry, _ := apply.IsRetryable(err); retry {
			t.Errorf("a data error is marked retryable: %v", err)
		}
	}
}

// TestTxTimeout reads the limits the server puts on the applier's session:
// none by default, MariaDB's max_statement_time when set (here as a
// session variable in the connection string).
func TestTxTimeout(t *testing.T) {
	dsn, _ := testDB(t)
	for _, tc := range []struct {
		name, params string
		want         time.Duration
	}{
		{"none", "", 0},
		{"max_statement_time", "?max_statement_time=12.5", 12500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := openTarget(t, dsn+tc.params, Pipelined, nil)
			d, what, err := tg.TxTimeout(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if d != tc.want {
				t.Errorf("TxTimeout = %s (%s), want %s", d, what, tc.want)
			}
		})
	}
}

// TestOldestTransaction: the stall diagnosis names the session whose open
// transaction holds the target back.
func TestOldestTransaction(t *testing.T) {
	dsn, db := testDB(t, "CREATE TABLE k (id int PRIMARY KEY)", "INSERT INTO k VALUES (1)")
	ctx := context.Background()
	tg := openTarget(t, dsn, Pipelined, nil)
	if what, err := tg.OldestTransaction(ctx); err != nil || what != "" {
		t.Fatalf("OldestTransaction = %q, %v; want none", what, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE k SET id = 2 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	var thread int64
	if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&thread); err != nil {
		t.Fatal(err)
	}
	// InnoDB refreshes INNODB_TRX only when it was last read more than
	// 100 ms ago: poll more slowly than that.
	var what string
	for deadline := time.Now().Add(5 * time.Second); what == "" && time.Now().Before(deadline); {
		if what, err = tg.OldestTransaction(ctx); err != nil {
			t.Fatal(err)
		}
		if what == "" {
			time.Sleep(150 * time.Millisecond)
		}
	}
	if want := fmt.Sprintf("KILL %d", thread); !strings.Contains(what, want) || !strings.Contains(what, "rows locked") {
		t.Errorf("OldestTransaction = %q, want it to name thread %d and its locks", what, thread)
	}
}
