package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// unsentDocs is a table whose NOT NULL columns an update may leave unsent,
// as a PostgreSQL source leaves out unchanged TOASTed values.
func unsentDocs(t *testing.T) (string, *pgx.Conn, *sluice.Table, func(vals ...string) sluice.Row) {
	t.Helper()
	url, conn := testDB(t,
		"CREATE TABLE docs (id int PRIMARY KEY, n int NOT NULL, title text, body text NOT NULL CHECK (body <> ''))",
		"INSERT INTO docs VALUES (1, 0, 't1', 'body one'), (2, 0, 't2', 'body two'), (3, 0, 't3', 'body three'), (4, 0, 't4', 'body four'), (6, 0, 't6', 'body six')")
	docs := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "docs"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "n", Type: "integer"},
			{Name: "title", Type: "text", Nullable: true}, {Name: "body", Type: "text"}}}
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
	return url, conn, docs, img
}

// TestUnsentValuesInNotNullColumns: updates that leave NOT NULL columns
// unsent (a PostgreSQL source's unchanged TOASTed values) update the rows
// in place, keeping those values, whatever else the batch holds: compacted
// or in source order, one statement per row or pipelined, and again as a
// replay. PostgreSQL checks NOT NULL (and CHECK constraints) on the row an
// INSERT … ON CONFLICT proposes before it finds the conflict, so an upsert
// without those columns fails.
func TestUnsentValuesInNotNullColumns(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("in order %v", inOrder), func(t *testing.T) {
			modes(t, func(t *testing.T, mode Mode) {
				url, conn, docs, img := unsentDocs(t)
				tg := openTarget(t, url, mode)
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
				}, order)
				want := `[(1,11,"t1 new","body one") (2,2,t2,"body two") (3,0,t3,"body three") (4,4,,"body four new") (5,5,t5,"body five") (60,6,t6,"body six")]`
				for i := range 2 { // the second is a replay and changes nothing
					if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: uint64(2 + i)}); err != nil {
						t.Fatalf("apply %d: %v", i, err)
					}
					if got := dump(t, conn, "docs"); fmt.Sprint(got) != want {
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
// nothing. It never passes as a no-op.
func TestUnsentValuesOfMissingRow(t *testing.T) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn, docs, img := unsentDocs(t)
		tg := openTarget(t, url, mode)
		ctx := context.Background()
		before := fmt.Sprint(dump(t, conn, "docs"))
		for _, c := range []struct {
			name string
			rows []sluice.Row
			want string
		}{
			{"one row", []sluice.Row{img("77", "1", "-", "-")}, "(id=77)"},
			{"among others", []sluice.Row{img("1", "9", "-", "-"), img("77", "1", "-", "-"), img("2", "9", "-", "-")}, "public.docs"},
			{"nullable only", []sluice.Row{img("1", "9", "x", "body one"), img("78", "1", "-", "body")}, "public.docs"},
		} {
			b := &apply.Batch{Tables: []*apply.TableBatch{{Table: docs, Upserts: append([]sluice.Row{
				row("4", "40", "t4", "body four changed"), // a full row, rolled back with the others
			}, c.rows...)}}}
			err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: 1})
			if !errors.Is(err, apply.ErrRowMissing) || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), "target differs from the source") {
				t.Errorf("%s: err = %v, want apply.ErrRowMissing naming %s", c.name, err, c.want)
			}
			if got := fmt.Sprint(dump(t, conn, "docs")); got != before {
				t.Fatalf("%s: the failed batch left %v, want %v", c.name, got, before)
			}
		}
	})
}

// TestUnsentValuesStatements: rows with unsent values cost one statement
// per set of columns sent, whatever their number, as upserts do.
func TestUnsentValuesStatements(t *testing.T) {
	url, _, docs, img := unsentDocs(t)
	tg := openTarget(t, url, Pipelined)
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
	if len(stmts) != 3 {
		t.Fatalf("%d statements for 900 rows in 3 column sets, want 3", len(stmts))
	}
}

// BenchmarkUnsentValues compares, on a 200,000-row table, a batch of
// 10,000 full images (upserted) with the same rows lacking one value
// (updated in place): go test -run '^$' -bench UnsentValues ./apply/postgres/
func BenchmarkUnsentValues(b *testing.B) {
	d := dbtest.PGEngine.DatabaseWith(b, nil,
		"CREATE TABLE docs (id bigint PRIMARY KEY, n int NOT NULL, title text, body text NOT NULL)",
		"INSERT INTO docs SELECT g, 0, 't', repeat('x', 100) FROM generate_series(1, 200000) g",
		"ANALYZE docs")
	docs := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "docs"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "n", Type: "integer"},
			{Name: "title", Type: "text", Nullable: true}, {Name: "body", Type: "text"}}}
	tg, err := Open(context.Background(), d.URL, Config{})
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
