package stream

import (
	"context"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// Overlap: while batch N's transaction is in flight, batch N+1 is compacted
// on another goroutine, so that the connection does not wait for that CPU
// work once N commits (compacting 60,000 changes takes ~100 ms, as long as
// a round trip). A lane's next batch grows as changes are routed to it
// (apply.Compactor), so that it holds what arrived while N was in flight;
// when N commits, the lane stops it and adds only what it lacks.
//
// Compaction reads only the batch's own changes, never the target or the
// outcome of N, so a batch compacted ahead stays right whatever happens to
// N: committed, or killed and retried in smaller pieces (the pieces come
// from N's own changes, and N+1 still starts where N ends). It is used
// only when the next batch starts at exactly its first change and holds at
// least its changes, and the set of tables applied in source order has not
// grown since it was compacted (a constraint error that reorders a table
// voids it). The checkpoint is not part of it: it is taken when the batch
// is sent, as before.

// prepared is a batch compacted ahead of its turn.
type prepared struct {
	// first numbers its first change (the lane's count of its changes, or
	// the single loop's count of changes taken); n is how many it holds,
	// final once done is closed.
	first uint64
	n     int
	bytes int64
	// gen is the ordered tables' generation it was compacted under.
	gen  uint64
	comp *apply.Compactor
	// stop ends a growing batch's growth; done is closed when its
	// goroutine no longer touches it.
	stop    chan struct{}
	stopped bool
	done    chan struct{}
}

// prepare compacts cs, numbered from first, on a goroutine of its own. cs
// must not change until the batch is used or dropped.
func (s *Stream) prepare(first uint64, cs []sluice.Change) *prepared {
	p := &prepared{first: first, n: len(cs), gen: s.ordered.generation(), comp: s.newCompactor(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.comp.Add(cs)
	}()
	return p
}

// prepareChunk is how many changes a growing batch waits for before it
// compacts them: waking for each change routed would cost more than the
// compaction.
const prepareChunk = 512

// prepareLane compacts, on a goroutine of its own, the changes routed to q
// from the one numbered first on, as they arrive, until it holds most
// changes or maxBytes of them (the lane's byte cap per batch, as
// bytePrefix counts it), or until it is stopped (see finish).
func (s *Stream) prepareLane(ctx context.Context, q *laneQueue, first uint64, most int, maxBytes int64) *prepared {
	p := &prepared{first: first, gen: s.ordered.generation(), comp: s.newCompactor(),
		stop: make(chan struct{}), done: make(chan struct{})}
	p.comp.Expect(most)
	go func() {
		defer close(p.done)
		for p.n < most {
			next := p.first + uint64(p.n)
			cs := q.peekFrom(next, min(most-p.n, prepareChunk), 0)
			if len(cs) < min(most-p.n, prepareChunk) {
				// Fewer than a chunk queued: wait for a chunk (or, once
				// stopped, leave the rest to the lane).
				if !q.waitFor(ctx, next+uint64(min(most-p.n, prepareChunk))-1, p.stop) {
					return
				}
				continue
			}
			k, full := len(cs), false
			if maxBytes > 0 {
				for i := range cs {
					size := int64(cs[i].Size())
					if p.n+i > 0 && p.bytes+size > maxBytes {
						k, full = i, true
						break
					}
					p.bytes += size
				}
			}
			p.comp.Add(cs[:k])
			p.n += k
			if full {
				return
			}
			select {
			case <-p.stop:
				return
			default:
			}
		}
	}()
	return p
}

// finish stops p's growth and waits until its goroutine is done with it:
// p.n is final after it. Nil does nothing.
func (p *prepared) finish() {
	if p == nil {
		return
	}
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
	<-p.done
}

// drop is finish: it waits until p's compaction is done with its changes,
// so that the caller may reuse them.
func (p *prepared) drop() { p.finish() }

// sizeFor returns how many changes the next batch, starting at change
// first, should carry when the controller asks for want: want when the
// prepared batch starts there and holds at most want (the lane adds the
// rest to it), or p's own count when it holds more but is near enough (a
// quarter over want, if the fitted model predicts that inside 80% of the
// budget, as the controller's own dithering does). Call finish first.
func (p *prepared) sizeFor(first uint64, want int, z Sizer) int {
	if p == nil || p.first != first || p.n <= want || p.n > want+want/4 {
		return want
	}
	if a, s, ok := z.Model(); ok && a+time.Duration(p.n)*s <= z.Budget()*4/5 {
		return p.n
	}
	return want
}

// batch returns the compaction of cs, the changes numbered from first:
// p's, with what it lacks of cs added, when p starts there and holds no
// more than cs (ahead is then true), else compacted now; with the
// foreign-key actions its ordered changes fired (Config.Cascades). Call
// finish first.
func (s *Stream) batch(p *prepared, first uint64, cs []sluice.Change) (b *apply.Batch, ahead bool) {
	if p != nil && p.first == first && p.n <= len(cs) && p.n > 0 {
		p.finish()
		if p.gen == s.ordered.generation() {
			s.mu.Lock()
			s.stats.CompactedAhead++
			s.mu.Unlock()
			p.comp.Add(cs[p.n:])
			b = p.comp.Batch()
			s.cfg.Cascades.Attach(b)
			return b, true
		}
	}
	c := s.newCompactor()
	c.Add(cs)
	b = c.Batch()
	s.cfg.Cascades.Attach(b)
	return b, false
}

// newCompactor returns a compactor for the stream's next batch: the tables
// applied in source order for now are, and it cuts the batch after each
// change whose foreign-key actions the target carries out.
func (s *Stream) newCompactor() *apply.Compactor {
	c := apply.NewCompactor(s.ordered.has)
	if !s.cfg.Cascades.Empty() {
		c.Cut = s.cfg.Cascades.Fires
	}
	return c
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
