package mysql

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// benchDesc is the description of a table like a catch-up benchmark's:
// items (id bigint primary key, k int, c varchar(120), pad varchar(60)).
func benchDesc() *tableDesc {
	src := &sluice.Table{Name: sluice.TableName{Schema: "bench", Name: "items"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "k", Type: "int"},
			{Name: "c", Type: "varchar(120)"}, {Name: "pad", Type: "varchar(60)"}}}
	cols := []sqlColumn{{"id", kindNumber}, {"k", kindNumber}, {"c", kindString}, {"pad", kindString}}
	return &tableDesc{src: src, display: "bench.items", ident: tableIdent(src.Name), cols: cols,
		key: cols[:1], generated: make([]bool, 4), written: []int{0, 1, 2, 3}, keyCharsets: make([]charset, 1)}
}

// benchRows returns n full images of items.
func benchRows(n int) []sluice.Row {
	c := strings.Repeat("x", 100) + "'quoted'"
	pad := strings.Repeat("p", 59)
	rows := make([]sluice.Row, n)
	for i := range rows {
		rows[i] = sluice.Row{sluice.Text(strconv.Itoa(1_000_000 + i)), sluice.Text(strconv.Itoa(i % 1000)), sluice.Text(c), sluice.Text(pad)}
	}
	return rows
}

// BenchmarkMySQLUpsertSQL builds the statements of one batch's 5,000
// upserts and 1,000 deletes of one table, under a 64 MiB packet limit.
func BenchmarkMySQLUpsertSQL(b *testing.B) {
	d := benchDesc()
	rows := benchRows(5000)
	keys := make([]sluice.Row, 1000)
	for i := range keys {
		keys[i] = sluice.Row{sluice.Text(strconv.Itoa(2_000_000 + i))}
	}
	const limit = 64<<20 - 256
	b.ReportAllocs()
	for b.Loop() {
		stmts, err := d.appendDeletes(nil, keys, limit)
		if err != nil {
			b.Fatal(err)
		}
		if stmts, err = d.appendUpserts(stmts, rows, limit); err != nil || len(stmts) != 2 {
			b.Fatal(len(stmts), err)
		}
	}
}
