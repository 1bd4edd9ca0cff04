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
type queue struct {
	mu       sync.Mutex
	notEmpty chan struct{} // closed and replaced when changes arrive
	notFull  chan struct{} // closed and replaced when changes are taken
	items    []sluice.Change
	bytes    int64
	maxBytes int64
}

func newQueue(maxBytes int64) *queue {
	return &queue{maxBytes: maxBytes, notEmpty: make(chan struct{}), notFull: make(chan struct{})}
}

// push appends cs, waiting while the queue is full. A push into an empty
// queue always goes through, so one read larger than the bound cannot
// deadlock.
func (q *queue) push(ctx context.Context, cs []sluice.Change) error {
	var n int64
	for i := range cs {
		n += int64(cs[i].Size())
	}
	for {
		q.mu.Lock()
		if len(q.items) == 0 || q.bytes+n <= q.maxBytes {
			q.items = append(q.items, cs...)
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

// take removes up to max changes, waiting for at least one until ctx ends or
// idle is closed.
func (q *queue) take(ctx context.Context, max int) ([]sluice.Change, error) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			k := min(max, len(q.items))
			out := make([]sluice.Change, k)
			copy(out, q.items[:k])
			var n int64
			for i := range out {
				n += int64(out[i].Size())
			}
			// Drop references so taken changes can be collected.
			clear(q.items[:k])
			q.items = q.items[k:]
			if len(q.items) == 0 {
				q.items = nil
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
	if len(q.items) > 0 {
		return nil
	}
	return q.notEmpty
}

func (q *queue) size() (changes int, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items), q.bytes
}

// headTime is the source time of the oldest queued change, zero if none.
func (q *queue) headTime() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return time.Time{}
	}
	return q.items[0].Time
}

// waitNonEmptyChan returns a channel that is closed (or already closed)
// when the queue holds changes.
func (q *queue) waitNonEmptyChan() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) > 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return q.notEmpty
}
