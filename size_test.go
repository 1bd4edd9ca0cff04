package sluice

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestChangeSizeCoversHeap: what Change.Size counts for a run of changes
// must cover what they really take on the heap (the queue's bound is only
// as good as this count), for narrow and wide rows alike. The changes are
// built as the readers build them: a slice of Change values, each with its
// own Row and Key arrays and strings.
func TestChangeSizeCoversHeap(t *testing.T) {
	tbl := &Table{Name: TableName{Name: "t"}}
	for _, tc := range []struct {
		name   string
		values []int // lengths of the row's text values
	}{
		{"int, 64-char text, int", []int{6, 64, 6}},
		{"one key", []int{7}},
		{"wide row", []int{6, 200, 30, 30, 30, 30, 8, 8, 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 20_000
			before := heapAlloc()
			cs := make([]Change, n)
			var counted int
			for i := range cs {
				row := make(Row, len(tc.values))
				for j, l := range tc.values {
					s := strconv.Itoa(i)
					row[j] = Value{Text: s + strings.Repeat("x", max(0, l-len(s)))}
				}
				cs[i] = Change{Table: tbl, Op: OpUpdate, Row: row, Key: Row{{Text: strconv.Itoa(i)}},
					Pos: Position{Kind: "binlog", Token: "mysql-bin.000001:" + strconv.Itoa(1000+i) + ":3"}}
				counted += cs[i].Size()
			}
			used := heapAlloc() - before
			runtime.KeepAlive(cs)
			t.Logf("%d changes: Size counts %d bytes, the heap grew by %d (%.0f %%)", n, counted, used, 100*float64(counted)/float64(used))
			if uint64(counted) < used*9/10 {
				t.Errorf("Size counts %d bytes for %d changes that take %d on the heap: the queue would hold more than it says", counted, n, used)
			}
		})
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
