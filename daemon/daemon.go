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
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/controller"
	"github.com/sluice-cdc/sluice/stream"
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
	// ApplyMode is "pipelined" (default) or "per-row".
	ApplyMode string
	// MultiStatements is "auto" (default), "on" or "off": whether a MySQL
	// target gets each batch as one multi-statement packet.
	MultiStatements string
	// DisableFKChecks runs a MySQL target's applier session with
	// foreign_key_checks = 0.
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
	// KillBudget is the longest a target transaction may be predicted to
	// take.
	KillBudget      time.Duration
	PollInterval    time.Duration
	MaxQueueBytes   int64
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
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
}

// RunStream runs one stream until ctx ends (it then finishes or rolls back
// the batch in flight, checkpoints and returns nil) or an error stops it.
func RunStream(ctx context.Context, o StreamOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.ID == "" {
		o.ID = "default"
	}
	if len(o.Tables) == 0 {
		return fmt.Errorf("stream %s: no tables selected", o.ID)
	}
	fixed := 0
	if o.NoAutoTune {
		if o.BatchSize <= 0 {
			return fmt.Errorf("--no-auto-tune needs --apply-batch-size N (N ≥ 1)")
		}
		fixed = o.BatchSize
	}
	if o.KillBudget <= 0 {
		o.KillBudget = 15 * time.Second
	}

	svc, err := startService(ctx, o, log)
	if err != nil {
		return err
	}
	defer svc.close()

	store, err := checkpoint.Open(o.StateDir)
	if err != nil {
		return err
	}
	defer store.Close()
	return runStream(ctx, o, log, fixed, svc, store)
}

// Run runs several streams in one process, each in its own goroutine with
// its own source, target, checkpoint record and controller, sharing one
// state dir (the state file admits one process). A stream that fails is
// logged, its error recorded in its state record and status file, and the
// others go on. Run returns when every stream has returned: nil if ctx
// ended them or they stopped cleanly, otherwise the streams' errors.
// Every stream must name the same StateDir; with one stream Run is
// RunStream.
func Run(ctx context.Context, streams []StreamOptions) error {
	if len(streams) == 1 {
		return RunStream(ctx, streams[0])
	}
	if len(streams) == 0 {
		return fmt.Errorf("no streams to run")
	}
	ids := map[string]bool{}
	for _, o := range streams {
		if o.StateDir != streams[0].StateDir {
			return fmt.Errorf("streams %s and %s name different state dirs (%s, %s): one process keeps one state dir", streams[0].ID, o.ID, streams[0].StateDir, o.StateDir)
		}
		if o.MetricsListen != "" {
			// TODO(issue 6 item 4): one /metrics and /readyz for every stream.
			return fmt.Errorf("--metrics-listen serves one stream for now: run one stream per process to use it")
		}
		if ids[o.ID] {
			return fmt.Errorf("stream id %q is used twice: each stream needs its own", o.ID)
		}
		ids[o.ID] = true
	}
	store, err := checkpoint.Open(streams[0].StateDir)
	if err != nil {
		return err
	}
	defer store.Close()
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, o := range streams {
		wg.Go(func() {
			errs[i] = runOne(ctx, o, store)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runOne runs one of several streams and records its failure.
func runOne(ctx context.Context, o StreamOptions, store *checkpoint.Store) (err error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	defer func() {
		if err == nil {
			return
		}
		err = fmt.Errorf("stream %s: %w", o.ID, err)
		log.Error("stream stopped; the other streams go on", "stream", o.ID, "err", err.Error())
		_ = store.SetError(o.ID, err.Error())
		if serr := recordStatusError(store.Dir(), o.ID, err.Error()); serr != nil {
			log.Warn("write status file", "stream", o.ID, "err", serr)
		}
	}()
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
	if o.KillBudget <= 0 {
		o.KillBudget = 15 * time.Second
	}
	svc, err := startService(ctx, o, log)
	if err != nil {
		return err
	}
	defer svc.close()
	return runStream(ctx, o, log, fixed, svc, store)
}

// runStream runs a stream on an open state file.
func runStream(ctx context.Context, o StreamOptions, log *slog.Logger, fixed int, svc *service, store *checkpoint.Store) error {

	srcEngine, err := EngineOf(o.SourceURL)
	if err != nil {
		return recordErr(ctx, store, o.ID, fmt.Errorf("--source: %w", err))
	}
	tgt, err := openTarget(ctx, targetOptions{URL: o.TargetURL, Mode: o.ApplyMode, SourceEngine: srcEngine,
		MultiStatements: o.MultiStatements, DisableFKChecks: o.DisableFKChecks, Logger: log})
	if err != nil {
		return recordErr(ctx, store, o.ID, err)
	}
	defer tgt.Close(context.WithoutCancel(ctx))

	start, err := resumePoint(ctx, log, store, tgt, o.ID)
	if err != nil {
		return recordErr(ctx, store, o.ID, err)
	}
	rd, err := openSource(ctx, sourceOptions{
		URL:          o.SourceURL,
		Mode:         o.SourceMode,
		Stream:       o.ID,
		FromNow:      o.FromNow,
		Tables:       o.Tables,
		PollInterval: o.PollInterval,
		Install:      true,
		Logger:       log,
	}, start.Position)
	if err != nil {
		return recordErr(ctx, store, o.ID, err)
	}
	defer rd.Close()
	if err := tgt.Preflight(ctx, rd.Tables()); err != nil {
		return recordErr(ctx, store, o.ID, err)
	}

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
	if o.Controller != "" && o.Controller != "model" && o.Controller != "aimd" {
		return recordErr(ctx, store, o.ID, fmt.Errorf("--controller %q: want model or aimd", o.Controller))
	}
	if o.MinLanes > o.MaxLanes && o.MaxLanes > 0 {
		return recordErr(ctx, store, o.ID, fmt.Errorf("--min-lanes %d is more than --max-lanes %d", o.MinLanes, o.MaxLanes))
	}
	ctrl := newSizer()
	tables := rd.Tables()
	// Tables with unique keys besides the primary key stay in one lane.
	whole := map[sluice.TableName]bool{}
	if o.MaxLanes > 1 {
		for _, t := range tables {
			has, err := tgt.HasUniqueKeys(ctx, t.Name)
			if err != nil {
				return recordErr(ctx, store, o.ID, err)
			}
			whole[t.Name] = has
		}
	}
	newTarget := func(ctx context.Context) (stream.Target, error) {
		t, err := openTarget(ctx, targetOptions{URL: o.TargetURL, Mode: o.ApplyMode, SourceEngine: srcEngine,
			MultiStatements: o.MultiStatements, DisableFKChecks: o.DisableFKChecks, Logger: log})
		if err != nil {
			return nil, err
		}
		if err := t.Preflight(ctx, tables); err != nil {
			t.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		return t, nil
	}
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
		NewTarget:           newTarget,
		NewSizer:            newSizer,
		WholeTable:          func(t *sluice.Table) bool { return whole[t.Name] },
		Start:               start,
		MaxQueueBytes:       o.MaxQueueBytes,
		ShutdownTimeout:     o.ShutdownTimeout,
		Logger:              log,
		IdleWait:            svc.idleWait,
		OnBatch:             svc.onBatch(),
	})
	mode := o.ApplyMode
	if mode == "" {
		mode = "pipelined"
	}
	log.Info("streaming", "stream", o.ID, "source", MaskURL(o.SourceURL), "target", MaskURL(o.TargetURL),
		"tables", len(o.Tables), "from", start.Position.String(), "apply_mode", mode, "batch", ctrl.Size(), "auto_tune", fixed == 0, "controller", o.Controller, "lanes", fmt.Sprintf("%d–%d", max(o.MinLanes, 1), max(o.MaxLanes, 1)))
	if o.OnStart != nil {
		o.OnStart(st)
	}
	svc.started(st)

	reportCtx, stopReport := context.WithCancel(ctx)
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		report(reportCtx, st, store.Dir(), log, o.Progress)
	}()
	runErr := st.Run(ctx)
	svc.stopped()
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

// recordErr notes a startup error in the state file. A stop requested
// while starting (SIGINT/SIGTERM) is not an error: nothing was in flight.
func recordErr(ctx context.Context, store *checkpoint.Store, stream string, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	_ = store.SetError(stream, err.Error())
	return err
}

// resumePoint picks the newer of the state file's checkpoint and the one the
// target keeps inside its own transactions. The target's can be newer (a
// crash between the target commit and the state-file write); the state
// file's can be newer only if the target's table was lost, e.g. a restore.
func resumePoint(ctx context.Context, log *slog.Logger, store *checkpoint.Store, tgt target, id string) (sluice.Checkpoint, error) {
	rec, inFile, err := store.Get(id)
	if err != nil {
		return sluice.Checkpoint{}, err
	}
	onTarget, inTarget, err := tgt.ReadCheckpoint(ctx, id)
	if err != nil {
		return sluice.Checkpoint{}, fmt.Errorf("read stream %s checkpoint from the target: %w", id, err)
	}
	fileCP := rec.Checkpoint()
	switch {
	case inTarget && (!inFile || onTarget.Seq > fileCP.Seq):
		if inFile {
			log.Info("target checkpoint is newer than the state file; resuming from the target's", "stream", id, "target_seq", onTarget.Seq, "file_seq", fileCP.Seq)
		}
		onTarget.Stream = id
		return onTarget, nil
	case inFile && inTarget && onTarget.Seq < fileCP.Seq:
		log.Warn("target checkpoint is older than the state file (was the target restored?); resuming from the state file", "stream", id, "target_seq", onTarget.Seq, "file_seq", fileCP.Seq)
	case inFile && !inTarget:
		log.Warn("target has no checkpoint for this stream; resuming from the state file", "stream", id)
	}
	if inFile {
		fileCP.Stream = id
		return fileCP, nil
	}
	return sluice.Checkpoint{Stream: id}, nil
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
