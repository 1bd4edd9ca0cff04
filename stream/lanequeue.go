package stream

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
)

// laneQueue is a lane's bounded FIFO of the changes routed to it: a ring
// that keeps its capacity as changes are committed and dropped from its
// head, so that a queue of a hundred thousand changes is not copied each
// time it grows past what a batch took from it. Changes are numbered from
// zero in the order they were pushed (the lane's count of its changes):
// the batch compacted ahead reads them by number while the one before it
// commits and is dropped.
type laneQueue struct {
	mu   sync.Mutex
	ring []sluice.Change
	head int    // index in ring of the first queued change
	n    int    // changes queued
	base uint64 // number of the first queued change
	// bytes is the size of the queued changes; max bounds it (see push).
	bytes, max int64
	// items is the change count push last read from its maxItems, zero
	// when it must ask again (a commit can shrink the lane's batches).
	items int
	// notEmpty is closed and replaced by a push while awaited is set: only
	// then, so that a push per change does not allocate a channel.
	notEmpty chan struct{}
	awaited  bool
	// grown is closed and replaced when the queue reaches the change
	// numbered grownAt (zero: nobody waits): the batch compacted ahead
	// waits for a run of changes, not for each one.
	grown   chan struct{}
	grownAt uint64
	notFull chan struct{}
	// full is set while a push waits for room, until a drop or a new
	// share makes some.
	full bool
}

func newLaneQueue(max int64) *laneQueue {
	return &laneQueue{max: max, notEmpty: make(chan struct{}), notFull: make(chan struct{}), grown: make(chan struct{})}
}

// setMax changes the queue's share of the stream's queue bytes.
func (q *laneQueue) setMax(max int64) {
	q.mu.Lock()
	q.max = max
	q.full = false
	q.mu.Unlock()
}

// at is the i-th queued change.
func (q *laneQueue) at(i int) *sluice.Change {
	return &q.ring[(q.head+i)%len(q.ring)]
}

// minRing is the ring's first size: a lane that sees a trickle of
// changes keeps to it.
const minRing = 64

// maxRingHint bounds the size a ring grows to at once (see grow): a
// ring larger than that is given back once drained (see drop).
const maxRingHint = 1 << 16

// grow enlarges the full ring, keeping the queued changes in order from
// index 0: to hint changes at once when more than double (the queue fills
// up to its limits, and growing by doubling from minRing copied every
// change several times over), else to double. The old array is left as
// it is: a batch may still read a view of it (see peek).
func (q *laneQueue) grow(hint int) {
	n := max(2*len(q.ring), minRing)
	if len(q.ring) >= minRing {
		n = max(n, min(hint, maxRingHint))
	}
	ring := make([]sluice.Change, n)
	q.copyOut(ring[:q.n], 0)
	q.ring, q.head = ring, 0
}

// copyOut copies the queued changes [from, from+len(dst)) into dst.
func (q *laneQueue) copyOut(dst []sluice.Change, from int) {
	if len(dst) == 0 {
		return
	}
	i := (q.head + from) % len(q.ring)
	k := copy(dst, q.ring[i:])
	if k < len(dst) {
		copy(dst[k:], q.ring[:len(dst)-k])
	}
}

// push appends c, waiting while the queue holds its share of the stream's
// queue bytes, maxBytes (when > 0) or maxItems() changes (asked again on
// every wake-up: the lane's batch size grows while the push waits). A push
// into an empty queue always goes through.
func (q *laneQueue) push(ctx context.Context, c *sluice.Change, maxItems func() int, maxBytes int64) error {
	n := int64(c.Size())
	for {
		q.mu.Lock()
		limit := q.max
		if maxBytes > 0 {
			limit = min(limit, maxBytes)
		}
		fits := q.n == 0
		if !fits && q.bytes+n <= limit {
			if q.n >= q.items {
				q.items = maxItems()
			}
			fits = q.n < q.items
		}
		if fits {
			if q.n == len(q.ring) {
				// As many changes as the queue holds when full, at the
				// queued changes' mean size.
				hint := q.n
				if q.n > 0 {
					hint = int(min(int64(maxItems()), limit/max(q.bytes/int64(q.n), 1)))
				}
				q.grow(hint)
			}
			// The change's one copy between the reader and the batch
			// (see peek).
			q.ring[(q.head+q.n)%len(q.ring)] = *c
			q.n++
			q.bytes += n
			if q.awaited {
				close(q.notEmpty)
				q.notEmpty = make(chan struct{})
				q.awaited = false
			}
			if q.grownAt != 0 && q.base+uint64(q.n) >= q.grownAt {
				close(q.grown)
				q.grown = make(chan struct{})
				q.grownAt = 0
			}
			q.mu.Unlock()
			return nil
		}
		q.items = 0
		wait := q.notFull
		if !q.full {
			q.full = true
			if q.grownAt != 0 {
				// A waiter for a change the queue has no room for
				// (waitForOrFull) stops waiting.
				close(q.grown)
				q.grown = make(chan struct{})
				q.grownAt = 0
			}
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait:
		}
	}
}

// prefixLocked is how many of the queued changes from the off-th on go
// into a batch of at most most changes and maxBytes bytes (see
// bytePrefix). Call with q.mu held.
func (q *laneQueue) prefixLocked(off, most int, maxBytes int64) int {
	return bytePrefixOf(min(most, q.n-off), maxBytes, func(i int) int64 { return int64(q.at(off + i).Size()) })
}

// view returns the n queued changes from the off-th on: a view of the
// ring (capped, so that an append cannot write into it) when they do not
// wrap around its end, else a copy. Call with q.mu held.
//
// A view is safe because no slot of it is written while its batch uses
// it: push writes only free slots (past the queued ones), drop clears
// only committed changes, and grow copies to a new array and leaves the
// old one, which the view keeps alive, as it was. A batch's changes are
// committed (and dropped) only after the batch is done with them: a lane
// drops a transaction's changes in land, once its Apply returned and
// OnBatch was called, and never reads them again (a failed one is not
// dropped; its retry, and a chained transaction sent again, read the
// same, still queued, changes). The batch compacted ahead (prepareLane)
// reads changes past the one in flight, and is finished before any batch
// holding them is sent (runLane, chainAfter). The compacted batch keeps
// no view but Batch.Schema, a pointer to its schema change, which the
// target reads while it applies the batch. Nothing that reads a batch
// writes into its changes (apply.Compactor, the targets, typemap and
// OnBatch only read them).
func (q *laneQueue) view(off, n int) []sluice.Change {
	if n == 0 {
		return nil
	}
	i := (q.head + off) % len(q.ring)
	if i+n <= len(q.ring) {
		return q.ring[i : i+n : i+n]
	}
	// It wraps: copy rather than hand out two pieces.
	out := make([]sluice.Change, n)
	q.copyOut(out, off)
	return out
}

// peek returns up to max queued changes from the head, no more than
// maxBytes of them (see prefixLocked), without removing them, waiting up
// to wait for the first, or until wake receives. They are a view of the
// queue (see view): the caller must not write into them, nor read them
// once they are dropped.
func (q *laneQueue) peek(ctx context.Context, max int, maxBytes int64, wait time.Duration, wake <-chan struct{}) []sluice.Change {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		q.mu.Lock()
		if q.n > 0 {
			out := q.view(0, q.prefixLocked(0, max, maxBytes))
			q.mu.Unlock()
			return out
		}
		ch := q.notEmpty
		q.awaited = true
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			return nil
		case <-wake:
			return nil
		case <-ch:
		}
	}
}

// peekFrom returns up to max queued changes from the one numbered from on,
// no more than maxBytes of them (see prefixLocked), without removing them
// or waiting; nil when none is queued yet. They are a view, as peek's.
func (q *laneQueue) peekFrom(from uint64, max int, maxBytes int64) []sluice.Change {
	q.mu.Lock()
	defer q.mu.Unlock()
	if from < q.base || from >= q.base+uint64(q.n) || max <= 0 {
		return nil
	}
	off := int(from - q.base)
	return q.view(off, q.prefixLocked(off, max, maxBytes))
}

// waitFor waits until the change numbered last is queued, and reports
// whether it is; false when stop is closed or ctx ends first.
// grown wakes every waiter when the first of their marks is reached, so a
// waiter for a later change waits again.
func (q *laneQueue) waitFor(ctx context.Context, last uint64, stop <-chan struct{}) bool {
	return q.wait(ctx, last, stop, false)
}

// waitForOrFull is waitFor that also returns true once the queue is full:
// the change numbered last will not come before the queue's head commits.
func (q *laneQueue) waitForOrFull(ctx context.Context, last uint64, stop <-chan struct{}) bool {
	return q.wait(ctx, last, stop, true)
}

func (q *laneQueue) wait(ctx context.Context, last uint64, stop <-chan struct{}, orFull bool) bool {
	for {
		q.mu.Lock()
		if q.base+uint64(q.n) > last || (orFull && q.full) {
			q.mu.Unlock()
			return true
		}
		if q.grownAt == 0 || last+1 < q.grownAt {
			q.grownAt = last + 1
		}
		ch := q.grown
		q.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// avgSize is the mean size of the queued changes (0 when none are).
func (q *laneQueue) avgSize() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return 0
	}
	return q.bytes / int64(q.n)
}

// size is how many changes are queued and their bytes.
func (q *laneQueue) size() (int, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, q.bytes
}

// len is how many changes are queued.
func (q *laneQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// wakePushers has a waiting push look again at the limits: the lane's
// batch size grew.
func (q *laneQueue) wakePushers() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = 0
	q.full = false
	close(q.notFull)
	q.notFull = make(chan struct{})
}

// drop removes the first k changes (committed).
func (q *laneQueue) drop(k int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range k {
		c := q.at(i)
		q.bytes -= int64(c.Size())
		*c = sluice.Change{} // let the rows go
	}
	q.head = (q.head + k) % max(len(q.ring), 1)
	q.full = false
	q.n -= k
	q.base += uint64(k)
	if q.n == 0 {
		q.head = 0
		if len(q.ring) > 1<<16 {
			// A drained backlog gives its memory back.
			q.ring = nil
		}
	}
	q.items = 0
	q.full = false
	close(q.notFull)
	q.notFull = make(chan struct{})
}
