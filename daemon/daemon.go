// Package daemon runs sluice's streams: for each it opens the state file,
// the target and the source, picks the resume point, checks the target
// before any data moves, and runs the stream while keeping its status file
// and progress report fresh. It is the only package that wires readers and
// targets together.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/controller"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/stream"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// StreamOptions configures one stream.
type StreamOptions struct {
	ID        string
	SourceURL string
	TargetURL string
	Tables    []sluice.TableName
	StateDir  string
	// SourceMode is how the source is read: "auto" (default: the log-based
	// reader), "logical", "binlog" or "trigger".
	SourceMode string
	// FromNow starts a log-read stream that has no checkpoint at the
	// source's current position.
	FromNow bool
	// InitialCopy is "auto" (default: copy unless FromNow), "on" or "off":
	// whether a stream with no checkpoint first copies the tables' rows.
	InitialCopy string
	// CreateTables is "on" (default: a stream that copies creates the
	// target tables that are missing) or "off".
	CreateTables string
	// SchemaChanges is "follow" (default: a streamed table's DDL on the
	// source is applied to the target in order) or "stop".
	SchemaChanges string
	// CopyWorkers and CopyChunkRows shape the copy (defaults 4, 50,000).
	CopyWorkers, CopyChunkRows int
	// ApplyMode is "pipelined" (default) or "per-row".
	ApplyMode string
	// MultiStatements is "auto" (default), "on" or "off": whether a MySQL
	// target gets each batch as one multi-statement packet.
	MultiStatements string
	// AllowCollationMerge accepts target key columns (the source's primary
	// key, the target's unique indexes) whose collation holds as equal
	// values the source keeps apart (see postgres.Config).
	AllowCollationMerge bool
	// DisableFKChecks is accepted for configurations written before a
	// MySQL target's applier session always ran with foreign_key_checks =
	// 0; it changes nothing and is logged as such.
	DisableFKChecks bool
	// BatchSize is the first batch size, or the fixed one with NoAutoTune.
	BatchSize  int
	NoAutoTune bool
	// Controller is "model" (default: batch size from the fitted cost
	// model) or "aimd" (the naive additive-increase, multiplicative-decrease
	// controller, for comparison).
	Controller string
	// StallRatio and StallWindow: durable progress under StallRatio × the
	// source's rate for StallWindow is a stall (defaults 0.1, 2 min).
	StallRatio  float64
	StallWindow time.Duration
	// ExitOnStall stops the stream with an error when it stalls.
	ExitOnStall bool
	// MinLanes and MaxLanes bound the lanes that apply concurrently, each
	// over its own target connection; the count adapts between them. Zero
	// means one lane.
	MinLanes, MaxLanes int
	// NoOverlap keeps each lane to one transaction in flight over one
	// connection (see stream.Config.NoOverlap).
	NoOverlap bool
	// KillBudget is the longest a target transaction may be predicted to
	// take. Zero means a quarter of TargetTxTimeout.
	KillBudget time.Duration
	// TargetTxTimeout is how long the target lets a transaction run before
	// it kills it. Zero means: detect it (Vitess/PlanetScale 20 s, the
	// target's own configured limit), else 60 s.
	TargetTxTimeout time.Duration
	// MaxBatchBytes bounds the bytes of changes one target transaction
	// carries; zero means only the queue bounds it.
	MaxBatchBytes   int64
	PollInterval    time.Duration
	MaxQueueBytes   int64
	ShutdownTimeout time.Duration
	// TransientRetryFor is how long a lone stream stopped by a passing
	// state of its target or source (starting up, read-only, a lost
	// connection: see transient.go) is started again in the process before
	// the error ends it. Zero: it ends it at once.
	TransientRetryFor time.Duration
	Logger            *slog.Logger
	// Progress, when set, receives a live one-line progress report every
	// second (a terminal); otherwise progress goes to the log every 10 s.
	Progress io.Writer
	// OnStart, when set, is called with the running stream once every
	// check has passed and changes are about to flow.
	OnStart func(*stream.Stream)
	// MetricsListen, when set, is the address (host:port) of an HTTP
	// server with Prometheus /metrics, /healthz and /readyz (service.go).
	// The systemd notify protocol needs no option: it is spoken whenever
	// $NOTIFY_SOCKET is set, with watchdog pings under $WATCHDOG_USEC.
	MetricsListen string
	// ProgressInterval is how often, at most, a log reader of an idle
	// stream hands out a progress marker (and a logical one asks the
	// server for its position, a binlog one gets a heartbeat): the
	// readers' defaults (5 s; 10 s for a logical reader's question) when
	// zero. Tests shorten it.
	ProgressInterval time.Duration
	// Health checks (health.go), every HealthInterval (30 s): a logical
	// stream's slot is warned of at 70 % and 85 % of
	// max_slot_wal_keep_size, or of SlotWALLimit (1 GiB) where the server
	// sets none, and when it has had no reader for SlotInactiveWarn
	// (10 min); a binlog stream's needed binlog when expiry may purge it
	// within BinlogPurgeWarn (24 h), or when fewer than
	// BinlogPurgeWarnFiles older binlogs are left before it (0: not
	// checked).
	HealthInterval       time.Duration
	SlotWALLimit         int64
	SlotInactiveWarn     time.Duration
	BinlogPurgeWarn      time.Duration
	BinlogPurgeWarnFiles int
}

// RunStream runs one stream until ctx ends (it then finishes or rolls back
// the batch in flight, checkpoints and returns nil) or an error stops it.
func RunStream(ctx context.Context, o StreamOptions) error {
	return Run(ctx, []StreamOptions{o}, nil)
}

// Run runs one or several streams in one process until ctx ends, each in
// its own goroutine with its own source, target, checkpoint record and
// controller, sharing one state dir (the state file admits one process),
// one metrics endpoint and one systemd service.
//
// When ctx ends every stream finishes or rolls back its batch in flight
// and checkpoints, and Run returns nil unless a stream failed to stop
// cleanly. A lone stream that fails ends Run with its error, so that the
// supervisor (systemd's Restart=on-failure) restarts the process. Among
// several, a stream that fails is logged, its error recorded in its state
// record, status file and metrics, and it is started again after a
// backoff (5 s, doubling up to 5 min) while the others go on; only a stall
// under ExitOnStall ends the process, so that the supervisor notices.
//
// Each value received from reloads is the complete new list of streams
// (the configuration file read again on SIGHUP): see reload.go for what
// changes take effect and how.
func Run(ctx context.Context, streams []StreamOptions, reloads <-chan []StreamOptions) error {
	if len(streams) == 0 {
		return fmt.Errorf("no streams to run")
	}
	streams = slices.Clone(streams)
	var budget time.Duration
	for i := range streams {
		streams[i] = withDefaults(streams[i])
		budget = max(budget, streams[i].KillBudget)
	}
	if err := checkSet(streams); err != nil {
		return Fail(ExitUsage, err)
	}
	log := streams[0].Logger
	p := &process{log: log, stateDir: streams[0].StateDir, metricsListen: streams[0].MetricsListen, fatal: make(chan error, 1)}
	svc, err := startService(ctx, log, p.metricsListen, budget, p.list)
	if err != nil {
		return err
	}
	defer svc.close()
	p.svc = svc

	store, err := checkpoint.Open(p.stateDir)
	if err != nil {
		return Fail(ExitState, err)
	}
	defer store.Close()
	p.store = store

	for _, o := range streams {
		p.start(ctx, o)
	}
	for {
		select {
		case <-ctx.Done():
			return p.stopAll()
		case next := <-reloads:
			p.reload(ctx, next)
		case err := <-p.fatal:
			return errors.Join(err, p.stopAll())
		}
	}
}

// checkSet refuses a list of streams (with defaults filled in) that cannot
// run in one process.
func checkSet(streams []StreamOptions) error {
	ids := map[string]bool{}
	for _, o := range streams {
		if o.StateDir != streams[0].StateDir {
			return fmt.Errorf("streams %s and %s name different state dirs (%s, %s): one process keeps one state dir", streams[0].ID, o.ID, streams[0].StateDir, o.StateDir)
		}
		if o.MetricsListen != streams[0].MetricsListen {
			return fmt.Errorf("streams %s and %s name different metrics addresses (%q, %q): one process serves one /metrics for every stream", streams[0].ID, o.ID, streams[0].MetricsListen, o.MetricsListen)
		}
		if ids[o.ID] {
			return fmt.Errorf("stream id %q is used twice: each stream needs its own", o.ID)
		}
		ids[o.ID] = true
	}
	return nil
}

// withDefaults fills in the settings left zero.
func withDefaults(o StreamOptions) StreamOptions {
	if o.ID == "" {
		o.ID = "default"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.InitialCopy == "" {
		o.InitialCopy = "auto"
	}
	if o.CreateTables == "" {
		o.CreateTables = "on"
	}
	if o.SchemaChanges == "" {
		o.SchemaChanges = "follow"
	}
	if o.CopyWorkers <= 0 {
		o.CopyWorkers = 4
	}
	if o.CopyChunkRows <= 0 {
		o.CopyChunkRows = 50_000
	}
	return o
}

// process is the set of streams one Run keeps going.
type process struct {
	log           *slog.Logger
	stateDir      string
	metricsListen string
	svc           *service
	store         *checkpoint.Store
	// fatal receives the error that ends the process: a lone stream's
	// failure, or a stall under ExitOnStall.
	fatal chan error

	mu    sync.Mutex
	slots []*slot
}

// list returns the streams in configuration order.
func (p *process) list() []*slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*slot(nil), p.slots...)
}

// start starts running a stream under its supervisor.
func (p *process) start(ctx context.Context, o StreamOptions) *slot {
	sctx, cancel := context.WithCancel(ctx)
	sl := &slot{o: o, cancel: cancel, done: make(chan struct{}), phase: phaseStarting}
	sl.budget = o.KillBudget
	p.svc.addStream(sl)
	p.mu.Lock()
	p.slots = append(p.slots, sl)
	p.mu.Unlock()
	go func() {
		defer close(sl.done)
		// The health checks run as long as the stream's supervisor, and
		// end before the stream counts as stopped.
		wctx, stopWatch := context.WithCancel(sctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			p.watchHealth(wctx, sl)
		}()
		sl.stopErr = p.supervise(sctx, sl)
		stopWatch()
		<-watched
	}()
	return sl
}

// stop stops one stream (its batch in flight commits or rolls back, its
// checkpoint is written) and forgets it.
func (p *process) stop(sl *slot) error {
	sl.cancel()
	<-sl.done
	p.mu.Lock()
	for i, x := range p.slots {
		if x == sl {
			p.slots = append(p.slots[:i], p.slots[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	return sl.stopErr
}

// stopAll stops every stream and returns the errors of those that did not
// stop cleanly.
func (p *process) stopAll() error {
	all := p.list()
	for _, sl := range all {
		sl.cancel()
	}
	var errs []error
	for _, sl := range all {
		<-sl.done
		if sl.stopErr != nil {
			errs = append(errs, sl.stopErr)
		}
	}
	return errors.Join(errs...)
}

// Restart backoff of a failed stream among several.
const (
	restartFirst = 5 * time.Second
	restartMax   = 5 * time.Minute
	// restartHealthy is how long a stream must have run for its next
	// failure to start the backoff over.
	restartHealthy = 10 * time.Minute
)

// supervise runs a stream until ctx ends, restarting it after a failure
// when other streams run alongside (see Run). It returns nil when the
// stream stopped cleanly, or the error that ended it for good.
func (p *process) supervise(ctx context.Context, sl *slot) error {
	log := sl.o.Logger
	backoff := restartFirst
	transient := transientRetry{limit: sl.o.TransientRetryFor}
	ran := false // a run of the stream got past its start in this process
	for attempt := 1; ; attempt++ {
		began := time.Now()
		err := p.runOnce(ctx, sl)
		if err == nil && ctx.Err() == nil {
			err = errors.New("the stream ended although nobody stopped it (a bug: please report it with the log)")
		}
		if err == nil || ctx.Err() != nil {
			sl.setPhase(phaseStopped, "", time.Time{})
			return err
		}
		ran = ran || sl.pastStart()
		err = fmt.Errorf("stream %s: %w", sl.o.ID, err)
		others := len(p.list()) > 1
		// A fenced stream runs in another sluice now: starting it again here
		// would take it back from that one.
		fenced := errors.Is(err, apply.ErrFenced)
		fatal := !others || (sl.o.ExitOnStall && stream.IsStalled(err)) || fenced
		if time.Since(began) >= restartHealthy {
			backoff = restartFirst
		}
		// A lone stream stopped by a passing state of an endpoint waits
		// for it, within TransientRetryFor (transient.go).
		var wait time.Duration
		var fault transientFault
		if !others && !fenced && !stream.IsStalled(err) {
			wait, fault, err = transient.after(err, ran, time.Since(began), sl.o)
			fatal = wait == 0
		}
		var retryAt time.Time // zero: not started again
		switch {
		case fatal:
		case others:
			retryAt = time.Now().Add(backoff)
		default:
			retryAt = time.Now().Add(wait)
		}
		msg := redactErr(sl.o, err)
		_ = p.store.SetError(sl.o.ID, msg)
		sl.setPhase(phaseFailed, msg, retryAt)
		if serr := recordStatusError(p.stateDir, sl.o.ID, msg, retryAt); serr != nil {
			log.Warn("write status file", "stream", sl.o.ID, "err", serr)
		}
		p.svc.settled()
		if fatal {
			if others {
				log.Error("stream stalled and --exit-on-stall is set: stopping every stream", append(stream.ErrAttrs(err), "stream", sl.o.ID)...)
			} else {
				log.Error(MsgStreamStopped, append(stream.ErrAttrs(err), "stream", sl.o.ID)...)
			}
			select {
			case p.fatal <- err:
			default:
			}
			return nil
		}
		if others {
			log.Error("stream stopped; the other streams go on, and this one is started again after a backoff",
				append(stream.ErrAttrs(err), "stream", sl.o.ID, "attempt", attempt, "retry_in", backoff.String())...)
		} else {
			log.Warn("the stream's "+fault.side+" is "+fault.cause+": the stream is started again after a backoff",
				append(stream.ErrAttrs(err), "stream", sl.o.ID, "endpoint", fault.endpoint(sl.o), "cause", fault.cause,
					"attempt", attempt, "retry_in", wait.String(), "gives_up_after", sl.o.TransientRetryFor.String())...)
		}
		select {
		case <-ctx.Done():
			sl.setPhase(phaseStopped, redactErr(sl.o, err), time.Time{})
			return nil
		case <-time.After(time.Until(retryAt)):
		}
		if others {
			backoff = min(2*backoff, restartMax)
		}
		sl.setPhase(phaseStarting, "", time.Time{})
		log.Info("starting stream again", "stream", sl.o.ID, "attempt", attempt+1)
	}
}

// runOnce runs the stream once: from opening its endpoints to its stop.
func (p *process) runOnce(ctx context.Context, sl *slot) error {
	o := sl.o
	if len(o.Tables) == 0 {
		return fmt.Errorf("no tables selected")
	}
	fixed := 0
	if o.NoAutoTune {
		if o.BatchSize <= 0 {
			return fmt.Errorf("--no-auto-tune needs --apply-batch-size N (N ≥ 1)")
		}
		fixed = o.BatchSize
	}
	return runStream(ctx, o, o.Logger, fixed, p.svc, sl, p.store)
}

// phase is where a stream is in its life.
type phase int

const (
	phaseStarting phase = iota // opening its endpoints, checking them
	phaseCopying               // copying the tables' rows before it streams
	phaseApplying              // running: its stream applies changes
	phaseFailed                // failed; waiting to be started again or for the process to end
	phaseStopped               // stopped
)

// slot is one stream of the process: its options and its current run.
// preflightWarnings logs what the checks of the stream's tables on its
// target found that does not stop it (the targets' PreflightWarnings),
// each once per run, whether the copy's check or the stream's found it.
type preflightWarnings struct {
	log    *slog.Logger
	tgt    target
	logged int
}

func (w *preflightWarnings) flush() {
	p, ok := w.tgt.(interface{ PreflightWarnings() []string })
	if !ok {
		return
	}
	list := p.PreflightWarnings()
	for _, s := range list[min(w.logged, len(list)):] {
		w.log.Warn(s)
	}
	w.logged = max(w.logged, len(list))
}

type slot struct {
	o       StreamOptions
	cancel  context.CancelFunc
	done    chan struct{}
	stopErr error // set before done is closed

	mu      sync.Mutex
	phase   phase
	st      *stream.Stream
	err     string
	retryAt time.Time
	budget  time.Duration
	// wasSettled is set once the stream first copied, applied or failed.
	wasSettled bool
	// copy is the initial copy's progress while phase is phaseCopying.
	copy tablecopy.Progress
}

// copying records the initial copy's progress.
func (sl *slot) copying(p tablecopy.Progress) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.phase, sl.copy, sl.err, sl.wasSettled = phaseCopying, p, "", true
}

func (sl *slot) copyOf() tablecopy.Progress {
	p, _ := sl.copyProgress()
	return p
}

// copyProgress returns the copy's progress while the stream copies.
func (sl *slot) copyProgress() (tablecopy.Progress, bool) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.copy, sl.phase == phaseCopying
}

func (sl *slot) setPhase(ph phase, err string, retryAt time.Time) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.phase, sl.err, sl.retryAt = ph, err, retryAt
	if ph == phaseApplying || ph == phaseFailed {
		sl.wasSettled = true
	}
	if ph != phaseApplying {
		sl.st = nil
	}
}

// setBudget records the stream's kill budget once it is known (it may be
// detected from the target).
func (sl *slot) setBudget(d time.Duration) {
	sl.mu.Lock()
	sl.budget = d
	sl.mu.Unlock()
}

func (sl *slot) killBudget() time.Duration {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.budget
}

func (sl *slot) started(st *stream.Stream) {
	sl.mu.Lock()
	sl.st, sl.phase, sl.err, sl.wasSettled = st, phaseApplying, "", true
	sl.mu.Unlock()
}

func (sl *slot) settled() bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.wasSettled
}

// running returns the stream while it applies.
func (sl *slot) running() (*stream.Stream, bool) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.st, sl.phase == phaseApplying && sl.st != nil
}

// ready says whether the stream applies, and if not why.
func (sl *slot) ready(idleWait time.Duration) (bool, string) {
	sl.mu.Lock()
	ph, st, err, retryAt := sl.phase, sl.st, sl.err, sl.retryAt
	sl.mu.Unlock()
	switch ph {
	case phaseStarting:
		return false, "starting: the stream has not passed its startup checks yet"
	case phaseCopying:
		return false, "not streaming yet: " + copyLine(sl.copyOf())
	case phaseFailed:
		if !retryAt.IsZero() {
			return false, fmt.Sprintf("failed (started again in %s): %s", time.Until(retryAt).Round(time.Second), oneLine(err))
		}
		return false, "failed: " + oneLine(err)
	case phaseStopped:
		return false, "stopped"
	}
	return readyLine(st, sl.killBudget(), idleWait)
}

// statusLine is the stream's one-line summary.
func (sl *slot) statusLine() string {
	sl.mu.Lock()
	ph, st := sl.phase, sl.st
	sl.mu.Unlock()
	if ph == phaseApplying && st != nil {
		return statsLine(st.Stats())
	}
	if ph == phaseCopying {
		return copyLine(sl.copyOf())
	}
	_, why := sl.ready(0)
	return why
}

// runStream runs a stream on an open state file.
func runStream(ctx context.Context, o StreamOptions, log *slog.Logger, fixed int, svc *service, sl *slot, store *checkpoint.Store) error {
	// Settings are refused before anything connects or installs.
	if o.Controller != "" && o.Controller != "model" && o.Controller != "aimd" {
		return recordErr(ctx, store, o, Fail(ExitUsage, fmt.Errorf("--controller %q: want model or aimd", o.Controller)))
	}
	if o.MinLanes > o.MaxLanes && o.MaxLanes > 0 {
		return recordErr(ctx, store, o, Fail(ExitUsage, fmt.Errorf("--min-lanes %d is more than --max-lanes %d", o.MinLanes, o.MaxLanes)))
	}
	srcEngine, err := endpoint.EngineOf(o.SourceURL)
	if err != nil {
		return recordErr(ctx, store, o, Fail(ExitUsage, fmt.Errorf("--source: %w", err)))
	}
	tgtEngine, err := endpoint.EngineOf(o.TargetURL)
	if err != nil {
		return recordErr(ctx, store, o, Fail(ExitUsage, fmt.Errorf("--target: %w", err)))
	}
	if _, err := endpoint.ResolveMode(srcEngine, o.SourceMode, sluice.Position{}); err != nil {
		return recordErr(ctx, store, o, Fail(ExitUsage, err))
	}
	if o.DisableFKChecks {
		log.Warn("--disable-fk-checks changes nothing any more: a MySQL target's applier session always runs with foreign_key_checks = 0 "+
			"(docs/guarantees.md, Foreign keys, says how sluice treats foreign keys); drop it from the command line or configuration", "stream", o.ID)
	}
	// Every connection to the target (first lane, further lanes, the
	// stall diagnosis) is opened the same way.
	topts := targetOptions{URL: o.TargetURL, Mode: o.ApplyMode, SourceEngine: srcEngine,
		MultiStatements: o.MultiStatements, AllowCollationMerge: o.AllowCollationMerge, Logger: log,
		Prefetch: apply.Prefetch{Stream: o.ID, Tables: endpoint.SourceTableNames(srcEngine, o.Tables)}}
	// The stream's own connection takes the stream's next generation on
	// the target (its fence) before it reads the checkpoints; the other
	// connections check their batches against it.
	mainOpts := topts
	mainOpts.Prefetch.Fence = true
	// See Start-up overlap (readahead.go).
	early := openEarly(ctx, store, o, log)
	defer func() { early.discard() }() // unless taken
	tgt, err := endpoint.OpenTarget(ctx, mainOpts)
	if err != nil {
		return recordErr(ctx, store, o, Fail(ExitTarget, err))
	}
	defer tgt.Close(context.WithoutCancel(ctx))
	var gen int64
	if f, ok := tgt.(fencer); ok {
		if gen, err = f.Fence(ctx, o.ID); err != nil {
			return recordErr(ctx, store, o, Fail(ExitTarget, err))
		}
	}

	res, err := resumePoint(ctx, log, store, tgt, o.ID)
	if err != nil {
		return recordErr(ctx, store, o, err)
	}
	warned := &preflightWarnings{log: log, tgt: tgt}
	start := res.start
	from := start.Position
	if from.IsZero() {
		early.discard()
		if o.copyWanted() && o.CreateTables != "off" {
			if err := createTables(ctx, o, log); err != nil {
				return recordErr(ctx, store, o, err)
			}
			forgetTables(tgt)
		}
		if from, err = initialCopy(ctx, o, log, tgt, gen, topts, sl, svc, store, warned); err != nil {
			return recordErr(ctx, store, o, err)
		}
	}
	copied := start.Position.IsZero() && !from.IsZero()
	oldCheckpoint := !start.Position.IsZero() && start.Lanes == 0
	rd, taken, err := early.take(log, from, oldCheckpoint)
	if taken {
		early = nil
	} else {
		rd, err = openSource(ctx, streamSourceOptions(o, log, oldCheckpoint), from)
	}
	if err != nil && res.olderTarget != nil {
		err = olderTargetError(o.ID, start, *res.olderTarget, err)
	}
	if err != nil {
		return recordErr(ctx, store, o, Fail(ExitSource, err))
	}
	defer rd.Close()
	// A MySQL source's foreign-key actions are carried out by sluice
	// (cascade.go); what it cannot follow is refused here.
	cascades, err := streamCascades(rd, rd.Tables(), srcEngine == EngineMySQL)
	if err != nil {
		return recordErr(ctx, store, o, Fail(ExitSource, err))
	}
	rd = sourceSide{rd}
	tables := rd.Tables()
	if err := tgt.Preflight(ctx, tables); err != nil {
		// A stream that follows the source's DDL may meet, in its
		// backlog, the change that makes the target fit.
		if o.followsSchema() {
			reconciled, changed, rerr := reconcile(ctx, o, log, tables)
			switch {
			case rerr != nil:
				err = rerr
			case changed:
				forgetTables(tgt)
				tables = reconciled
				err = tgt.Preflight(ctx, tables)
			}
		}
		if err != nil {
			return recordErr(ctx, store, o, Fail(ExitTarget, err))
		}
	}
	warned.flush()
	if err := CheckCascadeTarget(ctx, tgt, cascades); err != nil {
		return recordErr(ctx, store, o, Fail(ExitTarget, err))
	}
	if !cascades.Empty() {
		log.Info("the source's log omits the rows its foreign-key actions change: sluice carries them out on the target, applying the tables they join in source order",
			"stream", o.ID, "foreign_keys", cascades.Summary())
	}
	if o.KillBudget, err = killBudget(ctx, log, o, tgt); err != nil {
		return recordErr(ctx, store, o, err)
	}
	sl.setBudget(o.KillBudget)
	mstream := svc.addStream(sl)

	var rtPerChange float64
	if o.ApplyMode == "per-row" {
		rtPerChange = 1
	}
	newSizer := func() stream.Sizer {
		if o.Controller == "aimd" {
			return controller.NewAIMD(o.KillBudget, o.BatchSize)
		}
		return controller.NewBatch(controller.BatchConfig{
			Budget:              o.KillBudget,
			Initial:             o.BatchSize,
			Fixed:               fixed,
			RoundTripsPerChange: rtPerChange,
		})
	}
	ctrl := newSizer()
	// Lanes route the changes of tables with unique keys besides the
	// primary key, and of tables joined by foreign keys, by group; a
	// stream whose lanes stopped undrained must route as they did.
	var groups map[sluice.TableName]string
	var routing string
	if o.MaxLanes > 1 || slices.ContainsFunc(res.lanes, func(cp sluice.Checkpoint) bool { return cp.Lanes > 1 }) {
		groups, routing, err = routeGroups(ctx, tgt, tables, srcEngine == EnginePostgres && tgtEngine == EnginePostgres, cascades.Joined())
		if err != nil {
			return recordErr(ctx, store, o, err)
		}
	}
	rec, err := recovery(log, res, routing)
	if err != nil {
		return recordErr(ctx, store, o, err)
	}
	if start.Position.IsZero() {
		// A new stream: its start is durable before it reports itself
		// started, so that a restart (with --from-now or without) resumes
		// there and skips nothing.
		pos := rd.Start()
		if copied {
			pos = from // the snapshot's position, exactly
		}
		if start, err = startCheckpoint(ctx, tgt, store, o.ID, pos, routing); err != nil {
			return recordErr(ctx, store, o, err)
		}
		log.Info("stream start recorded", "stream", o.ID, "position", start.Position.String())
		if copied {
			finishCopy(ctx, log, tgt, o.ID, start.Position)
		}
	}
	// A lane's connection opened after a followed schema change checks
	// the tables as the change left them, not as the stream started.
	current := newTableDefs(tables)
	newTarget := func(ctx context.Context) (stream.Target, error) {
		t, err := endpoint.OpenTarget(ctx, topts)
		if err != nil {
			return nil, err
		}
		if f, ok := t.(fencer); ok && gen > 0 {
			f.SetGeneration(o.ID, gen)
		}
		if err := t.Preflight(ctx, current.list()); err != nil {
			t.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		return t, nil
	}
	// The stall diagnosis looks at the target over a connection of its
	// own: the appliers' may be the ones stuck.
	oldest := func(ctx context.Context) (string, error) {
		t, err := endpoint.OpenTarget(ctx, topts)
		if err != nil {
			return "", err
		}
		defer t.Close(context.WithoutCancel(ctx))
		return t.OldestTransaction(ctx)
	}
	follower := &schemaFollower{o: o, log: log, defs: current}
	defer follower.close()
	st := stream.New(stream.Config{
		ID:                  o.ID,
		Reader:              rd,
		Target:              tgt,
		Store:               store,
		Batch:               ctrl,
		Stall:               controller.NewStall(controller.StallConfig{Ratio: o.StallRatio, Window: o.StallWindow}),
		ExitOnStall:         o.ExitOnStall,
		RoundTripsPerChange: rtPerChange,
		MinLanes:            o.MinLanes,
		MaxLanes:            o.MaxLanes,
		NoOverlap:           o.NoOverlap,
		NewTarget:           newTarget,
		NewSizer:            newSizer,
		Groups:              groups,
		Cascades:            cascades,
		Routing:             routing,
		Recovery:            rec,
		Covers:              coversOfKind[start.Position.Kind],
		Start:               start,
		MaxQueueBytes:       o.MaxQueueBytes,
		ShutdownTimeout:     o.ShutdownTimeout,
		Logger:              log,
		IdleWait:            svc.idleWait,
		MaxBatchBytes:       o.MaxBatchBytes,
		OnBatch:             mstream.ObserveBatch,
		OldestTransaction:   oldest,
		Schema:              follower.statements,
	})
	mode := o.ApplyMode
	if mode == "" {
		mode = "pipelined"
	}
	log.Info("streaming", "stream", o.ID, "source", endpoint.MaskURL(o.SourceURL), "target", endpoint.MaskURL(o.TargetURL),
		"tables", len(o.Tables), "from", start.Position.String(), "apply_mode", mode, "batch", ctrl.Size(), "auto_tune", fixed == 0, "controller", o.Controller, "lanes", fmt.Sprintf("%d–%d", max(o.MinLanes, 1), max(o.MaxLanes, 1)))
	if o.OnStart != nil {
		o.OnStart(st)
	}
	sl.started(st)
	svc.settled()

	reportCtx, stopReport := context.WithCancel(ctx)
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		report(reportCtx, st, store.Dir(), log, o.Progress)
	}()
	runErr := st.Run(ctx)
	sl.setPhase(phaseStopped, "", time.Time{})
	stopReport()
	<-reported
	final := st.Stats()
	if err := WriteStatus(store.Dir(), final, false); err != nil {
		log.Warn("write status file", "err", err)
	}
	if runErr != nil {
		return runErr
	}
	log.Info("stopped", "stream", o.ID, "applied", final.Applied, "position", final.Position.String())
	return nil
}

// fencer is a target that fences a stream against an earlier process's
// batches (see the targets' Fence).
type fencer interface {
	Fence(ctx context.Context, stream string) (int64, error)
	SetGeneration(stream string, gen int64)
}

// recordErr notes a startup error in the state file. A stop requested
// while starting (SIGINT/SIGTERM) is not an error: nothing was in flight.
func recordErr(ctx context.Context, store *checkpoint.Store, o StreamOptions, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	_ = store.SetError(o.ID, redactErr(o, err))
	return err
}

// redactErr is err's text without the stream's passwords: the last line of
// defence for text that is kept (state file, status file, sync status), in
// case a driver's error quotes a connection string.
func redactErr(o StreamOptions, err error) string {
	var secrets []string
	for _, c := range []string{o.SourceURL, o.TargetURL} {
		if pw, ok := connstr.Password(c); ok {
			secrets = append(secrets, pw)
		}
	}
	return connstr.Redact(err.Error(), secrets...)
}

// report prints progress and keeps the status file fresh until ctx ends.
func report(ctx context.Context, st *stream.Stream, dir string, log *slog.Logger, line io.Writer) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastLog := time.Now()
	for {
		select {
		case <-ctx.Done():
			if line != nil {
				fmt.Fprintln(line)
			}
			return
		case <-tick.C:
		}
		s := st.Stats()
		if err := WriteStatus(dir, s, true); err != nil {
			log.Warn("write status file", "err", err)
		}
		switch {
		case line != nil:
			fmt.Fprintf(line, "\r%s applied %d  %.0f changes/s  lag %s  batch %d  rtt %s  queue %d   ",
				time.Now().Format("15:04:05"), s.Applied, s.Rate, s.Lag.Round(10*time.Millisecond), s.BatchSize, s.RTT.Round(100*time.Microsecond), s.QueueLen)
		case time.Since(lastLog) >= 10*time.Second:
			lastLog = time.Now()
			log.Info("progress", "stream", s.Stream, "applied", s.Applied, "rate", int(s.Rate), "lag", s.Lag.String(),
				"batch", s.BatchSize, "rtt", s.RTT.String(), "queue", s.QueueLen, "position", s.Position.String())
		}
	}
}
