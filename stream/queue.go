package stream

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
)

// queue holds changes read from the source and not yet taken by the
// applier. It is bounded by bytes: when it is full the reader waits
// (backpressure), so memory depends on configuration, not on the backlog.
//
// It keeps the reads it was given as pages rather than one slice: appending
// a read to a slice whose front is taken away copies every queued change
// each time the slice grows, which at tens of thousands of changes per
// read took a third of the apply path's CPU.
type queue struct {
	mu       sync.Mutex
	notEmpty chan struct{} // closed and replaced when changes arrive
	notFull  chan struct{} // closed and replaced when changes are taken
	// closed is closed from the start: waitNonEmptyChan's answer when
	// changes are queued (the dispatcher asks before each take, a page at
	// a time).
	closed chan struct{}
	// pages are the pushed reads in order; pages[0][head:] come next.
	pages    [][]sluice.Change
	head     int
	count    int
	bytes    int64
	maxBytes int64
}

func newQueue(maxBytes int64) *queue {
	closed := make(chan struct{})
	close(closed)
	return &queue{maxBytes: maxBytes, notEmpty: make(chan struct{}), notFull: make(chan struct{}), closed: closed}
}

// push appends cs, waiting while the queue is full. A push into an empty
// queue always goes through, so one read larger than the bound cannot
// deadlock. cs becomes the queue's (a read's slice is the caller's, see
// source.Reader): it is kept as a page, not copied.
func (q *queue) push(ctx context.Context, cs []sluice.Change) error {
	if len(cs) == 0 {
		return nil
	}
	var n int64
	for i := range cs {
		n += int64(cs[i].Size())
	}
	for {
		q.mu.Lock()
		if q.count == 0 || q.bytes+n <= q.maxBytes {
			q.pages = append(q.pages, cs)
			q.count += len(cs)
			q.bytes += n
			close(q.notEmpty)
			q.notEmpty = make(chan struct{})
			q.mu.Unlock()
			return nil
		}
		wait := q.notFull
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait:
		}
	}
}

// take removes up to max changes and, past the first, up to maxBytes of
// them (≤ 0: no byte limit), waiting for at least one until ctx ends.
// Taken changes leave the queue's count, so a caller that holds them a
// while bounds them with maxBytes.
//
// The changes come from one page only (fewer than max when the page ends
// first): they are a sub-slice of it, not a copy, capped (a full slice
// expression) so that an append by the caller cannot write over the
// page's next changes. The caller owns them: the queue never reads a
// taken change again, and the caller should clear them once it is done
// with them, so that their rows can be collected while the rest of the
// page waits in the queue (the page's array is held until its last
// change is taken and every taker let its part go).
func (q *queue) take(ctx context.Context, max int, maxBytes int64) ([]sluice.Change, error) {
	if err := q.lockNonEmpty(ctx); err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	p := q.pages[0][q.head:]
	m, n := prefix(p[:min(max, len(p))], maxBytes, 0, true)
	out := p[:m:m]
	q.advanceLocked(m)
	q.tookLocked(m, n)
	return out, nil
}

// takeInto is take that appends the changes to dst, the caller's copy,
// from as many pages as it takes: up to max changes and, past the first,
// up to maxBytes of them. The taken changes are cleared in their pages,
// so that only dst holds their rows.
func (q *queue) takeInto(ctx context.Context, dst []sluice.Change, max int, maxBytes int64) ([]sluice.Change, error) {
	if err := q.lockNonEmpty(ctx); err != nil {
		return dst, err
	}
	defer q.mu.Unlock()
	k := min(max, q.count)
	took := 0
	var n int64
	for took < k {
		p := q.pages[0][q.head:]
		want := min(k-took, len(p))
		m, size := prefix(p[:want], maxBytes, n, took == 0)
		dst = append(dst, p[:m]...)
		clear(p[:m])
		q.advanceLocked(m)
		took, n = took+m, n+size
		if m < want {
			break // the byte limit
		}
	}
	q.tookLocked(took, n)
	return dst, nil
}

// lockNonEmpty waits until the queue holds changes and returns with q.mu
// held, or with ctx's error and the lock not held.
func (q *queue) lockNonEmpty(ctx context.Context) error {
	for {
		q.mu.Lock()
		if q.count > 0 {
			return nil
		}
		wait := q.notEmpty
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait:
		}
	}
}

// prefix is how many of cs a take gets within maxBytes (≤ 0: no limit)
// on top of the used bytes it already took, and their bytes; the first
// change of a take always goes.
func prefix(cs []sluice.Change, maxBytes, used int64, first bool) (int, int64) {
	var n int64
	for i := range cs {
		sz := int64(cs[i].Size())
		if maxBytes > 0 && (i > 0 || !first) && used+n+sz > maxBytes {
			return i, n
		}
		n += sz
	}
	return len(cs), n
}

// advanceLocked moves the head past m changes of the first page, dropping
// the page once all of it is taken. Call with q.mu held.
func (q *queue) advanceLocked(m int) {
	q.head += m
	if q.head == len(q.pages[0]) {
		q.pages[0] = nil
		q.pages = q.pages[1:]
		q.head = 0
	}
}

// tookLocked takes k changes of n bytes off the queue's count and wakes
// the pushers waiting for room. Call with q.mu held.
func (q *queue) tookLocked(k int, n int64) {
	q.count -= k
	if q.count == 0 {
		q.pages = nil
	}
	q.bytes -= n
	close(q.notFull)
	q.notFull = make(chan struct{})
}

// waitNonEmpty returns a channel closed when changes arrive, or nil when
// the queue already holds some.
func (q *queue) waitNonEmpty() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.count > 0 {
		return nil
	}
	return q.notEmpty
}

func (q *queue) size() (changes int, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count, q.bytes
}

// headTime is the source time of the oldest queued change, zero if none.
func (q *queue) headTime() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.count == 0 {
		return time.Time{}
	}
	return q.pages[0][q.head].Time
}

// waitNonEmptyChan returns a channel that is closed (or already closed)
// when the queue holds changes.
func (q *queue) waitNonEmptyChan() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.count > 0 {
		return q.closed
	}
	return q.notEmpty
}
