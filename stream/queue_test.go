package stream

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// TestQueueAcrossPages: takes of every size across reads of every size
// return the changes in order, once: take from one page at a time, as a
// capped view of it, takeInto across pages into the caller's slice.
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
		{[]int{2, 3}, []int{1, 1, 1, 1, 1, 1}},
	} {
		for _, into := range []bool{false, true} {
			ctx := context.Background()
			q := newQueue(1 << 30)
			total := 0
			var ends []int // where each page ends, in changes pushed
			for _, n := range tc.pages {
				page := make([]sluice.Change, n)
				for i := range page {
					page[i] = change(total + i)
				}
				total += n
				ends = append(ends, total)
				if err := q.push(ctx, page); err != nil {
					t.Fatal(err)
				}
			}
			next := 0
			for i := 0; next < total; i++ {
				k := tc.take[min(i, len(tc.take)-1)]
				var got []sluice.Change
				var err error
				want := min(k, total-next)
				if into {
					got, err = q.takeInto(ctx, nil, k, 0)
				} else {
					got, err = q.take(ctx, k, 0)
					// Up to the end of the page next is in.
					for _, e := range ends {
						if e > next {
							want = min(want, e-next)
							break
						}
					}
					if cap(got) != len(got) {
						t.Fatalf("pages %v: take(%d) returned a slice of cap %d, len %d: an append would write into the page", tc.pages, k, cap(got), len(got))
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != want {
					t.Fatalf("pages %v, into %v: take(%d) at %d returned %d changes, want %d", tc.pages, into, k, next, len(got), want)
				}
				for _, c := range got {
					if c.Row[0].Text != strconv.Itoa(next) {
						t.Fatalf("pages %v, into %v: got change %s, want %d", tc.pages, into, c.Row[0].Text, next)
					}
					next++
				}
				// The taker owns what it took: clearing it must not
				// touch the changes still queued.
				clear(got)
			}
			if n, b := q.size(); next != total || n != 0 || b != 0 {
				t.Errorf("pages %v, into %v: took %d of %d; queue left with %d changes, %d bytes", tc.pages, into, next, total, n, b)
			}
		}
	}
}

// TestQueueTakeBytes: a take with a byte limit stops before the change
// that would pass it (but always returns one), across pages for takeInto,
// within the first page for take, and the queue's bytes go down by
// exactly what was taken.
func TestQueueTakeBytes(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	one := sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: "x"}}}
	size := int64(one.Size())
	for _, tc := range []struct {
		name     string
		pages    []int
		max      int
		maxBytes int64
		// want is takeInto's count, wantTake take's.
		want, wantTake int
	}{
		{"no byte limit", []int{4, 4}, 6, 0, 6, 4},
		{"bytes cut inside a page", []int{10}, 10, 3*size + size/2, 3, 3},
		{"bytes cut across pages", []int{2, 2, 2}, 10, 5 * size, 5, 2},
		{"count before bytes", []int{10}, 2, 8 * size, 2, 2},
		{"one change over the limit still goes", []int{3}, 3, size / 2, 1, 1},
	} {
		for _, into := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/into=%v", tc.name, into), func(t *testing.T) {
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
				var got []sluice.Change
				var err error
				want := tc.wantTake
				if into {
					got, err = q.takeInto(ctx, nil, tc.max, tc.maxBytes)
					want = tc.want
				} else {
					got, err = q.take(ctx, tc.max, tc.maxBytes)
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != want {
					t.Fatalf("take(%d, %d bytes) returned %d changes, want %d", tc.max, tc.maxBytes, len(got), want)
				}
				if n, b := q.size(); n != total-want || b != int64(total-want)*size {
					t.Errorf("queue left with %d changes, %d bytes; want %d, %d", n, b, total-want, int64(total-want)*size)
				}
			})
		}
	}
}

// BenchmarkQueuePushTake pushes reads of 1,000 changes and takes them as
// the dispatcher does (up to 10,000 at a time): the queue's own cost per
// change between the reader and the lanes.
func BenchmarkQueuePushTake(b *testing.B) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	const reads, perRead = 4, 1000
	pages := make([][]sluice.Change, reads)
	for i := range pages {
		pages[i] = make([]sluice.Change, perRead)
		for j := range pages[i] {
			pages[i][j] = sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(j)}}}
		}
	}
	ctx := context.Background()
	q := newQueue(1 << 40)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, p := range pages {
			if err := q.push(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
		for got := 0; got < reads*perRead; {
			cs, err := q.take(ctx, 10_000, 0)
			if err != nil {
				b.Fatal(err)
			}
			got += len(cs)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*reads*perRead), "ns/change")
}
