package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
)

// sluiceProc is a `sluice sync start` process.
type sluiceProc struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

func startSluice(t *testing.T, bin string, args ...string) *sluiceProc {
	t.Helper()
	return startSluiceEnv(t, bin, nil, args...)
}

// startSluiceEnv is startSluice with env (KEY=value) added to the
// process's environment: unlike t.Setenv, it leaves the test free to run
// in parallel.
func startSluiceEnv(t *testing.T, bin string, env []string, args ...string) *sluiceProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "sluice.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p := &sluiceProc{cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

func (p *sluiceProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// waitStatus polls `sync status` data until cond holds.
func waitStatus(t *testing.T, p *sluiceProc, dir string, within time.Duration, what string, cond func(daemon.Status) bool) daemon.Status {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("sluice exited (%v) while waiting for %s; log:\n%s", err, what, p.logText())
		default:
		}
		if st, err := daemon.ReadStatus(dir); err == nil && len(st) == 1 && cond(st[0]) {
			return st[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s; log:\n%s", within, what, p.logText())
	return daemon.Status{}
}

// TestKill9AndRestart kills a sluice process with SIGKILL several times
// mid-stream while the source is written, restarts it each time, and
// checks that the target converges to the source, that a second sluice on
// the same state dir is refused while one runs, and that SIGTERM exits 0.
func TestKill9AndRestart(t *testing.T) {
	t.Parallel() // kills only its own sluice processes; a trigger stream's state lives in its databases
	bin := buildSluice(t)
	p := newPair(t, 10*time.Millisecond, schema...)
	ctx := context.Background()
	installCapture(t, p.srcURL, schemaTables)
	r := rng(t)
	dir := t.TempDir()
	args := []string{"sync", "start", "--source", p.srcURL, "--target", p.dstURL,
		"--tables", strings.Join(schemaTables, ","), "--state-dir", dir, "--stream-id", "k9",
		"--source-mode", "trigger", "--apply-batch-size", "40", "--poll-interval", "50ms", "--log-format", "json"}

	w := &workload{pool: p.src, workers: 3, txs: 300, ops: 6, pause: 15 * time.Millisecond}
	werr := make(chan error, 1)
	go func() { werr <- w.run(ctx, t, r) }()

	var applied uint64
	kills := 0
	for i := 0; i < 5 && w.done.Load() < int64(w.workers*w.txs)*3/4; i++ {
		proc := startSluice(t, bin, args...)
		st := waitStatus(t, proc, dir, 60*time.Second, "progress after restart", func(s daemon.Status) bool {
			return s.Running && s.Applied > applied+40
		})
		applied = st.Applied
		if i == 0 {
			second := startSluice(t, bin, args...)
			select {
			case err := <-second.done:
				second.done <- err
				if err == nil || !strings.Contains(second.logText(), "is in use by another sluice (pid") {
					t.Fatalf("second sluice on the same state dir: exit %v, log:\n%s", err, second.logText())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("second sluice on the same state dir kept running")
			}
		}
		if err := proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-proc.done
		proc.done <- nil
		kills++
	}
	if kills < 2 {
		t.Fatalf("only %d kills landed while the workload ran", kills)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	proc := startSluice(t, bin, args...)
	waitConverged(t, p, schemaTables, 90*time.Second, nil)
	sigtermWithin(t, proc, 60*time.Second)
	out, err := exec.Command(bin, "sync", "status", "--state-dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "k9") || !strings.Contains(string(out), "stopped") {
		t.Fatalf("sync status: %v\n%s", err, out)
	}
	t.Logf("%d kills; status:\n%s", kills, out)
}
