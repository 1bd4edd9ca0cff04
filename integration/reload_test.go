package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitLog polls the process's log until it holds every one of want, each
// after the log's first `from` bytes.
func waitLog(t *testing.T, proc *sluiceProc, from int, within time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		text := proc.logText()
		if len(text) >= from {
			text = text[from:]
		}
		missing := ""
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		select {
		case err := <-proc.done:
			proc.done <- err
			t.Fatalf("sluice exited (%v) while waiting for %q in its log:\n%s", err, missing, proc.logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log within %v:\n%s", missing, within, proc.logText())
		}
		time.Sleep(50 * time.Millisecond) // polling the log
	}
}

// TestReloadOnHangup edits the configuration file of a running daemon and
// sends SIGHUP, as `systemctl reload` does:
//   - a table added to a stream and a changed kill budget restart only
//     that stream inside the process; the new table's changes then arrive;
//   - a changed source connection string (not just its password) is kept
//     as it was, with a warning that it needs a restart;
//   - a stream added to the file starts, and one removed stops;
//   - a file that does not parse changes nothing;
//
// and the process (same pid) keeps applying throughout and exits 0 on
// SIGTERM, the target equal to the source.
func TestReloadOnHangup(t *testing.T) {
	bin := buildSluice(t)
	p := newPair(t, 2*time.Millisecond, schema...)
	installCapture(t, p.srcURL, []string{"accounts"})
	dir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	head := fmt.Sprintf("state_dir = %q\nsource_mode = \"trigger\"\ninitial_copy = \"off\"\npoll_interval = \"50ms\"\nlog_format = \"json\"\nshutdown_timeout = \"5s\"\n", dir)
	mainStream := func(source, tables, budget string) string {
		return fmt.Sprintf("\n[[stream]]\nstream_id = \"main\"\nsource = %q\ntarget = %q\ntables = [%s]\nkill_budget = %q\n", source, p.dstURL, tables, budget)
	}
	extra := "\n[[stream]]\nstream_id = \"extra\"\nsource = \"postgres://postgres@127.0.0.1:1/nowhere?connect_timeout=1\"\ntarget = \"postgres://postgres@127.0.0.1:1/nowhere?connect_timeout=1\"\ntables = [\"public.accounts\"]\n"
	write(head + mainStream(p.srcURL, `"public.accounts"`, "2s"))

	proc := startSluice(t, bin, "sync", "start", "--config", cfg)
	pid := proc.cmd.Process.Pid
	exec1(t, p.src, `INSERT INTO accounts (id, owner, balance) SELECT g, 'o' || g, g FROM generate_series(1, 100) g`)
	waitConverged(t, p, []string{"public.accounts"}, 30*time.Second, nil)
	hup := func() int {
		t.Helper()
		mark := len(proc.logText())
		if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		return mark
	}

	// 1. A table more, another kill budget, a source with another
	// application_name (another connection string), and a new stream.
	otherSource := p.srcURL + "&application_name=elsewhere"
	if !strings.Contains(p.srcURL, "?") {
		otherSource = p.srcURL + "?application_name=elsewhere"
	}
	write(head + mainStream(otherSource, `"public.accounts", "public.order_lines"`, "3s") + extra)
	mark := hup()
	waitLog(t, proc, mark, 30*time.Second,
		`"msg":"reload: these settings take effect only when sluice restarts`, `"settings":"source"`,
		`"msg":"reload: restarting the stream with its new settings`, `"settings":"tables, kill_budget"`,
		`"msg":"reload: new stream; starting it","stream":"extra"`,
		`"msg":"streaming","stream":"main"`)
	// The order_lines capture was installed by the restarted stream.
	exec1(t, p.src, `INSERT INTO order_lines (order_id, line_no, sku, qty) SELECT g, 1, 's' || g, g FROM generate_series(1, 50) g`)
	exec1(t, p.src, `UPDATE accounts SET balance = balance + 1 WHERE id <= 50`)
	waitConverged(t, p, []string{"public.accounts", "public.order_lines"}, 30*time.Second, nil)
	if strings.Contains(proc.logText()[mark:], "elsewhere") {
		t.Errorf("the changed source connection string was used:\n%s", proc.logText()[mark:])
	}

	// 2. A file that does not parse changes nothing.
	write(head + "[[stream]\n")
	mark = hup()
	waitLog(t, proc, mark, 10*time.Second, `"msg":"SIGHUP: configuration not reloaded; the running streams go on unchanged"`)

	// 3. The extra stream leaves; main is unchanged and keeps running.
	write(head + mainStream(otherSource, `"public.accounts", "public.order_lines"`, "3s"))
	mark = hup()
	waitLog(t, proc, mark, 30*time.Second, `"msg":"reload: stream left the configuration; stopping it (its checkpoint stays in the state file)","stream":"extra"`)
	if tail := proc.logText()[mark:]; strings.Contains(tail, `"msg":"reload: restarting the stream`) {
		t.Errorf("an unchanged stream was restarted:\n%s", tail)
	}
	exec1(t, p.src, `DELETE FROM order_lines WHERE order_id <= 10`)
	exec1(t, p.src, `INSERT INTO accounts (id, owner, balance) SELECT g, 'n' || g, g FROM generate_series(101, 150) g`)
	waitConverged(t, p, []string{"public.accounts", "public.order_lines"}, 30*time.Second, nil)

	if proc.cmd.Process.Pid != pid {
		t.Fatalf("pid changed")
	}
	sigterm(t, proc)
}
