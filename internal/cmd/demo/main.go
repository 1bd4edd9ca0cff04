// Command demo shows sluice's main job on a fresh machine (`make demo`): it
// starts a throwaway PostgreSQL source and target, puts a 96 ms WAN link in
// front of the target, installs capture with `sluice source install`, runs
// a concurrent workload, streams it with the real `sluice sync start`
// until the target's checksums equal the source's, and then applies the
// same kind of backlog per row and pipelined over the same link to show
// the difference. Everything it starts is removed on exit, also on Ctrl-C.
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
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

const oneWay = 48 * time.Millisecond

var schema = []string{
	`CREATE TABLE accounts (
		id bigint PRIMARY KEY,
		owner text NOT NULL,
		balance numeric(14,2) NOT NULL,
		updated_at timestamptz NOT NULL)`,
	`CREATE TABLE order_lines (
		order_id integer NOT NULL,
		line_no smallint NOT NULL,
		sku varchar(32) NOT NULL,
		qty integer,
		price numeric(10,2),
		PRIMARY KEY (order_id, line_no))`,
	`CREATE TABLE events (
		id bigint PRIMARY KEY,
		kind text NOT NULL,
		payload jsonb,
		tags text[],
		ref uuid,
		ok boolean,
		happened timestamptz NOT NULL)`,
}

var tables = []string{"public.accounts", "public.order_lines", "public.events"}

type config struct {
	sluice         string
	workers        int
	txPerWorker    int
	perRowChanges  int
	pipelineChange int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.sluice, "sluice", "bin/sluice", "path of the sluice binary (make demo builds it)")
	flag.IntVar(&cfg.workers, "workers", 8, "concurrent source sessions in the workload")
	flag.IntVar(&cfg.txPerWorker, "tx", 50, "transactions per workload session (~8 changes each)")
	flag.IntVar(&cfg.perRowChanges, "per-row-changes", 300, "backlog for the per-row run (~10 changes/s at 96 ms)")
	flag.IntVar(&cfg.pipelineChange, "pipelined-changes", 50000, "backlog for the pipelined run")
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

func run(ctx context.Context, cfg config) (err error) {
	bin, err := filepath.Abs(cfg.sluice)
	if err != nil {
		return fmt.Errorf("-sluice: %w", err)
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("-sluice %s: %w (run `make build` first)", cfg.sluice, err)
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

	say("starting throwaway PostgreSQL source…")
	src, err := dbtest.StartPostgres(ctx)
	if err != nil {
		return fmt.Errorf("start source: %w", err)
	}
	defer src.Stop()
	say("starting throwaway PostgreSQL target…")
	dst, err := dbtest.StartPostgres(ctx)
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

	d := &demo{bin: bin, work: work, src: src, dst: dst, proxy: proxy}
	if err := d.mainRun(ctx, cfg); err != nil {
		return err
	}
	return d.compare(ctx, cfg)
}

type demo struct {
	bin, work string
	src, dst  *dbtest.Postgres
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

func (d *demo) mainRun(ctx context.Context, cfg config) error {
	srcURL, proxyURL, dstURL, err := d.urls(ctx, "shop")
	if err != nil {
		return err
	}
	say("creating tables %s on both (order_lines has a composite key; events has jsonb, text[], uuid, boolean)", strings.Join(tables, ", "))
	for _, u := range []string{srcURL, dstURL} {
		if err := execAll(ctx, u, schema...); err != nil {
			return err
		}
	}
	say("installing capture on the source: sluice source install --source %s --tables %s", mask(srcURL), strings.Join(tables, ","))
	out, err := exec.CommandContext(ctx, d.bin, "source", "install", "--source", srcURL, "--tables", strings.Join(tables, ",")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("sluice source install: %w\n%s", err, out)
	}
	fmt.Print(indent(string(out)))

	stateDir := filepath.Join(d.work, "state")
	logPath := filepath.Join(d.work, "sluice.log")
	say("running a workload on the source: %d concurrent sessions × %d transactions of inserts, updates and deletes", cfg.workers, cfg.txPerWorker)
	wl := make(chan workloadResult, 1)
	go func() { wl <- workload(ctx, srcURL, cfg.workers, cfg.txPerWorker) }()

	say("starting sluice while the workload runs: sluice sync start --source %s --target %s --tables %s --state-dir %s",
		mask(srcURL), mask(proxyURL), strings.Join(tables, ","), stateDir)
	say("sluice's log: %s", logPath)
	p, err := startSluice(d.bin, logPath, "sync", "start", "--source", srcURL, "--target", proxyURL,
		"--tables", strings.Join(tables, ","), "--state-dir", stateDir, "--log-format", "text")
	if err != nil {
		return err
	}
	defer p.stop(10 * time.Second)

	r := <-wl
	if r.err != nil {
		return fmt.Errorf("workload: %w", r.err)
	}
	say("workload done: %d changes in %d transactions in %.1f s", r.changes, r.txs, r.elapsed.Seconds())

	say("waiting for the target to catch up (comparing per-table checksums: row count + md5 over rows in primary-key order)…")
	start := time.Now()
	sums, ok, err := waitConverged(ctx, srcURL, dstURL, 2*time.Minute, p)
	if err != nil {
		return err
	}
	printSums(sums)
	if !ok {
		return errors.New("the target did not converge to the source within 2 minutes: checksums differ (see the table above and " + logPath + ")")
	}
	say("target caught up %.1f s after the workload ended; every table matches", time.Since(start).Seconds())

	time.Sleep(1100 * time.Millisecond) // let the status file show the final batch
	say("sluice sync status --state-dir %s", stateDir)
	out, err = exec.CommandContext(ctx, d.bin, "sync", "status", "--state-dir", stateDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("sluice sync status: %w\n%s", err, out)
	}
	fmt.Print(indent(string(out)))

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
func (d *demo) compare(ctx context.Context, cfg config) error {
	say("per-row vs pipelined on the same %v link: a backlog of inserts, updates and deletes, applied by a fresh stream to fresh tables", 2*oneWay)
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
	}{{"per-row", cfg.perRowChanges}, {"pipelined", cfg.pipelineChange}} {
		db := "cmp_" + strings.ReplaceAll(m.mode, "-", "_")
		srcURL, proxyURL, dstURL, err := d.urls(ctx, db)
		if err != nil {
			return err
		}
		if err := backlog(ctx, d.bin, srcURL, dstURL, m.changes); err != nil {
			return fmt.Errorf("%s backlog: %w", m.mode, err)
		}
		stateDir := filepath.Join(d.work, "state-"+m.mode)
		logPath := filepath.Join(d.work, "sluice-"+m.mode+".log")
		say("%s: %d changes waiting in the source changelog; sluice sync start --apply-mode %s --stream-id %s (log: %s)", m.mode, m.changes, m.mode, m.mode, logPath)
		p, err := startSluice(d.bin, logPath, "sync", "start", "--source", srcURL, "--target", proxyURL,
			"--tables", "public.items", "--state-dir", stateDir, "--stream-id", m.mode, "--apply-mode", m.mode,
			"--log-format", "json", "--poll-interval", "50ms")
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
		sums, ok, err := compareSums(ctx, srcURL, dstURL, []string{"public.items"})
		if err != nil {
			return err
		}
		if !ok {
			printSums(sums)
			return fmt.Errorf("%s: target differs from the source after the backlog was applied", m.mode)
		}
		secs := st.LastCommit.Sub(began).Seconds()
		r := row{mode: m.mode, changes: m.changes, secs: secs, rate: float64(st.Applied) / secs, batch: st.BatchSize}
		say("%s: %d changes in %.1f s = %.0f changes/s, checksums match", m.mode, st.Applied, r.secs, r.rate)
		rows = append(rows, r)
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "apply mode\tRTT\tchanges\tseconds\tchanges/s\tfinal batch\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%v\t%d\t%.1f\t%.0f\t%d\t\n", r.mode, 2*oneWay, r.changes, r.secs, r.rate, r.batch)
	}
	tw.Flush()
	if len(rows) == 2 && rows[0].rate > 0 {
		fmt.Printf("\npipelined is %.0f× per-row on the same %v link\n", rows[1].rate/rows[0].rate, 2*oneWay)
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
func backlog(ctx context.Context, bin, srcURL, dstURL string, n int) error {
	ddl := `CREATE TABLE items (id bigint PRIMARY KEY, qty integer NOT NULL, label text NOT NULL,
		price numeric(12,2), at timestamptz NOT NULL)`
	for _, u := range []string{srcURL, dstURL} {
		if err := execAll(ctx, u, ddl, insertRange(1, n, 0)); err != nil {
			return err
		}
	}
	out, err := exec.CommandContext(ctx, bin, "source", "install", "--source", srcURL, "--tables", "public.items").CombinedOutput()
	if err != nil {
		return fmt.Errorf("sluice source install: %w\n%s", err, out)
	}
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	nextIns, nextUpd, nextDel := n+1, 1, n*3/10+1
	for done := 0; done < n; {
		chunk := min(100, n-done)
		ins, upd := chunk/2, chunk*3/10
		del := chunk - ins - upd
		stmts := []string{
			insertRange(nextIns, nextIns+ins-1, 1),
			fmt.Sprintf(`UPDATE items SET qty = qty + 1, label = label || '+', at = at + interval '1 hour' WHERE id BETWEEN %d AND %d`, nextUpd, nextUpd+upd-1),
			fmt.Sprintf(`DELETE FROM items WHERE id BETWEEN %d AND %d`, nextDel, nextDel+del-1),
		}
		if _, err := conn.Exec(ctx, "BEGIN;"+strings.Join(stmts, ";")+";COMMIT"); err != nil {
			return fmt.Errorf("write backlog: %w", err)
		}
		nextIns, nextUpd, nextDel, done = nextIns+ins, nextUpd+upd, nextDel+del, done+chunk
	}
	return nil
}

func insertRange(lo, hi, gen int) string {
	return fmt.Sprintf(`INSERT INTO items (id, qty, label, price, at)
SELECT g, (g * 7 + %[3]d) %% 1000, 'item-' || g || '-' || %[3]d, ((g %% 10000) * 1.25)::numeric(12,2),
	timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(%[1]d, %[2]d) g`, lo, hi, gen)
}

type workloadResult struct {
	changes, txs int
	elapsed      time.Duration
	err          error
}

// workload runs concurrent sessions of short transactions: each inserts
// accounts, order lines and events, updates and deletes some of what it
// wrote earlier, and changes a primary key now and then.
func workload(ctx context.Context, srcURL string, workers, txs int) workloadResult {
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
			changes, err := session(ctx, srcURL, w, txs)
			mu.Lock()
			defer mu.Unlock()
			res.changes += changes
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

func session(ctx context.Context, srcURL string, w, txs int) (int, error) {
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	r := rand.New(rand.NewPCG(uint64(w), 42))
	base := int64(w+1) * 100_000_000
	var live []int64 // account ids this session has inserted and not deleted
	changes := 0
	kinds := []string{"login", "purchase", "refund", "signup"}
	for t := range txs {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return changes, fmt.Errorf("session %d: %w", w, err)
		}
		execTx := func(sql string, args ...any) error {
			tag, err := tx.Exec(ctx, sql, args...)
			if err != nil {
				return fmt.Errorf("session %d: %s: %w", w, firstLine(sql), err)
			}
			changes += int(tag.RowsAffected())
			return nil
		}
		err = func() error {
			for range 3 {
				id := base + int64(len(live)) + int64(t)*100
				if err := execTx(`INSERT INTO accounts VALUES ($1, $2, $3, now()) ON CONFLICT DO NOTHING`, id, fmt.Sprintf("owner-%d", id), r.IntN(1_000_000)/100); err != nil {
					return err
				}
				live = append(live, id)
			}
			order := int32(w*100_000 + t)
			if err := execTx(`INSERT INTO order_lines SELECT $1, n, 'SKU-' || n, n * 2, n * 9.99 FROM generate_series(1, 2) n`, order); err != nil {
				return err
			}
			if err := execTx(`INSERT INTO events VALUES ($1, $2, $3, $4, gen_random_uuid(), $5, now())`,
				base+int64(t), kinds[r.IntN(len(kinds))], fmt.Sprintf(`{"session": %d, "tx": %d, "note": "héllo"}`, w, t),
				[]string{"a", fmt.Sprint(t)}, r.IntN(2) == 0); err != nil {
				return err
			}
			if len(live) > 4 {
				i := r.IntN(len(live))
				if err := execTx(`UPDATE accounts SET balance = balance + 1.25, updated_at = now() WHERE id = $1`, live[i]); err != nil {
					return err
				}
				if err := execTx(`UPDATE order_lines SET qty = qty + 1 WHERE order_id = $1 AND line_no = 1`, order); err != nil {
					return err
				}
				if t%5 == 0 { // a primary-key update
					newID := live[i] + 500_000
					if err := execTx(`UPDATE accounts SET id = $2 WHERE id = $1`, live[i], newID); err != nil {
						return err
					}
					live[i] = newID
				}
				j := r.IntN(len(live))
				if err := execTx(`DELETE FROM accounts WHERE id = $1`, live[j]); err != nil {
					return err
				}
				live = append(live[:j], live[j+1:]...)
			}
			return nil
		}()
		if err != nil {
			tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the statement's error is the one to report
			return changes, err
		}
		if err := tx.Commit(ctx); err != nil {
			return changes, fmt.Errorf("session %d: commit: %w", w, err)
		}
	}
	return changes, nil
}

type tableSums struct {
	table    string
	src, dst dbtest.TableSum
}

func compareSums(ctx context.Context, srcURL, dstURL string, list []string) ([]tableSums, bool, error) {
	var out []tableSums
	ok := true
	for _, t := range list {
		s := tableSums{table: t}
		var err error
		if s.src, err = checksumAt(ctx, srcURL, t); err != nil {
			return nil, false, fmt.Errorf("source: %w", err)
		}
		if s.dst, err = checksumAt(ctx, dstURL, t); err != nil {
			return nil, false, fmt.Errorf("target: %w", err)
		}
		ok = ok && s.src == s.dst
		out = append(out, s)
	}
	return out, ok, nil
}

func checksumAt(ctx context.Context, u, table string) (dbtest.TableSum, error) {
	conn, err := connect(ctx, u)
	if err != nil {
		return dbtest.TableSum{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return dbtest.Checksum(ctx, conn, table)
}

// waitConverged polls the checksums until they match, the deadline passes
// or sluice exits.
func waitConverged(ctx context.Context, srcURL, dstURL string, within time.Duration, p *sluiceProc) ([]tableSums, bool, error) {
	deadline := time.Now().Add(within)
	for {
		sums, ok, err := compareSums(ctx, srcURL, dstURL, tables)
		if err != nil || ok || time.Now().After(deadline) {
			return sums, ok, err
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

func printSums(sums []tableSums) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    TABLE\tSOURCE ROWS\tSOURCE MD5\tTARGET ROWS\tTARGET MD5\t")
	for _, s := range sums {
		verdict := "OK"
		if s.src != s.dst {
			verdict = "DIFFERENT"
		}
		fmt.Fprintf(tw, "    %s\t%d\t%s\t%d\t%s\t%s\n", s.table, s.src.Rows, s.src.Sum, s.dst.Rows, s.dst.Sum, verdict)
	}
	tw.Flush()
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

func connect(ctx context.Context, u string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(u)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", mask(u), err)
	}
	cc.RuntimeParams["TimeZone"] = "UTC" // checksums compare text forms
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", mask(u), err)
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
