package stream

import (
	"context"
	"slices"
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
	// pages are the pushed reads in order; pages[0][head:] come next.
	pages    [][]sluice.Change
	head     int
	count    int
	bytes    int64
	maxBytes int64
}

func newQueue(maxBytes int64) *queue {
	return &queue{maxBytes: maxBytes, notEmpty: make(chan struct{}), notFull: make(chan struct{})}
}

// push appends a copy of cs, waiting while the queue is full. A push into an empty queue always goes through, so one read larger
// than the bound cannot deadlock.
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
			// A copy: taken changes are cleared in place for the
			// collector, and cs is the reader's.
			q.pages = append(q.pages, slices.Clone(cs))
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
func (q *queue) take(ctx context.Context, max int, maxBytes int64) ([]sluice.Change, error) {
	for {
		q.mu.Lock()
		if q.count > 0 {
			k := min(max, q.count)
			out := make([]sluice.Change, 0, min(k, 1024))
			var n int64
			for len(out) < k {
				p := q.pages[0][q.head:]
				m := min(k-len(out), len(p))
				for i := range p[:m] {
					sz := int64(p[i].Size())
					if maxBytes > 0 && len(out)+i > 0 && n+sz > maxBytes {
						m, k = i, len(out)+i
						break
					}
					n += sz
				}
				out = append(out, p[:m]...)
				// Drop references so taken changes can be collected.
				clear(p[:m])
				q.head += m
				if q.head == len(q.pages[0]) {
					q.pages[0] = nil
					q.pages = q.pages[1:]
					q.head = 0
				}
			}
			q.count -= k
			if q.count == 0 {
				q.pages = nil
			}
			q.bytes -= n
			close(q.notFull)
			q.notFull = make(chan struct{})
			q.mu.Unlock()
			return out, nil
		}
		wait := q.notEmpty
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		}
	}
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
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return q.notEmpty
}
