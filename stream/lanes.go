package stream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/controller"
)

// Lanes run when Config.MaxLanes > 1, and one lane runs so unless
// Config.NoOverlap asks for the single apply loop (applyLoop). Changes are numbered in source
// order and routed by a hash of (table, primary key), or of their table's
// group (Config.Groups), so one row's changes stay in one lane and in
// order; each lane batches and applies its own changes over its own target
// connection.
//
// The watermark W is the newest change such that every change numbered
// up to it is committed. Each lane's transaction writes a checkpoint row of
// the lane's own (sluice.Checkpoint.Lane) holding the watermark that its
// commit makes true (the changes of other lanes already committed plus its
// own batch) and Last, the position of the batch's last change. The state
// file and the source's acknowledgements follow the highest watermark a
// committed row holds, never the in-memory one, so that a restart always
// finds on the target every change the source was told it may release.
// When the lanes go quiet with the in-memory watermark ahead, lane 0 writes
// it (a checkpoint-only transaction).
//
// A lane commits changes past the watermark. After a stop that did not
// drain the lanes (kill -9), a restart resumes at the watermark and reads
// those changes again: the lanes' rows say which are on the target (a
// lane's changes up to its Last), and they are skipped rather than applied
// twice (Recovery). That needs the same routing as when they were written:
// the hash is fixed (FNV-1a), the lane count is the one the rows name
// until every lane's Last is passed, and Config.Routing fingerprints the
// groups.
//
// An update that moves a row to a key of another lane (a key move) is
// routed by its new key like any change, and ordered with the changes of
// its old key, which are in another lane, by dependencies: a change waits
// only for the changes of other lanes not yet committed that touch one of
// its keys, as MySQL's WRITESET and TiCDC's causality order parallel
// appliers. A move waits for the old key's last change (in the old key's
// lane), and the old key's later changes wait for the move; a change of a
// key that a move left earlier, or a move into it, waits for that move.
// The dispatcher records each wait with the waiting change (laneWait); a
// lane's transaction, sent alone or overlapped (see Overlap), ends before
// the first change whose wait is not over, and the lane goes on once the
// other lane committed. Nothing else waits: the lanes' FIFOs, their
// recovery (which needs only the routing and each lane's order) and the
// watermark work as before. keyOrder says which changes touch a key; it
// is kept only while moves between lanes happen (see orderByKey).
//
// A truncate of a table routed by key touches every lane: it is applied
// with every lane drained before and after it (truncates are rare, and a
// dependency on one would be a check per change of its table). The lane
// count changes only while every lane is drained, for the same reason, and
// the drained watermark is written before the switch.

// Recovery is what the lanes of a stream that stopped without draining
// them (kill -9, a crash) had committed past the checkpoint it resumes
// from.
type Recovery struct {
	// Lanes is how many lanes ran. The stream runs as many, routing as
	// they did, until it has read past every lane's Last.
	Lanes int
	// Last holds, per lane that committed changes past the checkpoint,
	// the position of the last change it committed: the lane's changes up
	// to it are on the target.
	Last map[int]sluice.Position
}

// lane is one applier: its target connection, batch controller and queue.
type lane struct {
	id     int
	target Target
	ctrl   Sizer
	q      *laneQueue
	// fifo holds the numbers of changes routed here and not committed.
	fifo     []uint64
	lastPing time.Time
	// head counts the lane's committed changes: it numbers the first
	// queued one, for the batch compacted ahead (see prepare).
	head uint64
	// For the debug log of each batch: when the lane's last transaction
	// ended, how long compacting the batch held the connection back, and
	// whether it had been compacted ahead.
	lastEnd        time.Time
	compactTook    time.Duration
	compactedAhead bool
	// alt is the lane's second target connection, for the transaction
	// sent while one is in flight (see Overlap), once altReady is closed
	// (nil when it could not be opened); committed is set by the lane's
	// first commit.
	alt      Target
	altReady chan struct{}
	overlap  atomic.Bool // altReady is set (read by the dispatcher)
	// altMu guards alt and altClosed between the goroutine that opens alt
	// and the stream's end, which does not wait for a slow open.
	altMu     sync.Mutex
	altClosed bool
	committed bool
	// perChange is the last large transaction's time per change, less a
	// round trip: how long the next takes, roughly, until the model is
	// fitted.
	perChange time.Duration
	// last is the position of the last change the lane committed (in this
	// run, or, while a recovery is under way, the run before), lastSeq
	// its number in this run (0: the run before's), under multi.mu: the
	// lane's row must keep naming it when lane 0 writes the watermark
	// (see flush).
	last    sluice.Position
	lastSeq uint64
	// routed counts the changes routed to the lane (the number the lane's
	// queue gives the next), and waits are those of its changes queued
	// that wait for a change of another lane, in their order: both under
	// multi.mu.
	routed uint64
	waits  []laneWait
}

// laneWait says that the lane's change numbered num (as its queue numbers
// them) goes into no transaction before lane's changes up to seq (the
// stream's numbering) are committed: one of them touches one of its keys.
type laneWait struct {
	num  uint64
	lane int
	seq  uint64
}

// keyOrder says, while key moves between lanes happen, which change
// touched each key last (see orderByKey).
type keyOrder struct {
	// last holds, by the key's routing hash (routeHash), the newest change
	// numbered from on whose new key, or whose old key when it moved the
	// row to another lane, the key is, unless its lane committed it. nil
	// while no move between lanes happened for keyOrderIdle changes.
	last map[uint64]keyChange
	from uint64
	// lastMove numbers the newest move between lanes; pruneAt is the size
	// at which last drops its committed changes.
	lastMove uint64
	pruneAt  int
	// idle and minPrune are keyOrderIdle and keyOrderPrune (tests make
	// them smaller).
	idle     uint64
	minPrune int
}

// keyChange is a change's number and lane in one word (the map holds a
// change per key of a backlog while moves happen): the number above
// keyChangeLaneBits bits, the lane in them.
type keyChange uint64

// keyChangeLaneBits bounds the lanes keyChange holds (2^20) and leaves it
// 2^44 changes of one run.
const keyChangeLaneBits = 20

func newKeyChange(seq uint64, lane int) keyChange {
	return keyChange(seq<<keyChangeLaneBits | uint64(lane))
}

func (c keyChange) seq() uint64 { return uint64(c) >> keyChangeLaneBits }
func (c keyChange) lane() int   { return int(uint64(c) & (1<<keyChangeLaneBits - 1)) }

const (
	// keyOrderIdle is how many changes after the last move between lanes
	// (once it is committed) the keys stop being tracked.
	keyOrderIdle = 1 << 20
	// keyOrderPrune is the least size at which the tracked keys drop the
	// committed changes.
	keyOrderPrune = 1 << 16
)

// ahead is how many changes may be routed to the lane ahead of its
// commits: laneAhead of its batches, at the size the lane would give a
// backlog. Until the model is fitted that is the backlog-sized batch, not
// the first guess: capping the queue at a few guessed batches would hold
// the reader back while the first, small transaction crosses the link,
// and the batch after it could take no more than that cap.
//
// A lane that overlaps its transactions (see Overlap) holds two in
// flight, and as many more behind them.
func (l *lane) ahead() int {
	n := laneAhead * max(backlogSize(l.ctrl), 1)
	if l.overlap.Load() {
		n *= 2
	}
	return n
}

// multi is the shared state of a laned stream.
type multi struct {
	s     *Stream
	lanes []*lane
	ctl   *controller.Lanes
	// want is the lane count the controller chose, why its reason;
	// resizeCh wakes the dispatcher when want changes. The dispatcher
	// alone changes active, after draining.
	want     atomic.Int32
	why      atomic.Pointer[string]
	resizeCh chan struct{}
	// flushWake wakes lane 0 to write the watermark (see flush).
	flushWake chan struct{}
	flushMu   sync.Mutex

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every commit
	next      uint64        // number of the next change (first is 1)
	w         uint64        // low watermark
	wPos      sluice.Position
	positions positions // of the changes numbered past w
	active    int
	cpSeq     uint64 // last checkpoint sequence handed out
	// durable is the highest watermark a committed lane checkpoint holds,
	// durableCP that checkpoint: what a restart resumes from, and all the
	// state file and the source are told.
	durable   uint64
	durableCP sluice.Checkpoint
	// rec is the recovery under way (nil when none); skipped counts the
	// changes it skipped.
	rec     *Recovery
	skipped uint64
	// markers are the numbers of the progress markers the watermark has
	// not passed yet, passedMarkers how many it passed: they are numbered
	// like changes but are none.
	markers       []uint64
	passedMarkers uint64
	// keys orders the changes of one key routed to different lanes.
	keys  keyOrder
	ackMu sync.Mutex
}

func (s *Stream) runLanes(ctx context.Context, readErr <-chan error) error {
	m := &multi{s: s, changed: make(chan struct{}), next: 1,
		active: 1, cpSeq: s.cfg.Start.Seq,
		wPos: s.cfg.Start.Position, durableCP: s.cfg.Start, flushWake: make(chan struct{}, 1),
		keys: keyOrder{idle: keyOrderIdle, minPrune: keyOrderPrune}}
	n := len(s.beats)
	per := laneShare(s.cfg.MaxQueueBytes) / int64(n)
	for i := 0; i < n; i++ {
		l := &lane{id: i, q: newLaneQueue(max(per, 1<<20))}
		if i == 0 {
			l.target, l.ctrl = s.cfg.Target, s.cfg.Batch
			// Its round trip was measured as the stream started: pinging
			// again after the first commit would cost a round trip in
			// the ramp, where every one counts.
			l.lastPing = time.Now()
		} else {
			l.ctrl = s.cfg.NewSizer()
		}
		m.lanes = append(m.lanes, l)
	}
	lq := make([]*laneQueue, len(m.lanes))
	for i, l := range m.lanes {
		lq[i] = l.q
	}
	s.laneQueues.Store(&lq)
	defer s.laneQueues.Store(nil)
	defer func() {
		for _, l := range m.lanes {
			l.closeAlt(ctx, min(s.cfg.ShutdownTimeout, 5*time.Second))
			if l.id > 0 && l.target != nil {
				closeTarget(ctx, l.target)
			}
		}
	}()
	m.ctl = controller.NewLanes(controller.LanesConfig{Min: s.cfg.MinLanes, Max: max(s.cfg.MaxLanes, 1), Window: s.cfg.LaneWindow})
	m.active = m.ctl.N()
	if rec := s.cfg.Recovery; rec != nil && rec.Lanes > 1 && len(rec.Last) > 0 {
		m.rec = rec
		m.active = rec.Lanes
		m.lanes[0].last = rec.Last[0]
		s.log.Info("recovering lanes: the changes they committed past the checkpoint are skipped when read again",
			"lanes", rec.Lanes, "lanes_ahead", len(rec.Last), "from", s.cfg.Start.Position.String())
	}
	m.want.Store(int32(m.active))
	m.resizeCh = make(chan struct{}, 1)
	m.sizeQueues()
	s.mu.Lock()
	s.stats.Lanes = m.active
	s.mu.Unlock()

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, l := range m.lanes {
		wg.Add(1)
		go func(l *lane) {
			defer wg.Done()
			if err := m.runLane(runCtx, l); err != nil {
				cancel(err)
			}
		}(l)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.watchLanes(runCtx)
	}()
	err := m.dispatch(runCtx, readErr)
	if err != nil {
		cancel(err)
	}
	if ctx.Err() == nil && err == nil {
		err = context.Cause(runCtx)
	}
	cancel(nil)
	wg.Wait()
	if cause := context.Cause(runCtx); err == nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	return err
}

// sizeQueues shares half the queue budget among the active lanes, so that
// a lane's batches are not capped by a share sized for lanes that are not
// running.
func (m *multi) sizeQueues() {
	m.mu.Lock()
	per := laneShare(m.s.cfg.MaxQueueBytes) / int64(m.active)
	m.mu.Unlock()
	for _, l := range m.lanes {
		l.q.setMax(max(per, 1<<20))
	}
}

// laneOf routes a change of table t to one of n lanes: by the table's
// group when it has one, else by (table, key).
func (m *multi) laneOf(t *sluice.Table, key sluice.Row, n int) int {
	return int(m.routeHash(t, key) % uint64(n))
}

// routeHash is the hash a change of table t with key is routed by (modulo
// the lane count). It is FNV-1a, not a seeded one, so that a restart
// routes as the run before it did (see Recovery).
func (m *multi) routeHash(t *sluice.Table, key sluice.Row) uint64 {
	h := fnv.New64a()
	if g := m.s.cfg.Groups[t.Name]; g != "" {
		h.Write([]byte{2})
		h.Write([]byte(g))
		return h.Sum64()
	}
	h.Write([]byte{1})
	h.Write([]byte(t.Name.String()))
	for _, v := range key {
		if v.Null {
			h.Write([]byte{0, 1})
			continue
		}
		h.Write([]byte{0, 0})
		h.Write([]byte(v.Text))
	}
	return h.Sum64()
}

// RoutingVersion names the lane routing above; it is part of the
// fingerprint a stream's lanes write (Config.Routing), so that a change of
// the hash is a change of routing.
const RoutingVersion = "fnv1a-v1"

// uncommitted reports whether any routed change is not yet committed.
func (m *multi) uncommitted() bool {
	for _, l := range m.lanes {
		if len(l.fifo) > 0 {
			return true
		}
	}
	return false
}

// drain waits until every routed change is committed.
func (m *multi) drain(ctx context.Context) error {
	for {
		m.mu.Lock()
		busy := m.uncommitted()
		ch := m.changed
		m.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// dispatch routes changes from the stream's queue to the lanes and adapts
// the lane count.
func (m *multi) dispatch(ctx context.Context, readErr <-chan error) error {
	s := m.s
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			if err != nil {
				return err
			}
			readErr = nil
		case <-m.resizeCh:
			if err := m.resizeIfWanted(ctx); err != nil {
				return err
			}
			continue
		case <-s.q.waitNonEmptyChan():
		}
		// A part of one of the queue's pages, not a copy: each change's one
		// copy is into its lane's queue.
		cs, err := s.q.take(ctx, 10_000, dispatchShare(s.cfg.MaxQueueBytes))
		if err != nil {
			return nil
		}
		if err := m.route(ctx, cs); err != nil || ctx.Err() != nil {
			return err
		}
		// The lanes hold the routed changes: the page lets their rows go
		// (it is held until its last change is taken).
		clear(cs)
	}
}

// route numbers the changes cs and routes each to its lane. It returns
// early, with nil, when ctx ends.
func (m *multi) route(ctx context.Context, cs []sluice.Change) error {
	s := m.s
	for i := range cs {
		// A decision taken while this slice was being routed (the
		// dispatcher may wait long on a lane that a locked target
		// holds up) takes effect before the next change.
		if err := m.resizeIfWanted(ctx); err != nil {
			return err
		}
		c := &cs[i]
		if c.Op == sluice.OpProgress {
			m.pass(c.Pos, true)
			continue
		}
		if m.rec != nil {
			skip, err := m.recovered(*c)
			if err != nil {
				return err
			}
			if skip {
				m.pass(c.Pos, false)
				continue
			}
		}
		byKey := m.s.cfg.Groups[c.Table.Name] == ""
		// A truncate of a table routed by key touches rows of every
		// lane, and a schema change must find every change before it
		// applied and none after: either is applied with every lane
		// drained on either side of it.
		whole := c.Op == sluice.OpTruncate || c.Op == sluice.OpSchema
		barrier := c.Op == sluice.OpTruncate && byKey || c.Op == sluice.OpSchema
		var h, oldH uint64
		moved := false
		if whole {
			h = m.routeHash(c.Table, nil)
		} else {
			key := c.NewKey()
			h = m.routeHash(c.Table, key)
			if byKey && c.Op == sluice.OpUpdate && c.Key != nil && !apply.KeysEqual(c.Key, key) {
				oldH, moved = m.routeHash(c.Table, c.Key), true
			}
		}
		if barrier {
			if err := m.drain(ctx); err != nil {
				return nil
			}
		}
		s.mu.Lock()
		if s.oldest.IsZero() {
			s.oldest = c.Time
		}
		s.mu.Unlock()
		m.mu.Lock()
		seq := m.next
		m.next++
		m.positions.push(c.Pos)
		l := m.lanes[h%uint64(m.active)]
		l.fifo = append(l.fifo, seq)
		if byKey && !whole {
			m.orderByKey(l, seq, h, oldH, moved)
		}
		l.routed++
		m.mu.Unlock()
		// A lane holds a few batches' worth, not its whole share of the
		// queue: what is routed must be committed before the lane
		// count can change, and the rest waits unrouted in the
		// stream's queue, where it costs nothing to re-route.
		if err := l.q.push(ctx, c, l.ahead, laneAhead*s.cfg.MaxBatchBytes); err != nil {
			return nil
		}
		if barrier {
			if err := m.drain(ctx); err != nil {
				return nil
			}
		}
	}
	return nil
}

// orderByKey records what the lane's change seq, just routed to it, waits
// for: the changes of other lanes not yet committed that touch its key
// (routing hash h) or, when it moved the row to a new key, its old key
// (oldH). Call with m.mu held.
//
// Only a move between lanes makes a key's changes span lanes, so the keys
// are tracked only while such moves happen: the first one after a while
// starts the tracking and, knowing nothing of the changes before it, waits
// for every change of its old key's lane routed so far (as a move whose
// old key the tracking has not seen since does); the tracking stops once
// the last move is committed and keyOrderIdle changes followed it. It
// costs a map lookup and store per change while on, nothing while off.
func (m *multi) orderByKey(l *lane, seq, h, oldH uint64, moved bool) {
	k := &m.keys
	n := uint64(m.active)
	from := -1 // the old key's lane, when the row moves to another lane
	if moved && int(oldH%n) != l.id {
		from = int(oldH % n)
	}
	if k.last == nil {
		if from < 0 {
			return
		}
		k.last, k.from, k.pruneAt = map[uint64]keyChange{}, seq, k.minPrune
	}
	if e, ok := k.last[h]; ok {
		m.waitFor(l, e.lane(), e.seq())
	}
	if moved {
		if e, ok := k.last[oldH]; ok {
			m.waitFor(l, e.lane(), e.seq())
		} else if from >= 0 {
			// The old key's last change, if it is not committed, came
			// before the tracking began: the move waits for every change
			// routed to the old key's lane before then.
			m.waitFor(l, from, k.from-1)
		}
		if from >= 0 {
			k.last[oldH] = newKeyChange(seq, l.id)
			k.lastMove = seq
		}
	}
	k.last[h] = newKeyChange(seq, l.id)
	switch {
	case seq-k.lastMove > k.idle && k.lastMove <= m.w:
		k.last = nil
	case len(k.last) >= k.pruneAt:
		// A change its lane committed makes nothing wait any more.
		for kh, e := range k.last {
			if m.committedTo(e.lane(), e.seq()) {
				delete(k.last, kh)
			}
		}
		k.pruneAt = max(2*len(k.last), k.minPrune)
	}
}

// waitFor makes the lane's change being routed wait until lane o's changes
// up to seq are committed, unless o is the lane itself (its changes commit
// in order) or they are. Call with m.mu held.
func (m *multi) waitFor(l *lane, o int, seq uint64) {
	if o == l.id || m.committedTo(o, seq) {
		return
	}
	l.waits = append(l.waits, laneWait{num: l.routed, lane: o, seq: seq})
}

// committedTo reports whether lane o's changes numbered up to seq are all
// committed. Call with m.mu held.
func (m *multi) committedTo(o int, seq uint64) bool {
	f := m.lanes[o].fifo
	return len(f) == 0 || f[0] > seq
}

// ready is how many of the k changes queued in the lane from its change
// numbered from on may go into a transaction now: those before the first
// that waits for another lane's changes not yet committed (see laneWait).
// changed is closed by the next commit. head is the lane's first change
// not committed: the waits before it are over and dropped.
func (m *multi) ready(l *lane, head, from uint64, k int) (n int, changed <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(l.waits) && l.waits[i].num < head {
		i++
	}
	if i > 0 {
		l.waits = append(l.waits[:0], l.waits[i:]...)
	}
	for _, w := range l.waits {
		if w.num >= from+uint64(k) {
			break
		}
		if w.num >= from && !m.committedTo(w.lane, w.seq) {
			return int(w.num - from), m.changed
		}
	}
	return k, m.changed
}

// pass numbers a change that needs no applying (a progress marker, or one
// the target holds already): it counts as committed at once, and the
// watermark moves over it as soon as every change before it is committed.
func (m *multi) pass(pos sluice.Position, marker bool) {
	m.mu.Lock()
	seq := m.next
	m.next++
	m.positions.push(pos)
	if marker {
		m.markers = append(m.markers, seq)
	}
	m.advanceLocked()
	m.mu.Unlock()
}

// appliedAt is the count of source changes up to change number w, which
// a checkpoint at w records: the stream's count at its start plus the
// changes numbered since, less the progress markers among them. Call with
// m.mu held.
func (m *multi) appliedAt(w uint64) uint64 {
	n := m.s.cfg.Start.Applied + w - m.passedMarkers
	for _, seq := range m.markers {
		if seq > w {
			break
		}
		n--
	}
	return n
}

// advanceLocked moves the in-memory watermark to the newest change such
// that every change numbered up to it is committed, and wakes lane 0 to
// write it when no lane commit will. Call with m.mu held.
func (m *multi) advanceLocked() bool {
	w := m.next - 1
	for _, o := range m.lanes {
		if len(o.fifo) > 0 && o.fifo[0]-1 < w {
			w = o.fifo[0] - 1
		}
	}
	if w <= m.w {
		return false
	}
	m.wPos = m.positions.drop(int(w - m.w))
	m.w = w
	for len(m.markers) > 0 && m.markers[0] <= w {
		m.markers = m.markers[1:]
		m.passedMarkers++
	}
	if m.w > m.durable {
		select {
		case m.flushWake <- struct{}{}:
		default:
		}
	}
	return true
}

// recovered reports whether the target holds c already: a lane of the run
// before committed it past the checkpoint (see Recovery). A lane whose Last
// every later change comes after is done with; once all are, the stream
// runs as usual.
func (m *multi) recovered(c sluice.Change) (bool, error) {
	rec := m.rec
	l := -1
	if c.Op != sluice.OpProgress {
		l = m.laneOf(c.Table, c.NewKey(), rec.Lanes)
		if c.Op == sluice.OpTruncate || c.Op == sluice.OpSchema {
			l = m.laneOf(c.Table, nil, rec.Lanes)
		}
	}
	skip := false
	for lane, last := range rec.Last {
		covered, done, err := m.s.cfg.Covers(last, c.Pos)
		if err != nil {
			return false, fmt.Errorf("stream %s: recover lane %d: compare position %s with the lane's last %s: %w", m.s.cfg.ID, lane, c.Pos, last, err)
		}
		if lane == l && covered {
			skip = true
		}
		if done {
			delete(rec.Last, lane)
		}
	}
	if skip {
		m.skipped++
	}
	if len(rec.Last) == 0 {
		m.mu.Lock()
		m.rec = nil
		m.mu.Unlock()
		m.s.log.Info("lanes recovered: every change they had committed past the checkpoint was skipped, none applied twice",
			"skipped", m.skipped, "lanes", rec.Lanes)
		if int(m.want.Load()) != m.active {
			select {
			case m.resizeCh <- struct{}{}:
			default:
			}
		}
	}
	return skip, nil
}

// watchLanes feeds the lane controller a few times a window and hands its
// decisions to the dispatcher. It runs apart from the dispatcher because
// the dispatcher can wait a long time for room in a lane whose target is
// slow, and that is exactly when the controller must keep measuring.
func (m *multi) watchLanes(ctx context.Context) {
	s := m.s
	// Several looks per window, so a window closes close to its length.
	tick := time.NewTicker(m.ctl.Window() / 5)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if m.recovering() {
				continue
			}
			if int(m.want.Load()) != m.lanesActive() {
				// A switch is pending (the dispatcher drains the lanes
				// first): what is measured now belongs to neither count,
				// and the window restarts once it is done.
				continue
			}
			inFlight := s.oldestTx(now)
			m.mu.Lock()
			applied := m.appliedAt(m.w)
			backlog := m.uncommitted()
			active := m.active
			m.mu.Unlock()
			ql, _ := s.q.size()
			n := m.ctl.Observe(now, applied, inFlight, backlog || ql > 0)
			if d, ok := m.ctl.LastDecision(); ok {
				s.log.Debug("lane window", "lanes", active, "next", d.N, "rate", int(d.Rate), "tx_latency", d.Latency,
					"window", d.To.Sub(d.From), "why", d.Reason)
				m.why.Store(&d.Reason)
			}
			if int(m.want.Swap(int32(n))) != n {
				select {
				case m.resizeCh <- struct{}{}:
				default:
				}
			}
		}
	}
}

// recovering reports whether a recovery is under way: the lane count stays
// the one the rows were written with.
func (m *multi) recovering() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rec != nil
}

func (m *multi) lanesActive() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active
}

// resizeIfWanted switches to the lane count the controller last chose, if
// it differs from the running one.
func (m *multi) resizeIfWanted(ctx context.Context) error {
	n := int(m.want.Load())
	if n == m.active || n == 0 {
		return nil
	}
	why := ""
	if p := m.why.Load(); p != nil {
		why = *p
	}
	return m.resize(ctx, n, why)
}

// resize switches to n lanes: it drains the lanes (the routing changes
// with n, and one row's changes must stay in order) and opens the
// connections of lanes that never ran before switching, then restarts the
// lane controller's measurement, so that neither the drain nor a new
// connection's handshake over a slow link is booked against the new count.
func (m *multi) resize(ctx context.Context, n int, why string) error {
	s := m.s
	if err := m.drain(ctx); err != nil {
		return nil
	}
	// The new count routes changes elsewhere: the watermark the drain
	// reached goes on the target first, so that no lane's row of the old
	// count names a change past it (see Recovery).
	if err := m.flush(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for _, l := range m.lanes[:n] {
		// Safe without a lock: a drained lane has nothing queued, so its
		// goroutine does not touch target until the first push, which
		// happens after this.
		if l.target != nil {
			continue
		}
		t, err := s.cfg.NewTarget(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("open lane %d target connection: %w", l.id, err)
		}
		if rtt, ok := measuredRTT(t); ok {
			l.ctrl.SetRTT(rtt)
		} else if rtt, err := t.Ping(ctx); err == nil {
			l.ctrl.SetRTT(rtt)
		}
		l.target = t
	}
	s.log.Info("lane count changed", "from", m.active, "to", n, "why", why)
	m.mu.Lock()
	m.active = n
	applied := m.appliedAt(m.w)
	m.mu.Unlock()
	m.sizeQueues()
	s.mu.Lock()
	s.stats.Lanes = n
	s.mu.Unlock()
	m.ctl.Restart(time.Now(), applied)
	return nil
}

// positions are the positions of the changes numbered m.w+1 up to
// m.next-1, in order: a change's is pushed as it is numbered and dropped
// as the watermark passes it. (A map of them cost a hash insert and delete
// per change on the dispatcher's path.)
type positions struct {
	ps   []sluice.Position
	head int // ps[head:] are held
}

func (p *positions) push(pos sluice.Position) {
	switch {
	case p.head > 0 && p.head == len(p.ps):
		p.ps, p.head = p.ps[:0], 0
	case p.head >= 1024 && 2*p.head >= len(p.ps):
		// Move the held ones to the front rather than grow: the
		// watermark trails the dispatcher by a few batches.
		n := copy(p.ps, p.ps[p.head:])
		clear(p.ps[n:])
		p.ps, p.head = p.ps[:n], 0
	}
	p.ps = append(p.ps, pos)
}

// at is the position of the i-th change held (0: the first past the
// watermark).
func (p *positions) at(i int) (sluice.Position, bool) {
	if i < 0 || p.head+i >= len(p.ps) {
		return sluice.Position{}, false
	}
	return p.ps[p.head+i], true
}

// drop removes the first n positions held and returns the last of them.
func (p *positions) drop(n int) sluice.Position {
	last := p.ps[p.head+n-1]
	clear(p.ps[p.head : p.head+n]) // let the tokens go
	p.head += n
	return last
}

// laneAhead is how many of its batches a lane may have routed to it ahead
// of the one it applies: enough that it never waits for the dispatcher,
// few enough that draining every lane (to change their count) takes a few
// transactions, not the whole queue.
const laneAhead = 3

// runLane applies a lane's queue in batches until ctx ends. Lane 0 also
// writes the watermark when the lanes went quiet with it ahead of what the
// target holds (flush).
func (m *multi) runLane(ctx context.Context, l *lane) error {
	s := m.s
	limit, attempts := 0, 0
	var wake <-chan struct{}
	if l.id == 0 {
		wake = m.flushWake
	}
	// Lane 0 writes the watermark at most every flushEvery: under load
	// the other lanes' commits move it all the time, and their own
	// checkpoints follow close behind.
	var lastFlush, flushAt time.Time
	// next is the batch after the one in flight, compacted ahead.
	var next *prepared
	defer func() { next.finish() }()
	if l.target != nil {
		m.openAlt(ctx, l)
	}
	for ctx.Err() == nil {
		s.beat(l.id)
		// The batch compacted ahead holds what arrived while the last
		// batch was in flight: its count is final from here.
		next.finish()
		if next != nil && next.n == 0 {
			next = nil
		}
		want := limit
		if limit == 0 {
			queued, _ := s.q.size()
			size := l.ctrl.Size()
			want = sizeFor(l.ctrl, l.q.len()+queued/max(m.lanesActive(), 1))
			if want > size {
				// The dispatcher routes up to a few batches ahead: let it
				// route for the larger size now.
				l.q.wakePushers()
			}
			want = next.sizeFor(l.head, want, l.ctrl)
		}
		if next != nil && next.first > l.head {
			// A failed batch is retried in pieces: they end where the
			// batch compacted ahead begins, so that it stays usable.
			want = min(want, int(next.first-l.head))
		}
		wait := s.cfg.IdleWait
		if !flushAt.IsZero() {
			wait = max(min(wait, time.Until(flushAt)), time.Millisecond)
		}
		items := l.q.peek(ctx, want, s.cfg.MaxBatchBytes, wait, wake)
		if k, changed := m.ready(l, l.head, l.head, len(items)); k < len(items) {
			if k == 0 {
				// The lane's next change waits for another lane's commit.
				t := time.NewTimer(s.cfg.IdleWait)
				select {
				case <-ctx.Done():
				case <-changed:
				case <-t.C:
				}
				t.Stop()
				continue
			}
			items = items[:k]
		}
		if len(items) == 0 {
			if l.id != 0 {
				continue
			}
			if flushAt.IsZero() && m.flushWanted() {
				flushAt = lastFlush.Add(flushEvery)
			}
			if !flushAt.IsZero() && !time.Now().Before(flushAt) {
				flushAt, lastFlush = time.Time{}, time.Now()
				if err := m.flush(ctx); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					if retry, _ := apply.IsRetryable(err); !retry {
						return err
					}
					flushAt = time.Now().Add(flushEvery)
					s.log.Warn("write the lanes' watermark to the target; retrying", append(ErrAttrs(err), "lane", 0)...)
				}
			}
			if time.Since(l.lastPing) >= idlePing {
				// Lane 0 keeps measuring an idle target, as the single
				// apply loop does, and notices one that stopped answering.
				s.idlePing(ctx, l.target)
				l.lastPing = time.Now()
			}
			continue
		}
		if l.target == nil {
			t, err := s.cfg.NewTarget(ctx)
			if err != nil {
				return fmt.Errorf("open lane %d target connection: %w", l.id, err)
			}
			l.target = t
			if rtt, err := t.Ping(ctx); err == nil {
				l.ctrl.SetRTT(rtt)
			}
		}
		cs := items[:schemaCut(items)]
		compactStart := time.Now()
		b, ahead := s.batch(next, l.head, cs)
		l.compactTook, l.compactedAhead = time.Since(compactStart), ahead
		if next != nil && next.first <= l.head {
			next.drop()
			next = nil
		}
		if limit == 0 && next == nil {
			// The next batch's changes, compacted while this one is in
			// flight as they are routed here, up to the size the lane
			// would give a backlog.
			next = s.prepareLane(ctx, l.q, l.head+uint64(len(cs)), max(want, backlogSize(l.ctrl)), s.cfg.MaxBatchBytes)
		}
		if err := s.schemaDDL(ctx, b); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if retry, _ := apply.IsRetryable(err); !retry {
				return err
			}
			s.log.Warn("read the target's catalog for a schema change; retrying", append(ErrAttrs(err), "lane", l.id)...)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		chain := limit == 0 && !s.cfg.NoOverlap && m.mayChain(l) && b.Schema == nil
		f := m.send(ctx, l, l.target, nil, cs, b, chain)
		m.openAlt(ctx, l)
		failed, err := m.fly(ctx, l, f, &next, chain)
		if errors.Is(err, errReorder) {
			continue
		}
		if err == nil {
			limit, attempts = 0, 0
			if time.Since(l.lastPing) >= idlePing {
				if rtt, perr := l.target.Ping(ctx); perr == nil {
					l.ctrl.SetRTT(rtt)
					if l.id == 0 {
						s.setRTT(rtt)
					}
				}
				l.lastPing = time.Now()
			}
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		retry, killed := apply.IsRetryable(err)
		if !retry {
			return err
		}
		attempts++
		s.mu.Lock()
		s.stats.Retries++
		if killed {
			s.stats.Kills++
		}
		s.stats.LastError = err.Error()
		s.mu.Unlock()
		if attempts >= s.cfg.MaxAttempts {
			return fmt.Errorf("stream %s lane %d: batch of %d changes failed %d times in a row, last: %w", s.cfg.ID, l.id, failed, attempts, err)
		}
		limit = l.ctrl.Failed(failed, s.lastTxTime(), killed)
		backoff := min(100*time.Millisecond<<min(attempts, 6), 5*time.Second)
		s.log.Warn("batch rolled back; retrying smaller", append(ErrAttrs(err), "lane", l.id, "changes", failed, "retry_with", limit, "attempt", attempts, "killed", killed)...)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	return nil
}

// flushEvery is the least time between two of lane 0's watermark writes.
const flushEvery = time.Second

// flushWanted reports whether the in-memory watermark is ahead of what the
// target holds.
func (m *multi) flushWanted() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.w > m.durable
}

// flush writes the in-memory watermark to the target when it is ahead of
// what the committed lane checkpoints hold: a checkpoint-only transaction
// on lane 0, which is idle when this runs (the lanes went quiet, or all are
// drained for a resize).
func (m *multi) flush(ctx context.Context) error {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	s := m.s
	m.mu.Lock()
	if m.w <= m.durable {
		m.mu.Unlock()
		return nil
	}
	w := m.w
	m.cpSeq++
	cp := sluice.Checkpoint{Stream: s.cfg.ID, Seq: m.cpSeq, Applied: m.appliedAt(w), Time: time.Now().UTC(), Position: m.wPos,
		Lane: 0, Lanes: m.active, Last: m.wPos, Routing: s.cfg.Routing}
	if l0 := m.lanes[0]; l0.lastSeq > w || (l0.lastSeq == 0 && !l0.last.IsZero()) {
		// Lane 0 committed changes past the watermark (another lane holds
		// it back), or did in the run before and a recovery is under way:
		// the row keeps naming the last of them, so that a restart skips
		// them rather than applying them again (see Recovery).
		cp.Last = l0.last
	}
	allDone := w == m.next-1
	m.mu.Unlock()
	applyCtx, cancel := s.inFlight(ctx)
	defer cancel()
	if err := m.lanes[0].target.Apply(applyCtx, &apply.Batch{}, cp); err != nil {
		return fmt.Errorf("lane 0: write the watermark: %w", err)
	}
	return m.committed(cp, w, allDone)
}

// committed takes note of a lane checkpoint the target committed, whose
// watermark is change w: when it is the highest yet, the state file, the
// stream's figures and the source follow it, in order.
func (m *multi) committed(cp sluice.Checkpoint, w uint64, allDone bool) error {
	s := m.s
	m.ackMu.Lock()
	defer m.ackMu.Unlock()
	m.mu.Lock()
	if w <= m.durable {
		m.mu.Unlock()
		return nil
	}
	m.durable, m.durableCP = w, cp
	m.mu.Unlock()
	fileCP := cp
	fileCP.Lane, fileCP.Lanes, fileCP.Last = 0, 0, sluice.Position{}
	if err := s.cfg.Store.Commit(fileCP); err != nil {
		return fmt.Errorf("batch committed on the target but the state file was not updated (the target's own checkpoint row has it): %w", err)
	}
	now := time.Now()
	s.mu.Lock()
	s.stats.Seq, s.stats.Applied, s.stats.Position, s.stats.LastCommit, s.stats.LastError = cp.Seq, cp.Applied, cp.Position, now, ""
	s.rateWin = append(s.rateWin, ratePoint{now, cp.Applied})
	for len(s.rateWin) > 2 && now.Sub(s.rateWin[0].t) > 10*time.Second {
		s.rateWin = s.rateWin[1:]
	}
	if first := s.rateWin[0]; len(s.rateWin) > 1 && now.After(first.t) {
		s.stats.Rate = float64(cp.Applied-first.applied) / now.Sub(first.t).Seconds()
	}
	if allDone {
		s.oldest = time.Time{}
	}
	s.mu.Unlock()
	s.ack(cp.Position)
	return nil
}
