package stream

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// TestQueueAcrossPages: takes of every size across reads of every size
// return the changes in order, once, and leave the reader's slices as they
// were.
func TestQueueAcrossPages(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	change := func(i int) sluice.Change {
		return sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(i)}}}
	}
	for _, tc := range []struct{ pages, take []int }{
		{[]int{5}, []int{5}},
		{[]int{3, 4, 1}, []int{2, 2, 2, 2}},
		{[]int{1, 1, 1, 1}, []int{4}},
		{[]int{10, 2}, []int{1, 7, 100}},
	} {
		ctx := context.Background()
		q := newQueue(1 << 30)
		var read [][]sluice.Change
		total := 0
		for _, n := range tc.pages {
			page := make([]sluice.Change, n)
			for i := range page {
				page[i] = change(total + i)
			}
			total += n
			read = append(read, page)
			if err := q.push(ctx, page); err != nil {
				t.Fatal(err)
			}
		}
		next := 0
		for _, k := range tc.take {
			if next == total {
				break
			}
			got, err := q.take(ctx, k, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := min(k, total-next); len(got) != want {
				t.Fatalf("pages %v: take(%d) returned %d changes, want %d", tc.pages, k, len(got), want)
			}
			for _, c := range got {
				if c.Row[0].Text != strconv.Itoa(next) {
					t.Fatalf("pages %v: got change %s, want %d", tc.pages, c.Row[0].Text, next)
				}
				next++
			}
		}
		if n, b := q.size(); next != total || n != 0 || b != 0 {
			t.Errorf("pages %v: took %d of %d; queue left with %d changes, %d bytes", tc.pages, next, total, n, b)
		}
		for _, page := range read {
			for _, c := range page {
				if c.Table == nil {
					t.Fatalf("pages %v: the queue cleared a change in the reader's slice", tc.pages)
				}
			}
		}
	}
}

// TestQueueTakeBytes: a take with a byte limit stops before the change
// that would pass it (but always returns one), across pages, and the
// queue's bytes go down by exactly what was taken.
func TestQueueTakeBytes(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	one := sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: "x"}}}
	size := int64(one.Size())
	for _, tc := range []struct {
		name     string
		pages    []int
		max      int
		maxBytes int64
		want     int
	}{
		{"no byte limit", []int{4, 4}, 6, 0, 6},
		{"bytes cut inside a page", []int{10}, 10, 3*size + size/2, 3},
		{"bytes cut across pages", []int{2, 2, 2}, 10, 5 * size, 5},
		{"count before bytes", []int{10}, 2, 8 * size, 2},
		{"one change over the limit still goes", []int{3}, 3, size / 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			q := newQueue(1 << 30)
			total := 0
			for _, n := range tc.pages {
				page := make([]sluice.Change, n)
				for i := range page {
					page[i] = one
				}
				total += n
				if err := q.push(ctx, page); err != nil {
					t.Fatal(err)
				}
			}
			got, err := q.take(ctx, tc.max, tc.maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("take(%d, %d bytes) returned %d changes, want %d", tc.max, tc.maxBytes, len(got), tc.want)
			}
			if n, b := q.size(); n != total-tc.want || b != int64(total-tc.want)*size {
				t.Errorf("queue left with %d changes, %d bytes; want %d, %d", n, b, total-tc.want, int64(total-tc.want)*size)
			}
		})
	}
}
