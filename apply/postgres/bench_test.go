package postgres

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
		Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "k", Type: "integer"},
			{Name: "c", Type: "character varying(120)"}, {Name: "pad", Type: "character varying(60)"}}}
	return &tableDesc{src: src, display: "bench.items", ident: `"bench"."items"`,
		cols:      []sqlColumn{pgcat("id", "int8"), pgcat("k", "int4"), pgcat("c", "varchar"), pgcat("pad", "varchar")},
		generated: make([]bool, 4), written: []int{0, 1, 2, 3}, deletes: map[string]string{}, upserts: map[string]string{}}
}

// benchRows returns n full images of items.
func benchRows(n int) []sluice.Row {
	c := strings.Repeat("x", 119)
	pad := strings.Repeat("p", 59)
	rows := make([]sluice.Row, n)
	for i := range rows {
		rows[i] = sluice.Row{sluice.Text(strconv.Itoa(1_000_000 + i)), sluice.Text(strconv.Itoa(i % 1000)), sluice.Text(c), sluice.Text(pad)}
	}
	return rows
}

// BenchmarkPostgresUpsertArgs builds the statements of one batch's 5,000
// upserts and 1,000 deletes of one table and encodes their parameters as
// the pipeline sends them, their arrays in the arena a Target reuses.
func BenchmarkPostgresUpsertArgs(b *testing.B) {
	d := benchDesc()
	rows := benchRows(5000)
	keys := make([]sluice.Row, 1000)
	for i := range keys {
		keys[i] = sluice.Row{sluice.Text(strconv.Itoa(2_000_000 + i))}
	}
	var arena paramArena
	b.ReportAllocs()
	for b.Loop() {
		arena.reset()
		stmts, err := d.appendDeletes(&arena, nil, keys, false)
		if err != nil {
			b.Fatal(err)
		}
		if stmts, err = d.appendUpserts(&arena, stmts, rows, false); err != nil || len(stmts) != 2 {
			b.Fatal(len(stmts), err)
		}
		for _, s := range stmts {
			if _, _, _, err := wireParams(s.args); err != nil {
				b.Fatal(err)
			}
		}
	}
}
