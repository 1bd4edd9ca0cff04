package main

// The controller section (issue 5's benchmark): PostgreSQL trigger source
// → PostgreSQL target over the WAN proxy at several RTTs, with a
// transaction killer on the target (production's 20 s limit scaled down)
// and a kill budget well inside it. At each RTT it runs pinned batch sizes
// (the static-batch test), the model controller with one lane and with
// adaptive lanes, and the naive AIMD controller, each over the same backlog,
// and reports each one's rate against the best static size that ran without
// a kill. Bar: the model controller ≥ 0.9 × the best static at every RTT,
// with zero kills and no transaction over the kill budget (the section
// fails when a model run has one, and reports the worst of each run).
//
// Every run gets its own source and target database, copied (CREATE
// DATABASE … TEMPLATE) from a source holding the base rows, the capture
// triggers and the whole backlog in its changelog, and a target holding the
// base rows: the backlog is written once, and each run reads it from the
// start with a fresh stream id and state directory.

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/txkiller"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/stream"
)

// ctlConfig is the controller section's part of the command line.
type ctlConfig struct {
	rtts       []time.Duration
	changes    int
	sizes      []int
	killAfter  time.Duration // the target's transaction killer
	killBudget time.Duration // sluice's --kill-budget
	runLimit   time.Duration // a run still going after this is stopped and its partial rate reported
	maxLanes   int
}

// The bar: the model controller's rate over the best static one (issue
// 14's goal; issue 5's was 0.8).
const ctlBar = 0.9

// ctlRun is one controller-section run and its result.
type ctlRun struct {
	rtt        time.Duration
	name       string // "static 5000", "model, 1 lane", …
	static     bool
	pinned     int
	controller string
	minLanes   int
	maxLanes   int

	applied    uint64
	elapsed    time.Duration
	rate       float64
	finalBatch int
	meanBatch  float64
	maxBatch   int
	lanes      int // at the end
	peakLanes  int
	kills      int64  // killed by the target's killer
	seenKills  uint64 // rolled-back batches sluice classified as killed
	retries    uint64
	meanTx     time.Duration
	maxTx      time.Duration
	budget     time.Duration // --kill-budget
	finished   bool
	verified   bool
	note       string
	// trace is the batches seen committing, "size@ms tx time", in order
	// (polled every 5 ms: with lanes, a commit between polls is missed).
	trace []string
}

// okStatic says whether a pinned run can be the baseline: it finished,
// verified, without a kill, and every transaction stayed inside the kill
// budget. The model is held to the budget (its whole point is that no
// transaction gets near the target's killer), so a pinned size that
// overruns it is not a setting the model should match — as `sluice
// diagnose static-batch` reports the largest batch that fits the budget.
func (r ctlRun) okStatic() bool {
	return r.static && r.finished && r.verified && r.kills == 0 && r.maxTx <= r.budget
}

// ctlRTTResult is one RTT's runs.
type ctlRTTResult struct {
	rtt  time.Duration
	runs []ctlRun
}

// benchController runs the section.
func (e *env) benchController(ctx context.Context) ([]ctlRTTResult, error) {
	if err := e.postgres(ctx); err != nil {
		return nil, err
	}
	cc := e.cfg.ctl
	n := cc.changes
	fmt.Fprintf(os.Stderr, "==> controller: %d-change mixed backlog (template databases)\n", n)
	t0 := time.Now()
	srcTmpl, dstTmpl := "ctl_src_tmpl", "ctl_dst_tmpl"
	srcURL, err := pgDatabase(ctx, e.pgSrc, srcTmpl, n)
	if err != nil {
		return nil, err
	}
	dstURL, err := pgDatabase(ctx, e.pgDst, dstTmpl, n)
	if err != nil {
		return nil, err
	}
	// Hint bits and the visibility map set once on the template, not on
	// the first touch inside a timed run.
	if err := execAll(ctx, dstURL, `VACUUM ANALYZE`); err != nil {
		return nil, err
	}
	if err := ctlBacklog(ctx, srcURL, n); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "    backlog ready in %.1f s\n", time.Since(t0).Seconds())

	var out []ctlRTTResult
	seq := 0
	for _, rtt := range cc.rtts {
		res := ctlRTTResult{rtt: rtt}
		var runs []ctlRun
		for _, size := range cc.sizes {
			runs = append(runs, ctlRun{rtt: rtt, name: fmt.Sprintf("static %d", size), static: true, pinned: size, minLanes: 1, maxLanes: 1, budget: cc.killBudget})
		}
		runs = append(runs,
			ctlRun{rtt: rtt, name: "model, 1 lane", controller: "model", minLanes: 1, maxLanes: 1, budget: cc.killBudget},
			ctlRun{rtt: rtt, name: fmt.Sprintf("model, 1–%d lanes", cc.maxLanes), controller: "model", minLanes: 1, maxLanes: cc.maxLanes, budget: cc.killBudget},
			ctlRun{rtt: rtt, name: "aimd, 1 lane", controller: "aimd", minLanes: 1, maxLanes: 1, budget: cc.killBudget},
		)
		for _, r := range runs {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			seq++
			fmt.Fprintf(os.Stderr, "==> controller, %s RTT, %s\n", rttLabel(rtt), r.name)
			got, err := e.ctlRunOnce(ctx, r, seq, srcTmpl, dstTmpl)
			if err != nil {
				return out, fmt.Errorf("%s RTT, %s: %w", rttLabel(rtt), r.name, err)
			}
			fmt.Fprintf(os.Stderr, "    %s changes in %.2f s, %.0f changes/s, final batch %d, mean batch %.0f, lanes %d (peak %d), kills %d, finished %v, verified %v %s\n",
				thousands(float64(got.applied)), got.elapsed.Seconds(), got.rate, got.finalBatch, got.meanBatch, got.lanes, got.peakLanes, got.kills, got.finished, got.verified, got.note)
			if e.cfg.verbose || got.controller != "" {
				fmt.Fprintf(os.Stderr, "    batches (size@tx ms): %s\n", strings.Join(got.trace, " "))
			}
			res.runs = append(res.runs, got)
		}
		out = append(out, res)
	}
	for _, name := range []string{srcTmpl} {
		_ = e.pgSrc.DropDatabase(context.WithoutCancel(ctx), name)
	}
	_ = e.pgDst.DropDatabase(context.WithoutCancel(ctx), dstTmpl)
	return out, nil
}

// ctlBacklog installs capture on the template source and writes the mixed
// workload's n changes.
func ctlBacklog(ctx context.Context, srcURL string, n int) error {
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := pgtrigger.Install(ctx, conn, pgtrigger.DefaultSchema, pgTables); err != nil {
		return fmt.Errorf("install capture: %w", err)
	}
	if err := pgMixed(ctx, conn, n); err != nil {
		return fmt.Errorf("mixed workload: %w", err)
	}
	var logged int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sluice.changelog`).Scan(&logged); err != nil {
		return fmt.Errorf("count changelog: %w", err)
	}
	if logged != n {
		return fmt.Errorf("changelog holds %d changes, want %d", logged, n)
	}
	// Copies are made from the template while nothing is connected to it;
	// vacuum first so each copy starts with fresh statistics.
	_, err = conn.Exec(ctx, `VACUUM ANALYZE`)
	return err
}

// copyDatabase creates name on srv as a copy of tmpl. FILE_COPY
// checkpoints before and after copying the files, so no run pays for
// flushing the previous copy (WAL_LOG would write the whole database
// through the WAL, flushed by a checkpoint during some later run).
func copyDatabase(ctx context.Context, srv dbtest.Server, name, tmpl string) (string, error) {
	conn, err := connect(ctx, srv.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize()+" STRATEGY FILE_COPY"); err != nil {
		return "", fmt.Errorf("copy database %s from %s: %w", name, tmpl, err)
	}
	return srv.URL(name), nil
}

// ctlRunOnce runs sluice over a fresh copy of the backlog until it is all
// applied (or the run limit), with the killer on the target.
func (e *env) ctlRunOnce(ctx context.Context, r ctlRun, seq int, srcTmpl, dstTmpl string) (ctlRun, error) {
	cc := e.cfg.ctl
	n := cc.changes
	name := fmt.Sprintf("ctl_%d", seq)
	srcURL, err := copyDatabase(ctx, e.pgSrc, name, srcTmpl)
	if err != nil {
		return r, err
	}
	defer e.pgSrc.DropDatabase(context.WithoutCancel(ctx), name) //nolint:errcheck // best effort
	dstURL, err := copyDatabase(ctx, e.pgDst, name, dstTmpl)
	if err != nil {
		return r, err
	}
	defer e.pgDst.DropDatabase(context.WithoutCancel(ctx), name) //nolint:errcheck // best effort

	proxy, err := wanproxy.Start(e.pgDst.Addr(), r.rtt/2)
	if err != nil {
		return r, err
	}
	defer proxy.Close()
	targetURL, err := withHost(dstURL, proxy.Addr())
	if err != nil {
		return r, err
	}
	stateDir, err := os.MkdirTemp("", "sluice-bench-ctl-")
	if err != nil {
		return r, fmt.Errorf("state dir: %w", err)
	}
	defer os.RemoveAll(stateDir)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	killer, err := txkiller.StartPostgres(runCtx, dstURL, cc.killAfter, 100*time.Millisecond)
	if err != nil {
		return r, err
	}
	defer killer.Stop()

	runtime.GC()
	var cur atomic.Pointer[stream.Stream]
	started := make(chan time.Time, 1)
	done := make(chan error, 1)
	opts := daemon.StreamOptions{
		ID:         fmt.Sprintf("ctl%d", seq),
		SourceURL:  srcURL,
		TargetURL:  targetURL,
		Tables:     pgTables,
		StateDir:   stateDir,
		ApplyMode:  "pipelined",
		SourceMode: "trigger",
		// The target holds the base rows already (its template), and the
		// backlog is the changelog from its start.
		InitialCopy:     "off",
		Controller:      r.controller,
		MinLanes:        r.minLanes,
		MaxLanes:        r.maxLanes,
		KillBudget:      cc.killBudget,
		PollInterval:    pollInterval,
		ShutdownTimeout: 2 * time.Second,
		Logger:          e.log,
		OnStart: func(s *stream.Stream) {
			cur.Store(s)
			started <- time.Now()
		},
	}
	if r.static {
		opts.NoAutoTune, opts.BatchSize = true, r.pinned
	}
	go func() { done <- daemon.RunStream(runCtx, opts) }()

	var t0 time.Time
	select {
	case t0 = <-started:
	case err := <-done:
		return r, fmt.Errorf("sluice stopped before streaming: %w", err)
	case <-ctx.Done():
		return r, ctx.Err()
	}
	st := cur.Load()
	deadline := t0.Add(cc.runLimit)
	var (
		txSum   time.Duration
		txN     int
		lastSeq uint64
		last    stream.Stats
		runErr  error
		stopped bool
	)
	for {
		s := st.Stats()
		if s.Seq != lastSeq && s.LastTxTime > 0 {
			lastSeq = s.Seq
			txSum += s.LastTxTime
			txN++
			r.maxTx = max(r.maxTx, s.LastTxTime)
			r.maxBatch = max(r.maxBatch, s.LastBatch)
			r.trace = append(r.trace, fmt.Sprintf("%d@%.0f", s.LastBatch, float64(s.LastTxTime)/float64(time.Millisecond)))
		}
		r.peakLanes = max(r.peakLanes, s.Lanes)
		last = s
		if s.Applied >= uint64(n) && s.CaughtUp {
			r.finished = true
			break
		}
		if time.Now().After(deadline) {
			r.note = fmt.Sprintf("stopped at the %v run limit", cc.runLimit)
			break
		}
		select {
		case err := <-done:
			runErr, stopped = err, true
			r.note = fmt.Sprintf("sluice stopped: %v", err)
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if stopped {
			break
		}
	}
	r.applied = last.Applied
	if r.finished {
		r.elapsed = last.LastCommit.Sub(t0)
	} else {
		r.elapsed = time.Since(t0)
	}
	if r.elapsed > 0 {
		r.rate = float64(r.applied) / r.elapsed.Seconds()
	}
	r.finalBatch = last.BatchSize
	if last.Seq > 0 {
		r.meanBatch = float64(last.Applied) / float64(last.Seq)
	}
	r.lanes = last.Lanes
	// The stream's own worst transaction: with lanes, polling misses
	// commits, and a killed transaction never shows as the last one.
	r.maxTx = max(r.maxTx, last.MaxTxTime)
	r.seenKills, r.retries = last.Kills, last.Retries
	if txN > 0 {
		r.meanTx = txSum / time.Duration(txN)
	}
	cancel()
	if !stopped {
		runErr = <-done
		if runErr != nil && r.finished {
			r.note = fmt.Sprintf("sluice stopped with an error: %v", runErr)
		}
	}
	killer.Stop()
	r.kills = killer.Killed()
	if r.finished {
		if r.verified, err = sameTables(ctx, srcURL, dstURL); err != nil {
			return r, err
		}
	}
	return r, nil
}

func rttLabel(d time.Duration) string {
	return fmt.Sprintf("%g ms", float64(d)/float64(time.Millisecond))
}

// bestStatic is the fastest pinned size that finished, verified, with no
// kill.
func (res ctlRTTResult) bestStatic() (ctlRun, bool) {
	var best ctlRun
	ok := false
	for _, r := range res.runs {
		if r.okStatic() && (!ok || r.rate > best.rate) {
			best, ok = r, true
		}
	}
	return best, ok
}

// fastestStatic is the fastest pinned run that finished verified without
// a kill, inside the budget or not.
func (res ctlRTTResult) fastestStatic() (ctlRun, bool) {
	var best ctlRun
	ok := false
	for _, r := range res.runs {
		if r.static && r.finished && r.verified && r.kills == 0 && (!ok || r.rate > best.rate) {
			best, ok = r, true
		}
	}
	return best, ok
}

// renderController is the section's markdown.
func renderController(cc ctlConfig, results []ctlRTTResult, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Controller (issue 5), %s, %d CPUs (section took %s)\n\n", time.Now().Format("2006-01-02 15:04"), runtime.NumCPU(), took.Round(time.Second))
	fmt.Fprintf(&b, "PostgreSQL trigger source → PostgreSQL, pipelined, a %s-change mixed 50/30/20 backlog in the changelog before sluice starts (each run on fresh copies of the source and target databases). Target behind the WAN proxy (half the RTT each way); a transaction killer on the target terminates transactions older than %v (production's 20 s scaled down), swept every 100 ms; `--kill-budget %v`. A run still going after %v is stopped and its rate is the partial one. Kills: transactions the killer terminated (sluice's own count of killed batches in brackets). The best static size is the fastest pinned size that finished with zero kills and every transaction inside the kill budget (the budget the model is held to; what `sluice diagnose static-batch` reports as the largest batch that fits); ratio = rate ÷ that.\n",
		thousands(float64(cc.changes)), cc.killAfter, cc.killBudget, cc.runLimit)
	var summary []string
	for _, res := range results {
		best, okBest := res.bestStatic()
		fmt.Fprintf(&b, "\n### %s RTT\n\n", rttLabel(res.rtt))
		fmt.Fprintln(&b, "| run | batch size (final) | mean / max batch | lanes (final / peak) | kills | retries | changes applied | seconds | changes/s | ratio to best static | mean / max tx time | verified |")
		fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, r := range res.runs {
			ratio := "—"
			if okBest && best.rate > 0 {
				ratio = fmt.Sprintf("%.2f×", r.rate/best.rate)
				if r.static && r.name == best.name {
					ratio += " (best)"
				}
			}
			v := "verified"
			switch {
			case !r.finished:
				v = "partial, not checked"
			case !r.verified:
				v = "**MISMATCH**"
			}
			if r.static && r.maxTx > r.budget {
				v += fmt.Sprintf(" (over the %v budget: not a baseline)", r.budget)
			}
			if r.note != "" {
				v += " (" + r.note + ")"
			}
			fmt.Fprintf(&b, "| %s | %d | %.0f / %d | %d / %d | %d (%d) | %d | %s | %.2f | %s | %s | %s / %s | %s |\n",
				r.name, r.finalBatch, r.meanBatch, r.maxBatch, r.lanes, r.peakLanes, r.kills, r.seenKills, r.retries,
				thousands(float64(r.applied)), r.elapsed.Seconds(), thousands(r.rate), ratio, ms(r.meanTx), ms(r.maxTx), v)
		}
		for _, r := range res.runs {
			if r.controller != "model" {
				continue
			}
			line := fmt.Sprintf("* %s RTT, %s: **%s changes/s", rttLabel(res.rtt), r.name, thousands(r.rate))
			if !okBest {
				line += "** — no static size finished without a kill: no baseline — bar: **missed (no baseline)**"
				summary = append(summary, line)
				continue
			}
			ratio := r.rate / best.rate
			met := ratio >= ctlBar && r.kills == 0 && r.finished && r.verified && r.maxTx <= r.budget
			verdict := "met ✓"
			if !met {
				verdict = "**missed ✗**"
			}
			line += fmt.Sprintf(" = %.2f× best static** (size %d, %s changes/s), final batch %d, lanes %d (peak %d), kills %d, worst transaction %s — bar ≥ %.1f with zero kills and none over the %v budget: %s",
				ratio, best.pinned, thousands(best.rate), r.finalBatch, r.lanes, r.peakLanes, r.kills, ms(r.maxTx), ctlBar, r.budget, verdict)
			if fastest, ok := res.fastestStatic(); ok && fastest.name != best.name {
				line += fmt.Sprintf(" (against the fastest pinned run, %d over the budget at %s changes/s: %.2f×)", fastest.pinned, thousands(fastest.rate), r.rate/fastest.rate)
			}
			summary = append(summary, line)
		}
	}
	fmt.Fprintf(&b, "\n### Controller bar (model ≥ %.1f × best static, zero kills, no transaction over the budget)\n", ctlBar)
	fmt.Fprintln(&b)
	for _, l := range summary {
		fmt.Fprintln(&b, l)
	}
	fmt.Fprintln(&b)
	return b.String()
}

// overBudget is an error naming every model run that had a transaction
// over the kill budget (the bench fails on it: the model's promise is that
// none does), or nil.
func overBudget(results []ctlRTTResult) error {
	var over []string
	for _, res := range results {
		for _, r := range res.runs {
			if r.controller == "model" && r.maxTx > r.budget {
				over = append(over, fmt.Sprintf("%s RTT, %s: %s", rttLabel(res.rtt), r.name, ms(r.maxTx)))
			}
		}
	}
	if len(over) == 0 {
		return nil
	}
	return fmt.Errorf("a model run's transaction took longer than the kill budget: %s", strings.Join(over, "; "))
}
