package postgres

import (
	"slices"
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
			stmts, err := d.appendUpserts(nil, tc.rows, false)
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
