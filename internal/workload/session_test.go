package workload

import "testing"

// TestFirstLoggedAs: which statement each session form logs without its
// full rows, as the binlog reader must see it. The server logs no row for
// an update that leaves it as it was, so such an update does not count.
func TestFirstLoggedAs(t *testing.T) {
	s := newSchema(MySQL)
	items, lines := s.Table(ItemsTable), s.Table(LinesTable)
	row := func(t *Table, vals ...any) []any {
		r := make([]any, len(t.Columns))
		copy(r, vals)
		return r
	}
	insItem := Stmt{Op: Insert, Table: items, Cols: written(items), Vals: row(items, int64(1), "u1", int32(5), "body", "note")}
	insLine := Stmt{Op: Insert, Table: lines, Cols: written(lines), Vals: row(lines, int64(1), int64(1), "sku", int32(1))}
	sameQty := Stmt{Op: Update, Table: lines, Key: []any{int64(1), int64(1)}, Cols: []int{3}, Vals: []any{int32(1)}}
	newQty := Stmt{Op: Update, Table: lines, Key: []any{int64(1), int64(1)}, Cols: []int{3}, Vals: []any{int32(2)}}
	moveItem := Stmt{Op: Update, Table: items, Key: []any{int64(1)}, Cols: []int{0}, Vals: []any{int64(2)}}
	delLine := Stmt{Op: Delete, Table: lines, Key: []any{int64(1), int64(1)}}
	w := &Workload{Txs: []Tx{
		{Index: 0, Stmts: []Stmt{insItem, insLine}},
		{Index: 1, Stmts: []Stmt{sameQty}},
		{Index: 2, Stmts: []Stmt{newQty}},
		{Index: 3, Stmts: []Stmt{moveItem}},
		{Index: 4, Stmts: []Stmt{delLine}},
	}}
	cases := []struct {
		form SessionForm
		from int
		want int
	}{
		{FullRows, 0, -1},
		{Statement, 0, 0},
		{Mixed, 3, 3},
		{Minimal, 0, 2}, // an insert of every column is whole; the unchanged update logs nothing
		{NoBlob, 0, 3},  // wl_lines has no BLOB or TEXT column
		{NoBlob, 4, -1},
		{Minimal, 4, 4},
	}
	for _, c := range cases {
		if got := w.FirstLoggedAs(c.form, c.from); got != c.want {
			t.Errorf("%s from %d: %d, want %d", c.form, c.from, got, c.want)
		}
	}
	for _, name := range []string{"noblob", " Minimal", "STATEMENT", "mixed", "none", ""} {
		if _, err := ParseSessionForm(name); err != nil {
			t.Errorf("ParseSessionForm(%q): %v", name, err)
		}
	}
	if _, err := ParseSessionForm("blob"); err == nil {
		t.Error("ParseSessionForm(blob): no error")
	}
}
