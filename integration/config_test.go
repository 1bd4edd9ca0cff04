package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
)

// withoutPassword strips the password from a URL, returning both.
func withoutPassword(t *testing.T, raw string) (string, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	if pw == "" {
		t.Fatal("test URL has no password")
	}
	u.User = url.User(u.User.Username())
	return u.String(), pw
}

// TestConfigTwoStreamsOneFailing runs one daemon with a config file of two
// streams, as systemd would (a notify socket, one metrics endpoint): "good"
// applies a workload to a reachable target, "bad" has an unreachable
// target. The good stream converges; the bad one's error is in its status,
// /readyz and STATUS=, and it is started again after a backoff; READY=1 is
// sent although one stream failed; /metrics shows both streams, the good
// one's kill budget a quarter of the target's statement_timeout; SIGTERM
// ends the process with 0. The passwords — read from a file and from
// systemd credentials, never on the command line or in the file — appear
// in no log line, status file or `config check` output.
func TestConfigTwoStreamsOneFailing(t *testing.T) {
	bin := buildSluice(t)
	p := newPair(t, 2*time.Millisecond, schema...)
	installCapture(t, p.srcURL, schemaTables)
	src, srcPW := withoutPassword(t, p.srcURL)
	dst, dstPW := withoutPassword(t, p.dstURL)

	dir := t.TempDir()
	secrets := t.TempDir()
	creds := filepath.Join(secrets, "creds")
	for path, v := range map[string]string{
		filepath.Join(secrets, "source.pw"):          srcPW + "\n",
		filepath.Join(creds, "good.target-password"): dstPW + "\n",
		filepath.Join(creds, "target-password"):      "bad-target-secret-4711\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	secretsList := []string{srcPW, dstPW, "bad-target-secret-4711"}

	q := func(s string) string { return fmt.Sprintf("%q", s) }
	tables := make([]string, len(schemaTables))
	for i, tb := range schemaTables {
		tables[i] = q(tb)
	}
	// The target limits statements to 8 s: the kill budget is 2 s.
	var dbName string
	if err := p.dst.QueryRow(context.Background(), "SELECT current_database()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	exec1(t, p.dst, fmt.Sprintf("ALTER DATABASE %q SET statement_timeout = '8s'", dbName))
	ns := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", ns.path)
	addr := freePort(t)

	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	text := `# two streams, one target unreachable
state_dir = ` + q(dir) + `
metrics_listen = ` + q(addr) + `
source_mode = "trigger"
poll_interval = "50ms"
log_format = "json"
source = ` + q(src) + `
source_password_file = ` + q(filepath.Join(secrets, "source.pw")) + `
tables = [` + strings.Join(tables, ", ") + `]

[[stream]]
stream_id = "good"
target = ` + q(dst) + `
apply_batch_size = 50

[[stream]]
stream_id = "bad"
target = "postgres://postgres@127.0.0.1:1/nowhere?connect_timeout=2"
`
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}

	check, err := exec.Command(bin, "config", "check", "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, check)
	}
	for _, want := range []string{`stream_id = "good"`, `stream_id = "bad"`, "target password from systemd credential good.target-password", ":xxxxx@"} {
		if !strings.Contains(string(check), want) {
			t.Errorf("config check output lacks %q:\n%s", want, check)
		}
	}

	ctx := context.Background()
	r := rng(t)
	w := &workload{pool: p.src, workers: 2, txs: 60, ops: 5, pause: 5 * time.Millisecond}
	werr := make(chan error, 1)
	go func() { werr <- w.run(ctx, t, r) }()

	t0 := time.Now()
	proc := startSluice(t, bin, "sync", "start", "--config", cfg)
	// The bad stream fails at once and says so in its status.
	var bad daemon.Status
	deadline := time.Now().Add(15 * time.Second)
	for {
		all, _ := daemon.ReadStatus(dir)
		for _, s := range all {
			if s.Stream == "bad" && s.LastError != "" {
				bad = s
			}
		}
		if bad.Stream != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error recorded for stream bad: %+v; log:\n%s", all, proc.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if bad.Running || !strings.Contains(bad.LastError, "127.0.0.1") {
		t.Errorf("bad stream's status: running %v, error %q", bad.Running, bad.LastError)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	waitConverged(t, p, schemaTables, 20*time.Second, nil)
	// One stream applies, the other failed: the service is up (READY=1),
	// and the summary says what is wrong.
	ns.wait(t, proc, t0, "READY=1", 10*time.Second)
	st := ns.wait(t, proc, t0, "STATUS=1 of 2 streams applying; bad failed", 15*time.Second)
	t.Logf("%s", st.line)
	// The bad stream is started again after each backoff, so it is
	// failed or, for a moment, starting: not ready either way.
	if code, body := get(addr, "/readyz"); code != 503 || !strings.Contains(body, "good: ready") ||
		!(strings.Contains(body, "bad: failed") || strings.Contains(body, "bad: starting")) {
		t.Errorf("/readyz answered %d %q; want 503 naming good ready and bad failed (or starting again)", code, body)
	}
	m := scrape(t, addr)
	for sample, want := range map[string]float64{
		`sluice_up{stream="good"}`:                  1,
		`sluice_up{stream="bad"}`:                   0,
		`sluice_kill_budget_seconds{stream="good"}`: 2,
	} {
		if got, ok := m[sample]; !ok || got != want {
			t.Errorf("%s = %v (exported %v), want %v", sample, got, ok, want)
		}
	}
	if m[`sluice_checkpoint_applied_changes{stream="good"}`] == 0 {
		t.Errorf("no changes applied by stream good in /metrics")
	}
	// The bad stream is started again after its backoff (5 s).
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(proc.logText(), `"msg":"starting stream again","stream":"bad","attempt":2`); {
		if time.Now().After(deadline) {
			t.Fatalf("stream bad was not started again; log:\n%s", proc.logText())
		}
		time.Sleep(100 * time.Millisecond) // polling the log
	}
	select {
	case err := <-proc.done:
		proc.done <- err
		t.Fatalf("sluice exited (%v) although one stream still runs; log:\n%s", err, proc.logText())
	default:
	}
	// The status file is rewritten every second: wait for the good
	// stream's to show the changes applied.
	var good daemon.Status
	for deadline := time.Now().Add(5 * time.Second); ; {
		all, _ := daemon.ReadStatus(dir)
		for _, s := range all {
			if s.Stream == "good" {
				good = s
			}
		}
		if good.Running && good.Applied > 0 && good.LastError == "" && good.QueueLen == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("good stream's status: %+v", good)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A failed stream was reported loudly all along; stopping the service
	// is not a failure.
	sigterm(t, proc)
	ns.wait(t, proc, t0, "STOPPING=1", time.Second)

	logText := proc.logText()
	if !strings.Contains(logText, `"stream":"bad"`) || !strings.Contains(logText, "the other streams go on") {
		t.Errorf("log does not report the bad stream's failure:\n%s", logText)
	}
	statusFiles, _ := filepath.Glob(filepath.Join(dir, "status", "*.json"))
	out, _ := exec.Command(bin, "sync", "status", "--state-dir", dir, "--json").CombinedOutput()
	haystacks := map[string]string{"log": logText, "config check": string(check), "sync status": string(out)}
	for _, f := range statusFiles {
		b, _ := os.ReadFile(f)
		haystacks[f] = string(b)
	}
	for where, text := range haystacks {
		for _, pw := range secretsList {
			if strings.Contains(text, pw) {
				t.Errorf("%s contains a password:\n%s", where, text)
			}
		}
	}
	t.Logf("sync status:\n%s", out)
}
