// Command demo shows sluice's main job on a fresh machine (`make demo`):
// for PostgreSQL → PostgreSQL and then MariaDB → MariaDB it starts a
// throwaway source and target, puts a 96 ms WAN link in front of the
// target, installs capture with `sluice source install`, loads rows into
// the source, and runs a concurrent workload while the real `sluice sync
// start` copies the existing rows (the initial copy), hands off and
// streams, until every target table equals the source's (compared row by
// row in binary form); then it applies the same kind of
// backlog per row and pipelined over the same link to show the difference.
// Everything it starts is removed on exit, also on Ctrl-C.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

const oneWay = 48 * time.Millisecond

// seedRows is how many rows events holds before sluice starts.
const seedRows = 200_000

type config struct {
	sluice                string
	engines               string
	workers               int
	txPerWorker           int
	perRowChanges         int
	pipelinedChanges      int
	mariaPerRowChanges    int
	mariaPipelinedChanges int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.sluice, "sluice", "bin/sluice", "path of the sluice binary (make demo builds it)")
	flag.StringVar(&cfg.engines, "engines", "postgres,mariadb", "which same-engine pairs to run, in order: postgres, mariadb")
	flag.IntVar(&cfg.workers, "workers", 8, "concurrent source sessions in the workload")
	flag.IntVar(&cfg.txPerWorker, "tx", 50, "transactions per workload session (~8 changes each)")
	flag.IntVar(&cfg.perRowChanges, "per-row-changes", 300, "PostgreSQL: backlog for the per-row run (~10 changes/s at 96 ms)")
	flag.IntVar(&cfg.pipelinedChanges, "pipelined-changes", 50000, "PostgreSQL: backlog for the pipelined run")
	flag.IntVar(&cfg.mariaPerRowChanges, "mariadb-per-row-changes", 200, "MariaDB: backlog for the per-row run (~10 changes/s at 96 ms)")
	flag.IntVar(&cfg.mariaPipelinedChanges, "mariadb-pipelined-changes", 20000, "MariaDB: backlog for the pipelined run")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "demo: interrupted; everything it started has been removed")
		} else {
			fmt.Fprintln(os.Stderr, "demo: FAILED:", err)
		}
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// server is a throwaway database server of the dbtest harness.
type server interface {
	Addr() string
	URL(db string) string
	CreateDatabase(ctx context.Context, name string) error
	Stop() error
}

// conn is one session on a server.
type conn interface {
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	// inTx runs fn in a transaction and commits it, or rolls it back when
	// fn fails.
	inTx(ctx context.Context, fn func(exec execFunc) error) error
	// db is the session as dbtest's comparison reads it.
	asDB() dbtest.DB
	close()
}

// execFunc runs a statement in a transaction and returns the rows affected.
type execFunc func(sql string, args ...any) (int64, error)

// commitOrRollback ends a transaction whose statements returned err.
func commitOrRollback(err error, commit func() error, rollback func()) error {
	if err != nil {
		rollback()
		return err
	}
	if err := commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// starter makes a dbtest Start function an engine's start.
func starter[S server](start func(context.Context) (S, error)) func(context.Context) (server, error) {
	return func(ctx context.Context) (server, error) {
		s, err := start(ctx)
		if err != nil {
			return nil, err // not a non-nil server holding a nil pointer
		}
		return s, nil
	}
}

// engine is what the demo needs to know of one database engine: its
// servers and sessions, the demo schema and workload in its dialect.
type engine struct {
	name      string // as narrated: "PostgreSQL", "MariaDB"
	start     func(context.Context) (server, error)
	connect   func(ctx context.Context, url string) (conn, error)
	schema    []string
	seed      string   // fills events with seedRows rows before sluice starts
	tables    []string // as --tables names them
	about     string   // what the tables exercise
	retryable func(error) bool
	workload  workloadSQL
	items     backlogSQL

	perRowChanges, pipelinedChanges int
}

// workloadSQL are the workload's statements in the engine's dialect.
type workloadSQL struct {
	insertAccount string // id, owner, balance
	insertLines   string // order id: inserts lines 1 and 2
	insertEvent   string // eventArgs
	eventArgs     func(r *rand.Rand, id int64, w, t int) []any
	bumpBalance   string // id
	bumpLine      string // order id
	moveAccount   string // new id, old id
	deleteAccount string // id
}

var eventKinds = []string{"login", "purchase", "refund", "signup"}

func eventPayload(w, t int) string {
	return fmt.Sprintf(`{"session": %d, "tx": %d, "note": "héllo"}`, w, t)
}

// backlogSQL builds the comparison's items table and its changes.
type backlogSQL struct {
	table       string // as --tables names it
	ddl         string
	insertRange func(lo, hi, gen int) string
	update      string // Sprintf with lo, hi
	delete      string // Sprintf with lo, hi
}

func run(ctx context.Context, cfg config) (err error) {
	bin, err := filepath.Abs(cfg.sluice)
	if err != nil {
		return fmt.Errorf("-sluice: %w", err)
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("-sluice %s: %w (run `make build` first)", cfg.sluice, err)
	}
	var engines []*engine
	for _, name := range strings.Split(cfg.engines, ",") {
		switch strings.TrimSpace(name) {
		case "postgres", "postgresql":
			engines = append(engines, postgresEngine(cfg))
		case "mariadb", "mysql":
			engines = append(engines, mariadbEngine(cfg))
		default:
			return fmt.Errorf("-engines: unknown engine %q (want postgres, mariadb)", name)
		}
	}
	work, err := os.MkdirTemp("", "sluice-demo-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		// sluice's logs outlive a failure (not an interrupt) to be read.
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "demo: sluice's logs are kept in %s\n", work)
			return
		}
		os.RemoveAll(work)
	}()
	var pairs []string
	for i, e := range engines {
		if i > 0 {
			fmt.Println()
		}
		say("%s → %s", e.name, e.name)
		dir := filepath.Join(work, strings.ToLower(e.name))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		if err := runEngine(ctx, cfg, bin, dir, e); err != nil {
			return fmt.Errorf("%s → %s: %w", e.name, e.name, err)
		}
		pairs = append(pairs, e.name+" → "+e.name)
	}
	fmt.Println()
	say("done: %s caught up over the %v link with every table equal", strings.Join(pairs, " and "), 2*oneWay)
	return nil
}

// runEngine runs the demo on a throwaway source and target of engine e and
// stops them before it returns.
func runEngine(ctx context.Context, cfg config, bin, work string, e *engine) error {
	say("starting throwaway %s source…", e.name)
	src, err := e.start(ctx)
	if err != nil {
		return fmt.Errorf("start source: %w", err)
	}
	defer src.Stop()
	say("starting throwaway %s target…", e.name)
	dst, err := e.start(ctx)
	if err != nil {
		return fmt.Errorf("start target: %w", err)
	}
	defer dst.Stop()
	proxy, err := wanproxy.Start(dst.Addr(), oneWay)
	if err != nil {
		return err
	}
	defer proxy.Close()
	say("source %s, target %s, WAN link to the target at %s (%v each way = %v RTT)",
		src.Addr(), dst.Addr(), proxy.Addr(), oneWay, 2*oneWay)

	d := &demo{cfg: cfg, bin: bin, work: work, eng: e, src: src, dst: dst, proxy: proxy}
	if err := d.mainRun(ctx); err != nil {
		return err
	}
	return d.compare(ctx)
}

type demo struct {
	cfg       config
	bin, work string
	eng       *engine
	src, dst  server
	proxy     *wanproxy.Proxy
}

// urls creates database db on both servers and returns the source URL, the
// target URL through the WAN proxy and the direct target URL.
func (d *demo) urls(ctx context.Context, db string) (srcURL, viaProxy, dstURL string, err error) {
	if err := d.src.CreateDatabase(ctx, db); err != nil {
		return "", "", "", err
	}
	if err := d.dst.CreateDatabase(ctx, db); err != nil {
		return "", "", "", err
	}
	u, err := url.Parse(d.dst.URL(db))
	if err != nil {
		return "", "", "", err
	}
	u.Host = d.proxy.Addr()
	return d.src.URL(db), u.String(), d.dst.URL(db), nil
}

// install runs `sluice source install` and returns its output.
func (d *demo) install(ctx context.Context, srcURL string, tables []string) (string, error) {
	out, err := exec.CommandContext(ctx, d.bin, "source", "install", "--source", srcURL, "--tables", strings.Join(tables, ",")).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("sluice source install: %w\n%s", err, out)
	}
	return string(out), nil
}

func (d *demo) mainRun(ctx context.Context) error {
	e, cfg := d.eng, d.cfg
	srcURL, proxyURL, dstURL, err := d.urls(ctx, "shop")
	if err != nil {
		return err
	}
	tables := strings.Join(e.tables, ",")
	say("creating tables %s on both (%s)", strings.Join(e.tables, ", "), e.about)
	for _, u := range []string{srcURL, dstURL} {
		if err := execAll(ctx, e, u, e.schema...); err != nil {
			return err
		}
	}
	say("installing capture on the source: sluice source install --source %s --tables %s", mask(srcURL), tables)
	out, err := d.install(ctx, srcURL, e.tables)
	if err != nil {
		return err
	}
	fmt.Print(indent(out))

	say("loading %d rows into events on the source before sluice starts: the stream's initial copy brings them over, then it streams from the copy's snapshot", seedRows)
	if err := execAll(ctx, e, srcURL, e.seed); err != nil {
		return err
	}

	stateDir := filepath.Join(d.work, "state")
	logPath := filepath.Join(d.work, "sluice.log")
	say("running a workload on the source: %d concurrent sessions × %d transactions of inserts, updates and deletes", cfg.workers, cfg.txPerWorker)
	wl := make(chan workloadResult, 1)
	go func() { wl <- workload(ctx, e, srcURL, cfg.workers, cfg.txPerWorker) }()

	say("starting sluice while the workload runs (it copies the existing rows first, then streams): sluice sync start --source %s --target %s --tables %s --state-dir %s",
		mask(srcURL), mask(proxyURL), tables, stateDir)
	say("sluice's log: %s", logPath)
	p, err := startSluice(d.bin, logPath, "sync", "start", "--source", srcURL, "--target", proxyURL,
		"--tables", tables, "--state-dir", stateDir, "--source-mode", "trigger", "--log-format", "text")
	if err != nil {
		return err
	}
	defer p.stop(10 * time.Second)

	r := <-wl
	if r.err != nil {
		return fmt.Errorf("workload: %w", r.err)
	}
	retried := ""
	if r.retries > 0 {
		retried = fmt.Sprintf(" (%d retried after a deadlock, as applications do)", r.retries)
	}
	say("workload done: %d changes in %d transactions in %.1f s%s", r.changes, r.txs, r.elapsed.Seconds(), retried)

	say("waiting for the target to catch up (comparing every table row by row, both sides read in binary form)…")
	start := time.Now()
	sums, ok, err := waitConverged(ctx, e, srcURL, dstURL, 2*time.Minute, p)
	if err != nil {
		return err
	}
	printSums(sums)
	if !ok {
		return errors.New("the target did not converge to the source within 2 minutes: tables differ (see the table above and " + logPath + ")")
	}
	say("target caught up %.1f s after the workload ended; every table matches", time.Since(start).Seconds())
	say("the initial copy, from sluice's log:")
	for _, line := range logLines(logPath, "initial copy done", "initial copy handed off") {
		fmt.Print(indent(line + "\n"))
	}

	time.Sleep(1100 * time.Millisecond) // let the status file show the final batch
	say("sluice sync status --state-dir %s", stateDir)
	out2, err := exec.CommandContext(ctx, d.bin, "sync", "status", "--state-dir", stateDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("sluice sync status: %w\n%s", err, out2)
	}
	fmt.Print(indent(string(out2)))

	say("stopping sluice with SIGTERM…")
	code, err := p.stop(30 * time.Second)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("sluice exited %d after SIGTERM, want 0 (log: %s)", code, logPath)
	}
	say("sluice exited 0")
	return nil
}

// compare applies the same kind of backlog per row and pipelined over the
// same 96 ms link, each to fresh tables with a fresh stream, and prints the
// rates.
func (d *demo) compare(ctx context.Context) error {
	e := d.eng
	say("per-row vs pipelined to the %s target on the same %v link: a backlog of inserts, updates and deletes, applied by a fresh stream to fresh tables", e.name, 2*oneWay)
	type row struct {
		mode    string
		changes int
		secs    float64
		rate    float64
		batch   int
	}
	var rows []row
	for _, m := range []struct {
		mode    string
		changes int
	}{{"per-row", e.perRowChanges}, {"pipelined", e.pipelinedChanges}} {
		db := "cmp_" + strings.ReplaceAll(m.mode, "-", "_")
		srcURL, proxyURL, dstURL, err := d.urls(ctx, db)
		if err != nil {
			return err
		}
		if err := d.backlog(ctx, srcURL, dstURL, m.changes); err != nil {
			return fmt.Errorf("%s backlog: %w", m.mode, err)
		}
		stateDir := filepath.Join(d.work, "state-"+m.mode)
		logPath := filepath.Join(d.work, "sluice-"+m.mode+".log")
		say("%s: %d changes waiting in the source changelog; sluice sync start --apply-mode %s --stream-id %s (log: %s)", m.mode, m.changes, m.mode, m.mode, logPath)
		p, err := startSluice(d.bin, logPath, "sync", "start", "--source", srcURL, "--target", proxyURL,
			"--tables", e.items.table, "--state-dir", stateDir, "--stream-id", m.mode, "--apply-mode", m.mode,
			"--source-mode", "trigger", "--initial-copy", "off", "--log-format", "json", "--poll-interval", "50ms")
		if err != nil {
			return err
		}
		st, err := waitApplied(ctx, d.bin, stateDir, m.changes, 90*time.Second, p)
		if err != nil {
			p.stop(10 * time.Second)
			return fmt.Errorf("%s: %w (log: %s)", m.mode, err, logPath)
		}
		began, err := streamingSince(logPath)
		if err != nil {
			p.stop(10 * time.Second)
			return err
		}
		if code, err := p.stop(30 * time.Second); err != nil || code != 0 {
			return fmt.Errorf("%s: sluice exited %d (%v) after SIGTERM, want 0 (log: %s)", m.mode, code, err, logPath)
		}
		diffs, err := compareAt(ctx, e, srcURL, dstURL, e.items.table)
		if err != nil {
			return err
		}
		if !diffs.Equal() {
			printSums(diffs)
			return fmt.Errorf("%s: target differs from the source after the backlog was applied", m.mode)
		}
		secs := st.LastCommit.Sub(began).Seconds()
		r := row{mode: m.mode, changes: m.changes, secs: secs, rate: float64(st.Applied) / secs, batch: st.BatchSize}
		say("%s: %d changes in %.1f s = %.0f changes/s, tables equal", m.mode, st.Applied, r.secs, r.rate)
		rows = append(rows, r)
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "target\tapply mode\tRTT\tchanges\tseconds\tchanges/s\tfinal batch\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%.1f\t%.0f\t%d\t\n", e.name, r.mode, 2*oneWay, r.changes, r.secs, r.rate, r.batch)
	}
	tw.Flush()
	if len(rows) == 2 && rows[0].rate > 0 {
		fmt.Printf("\npipelined is %.0f× per-row on the same %v link to %s\n", rows[1].rate/rows[0].rate, 2*oneWay, e.name)
	}
	return nil
}

// status is the part of `sluice sync status --json` the demo reads.
type status struct {
	Stream     string    `json:"stream"`
	Applied    uint64    `json:"applied"`
	BatchSize  int       `json:"batch_size"`
	LastCommit time.Time `json:"last_commit"`
	LastError  string    `json:"last_error"`
}

// waitApplied polls `sluice sync status --json` until the stream applied n
// changes.
func waitApplied(ctx context.Context, bin, stateDir string, n int, within time.Duration, p *sluiceProc) (status, error) {
	deadline := time.Now().Add(within)
	var last status
	for {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-p.done:
			return last, fmt.Errorf("sluice exited (%v) after applying %d of %d changes", p.err, last.Applied, n)
		case <-time.After(500 * time.Millisecond):
		}
		out, err := exec.CommandContext(ctx, bin, "sync", "status", "--json", "--state-dir", stateDir).Output()
		if err == nil {
			var list []status
			if json.Unmarshal(out, &list) == nil && len(list) == 1 {
				last = list[0]
			}
		}
		if last.Applied >= uint64(n) {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("only %d of %d changes applied within %v (last error: %q)", last.Applied, n, within, last.LastError)
		}
	}
}

// logLines returns the lines of a text log holding msg="…" for each of
// msgs, in order.
func logLines(logPath string, msgs ...string) []string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return []string{"(no log: " + err.Error() + ")"}
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, m := range msgs {
			if strings.Contains(line, `msg="`+m+`"`) {
				out = append(out, line)
			}
		}
	}
	return out
}

// streamingSince is when sluice said it started streaming, from its JSON log.
func streamingSince(logPath string) (time.Time, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return time.Time{}, fmt.Errorf("read sluice log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "streaming" {
			return line.Time, nil
		}
	}
	return time.Time{}, fmt.Errorf("no \"streaming\" line in %s", logPath)
}

// backlog creates the items table on both sides with identical base rows,
// installs capture on the source and writes n changes (50% inserts, 30%
// updates, 20% deletes, in transactions of 100) that wait in the changelog.
func (d *demo) backlog(ctx context.Context, srcURL, dstURL string, n int) error {
	e, b := d.eng, d.eng.items
	for _, u := range []string{srcURL, dstURL} {
		if err := execAll(ctx, e, u, b.ddl, b.insertRange(1, n, 0)); err != nil {
			return err
		}
	}
	if _, err := d.install(ctx, srcURL, []string{b.table}); err != nil {
		return err
	}
	c, err := e.connect(ctx, srcURL)
	if err != nil {
		return err
	}
	defer c.close()
	nextIns, nextUpd, nextDel := n+1, 1, n*3/10+1
	for done := 0; done < n; {
		chunk := min(100, n-done)
		ins, upd := chunk/2, chunk*3/10
		del := chunk - ins - upd
		var stmts []string
		if ins > 0 {
			stmts = append(stmts, b.insertRange(nextIns, nextIns+ins-1, 1))
		}
		if upd > 0 {
			stmts = append(stmts, fmt.Sprintf(b.update, nextUpd, nextUpd+upd-1))
		}
		if del > 0 {
			stmts = append(stmts, fmt.Sprintf(b.delete, nextDel, nextDel+del-1))
		}
		err := c.inTx(ctx, func(exec execFunc) error {
			for _, s := range stmts {
				if _, err := exec(s); err != nil {
					return fmt.Errorf("%s: %w", firstLine(s), err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("write backlog: %w", err)
		}
		nextIns, nextUpd, nextDel, done = nextIns+ins, nextUpd+upd, nextDel+del, done+chunk
	}
	return nil
}

type workloadResult struct {
	changes, txs, retries int
	elapsed               time.Duration
	err                   error
}

// workload runs concurrent sessions of short transactions: each inserts
// accounts, order lines and events, updates and deletes some of what it
// wrote earlier, and changes a primary key now and then.
func workload(ctx context.Context, e *engine, srcURL string, workers, txs int) workloadResult {
	start := time.Now()
	var (
		mu  sync.Mutex
		res workloadResult
		wg  sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			changes, retries, err := session(ctx, e, srcURL, w, txs)
			mu.Lock()
			defer mu.Unlock()
			res.changes += changes
			res.retries += retries
			res.txs += txs
			if err != nil && res.err == nil {
				res.err = err
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// session runs one workload session. A transaction that fails with a
// deadlock is retried, as applications do.
func session(ctx context.Context, e *engine, srcURL string, w, txs int) (changes, retries int, err error) {
	c, err := e.connect(ctx, srcURL)
	if err != nil {
		return 0, 0, err
	}
	defer c.close()
	r := rand.New(rand.NewPCG(uint64(w), 42))
	base := int64(w+1) * 100_000_000
	var live []int64 // account ids this session has inserted and not deleted
	for t := range txs {
		for try := 1; ; try++ {
			n, next, err := sessionTx(ctx, c, e.workload, r, w, t, base, live)
			if err == nil {
				changes, live = changes+n, next
				break
			}
			if try == 10 || !e.retryable(err) || ctx.Err() != nil {
				return changes, retries, fmt.Errorf("session %d: %w", w, err)
			}
			retries++
		}
	}
	return changes, retries, nil
}

// sessionTx runs a session's transaction t and returns the changes it made
// and the live account ids after it commits.
func sessionTx(ctx context.Context, c conn, q workloadSQL, r *rand.Rand, w, t int, base int64, live []int64) (int, []int64, error) {
	live = slices.Clone(live)
	changes := 0
	err := c.inTx(ctx, func(exec execFunc) error {
		run := func(sql string, args ...any) error {
			n, err := exec(sql, args...)
			if err != nil {
				return fmt.Errorf("%s: %w", firstLine(sql), err)
			}
			changes += int(n)
			return nil
		}
		for range 3 {
			id := base + int64(len(live)) + int64(t)*100
			if err := run(q.insertAccount, id, fmt.Sprintf("owner-%d", id), r.IntN(1_000_000)/100); err != nil {
				return err
			}
			live = append(live, id)
		}
		order := int32(w*100_000 + t)
		if err := run(q.insertLines, order); err != nil {
			return err
		}
		if err := run(q.insertEvent, q.eventArgs(r, base+int64(t), w, t)...); err != nil {
			return err
		}
		if len(live) > 4 {
			i := r.IntN(len(live))
			if err := run(q.bumpBalance, live[i]); err != nil {
				return err
			}
			if err := run(q.bumpLine, order); err != nil {
				return err
			}
			if t%5 == 0 { // a primary-key update
				newID := live[i] + 500_000
				if err := run(q.moveAccount, newID, live[i]); err != nil {
					return err
				}
				live[i] = newID
			}
			j := r.IntN(len(live))
			if err := run(q.deleteAccount, live[j]); err != nil {
				return err
			}
			live = append(live[:j], live[j+1:]...)
		}
		return nil
	})
	return changes, live, err
}

// compareAt compares every demo table of the target with the source's,
// reading both in binary form (dbtest.CompareTables: never the text both
// servers print).
func compareAt(ctx context.Context, e *engine, srcURL, dstURL string, tables ...string) (dbtest.Diffs, error) {
	src, err := e.connect(ctx, srcURL)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	defer src.close()
	dst, err := e.connect(ctx, dstURL)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	defer dst.close()
	return dbtest.CompareTables(ctx, src.asDB(), dst.asDB(), tables...)
}

// waitConverged polls the comparison until the tables are equal, the
// deadline passes or sluice exits.
func waitConverged(ctx context.Context, e *engine, srcURL, dstURL string, within time.Duration, p *sluiceProc) (dbtest.Diffs, bool, error) {
	deadline := time.Now().Add(within)
	for {
		diffs, err := compareAt(ctx, e, srcURL, dstURL, e.tables...)
		if err != nil || diffs.Equal() || time.Now().After(deadline) {
			return diffs, err == nil && diffs.Equal(), err
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-p.done:
			return nil, false, fmt.Errorf("sluice exited before the target caught up: %v (log: %s)", p.err, p.logPath)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func printSums(diffs dbtest.Diffs) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    TABLE\tSOURCE ROWS\tTARGET ROWS\tROWS DIFFERENT\t")
	for _, d := range diffs {
		verdict := "OK"
		if !d.Equal() {
			verdict = "DIFFERENT"
		}
		fmt.Fprintf(tw, "    %s\t%d\t%d\t%d\t%s\n", d.Table, d.WantRows, d.GotRows, len(d.Rows), verdict)
	}
	tw.Flush()
	for _, d := range diffs {
		if !d.Equal() {
			fmt.Println(d)
		}
	}
}

// sluiceProc is a sluice subprocess writing to a log file.
type sluiceProc struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // the Wait error, once done is closed
	once    sync.Once
}

func startSluice(bin, logPath string, args ...string) (*sluiceProc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("sluice log: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a Ctrl-C reaches it only through the demo,
	// which stops it with SIGTERM; and SIGKILL if the demo dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &sluiceProc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM, waits up to grace (then SIGKILL) and returns the exit
// code. Calling it again returns at once.
func (p *sluiceProc) stop(grace time.Duration) (int, error) {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	<-p.done
	var exit *exec.ExitError
	switch {
	case p.err == nil:
		return 0, nil
	case errors.As(p.err, &exit):
		return exit.ExitCode(), nil
	default:
		return -1, p.err
	}
}

func execAll(ctx context.Context, e *engine, u string, stmts ...string) error {
	c, err := e.connect(ctx, u)
	if err != nil {
		return err
	}
	defer c.close()
	for _, s := range stmts {
		if _, err := c.exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func mask(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Redacted()
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}
