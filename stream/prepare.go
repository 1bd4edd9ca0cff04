package stream

import (
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// Overlap: while batch N's transaction is in flight, batch N+1 is compacted
// on another goroutine, so that the connection does not wait for that CPU
// work once N commits (compacting 60,000 changes takes ~125 ms).
//
// Compaction reads only the batch's own changes, never the target or the
// outcome of N, so a batch compacted ahead stays right whatever happens to
// N: committed, or killed and retried in smaller pieces (the pieces come
// from N's own changes, and N+1 still starts where N ends). It is used
// only when the next batch starts at exactly its first change, has exactly
// its changes, and the set of tables applied in source order has not grown
// since it was compacted (a constraint error that reorders a table voids
// it). The checkpoint is not part of it: it is taken when the batch is
// sent, as before.

// prepared is a batch compacted ahead of its turn.
type prepared struct {
	// first numbers its first change (the lane's sequence number, or the
	// single loop's count of changes taken), n is how many it holds.
	first uint64
	n     int
	// gen is the ordered tables' generation it was compacted under.
	gen  uint64
	done chan struct{}
	b    *apply.Batch
}

// prepare compacts cs, numbered from first, on a goroutine of its own. cs
// must not change until the batch is used or dropped.
func (s *Stream) prepare(first uint64, cs []sluice.Change) *prepared {
	p := &prepared{first: first, n: len(cs), gen: s.ordered.generation(), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.b = apply.Compact(cs, s.ordered.has)
	}()
	return p
}

// sizeFor returns how many changes the next batch, starting at change
// first, should carry when the controller asks for want: the prepared
// batch's count when it starts there and is near enough to want (at most
// want, or a quarter over it if the fitted model predicts that inside 80%
// of the budget, as the controller's own dithering does; and at least half
// of want, so that a prepared batch does not hold back a ramp).
func (p *prepared) sizeFor(first uint64, want int, z Sizer) int {
	if p == nil || p.first != first || p.n < (want+1)/2 || p.n > want+want/4 {
		return want
	}
	if p.n <= want {
		return p.n
	}
	if a, s, ok := z.Model(); ok && a+time.Duration(p.n)*s <= z.Budget()*4/5 {
		return p.n
	}
	return want
}

// drop waits until p's compaction is done with its changes, so that the
// caller may reuse them.
func (p *prepared) drop() {
	if p != nil {
		<-p.done
	}
}

// batch returns the compaction of cs, the changes numbered from first:
// p's when it was prepared from exactly these, else compacted now.
func (s *Stream) batch(p *prepared, first uint64, cs []sluice.Change) *apply.Batch {
	if p != nil && p.first == first && p.n == len(cs) {
		<-p.done
		if p.gen == s.ordered.generation() {
			s.mu.Lock()
			s.stats.CompactedAhead++
			s.mu.Unlock()
			return p.b
		}
	}
	return apply.Compact(cs, s.ordered.has)
}

// backlogSizer is a Sizer that sizes the first batches from what is
// waiting (controller.Batch).
type backlogSizer interface {
	SizeFor(waiting int) int
	BacklogSize() int
}

// sizeFor is z's size for the next batch with waiting changes queued.
func sizeFor(z Sizer, waiting int) int {
	if b, ok := z.(backlogSizer); ok {
		return b.SizeFor(waiting)
	}
	return z.Size()
}

// backlogSize is the most changes z would give a batch with any backlog.
func backlogSize(z Sizer) int {
	if b, ok := z.(backlogSizer); ok {
		return b.BacklogSize()
	}
	return z.Size()
}
