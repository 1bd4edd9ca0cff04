package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// Overlap: a lane whose transaction is in flight sends its next one on a
// second target connection without waiting for the commit, so that the
// target does not sit idle for the round trip between two transactions
// (over 96 ms, a catch-up of 170,000 changes in five transactions spent a
// quarter of its time so). The next transaction must not commit unless the
// one before it did, nor run before it: each of a lane's transactions
// first locks the lane's checkpoint row, and the one sent while another is
// in flight then checks that the row holds the sequence of the one before
// it (chainTarget.ApplyAfter). It waits for that lock, so it runs only once
// the one before it ended, and it fails, committing nothing, unless that
// one committed.
//
// A transaction waiting for the lock is open on the target, and a
// transaction killer counts its wait: two go out together only when the
// cost model says they fit the kill budget together (before the model is
// fitted, at the last large transaction's cost per change doubled, or,
// without one, when they hold no more changes than two backlog-sized
// batches, each sized to half the budget at a pessimistic cost).
// A lane chains only after its first commit in this process, which makes
// sure its checkpoint row exists to be locked.

// canChainTarget reports whether t can chain a lane's transactions: it
// has ApplyAfter and, when it wraps another target (Chains), that one can.
func canChainTarget(t Target) bool {
	if _, ok := t.(chainTarget); !ok {
		return false
	}
	if c, ok := t.(interface{ Chains() bool }); ok {
		return c.Chains()
	}
	return true
}

// chainTarget is a Target that can chain a lane's transactions (see
// apply.ErrChainBroken).
type chainTarget interface {
	// ApplyAfter calls written (when not nil) once the transaction's
	// lock is on its way to the target.
	ApplyAfter(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint, after uint64, written func()) error
}

// flight is one of a lane's transactions, sent and in flight until done
// is closed.
type flight struct {
	cs  []sluice.Change
	b   *apply.Batch
	cp  sluice.Checkpoint
	wIf uint64
	t   Target
	// key is its entry among the stream's running transactions.
	key   int
	start time.Time
	// For the debug log of each batch (see lane).
	idle           time.Duration
	compactTook    time.Duration
	compactedAhead bool
	chained        bool // sent while the one before it was in flight
	// written is closed once its lock is on its way to the target (or it
	// ended): the next may be sent then, to arrive after it.
	written   chan struct{}
	writtenAt time.Time // set before written is closed
	done      chan struct{}
	end       time.Time
	err       error
	cancel    context.CancelFunc
}

// altKey offsets the running-transaction key of a lane's second
// connection.
const altKey = 1 << 20

// send starts applying cs (a run of the lane's queue, compacted as b) on
// t with the lane's checkpoint, after prev (the lane's transaction in
// flight, or nil): the checkpoint's watermark assumes prev commits too.
// With chain set the transaction takes the lane's lock first, and with
// prev it also checks that prev committed (see Overlap).
func (m *multi) send(ctx context.Context, l *lane, t Target, prev *flight, cs []sluice.Change, b *apply.Batch, chain bool) *flight {
	s := m.s
	skip := len(cs)
	if prev != nil {
		skip += len(prev.cs)
	}
	m.mu.Lock()
	wIf := m.next - 1
	for _, o := range m.lanes {
		f := o.fifo
		if o == l {
			f = f[skip:]
		}
		if len(f) > 0 && f[0]-1 < wIf {
			wIf = f[0] - 1
		}
	}
	m.cpSeq++
	// wIf ≥ w: its position is the watermark's or still held in positions.
	cp := sluice.Checkpoint{Stream: s.cfg.ID, Seq: m.cpSeq, Applied: m.appliedAt(wIf), Time: time.Now().UTC(), Position: m.wPos,
		Lane: l.id, Lanes: m.active, Last: cs[len(cs)-1].Pos, Routing: s.cfg.Routing}
	if p, ok := m.positions.at(int(wIf) - int(m.w) - 1); ok {
		cp.Position = p
	} else {
		wIf = m.w
		cp.Applied = m.appliedAt(m.w)
	}
	m.mu.Unlock()

	f := &flight{cs: cs, b: b, cp: cp, wIf: wIf, t: t, key: l.id, chained: prev != nil,
		compactTook: l.compactTook, compactedAhead: l.compactedAhead, written: make(chan struct{}), done: make(chan struct{})}
	if t != l.target {
		f.key += altKey
	}
	applyCtx, cancel := s.inFlight(ctx)
	f.cancel = cancel
	f.start = s.txBegan(f.key)
	if !l.lastEnd.IsZero() && prev == nil {
		f.idle = f.start.Sub(l.lastEnd)
	}
	var after uint64
	if prev != nil {
		after = prev.cp.Seq
	}
	s.log.Debug("batch sent", "lane", l.id, "changes", len(cs), "seq", cp.Seq, "after", after, "lock", chain, "alt", t != l.target)
	var once sync.Once
	written := func() {
		once.Do(func() {
			f.writtenAt = time.Now()
			close(f.written)
		})
	}
	go func() {
		defer close(f.done)
		defer written()
		if ct, ok := t.(chainTarget); ok && chain {
			f.err = ct.ApplyAfter(applyCtx, b, cp, after, written)
		} else {
			f.err = t.Apply(applyCtx, b, cp)
		}
		f.end = time.Now()
		s.txEnded(f.key)
	}()
	return f
}

// land waits for f, the lane's oldest transaction in flight, and records
// its outcome: on success its changes leave the queue and the watermark
// and checkpoint move. then, when not nil, is the transaction sent after
// f: should f have failed while then committed, f committed after all
// (then's chain check saw f's checkpoint), and f is recorded so.
func (m *multi) land(ctx context.Context, l *lane, f, then *flight) error {
	s := m.s
	<-f.done
	f.cancel()
	err := f.err
	if err != nil && then != nil {
		<-then.done
		if then.err == nil {
			s.log.Warn("a lane's transaction reported an error, but the one sent after it committed and found its checkpoint: it committed",
				append(ErrAttrs(err), "lane", l.id, "seq", f.cp.Seq)...)
			err = nil
		}
	}
	// age is how long the transaction was open, waiting for the one before
	// it included; d what it would have taken alone: from when the one
	// before it returned, less a round trip (it was already at the target,
	// waiting), or from its start when it was sent later than that.
	age := f.end.Sub(f.start)
	d := age
	if f.chained && !l.lastEnd.IsZero() {
		from := l.lastEnd.Add(-m.rtt())
		if f.start.After(from) {
			from = f.start
		}
		d = f.end.Sub(from)
	}
	l.lastEnd = f.end
	m.ctl.Tx(d)
	s.mu.Lock()
	s.stats.LastTxTime, s.stats.LastBatch = d, len(f.cs)
	s.stats.MaxTxTime = max(s.stats.MaxTxTime, age)
	if err == nil {
		s.stats.PingError = ""
	}
	s.mu.Unlock()
	if s.cfg.OnBatch != nil {
		s.cfg.OnBatch(f.cs, d, err)
	}
	if err != nil {
		if err = s.reorder(f.b, err); err == errReorder {
			return err
		}
		return fmt.Errorf("lane %d: apply batch of %d changes (%d rows): %w", l.id, len(f.cs), f.b.Rows, err)
	}
	l.committed = true
	if len(f.cs) >= minPerChangeSample {
		l.perChange = max(d-m.rtt(), 0) / time.Duration(len(f.cs))
	}
	l.q.drop(len(f.cs))
	l.head += uint64(len(f.cs)) // with the drop: they number the queue

	m.mu.Lock()
	l.last, l.lastSeq = f.cp.Last, l.fifo[len(f.cs)-1]
	l.fifo = l.fifo[len(f.cs):]
	m.advanceLocked()
	allDone := m.w == m.next-1
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	l.ctrl.Observe(len(f.cs), d)
	saved := time.Now()
	err = m.committed(f.cp, f.wIf, allDone)
	s.log.Debug("batch committed", "lane", l.id, "seq", f.cp.Seq, "changes", len(f.cs), "rows", f.b.Rows, "tx_time", d, "open", age,
		"chained", f.chained, "idle_before", f.idle, "compact_time", f.compactTook, "compacted_ahead", f.compactedAhead,
		"checkpoint_time", time.Since(saved))
	return err
}

// altOpenTimeout bounds the opening of a lane's second connection.
const altOpenTimeout = 30 * time.Second

// chainGap is the least time between writing a transaction and sending
// the one chained after it: both reach the target in order, but on a busy
// target the second's session could run its check before the first's
// session took the lock, and fail (to be sent again, overlapping nothing).
const chainGap = 20 * time.Millisecond

// minPerChangeSample is the fewest changes of a transaction whose time
// gives the lane's rough cost per change (lane.perChange): in smaller
// ones the fixed cost drowns it.
const minPerChangeSample = 1000

// maxRaced bounds how many times fly sends again a chained transaction
// that overtook the one before it, before it takes it for a failure.
const maxRaced = 3

// rtt is the target's last measured round trip.
func (m *multi) rtt() time.Duration {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	return m.s.stats.RTT
}

// fly lands f and, while each of the lane's transactions is in flight,
// sends the next on the lane's other connection when chain allows it (see
// Overlap). It returns once none is in flight: the number of changes of
// the transaction that failed, and its error, or nil.
func (m *multi) fly(ctx context.Context, l *lane, f *flight, next **prepared, chain bool) (int, error) {
	raced := 0
	for {
		m.s.beat(l.id)
		var g *flight
		if chain && ctx.Err() == nil {
			if m.altOpening(l) {
				// f took the lane's lock so that the next may follow it
				// once the second connection is open, if f is still in
				// flight then: over a WAN the open takes a few round
				// trips, as long as the first transactions.
				select {
				case <-l.altReady:
				case <-f.done:
				}
			}
			if m.canChain(l) {
				g = m.chainAfter(ctx, l, f, next)
			}
		}
		err := m.land(ctx, l, f, g)
		if err == nil {
			if g == nil {
				return 0, nil
			}
			f = g
			continue
		}
		if f.chained && errors.Is(err, apply.ErrChainBroken) && raced < maxRaced && ctx.Err() == nil {
			// The one before it committed (else fly had returned), so f
			// reached the target first and found the row not yet
			// written: it is sent again, now that nothing is in flight
			// before it.
			raced++
			if g != nil {
				<-g.done
				g.cancel()
			}
			m.s.log.Debug("chained transaction overtook the one before it; sending it again", append(ErrAttrs(err), "lane", l.id, "seq", f.cp.Seq)...)
			f = m.send(ctx, l, f.t, nil, f.cs, f.b, true)
			continue
		}
		if g != nil {
			// f failed: g, waiting for f's lock, found f's checkpoint
			// missing and rolled back, its changes still queued. (Had it
			// committed, land would have taken f as committed; an error
			// then is the state file's, which stops the lane.)
			<-g.done
			g.cancel()
			l.lastEnd = g.end
			if g.err != nil {
				m.s.log.Debug("chained transaction rolled back with the one before it", append(ErrAttrs(g.err), "lane", l.id, "seq", g.cp.Seq)...)
			}
		}
		if f.t != l.target {
			moveUnknown(f.t, l.target)
		}
		return len(f.cs), err
	}
}

// unknownKeeper is a target that keeps the batches whose commit outcome a
// failure left unknown, and asks the target about them before its next
// batch (apply.ErrCommittedBefore).
type unknownKeeper interface {
	TakeUnknown() []sluice.Checkpoint
	KeepUnknown(cps []sluice.Checkpoint)
}

// moveUnknown hands from's batches of unknown outcome to to: a lane
// retries the changes of a transaction that failed on its second
// connection on its own, which must learn first whether that transaction
// committed after all, lest its changes be applied twice.
func moveUnknown(from, to Target) {
	f, ok := from.(unknownKeeper)
	t, ok2 := to.(unknownKeeper)
	if !ok || !ok2 {
		return
	}
	if u := f.TakeUnknown(); len(u) > 0 {
		t.KeepUnknown(u)
	}
}

// canChain reports whether the lane may send a transaction while one is
// in flight: its second connection is open, and it committed once.
func (m *multi) canChain(l *lane) bool {
	if !l.committed || m.rec != nil || l.altReady == nil {
		return false
	}
	select {
	case <-l.altReady:
		return l.alt != nil
	default:
		return false
	}
}

// mayChain reports whether the lane's next transaction should take the
// lane's lock, so that another may be sent while it is in flight: it may
// chain now (canChain), or will once its second connection is open.
func (m *multi) mayChain(l *lane) bool {
	return m.canChain(l) || (l.committed && m.rec == nil && m.altOpening(l))
}

// altOpening reports whether the lane's second connection is opening.
func (m *multi) altOpening(l *lane) bool {
	if l.altReady == nil {
		return false
	}
	select {
	case <-l.altReady:
		return false
	default:
		return true
	}
}

// openAlt opens the lane's second connection in the background, once.
func (m *multi) openAlt(ctx context.Context, l *lane) {
	if l.altReady != nil || m.s.cfg.NoOverlap || m.s.cfg.NewTarget == nil {
		return
	}
	if !canChainTarget(l.target) {
		return
	}
	ready := make(chan struct{})
	l.altReady = ready
	l.overlap.Store(true)
	go func() {
		defer close(ready)
		// Not cancelled with the stream: the open is a few round trips,
		// the stream's stop waits for it, and a connection cancelled
		// while it logs in sends a cancel request through whatever is in
		// front of the target (PgBouncer 1.18 can crash on one sent then).
		began := time.Now()
		openCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), altOpenTimeout)
		defer cancel()
		t, err := m.s.cfg.NewTarget(openCtx)
		if err != nil {
			if ctx.Err() == nil {
				m.s.log.Warn("open a lane's second target connection; the lane sends one transaction at a time",
					append(ErrAttrs(err), "lane", l.id)...)
			}
			return
		}
		if !canChainTarget(t) {
			closeTarget(ctx, t)
			return
		}
		l.altMu.Lock()
		defer l.altMu.Unlock()
		if l.altClosed {
			closeTarget(ctx, t)
			return
		}
		l.alt = t
		m.s.log.Debug("lane's second connection open", "lane", l.id, "took", time.Since(began))
	}()
}

// closeAlt closes the lane's second connection. One still opening is
// waited for up to wait (a few round trips, normally), then left to close
// itself once open: a stream stopping during a target outage does not
// wait for the open's timeout.
func (l *lane) closeAlt(ctx context.Context, wait time.Duration) {
	if l.altReady != nil {
		t := time.NewTimer(wait)
		select {
		case <-l.altReady:
		case <-t.C:
		}
		t.Stop()
	}
	l.altMu.Lock()
	l.altClosed = true
	t := l.alt
	l.altMu.Unlock()
	if t != nil {
		closeTarget(ctx, t)
	}
}

// closeTarget closes t when it can be closed.
func closeTarget(ctx context.Context, t Target) {
	if c, ok := t.(interface{ Close(context.Context) error }); ok {
		_ = c.Close(context.WithoutCancel(ctx))
	}
}

// chainAfter picks the lane's next batch while f is in flight and sends it
// on the connection f does not use; nil when nothing is worth sending
// before f returns. It waits for the batch to fill up to the size the
// lane would give it, but no longer than three quarters of the way to
// when f is due back less a round trip (when the next transaction, sent
// then, would reach the target as f ends there), or until f is back.
func (m *multi) chainAfter(ctx context.Context, l *lane, f *flight, next **prepared) *flight {
	s := m.s
	first := l.head + uint64(len(f.cs))
	queued, _ := s.q.size()
	// The size the lane would give the batch with a backlog: the wait
	// below is for it to fill up.
	want := max(sizeFor(l.ctrl, l.q.len()-len(f.cs)+queued/max(m.lanesActive(), 1)), backlogSize(l.ctrl))
	a, per, fitted := l.ctrl.Model()
	rtt := m.rtt()
	if fitted {
		// Both must fit the budget together: the second is open while
		// it waits for the first.
		room := l.ctrl.Budget() - (a + time.Duration(len(f.cs))*per) - a
		if per > 0 {
			want = min(want, int(room/per))
		}
	} else if l.perChange > 0 {
		// Before the fit, the last large transaction's cost per change,
		// doubled, stands for it.
		a, per = rtt, l.perChange
		room := l.ctrl.Budget() - (a + time.Duration(len(f.cs))*2*per) - a
		want = min(want, int(room/(2*per)))
	} else {
		// The backlog size keeps a batch under half the budget at a
		// pessimistic cost per change: two such fit it.
		want = min(want, 2*backlogSize(l.ctrl)-len(f.cs))
	}
	if want < 1 {
		return nil
	}
	if avg := l.q.avgSize(); s.cfg.MaxBatchBytes > 0 && avg > 0 {
		// No more than --max-batch-bytes go out together: waiting for
		// more would only hold back those that can.
		want = min(want, int(s.cfg.MaxBatchBytes/avg)+1)
	}
	if per > 0 {
		// Three quarters of the way to when f is due back less a round
		// trip: the later the next is sent, the more it carries, but the
		// prediction is rough, and a target left idle waiting for the
		// next transaction costs more than a smaller next transaction.
		due := f.start.Add((a + time.Duration(len(f.cs))*per - rtt) * 3 / 4)
		waitCtx, cancel := context.WithDeadline(ctx, due)
		l.q.waitForOrFull(waitCtx, first+uint64(want)-1, f.done)
		cancel()
	}
	items := l.q.peekFrom(first, want, s.cfg.MaxBatchBytes)
	k, _ := m.ready(l, l.head, first, len(items))
	items = items[:k]
	if len(items) == 0 {
		return nil
	}
	t := l.alt
	if f.t == l.alt {
		t = l.target
	}
	n := *next
	n.finish()
	compactStart := time.Now()
	b, ahead := s.batch(n, first, items)
	l.compactTook, l.compactedAhead = time.Since(compactStart), ahead
	if n != nil && n.first <= first+uint64(len(items)) {
		n.drop()
		*next = nil
	}
	if *next == nil {
		*next = s.prepareLane(ctx, l.q, first+uint64(len(items)), max(want, backlogSize(l.ctrl)), s.cfg.MaxBatchBytes)
	}
	select {
	case <-f.written:
		// f's first statements reach the target before the next's, but
		// its session must also run them first: give it a moment.
		if wait := time.Until(f.writtenAt.Add(chainGap)); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-f.done:
			}
			timer.Stop()
		}
	case <-f.done:
	}
	return m.send(ctx, l, t, f, items, b, true)
}
