package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// notifyMsg is one line of a datagram sluice sent to $NOTIFY_SOCKET.
type notifyMsg struct {
	at   time.Time
	line string
}

// notifySocket is a unixgram socket standing in for systemd's.
type notifySocket struct {
	path string
	mu   sync.Mutex
	msgs []notifyMsg
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdn") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ns := &notifySocket{path: filepath.Join(dir, "notify")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: ns.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			now := time.Now()
			ns.mu.Lock()
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				if l != "" {
					ns.msgs = append(ns.msgs, notifyMsg{now, l})
				}
			}
			ns.mu.Unlock()
		}
	}()
	return ns
}

// since returns the messages received at or after t.
func (ns *notifySocket) since(t time.Time) []notifyMsg {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	var out []notifyMsg
	for _, m := range ns.msgs {
		if !m.at.Before(t) {
			out = append(out, m)
		}
	}
	return out
}

// wait waits for a message starting with prefix received at or after t.
func (ns *notifySocket) wait(t *testing.T, proc *sluiceProc, after time.Time, prefix string, within time.Duration) notifyMsg {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, m := range ns.since(after) {
			if strings.HasPrefix(m.line, prefix) {
				return m
			}
		}
		select {
		case err := <-proc.done:
			proc.done <- err
			t.Fatalf("sluice exited (%v) while waiting for %s; log:\n%s", err, prefix, proc.logText())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no %s within %v; log:\n%s", prefix, within, proc.logText())
	return notifyMsg{}
}

// pings returns the times of the WATCHDOG=1 messages in [from, to).
func (ns *notifySocket) pings(from, to time.Time) []time.Time {
	var out []time.Time
	for _, m := range ns.since(from) {
		if m.line == "WATCHDOG=1" && m.at.Before(to) {
			out = append(out, m.at)
		}
	}
	return out
}

const serviceDDL = `CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL)`

// startNotified starts `sluice sync start` as systemd would with
// Type=notify and WatchdogSec=2.
func startNotified(t *testing.T, p *pair, ns *notifySocket, extra ...string) (*sluiceProc, string) {
	t.Helper()
	bin := buildSluice(t)
	dir := t.TempDir()
	t.Setenv("NOTIFY_SOCKET", ns.path)
	t.Setenv("WATCHDOG_USEC", "2000000")
	args := append([]string{"sync", "start", "--source", p.srcURL, "--target", p.dstURL,
		"--tables", "public.items", "--state-dir", dir, "--stream-id", "svc",
		"--source-mode", "trigger", "--initial-copy", "off", "--poll-interval", "50ms", "--log-format", "json", "--log-level", "debug",
		"--kill-budget", "2s", "--shutdown-timeout", "5s"}, extra...)
	return startSluice(t, bin, args...), dir
}

// sigterm stops sluice with SIGTERM and fails the test unless it exits
// cleanly within 30 s.
func sigterm(t *testing.T, proc *sluiceProc) {
	t.Helper()
	sigtermWithin(t, proc, 30*time.Second)
}

func sigtermWithin(t *testing.T, proc *sluiceProc, within time.Duration) {
	t.Helper()
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-proc.done:
		proc.done <- err
		if err != nil {
			t.Fatalf("sluice exited with %v after SIGTERM; log:\n%s", err, proc.logText())
		}
	case <-time.After(within):
		t.Fatalf("sluice did not exit within %s of SIGTERM", within)
	}
}

// TestServiceNotify runs sluice as systemd would (Type=notify, a 2 s
// watchdog) and checks READY=1, STATUS=, WATCHDOG=1 and STOPPING=1 arrive.
func TestServiceNotify(t *testing.T) {
	p := newPair(t, 2*time.Millisecond, serviceDDL)
	installCapture(t, p.srcURL, []string{"items"})
	ns := listenNotify(t)
	t0 := time.Now()
	proc, _ := startNotified(t, p, ns)

	ready := ns.wait(t, proc, t0, "READY=1", 60*time.Second)
	t.Logf("READY=1 after %v", ready.at.Sub(t0).Round(time.Millisecond))
	if m := ns.since(t0); m[0].line == "WATCHDOG=1" {
		t.Fatalf("watchdog ping before READY=1: %v", m)
	}
	exec1(t, p.src, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 200) g`)
	waitConverged(t, p, []string{"public.items"}, 30*time.Second, nil)
	status := ns.wait(t, proc, ready.at.Add(time.Millisecond), "STATUS=", 10*time.Second)
	t.Logf("%s", status.line)
	if !strings.Contains(status.line, "applied") {
		t.Errorf("STATUS= line %q does not say what was applied", status.line)
	}
	// A 2 s watchdog wants pings well within 2 s, idle or not.
	from := time.Now()
	time.Sleep(3 * time.Second) // observation window for the pings
	pings := ns.pings(from, time.Now())
	if len(pings) < 4 {
		t.Fatalf("%d WATCHDOG=1 in 3 s with WatchdogSec=2; log:\n%s", len(pings), proc.logText())
	}
	if g := maxGap(from, pings, time.Now()); g > time.Second {
		t.Fatalf("watchdog pings %v apart on an idle, healthy stream", g)
	}
	term := time.Now()
	sigterm(t, proc)
	ns.wait(t, proc, term, "STOPPING=1", time.Second)
	t.Logf("%d pings in 3 s; STOPPING=1 and exit 0 after SIGTERM", len(pings))
}

// maxGap is the longest stretch in [from, to] without a ping.
func maxGap(from time.Time, pings []time.Time, to time.Time) time.Duration {
	var g time.Duration
	last := from
	for _, p := range append(pings, to) {
		g = max(g, p.Sub(last))
		last = p
	}
	return g
}

// TestWatchdogStopsWhenApplyLoopWedged wedges the apply loop (another
// session holds an ACCESS EXCLUSIVE lock on the target table, no
// transaction killer) and checks the watchdog pings stop while it is
// wedged — so systemd would restart sluice — and resume once it is free.
func TestWatchdogStopsWhenApplyLoopWedged(t *testing.T) {
	p := newPair(t, 2*time.Millisecond, serviceDDL)
	installCapture(t, p.srcURL, []string{"items"})
	ns := listenNotify(t)
	t0 := time.Now()
	proc, _ := startNotified(t, p, ns)
	ns.wait(t, proc, t0, "READY=1", 60*time.Second)
	ns.wait(t, proc, time.Now(), "WATCHDOG=1", 2*time.Second)

	ctx := context.Background()
	lock, err := p.dst.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE items IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	exec1(t, p.src, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 50) g`)
	wedged := time.Now()
	time.Sleep(4 * time.Second) // the wedge lasts twice WatchdogSec
	until := time.Now()
	pings := ns.pings(wedged, until)
	gap := maxGap(wedged, pings, until)
	t.Logf("while wedged %v: %d pings, longest gap %v", until.Sub(wedged).Round(time.Millisecond), len(pings), gap.Round(time.Millisecond))
	if gap <= 2*time.Second {
		t.Fatalf("watchdog pings went on while the apply loop was wedged (longest gap %v ≤ WatchdogSec 2 s): %v", gap, pings)
	}
	var n int
	if err := p.dst.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE relation = 'items'::regclass AND NOT granted`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no session waits for the lock: the apply loop was not wedged on it")
	}

	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	m := ns.wait(t, proc, freed, "WATCHDOG=1", 2*time.Second)
	t.Logf("pings resumed %v after the lock was released", m.at.Sub(freed).Round(time.Millisecond))
	waitConverged(t, p, []string{"public.items"}, 30*time.Second, nil)
	sigterm(t, proc)
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrape fetches /metrics and returns each sample, keyed by its name and
// labels as printed.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

func get(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitHTTP polls path until it answers code.
func waitHTTP(t *testing.T, proc *sluiceProc, addr, path string, code int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var got int
	var body string
	for time.Now().Before(deadline) {
		if got, body = get(addr, path); got == code {
			return body
		}
		select {
		case err := <-proc.done:
			proc.done <- err
			t.Fatalf("sluice exited (%v) while waiting for %s %d; log:\n%s", err, path, code, proc.logText())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s answered %d %q, not %d, for %v", path, got, body, code, within)
	return ""
}

func applied(m map[string]float64, kind string) float64 {
	return m[fmt.Sprintf(`sluice_changes_applied_total{kind=%q,stream="svc",table="public.items"}`, kind)]
}

// TestMetricsDuringSync scrapes /metrics during an end-to-end sync: the
// applied counters move and match the changes written, by kind; /readyz
// fails while the target is unreachable and recovers when it returns.
func TestMetricsDuringSync(t *testing.T) {
	p := newPair(t, 2*time.Millisecond, serviceDDL)
	installCapture(t, p.srcURL, []string{"items"})
	ns := listenNotify(t)
	addr := freePort(t)
	t0 := time.Now()
	proc, _ := startNotified(t, p, ns, "--metrics-listen", addr)
	waitHTTP(t, proc, addr, "/healthz", 200, 30*time.Second)
	ns.wait(t, proc, t0, "READY=1", 60*time.Second)
	t.Logf("/readyz: %s", waitHTTP(t, proc, addr, "/readyz", 200, 10*time.Second))

	// ~400 inserts, ~150 updates, ~60 deletes, in many transactions.
	ctx := context.Background()
	var prev float64
	moved := 0
	var ins, upd, del int
	run := func(n *int, q string, args ...any) {
		t.Helper()
		tag, err := p.src.Exec(ctx, q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		*n += int(tag.RowsAffected())
	}
	for i := range 40 {
		run(&ins, `INSERT INTO items SELECT g, 'v' || g FROM generate_series($1::bigint * 10 + 1, $1::bigint * 10 + 10) g`, i)
		if i%4 == 3 {
			run(&upd, `UPDATE items SET v = v || 'u' WHERE id > $1::bigint * 10 - 15 AND id <= $1::bigint * 10`, i)
			run(&del, `DELETE FROM items WHERE id IN ($1::bigint * 10 - 20, $1::bigint * 10 - 19, $1::bigint * 10 - 18, $1::bigint * 10 - 17, $1::bigint * 10 - 16, $1::bigint * 10 - 30)`, i)
		}
		if i%10 == 9 {
			time.Sleep(300 * time.Millisecond) // let batches commit between scrapes: workload shaping
			if v := applied(scrape(t, addr), "insert"); v > prev {
				moved++
				prev = v
			}
		}
	}
	waitConverged(t, p, []string{"public.items"}, 30*time.Second, nil)
	if moved < 3 {
		t.Errorf("the applied counter moved in %d of 4 scrapes during the sync", moved)
	}
	var m map[string]float64
	want := float64(ins + upd + del)
	deadline := time.Now().Add(5 * time.Second)
	for {
		m = scrape(t, addr)
		if applied(m, "insert")+applied(m, "update")+applied(m, "delete") == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("applied: %v inserts, %v updates, %v deletes; written %d/%d/%d; checkpoint %v; transactions %v; lanes %v; rtt %v s",
		applied(m, "insert"), applied(m, "update"), applied(m, "delete"), ins, upd, del,
		m[`sluice_checkpoint_applied_changes{stream="svc"}`], m[`sluice_transactions_total{outcome="commit",stream="svc"}`],
		m[`sluice_lanes{stream="svc"}`], m[`sluice_rtt_seconds{stream="svc"}`])
	if applied(m, "insert") != float64(ins) || applied(m, "update") != float64(upd) || applied(m, "delete") != float64(del) {
		t.Errorf("applied counters by kind %v/%v/%v, want %d/%d/%d", applied(m, "insert"), applied(m, "update"), applied(m, "delete"), ins, upd, del)
	}
	if c := m[`sluice_checkpoint_applied_changes{stream="svc"}`]; c != want {
		t.Errorf("sluice_checkpoint_applied_changes %v, want %v", c, want)
	}
	for _, name := range []string{`sluice_up{stream="svc"}`, `sluice_kill_budget_seconds{stream="svc"}`, `sluice_lanes{stream="svc"}`,
		`sluice_transaction_duration_seconds_count{outcome="commit",stream="svc"}`, `sluice_last_checkpoint_timestamp_seconds{stream="svc"}`,
		`sluice_memory_bytes{kind="heap"}`, `sluice_memory_bytes{kind="go"}`, `sluice_memory_bytes{kind="rss"}`, `sluice_memory_bytes{kind="peak_rss"}`} {
		if m[name] <= 0 {
			t.Errorf("%s = %v, want > 0", name, m[name])
		}
	}
	for _, name := range []string{`sluice_stalled{stream="svc"}`, `sluice_queue_bytes{stream="svc"}`, `sluice_kills_total{stream="svc"}`,
		`sluice_retries_total{stream="svc"}`, `sluice_apply_lag_seconds{stream="svc"}`, `sluice_fitted_per_change_seconds{stream="svc"}`, `sluice_batch_size{stream="svc"}`} {
		if _, ok := m[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	if _, ok := m[`sluice_transaction_duration_seconds_bucket{outcome="commit",stream="svc",le="4"}`]; !ok {
		t.Errorf("no histogram bucket at twice the 2 s kill budget")
	}

	// The target becomes unreachable while the source is written.
	wctx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		for i := 1000; wctx.Err() == nil; i++ {
			if _, err := p.src.Exec(wctx, `INSERT INTO items VALUES ($1, 'w')`, i); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	p.proxy.SetRefuse(true)
	p.proxy.DropConnections()
	down := time.Now()
	why := waitHTTP(t, proc, addr, "/readyz", 503, 15*time.Second)
	t.Logf("/readyz 503 %v after the target went away: %s", time.Since(down).Round(time.Millisecond), why)
	time.Sleep(time.Second) // the outage goes on a little
	p.proxy.SetRefuse(false)
	up := time.Now()
	why = waitHTTP(t, proc, addr, "/readyz", 200, 20*time.Second)
	t.Logf("/readyz 200 %v after the target came back: %s", time.Since(up).Round(time.Millisecond), why)
	stopWrites()
	<-wdone
	waitConverged(t, p, []string{"public.items"}, 30*time.Second, nil)
	m2 := scrape(t, addr)
	if r := m2[`sluice_retries_total{stream="svc"}`]; r == 0 {
		t.Errorf("no retries counted over the outage")
	}
	if v := applied(m2, "insert"); v <= applied(m, "insert") {
		t.Errorf("insert counter did not move after the outage: %v", v)
	}
	sigterm(t, proc)
}
