package mysql

import (
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// TestAppendUpsertsGroups checks that rows are grouped by the columns they
// carry, in first-seen order, each group keeping its rows' order, however
// the groups interleave.
func TestAppendUpsertsGroups(t *testing.T) {
	full := func(id string) sluice.Row { return row(id, "1", "c", "p") }
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
			in := append([]sluice.Row(nil), tc.rows...)
			stmts, err := d.appendUpserts(nil, tc.rows, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range stmts {
				if s.rowCheck {
					continue
				}
				var ids []string
				for _, r := range tc.rows {
					id := r[0].Text
					// Each row's key is the first value of its tuple.
					if strings.Contains(s.sql, "("+id+", ") || strings.Contains(s.sql, "SELECT "+id+", ") {
						ids = append(ids, id)
					}
				}
				got = append(got, strings.Join(ids, " "))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
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

// FuzzAppendValue checks that the literals written into a statement's
// []byte are those writeValue writes, which FuzzSQL lexes and the golden
// files pin, for every kind of column.
func FuzzAppendValue(f *testing.F) {
	for _, s := range []string{"", "0", "-1.5e-3", "3.4028235e38", "1e39", "it's", "''", "\x00\xff\\", "ü", "NaN", "+.5"} {
		f.Add(s, false)
	}
	f.Add("", true)
	f.Fuzz(func(t *testing.T, s string, null bool) {
		v := sluice.Value{Text: s, Null: null}
		for _, k := range []valueKind{kindString, kindNumber, kindBinary, kindFloat32} {
			var b strings.Builder
			writeValue(&b, k, v)
			if got := string(appendValue([]byte("prefix"), k, v)); got != "prefix"+b.String() {
				t.Errorf("kind %d, %q: appendValue %q, writeValue %q", k, s, got, b.String())
			}
			if n := valueLen(k, v); n < b.Len() {
				t.Errorf("kind %d, %q: valueLen %d, wrote %d", k, s, n, b.Len())
			}
			cols := []sqlColumn{{"a", k}, {"b", kindString}}
			r := sluice.Row{v, sluice.Text(s)}
			var tb strings.Builder
			writeTuple(&tb, cols, []int{0, 1}, r)
			if got := string(appendTuple(nil, cols, []int{0, 1}, r)); got != tb.String() {
				t.Errorf("kind %d, %q: appendTuple %q, writeTuple %q", k, s, got, tb.String())
			}
		}
	})
}
