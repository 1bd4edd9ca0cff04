package main

// The copy section (issue 11's benchmark): the initial copy of a stream
// with no checkpoint, timed with the real binary (bin/sluice, `sync start`
// in its default mode: logical replication from PostgreSQL, the binary log
// from MariaDB) from process start until the copy is handed off to the
// stream, over the 96 ms WAN proxy in front of the target. Baselines run
// through the same proxy in the same run, each into fresh empty target
// tables: pg_dump --data-only | psql and pgcopydb copy table-data for
// PostgreSQL, mariadb-dump --no-create-info | mariadb for MariaDB. The
// cross-engine pairs run sluice alone (no dump tool crosses engines).
//
// Every pair copies the same tables: copy_items with -copy-rows rows (the
// sysbench-like shape (id bigint primary key, k int, c varchar(120), pad
// varchar(60))), plus copy_small (1000 rows), copy_one (1 row) and
// copy_empty. The source rows are written once per source engine; every run
// gets its own target database and, for sluice, its own stream id (its own
// replication slot, dropped after the run) and state directory.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

const secCopy = "copy"

// The pairs -copy-pairs selects from, in the default order.
const (
	pairPGPG = "pg-pg"
	pairMyMy = "my-my"
	pairPGMy = "pg-my"
	pairMyPG = "my-pg"
)

var allCopyPairs = []string{pairPGPG, pairMyMy, pairPGMy, pairMyPG}

var copyPairTitles = map[string]string{
	pairPGPG: "PostgreSQL → PostgreSQL",
	pairMyMy: "MariaDB → MariaDB",
	pairPGMy: "PostgreSQL → MariaDB",
	pairMyPG: "MariaDB → PostgreSQL",
}

// Tool names in the report.
const (
	toolSluice   = "sluice"
	toolPGDump   = "pg_dump | psql"
	toolPGCopyDB = "pgcopydb copy table-data"
	toolMyDump   = "mariadb-dump | mariadb"
)

// The goals of issue 11.
const (
	goalPGRate      = 150000
	goalMyRate      = 100000
	goalPGDump      = 1.0
	goalPGCopyDB    = 1.0
	goalMyDump      = 1.5
	goalRSS         = 150 << 20
	copyRTT         = 96 * time.Millisecond
	fullCompareRows = 250000 // -copy-verify auto: CompareTables up to this many rows, count+sums above
)

// copyConfig is the copy section's part of the command line.
type copyConfig struct {
	rows      int
	workers   []int // sluice's --copy-workers, one run each; the first is the run the goals judge
	chunkRows int   // sluice's --copy-chunk-rows; 0 leaves its default
	pairs     []string
	sluice    string
	verify    string // auto, full or sums
	baselines bool
	jobs      int // pgcopydb --table-jobs
	timeout   time.Duration
	extra     []string // more sluice flags (-copy-sluice-flags)
}

// copyFlags registers the copy section's flags; the returned function
// checks and stores them once flag.Parse has run.
func copyFlags(cc *copyConfig) func() error {
	var workers, pairs, extra string
	flag.IntVar(&cc.rows, "copy-rows", 2000000, "copy section: rows of the big table (e.g. 200000 for a quick run)")
	flag.StringVar(&workers, "copy-workers", "4,1,8", "copy section: sluice --copy-workers for the PostgreSQL → PostgreSQL runs, one run each; the first is also used for the other pairs and judged against the goals")
	flag.IntVar(&cc.chunkRows, "copy-chunk-rows", 0, "copy section: sluice --copy-chunk-rows (0: sluice's default)")
	flag.StringVar(&pairs, "copy-pairs", strings.Join(allCopyPairs, ","), "copy section: comma-separated source-target pairs: "+strings.Join(allCopyPairs, ", "))
	flag.StringVar(&cc.sluice, "sluice", "bin/sluice", "copy section: the sluice binary to run (make bench builds it)")
	flag.StringVar(&cc.verify, "copy-verify", "auto", "copy section: how to check the target: full (dbtest.CompareTables, every row in binary form, held in memory), sums (per table count, sum(id), sum(k) and a sum of an md5 of c and pad, computed by each server), auto (full up to 250000 rows, else sums)")
	flag.BoolVar(&cc.baselines, "copy-baselines", true, "copy section: also time pg_dump | psql, pgcopydb and mariadb-dump | mariadb")
	flag.IntVar(&cc.jobs, "copy-pgcopydb-jobs", 4, "copy section: pgcopydb --table-jobs")
	flag.StringVar(&extra, "copy-sluice-flags", "", "copy section: more flags for sluice sync start, space-separated (e.g. \"--log-level debug\"; with -v its log is kept)")
	flag.DurationVar(&cc.timeout, "copy-timeout", 20*time.Minute, "copy section: give up on one run after this")
	return func() error {
		if cc.rows < 1 || cc.chunkRows < 0 || cc.jobs < 1 || cc.timeout <= 0 {
			return errors.New("copy section: -copy-rows, -copy-pgcopydb-jobs and -copy-timeout must be positive, -copy-chunk-rows not negative")
		}
		if !slices.Contains([]string{"auto", "full", "sums"}, cc.verify) {
			return fmt.Errorf("-copy-verify %q: want auto, full or sums", cc.verify)
		}
		cc.extra = strings.Fields(extra)
		cc.workers = nil
		for _, f := range strings.Split(workers, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return fmt.Errorf("-copy-workers: %q is not a worker count", f)
			}
			if !slices.Contains(cc.workers, n) {
				cc.workers = append(cc.workers, n)
			}
		}
		if len(cc.workers) == 0 {
			return errors.New("-copy-workers: no worker count given")
		}
		cc.pairs = nil
		for _, f := range strings.Split(pairs, ",") {
			f = strings.ToLower(strings.TrimSpace(f))
			if f == "" {
				continue
			}
			if !slices.Contains(allCopyPairs, f) {
				return fmt.Errorf("-copy-pairs: unknown pair %q (want %s)", f, strings.Join(allCopyPairs, ", "))
			}
			if !slices.Contains(cc.pairs, f) {
				cc.pairs = append(cc.pairs, f)
			}
		}
		if len(cc.pairs) == 0 {
			return errors.New("-copy-pairs: no pair given")
		}
		return nil
	}
}

// The copied tables: the big one first.
const copyBig = "copy_items"

var copySmall = []struct {
	name string
	rows int
}{{"copy_small", 1000}, {"copy_one", 1}, {"copy_empty", 0}}

func copyTableNames() []string {
	out := []string{copyBig}
	for _, t := range copySmall {
		out = append(out, t.name)
	}
	return out
}

func (cc copyConfig) totalRows() int64 {
	n := int64(cc.rows)
	for _, t := range copySmall {
		n += int64(t.rows)
	}
	return n
}

func copyDDL() []string {
	var out []string
	for _, t := range copyTableNames() {
		out = append(out, "CREATE TABLE "+t+" (id bigint PRIMARY KEY, k int NOT NULL, c varchar(120) NOT NULL, pad varchar(60) NOT NULL)")
	}
	return out
}

// copyResult is one row of the copy report.
type copyResult struct {
	pair      string
	tool      string
	workers   int // sluice --copy-workers or pgcopydb --table-jobs; 0 when the tool has none
	rows      int64
	elapsed   time.Duration
	copyStart time.Duration // sluice: process start to its "initial copy" line (snapshot taken, plan made)
	copyDone  time.Duration // sluice: process start to its "initial copy done" line
	rss       uint64        // peak RSS in bytes, 0 when unknown
	rssNote   string
	verified  string
	ok        bool // ran and verified equal
	skipped   string
	note      string
}

func (r copyResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.rows) / r.elapsed.Seconds()
}

// copyEnv is the copy section's state: the source databases, filled once
// per source engine.
type copyEnv struct {
	*env
	cc           copyConfig
	pgSrcURL     string
	mySrcURL     string
	pgcopydbSkip string // why pgcopydb is not run, once known
	streams      int
}

func (e *env) benchCopy(ctx context.Context) ([]copyResult, error) {
	ce := &copyEnv{env: e, cc: e.cfg.copy}
	bin, err := filepath.Abs(ce.cc.sluice)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("-sluice %s: %w (run `make build` first)", ce.cc.sluice, err)
	}
	ce.cc.sluice = bin
	var out []copyResult
	for _, pair := range ce.cc.pairs {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		rs, err := ce.pair(ctx, pair)
		out = append(out, rs...)
		if err != nil {
			return out, fmt.Errorf("%s: %w", copyPairTitles[pair], err)
		}
	}
	return out, nil
}

// pair runs every tool of one source-target pair.
func (ce *copyEnv) pair(ctx context.Context, pair string) ([]copyResult, error) {
	srcPG := pair == pairPGPG || pair == pairPGMy
	dstPG := pair == pairPGPG || pair == pairMyPG
	var srcURL string
	var err error
	if srcPG {
		srcURL, err = ce.pgSource(ctx)
	} else {
		srcURL, err = ce.mySource(ctx)
	}
	if err != nil {
		return nil, err
	}
	if dstPG {
		err = ce.postgres(ctx)
	} else {
		err = ce.mariadb(ctx)
	}
	if err != nil {
		return nil, err
	}
	// newTarget makes a fresh target database holding the empty tables.
	newTarget := func() (dstURL, dstAddr string, err error) {
		name := ce.nextName()
		dst, exec := ce.myDst, myExecAll
		if dstPG {
			dst, exec = ce.pgDst, execAll
		}
		if err := dst.CreateDatabase(ctx, name); err != nil {
			return "", "", err
		}
		u := dst.URL(name)
		return u, dst.Addr(), exec(ctx, u, copyDDL()...)
	}
	workers := ce.cc.workers[:1]
	if pair == pairPGPG {
		workers = ce.cc.workers
	}
	var out []copyResult
	run := func(tool string, workers int, f func(dstURL, proxyURL string) (copyResult, error)) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		dstURL, dstAddr, err := newTarget()
		if err != nil {
			return err
		}
		proxy, err := wanproxy.Start(dstAddr, copyRTT/2)
		if err != nil {
			return err
		}
		defer proxy.Close()
		proxyURL, err := withHost(dstURL, proxy.Addr())
		if err != nil {
			return err
		}
		label := tool
		if workers > 0 {
			label = fmt.Sprintf("%s, workers %d", tool, workers)
		}
		fmt.Fprintf(os.Stderr, "==> copy, %s, %s, %d rows, 96 ms proxy\n", copyPairTitles[pair], label, ce.cc.totalRows())
		r, err := f(dstURL, proxyURL)
		r.pair, r.tool, r.workers = pair, tool, workers
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		if r.skipped == "" {
			if r.verified, r.ok, err = ce.verify(ctx, srcPG, srcURL, dstPG, dstURL); err != nil {
				return fmt.Errorf("%s: verify: %w", label, err)
			}
			fmt.Fprintf(os.Stderr, "    %d rows in %.2f s, %s rows/s, peak RSS %s, %s\n", r.rows, r.elapsed.Seconds(), thousands(r.rate()), rssText(r), r.verified)
		} else {
			fmt.Fprintf(os.Stderr, "    skipped: %s\n", r.skipped)
		}
		out = append(out, r)
		return nil
	}
	for _, w := range workers {
		err := run(toolSluice, w, func(dstURL, proxyURL string) (copyResult, error) {
			return ce.sluiceRun(ctx, srcPG, srcURL, proxyURL, w)
		})
		if err != nil {
			return out, err
		}
	}
	if !ce.cc.baselines {
		return out, nil
	}
	switch pair {
	case pairPGPG:
		if err := run(toolPGDump, 0, func(_, proxyURL string) (copyResult, error) { return ce.pgDumpRun(ctx, srcURL, proxyURL) }); err != nil {
			return out, err
		}
		if err := run(toolPGCopyDB, ce.cc.jobs, func(_, proxyURL string) (copyResult, error) { return ce.pgcopydbRun(ctx, srcURL, proxyURL) }); err != nil {
			return out, err
		}
	case pairMyMy:
		if err := run(toolMyDump, 0, func(_, proxyURL string) (copyResult, error) { return ce.myDumpRun(ctx, srcURL, proxyURL) }); err != nil {
			return out, err
		}
	}
	return out, nil
}

// ---- sources --------------------------------------------------------------

// pgSource creates and fills the PostgreSQL source database, once.
func (ce *copyEnv) pgSource(ctx context.Context) (string, error) {
	if ce.pgSrcURL != "" {
		return ce.pgSrcURL, nil
	}
	if err := ce.postgres(ctx); err != nil {
		return "", err
	}
	t0 := time.Now()
	fmt.Fprintf(os.Stderr, "==> copy: filling the PostgreSQL source (%d rows)\n", ce.cc.totalRows())
	name := ce.nextName()
	if err := ce.pgSrc.CreateDatabase(ctx, name); err != nil {
		return "", err
	}
	u := ce.pgSrc.URL(name)
	stmts := copyDDL()
	fill := func(table string, n int) string {
		return fmt.Sprintf("INSERT INTO %s SELECT g, g %% 1000, md5(g::text) || md5((g+1)::text), 'pad-' || g FROM generate_series(1, %d) g", table, n)
	}
	stmts = append(stmts, fill(copyBig, ce.cc.rows))
	for _, t := range copySmall {
		if t.rows > 0 {
			stmts = append(stmts, fill(t.name, t.rows))
		}
	}
	// Hint bits, the visibility map and the planner's row estimates set
	// before any tool reads the tables, so no timed run pays for them.
	stmts = append(stmts, "VACUUM ANALYZE", "CHECKPOINT")
	if err := execAll(ctx, u, stmts...); err != nil {
		return "", fmt.Errorf("fill the PostgreSQL source: %w", err)
	}
	fmt.Fprintf(os.Stderr, "    filled in %.1f s\n", time.Since(t0).Seconds())
	ce.pgSrcURL = u
	return u, nil
}

// mySource creates and fills the MariaDB source database, once, with the
// same rows as the PostgreSQL one (MD5 of the decimal text on both).
func (ce *copyEnv) mySource(ctx context.Context) (string, error) {
	if ce.mySrcURL != "" {
		return ce.mySrcURL, nil
	}
	if err := ce.mariadb(ctx); err != nil {
		return "", err
	}
	t0 := time.Now()
	fmt.Fprintf(os.Stderr, "==> copy: filling the MariaDB source (%d rows)\n", ce.cc.totalRows())
	name := ce.nextName()
	if err := ce.mySrc.DropDatabase(ctx, name); err != nil {
		return "", err
	}
	if err := ce.mySrc.CreateDatabase(ctx, name); err != nil {
		return "", err
	}
	u := ce.mySrc.URL(name)
	stmts := copyDDL()
	// In statements of 250,000 rows: one INSERT … SELECT of millions
	// would hold one huge transaction.
	fill := func(table string, n int) {
		for lo := 1; lo <= n; lo += 250000 {
			hi := min(lo+249999, n)
			stmts = append(stmts, fmt.Sprintf("INSERT INTO %s SELECT seq, seq %% 1000, CONCAT(MD5(seq), MD5(seq+1)), CONCAT('pad-', seq) FROM seq_%d_to_%d", table, lo, hi))
		}
	}
	fill(copyBig, ce.cc.rows)
	for _, t := range copySmall {
		fill(t.name, t.rows)
	}
	stmts = append(stmts, "ANALYZE TABLE "+strings.Join(copyTableNames(), ", "))
	if err := myExecAll(ctx, u, stmts...); err != nil {
		return "", fmt.Errorf("fill the MariaDB source: %w", err)
	}
	fmt.Fprintf(os.Stderr, "    filled in %.1f s\n", time.Since(t0).Seconds())
	ce.mySrcURL = u
	return u, nil
}

func myExecAll(ctx context.Context, u string, stmts ...string) error {
	db, err := myConnect(ctx, u)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		rows, err := db.QueryContext(ctx, s) // ANALYZE TABLE returns rows
		if err == nil {
			for rows.Next() {
			}
			err = errors.Join(rows.Err(), rows.Close())
		}
		if err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

// ---- sluice ---------------------------------------------------------------

const (
	msgCopyStart = "initial copy"
	msgCopyDone  = "initial copy done"
	msgHandoff   = "initial copy handed off to the stream"
)

// sluiceRun runs `sluice sync start` until its copy is handed off to the
// stream, then stops it with SIGTERM.
func (ce *copyEnv) sluiceRun(ctx context.Context, srcPG bool, srcURL, proxyURL string, workers int) (copyResult, error) {
	var res copyResult
	ce.streams++
	id := fmt.Sprintf("copybench%d", ce.streams)
	dir, err := os.MkdirTemp("", "sluice-bench-copy-")
	if err != nil {
		return res, fmt.Errorf("state dir: %w", err)
	}
	keep := ce.cfg.verbose // -v keeps sluice's log to read
	defer func() {
		if keep {
			fmt.Fprintf(os.Stderr, "    sluice's state and log kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	tables := copyTableNames()
	if srcPG {
		// The stream's slot and publication would hold WAL for the rest of
		// the run.
		defer dropSlot(context.WithoutCancel(ctx), srcURL, id, tables)
	}
	logPath := filepath.Join(dir, "sluice.log")
	args := []string{"sync", "start", "--source", srcURL, "--target", proxyURL, "--tables", strings.Join(tables, ","),
		"--state-dir", filepath.Join(dir, "state"), "--stream-id", id, "--copy-workers", strconv.Itoa(workers), "--log-format", "json"}
	if ce.cc.chunkRows > 0 {
		args = append(args, "--copy-chunk-rows", strconv.Itoa(ce.cc.chunkRows))
	}
	args = append(args, ce.cc.extra...)
	if ce.cfg.verbose {
		fmt.Fprintf(os.Stderr, "    %s %s\n", ce.cc.sluice, strings.Join(maskArgs(args), " "))
	}
	f, err := os.Create(logPath)
	if err != nil {
		return res, fmt.Errorf("sluice log: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(ce.cc.sluice, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a Ctrl-C reaches it only through the
	// bench, which stops it with SIGTERM; SIGKILL if the bench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start %s: %w", ce.cc.sluice, err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	stop := func() (int, error) {
		select {
		case <-done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				return -1, errors.New("sluice did not stop within 30 s of SIGTERM; killed")
			}
		}
		return cmd.ProcessState.ExitCode(), nil
	}
	defer stop() //nolint:errcheck // the normal path stops it and checks

	lw := &logWatch{path: logPath}
	statusDir := filepath.Join(dir, "state")
	seenCopy := false
	deadline := time.Now().Add(ce.cc.timeout)
	var handoff time.Time
	for handoff.IsZero() {
		lw.scan()
		switch {
		case !lw.handoff.IsZero():
			handoff = lw.handoff
		case lw.fatal != "":
			keep = true
			return res, fmt.Errorf("sluice logged %q before the hand-off (log %s)", lw.fatal, logPath)
		}
		if !handoff.IsZero() {
			break
		}
		// The status file as a second witness: it shows the copy while it
		// runs and drops it once the stream runs.
		if sts, err := daemon.ReadStatus(statusDir); err == nil {
			for _, s := range sts {
				if s.Stream != id {
					continue
				}
				if s.Copy != nil {
					seenCopy = true
				} else if s.Running && seenCopy {
					handoff = time.Now()
				}
			}
		}
		if !handoff.IsZero() {
			break
		}
		select {
		case <-done:
			keep = true
			lw.scan()
			return res, fmt.Errorf("sluice exited (%v) before the copy was handed off; log %s:\n%s", waitErr, logPath, lw.tail(15))
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			keep = true
			return res, fmt.Errorf("no hand-off within %v (-copy-timeout); log %s:\n%s", ce.cc.timeout, logPath, lw.tail(15))
		}
	}
	res.rss = vmHWM(cmd.Process.Pid)
	code, err := stop()
	if err != nil {
		keep = true
		return res, err
	}
	res.elapsed = handoff.Sub(t0)
	if !lw.copyDone.IsZero() && !lw.copyStart.IsZero() {
		res.copyStart, res.copyDone = lw.copyStart.Sub(t0), lw.copyDone.Sub(t0)
	}
	res.rows = ce.cc.totalRows()
	if lw.copied >= 0 && lw.copied != res.rows {
		res.note = fmt.Sprintf("sluice reported %d rows copied", lw.copied)
	}
	if code != 0 {
		keep = true
		res.note = strings.TrimPrefix(res.note+fmt.Sprintf("; exit %d after SIGTERM", code), "; ")
	}
	return res, nil
}

// dropSlot removes a logical stream's slot and publication from the
// source; the slot stays active for a moment after sluice exits.
func dropSlot(ctx context.Context, srcURL, id string, tables []string) {
	names := make([]sluice.TableName, len(tables))
	for i, t := range tables {
		names[i] = sluice.TableName{Schema: "public", Name: t}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := daemon.UninstallLogical(ctx, srcURL, id, names)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "    drop the replication slot of stream %s: %v\n", id, err)
			return
		}
		time.Sleep(200 * time.Millisecond) // retry interval while the slot is still active
	}
}

// logWatch reads sluice's JSON log as it grows.
type logWatch struct {
	path      string
	off       int64
	partial   []byte
	lines     []string // the last few, for error reports
	copyStart time.Time
	copyDone  time.Time
	handoff   time.Time
	copied    int64 // rows in the "initial copy done" line, -1 until seen
	fatal     string
	init      bool
}

func (w *logWatch) scan() {
	if !w.init {
		w.copied, w.init = -1, true
	}
	f, err := os.Open(w.path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(w.off, io.SeekStart); err != nil {
		return
	}
	b, err := io.ReadAll(f)
	if err != nil || len(b) == 0 {
		return
	}
	w.off += int64(len(b))
	b = append(w.partial, b...)
	last := bytes.LastIndexByte(b, '\n')
	if last < 0 {
		w.partial = b
		return
	}
	w.partial = append([]byte(nil), b[last+1:]...)
	sc := bufio.NewScanner(bytes.NewReader(b[:last+1]))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		w.lines = append(w.lines, line)
		if len(w.lines) > 50 {
			w.lines = w.lines[len(w.lines)-50:]
		}
		var rec struct {
			Time  time.Time `json:"time"`
			Level string    `json:"level"`
			Msg   string    `json:"msg"`
			Rows  *int64    `json:"rows"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec.Time.IsZero() {
			rec.Time = time.Now()
		}
		switch {
		case rec.Msg == msgCopyStart:
			w.copyStart = rec.Time
		case rec.Msg == msgCopyDone:
			w.copyDone = rec.Time
			if rec.Rows != nil {
				w.copied = *rec.Rows
			}
		case rec.Msg == msgHandoff:
			w.handoff = rec.Time
		case rec.Level == "ERROR" && w.fatal == "":
			w.fatal = rec.Msg
		}
	}
}

func (w *logWatch) tail(n int) string {
	l := w.lines
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return "    " + strings.Join(l, "\n    ")
}

// vmHWM is a process's peak resident set size in bytes, 0 if unknown.
func vmHWM(pid int) uint64 {
	return procStatusKB(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:") << 10
}

// maskArgs hides the passwords of the URLs among a command's arguments.
func maskArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.Contains(a, "://") {
			a = endpoint.MaskURL(a)
		}
		out[i] = a
	}
	return out
}

// ---- baselines --------------------------------------------------------------

// pipeline runs a | b and returns the wall time and each one's peak RSS
// (its process group's, sampled).
func pipeline(ctx context.Context, a, b *exec.Cmd) (time.Duration, [2]uint64, error) {
	var rss [2]uint64
	r, w, err := os.Pipe()
	if err != nil {
		return 0, rss, err
	}
	var errA, errB bytes.Buffer
	a.Stdout, a.Stderr = w, &errA
	b.Stdin, b.Stdout, b.Stderr = r, io.Discard, &errB
	for _, c := range []*exec.Cmd{a, b} {
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	t0 := time.Now()
	if err := b.Start(); err != nil {
		r.Close()
		w.Close()
		return 0, rss, fmt.Errorf("start %s: %w", b.Path, err)
	}
	r.Close()
	if err := a.Start(); err != nil {
		w.Close()
		_ = b.Wait()
		return 0, rss, fmt.Errorf("start %s: %w", a.Path, err)
	}
	w.Close()
	sa, sb := sampleGroupRSS(a.Process.Pid), sampleGroupRSS(b.Process.Pid)
	ea := a.Wait()
	eb := b.Wait()
	el := time.Since(t0)
	rss[0], rss[1] = sa(), sb()
	if ctx.Err() != nil {
		return el, rss, ctx.Err()
	}
	if ea != nil || eb != nil {
		return el, rss, fmt.Errorf("%s: %v: %s; %s: %v: %s", filepath.Base(a.Path), ea, lastLines(errA.String(), 5), filepath.Base(b.Path), eb, lastLines(errB.String(), 5))
	}
	return el, rss, nil
}

// sampleGroupRSS samples, every 20 ms, the summed VmRSS of the processes
// in process group pgid (a tool and the workers it forks) until the
// returned function is called, which returns the peak. wait4's ru_maxrss
// is no use here: a child exec'd from this Go process (vfork) is charged
// the bench's own RSS.
func sampleGroupRSS(pgid int) func() uint64 {
	stop := make(chan struct{})
	res := make(chan uint64, 1)
	go func() {
		var peak uint64
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, groupRSS(pgid))
			select {
			case <-stop:
				res <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(stop); return <-res }
}

func groupRSS(pgid int) uint64 {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var sum uint64
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …: comm may hold spaces, so fields
		// count from the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		sum += procStatusKB(filepath.Join(d, "status"), "VmRSS:") << 10
	}
	return sum
}

// procStatusKB is one "Name: N kB" field of a /proc/<pid>/status file.
func procStatusKB(path, field string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " / ")
}

func (ce *copyEnv) pgDumpRun(ctx context.Context, srcURL, proxyURL string) (copyResult, error) {
	res := copyResult{rows: ce.cc.totalRows()}
	for _, t := range []string{"pg_dump", "psql"} {
		if _, err := exec.LookPath(t); err != nil {
			res.skipped = t + " is not on PATH"
			return res, nil
		}
	}
	args := []string{"--data-only", "--no-password", "--dbname=" + srcURL}
	for _, t := range copyTableNames() {
		args = append(args, "-t", "public."+t)
	}
	a := exec.CommandContext(ctx, "pg_dump", args...)
	b := exec.CommandContext(ctx, "psql", "-X", "-q", "--no-password", "-v", "ON_ERROR_STOP=1", "--dbname="+proxyURL)
	el, rss, err := pipeline(ctx, a, b)
	if err != nil {
		return res, err
	}
	res.elapsed = el
	res.rss = rss[0] + rss[1]
	res.rssNote = fmt.Sprintf("pg_dump %s + psql %s", mib(rss[0]), mib(rss[1]))
	return res, nil
}

func (ce *copyEnv) myDumpRun(ctx context.Context, srcURL, proxyURL string) (copyResult, error) {
	res := copyResult{rows: ce.cc.totalRows()}
	for _, t := range []string{"mariadb-dump", "mariadb"} {
		if _, err := exec.LookPath(t); err != nil {
			res.skipped = t + " is not on PATH"
			return res, nil
		}
	}
	src, err := mysqlClientArgs(srcURL)
	if err != nil {
		return res, err
	}
	dst, err := mysqlClientArgs(proxyURL)
	if err != nil {
		return res, err
	}
	// --single-transaction: a consistent snapshot without locking the
	// tables, as sluice's copy reads one.
	a := exec.CommandContext(ctx, "mariadb-dump", append(append(src.flags, "--no-create-info", "--single-transaction", src.db), copyTableNames()...)...)
	a.Env = append(os.Environ(), "MYSQL_PWD="+src.password)
	b := exec.CommandContext(ctx, "mariadb", append(dst.flags, dst.db)...)
	b.Env = append(os.Environ(), "MYSQL_PWD="+dst.password)
	el, rss, err := pipeline(ctx, a, b)
	if err != nil {
		return res, err
	}
	res.elapsed = el
	res.rss = rss[0] + rss[1]
	res.rssNote = fmt.Sprintf("mariadb-dump %s + mariadb %s", mib(rss[0]), mib(rss[1]))
	return res, nil
}

type mysqlClient struct {
	flags    []string
	db       string
	password string
}

// mysqlClientArgs turns a mysql:// URL into the MariaDB clients' options
// (the password goes in MYSQL_PWD, not on the command line).
func mysqlClientArgs(raw string) (mysqlClient, error) {
	cfg, err := connstr.ParseMySQL(raw)
	if err != nil {
		return mysqlClient{}, err
	}
	host, port, ok := strings.Cut(cfg.Addr, ":")
	if !ok {
		return mysqlClient{}, fmt.Errorf("MariaDB address %q has no port", cfg.Addr)
	}
	return mysqlClient{
		flags:    []string{"--protocol=TCP", "--host=" + host, "--port=" + port, "--user=" + cfg.User},
		db:       cfg.DBName,
		password: cfg.Passwd,
	}, nil
}

func (ce *copyEnv) pgcopydbRun(ctx context.Context, srcURL, proxyURL string) (copyResult, error) {
	res := copyResult{rows: ce.cc.totalRows()}
	if ce.pgcopydbSkip == "" {
		if _, err := exec.LookPath("pgcopydb"); err != nil {
			ce.pgcopydbSkip = installPGCopyDB(ctx)
		}
	}
	if ce.pgcopydbSkip != "" {
		res.skipped = ce.pgcopydbSkip
		return res, nil
	}
	dir, err := os.MkdirTemp("", "sluice-bench-pgcopydb-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	var filters strings.Builder
	filters.WriteString("[include-only-table]\n")
	for _, t := range copyTableNames() {
		filters.WriteString("public." + t + "\n")
	}
	filterPath := filepath.Join(dir, "filters.ini")
	if err := os.WriteFile(filterPath, []byte(filters.String()), 0o600); err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, "pgcopydb", "copy", "table-data", "--source", srcURL, "--target", proxyURL,
		"--dir", filepath.Join(dir, "work"), "--table-jobs", strconv.Itoa(ce.cc.jobs), "--filters", filterPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start pgcopydb: %w", err)
	}
	sample := sampleGroupRSS(cmd.Process.Pid)
	err = cmd.Wait()
	res.elapsed = time.Since(t0)
	res.rss = sample()
	res.rssNote = "all its processes"
	if ce.cfg.verbose {
		fmt.Fprintf(os.Stderr, "    pgcopydb's output, last lines:\n    %s\n", strings.ReplaceAll(lastLines(out.String(), 20), " / ", "\n    "))
	}
	if err != nil {
		return res, fmt.Errorf("pgcopydb copy table-data: %w: %s", err, lastLines(out.String(), 8))
	}
	return res, nil
}

// installPGCopyDB tries the Debian package once and returns why pgcopydb
// is skipped, "" when it is now on PATH.
func installPGCopyDB(ctx context.Context) string {
	var tries [][]string
	if _, err := exec.LookPath("sudo"); err == nil {
		tries = append(tries, []string{"sudo", "-n", "apt-get", "install", "-y", "pgcopydb"})
	}
	tries = append(tries, []string{"apt-get", "install", "-y", "pgcopydb"})
	var why []string
	for _, t := range tries {
		fmt.Fprintf(os.Stderr, "    pgcopydb is not on PATH: %s\n", strings.Join(t, " "))
		out, err := exec.CommandContext(ctx, t[0], t[1:]...).CombinedOutput()
		if err == nil {
			if _, err := exec.LookPath("pgcopydb"); err == nil {
				return ""
			}
		}
		why = append(why, fmt.Sprintf("`%s`: %v: %s", strings.Join(t, " "), err, lastLines(string(out), 2)))
	}
	return "pgcopydb is not on PATH and could not be installed (" + strings.Join(why, "; ") + ")"
}

// ---- verification -------------------------------------------------------------

// verify checks every copied table on the target against the source.
func (ce *copyEnv) verify(ctx context.Context, srcPG bool, srcURL string, dstPG bool, dstURL string) (string, bool, error) {
	mode := ce.cc.verify
	if mode == "auto" {
		mode = "full"
		if ce.cc.rows > fullCompareRows {
			mode = "sums"
		}
	}
	var sides [2]dbtest.DB
	for i, side := range []struct {
		pg  bool
		url string
	}{{srcPG, srcURL}, {dstPG, dstURL}} {
		if side.pg {
			conn, err := connect(ctx, side.url)
			if err != nil {
				return "", false, err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			sides[i].PG = conn
		} else {
			db, err := myConnect(ctx, side.url)
			if err != nil {
				return "", false, err
			}
			defer db.Close()
			sides[i].My = db
		}
	}
	tables := copyTableNames()
	if mode == "full" {
		diffs, err := dbtest.CompareTables(ctx, sides[0], sides[1], tables...)
		if err != nil {
			return "", false, err
		}
		if !diffs.Equal() {
			fmt.Fprintf(os.Stderr, "    MISMATCH:\n%s\n", diffs)
			return "**MISMATCH** (CompareTables)", false, nil
		}
		return "equal (CompareTables)", true, nil
	}
	var bad []string
	for _, t := range tables {
		want, err := tableSums(ctx, sides[0], t)
		if err != nil {
			return "", false, err
		}
		got, err := tableSums(ctx, sides[1], t)
		if err != nil {
			return "", false, err
		}
		if want != got {
			fmt.Fprintf(os.Stderr, "    MISMATCH %s: source %v, target %v (count, sum id, sum k, sum md5)\n", t, want, got)
			bad = append(bad, t)
		}
	}
	if len(bad) > 0 {
		return "**MISMATCH** (count+sums: " + strings.Join(bad, ", ") + ")", false, nil
	}
	return "equal (count+sums)", true, nil
}

// tableSums is a table's row count, sum(id), sum(k) and the sum over rows
// of the first 32 bits of md5(c|pad), as decimal text: the same figures on
// both engines for the same rows, computed by the servers.
func tableSums(ctx context.Context, d dbtest.DB, table string) ([4]string, error) {
	var s [4]string
	if d.PG != nil {
		q := `SELECT count(*)::text, coalesce(sum(id), 0)::text, coalesce(sum(k), 0)::text,
	coalesce(sum(('x' || substr(md5(c || '|' || pad), 1, 8))::bit(32)::bigint), 0)::text FROM ` + pgx.Identifier{table}.Sanitize()
		err := d.PG.QueryRow(ctx, q).Scan(&s[0], &s[1], &s[2], &s[3])
		if err != nil {
			return s, fmt.Errorf("sums of %s: %w", table, err)
		}
		return s, nil
	}
	q := "SELECT CAST(COUNT(*) AS CHAR), CAST(COALESCE(SUM(id), 0) AS CHAR), CAST(COALESCE(SUM(k), 0) AS CHAR), " +
		"CAST(COALESCE(SUM(CAST(CONV(SUBSTR(MD5(CONCAT(c, '|', pad)), 1, 8), 16, 10) AS UNSIGNED)), 0) AS CHAR) FROM `" + table + "`"
	var ns [4]sql.NullString
	if err := d.My.QueryRowContext(ctx, q).Scan(&ns[0], &ns[1], &ns[2], &ns[3]); err != nil {
		return s, fmt.Errorf("sums of %s: %w", table, err)
	}
	for i := range ns {
		s[i] = ns[i].String
	}
	return s, nil
}

// ---- report -------------------------------------------------------------------

func rssText(r copyResult) string {
	if r.rss == 0 {
		return "?"
	}
	if r.rssNote != "" {
		return mib(r.rss) + " (" + r.rssNote + ")"
	}
	return mib(r.rss)
}

func findCopy(rs []copyResult, pair, tool string, workers int) (copyResult, bool) {
	for _, r := range rs {
		if r.pair == pair && r.tool == tool && (workers == 0 || r.workers == workers) && r.skipped == "" && r.ok {
			return r, true
		}
	}
	return copyResult{}, false
}

func renderCopy(cc copyConfig, rs []copyResult, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Initial copy (issue 11), %s (section took %s)\n\n", time.Now().Format("2006-01-02 15:04"), took.Round(time.Second))
	fmt.Fprintf(&b, "%d rows in `%s` (id bigint primary key, k int, c varchar(120), pad varchar(60)) plus %d in three small tables, each run into fresh empty target tables through the 96 ms WAN proxy (48 ms each way) in front of the target. "+
		"sluice: `%s sync start` in its default source mode (logical replication / binlog), timed from process start to its log line %q; its phases, from its log lines' times: start (process start to \"initial copy\": connections, preflight, snapshot, plan), rows (to \"initial copy done\"), hand-off (to the hand-off line: the stream's reader, start checkpoint, plan marked); peak RSS is its VmHWM just before SIGTERM. "+
		"Baselines: wall time of the pipeline or command; peak RSS is the peak of their processes' summed VmRSS, sampled every 20 ms (pages shared between a tool's forked processes counted once per process). One run each, on a shared, noisy machine.\n\n",
		cc.rows, copyBig, cc.totalRows()-int64(cc.rows), filepath.Base(cc.sluice), msgHandoff)
	fmt.Fprintln(&b, "| pair | tool | workers | rows | seconds | sluice's phases: start / rows / hand-off (s) | rows/s | rows/s of the rows phase | ratio | peak RSS | verified |")
	fmt.Fprintln(&b, "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, r := range rs {
		w := "—"
		if r.workers > 0 {
			w = strconv.Itoa(r.workers)
		}
		if r.skipped != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | — | — | — | — | — | — | — | skipped: %s |\n", copyPairTitles[r.pair], esc(r.tool), w, esc(r.skipped))
			continue
		}
		ratio := "—"
		if r.tool == toolSluice {
			var parts []string
			for _, base := range []string{toolPGDump, toolPGCopyDB, toolMyDump} {
				if o, ok := findCopy(rs, r.pair, base, 0); ok && o.rate() > 0 {
					parts = append(parts, fmt.Sprintf("%.2f× %s", r.rate()/o.rate(), base))
				}
			}
			if len(parts) > 0 {
				ratio = strings.Join(parts, "; ")
			}
		}
		v := r.verified
		if r.note != "" {
			v += " (" + r.note + ")"
		}
		phases, phaseRate := "—", "—"
		if r.copyDone > 0 {
			rowsPhase := r.copyDone - r.copyStart
			phases = fmt.Sprintf("%.2f / %.2f / %.2f", r.copyStart.Seconds(), rowsPhase.Seconds(), (r.elapsed - r.copyDone).Seconds())
			if rowsPhase > 0 {
				phaseRate = thousands(float64(r.rows) / rowsPhase.Seconds())
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.2f | %s | %s | %s | %s | %s | %s |\n", copyPairTitles[r.pair], esc(r.tool), w, r.rows, r.elapsed.Seconds(),
			phases, thousands(r.rate()), phaseRate, esc(ratio), esc(rssText(r)), esc(v))
	}

	mark := func(ok bool) string {
		if ok {
			return "✓"
		}
		return "**✗ under the goal**"
	}
	fmt.Fprintln(&b, "\n### Goals (issue 11)")
	fmt.Fprintln(&b)
	w0 := cc.workers[0]
	if s, ok := findCopy(rs, pairPGPG, toolSluice, w0); ok {
		fmt.Fprintf(&b, "* PostgreSQL → PostgreSQL, sluice, workers %d: **%s rows/s** (goal ≥ %s) %s\n", w0, thousands(s.rate()), thousands(goalPGRate), mark(s.rate() >= goalPGRate))
		for _, g := range []struct {
			tool string
			goal float64
		}{{toolPGDump, goalPGDump}, {toolPGCopyDB, goalPGCopyDB}} {
			if o, ok := findCopy(rs, pairPGPG, g.tool, 0); ok && o.rate() > 0 {
				fmt.Fprintf(&b, "* PostgreSQL → PostgreSQL, sluice / %s: **%.2f×** (%s vs %s rows/s; goal ≥ %.1f×) %s\n", g.tool, s.rate()/o.rate(), thousands(s.rate()), thousands(o.rate()), g.goal, mark(s.rate()/o.rate() >= g.goal))
			}
		}
	}
	if s, ok := findCopy(rs, pairMyMy, toolSluice, w0); ok {
		fmt.Fprintf(&b, "* MariaDB → MariaDB, sluice, workers %d: **%s rows/s** (goal ≥ %s) %s\n", w0, thousands(s.rate()), thousands(goalMyRate), mark(s.rate() >= goalMyRate))
		if o, ok := findCopy(rs, pairMyMy, toolMyDump, 0); ok && o.rate() > 0 {
			fmt.Fprintf(&b, "* MariaDB → MariaDB, sluice / %s: **%.2f×** (%s vs %s rows/s; goal ≥ %.1f×) %s\n", toolMyDump, s.rate()/o.rate(), thousands(s.rate()), thousands(o.rate()), goalMyDump, mark(s.rate()/o.rate() >= goalMyDump))
		}
	}
	for _, r := range rs {
		if r.tool == toolSluice && r.skipped == "" && r.rss > 0 {
			fmt.Fprintf(&b, "* %s, sluice, workers %d: peak RSS **%s** (goal ≤ %s) %s\n", copyPairTitles[r.pair], r.workers, mib(r.rss), mib(goalRSS), mark(r.rss <= goalRSS))
		}
	}
	var sweep []copyResult
	for _, r := range rs {
		if r.pair == pairPGPG && r.tool == toolSluice && r.skipped == "" {
			sweep = append(sweep, r)
		}
	}
	if len(sweep) > 1 {
		fmt.Fprintln(&b, "\n### PostgreSQL → PostgreSQL, sluice --copy-workers")
		fmt.Fprintln(&b, "\n| workers | seconds | rows/s | rows/s of the rows phase | peak RSS |")
		fmt.Fprintln(&b, "|---:|---:|---:|---:|---:|")
		slices.SortFunc(sweep, func(a, b copyResult) int { return a.workers - b.workers })
		for _, r := range sweep {
			phaseRate := "—"
			if d := r.copyDone - r.copyStart; r.copyDone > 0 && d > 0 {
				phaseRate = thousands(float64(r.rows) / d.Seconds())
			}
			fmt.Fprintf(&b, "| %d | %.2f | %s | %s | %s |\n", r.workers, r.elapsed.Seconds(), thousands(r.rate()), phaseRate, mib(r.rss))
		}
	}
	fmt.Fprintln(&b)
	return b.String()
}
