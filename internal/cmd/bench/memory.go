package main

// The memory section (issue 34): sluice's peak memory streaming three
// large source transactions live, over a 96 ms link, at default settings
// (and --kill-budget 1s): an INSERT of N rows (id int primary key, v text,
// n int), an UPDATE of all of them, a DELETE of half, each one
// transaction, for N of 1,000,000 and 5,000,000 by default, on
// PostgreSQL logical → PostgreSQL and MariaDB binlog → MariaDB. Each run
// reports the process's peak RSS (VmHWM, read before SIGTERM), the peak Go
// heap `sync status` showed (sampled every 250 ms), how long after the
// last source commit the target was equal, and the independent check of
// the tables (dbtest.CompareTables on PostgreSQL, CHECKSUM TABLE on
// MariaDB). The goal: peak RSS at most 150 MB whatever N, so memory is
// flat in the size of a transaction.

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

const (
	secMemory   = "memory"
	memoryTable = "big"
	// goalMemoryRSS is the bound on peak RSS at default settings.
	goalMemoryRSS = 150_000_000
)

// memoryConfig is the memory section's part of the command line.
type memoryConfig struct {
	rows       []int
	engines    []string
	rtt        time.Duration
	killBudget time.Duration
	timeout    time.Duration
	extra      []string
}

// memoryFlags registers the memory section's flags; the returned function
// checks and stores them once flag.Parse has run.
func memoryFlags(mc *memoryConfig) func() error {
	var rows, engines, extra string
	flag.StringVar(&rows, "memory-rows", "1000000,5000000", "memory section: rows of each of the three source transactions (INSERT of all, UPDATE of all, DELETE of half), comma-separated, one run each")
	flag.StringVar(&engines, "memory-engines", "postgres,mariadb", "memory section: engines to run, comma-separated: postgres, mariadb")
	flag.DurationVar(&mc.rtt, "memory-rtt", 96*time.Millisecond, "memory section: round-trip time of the proxy in front of the target")
	flag.DurationVar(&mc.killBudget, "memory-kill-budget", time.Second, "memory section: sluice's --kill-budget")
	flag.DurationVar(&mc.timeout, "memory-timeout", 30*time.Minute, "memory section: give up on one run after this")
	flag.StringVar(&extra, "memory-sluice-flags", "", "memory section: more flags for sluice sync start, space-separated (e.g. \"--max-queue-bytes 33554432\")")
	return func() error {
		mc.extra = strings.Fields(extra)
		for _, f := range strings.Split(rows, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 {
				return fmt.Errorf("-memory-rows: %q is not a row count of at least 2", f)
			}
			mc.rows = append(mc.rows, n)
		}
		if mc.rtt < 0 || mc.killBudget <= 0 || mc.timeout <= 0 {
			return errors.New("memory section: -memory-kill-budget and -memory-timeout must be positive, -memory-rtt not negative")
		}
		var err error
		mc.engines, err = parseEngines("-memory-engines", engines)
		return err
	}
}

// memoryRun is one engine streaming one size of the three transactions.
type memoryRun struct {
	engine   string
	rows     int
	write    time.Duration // the three source transactions
	toEqual  time.Duration // from the last source commit
	peakRSS  uint64
	peakHeap uint64
	verified bool
	note     string
}

func (e *env) benchMemory(ctx context.Context) ([]memoryRun, error) {
	mc := e.cfg.memory
	bin, err := filepath.Abs(e.cfg.copy.sluice)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("-sluice %s: %w (run `make build` first)", e.cfg.copy.sluice, err)
	}
	ne := &nativeEnv{env: e, sluice: bin, tables: memoryTable, nc: nativeConfig{timeout: mc.timeout}}
	var out []memoryRun
	for _, eng := range mc.engines {
		for _, n := range mc.rows {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			var r memoryRun
			if eng == "postgres" {
				e.stopMariaDB()
				r, err = ne.memoryRun(ctx, true, n)
			} else {
				e.stopPostgres()
				r, err = ne.memoryRun(ctx, false, n)
			}
			if err != nil {
				return out, fmt.Errorf("%s, %d rows: %w", eng, n, err)
			}
			v := "equal"
			if !r.verified {
				v = "**MISMATCH**"
			}
			fmt.Fprintf(os.Stderr, "    %s, %d rows: peak RSS %s, peak Go heap %s, equal %.1f s after the last commit, %s\n",
				r.engine, r.rows, mb(r.peakRSS), mb(r.peakHeap), r.toEqual.Seconds(), v)
			out = append(out, r)
		}
	}
	return out, nil
}

func mb(b uint64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }

// memoryRun streams the three transactions of n rows live from a fresh
// database through a proxy in front of the target.
func (ne *nativeEnv) memoryRun(ctx context.Context, pg bool, n int) (memoryRun, error) {
	res := memoryRun{engine: "MariaDB binlog → MariaDB", rows: n}
	start, stop := ne.mariadb, ne.stopMariaDB
	if pg {
		res.engine = "PostgreSQL logical → PostgreSQL"
		start, stop = ne.postgres, ne.stopPostgres
	}
	if err := start(ctx); err != nil {
		return res, err
	}
	defer stop()
	src, dst := ne.mySrc, ne.myDst
	if pg {
		src, dst = ne.pgSrc, ne.pgDst
	}
	name := ne.nextName()
	fmt.Fprintf(os.Stderr, "==> memory, %s: three transactions of %d rows (database %s)\n", res.engine, n, name)
	ddl := "CREATE TABLE big (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)"
	for _, srv := range []dbtest.Server{src, dst} {
		// MariaDB: sluice writes the source's database name on the target.
		if err := srv.CreateDatabase(ctx, name); err != nil {
			return res, err
		}
		defer srv.DropDatabase(context.WithoutCancel(ctx), name) //nolint:errcheck // cleanup only
		var err error
		if pg {
			err = execAll(ctx, srv.URL(name), ddl)
		} else {
			err = myExecAll(ctx, srv.URL(name), ddl)
		}
		if err != nil {
			return res, err
		}
	}
	srcURL, dstURL := src.URL(name), dst.URL(name)
	stateDir, err := os.MkdirTemp("", "sluice-bench-memory-")
	if err != nil {
		return res, fmt.Errorf("state dir: %w", err)
	}
	defer os.RemoveAll(stateDir)
	stream := name + "_mem"
	if pg {
		defer dropSlot(context.WithoutCancel(ctx), srcURL, stream, []string{memoryTable})
	}
	proxy, proxyURL, err := proxied(dst.Addr(), dstURL, ne.cfg.memory.rtt)
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	args := append([]string{"--from-now", "--kill-budget", ne.cfg.memory.killBudget.String()}, ne.cfg.memory.extra...)
	p, err := ne.startSluice(stream, stateDir, "sluice.log", srcURL, proxyURL, args...)
	if err != nil {
		return res, err
	}
	defer p.stop() //nolint:errcheck // the normal path stops it and checks
	for deadline := time.Now().Add(2 * time.Minute); !p.logged(`"msg":"streaming"`); {
		if err := p.failed(); err != nil {
			return res, err
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("sluice not streaming within 2 min; log:\n%s", p.lw.tail(15))
		}
		time.Sleep(20 * time.Millisecond) // polling the log, not waiting for replication
	}

	// The heap as sync status shows it, sampled while sluice runs.
	pid := p.cmd.Process.Pid
	var peakMu sync.Mutex
	var peakHeap uint64
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if st, err := daemon.ReadStatus(filepath.Join(stateDir, "state")); err == nil {
				for _, s := range st {
					if s.Memory != nil {
						peakMu.Lock()
						peakHeap = max(peakHeap, s.Memory.HeapBytes)
						peakMu.Unlock()
					}
				}
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { stopSampling(); <-sampled }()

	stmts := []string{
		fmt.Sprintf("INSERT INTO big SELECT seq, CONCAT(MD5(seq), MD5(seq+1)), seq FROM seq_1_to_%d", n),
		"UPDATE big SET n = n + 1, v = CONCAT(v, 'x')",
		"DELETE FROM big WHERE id % 2 = 0",
	}
	fingerprint := "SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(SUM(LENGTH(v)), 0) FROM big"
	if pg {
		stmts[0] = fmt.Sprintf("INSERT INTO big SELECT g, md5(g::text) || md5((g+1)::text), g FROM generate_series(1, %d) g", n)
		stmts[1] = "UPDATE big SET n = n + 1, v = v || 'x'"
	}
	var srcDB, dstDB *sql.DB
	query := func(ctx context.Context, u string, db *sql.DB) (string, error) {
		var a, b, c int64
		var err error
		if pg {
			conn, cerr := connect(ctx, u)
			if cerr != nil {
				return "", cerr
			}
			defer conn.Close(context.WithoutCancel(ctx))
			err = conn.QueryRow(ctx, fingerprint).Scan(&a, &b, &c)
		} else {
			err = db.QueryRowContext(ctx, fingerprint).Scan(&a, &b, &c)
		}
		return fmt.Sprintf("%d/%d/%d", a, b, c), err
	}
	if !pg {
		if srcDB, err = myConnect(ctx, srcURL); err != nil {
			return res, err
		}
		defer srcDB.Close()
		if dstDB, err = myConnect(ctx, dstURL); err != nil {
			return res, err
		}
		defer dstDB.Close()
	}
	t0 := time.Now()
	for _, q := range stmts {
		if pg {
			err = execAll(ctx, srcURL, q)
		} else {
			_, err = srcDB.ExecContext(ctx, q)
		}
		if err != nil {
			return res, fmt.Errorf("source: %s: %w", q, err)
		}
	}
	lastCommit := time.Now()
	res.write = lastCommit.Sub(t0)
	want, err := query(ctx, srcURL, srcDB)
	if err != nil {
		return res, fmt.Errorf("source: %w", err)
	}
	fmt.Fprintf(os.Stderr, "    source transactions committed in %.1f s\n", res.write.Seconds())
	// Timed by a cheap fingerprint (count and sums), confirmed by the
	// independent check of the whole table; a fingerprint that matches
	// while the check does not keeps the clock running.
	deadline := lastCommit.Add(ne.cfg.memory.timeout)
	for {
		got, err := query(ctx, dstURL, dstDB)
		if err == nil && got == want {
			at := time.Now()
			var ok bool
			if pg {
				ok, err = pgEqual(ctx, srcURL, dstURL, memoryTable)
			} else {
				ok, err = sameMyTables(ctx, srcURL, dstURL, memoryTable)
			}
			if err != nil {
				return res, err
			}
			if ok {
				res.toEqual, res.verified = at.Sub(lastCommit), true
				break
			}
		}
		if err := p.failed(); err != nil {
			res.note = err.Error()
			break
		}
		if time.Now().After(deadline) {
			res.note = fmt.Sprintf("not equal within %s (-memory-timeout)", ne.cfg.memory.timeout)
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.peakRSS = procStatusKB(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:") << 10
	if code, err := p.stop(); err != nil || code != 0 {
		res.note = strings.TrimPrefix(res.note+fmt.Sprintf("; exit %d after SIGTERM (%v)", code, err), "; ")
	}
	peakMu.Lock()
	res.peakHeap = peakHeap
	peakMu.Unlock()
	return res, nil
}

func renderMemory(mc memoryConfig, rs []memoryRun, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Memory through large source transactions (issue 34)\n\n")
	fmt.Fprintf(&b, "Three source transactions streamed live at default settings (--kill-budget %s, %s%s): an INSERT of N rows "+
		"(id int primary key, v text, n int), an UPDATE of all of them, a DELETE of half. Peak RSS is sluice's VmHWM; the Go heap is the "+
		"highest `sync status` showed (sampled every 250 ms); equal is timed from the last source commit to the target matching, "+
		"checked by an independent comparison (dbtest.CompareTables on PostgreSQL, CHECKSUM TABLE on MariaDB). Goal: peak RSS ≤ %s, whatever N. %s in all.\n\n",
		mc.killBudget, linkLabel(mc.rtt), strings.TrimSuffix(" "+strings.Join(mc.extra, " "), " "), mb(goalMemoryRSS), took.Round(time.Second))
	fmt.Fprintf(&b, "| source → target | rows per transaction | source writes | peak RSS | peak Go heap | equal after last commit | tables | goal |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range rs {
		check := "equal"
		if !r.verified {
			check = "**not equal**"
		}
		goal := "met"
		if r.peakRSS > goalMemoryRSS || !r.verified {
			goal = "**missed**"
		}
		if r.note != "" {
			check += " (" + r.note + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f s | %s | %s | %.1f s | %s | %s |\n", r.engine, thousands(float64(r.rows)),
			r.write.Seconds(), mb(r.peakRSS), mb(r.peakHeap), r.toEqual.Seconds(), check, goal)
	}
	return b.String()
}
