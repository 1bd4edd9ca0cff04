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
					if err := q.push(ctx, c, unlimited, 0); err != nil {
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
			if err := q.push(ctx, sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(i)}}}, one, 0); err != nil {
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
			if err := q.push(ctx, sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(i)}}}, items, 0); err != nil {
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
