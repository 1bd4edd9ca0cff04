// Command bench is sluice's throughput report (`make bench`), in process
// through daemon.RunStream, for four sources:
//
//   - pgtrigger: PostgreSQL trigger source → PostgreSQL
//   - pglogical: PostgreSQL logical replication (pgoutput slot) → PostgreSQL
//   - mytrigger: MariaDB trigger source → MariaDB
//   - binlog:    MariaDB binary log → MariaDB
//
// For each workload it builds a backlog on the source before sluice starts
// (in the changelog for trigger sources; in the slot or the binlog, past a
// recorded start position, for log sources), then times sluice applying
// all of it over a 0 ms and a 96 ms proxy (plus, for pgtrigger, a direct
// connection and per-row runs), verifies the target by checksum and prints
// a markdown table. Each reader is also timed alone over a backlog (read and
// decode only, nothing applied, nothing acknowledged): its ceiling. It is a
// report, not a test: it does not fail when the numbers are low.
//
// -sections picks the report's parts: "sources" (the above),
// "controller" (controller.go: pinned batch sizes against the model and
// AIMD controllers under a transaction killer at several RTTs, issue 5)
// and "copy" (copy.go: the initial copy of the built binary against
// pg_dump | psql, pgcopydb and mariadb-dump | mariadb over the 96 ms
// proxy, issue 11; -copy-rows scales it down for a quick run) and
// "native" (native.go: sluice against PostgreSQL's subscriptions and
// MariaDB's replicas catching up one backlog over a 0 ms and a 96 ms
// proxy, issue 14; -native-scale scales it down) and
// "verify" (verify.go: sluice verify against a row-by-row comparison
// through counted 96 ms links, and its accuracy cases, issue 12) and
// "keymoves" (keymoves.go: a backlog with primary-key changes against the
// same without, and with -keymoves-live a live load that moves keys,
// issue 29) and "memory" (memory.go: peak RSS and Go heap streaming three
// large source transactions live at default settings, 96 ms, on both
// engines, issue 34; -memory-rows sets their sizes).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	mysqltarget "github.com/sluice-cdc/sluice/apply/mysql"
	"github.com/sluice-cdc/sluice/apply/postgres"
	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
	"github.com/sluice-cdc/sluice/stream"
)

// The sources -sources selects from, in the default order.
const (
	srcPGTrigger = "pgtrigger"
	srcPGLogical = "pglogical"
	srcMyTrigger = "mytrigger"
	srcBinlog    = "binlog"
)

var allSources = []string{srcPGTrigger, srcPGLogical, srcMyTrigger, srcBinlog}

var sourceTitles = map[string]string{
	srcPGTrigger: "PostgreSQL trigger source → PostgreSQL",
	srcPGLogical: "PostgreSQL logical replication (pgoutput slot) → PostgreSQL",
	srcMyTrigger: "MariaDB trigger source → MariaDB",
	srcBinlog:    "MariaDB binlog → MariaDB",
}

func isLogSource(s string) bool { return s == srcPGLogical || s == srcBinlog }
func isPGSource(s string) bool  { return s == srcPGTrigger || s == srcPGLogical }

// Bars at 96 ms, pipelined (issues 3 and 5), and for the reader ceiling
// over the apply rate at 96 ms (issue 4).
var rateBars = map[string]float64{"insert-only": 40000, "mixed 50/30/20": 20000}

const (
	barRTT        = 96 * time.Millisecond
	ceilingFactor = 5
)

// config is the command line.
type config struct {
	rtts          []time.Duration
	myRTTs        []time.Duration
	changes       int
	perRowChanges int
	sources       []string
	direct        bool
	perRow        bool
	out           string
	verbose       bool
	// sections are the report's parts, in order: "sources" (the
	// throughput runs per source above), "controller" (controller.go)
	// and "copy" (copy.go).
	sections []string
	ctl      ctlConfig
	copy     copyConfig
	verify   verifyConfig
	native   nativeConfig
	keymoves keyMovesConfig
	memory   memoryConfig
}

const (
	secSources    = "sources"
	secController = "controller"
)

var allSections = []string{secSources, secController, secCopy, secNative, secVerify, secKeyMoves, secMemory}

func main() {
	var cfg config
	var rtts, myRTTs, sources string
	flag.StringVar(&rtts, "rtt", "0,96ms", "comma-separated round-trip times to put between sluice and the target (the proxy delays half each way)")
	flag.StringVar(&myRTTs, "mytrigger-rtt", "0,96ms", "round-trip times for the MariaDB trigger source")
	flag.StringVar(&sources, "sources", strings.Join(allSources, ","), "comma-separated sources to bench, in order: "+strings.Join(allSources, ", "))
	flag.IntVar(&cfg.changes, "changes", 100000, "backlog size for the pipelined runs and reader ceilings")
	flag.IntVar(&cfg.perRowChanges, "per-row-changes", 300, "pgtrigger: backlog size for the per-row runs (per row at 96 ms runs ~10 changes/s)")
	flag.BoolVar(&cfg.direct, "direct", true, "pgtrigger: also run pipelined over a direct connection (no proxy)")
	flag.BoolVar(&cfg.perRow, "per-row", true, "pgtrigger: also run per-row")
	flag.StringVar(&cfg.out, "out", "", "also write the markdown report to this file")
	flag.BoolVar(&cfg.verbose, "v", false, "show sluice's own log")
	var sections, ctlRTTs, ctlSizes string
	flag.StringVar(&sections, "sections", strings.Join(allSections, ","), "comma-separated report sections to run: "+strings.Join(allSections, ", ")+" (e.g. -sections controller)")
	flag.StringVar(&ctlRTTs, "controller-rtt", "20ms,96ms,300ms", "controller section: round-trip times")
	flag.StringVar(&ctlSizes, "controller-sizes", "1000,5000,20000,50000,100000", "controller section: pinned batch sizes for the static runs")
	flag.IntVar(&cfg.ctl.changes, "controller-changes", 300000, "controller section: backlog size (mixed 50/30/20); large enough that the steady state, not the first batches, sets the rate at 300 ms")
	flag.DurationVar(&cfg.ctl.killAfter, "controller-kill-after", 4*time.Second, "controller section: the target's transaction killer terminates transactions older than this (production's 20 s, scaled)")
	flag.DurationVar(&cfg.ctl.killBudget, "controller-kill-budget", time.Second, "controller section: sluice's --kill-budget")
	flag.DurationVar(&cfg.ctl.runLimit, "controller-run-limit", 20*time.Second, "controller section: stop a run after this and report its partial rate")
	flag.IntVar(&cfg.ctl.maxLanes, "controller-max-lanes", 8, "controller section: --max-lanes of the model run with lanes")
	copyDone := copyFlags(&cfg.copy)
	verifyDone := verifyFlags(&cfg.verify)
	nativeDone := nativeFlags(&cfg.native)
	keyMovesDone := keyMovesFlags(&cfg.keymoves)
	memoryDone := memoryFlags(&cfg.memory)
	cpuProfile := flag.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	flag.Parse()
	var err error
	if cfg.rtts, err = parseRTTs("-rtt", rtts); err == nil {
		cfg.myRTTs, err = parseRTTs("-mytrigger-rtt", myRTTs)
	}
	if err == nil {
		cfg.sources, err = parseSources(sources)
	}
	if err == nil {
		cfg.sections, err = parseSections(sections)
	}
	if err == nil {
		cfg.ctl.rtts, err = parseRTTs("-controller-rtt", ctlRTTs)
	}
	if err == nil {
		cfg.ctl.sizes, err = parseSizes(ctlSizes)
	}
	if err == nil {
		err = copyDone()
	}
	if err == nil {
		err = nativeDone()
	}
	if err == nil {
		err = verifyDone()
	}
	if err == nil {
		err = keyMovesDone()
	}
	if err == nil {
		err = memoryDone()
	}
	if err == nil && (cfg.ctl.changes < 1 || cfg.ctl.maxLanes < 1 || cfg.ctl.killAfter <= 0 || cfg.ctl.killBudget <= 0 || cfg.ctl.runLimit <= 0) {
		err = errors.New("controller section: -controller-changes, -controller-max-lanes, -controller-kill-after, -controller-kill-budget and -controller-run-limit must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func parseRTTs(name, s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", name, f, err)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no round-trip time given", name)
	}
	return out, nil
}

func parseSources(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if !slices.Contains(allSources, f) {
			return nil, fmt.Errorf("-sources: unknown source %q (want %s)", f, strings.Join(allSources, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-sources: no source given")
	}
	return out, nil
}

func parseSections(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if !slices.Contains(allSections, f) {
			return nil, fmt.Errorf("-sections: unknown section %q (want %s)", f, strings.Join(allSections, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-sections: no section given")
	}
	return out, nil
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-controller-sizes: %q is not a batch size", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("-controller-sizes: no size given")
	}
	return out, nil
}

// workload builds a backlog of n changes on the source; base is how many
// identical rows both sides get first.
type workload struct {
	name string
	base func(n int) int
	pg   pgWorkload
	my   myWorkload
}

var workloads = []workload{
	{name: "insert-only", base: func(int) int { return 0 }, pg: pgInsertOnly, my: myInsertOnly},
	{name: "mixed 50/30/20", base: func(n int) int { return n }, pg: pgMixed, my: myMixed},
}

// scenario is one measured run.
type scenario struct {
	mode    string // pipelined or per-row
	rtt     time.Duration
	direct  bool
	changes int
}

func (s scenario) link() string {
	if s.direct {
		return "direct"
	}
	return fmt.Sprintf("%g ms proxy", float64(s.rtt)/float64(time.Millisecond))
}

// result is one row of the report.
type result struct {
	source    string
	workload  string
	sc        scenario
	elapsed   time.Duration
	rate      float64
	batch     int
	batches   uint64
	fixed     time.Duration
	perChange time.Duration
	meanTx    time.Duration
	cpu       cpuUse
	heapPeak  uint64
	rssPeak   uint64
	verified  bool
	note      string
}

// readerResult is a read-only pass of a source reader over a backlog.
type readerResult struct {
	source   string
	workload string
	page     int
	changes  int
	elapsed  time.Duration
	cpu      cpuUse
}

func (r readerResult) rate() float64 { return float64(r.changes) / r.elapsed.Seconds() }

// env holds the servers, started when a source first needs them.
type env struct {
	cfg          config
	pgSrc, pgDst dbtest.Server
	mySrc, myDst dbtest.Server
	dbs          int
	log          *slog.Logger
}

// startPair starts a throwaway source and target server of engine into
// *src and *dst unless they are running; label names the engine in
// messages.
func startPair(ctx context.Context, engine dbtest.Engine, label string, src, dst *dbtest.Server) error {
	if *src != nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "==> starting throwaway %s source and target\n", label)
	s, err := engine.Start(ctx)
	if err != nil {
		return fmt.Errorf("start %s source: %w", label, err)
	}
	d, err := engine.Start(ctx)
	if err != nil {
		s.Stop()
		return fmt.Errorf("start %s target: %w", label, err)
	}
	*src, *dst = s, d
	return nil
}

// stopPair stops the servers startPair started, if any.
func stopPair(src, dst *dbtest.Server) {
	if *src != nil {
		(*src).Stop()
		(*dst).Stop()
		*src, *dst = nil, nil
	}
}

func run(ctx context.Context, cfg config) error {
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelInfo
	}
	e := &env{cfg: cfg, log: slog.New(quietHandler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})})}
	defer e.stopPostgres()
	defer e.stopMariaDB()

	began := time.Now()
	var results []result
	var readers []readerResult
	var sources []string
	if slices.Contains(cfg.sections, secSources) {
		sources = cfg.sources
	}
	runCtl := slices.Contains(cfg.sections, secController)
	for i, src := range sources {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var (
			rs  []result
			rr  []readerResult
			err error
		)
		switch src {
		case srcPGTrigger:
			rs, rr, err = e.benchPGTrigger(ctx)
		case srcPGLogical:
			rs, rr, err = e.benchPGLogical(ctx)
		case srcMyTrigger:
			rs, rr, err = e.benchMyTrigger(ctx)
		case srcBinlog:
			rs, rr, err = e.benchBinlog(ctx)
		}
		results = append(results, rs...)
		readers = append(readers, rr...)
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		// Servers no later source needs stop now, so they do not take CPU
		// from the next runs.
		rest := sources[i+1:]
		if !runCtl && !slices.ContainsFunc(rest, isPGSource) {
			e.stopPostgres()
		}
	}
	var report string
	var ctlErr error
	if len(sources) > 0 {
		report = render(cfg, results, readers, time.Since(began))
	}
	if runCtl {
		e.stopMariaDB()
		ctlBegan := time.Now()
		ctl, err := e.benchController(ctx)
		if len(ctl) > 0 || err == nil {
			report += renderController(cfg.ctl, ctl, time.Since(ctlBegan))
		}
		if err == nil {
			// The rest of the sections still run; the bench fails at the end.
			ctlErr = overBudget(ctl)
		}
		if err != nil {
			fmt.Print(report)
			return fmt.Errorf("controller: %w", err)
		}
	}
	if slices.Contains(cfg.sections, secCopy) {
		copyBegan := time.Now()
		cp, err := e.benchCopy(ctx)
		if len(cp) > 0 {
			report += renderCopy(cfg.copy, cp, time.Since(copyBegan))
		}
		if err != nil {
			fmt.Print(report)
			return fmt.Errorf("copy: %w", err)
		}
	}
	if slices.Contains(cfg.sections, secVerify) {
		verifyBegan := time.Now()
		vr, err := e.benchVerify(ctx)
		if len(vr) > 0 {
			report += renderVerify(cfg.verify, vr, time.Since(verifyBegan))
		}
		if err != nil {
			fmt.Print(report)
			return fmt.Errorf("verify: %w", err)
		}
	}
	if slices.Contains(cfg.sections, secNative) {
		nativeBegan := time.Now()
		nr, err := e.benchNative(ctx)
		if len(nr) > 0 {
			report += renderNative(cfg.native, nr, time.Since(nativeBegan))
		}
		if err != nil {
			fmt.Print(report)
			return fmt.Errorf("native: %w", err)
		}
	}
	if slices.Contains(cfg.sections, secKeyMoves) {
		kmBegan := time.Now()
		kr, live, err := e.benchKeyMoves(ctx)
		if len(kr) > 0 || len(live) > 0 {
			report += renderKeyMoves(cfg.keymoves, kr, live, time.Since(kmBegan))
		}
		if err != nil {
			fmt.Print(report)
			return fmt.Errorf("keymoves: %w", err)
		}
	}
	if slices.Contains(cfg.sections, secMemory) {
		memBegan := time.Now()
		mr, err := e.benchMemory(ctx)
		if len(mr) > 0 {
			report += renderMemory(cfg.memory, mr, time.Since(memBegan))
		}
		if err != nil {
			fmt.Print(report)
			return fmt.Errorf("memory: %w", err)
		}
	}
	fmt.Print(report)
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return fmt.Errorf("write -out %s: %w", cfg.out, err)
		}
	}
	if ctlErr != nil {
		return fmt.Errorf("controller: %w", ctlErr)
	}
	return nil
}

// seedTarget writes cp as the stream's checkpoint on the target, in a
// transaction of no changes.
func seedTarget(ctx context.Context, targetURL string, cp sluice.Checkpoint) error {
	var t interface {
		Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error
		Close(ctx context.Context) error
	}
	var err error
	if strings.HasPrefix(targetURL, "mysql://") {
		t, err = mysqltarget.Open(ctx, targetURL, mysqltarget.Config{Mode: apply.Pipelined})
	} else {
		t, err = postgres.Open(ctx, targetURL, postgres.Config{Mode: apply.Pipelined})
	}
	if err != nil {
		return err
	}
	defer t.Close(ctx)
	return t.Apply(ctx, &apply.Batch{Last: cp.Position}, cp)
}

// quietHandler drops the warning a seeded stream start always logs: the
// bench writes the start position into the state file (a log-read stream
// with no checkpoint refuses to start without --from-now), so the fresh
// target has none.
type quietHandler struct{ slog.Handler }

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "target has no checkpoint for this stream") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(a)}
}

func (h quietHandler) WithGroup(n string) slog.Handler { return quietHandler{h.Handler.WithGroup(n)} }

func (e *env) nextName() string {
	e.dbs++
	return fmt.Sprintf("bench_%d", e.dbs)
}

// streamRun is one timed sluice run over a backlog already on the source.
type streamRun struct {
	source   string
	workload string
	sc       scenario
	id       string // stream id (for pglogical also the slot's name)
	srcURL   string
	dstURL   string // direct
	dstAddr  string // the target server, behind the proxy
	mode     string // daemon source mode
	tables   []sluice.TableName
	// seed, when set, is written to the state file as the stream's
	// checkpoint before sluice starts: a log-based reader then reads the
	// backlog from there.
	seed sluice.Position
}

// stream runs sluice until the whole backlog is applied and returns the
// timing; the caller verifies the target.
func (e *env) stream(ctx context.Context, r streamRun) (result, error) {
	sc := r.sc
	res := result{source: r.source, workload: r.workload, sc: sc}
	targetURL := r.dstURL
	if !sc.direct {
		proxy, err := wanproxy.Start(r.dstAddr, sc.rtt/2)
		if err != nil {
			return res, err
		}
		defer proxy.Close()
		if targetURL, err = withHost(r.dstURL, proxy.Addr()); err != nil {
			return res, err
		}
	}
	stateDir, err := os.MkdirTemp("", "sluice-bench-state-")
	if err != nil {
		return res, fmt.Errorf("state dir: %w", err)
	}
	defer os.RemoveAll(stateDir)
	if !r.seed.IsZero() {
		store, err := checkpoint.Open(stateDir)
		if err != nil {
			return res, err
		}
		cp := sluice.Checkpoint{Stream: r.id, Position: r.seed, Time: time.Now().UTC(), Lanes: 1, Last: r.seed}
		err = store.Commit(cp)
		store.Close()
		if err == nil {
			// The target's checkpoint is what a stream resumes from (one in
			// the state file alone reads as a target restored from a
			// backup, and is refused).
			err = seedTarget(ctx, r.dstURL, cp)
		}
		if err != nil {
			return res, fmt.Errorf("seed start position: %w", err)
		}
	}

	runtime.GC()
	var cur atomic.Pointer[stream.Stream]
	started := make(chan time.Time, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	sampler := startSampler(runCtx)
	go func() {
		done <- daemon.RunStream(runCtx, daemon.StreamOptions{
			ID:           r.id,
			SourceURL:    r.srcURL,
			TargetURL:    targetURL,
			Tables:       r.tables,
			StateDir:     stateDir,
			ApplyMode:    sc.mode,
			SourceMode:   r.mode,
			PollInterval: pollInterval,
			Logger:       e.log,
			OnStart: func(s *stream.Stream) {
				cur.Store(s)
				started <- time.Now()
			},
		})
	}()

	var t0 time.Time
	var c0 cpuMark
	select {
	case t0 = <-started:
		c0 = markCPU()
	case err := <-done:
		return res, fmt.Errorf("sluice stopped before streaming: %w", err)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	st := cur.Load()
	limit := 10 * time.Minute
	deadline := time.Now().Add(limit)
	var (
		txSum   time.Duration
		txN     int
		lastSeq uint64
		last    stream.Stats
	)
	for {
		s := st.Stats()
		if s.Seq != lastSeq && s.LastTxTime > 0 {
			lastSeq = s.Seq
			txSum += s.LastTxTime
			txN++
		}
		last = s
		if s.Applied >= uint64(sc.changes) && s.CaughtUp {
			break
		}
		select {
		case err := <-done:
			return res, fmt.Errorf("sluice stopped after %d of %d changes: %v", s.Applied, sc.changes, err)
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("only %d of %d changes applied within %v", s.Applied, sc.changes, limit)
		}
	}
	// The backlog is applied when its last batch committed; the caught-up
	// flag only comes one idle poll later.
	res.cpu = c0.since()
	res.elapsed = last.LastCommit.Sub(t0)
	res.rate = float64(last.Applied) / res.elapsed.Seconds()
	res.batch = last.BatchSize
	res.batches = last.Seq
	res.fixed, res.perChange = last.FixedCost, last.PerChange
	if txN > 0 {
		res.meanTx = txSum / time.Duration(txN)
	}
	cancel()
	if err := <-done; err != nil {
		return res, fmt.Errorf("sluice stopped with an error: %w", err)
	}
	res.heapPeak, res.rssPeak = sampler.wait()
	if last.Applied != uint64(sc.changes) {
		res.note = fmt.Sprintf("applied %d", last.Applied)
	}
	return res, nil
}

func logRun(r result) {
	fmt.Fprintf(os.Stderr, "    %.2f s, %.0f changes/s, batch %d, CPU cores sluice/box %s, verified %v\n", r.elapsed.Seconds(), r.rate, r.batch, r.cpu, r.verified)
}

// reader is what a ceiling pass needs of a source reader.
type reader interface {
	Read(ctx context.Context, max int) ([]sluice.Change, error)
	Close() error
}

// pollInterval is how long a reader's Read waits for changes.
const pollInterval = 50 * time.Millisecond

// ceilingPages are the Read sizes a ceiling pass uses: the stream's
// smallest page (1000) and a larger one.
var ceilingPages = []int{1000, 10000}

// readPasses times a reader alone over a backlog of n changes, once per
// page size, each with a freshly opened reader: Read until n changes came,
// acknowledge nothing. An empty Read (the reader waited a poll interval)
// does not end the pass: a log reader may still be connecting; the pass
// fails if nothing comes for 30 s.
func readPasses(ctx context.Context, source, wl string, n int, open func() (reader, error)) ([]readerResult, error) {
	var out []readerResult
	for _, page := range ceilingPages {
		rd, err := open()
		if err != nil {
			return nil, fmt.Errorf("open reader: %w", err)
		}
		c0 := markCPU()
		start := c0.wall
		lastData := start
		got := 0
		for got < n {
			cs, err := rd.Read(ctx, page)
			if err != nil {
				rd.Close()
				return nil, fmt.Errorf("read: %w", err)
			}
			if len(cs) == 0 {
				if time.Since(lastData) > 30*time.Second {
					break
				}
				continue
			}
			lastData = time.Now()
			got += len(cs)
		}
		el := time.Since(start)
		cpu := c0.since()
		rd.Close()
		if got != n {
			return nil, fmt.Errorf("reader returned %d of %d changes", got, n)
		}
		fmt.Fprintf(os.Stderr, "    reader alone, page %d: %.2f s, %.0f changes/s, CPU cores bench/box %s\n", page, el.Seconds(), float64(n)/el.Seconds(), cpu)
		out = append(out, readerResult{source: source, workload: wl, page: page, changes: n, elapsed: el, cpu: cpu})
	}
	return out, nil
}

func withHost(raw, host string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse target URL: %w", err)
	}
	u.Host = host
	return u.String(), nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// sampler records the Go heap and the process RSS peaks while a run lasts.
type sampler struct {
	heap, rss uint64
	done      chan struct{}
}

func startSampler(ctx context.Context) *sampler {
	s := &sampler{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			s.heap = max(s.heap, ms.HeapAlloc)
			s.rss = max(s.rss, vmRSS())
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// wait returns the peaks once the sampler's context has ended.
func (s *sampler) wait() (heap, rss uint64) {
	<-s.done
	return s.heap, s.rss
}

// vmRSS is the process's resident set size in bytes, 0 if unknown.
func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuMark is the process's and the whole box's CPU time at one instant.
type cpuMark struct {
	wall      time.Time
	self, box time.Duration
}

func markCPU() cpuMark {
	m := cpuMark{wall: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		m.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// The whole box's, stolen time included: what the box's processes
	// wanted to run.
	if busy, steal, err := machineCPU(); err == nil {
		m.box = busy + steal
	}
	return m
}

// cpuUse is the CPU used since m, in cores: by this process (sluice and
// the bench driver) and by the whole box (the databases too).
type cpuUse struct{ self, box float64 }

func (m cpuMark) since() cpuUse {
	n := markCPU()
	w := n.wall.Sub(m.wall).Seconds()
	if w <= 0 {
		return cpuUse{}
	}
	return cpuUse{self: (n.self - m.self).Seconds() / w, box: (n.box - m.box).Seconds() / w}
}

func (c cpuUse) String() string { return fmt.Sprintf("%.2f / %.2f", c.self, c.box) }

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

func us(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 1, 64) + " µs"
}

// thousands formats a rate with thousands separators.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// render is the markdown report.
func render(cfg config, results []result, readers []readerResult, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## sluice bench, %s, %d CPUs (run took %s)\n\n", time.Now().Format("2006-01-02 15:04"), runtime.NumCPU(), took.Round(time.Second))
	fmt.Fprintf(&b, "Backlog built on the source before sluice starts (trigger sources: in the changelog; log sources: in the slot / binlog past a recorded start position); time from stream start to the commit of the last change. RTT is the WAN proxy's (half each way); \"direct\" bypasses the proxy. CPU cores: CPU time over wall time while the run or pass lasted, of this process (sluice in process, plus the bench's own polling) and of the whole %d-core box (the databases included); a box figure near %d means the box, not the link, is the limit.\n", runtime.NumCPU(), runtime.NumCPU())
	for _, src := range cfg.sources {
		var rs []result
		for _, r := range results {
			if r.source == src {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s (`%s`)\n\n", sourceTitles[src], src)
		fmt.Fprintln(&b, "| workload | mode | link | changes | seconds | changes/s | final batch | batches | fitted fixed cost | fitted per change | mean tx time | CPU cores sluice / box | peak Go heap | peak RSS | verified |")
		fmt.Fprintln(&b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, r := range rs {
			v := "verified"
			if !r.verified {
				v = "**MISMATCH**"
			}
			if r.note != "" {
				v += " (" + r.note + ")"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %.2f | %.0f | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n",
				r.workload, r.sc.mode, r.sc.link(), r.sc.changes, r.elapsed.Seconds(), r.rate, r.batch, r.batches,
				ms(r.fixed), us(r.perChange), ms(r.meanTx), r.cpu, mib(r.heapPeak), mib(r.rssPeak), v)
		}
	}
	if len(readers) > 0 {
		fmt.Fprintln(&b, "\n### Reader ceilings (each reader alone over a backlog: read and decode, nothing applied, nothing acknowledged)")
		fmt.Fprintln(&b, "\n| source | workload | page size | changes | seconds | changes/s | CPU cores bench / box |")
		fmt.Fprintln(&b, "|---|---|---:|---:|---:|---:|---:|")
		for _, r := range readers {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %.2f | %.0f | %s |\n", r.source, r.workload, r.page, r.changes, r.elapsed.Seconds(), r.rate(), r.cpu)
		}
	}

	find := func(src, w, mode string, rtt time.Duration, direct bool) (result, bool) {
		for _, r := range results {
			if r.source == src && r.workload == w && r.sc.mode == mode && r.sc.rtt == rtt && r.sc.direct == direct {
				return r, true
			}
		}
		return result{}, false
	}
	ceiling := func(src, w string) (lo, hi float64, ok bool) {
		for _, r := range readers {
			if r.source == src && r.workload == w {
				if !ok || r.rate() < lo {
					lo = r.rate()
				}
				hi = max(hi, r.rate())
				ok = true
			}
		}
		return lo, hi, ok
	}
	mark := func(ok bool) string {
		if ok {
			return "✓"
		}
		return "**✗ under the bar**"
	}

	fmt.Fprintln(&b, "\n### Bars and ratios")
	fmt.Fprintln(&b)
	for _, src := range cfg.sources {
		for _, w := range workloads {
			p96, ok96 := find(src, w.name, "pipelined", barRTT, false)
			if ok96 && p96.verified {
				bar := rateBars[w.name]
				fmt.Fprintf(&b, "* %s, %s: pipelined at 96 ms **%s changes/s** (bar ≥ %s) %s\n", src, w.name, thousands(p96.rate), thousands(bar), mark(p96.rate >= bar))
			}
			if isLogSource(src) {
				lo, hi, okc := ceiling(src, w.name)
				if okc && ok96 && p96.rate > 0 {
					fmt.Fprintf(&b, "* %s, %s: reader ceiling ÷ apply rate at 96 ms: **%.1f×** (ceiling %s–%s changes/s by page size, taking the lower; apply %s/s; bar ≥ %d×) %s\n",
						src, w.name, lo/p96.rate, thousands(lo), thousands(hi), thousands(p96.rate), ceilingFactor, mark(lo/p96.rate >= ceilingFactor))
				}
			}
			z, ok0 := find(src, w.name, "pipelined", 0, false)
			if ok96 && ok0 && z.rate > 0 {
				fmt.Fprintf(&b, "* %s, %s: pipelined 96 ms / 0 ms proxy: **%.2f** (%s vs %s changes/s)\n", src, w.name, p96.rate/z.rate, thousands(p96.rate), thousands(z.rate))
			}
			pr, okpr := find(src, w.name, "per-row", barRTT, false)
			if ok96 && okpr && pr.rate > 0 {
				fmt.Fprintf(&b, "* %s, %s: pipelined / per-row at 96 ms: **%.0f×** (%s vs %.1f changes/s; bar ≥ 100×)\n", src, w.name, p96.rate/pr.rate, thousands(p96.rate), pr.rate)
			}
			d, okd := find(src, w.name, "pipelined", 0, true)
			if ok0 && okd && d.rate > 0 {
				fmt.Fprintf(&b, "* %s, %s: pipelined 0 ms proxy / direct: **%.2f** (%s vs %s changes/s)\n", src, w.name, z.rate/d.rate, thousands(z.rate), thousands(d.rate))
			}
		}
	}
	fmt.Fprintln(&b)
	return b.String()
}
