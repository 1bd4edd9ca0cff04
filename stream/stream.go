// Package stream runs one replication stream: it moves changes from a
// source reader through a bounded queue into batches sized by the
// controller, applies each batch to the target in one transaction, and
// checkpoints the position only after the target commit returned.
package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/controller"
	"github.com/sluice-cdc/sluice/source"
)

// Target is what a stream needs of a target.
type Target interface {
	apply.Target
	// Ping measures one round trip to the target.
	Ping(ctx context.Context) (time.Duration, error)
}

// Sizer decides how many changes a batch carries: controller.Batch (the
// cost model) or controller.AIMD (the naive controller, for comparison).
type Sizer interface {
	Size() int
	Observe(n int, d time.Duration)
	Failed(n int, d time.Duration, killed bool) int
	Model() (fixed, perChange time.Duration, ok bool)
	SetRTT(d time.Duration)
	Budget() time.Duration
	RoundTripsPerChange() float64
}

// StateStore keeps the stream's checkpoint outside the target.
type StateStore interface {
	Commit(cp sluice.Checkpoint) error
	SetError(stream, msg string) error
}

// Config configures a Stream.
type Config struct {
	ID     string
	Reader source.Reader
	Target Target
	Store  StateStore
	Batch  Sizer
	// Stall detects a stream that cannot keep up; nil uses the defaults.
	Stall *controller.Stall
	// ExitOnStall makes Run return an error when a stall is detected,
	// rather than only reporting it.
	ExitOnStall bool
	// RoundTripsPerChange is what the apply path pays per change (1 for
	// per-row apply), for the stall diagnosis.
	RoundTripsPerChange float64
	// MinLanes and MaxLanes bound the lanes applying concurrently; with
	// MaxLanes > 1 the count adapts to throughput (see lanes.go), and
	// NewTarget and NewSizer open each further lane's target connection and
	// batch controller.
	MinLanes, MaxLanes int
	NewTarget          func(ctx context.Context) (Target, error)
	NewSizer           func() Sizer
	// NoOverlap keeps each lane to one transaction in flight, over one
	// target connection. By default a lane whose target can chain
	// transactions (ApplyAfter) opens a second connection with NewTarget
	// and sends its next transaction on it while one is in flight (see
	// Overlap in overlap.go).
	NoOverlap bool
	// LaneWindow is how long the lane controller measures each lane count
	// before deciding on the next; zero means controller.LanesConfig's
	// default.
	LaneWindow time.Duration
	// Groups names, for tables whose changes must all go to one lane, the
	// group they go with: a table with unique keys besides the primary key
	// (a change that releases a unique value and one that takes it must
	// keep their order), and tables joined by foreign keys (a parent and
	// its child). Other tables' changes are routed by primary key.
	Groups map[sluice.TableName]string
	// Cascades, when set, carries out on the target the foreign-key
	// actions of a source whose log omits the rows they change (MySQL,
	// MariaDB): a batch is cut after each change that fired one (see
	// apply.Compactor.Cut) and carries the statements of its actions.
	// Groups must keep the tables they join in one lane.
	Cascades *apply.Cascades
	// Routing fingerprints the routing (Groups and the hash) for the
	// lanes' checkpoints: after a crash, a lane's committed changes past
	// the watermark can be told apart only under the same routing.
	Routing string
	// Recovery, when set, holds what the lanes of a stream that stopped
	// without draining had committed past its checkpoint: those changes
	// are skipped when they are read again, so none is applied twice.
	Recovery *Recovery
	// Covers compares the reader's positions (see Recovery); required with
	// Recovery.
	Covers func(p, c sluice.Position) (covered, done bool, err error)
	// Start is the checkpoint the reader was opened at; the stream counts
	// commits and applied changes on from it.
	Start sluice.Checkpoint
	// MaxQueueBytes bounds the changes held between reader and applier.
	MaxQueueBytes int64
	// MaxBatchBytes is the most bytes of changes (as the queue counts them,
	// sluice.Change.Size) one target transaction may carry; a batch always
	// carries at least one change. Zero: no limit but the queue's. The
	// batch controller's size stays the bound in changes.
	MaxBatchBytes int64
	// ShutdownTimeout is how long a batch in flight when the context ends
	// may take to commit before it is rolled back.
	ShutdownTimeout time.Duration
	// MaxAttempts is how many times in a row a batch may fail with a
	// retryable error before the stream stops with that error.
	MaxAttempts int
	Logger      *slog.Logger
	// IdleWait is the longest an idle apply loop (or lane) waits for
	// changes before it goes round again; it bounds how stale Heartbeat
	// gets while nothing happens. Zero means 5 s.
	IdleWait time.Duration
	// OldestTransaction, when set, describes the oldest open transaction on
	// the target besides the applier's (over a connection of its own): a
	// stall's diagnosis names it, since a session holding locks is a
	// common reason a target stops taking batches.
	OldestTransaction func(ctx context.Context) (string, error)
	// OnBatch, when set, is called after every target transaction with
	// the batch's changes (not to be kept), its duration and its error
	// (nil: committed on the target). For metrics.
	OnBatch func(cs []sluice.Change, d time.Duration, err error)
	// Schema returns the statements that make the target follow a change
	// of a table's definition (an OpSchema change), run with the batch
	// that carries it alone, or the error that stops the stream there.
	// Required when the reader hands out schema changes.
	Schema func(ctx context.Context, c *sluice.Change) ([]string, error)
}

// Stats is a stream's live state.
type Stats struct {
	Stream   string
	Position sluice.Position
	Seq      uint64
	Applied  uint64
	// Rate is the recent apply rate in changes per second.
	Rate float64
	// Lag is how far behind the source the target is: the age of the oldest
	// change read but not yet committed, zero when caught up.
	Lag        time.Duration
	BatchSize  int
	LastBatch  int
	LastTxTime time.Duration
	RTT        time.Duration
	FixedCost  time.Duration
	PerChange  time.Duration
	QueueLen   int
	QueueBytes int64
	Retries    uint64
	Kills      uint64
	CaughtUp   bool
	// Lanes is how many lanes apply concurrently.
	Lanes int
	// Stalled is set while durable progress stays under the stall ratio of
	// the source's rate; StallReason is the diagnosis.
	Stalled     bool
	StallReason string
	// SourceRate is the rate at which changes were read from the source.
	SourceRate float64
	LastError  string
	LastCommit time.Time
	StartedAt  time.Time
	// PingError is set when the last RTT ping of the target failed, and
	// cleared when the target answers again (a ping or a commit).
	PingError string
	// InFlight is how long the oldest target transaction still running
	// has been running; zero when none is.
	InFlight time.Duration
	// MaxTxTime is the longest target transaction so far, committed or
	// not (a killed one counts up to its kill).
	MaxTxTime time.Duration
	// CompactedAhead counts the batches compacted while the batch before
	// them was in flight (prepare.go).
	CompactedAhead uint64
}

// Stream moves changes from a reader to a target.
type Stream struct {
	cfg Config
	log *slog.Logger
	q   *queue

	mu    sync.Mutex
	stats Stats
	// readerIdle is set when the reader's last read found nothing new.
	readerIdle bool
	oldest     time.Time // source time of the oldest change taken but not committed
	rateWin    []ratePoint
	readCount  uint64 // changes taken from the reader
	// ackNext is the newest durable position not yet sent to the source
	// (ack.go); ackWake wakes the acker.
	ackMu   sync.Mutex
	ackNext *sluice.Position
	ackWake chan struct{}
	// txRunning holds when each apply loop's (lane's) transaction in
	// flight began.
	txRunning map[int]time.Time

	// beats[i] is when apply loop i (the single loop, or lane i) last went
	// round, in Unix nanoseconds; loops is how many loops run.
	beats []atomic.Int64
	loops atomic.Int32
	// ordered holds the tables whose changes are applied in source order
	// for now (ordered.go).
	ordered orderedTables
	// laneQueues are the lanes' queues while the lanes run: Stats counts
	// what they hold (the changes of the batches in flight) as queued.
	laneQueues atomic.Pointer[[]*laneQueue]
	// pendingBytes is what the single apply loop took from the queue and
	// holds until it commits (the batch in flight and the one compacted
	// ahead): the lanes' share of the queue, counted as queued.
	pendingBytes atomic.Int64
}

type ratePoint struct {
	t       time.Time
	applied uint64
}

// New returns a stream for cfg.
func New(cfg Config) *Stream {
	if cfg.MaxQueueBytes <= 0 {
		cfg.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 10
	}
	if cfg.Batch == nil {
		cfg.Batch = controller.NewBatch(controller.DefaultBatchConfig())
	}
	if cfg.Stall == nil {
		cfg.Stall = controller.NewStall(controller.StallConfig{})
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("stream", cfg.ID)
	if cfg.IdleWait <= 0 || cfg.IdleWait > idlePing {
		cfg.IdleWait = idlePing
	}
	loops := max(cfg.MaxLanes, 1)
	if cfg.Recovery != nil {
		loops = max(loops, cfg.Recovery.Lanes)
	}
	s := &Stream{cfg: cfg, log: log, q: newQueue(queueShare(cfg.MaxQueueBytes)), beats: make([]atomic.Int64, loops),
		ackWake: make(chan struct{}, 1)}
	s.stats = Stats{
		Stream:    cfg.ID,
		Position:  cfg.Start.Position,
		Seq:       cfg.Start.Seq,
		Applied:   cfg.Start.Applied,
		StartedAt: time.Now(),
		BatchSize: cfg.Batch.Size(),
		Lanes:     1,
	}
	return s
}

// Stats returns a snapshot of the stream's live state.
func (s *Stream) Stats() Stats {
	// The lanes' queues first, outside s.mu: a lane may hold its queue's
	// lock while it waits for s.mu.
	var laneLen int
	var laneBytes int64
	if lq := s.laneQueues.Load(); lq != nil {
		for _, q := range *lq {
			n, b := q.size()
			laneLen += n
			laneBytes += b
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.QueueLen, st.QueueBytes = s.q.size()
	st.QueueLen += laneLen
	st.QueueBytes += laneBytes + s.pendingBytes.Load()
	st.BatchSize = s.cfg.Batch.Size()
	st.FixedCost, st.PerChange, _ = s.cfg.Batch.Model()
	oldest := s.oldest
	if oldest.IsZero() {
		oldest = s.q.headTime()
	}
	st.CaughtUp = s.readerIdle && st.QueueLen == 0 && oldest.IsZero()
	st.InFlight = s.oldestTxLocked(time.Now())
	if !oldest.IsZero() {
		st.Lag = time.Since(oldest)
	}
	return st
}

// Heartbeat returns when the least recently active apply loop (the single
// loop, or with lanes the slowest lane) last went round: a loop wedged in
// a target call stops it moving, an idle one still moves every IdleWait.
// Zero before Run.
func (s *Stream) Heartbeat() time.Time {
	n := int(s.loops.Load())
	if n == 0 {
		return time.Time{}
	}
	oldest := int64(0)
	for i := range s.beats[:n] {
		if b := s.beats[i].Load(); oldest == 0 || b < oldest {
			oldest = b
		}
	}
	return time.Unix(0, oldest)
}

// measuredRTT is the link's round trip as the target measured it while
// opening, moments ago, where it offers one: a ping would cost another
// round trip before the first batch.
func measuredRTT(t Target) (time.Duration, bool) {
	m, ok := t.(interface {
		MeasuredRTT() (time.Duration, bool)
	})
	if !ok {
		return 0, false
	}
	return m.MeasuredRTT()
}

func (s *Stream) beat(i int) { s.beats[i].Store(time.Now().UnixNano()) }

// Run streams until ctx ends (then it finishes or rolls back the batch in
// flight and returns nil) or a non-retryable error stops it.
func (s *Stream) Run(ctx context.Context) error {
	// The RTT the target measured while opening sizes the reader's first
	// pages (controller.Batch.BacklogSize), so it is known before the
	// reader starts.
	measured := false
	if rtt, ok := measuredRTT(s.cfg.Target); ok {
		s.setRTT(rtt)
		measured = true
	}
	readCtx, stopReader := context.WithCancel(ctx)
	defer stopReader()
	readErr := make(chan error, 1)
	go func() { readErr <- s.read(readCtx) }()

	if !measured {
		if rtt, err := s.cfg.Target.Ping(ctx); err == nil {
			s.setRTT(rtt)
		}
	}
	applyCtx, stopApply := context.WithCancelCause(ctx)
	defer stopApply(nil)
	stopAcker, ackerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ackerDone)
		s.runAcker(ctx, stopAcker)
	}()
	defer func() {
		close(stopAcker)
		<-ackerDone
	}()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		s.watchStall(applyCtx, stopApply)
	}()
	var err error
	recovering := s.cfg.Recovery != nil && s.cfg.Recovery.Lanes > 1
	// One lane still runs as a lane unless told not to overlap: a lane
	// chains its next transaction on a second connection while one is in
	// flight, which is how it hides the round trip between two
	// transactions. --max-lanes 1 keeps one ordering of the changes, not
	// one connection; --no-overlap asks for that (the single apply loop).
	laned := (s.cfg.MaxLanes > 1 || recovering || !s.cfg.NoOverlap) && s.cfg.NewTarget != nil && s.cfg.NewSizer != nil
	if recovering && !laned {
		return fmt.Errorf("stream %s: recovery of %d lanes needs lane connections (NewTarget and NewSizer)", s.cfg.ID, s.cfg.Recovery.Lanes)
	}
	loops := 1
	if laned {
		loops = len(s.beats)
	}
	for i := range loops {
		s.beat(i)
	}
	s.loops.Store(int32(loops))
	if laned {
		err = s.runLanes(applyCtx, readErr)
	} else {
		err = s.applyLoop(applyCtx, readErr)
	}
	stopApply(nil)
	<-watchDone
	if cause := context.Cause(applyCtx); err == nil && ctx.Err() == nil && errors.Is(cause, errStalled) {
		err = cause
	}
	stopReader()
	if err != nil {
		s.mu.Lock()
		s.stats.LastError = err.Error()
		s.mu.Unlock()
		if serr := s.cfg.Store.SetError(s.cfg.ID, err.Error()); serr != nil {
			s.log.Error("record stream error in state file", "err", serr)
		}
		return err
	}
	return nil
}

var errStalled = errors.New("stream stalled")

// DefaultMaxQueueBytes bounds the queue of a stream configured without
// MaxQueueBytes.
const DefaultMaxQueueBytes = 32 << 20

// MaxQueueBytes bounds every change the stream holds, wherever it is, by
// Change.Size: a read waiting to be queued (readShare), the stream's queue
// (queueShare), the changes the dispatcher took to route (dispatchShare)
// and the lanes' queues, which keep the changes of the batches in flight
// until they commit (laneShare). The shares add up to the whole, so a
// source transaction of any size streams through in bounded memory.
func readShare(q int64) int64     { return q / 8 }
func queueShare(q int64) int64    { return q - readShare(q) - dispatchShare(q) - laneShare(q) }
func dispatchShare(q int64) int64 { return q / 16 }
func laneShare(q int64) int64     { return q / 2 }

// txBegan records that apply loop (lane) i begins a target transaction,
// and returns when; txEnded records that it ended.
func (s *Stream) txBegan(i int) time.Time {
	now := time.Now()
	s.mu.Lock()
	if s.txRunning == nil {
		s.txRunning = map[int]time.Time{}
	}
	s.txRunning[i] = now
	s.mu.Unlock()
	return now
}

func (s *Stream) txEnded(i int) {
	s.mu.Lock()
	delete(s.txRunning, i)
	s.mu.Unlock()
}

// oldestTx is how long the oldest target transaction still running has
// been running at now; zero when none is.
func (s *Stream) oldestTx(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oldestTxLocked(now)
}

func (s *Stream) oldestTxLocked(now time.Time) time.Duration {
	var d time.Duration
	for _, t := range s.txRunning {
		d = max(d, now.Sub(t))
	}
	return d
}

// inFlight returns the context a batch is applied under. A batch in flight
// when ctx ends for a clean stop gets ShutdownTimeout to commit: the stop
// should not waste the work, and the position it commits is still written
// atomically with the rows. When ctx ends because the stream stalled under
// ExitOnStall, the batch in flight is the one stuck: it is rolled back at
// once.
func (s *Stream) inFlight(ctx context.Context) (context.Context, context.CancelFunc) {
	applyCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), errStalled) {
			cancel()
			return
		}
		t := time.AfterFunc(s.cfg.ShutdownTimeout, cancel)
		context.AfterFunc(applyCtx, func() { t.Stop() })
	})
	return applyCtx, func() {
		stop()
		cancel()
	}
}

// oldestTransaction looks up the oldest open transaction on the target
// for a stall's diagnosis, as a suffix of it; empty without the hook, when
// there is none, or when the lookup fails (logged: the diagnosis must not
// wait on a target that does not answer).
func (s *Stream) oldestTransaction(ctx context.Context) string {
	if s.cfg.OldestTransaction == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	what, err := s.cfg.OldestTransaction(ctx)
	if err != nil {
		s.log.Warn("stall diagnosis: cannot read the oldest transaction on the target", "err", err)
		return ""
	}
	if what == "" {
		return ""
	}
	return "; oldest transaction on the target: " + what
}

// watchStall checks durable progress against the source's rate every
// second. A stall is logged as an error with the diagnosis when it starts
// and again every window while it lasts, and shown in Stats; with
// ExitOnStall it stops the stream.
func (s *Stream) watchStall(ctx context.Context, stop context.CancelCauseFunc) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastLog time.Time
	var oldest string // the oldest target transaction, as last looked up
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			s.mu.Lock()
			read, applied := s.readCount, s.stats.Applied
			s.mu.Unlock()
			ql, _ := s.q.size()
			st := s.Stats()
			pending := ql > 0 || !st.CaughtUp
			state := s.cfg.Stall.Observe(now, read, applied, pending)
			s.mu.Lock()
			s.stats.SourceRate = state.SourceRate
			s.stats.Stalled = state.Stalled
			if !state.Stalled {
				s.stats.StallReason, oldest = "", ""
				s.mu.Unlock()
				continue
			}
			fixed, perChange, ok := s.cfg.Batch.Model()
			if !ok && st.LastBatch > 0 {
				perChange = st.LastTxTime / time.Duration(st.LastBatch)
			}
			reason := controller.Diagnose(state, st.RTT, s.cfg.RoundTripsPerChange, 1, st.BatchSize,
				st.LastTxTime, s.cfg.Batch.Budget(), st.Kills, fixed, perChange)
			if budget := s.cfg.Batch.Budget(); st.InFlight > budget {
				reason += fmt.Sprintf("; a target transaction has been running for %s, over the %s kill budget, and no transaction killer ended it: it waits on the target (a lock held by another session, or a saturated server)",
					st.InFlight.Round(time.Second), budget)
			}
			s.mu.Unlock()
			logNow := lastLog.IsZero() || now.Sub(lastLog) >= s.cfg.Stall.Window()
			if logNow || s.cfg.ExitOnStall {
				oldest = s.oldestTransaction(ctx)
			}
			reason += oldest
			s.mu.Lock()
			s.stats.StallReason = reason
			s.mu.Unlock()
			if logNow {
				lastLog = now
				s.log.Error("stream stalled: it cannot keep up with the source", "diagnosis", reason,
					"source_rate", state.SourceRate, "apply_rate", state.ApplyRate, "lag", st.Lag.String())
			}
			if s.cfg.ExitOnStall {
				stop(fmt.Errorf("%w: %s", errStalled, reason))
				return
			}
		}
	}
}

// read moves changes from the reader into the queue.
func (s *Stream) read(ctx context.Context) error {
	avgSize := int64(512) // bytes per change, as measured
	for {
		// As many as the first batches may carry: they are sized from
		// what is queued.
		page := backlogSize(s.cfg.Batch)
		if page < 1000 {
			page = 1000
		}
		// One read holds at most its share of the queue's bytes while it
		// waits to be queued: memory is bounded by --max-queue-bytes, not
		// by the backlog or a source transaction.
		if limit := int(readShare(s.cfg.MaxQueueBytes) / avgSize); limit < page {
			page = limit
		}
		if page < 1 {
			page = 1
		}
		cs, err := s.cfg.Reader.Read(ctx, page)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read source: %w", err)
		}
		if len(cs) > 0 {
			var n int64
			for i := range cs {
				n += int64(cs[i].Size())
			}
			avgSize = max(64, (3*avgSize+n/int64(len(cs)))/4)
		}
		now := time.Now()
		for i := range cs {
			// Sources that do not say when a change was committed get the
			// time it was read, so lag still counts the time spent queued.
			if cs[i].Time.IsZero() {
				cs[i].Time = now
			}
		}
		s.mu.Lock()
		s.readerIdle = len(cs) == 0
		s.readCount += uint64(len(cs))
		s.mu.Unlock()
		if len(cs) == 0 {
			continue
		}
		if err := s.q.push(ctx, cs); err != nil {
			return nil
		}
	}
}

const idlePing = 5 * time.Second

// pendingRoom is how many bytes the single apply loop may take from the
// queue now: its held changes stay within the lanes' share (a take
// always returns one change, so a change larger than the share still
// goes).
func (s *Stream) pendingRoom() int64 {
	return max(laneShare(s.cfg.MaxQueueBytes)-s.pendingBytes.Load(), 1)
}

func changesSize(cs []sluice.Change) int64 {
	var n int64
	for i := range cs {
		n += int64(cs[i].Size())
	}
	return n
}

func (s *Stream) applyLoop(ctx context.Context, readErr <-chan error) error {
	defer s.pendingBytes.Store(0)
	var pending []sluice.Change // taken from the queue, not yet committed
	// head numbers pending[0] (changes taken before it); next is the batch
	// after the one in flight, compacted ahead (see prepare).
	var head uint64
	var next *prepared
	limit := 0 // when >0, the size a failed batch is retried with
	attempts := 0
	lastPing := time.Now()
	for {
		s.beat(0)
		if ctx.Err() != nil {
			return nil
		}
		want := limit
		sized := func() {
			if limit == 0 {
				queued, _ := s.q.size()
				want = next.sizeFor(head, sizeFor(s.cfg.Batch, len(pending)+queued), s.cfg.Batch)
			}
		}
		sized()
		if len(pending) < want {
			if len(pending) == 0 {
				wait := s.q.waitNonEmpty()
				if wait != nil {
					select {
					case <-ctx.Done():
						return nil
					case err := <-readErr:
						if err != nil {
							return err
						}
						readErr = nil
					case <-wait:
					case <-time.After(s.cfg.IdleWait):
					}
				}
				if wait != nil && time.Since(lastPing) >= idlePing {
					s.idlePing(ctx, s.cfg.Target)
					lastPing = time.Now()
				}
				// Sized again now that changes are queued: the first batch
				// of a backlog is sized from it (controller.Batch.SizeFor),
				// not from the empty queue found at start.
				sized()
			}
			if ch := s.q.waitNonEmpty(); ch == nil {
				had := len(pending)
				var err error
				pending, err = s.q.takeInto(ctx, pending, want-len(pending), s.pendingRoom())
				if err != nil {
					return nil
				}
				s.pendingBytes.Add(changesSize(pending[had:]))
				s.mu.Lock()
				s.oldest = pending[0].Time
				s.mu.Unlock()
			}
		}
		if len(pending) == 0 {
			continue
		}
		if next != nil && next.first > head {
			// A failed batch is retried in pieces: they end where the
			// batch compacted ahead begins, so that it stays usable.
			want = min(want, int(next.first-head))
		}
		n := bytePrefix(pending[:min(want, len(pending))], s.cfg.MaxBatchBytes, changeSize)
		n = schemaCut(pending[:n])
		b, _ := s.batch(next, head, pending[:n])
		if next != nil && next.first <= head {
			next.drop()
			next = nil
		}
		if limit == 0 && next == nil {
			// The next batch's changes, compacted while this one is in
			// flight: what is queued now, up to this batch's size.
			if len(pending) < n+want && s.q.waitNonEmpty() == nil {
				had := len(pending)
				var err error
				pending, err = s.q.takeInto(ctx, pending, n+want-len(pending), s.pendingRoom())
				if err != nil {
					return nil
				}
				s.pendingBytes.Add(changesSize(pending[had:]))
			}
			if rest := pending[n:min(n+want, len(pending))]; len(rest) > 0 {
				rest = rest[:bytePrefix(rest, s.cfg.MaxBatchBytes, changeSize)]
				next = s.prepare(head+uint64(n), rest[:schemaCut(rest)])
			}
		}
		err := s.applyBatch(ctx, pending[:n], b)
		if errors.Is(err, errReorder) {
			continue
		}
		if err == nil && time.Since(lastPing) >= idlePing {
			// A busy stream measures the RTT between batches too, so the
			// controller follows a link that gets slower or faster.
			if rtt, perr := s.cfg.Target.Ping(ctx); perr == nil {
				s.setRTT(rtt)
			}
			lastPing = time.Now()
		}
		if err == nil {
			s.pendingBytes.Add(-changesSize(pending[:n]))
			clear(pending[:n])
			pending = pending[n:]
			head += uint64(n)
			limit, attempts = 0, 0
			s.mu.Lock()
			s.oldest = time.Time{}
			if len(pending) > 0 {
				s.oldest = pending[0].Time
			}
			s.mu.Unlock()
			continue
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
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
			return fmt.Errorf("stream %s: batch of %d changes failed %d times in a row, last: %w", s.cfg.ID, n, attempts, err)
		}
		limit = s.cfg.Batch.Failed(n, s.lastTxTime(), killed)
		backoff := min(100*time.Millisecond<<min(attempts, 6), 5*time.Second)
		s.log.Warn("batch rolled back; retrying smaller", append(ErrAttrs(err), "changes", n, "retry_with", limit, "attempt", attempts, "killed", killed, "backoff", backoff)...)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

func changeSize(c *sluice.Change) int64 { return int64(c.Size()) }

// schemaCut returns how many of cs, from the front, a batch takes so that a
// schema change is a batch of its own: 1 when cs starts with one, else up
// to the first.
func schemaCut(cs []sluice.Change) int {
	for i := range cs {
		if cs[i].Op == sluice.OpSchema {
			return max(i, 1)
		}
	}
	return len(cs)
}

// schemaDDL fills a schema change's batch with the statements that make
// the target follow it (Config.Schema).
func (s *Stream) schemaDDL(ctx context.Context, b *apply.Batch) error {
	if b.Schema == nil {
		return nil
	}
	if s.cfg.Schema == nil {
		return &sluice.TableError{Table: b.Schema.Table.Name, Err: fmt.Errorf("table %s changed on the source, and this stream cannot follow schema changes: make the target match, then restart sluice", b.Schema.Table.Name)}
	}
	ddl, err := s.cfg.Schema(ctx, b.Schema)
	if err != nil {
		return err
	}
	b.DDL = ddl
	return nil
}

// bytePrefix returns how many of xs, from the front, fit in maxBytes by
// size: at least one (a change larger than the cap must still be applied,
// alone), all of them when maxBytes ≤ 0.
func bytePrefix[T any](xs []T, maxBytes int64, size func(*T) int64) int {
	return bytePrefixOf(len(xs), maxBytes, func(i int) int64 { return size(&xs[i]) })
}

// bytePrefixOf is bytePrefix of n items, the i-th of size(i) bytes: for
// items that are not a slice (the lane queue's ring).
func bytePrefixOf(n int, maxBytes int64, size func(i int) int64) int {
	if maxBytes <= 0 || n <= 1 {
		return n
	}
	var sum int64
	for i := range n {
		sum += size(i)
		if sum > maxBytes {
			return max(i, 1)
		}
	}
	return n
}

func (s *Stream) lastTxTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.LastTxTime
}

// idlePing measures the RTT of an idle stream's target and notes whether
// it answered.
func (s *Stream) idlePing(ctx context.Context, t Target) {
	rtt, err := t.Ping(ctx)
	if err == nil {
		s.setRTT(rtt)
		return
	}
	if ctx.Err() == nil {
		s.mu.Lock()
		s.stats.PingError = err.Error()
		s.mu.Unlock()
	}
}

func (s *Stream) setRTT(d time.Duration) {
	s.mu.Lock()
	s.stats.RTT = d
	s.stats.PingError = ""
	s.mu.Unlock()
	s.cfg.Batch.SetRTT(d)
}

// applyBatch applies cs, compacted as b, with the next checkpoint in one target
// transaction and, once the commit returned, records the checkpoint in the
// state file and tells the reader.
func (s *Stream) applyBatch(ctx context.Context, cs []sluice.Change, b *apply.Batch) error {
	s.mu.Lock()
	cp := sluice.Checkpoint{
		Stream:   s.cfg.ID,
		Seq:      s.stats.Seq + 1,
		Position: b.Last,
		Applied:  s.stats.Applied + uint64(b.Changes),
		Time:     time.Now().UTC(),
		Lane:     0,
		Lanes:    1,
		Last:     b.Last,
		Routing:  s.cfg.Routing,
	}
	s.mu.Unlock()

	applyCtx, cancel := s.inFlight(ctx)
	defer cancel()

	if err := s.schemaDDL(applyCtx, b); err != nil {
		return err
	}
	start := s.txBegan(0)
	err := s.cfg.Target.Apply(applyCtx, b, cp)
	d := time.Since(start)
	s.txEnded(0)
	s.mu.Lock()
	s.stats.LastTxTime = d
	s.stats.MaxTxTime = max(s.stats.MaxTxTime, d)
	s.stats.LastBatch = len(cs)
	if err == nil {
		s.stats.PingError = ""
	}
	s.mu.Unlock()
	if s.cfg.OnBatch != nil {
		s.cfg.OnBatch(cs, d, err)
	}
	if err != nil {
		if err = s.reorder(b, err); err == errReorder {
			return err
		}
		return fmt.Errorf("apply batch of %d changes (%d rows): %w", len(cs), b.Rows, err)
	}
	// The target has committed: only now may the state file move.
	if err := s.cfg.Store.Commit(cp); err != nil {
		return fmt.Errorf("batch committed on the target but the state file was not updated (the target's own checkpoint row has it): %w", err)
	}
	// The controller sizes batches on the whole cost of one, state-file
	// fsync included: on a fast link that fixed cost is what small batches
	// waste.
	s.cfg.Batch.Observe(len(cs), time.Since(start))
	now := time.Now()
	s.mu.Lock()
	s.stats.Seq = cp.Seq
	s.stats.Applied = cp.Applied
	s.stats.Position = cp.Position
	s.stats.LastCommit = now
	s.stats.LastError = ""
	s.rateWin = append(s.rateWin, ratePoint{now, cp.Applied})
	for len(s.rateWin) > 2 && now.Sub(s.rateWin[0].t) > 10*time.Second {
		s.rateWin = s.rateWin[1:]
	}
	if first := s.rateWin[0]; len(s.rateWin) > 1 && now.After(first.t) {
		s.stats.Rate = float64(cp.Applied-first.applied) / now.Sub(first.t).Seconds()
	}
	s.mu.Unlock()
	s.ack(cp.Position)
	s.log.Debug("batch committed", "changes", len(cs), "rows", b.Rows, "tx_time", d, "position", cp.Position.String())
	return nil
}
