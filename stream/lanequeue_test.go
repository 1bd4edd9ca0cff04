package stream

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
)

// TestLaneQueueModel pushes, peeks and drops at random against a plain
// slice: the ring must hand out the same changes, by position and by
// number, however its head wraps, grows and shrinks.
func TestLaneQueueModel(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	change := func(i int) sluice.Change {
		return sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(i)}}}
	}
	ctx := context.Background()
	for seed := uint64(1); seed <= 50; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		q := newLaneQueue(1 << 40)
		var model []sluice.Change
		var base uint64 // number of model[0]
		pushed := 0
		unlimited := func() int { return 1 << 30 }
		for step := 0; step < 400; step++ {
			switch r.IntN(4) {
			case 0, 1:
				for range r.IntN(300) {
					c := change(pushed)
					pushed++
					if err := q.push(ctx, &c, unlimited, 0); err != nil {
						t.Fatal(err)
					}
					model = append(model, c)
				}
			case 2:
				k := r.IntN(len(model) + 1)
				q.drop(k)
				model, base = model[k:], base+uint64(k)
			case 3:
				from := base + uint64(r.IntN(len(model)+2))
				most := r.IntN(200)
				maxBytes := anyBytes(r)
				got := q.peekFrom(from, most, maxBytes)
				var want []sluice.Change
				if off := int(from - base); off < len(model) {
					want = model[off:min(len(model), off+most)]
					want = want[:bytePrefix(want, maxBytes, changeSize)]
				}
				if !sameChanges(got, want) {
					t.Fatalf("seed %d step %d: peekFrom(%d, %d) = %d changes, want %d", seed, step, from, most, len(got), len(want))
				}
			}
			if q.len() != len(model) {
				t.Fatalf("seed %d step %d: len %d, want %d", seed, step, q.len(), len(model))
			}
			if len(model) > 0 {
				most := 1 + r.IntN(len(model))
				maxBytes := anyBytes(r)
				want := model[:most]
				want = want[:bytePrefix(want, maxBytes, changeSize)]
				if got := q.peek(ctx, most, maxBytes, time.Millisecond, nil); !sameChanges(got, want) {
					t.Fatalf("seed %d step %d: peek(%d, %d bytes) differs from the model", seed, step, most, maxBytes)
				}
			}
		}
	}
}

// anyBytes is a byte cap for a peek: none (0), or one that cuts a run of
// the test's changes somewhere, or not at all.
func anyBytes(r *rand.Rand) int64 {
	if r.IntN(3) == 0 {
		return 0
	}
	return int64(r.IntN(40 << 10))
}

func sameChanges(a, b []sluice.Change) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Row[0].Text != b[i].Row[0].Text {
			return false
		}
	}
	return true
}

// TestLaneQueueWaitFor: a wait for a change not yet pushed ends when it
// is, and not before; a stop ends it with false.
func TestLaneQueueWaitFor(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	ctx := context.Background()
	q := newLaneQueue(1 << 30)
	one := func() int { return 1 << 30 }
	push := func(n int) {
		for i := range n {
			if err := q.push(ctx, &sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(i)}}}, one, 0); err != nil {
				t.Error(err)
			}
		}
	}
	push(3)
	if !q.waitFor(ctx, 2, nil) {
		t.Fatal("waitFor(2) with 3 changes queued: false")
	}
	done := make(chan bool)
	go func() { done <- q.waitFor(ctx, 9, nil) }()
	push(6) // numbers 3..8
	select {
	case <-done:
		t.Fatal("waitFor(9) returned with only 9 changes (0..8) pushed")
	case <-time.After(50 * time.Millisecond):
	}
	push(1)
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("waitFor(9) = false once change 9 was pushed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waitFor(9) still waiting after change 9 was pushed")
	}
	// Two waiters for different changes: reaching the first's does not
	// end the second's wait (both wait on one channel).
	far, near := make(chan bool), make(chan bool)
	go func() { far <- q.waitFor(ctx, 30, nil) }()
	time.Sleep(10 * time.Millisecond) // let far register first: the later, smaller mark replaces its own
	go func() { near <- q.waitFor(ctx, 15, nil) }()
	time.Sleep(10 * time.Millisecond)
	push(10) // numbers 10..19
	select {
	case <-near:
	case <-time.After(5 * time.Second):
		t.Fatal("waitFor(15) still waiting after change 15 was pushed")
	}
	select {
	case <-far:
		t.Fatal("waitFor(30) returned with only 20 changes (0..19) pushed")
	case <-time.After(50 * time.Millisecond):
	}
	push(11) // numbers 20..30
	if !<-far {
		t.Fatal("waitFor(30) = false once change 30 was pushed")
	}
	stop := make(chan struct{})
	go func() { done <- q.waitFor(ctx, 100, stop) }()
	close(stop)
	if <-done {
		t.Fatal("waitFor(100) = true after stop")
	}
}

// TestLaneQueueWaitForOrFull: a wait for a change the queue has no room
// for ends once a push finds the queue full, while waitFor keeps waiting;
// a drop makes room, and the next wait waits again.
func TestLaneQueueWaitForOrFull(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := newLaneQueue(1 << 30)
	items := func() int { return 10 } // room for 10 changes
	pushed := make(chan error, 1)
	go func() {
		for i := range 15 {
			if err := q.push(ctx, &sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(i)}}}, items, 0); err != nil {
				pushed <- err
				return
			}
		}
		pushed <- nil
	}()
	orFull := make(chan bool, 1)
	go func() { orFull <- q.waitForOrFull(ctx, 12, nil) }()
	select {
	case ok := <-orFull:
		if !ok {
			t.Fatal("waitForOrFull(12) = false with the queue full")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waitForOrFull(12) still waiting with the queue full at 10 changes")
	}
	if n := q.len(); n != 10 {
		t.Fatalf("queue holds %d changes, want 10", n)
	}
	plain := make(chan bool, 1)
	go func() { plain <- q.waitFor(ctx, 12, nil) }()
	select {
	case <-plain:
		t.Fatal("waitFor(12) returned with only 10 changes (0..9) queued")
	case <-time.After(50 * time.Millisecond):
	}
	q.drop(5) // room for the rest
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	if !<-plain {
		t.Fatal("waitFor(12) = false once change 12 was pushed")
	}
	// With room again, a wait for a change never pushed waits.
	go func() { orFull <- q.waitForOrFull(ctx, 20, nil) }()
	select {
	case <-orFull:
		t.Fatal("waitForOrFull(20) returned with room in the queue and change 20 not pushed")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if <-orFull {
		t.Fatal("waitForOrFull(20) = true after its context ended")
	}
}

// BenchmarkLaneQueue pushes 10,000 changes into a lane's queue one by one,
// as the dispatcher routes them, and has a lane take them in batches of
// 1,000: peekFrom (the batch compacted ahead), peek (the batch sent) and
// drop once committed.
func BenchmarkLaneQueue(b *testing.B) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	const n, batch = 10_000, 1000
	cs := make([]sluice.Change, n)
	for i := range cs {
		cs[i] = sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(i)}}}
	}
	ctx := context.Background()
	// As a lane holds them: a few batches ahead, within its share of a
	// 32 MiB queue.
	ahead := func() int { return 3 * batch }
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		q := newLaneQueue(16 << 20)
		var next uint64
		for i := range cs {
			if err := q.push(ctx, &cs[i], ahead, 0); err != nil {
				b.Fatal(err)
			}
			if (i+1)%batch == 0 {
				if got := q.peekFrom(next, batch, 0); len(got) != batch {
					b.Fatalf("peekFrom: %d changes, want %d", len(got), batch)
				}
				if got := q.peek(ctx, batch, 0, 0, nil); len(got) != batch {
					b.Fatalf("peek: %d changes, want %d", len(got), batch)
				}
				q.drop(batch)
				next += batch
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/change")
}

// TestLaneQueueViewStable: a batch's changes, a view of the ring when
// they do not wrap, stay as they were while the queue takes more changes
// (growing its ring, or wrapping around into slots freed before them) and
// drops the committed ones before them; and an append to them cannot
// write into the ring.
func TestLaneQueueViewStable(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	ctx := context.Background()
	unlimited := func() int { return 1 << 30 }
	pushed := 0
	q := newLaneQueue(1 << 40)
	push := func(n int) {
		for range n {
			c := sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(pushed)}}}
			pushed++
			if err := q.push(ctx, &c, unlimited, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(what string, cs []sluice.Change, from int) {
		t.Helper()
		for i, c := range cs {
			if c.Row == nil || c.Row[0].Text != strconv.Itoa(from+i) {
				t.Fatalf("%s: change %d of the batch changed to %+v, want number %d", what, i, c, from+i)
			}
		}
	}
	push(minRing) // a full ring of minRing
	a := q.peekFrom(10, 20, 0)
	if len(a) != 20 || cap(a) != len(a) {
		t.Fatalf("peekFrom(10, 20): %d changes, cap %d", len(a), cap(a))
	}
	b := q.peek(ctx, 10, 0, 0, nil)
	_ = append(b, sluice.Change{}) // must not write over change 10
	push(1000)                     // grows the ring
	check("after a grow", a, 10)
	check("after an append to the batch before it", a, 10)
	q.drop(30) // a's changes included: a is done with
	c := q.peekFrom(40, 500, 0)
	push(5000) // grows again
	q.drop(10) // up to 40
	check("after a drop before it", c, 40)
	// Wrap around: drop most, push into the freed slots.
	q.drop(q.len() - 10)
	first := pushed - 10
	d := q.peekFrom(uint64(first), 10, 0)
	push(3000)
	check("after pushes into freed slots", d, first)
	q.drop(10)
	e := q.peek(ctx, 3000, 0, 0, nil)
	check("a batch that may wrap", e, first+10)
}
