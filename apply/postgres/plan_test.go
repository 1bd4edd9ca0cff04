package postgres

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// TestAppendUpsertsGroups checks that rows are grouped by the columns they
// carry, in first-seen order, each group keeping its rows' order, however
// the groups interleave, and that each statement's arrays are its own.
func TestAppendUpsertsGroups(t *testing.T) {
	full := func(id string) sluice.Row { return row(id, "1", "c"+id, "p") }
	part := func(id string) sluice.Row {
		return sluice.Row{sluice.Text(id), sluice.Text("2"), {Unchanged: true}, sluice.Text("p")}
	}
	tests := []struct {
		name string
		rows []sluice.Row
		want []string // per statement, the ids of its rows
	}{
		{"one group", []sluice.Row{full("1"), full("2"), full("3")}, []string{"1 2 3"}},
		{"second group last", []sluice.Row{full("1"), full("2"), part("3")}, []string{"1 2", "3"}},
		{"interleaved", []sluice.Row{full("1"), part("2"), full("3"), part("4"), full("5")}, []string{"1 3 5", "2 4"}},
		{"partial first", []sluice.Row{part("1"), full("2"), part("3")}, []string{"1 3", "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := benchDesc()
			in := slices.Clone(tc.rows)
			stmts, err := d.appendUpserts(nil, nil, tc.rows, false)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range stmts {
				ids := decodeArray(t, *s.args[0].(*arrayParam))
				got = append(got, strings.Join(ids, " "))
				if s.inPlace != (len(s.args) == 3) {
					t.Errorf("statement of %v: in place %v with %d arrays", ids, s.inPlace, len(s.args))
				}
				if len(s.args) == 4 {
					cs := decodeArray(t, *s.args[2].(*arrayParam))
					for i, id := range ids {
						if cs[i] != "c"+id {
							t.Errorf("row %s carries c %q", id, cs[i])
						}
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("statements carry %q, want %q", got, tc.want)
			}
			for i := range in {
				if &in[i][0] != &tc.rows[i][0] {
					t.Errorf("row %d of the input was replaced", i)
				}
			}
		})
	}
}

// TestParamArena checks that the arrays of a batch's statements, encoded
// in one arena, stay each their own until the arena is reset, whatever
// the blocks and a column falling back to text; and that reset keeps a
// block for the next batch, up to maxArena.
func TestParamArena(t *testing.T) {
	cols := []sqlColumn{pgcat("id", "int8"), pgcat("s", "text")}
	batch := func(prefix string, n int, bad bool) []sluice.Row {
		rows := make([]sluice.Row, n)
		for i := range rows {
			id := strconv.Itoa(i)
			if bad && i == n-1 {
				id = " " + id + strings.Repeat(" ", 20) // not an int8 to ParseInt: the column goes as text, longer
			}
			rows[i] = row(id, prefix+strings.Repeat("v", i%50))
		}
		return rows
	}
	tests := []struct {
		name  string
		sizes []int // rows per statement
		bad   []bool
	}{
		{"small", []int{1, 2, 3}, []bool{false, false, false}},
		{"past a block", []int{2000, 2000, 2000}, []bool{false, true, false}},
		{"one statement larger than maxArena", []int{5, 120_000, 5}, []bool{true, false, false}},
	}
	var arena paramArena
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			arena.reset()
			var all [][]sluice.Row
			var args [][]any
			for i, n := range tc.sizes {
				rows := batch(tc.name+strconv.Itoa(i), n, tc.bad[i])
				a, kinds := columnParams(&arena, rows, nil, cols)
				if tc.bad[i] != (kinds[0] == textParam) {
					t.Errorf("statement %d: id kind %v", i, kinds[0])
				}
				all, args = append(all, rows), append(args, a)
			}
			// Every statement's arrays, read after all were encoded.
			for i, rows := range all {
				for c := range cols {
					got := decodeArray(t, *args[i][c].(*arrayParam))
					for j, r := range rows {
						if want := r[c].Text; got[j] != want {
							t.Fatalf("statement %d, column %d, row %d: %q, want %q", i, c, j, got[j], want)
						}
					}
				}
			}
			if cap(arena.buf) == 0 {
				t.Error("the arena kept no block")
			}
		})
	}
	// Appending past what take gave moves to memory of its own, which the
	// arena does not count as its own.
	arena.reset()
	b := arena.take(10)
	b = append(b, make([]byte, cap(arena.buf)+1)...)
	arena.keep(b)
	if len(arena.buf) != 0 {
		t.Errorf("kept %d bytes appended past the block", len(arena.buf))
	}
	b = append(arena.take(10), "0123456789"...)
	arena.keep(b)
	if string(arena.buf) != "0123456789" {
		t.Errorf("arena holds %q", arena.buf)
	}
	arena.buf = make([]byte, 10, maxArena+1)
	arena.reset()
	if arena.buf != nil {
		t.Errorf("reset kept a block of %d bytes", cap(arena.buf))
	}
	arena.buf = make([]byte, 10, maxArena)
	arena.reset()
	if len(arena.buf) != 0 || cap(arena.buf) != maxArena {
		t.Errorf("reset left len %d, cap %d", len(arena.buf), cap(arena.buf))
	}
}
