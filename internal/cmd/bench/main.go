// Command bench is sluice's throughput report (`make bench`): PostgreSQL to
// PostgreSQL with the trigger source, in process through daemon.RunStream.
// For each workload it builds a backlog in the source changelog before
// sluice starts, then times sluice applying all of it over a 0 ms proxy, a
// 96 ms proxy and a direct connection, pipelined and per row, verifies the
// target by checksum and prints a markdown table. It is a report, not a
// test: it does not fail when the numbers are low.
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
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/stream"
)

const table = "public.items"

const tableDDL = `CREATE TABLE items (
	id bigint PRIMARY KEY,
	qty integer NOT NULL,
	label text NOT NULL,
	price numeric(12,2),
	at timestamptz NOT NULL)`

// config is the command line.
type config struct {
	rtts          []time.Duration
	changes       int
	perRowChanges int
	out           string
	verbose       bool
}

func main() {
	var cfg config
	var rtts string
	flag.StringVar(&rtts, "rtt", "0,96ms", "comma-separated round-trip times to put between sluice and the target (the proxy delays half each way)")
	flag.IntVar(&cfg.changes, "changes", 100000, "backlog size for the pipelined runs")
	flag.IntVar(&cfg.perRowChanges, "per-row-changes", 300, "backlog size for the per-row runs (per row at 96 ms runs ~10 changes/s)")
	flag.StringVar(&cfg.out, "out", "", "also write the markdown report to this file")
	flag.BoolVar(&cfg.verbose, "v", false, "show sluice's own log")
	flag.Parse()
	var err error
	if cfg.rtts, err = parseRTTs(rtts); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

func parseRTTs(s string) ([]time.Duration, error) {
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
			return nil, fmt.Errorf("-rtt %q: %w", f, err)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("-rtt: no round-trip time given")
	}
	return out, nil
}

// workload builds a backlog of n changes on the source after capture is
// installed; base is how many identical rows both sides get first.
type workload struct {
	name string
	base func(n int) int
	run  func(ctx context.Context, conn *pgx.Conn, n int) error
}

var workloads = []workload{
	{name: "insert-only", base: func(int) int { return 0 }, run: insertOnly},
	{name: "mixed 50/30/20", base: func(n int) int { return n }, run: mixed},
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
	workload  string
	sc        scenario
	elapsed   time.Duration
	rate      float64
	batch     int
	batches   uint64
	fixed     time.Duration
	perChange time.Duration
	meanTx    time.Duration
	heapPeak  uint64
	rssPeak   uint64
	verified  bool
	note      string
}

// env holds the two servers.
type env struct {
	src, dst *dbtest.Postgres
	dbs      int
	log      *slog.Logger
}

func run(ctx context.Context, cfg config) error {
	fmt.Fprintln(os.Stderr, "==> starting throwaway PostgreSQL source and target")
	src, err := dbtest.StartPostgres(ctx)
	if err != nil {
		return fmt.Errorf("start source: %w", err)
	}
	defer src.Stop()
	dst, err := dbtest.StartPostgres(ctx)
	if err != nil {
		return fmt.Errorf("start target: %w", err)
	}
	defer dst.Stop()
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelInfo
	}
	e := &env{src: src, dst: dst, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))}

	var scenarios []scenario
	for _, rtt := range cfg.rtts {
		scenarios = append(scenarios, scenario{mode: "pipelined", rtt: rtt, changes: cfg.changes})
	}
	scenarios = append(scenarios, scenario{mode: "pipelined", direct: true, changes: cfg.changes})
	for _, rtt := range cfg.rtts {
		scenarios = append(scenarios, scenario{mode: "per-row", rtt: rtt, changes: cfg.perRowChanges})
	}

	var results []result
	var readers []readerResult
	for _, w := range workloads {
		rr, err := e.readerCeiling(ctx, w, cfg.changes)
		if err != nil {
			return err
		}
		readers = append(readers, rr...)
		for _, sc := range scenarios {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(os.Stderr, "==> %s, %s, %s, %d changes\n", w.name, sc.mode, sc.link(), sc.changes)
			r, err := e.measure(ctx, w, sc)
			if err != nil {
				return fmt.Errorf("%s %s %s: %w", w.name, sc.mode, sc.link(), err)
			}
			fmt.Fprintf(os.Stderr, "    %.1f s, %.0f changes/s, batch %d, verified %v\n", r.elapsed.Seconds(), r.rate, r.batch, r.verified)
			results = append(results, r)
		}
	}
	report := render(cfg, results, readers)
	fmt.Print(report)
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return fmt.Errorf("write -out %s: %w", cfg.out, err)
		}
	}
	return nil
}

// freshPair creates a new database with the bench table on each server.
func (e *env) freshPair(ctx context.Context) (srcURL, dstURL string, err error) {
	e.dbs++
	name := fmt.Sprintf("bench_%d", e.dbs)
	if err := e.src.CreateDatabase(ctx, name); err != nil {
		return "", "", err
	}
	if err := e.dst.CreateDatabase(ctx, name); err != nil {
		return "", "", err
	}
	srcURL, dstURL = e.src.URL(name), e.dst.URL(name)
	for _, u := range []string{srcURL, dstURL} {
		if err := execAll(ctx, u, tableDDL); err != nil {
			return "", "", err
		}
	}
	return srcURL, dstURL, nil
}

// prepare makes a fresh source/target pair holding the workload's base rows
// and a backlog of n captured changes on the source.
func (e *env) prepare(ctx context.Context, w workload, n int) (srcURL, dstURL string, err error) {
	srcURL, dstURL, err = e.freshPair(ctx)
	if err != nil {
		return "", "", err
	}
	if b := w.base(n); b > 0 {
		for _, u := range []string{srcURL, dstURL} {
			if err := execAll(ctx, u, insertRange(1, b, 0)); err != nil {
				return "", "", fmt.Errorf("seed base rows: %w", err)
			}
		}
	}
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return "", "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	names := []sluice.TableName{{Schema: "public", Name: "items"}}
	if err := pgtrigger.Install(ctx, conn, pgtrigger.DefaultSchema, names); err != nil {
		return "", "", fmt.Errorf("install capture: %w", err)
	}
	if err := w.run(ctx, conn, n); err != nil {
		return "", "", fmt.Errorf("workload %s: %w", w.name, err)
	}
	var logged int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sluice.changelog`).Scan(&logged); err != nil {
		return "", "", fmt.Errorf("count changelog: %w", err)
	}
	if logged != n {
		return "", "", fmt.Errorf("changelog holds %d changes, want %d", logged, n)
	}
	return srcURL, dstURL, nil
}

// measure runs one scenario: backlog first, then sluice until all of it is
// applied, then checksums.
func (e *env) measure(ctx context.Context, w workload, sc scenario) (result, error) {
	res := result{workload: w.name, sc: sc}
	srcURL, dstURL, err := e.prepare(ctx, w, sc.changes)
	if err != nil {
		return res, err
	}
	targetURL := dstURL
	if !sc.direct {
		proxy, err := wanproxy.Start(e.dst.Addr(), sc.rtt/2)
		if err != nil {
			return res, err
		}
		defer proxy.Close()
		if targetURL, err = withHost(dstURL, proxy.Addr()); err != nil {
			return res, err
		}
	}
	stateDir, err := os.MkdirTemp("", "sluice-bench-state-")
	if err != nil {
		return res, fmt.Errorf("state dir: %w", err)
	}
	defer os.RemoveAll(stateDir)
	tables, err := daemon.ParseTables([]string{table})
	if err != nil {
		return res, err
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
			ID:           "bench",
			SourceURL:    srcURL,
			TargetURL:    targetURL,
			Tables:       tables,
			StateDir:     stateDir,
			ApplyMode:    sc.mode,
			SourceMode:   "trigger",
			PollInterval: 50 * time.Millisecond,
			Logger:       e.log,
			OnStart: func(s *stream.Stream) {
				cur.Store(s)
				started <- time.Now()
			},
		})
	}()

	var t0 time.Time
	select {
	case t0 = <-started:
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
	ok, err := sameTables(ctx, srcURL, dstURL)
	if err != nil {
		return res, err
	}
	res.verified = ok
	return res, nil
}

// readerResult is a read-only pass of the source reader over a backlog.
type readerResult struct {
	workload string
	page     int
	changes  int
	elapsed  time.Duration
}

// readerCeiling times the trigger reader alone over a backlog of n changes,
// with the page size the stream uses at its smallest (1000) and a larger
// one: the fastest sluice could apply if the target were free.
func (e *env) readerCeiling(ctx context.Context, w workload, n int) ([]readerResult, error) {
	fmt.Fprintf(os.Stderr, "==> %s: reader ceiling over %d changes\n", w.name, n)
	srcURL, _, err := e.prepare(ctx, w, n)
	if err != nil {
		return nil, err
	}
	tables, err := daemon.ParseTables([]string{table})
	if err != nil {
		return nil, err
	}
	var out []readerResult
	for _, page := range []int{1000, 10000} {
		rd, err := pgtrigger.Open(ctx, srcURL, pgtrigger.Config{Tables: tables, PollInterval: 50 * time.Millisecond, Logger: e.log}, sluice.Position{})
		if err != nil {
			return nil, fmt.Errorf("open reader: %w", err)
		}
		start := time.Now()
		got := 0
		for got < n {
			cs, err := rd.Read(ctx, page)
			if err != nil {
				rd.Close()
				return nil, fmt.Errorf("read: %w", err)
			}
			if len(cs) == 0 {
				break
			}
			got += len(cs)
		}
		el := time.Since(start)
		rd.Close()
		if got != n {
			return nil, fmt.Errorf("reader returned %d of %d changes", got, n)
		}
		fmt.Fprintf(os.Stderr, "    page %d: %.2f s, %.0f changes/s\n", page, el.Seconds(), float64(n)/el.Seconds())
		out = append(out, readerResult{workload: w.name, page: page, changes: n, elapsed: el})
	}
	return out, nil
}

// insertOnly inserts n new rows, 100 per statement, one transaction each.
func insertOnly(ctx context.Context, conn *pgx.Conn, n int) error {
	for lo := 1; lo <= n; lo += 100 {
		hi := min(lo+99, n)
		if _, err := conn.Exec(ctx, insertRange(lo, hi, 1)); err != nil {
			return err
		}
	}
	return nil
}

// mixed writes n changes over the n base rows: per source transaction of
// 100 changes, 50 inserts of new rows, 30 updates and 20 deletes of
// distinct base rows.
func mixed(ctx context.Context, conn *pgx.Conn, n int) error {
	nextIns, nextUpd := n+1, 1
	nextDel := n*3/10 + 1 // past every id the updates can reach
	for done := 0; done < n; {
		chunk := min(100, n-done)
		ins := chunk / 2
		upd := chunk * 3 / 10
		del := chunk - ins - upd
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		stmts := []string{}
		if ins > 0 {
			stmts = append(stmts, insertRange(nextIns, nextIns+ins-1, 1))
		}
		if upd > 0 {
			stmts = append(stmts, fmt.Sprintf(`UPDATE items SET qty = qty + 1, label = label || '+', price = price * 1.01, at = at + interval '1 hour' WHERE id BETWEEN %d AND %d`, nextUpd, nextUpd+upd-1))
		}
		if del > 0 {
			stmts = append(stmts, fmt.Sprintf(`DELETE FROM items WHERE id BETWEEN %d AND %d`, nextDel, nextDel+del-1))
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				tx.Rollback(ctx) //nolint:errcheck // the Exec error is the one to report
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		nextIns += ins
		nextUpd += upd
		nextDel += del
		done += chunk
	}
	return nil
}

// insertRange is one multi-row INSERT of ids lo..hi with deterministic
// values; gen varies the values between the base rows and later inserts.
func insertRange(lo, hi, gen int) string {
	return fmt.Sprintf(`INSERT INTO items (id, qty, label, price, at)
SELECT g, (g * 7 + %[3]d) %% 1000, 'item-' || g || '-' || %[3]d, ((g %% 10000) * 1.25)::numeric(12,2),
	timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(%[1]d, %[2]d) g`, lo, hi, gen)
}

func connect(ctx context.Context, u string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(u)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", daemon.MaskURL(u), err)
	}
	cc.RuntimeParams["TimeZone"] = "UTC"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", daemon.MaskURL(u), err)
	}
	return conn, nil
}

func execAll(ctx context.Context, u string, stmts ...string) error {
	conn, err := connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func withHost(raw, host string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse target URL: %w", err)
	}
	u.Host = host
	return u.String(), nil
}

// sameTables compares the bench table's checksum on both sides.
func sameTables(ctx context.Context, srcURL, dstURL string) (bool, error) {
	var sums [2]dbtest.TableSum
	for i, u := range []string{srcURL, dstURL} {
		conn, err := connect(ctx, u)
		if err != nil {
			return false, err
		}
		sums[i], err = dbtest.Checksum(ctx, conn, table)
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return false, err
		}
	}
	if sums[0] != sums[1] {
		fmt.Fprintf(os.Stderr, "    MISMATCH: source %d rows %s, target %d rows %s\n", sums[0].Rows, sums[0].Sum, sums[1].Rows, sums[1].Sum)
	}
	return sums[0] == sums[1], nil
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

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

func us(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 1, 64) + " µs"
}

// render is the markdown report.
func render(cfg config, results []result, readers []readerResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## sluice bench: PostgreSQL → PostgreSQL (trigger source), %s, %d CPUs\n\n", time.Now().Format("2006-01-02 15:04"), runtime.NumCPU())
	fmt.Fprintf(&b, "Backlog built in the source changelog before sluice starts; time from stream start to the commit of the last change. RTT is the WAN proxy's (half each way); \"direct\" bypasses the proxy.\n\n")
	fmt.Fprintln(&b, "| workload | mode | link | changes | seconds | changes/s | final batch | batches | fitted fixed cost | fitted per change | mean tx time | peak Go heap | peak RSS | verified |")
	fmt.Fprintln(&b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range results {
		v := "verified"
		if !r.verified {
			v = "**MISMATCH**"
		}
		if r.note != "" {
			v += " (" + r.note + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.2f | %.0f | %d | %d | %s | %s | %s | %s | %s | %s |\n",
			r.workload, r.sc.mode, r.sc.link(), r.sc.changes, r.elapsed.Seconds(), r.rate, r.batch, r.batches,
			ms(r.fixed), us(r.perChange), ms(r.meanTx), mib(r.heapPeak), mib(r.rssPeak), v)
	}
	fmt.Fprintln(&b, "\n### Reader ceiling (trigger reader alone, read-only pass over the backlog)")
	fmt.Fprintln(&b, "\n| workload | page size | changes | seconds | changes/s |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|")
	for _, r := range readers {
		fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.0f |\n", r.workload, r.page, r.changes, r.elapsed.Seconds(), float64(r.changes)/r.elapsed.Seconds())
	}
	fmt.Fprintln(&b, "\n### Ratios")
	fmt.Fprintln(&b)
	find := func(w, mode string, rtt time.Duration, direct bool) (result, bool) {
		for _, r := range results {
			if r.workload == w && r.sc.mode == mode && r.sc.rtt == rtt && r.sc.direct == direct {
				return r, true
			}
		}
		return result{}, false
	}
	far := cfg.rtts[len(cfg.rtts)-1]
	for _, w := range workloads {
		p, ok1 := find(w.name, "pipelined", far, false)
		pr, ok2 := find(w.name, "per-row", far, false)
		if ok1 && ok2 && pr.rate > 0 {
			fmt.Fprintf(&b, "* %s: pipelined / per-row at %v: **%.0f×** (%.0f vs %.1f changes/s)\n", w.name, far, p.rate/pr.rate, p.rate, pr.rate)
		}
		z, ok3 := find(w.name, "pipelined", 0, false)
		if ok1 && ok3 && z.rate > 0 && far != 0 {
			fmt.Fprintf(&b, "* %s: pipelined %v / 0 ms proxy: **%.2f** (%.0f vs %.0f changes/s)\n", w.name, far, p.rate/z.rate, p.rate, z.rate)
		}
		d, ok4 := find(w.name, "pipelined", 0, true)
		if ok3 && ok4 && d.rate > 0 {
			fmt.Fprintf(&b, "* %s: pipelined 0 ms proxy / direct: **%.2f** (%.0f vs %.0f changes/s)\n", w.name, z.rate/d.rate, z.rate, d.rate)
		}
	}
	fmt.Fprintln(&b)
	return b.String()
}
