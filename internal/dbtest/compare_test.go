package dbtest

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cmpSide is one database of a comparison test.
type cmpSide struct {
	pg *pgxpool.Pool
	my *sql.DB
}

func (s cmpSide) db() DB { return DB{PG: s.pg, My: s.my} }

func (s cmpSide) engine() string {
	if s.pg != nil {
		return "postgres"
	}
	return "mysql"
}

// newCmpSide opens a fresh database. The MariaDB handles differ on
// purpose: the comparison must not depend on the DSN (parseTime, loc,
// interpolateParams), and variant selects which.
func newCmpSide(t *testing.T, engine string, variant int) cmpSide {
	t.Helper()
	if engine == "postgres" {
		pool, err := pgxpool.New(context.Background(), PG(t).URL(PGDatabase(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return cmpSide{pg: pool}
	}
	dsn := Maria(t).DSN(MariaDatabase(t))
	if variant%2 == 1 {
		// Interpolated queries would use the text protocol; the
		// comparison prepares its statement explicitly.
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + "parseTime=true&loc=America%2FNew_York&interpolateParams=true"
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return cmpSide{my: db}
}

// exec runs q, written with ? placeholders, turning the arguments into
// what each engine's driver takes.
func (s cmpSide) exec(ctx context.Context, q string, args ...any) error {
	if s.pg != nil {
		n := 0
		var b strings.Builder
		for _, r := range q {
			if r == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(r)
		}
		_, err := s.pg.Exec(ctx, b.String(), args...)
		return err
	}
	conv := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case time.Time:
			conv[i] = v.UTC().Format("2006-01-02 15:04:05.000000")
		case bool:
			conv[i] = 0
			if v {
				conv[i] = 1
			}
		default:
			conv[i] = a
		}
	}
	conn, err := s.my.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET time_zone = '+00:00'"); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, q, conv...)
	return err
}

func cmpDDL(engine, table string) string {
	if engine == "postgres" {
		return `CREATE TABLE ` + table + ` (id bigint PRIMARY KEY, f real, d double precision, n numeric(65,30),
			ts timestamp(6), tz timestamptz(6), b bytea, t text, flag boolean, u uuid, j jsonb, day date, c char(4))`
	}
	return `CREATE TABLE ` + table + ` (id bigint PRIMARY KEY, f float, d double, n decimal(65,30),
		ts datetime(6), tz timestamp(6) NULL DEFAULT NULL, b longblob, t longtext, flag tinyint(1), u char(36), j json, day date, c char(4))`
}

var allByteValues = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

const cmpInsert = `INSERT INTO %s (id, f, d, n, ts, tz, b, t, flag, u, j, day, c) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// cmpRows are the rows every comparison table starts with: edge values of
// each type pair, and a row of NULLs.
var cmpRows = [][]any{
	{1, float32(0.1234567), 0.1, "-99999999999999999999999999999999999.999999999999999999999999999999",
		time.Date(2024, 2, 29, 12, 34, 56, 789012000, time.UTC), time.Date(2038, 1, 19, 3, 14, 7, 999999000, time.UTC),
		allByteValues, "ünïcödé 😀 'q' \\ trailing  ", true, "0e9b7a9c-1234-4567-89ab-cdef01234567", `{"b": 1, "a": [1.50, 2]}`,
		time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), "ab"},
	{2, float32(3.4028235e38), 1.7976931348623157e308, "0.000000000000000000000000000001",
		time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC), time.Date(1970, 1, 1, 0, 0, 1, 0, time.UTC),
		[]byte{}, "", false, "00000000-0000-0000-0000-000000000000", `[]`,
		time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), "abcd"},
	{3, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil},
}

// wantDiff is what a case expects of the comparison: the rows that differ
// with their kind and, for Different, the differing columns.
type wantDiff struct {
	key  string
	kind DiffKind
	cols []string
}

func TestCompare(t *testing.T) {
	changedBlob := append([]byte(nil), allByteValues...)
	changedBlob[200] ^= 1
	cases := []struct {
		name string
		// mutate changes the got side's table after both got cmpRows.
		mutate func(ctx context.Context, s cmpSide, table string) error
		want   []wantDiff
	}{
		{name: "equal"},
		{
			name: "float32 one ulp",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				// 0.1234567 and its neighbour both print as 0.123457 in
				// MariaDB's text protocol.
				return s.exec(ctx, "UPDATE "+table+" SET f = ? WHERE id = 1", math.Nextafter32(0.1234567, 1))
			},
			want: []wantDiff{{"(id=1)", Different, []string{"f"}}},
		},
		{
			name: "float64 one ulp",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET d = ? WHERE id = 2", math.Nextafter(1.7976931348623157e308, 0))
			},
			want: []wantDiff{{"(id=2)", Different, []string{"d"}}},
		},
		{
			name: "missing row",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "DELETE FROM "+table+" WHERE id = 2")
			},
			want: []wantDiff{{"(id=2)", Missing, nil}},
		},
		{
			name: "extra row",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "INSERT INTO "+table+" (id) VALUES (4)")
			},
			want: []wantDiff{{"(id=4)", Extra, nil}},
		},
		{
			name: "one byte of a blob",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET b = ? WHERE id = 1", changedBlob)
			},
			want: []wantDiff{{"(id=1)", Different, []string{"b"}}},
		},
		{
			name: "empty blob vs NULL",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET b = NULL WHERE id = 2")
			},
			want: []wantDiff{{"(id=2)", Different, []string{"b"}}},
		},
		{
			name: "timestamp off by 1 µs",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET ts = ? WHERE id = 1", time.Date(2024, 2, 29, 12, 34, 56, 789013000, time.UTC))
			},
			want: []wantDiff{{"(id=1)", Different, []string{"ts"}}},
		},
		{
			name: "timestamptz off by 1 µs",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET tz = ? WHERE id = 2", time.Date(1970, 1, 1, 0, 0, 1, 1000, time.UTC))
			},
			want: []wantDiff{{"(id=2)", Different, []string{"tz"}}},
		},
		{
			name: "decimal in its last place",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET n = ? WHERE id = 2", "0.000000000000000000000000000002")
			},
			want: []wantDiff{{"(id=2)", Different, []string{"n"}}},
		},
		{
			name: "text: trailing space, empty vs NULL",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				if err := s.exec(ctx, "UPDATE "+table+" SET t = ? WHERE id = 1", "ünïcödé 😀 'q' \\ trailing   "); err != nil {
					return err
				}
				return s.exec(ctx, "UPDATE "+table+" SET t = NULL WHERE id = 2")
			},
			want: []wantDiff{{"(id=1)", Different, []string{"t"}}, {"(id=2)", Different, []string{"t"}}},
		},
		{
			name: "boolean and uuid",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET flag = ?, u = ? WHERE id = 1", false, "0e9b7a9c-1234-4567-89ab-cdef01234568")
			},
			want: []wantDiff{{"(id=1)", Different, []string{"flag", "u"}}},
		},
		{
			name: "json equal by value",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET j = ? WHERE id = 1", `{"a":[1.5,2e0],"b":1.0}`)
			},
		},
		{
			name: "json different value",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET j = ? WHERE id = 1", `{"a":[1.5,2.000001],"b":1}`)
			},
			want: []wantDiff{{"(id=1)", Different, []string{"j"}}},
		},
		{
			name: "date and char",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				return s.exec(ctx, "UPDATE "+table+" SET day = ?, c = ? WHERE id = 2", time.Date(9999, 12, 30, 0, 0, 0, 0, time.UTC), "abce")
			},
			want: []wantDiff{{"(id=2)", Different, []string{"day", "c"}}},
		},
		{
			name: "several rows, reported in key order",
			mutate: func(ctx context.Context, s cmpSide, table string) error {
				if err := s.exec(ctx, "DELETE FROM "+table+" WHERE id = 3"); err != nil {
					return err
				}
				if err := s.exec(ctx, "INSERT INTO "+table+" (id) VALUES (-5)"); err != nil {
					return err
				}
				return s.exec(ctx, "UPDATE "+table+" SET f = NULL WHERE id = 2")
			},
			want: []wantDiff{{"(id=-5)", Extra, nil}, {"(id=2)", Different, []string{"f"}}, {"(id=3)", Missing, nil}},
		},
	}
	pairs := []struct{ want, got string }{
		{"postgres", "postgres"}, {"mysql", "mysql"}, {"postgres", "mysql"}, {"mysql", "postgres"},
	}
	for _, pr := range pairs {
		t.Run(pr.want+"_vs_"+pr.got, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			want, got := newCmpSide(t, pr.want, 0), newCmpSide(t, pr.got, 1)
			for i, tc := range cases {
				t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
					table := fmt.Sprintf("cmp_%d", i)
					for _, s := range []cmpSide{want, got} {
						if err := s.exec(ctx, cmpDDL(s.engine(), table)); err != nil {
							t.Fatal(err)
						}
						for _, r := range cmpRows {
							if err := s.exec(ctx, fmt.Sprintf(cmpInsert, table), r...); err != nil {
								t.Fatalf("%s: insert %v: %v", s.engine(), r[0], err)
							}
						}
					}
					if tc.mutate != nil {
						if err := tc.mutate(ctx, got, table); err != nil {
							t.Fatal(err)
						}
					}
					d, err := CompareTable(ctx, want.db(), got.db(), table)
					if err != nil {
						t.Fatal(err)
					}
					checkDiff(t, d, tc.want)
					if t.Failed() {
						t.Logf("comparison:\n%s", d)
					}
				})
			}
		})
	}
}

func checkDiff(t *testing.T, d *TableDiff, want []wantDiff) {
	t.Helper()
	if len(d.Rows) != len(want) {
		t.Errorf("%d differing rows, want %d", len(d.Rows), len(want))
		return
	}
	for i, w := range want {
		r := d.Rows[i]
		if r.Key != w.key || r.Kind != w.kind {
			t.Errorf("row %d: %s %s, want %s %s", i, r.Key, r.Kind, w.key, w.kind)
		}
		var cols []string
		for _, c := range r.Columns {
			cols = append(cols, c.Column)
			if c.Want == c.Got {
				t.Errorf("row %s column %s: both values print as %s; the report must show how they differ", r.Key, c.Column, c.Want)
			}
		}
		if strings.Join(cols, ",") != strings.Join(w.cols, ",") {
			t.Errorf("row %s: differing columns %v, want %v", r.Key, cols, w.cols)
		}
		if !strings.Contains(d.String(), w.key) {
			t.Errorf("report does not name key %s:\n%s", w.key, d)
		}
	}
}

// TestCompareSignedZero: PostgreSQL keeps -0.0, MariaDB stores it as 0.0,
// so the sign counts only between two PostgreSQL databases.
func TestCompareSignedZero(t *testing.T) {
	ctx := context.Background()
	negZero := math.Copysign(0, -1)
	for _, tc := range []struct {
		want, got string
		differ    bool
	}{
		{"postgres", "postgres", true},
		{"postgres", "mysql", false},
		{"mysql", "postgres", false},
	} {
		t.Run(tc.want+"_vs_"+tc.got, func(t *testing.T) {
			want, got := newCmpSide(t, tc.want, 0), newCmpSide(t, tc.got, 0)
			for _, s := range []cmpSide{want, got} {
				if err := s.exec(ctx, cmpDDL(s.engine(), "z")); err != nil {
					t.Fatal(err)
				}
			}
			if err := want.exec(ctx, "INSERT INTO z (id, f, d) VALUES (1, ?, ?)", float32(negZero), negZero); err != nil {
				t.Fatal(err)
			}
			if err := got.exec(ctx, "INSERT INTO z (id, f, d) VALUES (1, ?, ?)", float32(0), 0.0); err != nil {
				t.Fatal(err)
			}
			d, err := CompareTable(ctx, want.db(), got.db(), "z")
			if err != nil {
				t.Fatal(err)
			}
			if tc.differ {
				checkDiff(t, d, []wantDiff{{"(id=1)", Different, []string{"f", "d"}}})
			} else {
				checkDiff(t, d, nil)
			}
		})
	}
}

// TestCompareSeesWhatTextHides: two FLOATs one ulp apart print alike in
// MariaDB's text protocol, so the text checksum calls the tables equal;
// the binary comparison and CHECKSUM TABLE do not.
func TestCompareSeesWhatTextHides(t *testing.T) {
	ctx := context.Background()
	want, got := newCmpSide(t, "mysql", 0), newCmpSide(t, "mysql", 0)
	for i, s := range []cmpSide{want, got} {
		if err := s.exec(ctx, "CREATE TABLE f (id int PRIMARY KEY, v float)"); err != nil {
			t.Fatal(err)
		}
		v := float32(0.1234567)
		if i == 1 {
			v = math.Nextafter32(v, 1)
		}
		if err := s.exec(ctx, "INSERT INTO f VALUES (1, ?)", v); err != nil {
			t.Fatal(err)
		}
	}
	a, err := textChecksum(ctx, want.my, "f")
	if err != nil {
		t.Fatal(err)
	}
	b, err := textChecksum(ctx, got.my, "f")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Logf("the text checksum saw the difference too (%v vs %v); the driver's text decoding changed", a, b)
	}
	d, err := CompareTable(ctx, want.db(), got.db(), "f")
	if err != nil {
		t.Fatal(err)
	}
	checkDiff(t, d, []wantDiff{{"(id=1)", Different, []string{"v"}}})
	t.Logf("%s", d)
	if err := CompareChecksumTable(ctx, want.my, got.my, "f"); err == nil {
		t.Error("CHECKSUM TABLE found tables equal whose FLOATs differ by one ulp")
	}
}

func TestCompareChecksumTable(t *testing.T) {
	ctx := context.Background()
	want, got := newCmpSide(t, "mysql", 0), newCmpSide(t, "mysql", 1)
	for _, s := range []cmpSide{want, got} {
		if err := s.exec(ctx, cmpDDL("mysql", "c")); err != nil {
			t.Fatal(err)
		}
		for _, r := range cmpRows {
			if err := s.exec(ctx, fmt.Sprintf(cmpInsert, "c"), r...); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := CompareChecksumTable(ctx, want.my, got.my, "c"); err != nil {
		t.Fatalf("equal tables: %v", err)
	}
	if err := got.exec(ctx, "UPDATE c SET ts = ? WHERE id = 1", time.Date(2024, 2, 29, 12, 34, 56, 789013000, time.UTC)); err != nil {
		t.Fatal(err)
	}
	err := CompareChecksumTable(ctx, want.my, got.my, "c")
	if err == nil || !strings.Contains(err.Error(), "CHECKSUM TABLE c") {
		t.Fatalf("a timestamp 1 µs off: %v, want an error naming table c", err)
	}
	if err := CompareChecksumTable(ctx, want.my, got.my, "no_such_table"); err == nil {
		t.Error("a missing table compared equal")
	}
}

// TestCompareRefusesIncomparable: a column pair no canonical form joins is
// an error, not a silent difference or a silent equality.
func TestCompareRefusesIncomparable(t *testing.T) {
	ctx := context.Background()
	want, got := newCmpSide(t, "postgres", 0), newCmpSide(t, "mysql", 0)
	if err := want.exec(ctx, "CREATE TABLE x (id bigint PRIMARY KEY, v bytea)"); err != nil {
		t.Fatal(err)
	}
	if err := got.exec(ctx, "CREATE TABLE x (id bigint PRIMARY KEY, v double)"); err != nil {
		t.Fatal(err)
	}
	if _, err := CompareTable(ctx, want.db(), got.db(), "x"); err == nil || !strings.Contains(err.Error(), "column v") {
		t.Errorf("bytea against double: %v, want an error naming column v", err)
	}
}

// textSum is a table's row count and an md5 over its rows' text.
type textSum struct {
	Rows int64
	Sum  string
}

// textChecksum is the check sluice once relied on, kept to show what it
// misses: the row count
// and an md5 over every row's text form (the text protocol's, under
// time_zone '+00:00') in primary-key order, each row's values
// length-prefixed and NULL marked.
func textChecksum(ctx context.Context, db *sql.DB, table string) (textSum, error) {
	var keys []string
	rows, err := db.QueryContext(ctx, `SELECT column_name FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = ? AND index_name = 'PRIMARY' ORDER BY seq_in_index`, table)
	if err != nil {
		return textSum{}, fmt.Errorf("checksum %s: primary key: %w", table, err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return textSum{}, fmt.Errorf("checksum %s: primary key: %w", table, err)
		}
		keys = append(keys, quoteMySQLIdent(k))
	}
	if err := rows.Err(); err != nil {
		return textSum{}, fmt.Errorf("checksum %s: primary key: %w", table, err)
	}
	if len(keys) == 0 {
		return textSum{}, fmt.Errorf("checksum %s: table has no primary key", table)
	}
	// No arguments: the text protocol, so every value arrives as the
	// server's text.
	rows, err = db.QueryContext(ctx, fmt.Sprintf("SELECT * FROM %s ORDER BY %s", quoteMySQLIdent(table), strings.Join(keys, ", ")))
	if err != nil {
		return textSum{}, fmt.Errorf("checksum %s: %w", table, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return textSum{}, fmt.Errorf("checksum %s: %w", table, err)
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var s textSum
	all := md5.New()
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return textSum{}, fmt.Errorf("checksum %s: %w", table, err)
		}
		row := md5.New()
		for _, v := range vals {
			if v == nil {
				row.Write([]byte("N;"))
				continue
			}
			fmt.Fprintf(row, "%d:", len(v))
			row.Write(v)
		}
		all.Write([]byte(hex.EncodeToString(row.Sum(nil))))
		s.Rows++
	}
	if err := rows.Err(); err != nil {
		return textSum{}, fmt.Errorf("checksum %s: %w", table, err)
	}
	if s.Rows > 0 {
		s.Sum = hex.EncodeToString(all.Sum(nil))
	}
	return s, nil
}

// TestComparePGBinaryForms: PostgreSQL types without a canonical form of
// their own (interval, inet, arrays, enums) compare by their binary send
// form between two PostgreSQL databases, and a difference is found.
func TestComparePGBinaryForms(t *testing.T) {
	ctx := context.Background()
	want, got := newCmpSide(t, "postgres", 0), newCmpSide(t, "postgres", 0)
	for i, s := range []cmpSide{want, got} {
		for _, q := range []string{
			"CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
			"CREATE TABLE b (id int PRIMARY KEY, iv interval, ip inet, arr int[], m mood)",
			"INSERT INTO b VALUES (1, '1 day 02:03:04.5', '10.0.0.1/8', '{1,2,3}', 'ok'), (2, NULL, NULL, NULL, NULL)",
		} {
			if err := s.exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if i == 1 {
			if err := s.exec(ctx, "UPDATE b SET iv = '1 day 02:03:04.500001' WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	d, err := CompareTable(ctx, want.db(), got.db(), "b")
	if err != nil {
		t.Fatal(err)
	}
	checkDiff(t, d, []wantDiff{{"(id=1)", Different, []string{"iv"}}})
	d, err = CompareTable(ctx, want.db(), want.db(), "b")
	if err != nil || !d.Equal() {
		t.Fatalf("a table against itself: %v, %v", d, err)
	}
}

// TestCompareKeptAsText: PostgreSQL types the cross-engine map keeps in
// MariaDB as the text PostgreSQL prints (inet, an enum, an array,
// interval, a float or numeric in a longtext), a uuid in MariaDB's UUID
// and in a binary(16), bit against BIT and an interval against TIME
// compare by value, and a difference is found: the netmask inet's cast to
// text adds, a uuid's bytes, a bit, a microsecond.
func TestCompareKeptAsText(t *testing.T) {
	ctx := context.Background()
	pg, my := newCmpSide(t, "postgres", 0), newCmpSide(t, "mysql", 1)
	for _, q := range []string{
		"CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
		`CREATE TABLE k (id int PRIMARY KEY, ip inet, m mood, arr int[], iv interval, d8 double precision, n numeric,
			u uuid, ub uuid, b bit(5), t interval)`,
		`INSERT INTO k VALUES (1, '::1', 'ok', '{1,NULL}', '1 mon 2 days', '-0', 'NaN',
			'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', B'00101', '-838:59:59'),
			(2, '10.0.0.1/8', 'happy', '{}', '0', 'Infinity', '1.50', NULL, NULL, B'00000', '00:00:00.000001'),
			(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
	} {
		if err := pg.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`CREATE TABLE k (id int PRIMARY KEY, ip longtext, m enum('sad','ok','happy'), arr longtext, iv longtext, d8 longtext, n longtext,
			u uuid, ub binary(16), b bit(5), t time(6))`,
		`INSERT INTO k VALUES (1, '::1', 'ok', '{1,NULL}', '1 mon 2 days', '-0', 'NaN',
			'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', X'a0eebc999c0b4ef8bb6d6bb9bd380a11', b'00101', '-838:59:59'),
			(2, '10.0.0.1/8', 'happy', '{}', '00:00:00', 'Infinity', '1.5', NULL, NULL, b'00000', '00:00:00.000001'),
			(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
	} {
		if err := my.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	d, err := CompareTable(ctx, pg.db(), my.db(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Equal() {
		t.Fatalf("equal values found different:\n%s", d)
	}
	if err := my.exec(ctx, `UPDATE k SET ip = '::1/128', u = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', ub = X'a0eebc999c0b4ef8bb6d6bb9bd380a12',
		b = b'00100', t = '-838:59:58.999999' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if err := my.exec(ctx, `UPDATE k SET m = 'sad', d8 = '1e308', n = '1.51', iv = '0' WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	d, err = CompareTable(ctx, pg.db(), my.db(), "k")
	if err != nil {
		t.Fatal(err)
	}
	checkDiff(t, d, []wantDiff{{"(id=1)", Different, []string{"ip", "u", "ub", "b", "t"}}, {"(id=2)", Different, []string{"m", "iv", "d8", "n"}}})
}
