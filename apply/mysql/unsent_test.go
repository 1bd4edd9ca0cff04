package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// unsentDocs is a table whose NOT NULL columns (without defaults) an
// update may leave unsent, as a PostgreSQL source leaves out unchanged
// TOASTed values. Its key is a string, compared under its own collation.
func unsentDocs(t *testing.T) (string, *sql.DB, *sluice.Table, func(vals ...string) sluice.Row) {
	t.Helper()
	dsn, db := testDB(t,
		"CREATE TABLE docs (id varchar(10) CHARACTER SET latin1 COLLATE latin1_nopad_bin PRIMARY KEY, n int NOT NULL, title text, body mediumtext NOT NULL)",
		"INSERT INTO docs VALUES ('1', 0, 't1', 'body one'), ('2', 0, 't2', 'body two'), ('3', 0, 't3', 'body three'), ('4', 0, 't4', 'body four'), ('a', 0, 'ta', 'body a'), ('6', 0, 't6', 'body six')")
	docs := table("docs", []int{0}, "id varchar(10)", "n integer", "title text", "body text")
	docs.Columns[1].Nullable, docs.Columns[3].Nullable = false, false
	// img makes a row image; "-" stands for a value the source did not
	// send.
	img := func(vals ...string) sluice.Row {
		r := row(vals...)
		for i, v := range vals {
			if v == "-" {
				r[i] = sluice.Value{Unchanged: true}
			}
		}
		return r
	}
	return dsn, db, docs, img
}

// TestUnsentValuesInNotNullColumns: updates that leave NOT NULL columns
// unsent (a PostgreSQL source's unchanged TOASTed values) update the rows
// in place, keeping those values, whatever else the batch holds: compacted
// or in source order, in every mode, and again as a replay. Under the
// strict sql_mode an INSERT … ON DUPLICATE KEY UPDATE without a NOT NULL
// column that has no default fails (1364) even when the row exists.
func TestUnsentValuesInNotNullColumns(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("in order %v", inOrder), func(t *testing.T) {
			each(t, func(t *testing.T, v variant) {
				dsn, db, docs, img := unsentDocs(t)
				tg := openTarget(t, dsn, v.mode, v.multi)
				ctx := context.Background()
				update := func(vals ...string) sluice.Change {
					return sluice.Change{Table: docs, Op: sluice.OpUpdate, Key: row(vals[0]), Row: img(vals...)}
				}
				var order func(sluice.TableName) bool
				if inOrder {
					order = allInOrder
				}
				// A key change is moved in place, and never replayed: the
				// stream skips what a lane committed.
				move := apply.Compact([]sluice.Change{{Table: docs, Op: sluice.OpUpdate, Key: row("6"), Row: img("60", "6", "-", "-")}}, order)
				if err := tg.Apply(ctx, move, sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
					t.Fatal(err)
				}
				b := apply.Compact([]sluice.Change{
					update("1", "1", "t1 new", "-"),
					update("2", "2", "-", "-"),
					update("3", "-", "-", "-"), // only the key sent
					update("4", "4", null, "body four new"),
					ins(docs, "5", "0", "t5", "body five"),
					update("5", "5", "-", "-"), // filled from the insert's image
					update("1", "11", "-", "-"),
					update("a", "7", "-", "-"),
				}, order)
				want := "[1|11|t1 new|body one 2|2|t2|body two 3|0|t3|body three 4|4|NULL|body four new 5|5|t5|body five 60|6|t6|body six a|7|ta|body a]"
				for i := range 2 { // the second is a replay and changes nothing
					if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: uint64(2 + i)}); err != nil {
						t.Fatalf("apply %d: %v", i, err)
					}
					if got := fmt.Sprint(dump(t, db, "docs")); got != want {
						t.Fatalf("apply %d: got %v, want %v", i, got, want)
					}
				}
			})
		})
	}
}

// TestUnsentValuesOfMissingRow: an update that leaves values unsent of a
// row the target does not have cannot be written (the values are nowhere
// in the stream): the target differs from the source, and the batch fails
// saying so, naming the table (and the key, for one row), and changes
// nothing. It never passes as a no-op, nor writes a row of NULLs and
// defaults.
func TestUnsentValuesOfMissingRow(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db, docs, img := unsentDocs(t)
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		before := fmt.Sprint(dump(t, db, "docs"))
		for _, c := range []struct {
			name string
			rows []sluice.Row
			want string
		}{
			{"one row", []sluice.Row{img("77", "1", "-", "-")}, "(id=77)"},
			{"among others", []sluice.Row{img("1", "9", "-", "-"), img("77", "1", "-", "-"), img("2", "9", "-", "-")}, "docs"},
			{"another case", []sluice.Row{img("A", "1", "-", "-")}, "(id=A)"}, // 'a' is not 'A' under latin1_nopad_bin
			{"nullable only", []sluice.Row{img("1", "9", "x", "body one"), img("78", "1", "-", "body")}, "docs"},
		} {
			b := &apply.Batch{Tables: []*apply.TableBatch{{Table: docs, Upserts: append([]sluice.Row{
				row("4", "40", "t4", "body four changed"), // a full row, rolled back with the others
			}, c.rows...)}}}
			err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: 1})
			if !errors.Is(err, apply.ErrRowMissing) || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), "target differs from the source") {
				t.Errorf("%s: err = %v, want apply.ErrRowMissing naming %s", c.name, err, c.want)
			}
			if got := fmt.Sprint(dump(t, db, "docs")); got != before {
				t.Fatalf("%s: the failed batch left %v, want %v", c.name, got, before)
			}
		}
	})
}

// TestUnsentValuesStatements: rows with unsent values cost two statements
// (the update and its check) per set of columns sent, whatever their
// number, and one packet with the batch's other statements.
func TestUnsentValuesStatements(t *testing.T) {
	dsn, _, docs, img := unsentDocs(t)
	tg := openTarget(t, dsn, Pipelined, nil)
	var rows []sluice.Row
	for i := 1; i <= 300; i++ {
		n := strconv.Itoa(i)
		rows = append(rows, img(n, n, "-", "-"), img(n+"000", n, "t", "-"), row(n+"001", n, "t", "b"))
	}
	b := &apply.Batch{Tables: []*apply.TableBatch{{Table: docs, Upserts: rows}}}
	tg.mu.Lock()
	stmts, err := tg.plan(context.Background(), b, false)
	tg.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 5 {
		t.Fatalf("%d statements for 900 rows in 3 column sets, want 5", len(stmts))
	}
	if p := multiPackets(stmts, tg.maxPacket-64); len(p) != 1 {
		t.Fatalf("%d packets, want 1", len(p))
	}
}

// TestUnsentValuesTypes: the values of rows updated in place travel in a
// derived table whose column types are the union of the rows' literals;
// every type's values must land exactly as an insert writes them, the
// rows of one statement mixing widths, scales, signs and forms.
func TestUnsentValuesTypes(t *testing.T) {
	type col struct {
		name, typ string
		vals      []string // one per row, after the update
	}
	cols := []col{
		{"id", "int", []string{"1", "2", "3"}},
		{"c_dec_wide", "decimal(65,30)", []string{"12345678901234567890123456789012345.123456789012345678901234567890", "-0.000000000000000000000000000001", "7.000000000000000000000000000000"}},
		{"c_dec", "decimal(12,2) unsigned", []string{"9999999999.99", "0.00", "1.50"}},
		{"c_double", "double", []string{"0.1", "-1.7976931348623157e+308", "5e-324"}},
		{"c_float", "float", []string{"3.40282e+38", "-1.1", "1.17549e-38"}},
		{"c_ubigint", "bigint unsigned", []string{"18446744073709551615", "0", "9007199254740993"}},
		{"c_bigint", "bigint", []string{"-9223372036854775808", "9223372036854775807", null}},
		{"c_varchar", "varchar(40)", []string{"héllo 'q' \"dq\" \\back\\", "ü€😀", ""}},
		{"c_binary", "binary(4)", []string{"\x00\x01'\\", "\xff\xfe\x00\x00", "ab\x00\x00"}},
		{"c_blob", "blob", []string{"\x00\x00\xc3\x28 invalid utf8 \xff", "", null}},
		{"c_bit", "bit(10)", []string{"\x03\xff", "\x00\x00", "\x01\x00"}},
		{"c_date", "date", []string{"2024-02-29", "0000-00-00", "1000-01-01"}},
		{"c_datetime", "datetime(6)", []string{"2024-01-02 03:04:05.123456", "9999-12-31 23:59:59.999999", "1970-01-01 00:00:00.000000"}},
		{"c_time", "time(6)", []string{"-838:59:59.000000", "12:34:56.789012", "00:00:00.000000"}},
		{"c_year", "year", []string{"2024", "0", "1901"}},
		{"c_json", "json", []string{`{"a": [1, 2], "b": "x\"y"}`, `null`, `"NULL"`}},
		{"c_enum", "enum('a','b c','it''s')", []string{"it's", "a", "b c"}},
		{"c_set", "set('x','y','z')", []string{"x,z", "", "x,y,z"}},
		{"body", "mediumtext NOT NULL", nil}, // unsent
	}
	var defs, srcCols []string
	for _, c := range cols {
		defs = append(defs, quoteIdent(c.name)+" "+c.typ)
		srcCols = append(srcCols, c.name+" "+strings.TrimSuffix(c.typ, " NOT NULL"))
	}
	tbl := table("types", []int{0}, srcCols...)
	tbl.Columns[len(cols)-1].Nullable = false
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t, "CREATE TABLE types ("+strings.Join(defs, ", ")+", PRIMARY KEY (id)) DEFAULT CHARSET=utf8mb4",
			"INSERT INTO types (id, body) VALUES (1, 'b1'), (2, 'b2'), (3, 'b3')")
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		var rows []sluice.Row
		for r := range cols[0].vals {
			img := make(sluice.Row, len(cols))
			for i, c := range cols {
				switch {
				case c.vals == nil:
					img[i] = sluice.Value{Unchanged: true}
				case c.vals[r] == null:
					img[i] = sluice.Null
				default:
					img[i] = sluice.Text(c.vals[r])
				}
			}
			rows = append(rows, img)
		}
		if err := tg.Apply(ctx, &apply.Batch{Tables: []*apply.TableBatch{{Table: tbl, Upserts: rows}}}, sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		for _, c := range cols {
			want := c.vals
			if want == nil {
				want = []string{"b1", "b2", "b3"}
			}
			if got := column(t, db, "SELECT "+quoteIdent(c.name)+" FROM types ORDER BY id"); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
				t.Errorf("%s: got %q, want %q", c.name, got, want)
			}
		}
	})
}

// column returns the values of a query's one column, null for NULL.
func column(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v sql.RawBytes
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v == nil {
			out = append(out, null)
		} else {
			out = append(out, string(v))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkUnsentValues compares, on a 200,000-row table, a batch of
// 10,000 full images (upserted) with the same rows lacking one value
// (updated in place): go test -run '^$' -bench UnsentValues ./apply/mysql/
func BenchmarkUnsentValues(b *testing.B) {
	d := dbtest.MariaEngine.DatabaseWith(b, map[string]string{"multiStatements": "true"},
		"CREATE TABLE docs (id bigint PRIMARY KEY, n int, title text, body mediumtext NOT NULL)",
		"INSERT INTO docs SELECT seq, 0, 't', repeat('x', 100) FROM seq_1_to_200000",
		"ANALYZE TABLE docs")
	docs := table("docs", []int{0}, "id bigint", "n int", "title text", "body mediumtext")
	docs.Columns[3].Nullable = false
	tg, err := Open(context.Background(), d.DSN, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close(context.Background())
	for _, unsent := range []bool{false, true} {
		name := "upsert"
		if unsent {
			name = "update_in_place"
		}
		b.Run(name, func(b *testing.B) {
			var rows []sluice.Row
			for i := range 10000 {
				id := strconv.Itoa(1 + i*7919%200000)
				r := row(id, strconv.Itoa(i), "title "+id, strings.Repeat("y", 100))
				if unsent {
					r[3] = sluice.Value{Unchanged: true}
				}
				rows = append(rows, r)
			}
			batch := &apply.Batch{Tables: []*apply.TableBatch{{Table: docs, Upserts: rows}}}
			for b.Loop() {
				if err := tg.Apply(context.Background(), batch, sluice.Checkpoint{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(rows)*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
