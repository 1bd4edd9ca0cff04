package apply

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// benchItems is a table like a catch-up benchmark's: items (id bigint
// primary key, k int, c varchar(120), pad varchar(60)).
func benchItems() *sluice.Table {
	return &sluice.Table{Name: sluice.TableName{Schema: "bench", Name: "items"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "k", Type: "int"},
			{Name: "c", Type: "varchar(120)"}, {Name: "pad", Type: "varchar(60)"}}}
}

// benchChanges returns n changes of t as a catch-up carries them: half
// inserts of new rows, three in ten updates (of rows inserted earlier in
// the batch and of rows from before it), one in five deletes.
func benchChanges(t *sluice.Table, n int) []sluice.Change {
	c := strings.Repeat("x", 119)
	pad := strings.Repeat("p", 59)
	img := func(id int) sluice.Row {
		return sluice.Row{sluice.Text(strconv.Itoa(id)), sluice.Text(strconv.Itoa(id % 1000)), sluice.Text(c), sluice.Text(pad)}
	}
	out := make([]sluice.Change, 0, n)
	next := 1_000_000
	for i := range n {
		switch i % 10 {
		case 0, 1, 2, 3, 4:
			next++
			out = append(out, sluice.Change{Table: t, Op: sluice.OpInsert, Row: img(next)})
		case 5, 6:
			id := next - i%7
			out = append(out, sluice.Change{Table: t, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text(strconv.Itoa(id))}, Row: img(id)})
		case 7:
			id := 1 + i*3
			out = append(out, sluice.Change{Table: t, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text(strconv.Itoa(id))}, Row: img(id)})
		default:
			id := 1 + i*5
			out = append(out, sluice.Change{Table: t, Op: sluice.OpDelete, Key: sluice.Row{sluice.Text(strconv.Itoa(id))}})
		}
	}
	return out
}

// BenchmarkCompactor is a batch of 10,000 changes added and compacted.
func BenchmarkCompactor(b *testing.B) {
	changes := benchChanges(benchItems(), 10_000)
	// A batch compacted ahead is added as its changes reach the lane,
	// 512 at a time (stream's prepareChunk); Expect sizes it first.
	for _, bc := range []struct {
		name   string
		run    int
		expect bool
	}{{"one run", len(changes), false}, {"runs of 512", 512, false}, {"runs of 512, expected", 512, true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c := NewCompactor(func(sluice.TableName) bool { return false })
				if bc.expect {
					c.Expect(len(changes))
				}
				for i := 0; i < len(changes); i += bc.run {
					c.Add(changes[i:min(i+bc.run, len(changes))])
				}
				if bt := c.Batch(); bt.Rows == 0 {
					b.Fatal("empty batch")
				}
			}
		})
	}
}
