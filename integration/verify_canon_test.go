package integration

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
	"github.com/sluice-cdc/sluice/verify"
)

// TestVerifyCanonicalForms checks verify.CanonExpr on the real servers:
// for every type sluice maps, source rows of edge values (minimum and
// maximum, NULL, empty, unicode, float and fraction edges, padding) are
// carried to the target by a sluice stream's initial copy, and each
// column's canonical text, computed in each database, must be equal row by
// row; then values changed on the target by less than a text protocol
// shows (a FLOAT rounded to 6 digits, a timestamp moved by 1 µs, a JSON
// member, a byte) must give different texts, and only there.
func TestVerifyCanonicalForms(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases of their own: overlap them with the other tests too
	for _, tc := range canonPairs {
		t.Run(string(tc.from)+"_to_"+string(tc.to), func(t *testing.T) {
			t.Parallel()
			runCanonPair(t, tc)
		})
	}
}

// A canonCol is a column of the test table: its type on the source and on
// the target, and its source values (SQL literals of the source's engine)
// for rows 1 to 4.
type canonCol struct {
	name, src, dst string
	vals           [4]string
}

type canonPair struct {
	from, to daemon.Engine
	// cols go in table canon_a, which dbtest.CompareTable also compares;
	// extra in canon_b (type pairs it does not compare: an interval or an
	// array kept in a longtext, a MySQL bit, a real in a double).
	cols, extra []canonCol
	// changes are made on the target's row 1 once it equals the source:
	// column and new value, a target literal.
	changes [][2]string
}

var pgToMyCols = []canonCol{
	{"i2", "smallint", "smallint", [4]string{"-32768", "32767", "0", "NULL"}},
	{"i4", "integer", "int", [4]string{"-2147483648", "2147483647", "7", "NULL"}},
	{"i8", "bigint", "bigint", [4]string{"-9223372036854775808", "9223372036854775807", "0", "NULL"}},
	{"num", "numeric(12,2)", "decimal(14,4)", [4]string{"1.50", "-9999999999.99", "0.00", "NULL"}},
	{"r", "real", "float", [4]string{"1.2345678", "3.40282e38", "-0", "NULL"}},
	{"d8", "double precision", "double", [4]string{"0.30000000000000004", "1.7976931348623157e308", "5e-324", "NULL"}},
	{"d8b", "double precision", "double", [4]string{"1e20", "-2.5e-300", "123456.703125", "NULL"}},
	{"b", "boolean", "tinyint(1)", [4]string{"true", "false", "true", "NULL"}},
	{"vc", "varchar(20)", "varchar(20)", [4]string{"'ünïcödé ✓ 中文'", "''", "'trailing  '", "NULL"}},
	{"ch", "char(6)", "char(6)", [4]string{"'ab'", "'abcdef'", "''", "NULL"}},
	{"tx", "text", "longtext", [4]string{`'quote '' and \ backslash'`, "''", "'中文 😀'", "NULL"}},
	{"byt", "bytea", "longblob", [4]string{`'\x00ff10'`, `'\x'`, `'\x00'`, "NULL"}},
	{"u", "uuid", "char(36)", [4]string{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "NULL"}},
	{"dt", "date", "date", [4]string{"'2024-02-29'", "'1000-01-01'", "'9999-12-31'", "NULL"}},
	{"ts", "timestamp(6) without time zone", "datetime(6)", [4]string{"'2024-01-02 03:04:05.123456'", "'1000-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'", "NULL"}},
	{"ts3", "timestamp(3) without time zone", "datetime(6)", [4]string{"'2024-01-02 03:04:05.123'", "'2000-01-01 00:00:00.5'", "'1999-12-31 23:59:59.999'", "NULL"}},
	{"tz", "timestamp(6) with time zone", "datetime(6)", [4]string{"'2024-06-30 23:59:59.999999+00'", "'2001-09-09 03:46:40+02'", "'1970-01-01 00:00:00+00'", "NULL"}},
	{"tm", "time(6) without time zone", "time(6)", [4]string{"'23:59:59.999999'", "'00:00:00'", "'12:34:56.5'", "NULL"}},
	{"js", "jsonb", "json", [4]string{`'{"b": 1, "a": [1, 2.50, "x"]}'`, "'[]'", `'"str"'`, "NULL"}},
	{"ip", "inet", "longtext", [4]string{"'::1'", "'10.0.0.1/8'", "'192.168.1.5/32'", "NULL"}},
	{"uu", "uuid", "uuid", [4]string{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "NULL"}},
	{"ub", "uuid", "binary(16)", [4]string{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "NULL"}},
}

var pgToMyExtra = []canonCol{
	{"rd", "real", "double", [4]string{"1.1", "1.17549435e-38", "16777217", "NULL"}},
	{"chv", "char(6)", "varchar(6)", [4]string{"'ab'", "'abcdef'", "''", "NULL"}},
	{"arr", "integer[]", "longtext", [4]string{"'{1,2,3}'", "'{}'", "'{NULL,-1}'", "NULL"}},
	{"iv", "interval", "longtext", [4]string{"'1 day 02:03:04.5'", "'-3 mons'", "'0'", "NULL"}},
	{"d8t", "double precision", "longtext", [4]string{"0.1", "-1e-300", "'NaN'", "NULL"}},
	{"js2", "jsonb", "longtext", [4]string{`'{"k": {"n": -0.5e-3}}'`, "'null'", "'{}'", "NULL"}},
}

var myToPGCols = []canonCol{
	{"ti", "tinyint", "smallint", [4]string{"-128", "127", "0", "NULL"}},
	{"si", "smallint", "smallint", [4]string{"-32768", "32767", "0", "NULL"}},
	{"mi", "mediumint", "integer", [4]string{"-8388608", "8388607", "0", "NULL"}},
	{"i", "int", "integer", [4]string{"-2147483648", "2147483647", "7", "NULL"}},
	{"bi", "bigint", "bigint", [4]string{"-9223372036854775808", "9223372036854775807", "0", "NULL"}},
	{"ub", "bigint unsigned", "numeric(20,0)", [4]string{"18446744073709551615", "0", "1", "NULL"}},
	{"dc", "decimal(12,2)", "numeric(14,4)", [4]string{"1.50", "-9999999999.99", "0.00", "NULL"}},
	{"f", "float", "real", [4]string{"1.2345678", "3.40282e38", "1.17549e-38", "NULL"}},
	{"d", "double", "double precision", [4]string{"0.30000000000000004", "1.7976931348623157e308", "5e-324", "NULL"}},
	{"b", "tinyint(1)", "boolean", [4]string{"1", "0", "1", "NULL"}},
	{"vc", "varchar(20)", "varchar(20)", [4]string{"'ünïcödé ✓ 中文'", "''", "'trailing  '", "NULL"}},
	{"ch", "char(6)", "char(6)", [4]string{"'ab'", "'abcdef'", "''", "NULL"}},
	{"tx", "text", "text", [4]string{`'quote '' and \\ backslash'`, "''", "'中文 😀'", "NULL"}},
	{"bn", "binary(4)", "bytea", [4]string{"'ab'", "X'00000000'", "X'FFFFFFFF'", "NULL"}},
	{"vb", "varbinary(10)", "bytea", [4]string{"X'00FF10'", "''", "X'00'", "NULL"}},
	{"bl", "blob", "bytea", [4]string{"X'DEADBEEF'", "''", "X'0A0D'", "NULL"}},
	{"u", "char(36)", "uuid", [4]string{"'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "NULL"}},
	{"dt", "date", "date", [4]string{"'2024-02-29'", "'1000-01-01'", "'9999-12-31'", "NULL"}},
	{"dtm", "datetime(6)", "timestamp(6) without time zone", [4]string{"'2024-01-02 03:04:05.123456'", "'1000-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'", "NULL"}},
	{"ts", "timestamp(6) NULL DEFAULT NULL", "timestamp(6) with time zone", [4]string{"'2024-01-02 03:04:05.5'", "'1970-01-01 00:00:01'", "'2038-01-19 03:14:07.999999'", "NULL"}},
	{"tm", "time(6)", "time(6) without time zone", [4]string{"'23:59:59.999999'", "'00:00:00'", "'12:00:00.5'", "NULL"}},
	{"y", "year", "smallint", [4]string{"2024", "1901", "2155", "NULL"}},
	{"js", "json", "jsonb", [4]string{`'{"b":1, "a":[1,2.50,1e2], "é": "é\\n"}'`, "'[]'", `'{"k":{"n":-0.5e-3,"t":true,"z":null,"l":[{},[]]}}'`, "NULL"}},
	{"e", "enum('a','b')", "varchar(5)", [4]string{"'a'", "'b'", "'b'", "NULL"}},
	{"st", "set('x','y')", "varchar(5)", [4]string{"'x,y'", "''", "'y'", "NULL"}},
}

var myToPGExtra = []canonCol{
	{"fd", "float", "double precision", [4]string{"1.1", "16777217", "-2.5", "NULL"}},
	{"tmi", "time(6)", "interval", [4]string{"'-838:59:59'", "'838:59:59.999999'", "'00:00:00'", "NULL"}},
	{"bt", "bit(5)", "bit(5)", [4]string{"b'10101'", "b'0'", "b'11111'", "NULL"}},
}

// sameEngine turns a column list into one of the source's types on both
// sides.
func sameEngine(cols []canonCol) []canonCol {
	out := make([]canonCol, len(cols))
	for i, c := range cols {
		c.dst = c.src
		out[i] = c
	}
	return out
}

var canonPairs = []canonPair{
	{from: daemon.EnginePostgres, to: daemon.EnginePostgres, cols: sameEngine(pgToMyCols), extra: sameEngine(pgToMyExtra),
		changes: [][2]string{{"r", "1.23457"}, {"ts", "'2024-01-02 03:04:05.123457'"}, {"js", `'{"b": 2, "a": [1, 2.50, "x"]}'`}, {"byt", `'\x00ff11'`}}},
	{from: daemon.EngineMySQL, to: daemon.EngineMySQL, cols: sameEngine(myToPGCols), extra: sameEngine(myToPGExtra),
		changes: [][2]string{{"f", "1.23457"}, {"dtm", "'2024-01-02 03:04:05.123457'"}, {"js", `'{"b":1, "a":[1,2.50,1e3], "é": "é\\n"}'`}, {"vb", "X'00FF11'"}}},
	{from: daemon.EngineMySQL, to: daemon.EnginePostgres, cols: myToPGCols, extra: myToPGExtra,
		changes: [][2]string{{"f", "1.23457"}, {"dtm", "'2024-01-02 03:04:05.123457'"}, {"js", `'{"b": 1, "a": [1, 2.50, 1e2], "é": "é\n", "x": 0}'`}, {"vb", `'\x00ff11'`}}},
	{from: daemon.EnginePostgres, to: daemon.EngineMySQL, cols: pgToMyCols, extra: pgToMyExtra,
		// ip: the text inet's cast gives, which sluice once wrote.
		changes: [][2]string{{"r", "1.23457"}, {"ts", "'2024-01-02 03:04:05.123457'"}, {"js", `'{"a": [1, 2.50, "x"], "b": 1.5}'`}, {"byt", "X'00FF11'"},
			{"ip", "'::1/128'"}, {"ub", "X'A0EEBC999C0B4EF8BB6D6BB9BD380A12'"}}},
}

func canonDDL(table string, cols []canonCol, dst bool) string {
	defs := []string{"id integer PRIMARY KEY"}
	for _, c := range cols {
		typ := c.src
		if dst {
			typ = c.dst
		}
		defs = append(defs, c.name+" "+typ)
	}
	return fmt.Sprintf("CREATE TABLE %s (%s)", table, strings.Join(defs, ", "))
}

func canonInsert(table string, cols []canonCol) string {
	var rows []string
	for r := 0; r < 4; r++ {
		vals := []string{fmt.Sprint(r + 1)}
		for _, c := range cols {
			vals = append(vals, c.vals[r])
		}
		rows = append(rows, "("+strings.Join(vals, ", ")+")")
	}
	names := []string{"id"}
	for _, c := range cols {
		names = append(names, c.name)
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", table, strings.Join(names, ", "), strings.Join(rows, ", "))
}

func runCanonPair(t *testing.T, tc canonPair) {
	ctx := context.Background()
	src, dst := newEndpoint(t, tc.from), newEndpoint(t, tc.to)
	tables := map[string][]canonCol{"canon_a": tc.cols, "canon_b": tc.extra}
	for name, cols := range tables {
		for _, s := range []struct {
			e   *endpoint
			ddl string
		}{{src, canonDDL(name, cols, false)}, {dst, canonDDL(name, cols, true)}, {src, canonInsert(name, cols)}} {
			if err := s.e.exec(ctx, s.ddl); err != nil {
				t.Fatalf("%s: %s: %v", s.e.engine, s.ddl, err)
			}
		}
	}
	o := daemon.StreamOptions{
		ID: "canon", SourceURL: src.url, TargetURL: dst.url, Tables: tableNames(t, []string{"canon_a", "canon_b"}),
		StateDir: t.TempDir(), SourceMode: "trigger", PollInterval: 50 * time.Millisecond, KillBudget: 5 * time.Second,
	}
	run := startStream(t, o)
	// The independent comparison where it compares these types.
	waitEqual(t, src, dst, []string{"canon_a"}, 60*time.Second, run)
	// canon_b: polled until its canonical texts agree.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if d := canonDiffs(t, src, dst, tc, "canon_b", tc.extra); len(d) == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("canon_b: canonical texts differ after 30 s:\n%s", strings.Join(d, "\n"))
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not a wait for replication
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if d := canonDiffs(t, src, dst, tc, "canon_a", tc.cols); len(d) > 0 {
		t.Fatalf("canon_a equal by dbtest.CompareTable, but canonical texts differ:\n%s", strings.Join(d, "\n"))
	}

	// Changes a text protocol would hide must show, in their row and
	// column only.
	var sets, want []string
	for _, ch := range tc.changes {
		sets = append(sets, ch[0]+" = "+ch[1])
		want = append(want, "row 1 "+ch[0])
	}
	if err := dst.exec(ctx, "UPDATE canon_a SET "+strings.Join(sets, ", ")+" WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range canonDiffs(t, src, dst, tc, "canon_a", tc.cols) {
		got = append(got, strings.SplitN(d, ":", 2)[0])
	}
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("after changing row 1's %v on the target, the differing canonical texts are [%s], want [%s]",
			tc.changes, strings.Join(got, ", "), strings.Join(want, ", "))
	}
}

// canonDiffs evaluates every column's canonical expression on both sides
// and lists the row/column pairs whose texts differ, as "row N col: …".
func canonDiffs(t *testing.T, src, dst *endpoint, tc canonPair, table string, cols []canonCol) []string {
	t.Helper()
	ctx := context.Background()
	srcTypes, dstTypes := catalogTypes(t, src, table), catalogTypes(t, dst, table)
	side := func(e *endpoint, self map[string]string) [][]*string {
		var exprs []string
		for _, c := range cols {
			cc := verify.CanonColumn{
				Dialect: dialectOf(e), Ident: c.name, Type: self[c.name],
				Source:        sluice.Column{Name: c.name, Type: srcTypes[c.name]},
				SourceDialect: dialectOf(src),
				TargetType:    dstTypes[c.name], TargetDialect: dialectOf(dst),
			}
			x, err := verify.CanonExpr(cc)
			if err != nil {
				t.Fatalf("%s.%s: %v", table, c.name, err)
			}
			exprs = append(exprs, x)
		}
		q := "SELECT " + strings.Join(exprs, ", ") + " FROM " + table + " ORDER BY id"
		out, err := canonRows(ctx, e, q, len(cols))
		if err != nil {
			t.Fatalf("%s: %s: %v", e.engine, q, err)
		}
		return out
	}
	a, b := side(src, srcTypes), side(dst, dstTypes)
	if len(a) != len(b) {
		return []string{fmt.Sprintf("rows: %d on the source, %d on the target", len(a), len(b))}
	}
	show := func(s *string) string {
		if s == nil {
			return "NULL"
		}
		return fmt.Sprintf("%q", *s)
	}
	var diffs []string
	for r := range a {
		for i, c := range cols {
			if show(a[r][i]) != show(b[r][i]) {
				diffs = append(diffs, fmt.Sprintf("row %d %s: source %s, target %s (%s → %s)", r+1, c.name, show(a[r][i]), show(b[r][i]), srcTypes[c.name], dstTypes[c.name]))
			}
		}
	}
	return diffs
}

func dialectOf(e *endpoint) verify.Dialect {
	if e.pg != nil {
		return verify.PostgreSQL
	}
	return verify.MySQL
}

// catalogTypes is each column's type as the catalog spells it, which is
// what verify reads.
func catalogTypes(t *testing.T, e *endpoint, table string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	if e.pg != nil {
		rows, err := e.pg.Query(ctx, "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped", table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n, typ string
			if err := rows.Scan(&n, &typ); err != nil {
				t.Fatal(err)
			}
			out[n] = typ
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	rows, err := e.my.QueryContext(ctx, "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, typ string
		if err := rows.Scan(&n, &typ); err != nil {
			t.Fatal(err)
		}
		out[n] = typ
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// canonRows runs q, whose n columns are texts, under the session settings
// verify runs its expressions in.
func canonRows(ctx context.Context, e *endpoint, q string, n int) ([][]*string, error) {
	var out [][]*string
	if e.pg != nil {
		tx, err := e.pg.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx)
		// jit off: see CanonExpr.
		for _, s := range append(keyrange.PGSetLocal(), "SET LOCAL jit = off") {
			if _, err := tx.Exec(ctx, s); err != nil {
				return nil, err
			}
		}
		rows, err := tx.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			row := make([]*string, n)
			ptrs := make([]any, n)
			for i := range row {
				ptrs[i] = &row[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return nil, err
			}
			out = append(out, row)
		}
		return out, rows.Err()
	}
	conn, err := e.my.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, keyrange.MySession); err != nil {
		return nil, err
	}
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		row := make([]*string, n)
		ptrs := make([]any, n)
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// TestVerifyCanonicalFloats checks the premise of the float forms on many
// values: PostgreSQL and MariaDB print a float's shortest round-trip
// digits alike, whatever the layout, so the same float (written to each
// as its shortest text) has one canonical text, for random bit patterns
// over the whole range (subnormals included).
func TestVerifyCanonicalFloats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, my := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EngineMySQL)
	cols := []canonCol{{name: "d", src: "double precision", dst: "double"}, {name: "f", src: "real", dst: "float"}}
	if err := pg.exec(ctx, "CREATE TABLE fl (id integer PRIMARY KEY, d double precision, f real)"); err != nil {
		t.Fatal(err)
	}
	if err := my.exec(ctx, "CREATE TABLE fl (id integer PRIMARY KEY, d double, f float)"); err != nil {
		t.Fatal(err)
	}
	r := rng(t)
	const rows, batch = 2000, 500
	for b := 0; b < rows; b += batch {
		var vals []string
		for id := b; id < b+batch; id++ {
			d := math.Float64frombits(r.Uint64())
			for math.IsNaN(d) || math.IsInf(d, 0) {
				d = math.Float64frombits(r.Uint64())
			}
			// MariaDB refuses a FLOAT past 3.402823466e38 in text.
			f := math.Float32frombits(r.Uint32())
			for math.IsNaN(float64(f)) || math.Abs(float64(f)) > 3.4e38 {
				f = math.Float32frombits(r.Uint32())
			}
			vals = append(vals, fmt.Sprintf("(%d, %s, %s)", id, strconv.FormatFloat(d, 'g', -1, 64), strconv.FormatFloat(float64(f), 'g', -1, 32)))
		}
		for _, e := range []*endpoint{pg, my} {
			if err := e.exec(ctx, "INSERT INTO fl VALUES "+strings.Join(vals, ", ")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d := canonDiffs(t, pg, my, canonPair{}, "fl", cols); len(d) > 0 {
		t.Fatalf("%d floats have different canonical texts, e.g.:\n%s", len(d), strings.Join(d[:min(10, len(d))], "\n"))
	}
}

// TestVerifyCanonicalJSON checks the JSON form of a MariaDB document kept
// in jsonb on documents that differ from their jsonb text in each way
// jsonb normalises (key order, whitespace, number spelling), nested
// 13 levels deep, written as the same text to both.
func TestVerifyCanonicalJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	my, pg := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, daemon.EnginePostgres)
	docs := []string{
		`{"b":1,"a":2,"aa":3,"B":4,"é":5,"":6}`,
		`[1E+2, 1e-7, -0, 0.0, 0.1e1, -1.50, 12345678901234567890.123, 1.5e300, 5e-324]`,
		`{"s": "é ✓ 中文 😀", "q": "quote \" backslash \\ newline \n tab \t", "u": null, "t": true, "f": false}`,
		`{"a":{"b":{"c":{"d":{"e":{"f":{"g":[{"h":[[[[1.0, {"z": 1, "y": 2}]]]]}]}}}}}}}`,
		`[[], {}, [[]], [{}], {"x": []}]`,
		`"just a string"`, `12.500`, `null`, `true`,
	}
	for _, e := range []*endpoint{my, pg} {
		typ := "jsonb"
		if e == my {
			typ = "json"
		}
		if err := e.exec(ctx, "CREATE TABLE js (id integer PRIMARY KEY, doc "+typ+")"); err != nil {
			t.Fatal(err)
		}
		for i, d := range docs {
			q := "INSERT INTO js VALUES (?, ?)"
			if e == pg {
				q = "INSERT INTO js VALUES ($1, $2)"
			}
			if err := e.exec(ctx, q, i+1, d); err != nil {
				t.Fatalf("%s: %s: %v", e.engine, d, err)
			}
		}
	}
	cols := []canonCol{{name: "doc", src: "json", dst: "jsonb"}}
	if d := canonDiffs(t, my, pg, canonPair{}, "js", cols); len(d) > 0 {
		t.Fatalf("documents with different canonical texts:\n%s", strings.Join(d, "\n"))
	}
}
