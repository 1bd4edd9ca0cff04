package pgcopy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/tablecopy"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type fixture struct {
	*dbtest.Database
}

func newFixture(t *testing.T, ddl ...string) *fixture {
	t.Helper()
	return &fixture{dbtest.PGEngine.Database(t, ddl...)}
}

func (f *fixture) config(t *testing.T, settings map[string]string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(f.URL)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range settings {
		cfg.RuntimeParams[k] = v
	}
	return cfg
}

// export starts a transaction that exports its snapshot, open until the
// test ends.
func (f *fixture) export(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	conn := f.ConnectPG(t, nil)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	var name string
	if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// open opens a Reader of the snapshot whose session has settings.
func (f *fixture) open(t *testing.T, snap string, settings map[string]string) *Reader {
	t.Helper()
	r, err := Open(context.Background(), f.config(t, settings), snap)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func readAll(t *testing.T, r *Reader, tbl *sluice.Table, rg tablecopy.Range) []string {
	t.Helper()
	var out []string
	err := r.Read(context.Background(), tbl, rg, func(batch []sluice.Row) error {
		if len(batch) > batchRows {
			t.Errorf("batch of %d rows", len(batch))
		}
		for _, row := range batch {
			out = append(out, fmt.Sprint(row))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Read %s: %v", rg, err)
	}
	return out
}

// settings are those the stream readers pin (pgtrigger.SessionSettings,
// which pgcopy cannot import).
var settings = map[string]string{
	"TimeZone": "UTC", "DateStyle": "ISO, MDY", "IntervalStyle": "postgres", "extra_float_digits": "3", "bytea_output": "hex",
}

// TestReadText: a value's text is its ::text under the stream readers'
// settings, whatever the reader's session defaults say; NULL is NULL.
func TestReadText(t *testing.T) {
	f := newFixture(t, `CREATE TABLE v (id int PRIMARY KEY, tz timestamptz, ts timestamp, d date, iv interval, f8 float8, f4 real,
		b bytea, n numeric, a int[], ta text[], j json, jb jsonb, bo boolean, c char(5), ip inet, u uuid, t text)`,
		`INSERT INTO v VALUES (1, '2024-03-01 12:34:56.789+05', '2024-03-01 01:02:03', '2024-02-29', '1 year 2 days 03:04:05', 0.1, 1.1,
			'\x00ff', 1.50, '{1,NULL,3}', '{"a b",NULL,"c\"d"}', '{"a" : 1, "b":[1, 2]}', '{"a" : 1}', true, 'ab', '10.0.0.1', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'x''y\z'),
			(2, NULL, NULL, NULL, NULL, 'NaN', '-Infinity', NULL, NULL, NULL, NULL, 'null', NULL, NULL, NULL, NULL, NULL, '')`)
	snap := f.export(t)
	odd := map[string]string{"TimeZone": "America/New_York", "DateStyle": "German, DMY", "IntervalStyle": "sql_standard",
		"extra_float_digits": "0", "bytea_output": "escape"}
	r := f.open(t, snap, odd)
	cols := []string{"id", "tz", "ts", "d", "iv", "f8", "f4", "b", "n", "a", "ta", "j", "jb", "bo", "c", "ip", "u", "t"}
	tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "v"}, Key: []int{0}}
	sel := make([]string, len(cols))
	for i, c := range cols {
		tbl.Columns = append(tbl.Columns, sluice.Column{Name: c})
		sel[i] = c + "::text"
	}
	got := readAll(t, r, tbl, tablecopy.Range{})
	var want []string
	for _, row := range dbtest.TextRowsPG(t, f.ConnectPG(t, settings), `SELECT `+strings.Join(sel, ", ")+` FROM v ORDER BY id`) {
		want = append(want, fmt.Sprint(row))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Read gives\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(got[0], "2024-03-01 07:34:56.789+00") || !strings.Contains(got[0], `\x00ff`) || !strings.Contains(got[1], "NULL") {
		t.Errorf("row texts %s", got)
	}
	// CopyOut gives the same values, as COPY text.
	var out strings.Builder
	n, err := r.CopyOut(context.Background(), tbl, tablecopy.Range{}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var fromCopy []string
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var row sluice.Row
		for _, f := range strings.Split(line, "\t") {
			if f == `\N` {
				row = append(row, sluice.Null)
			} else {
				row = append(row, sluice.Text(unescapeCopy(f)))
			}
		}
		fromCopy = append(fromCopy, fmt.Sprint(row))
	}
	if n != int64(len(got)) || !slices.Equal(fromCopy, got) {
		t.Fatalf("CopyOut gives %d rows\n%s\nwant Read's\n%s", n, strings.Join(fromCopy, "\n"), strings.Join(got, "\n"))
	}
}

// unescapeCopy reads a field of COPY text.
func unescapeCopy(f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '\\' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		default:
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// TestSplit: the ranges are contiguous, open at both ends, of about the
// asked size, and reading them all gives every row once.
func TestSplit(t *testing.T) {
	f := newFixture(t,
		`CREATE TABLE i (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO i SELECT g * 7 - 3500, 'v' || g FROM generate_series(1, 1000) g`,
		`CREATE TABLE ext (id bigint PRIMARY KEY)`,
		`INSERT INTO ext VALUES (-9223372036854775808), (0), (1), (2), (9223372036854775807)`,
		`CREATE TABLE c (a text, n int, v int, PRIMARY KEY (a, n))`,
		`INSERT INTO c SELECT 'k' || (g % 3), g, g FROM generate_series(1, 1000) g`,
		`CREATE TABLE ci (id int, s text, PRIMARY KEY (id, s))`,
		`INSERT INTO ci SELECT g % 50, 's' || g FROM generate_series(1, 1000) g`,
		`CREATE TABLE s (id smallint PRIMARY KEY)`,
		`CREATE TABLE n (v int)`,
		`INSERT INTO n SELECT generate_series(1, 500)`)
	snap := f.export(t)
	r := f.open(t, snap, nil)
	tbl := func(name string, key []int, cols ...string) *sluice.Table {
		t := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: name}, Key: key}
		for _, c := range cols {
			typ := "text"
			if c == "id" {
				typ = map[string]string{"i": "bigint", "ext": "bigint", "s": "smallint", "ci": "integer"}[name]
			}
			t.Columns = append(t.Columns, sluice.Column{Name: c, Type: typ})
		}
		return t
	}
	for _, tc := range []struct {
		table        *sluice.Table
		per          int
		rows         int64
		chunks       int
		maxChunkRows int
	}{
		{tbl("i", []int{0}, "id", "v"), 100, 1000, 10, 100},
		{tbl("i", []int{0}, "id", "v"), 300, 1000, 4, 300},
		{tbl("i", []int{0}, "id", "v"), 5000, 1000, 1, 1000},
		{tbl("ext", []int{0}, "id"), 2, 5, 3, 4},
		{tbl("c", []int{0, 1}, "a", "n", "v"), 100, 1000, 10, 100},
		{tbl("c", []int{0, 1}, "a", "n", "v"), 999, 1000, 2, 999},
		// Bounds within one value of a whose n cross a power of ten: their
		// text order is not the key's.
		{tbl("c", []int{0, 1}, "a", "n", "v"), 10, 1000, 100, 10},
		// An integer first key column of a longer key: one-value bounds.
		{tbl("ci", []int{0, 1}, "id", "s"), 200, 1000, 5, 200},
		{tbl("s", []int{0}, "id"), 10, 0, 1, 0},
		{tbl("n", nil, "v"), 10, 500, 1, 500},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.table.Name.Name, tc.per), func(t *testing.T) {
			ranges, rows, err := r.Split(context.Background(), tc.table, tc.per)
			if err != nil {
				t.Fatal(err)
			}
			if rows != tc.rows || len(ranges) != tc.chunks {
				t.Fatalf("Split = %d ranges, %d rows; want %d, %d: %v", len(ranges), rows, tc.chunks, tc.rows, ranges)
			}
			if ranges[0].From != nil || ranges[len(ranges)-1].To != nil {
				t.Fatalf("ranges %v not open at the ends", ranges)
			}
			var all []string
			for i, rg := range ranges {
				if i > 0 && fmt.Sprint(rg.From) != fmt.Sprint(ranges[i-1].To) {
					t.Fatalf("ranges %v not contiguous at %d", ranges, i)
				}
				got := readAll(t, r, tc.table, rg)
				if len(got) > tc.maxChunkRows {
					t.Errorf("range %s holds %d rows, want at most %d", rg, len(got), tc.maxChunkRows)
				}
				all = append(all, got...)
			}
			whole := readAll(t, r, tc.table, tablecopy.Range{})
			slices.Sort(all)
			slices.Sort(whole)
			if int64(len(whole)) != tc.rows || !slices.Equal(all, whole) {
				t.Fatalf("ranges read %d rows, the whole table %d", len(all), len(whole))
			}
		})
	}
}

// TestSnapshot: every Reader of a snapshot sees its rows, not those
// committed after it, and their digests agree; a change shows in the
// digest of a later snapshot's range that holds it, not in the others.
func TestSnapshot(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY, v text, f float8)`,
		`INSERT INTO t SELECT g, 'v' || g, g / 3.0 FROM generate_series(1, 3000) g`)
	snap := f.export(t)
	f.Exec(t, `UPDATE t SET v = 'changed' WHERE id = 2500`, `INSERT INTO t VALUES (5000, 'new', 0)`)
	readers, err := OpenN(context.Background(), f.config(t, nil), snap, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range readers {
			r.Close()
		}
	})
	later := f.open(t, f.export(t), map[string]string{"TimeZone": "Asia/Tokyo", "extra_float_digits": "0"})
	tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "t"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "v", Type: "text"}, {Name: "f", Type: "double precision"}}}
	ranges, rows, err := readers[0].Split(context.Background(), tbl, 1000)
	if err != nil || rows != 3000 || len(ranges) != 3 {
		t.Fatalf("Split = %v, %d, %v", ranges, rows, err)
	}
	if got := readAll(t, readers[1].(*Reader), tbl, tablecopy.Range{}); len(got) != 3000 || strings.Contains(strings.Join(got, ""), "changed") {
		t.Fatalf("second reader sees %d rows, or the change after the snapshot", len(got))
	}
	for i, rg := range ranges {
		d0, err := readers[0].Digest(context.Background(), tbl, rg)
		if err != nil {
			t.Fatal(err)
		}
		d1, err := readers[1].Digest(context.Background(), tbl, rg)
		if err != nil {
			t.Fatal(err)
		}
		dl, err := later.Digest(context.Background(), tbl, rg)
		if err != nil {
			t.Fatal(err)
		}
		if d0 != d1 || d0.Rows != 1000 {
			t.Errorf("range %s: digests %v and %v of one snapshot", rg, d0, d1)
		}
		if changed := i == 2; (dl != d0) != changed {
			t.Errorf("range %s: digest %v in the snapshot, %v after (changed: %v)", rg, d0, dl, changed)
		}
	}
}

// TestOpenGoneSnapshot: a snapshot whose exporting session ended cannot
// be imported, and the error says why.
func TestOpenGoneSnapshot(t *testing.T) {
	f := newFixture(t)
	_, err := Open(context.Background(), f.config(t, nil), "00000003-00000002-1")
	if err == nil || !strings.Contains(err.Error(), "exporting session must still be open") {
		t.Fatalf("Open of a gone snapshot: %v", err)
	}
}
