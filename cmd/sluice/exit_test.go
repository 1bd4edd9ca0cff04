package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/stream"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// buildSluice builds the command once per test binary run.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// testTimeout bounds each run of the binary: every case fails fast.
const testTimeout = 60 * time.Second

const unreachable = "postgres://sluice:pw@127.0.0.1:1/db?sslmode=disable&connect_timeout=5"

// TestExitCodes runs the built binary and checks the exit status and that
// stderr holds the error once, in one line where it is a usage error.
func TestExitCodes(t *testing.T) {
	bin := buildSluice(t)
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(badConfig, []byte("source = \"postgres://a@h/db\"\ntarget = \"postgres://a@h/db\"\ntables = [\"t\"]\nmax_lanes = 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "typo.toml")
	if err := os.WriteFile(typo, []byte("max_lane = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lockedDir := filepath.Join(dir, "locked")
	if err := os.MkdirAll(lockedDir, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(lockedDir, "sluice.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	failedDir := filepath.Join(dir, "failed")
	good := []string{"--source", unreachable, "--target", unreachable, "--tables", "t"}

	type tc struct {
		name   string
		args   []string
		code   int
		stderr string // a substring of stderr
	}
	cases := []tc{
		{"bad flag", []string{"sync", "start", "--max-lane", "3"}, 2, "unknown flag --max-lane: did you mean --max-lanes?"},
		{"duration without unit", []string{"sync", "start", "--kill-budget", "5"}, 2, `--kill-budget "5": a duration needs its unit: write 5s`},
		{"mistyped command", []string{"sync", "strat"}, 2, `did you mean "start"?`},
		{"bad value", append([]string{"sync", "start", "--state-dir", filepath.Join(dir, "s1"), "--max-lanes", "0"}, good...), 2, "--max-lanes 0"},
		{"controller before connect", append([]string{"sync", "start", "--state-dir", filepath.Join(dir, "s1"), "--controller", "pid"}, good...), 2, `--controller "pid"`},
		{"redis target", []string{"sync", "start", "--state-dir", filepath.Join(dir, "s1"), "--source", unreachable, "--target", "redis://:hunter2@cache:6379/0", "--tables", "t"}, 2, `"redis"`},
		{"config check bad file", []string{"config", "check", "--config", badConfig}, 2, "--max-lanes 0"},
		{"config check unknown key", []string{"config", "check", "--config", typo}, 2, `did you mean "max_lanes"?`},
		{"source install bad mode", []string{"source", "install", "--source", unreachable, "--tables", "t", "--source-mode", "wal"}, 2, `--source-mode "wal"`},
		{"unreachable target", append([]string{"sync", "start", "--state-dir", failedDir}, good...), 4, "cannot reach target"},
		{"status of a failed stream", []string{"sync", "status", "--state-dir", failedDir}, 1, "failed or stalled"},
		{"state dir locked", append([]string{"sync", "start", "--state-dir", lockedDir}, good...), 5, "in use by another sluice"},
		{"unreachable source for install", []string{"source", "install", "--source", unreachable, "--tables", "t"}, 3, ""},
		{"version flag", []string{"--version"}, 0, ""},
		{"missing required flag", []string{"diagnose", "rtt"}, 2, "sluice diagnose rtt needs --target"},
	}
	if os.Getenv("SLUICE_TEST_SKIP_DB") != "1" {
		pg := dbtest.PG(t)
		db := dbtest.PGDatabase(t)
		cases = append(cases, tc{"log-read stream without checkpoint, copy or --from-now", []string{"sync", "start", "--state-dir", filepath.Join(dir, "s2"), "--source", pg.URL(db), "--target", pg.URL(db), "--tables", "t", "--initial-copy", "off"}, 2, "--from-now"})
		cases = append(cases, tc{"initial copy to a missing target table", []string{"sync", "start", "--state-dir", filepath.Join(dir, "s4"), "--source", pg.URL(db), "--target", pg.URL(db), "--tables", "nosuch", "--create-tables", "off"}, 4, "nosuch"})
		cases = append(cases, tc{"initial copy with --from-now", []string{"sync", "start", "--state-dir", filepath.Join(dir, "s5"), "--source", pg.URL(db), "--target", pg.URL(db), "--tables", "t", "--initial-copy", "on", "--from-now"}, 2, "--initial-copy on and --from-now"})
		cases = append(cases, tc{"unreachable source", []string{"sync", "start", "--state-dir", filepath.Join(dir, "s3"), "--source", unreachable, "--target", pg.URL(db), "--tables", "t", "--from-now"}, 3, "127.0.0.1:1"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, c.args...)
			cmd.Env = append(os.Environ(), "SLUICE_LOG_FORMAT=text")
			var stderr, stdout bytes.Buffer
			cmd.Stderr, cmd.Stdout = &stderr, &stdout
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code {
				t.Fatalf("sluice %s: exit %d, want %d\nstderr: %s", strings.Join(c.args, " "), code, c.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), c.stderr)
			}
			if strings.Contains(stderr.String(), "hunter2") || strings.Contains(stderr.String(), ":pw@") {
				t.Errorf("stderr prints a password: %q", stderr.String())
			}
			if c.code == 2 && (strings.Count(strings.TrimSpace(stderr.String()), "\n") > 2 || strings.Contains(stderr.String(), "USAGE")) {
				t.Errorf("a usage error should be a line or two, not the help: %q", stderr.String())
			}
			if c.name == "status of a failed stream" && (!strings.Contains(stdout.String(), "FAILED") || !strings.Contains(stdout.String(), "—") || strings.Contains(stdout.String(), "0.0ms")) {
				t.Errorf("sync status of a stream that never connected: want FAILED and — for lag and RTT, got\n%s", stdout.String())
			}
			if c.name == "version flag" && !strings.Contains(stdout.String(), "commit") {
				t.Errorf("--version printed %q, want the version and commit", stdout.String())
			}
		})
	}
}

func TestExitCodeClassifier(t *testing.T) {
	// The stream package makes its stall errors itself; the daemon's tag
	// stands in for one here.
	stalled := fmt.Errorf("stream x: %w", daemon.Fail(daemon.ExitStalled, errors.New("stream stalled: no durable progress for 2m0s")))
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"plain", errors.New("boom"), 1},
		{"usage", usageErr(errors.New("bad")), 2},
		{"source", daemon.Fail(daemon.ExitSource, errors.New("refused")), 3},
		{"target", fmt.Errorf("stream x: %w", daemon.Fail(daemon.ExitTarget, errors.New("refused"))), 4},
		{"state", daemon.Fail(daemon.ExitState, errors.New("locked")), 5},
		{"stalled", stalled, 6},
		{"stalled joined", errors.Join(stalled, errors.New("stop")), 6},
		{"changelog pruned, while opening the source", daemon.Fail(daemon.ExitSource, fmt.Errorf("stream x: %w", pgtrigger.ErrPositionLost)), 7},
		{"binlog purged", daemon.Fail(daemon.ExitSource, &binlog.PurgedError{Needs: "binlog mysql-bin.000001", Has: "its oldest binlog is mysql-bin.000009"}), 7},
		{"slot lost", daemon.Fail(daemon.ExitSource, fmt.Errorf("stream x: open source: %w", pglogical.ErrSlotLost)), 7},
		{"words alone are not a loss", errors.New("replication slot sluice_x: changes are lost"), 1},
		{"first tag wins", daemon.Fail(daemon.ExitTarget, daemon.Fail(daemon.ExitSource, errors.New("x"))), 3},
	}
	for _, c := range cases {
		if got := daemon.ExitCode(c.err); got != c.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
}

func TestDropFinal(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(dropFinal{slog.NewTextHandler(&buf, nil)}).With("stream", "x")
	log.Error(daemon.MsgStreamStopped, "err", "boom")
	if buf.Len() != 0 {
		t.Errorf("the final error was logged although main prints it: %q", buf.String())
	}
	log.Error("stream stopped; the other streams go on")
	log.Info(daemon.MsgStreamStopped)
	if got := strings.Count(buf.String(), "\n"); got != 2 {
		t.Errorf("want the other two lines logged, got %q", buf.String())
	}
}

// TestExitDataLost: a logical stream whose replication slot was dropped
// while sluice was stopped exits 7 when started again, and says the target
// needs a fresh copy.
func TestExitDataLost(t *testing.T) {
	if os.Getenv("SLUICE_TEST_SKIP_DB") == "1" {
		t.Skip("needs the test databases")
	}
	bin := buildSluice(t)
	srcDB := dbtest.PGEngine.Database(t, "CREATE TABLE lost (id int PRIMARY KEY)")
	tgtDB := dbtest.PGEngine.Database(t, "CREATE TABLE lost (id int PRIMARY KEY)")
	src, tgt := srcDB.PG, tgtDB.PG
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	state := t.TempDir()
	args := []string{"sync", "start", "--state-dir", state, "--stream-id", "lost", "--source", srcDB.URL, "--target", tgtDB.URL, "--tables", "lost", "--source-mode", "logical"}
	first := exec.CommandContext(ctx, bin, append(args, "--from-now")...)
	var firstOut bytes.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// The slot exists once the stream streams; a row applied proves it.
	for id := 1; ; id++ {
		if _, err := src.Exec(ctx, "INSERT INTO lost VALUES ($1)", id); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := tgt.QueryRow(ctx, "SELECT count(*) FROM lost").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no row applied before the deadline:\n%s", firstOut.String())
		}
		time.Sleep(200 * time.Millisecond) // the next poll, not a wait for replication
	}
	_ = first.Process.Signal(syscall.SIGTERM)
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, firstOut.String())
	}
	// The walsender lets the slot go a moment after sluice exits: poll
	// until the drop is taken.
	for {
		_, err := src.Exec(ctx, "SELECT pg_drop_replication_slot('sluice_lost')")
		if err == nil {
			break
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" || ctx.Err() != nil {
			t.Fatalf("drop the stream's slot: %v\n%s", err, firstOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != daemon.ExitDataLost {
		t.Fatalf("restart after the slot was dropped: %v, want exit %d\n%s", err, daemon.ExitDataLost, out)
	}
	if !strings.Contains(string(out), "fresh copy") {
		t.Errorf("the error should say the target needs a fresh copy:\n%s", out)
	}
}

// TestSyncStatusMaxLag: with --max-lag, sync status exits 1 naming each
// stream whose lag is over it or that does not run, and 0 otherwise.
func TestSyncStatusMaxLag(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []struct {
		id      string
		lag     time.Duration
		running bool
	}{{"fresh", time.Second, true}, {"late", 90 * time.Second, true}, {"stopped", 0, false}} {
		if err := daemon.WriteStatus(dir, stream.Stats{Stream: s.id, Lag: s.lag}, s.running); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args     []string
		code     int
		named    []string
		notNamed []string
	}{
		{[]string{}, 0, nil, nil},
		{[]string{"--max-lag", "1m"}, 1, []string{"late (lag 90.0s)", "stopped (not running"}, []string{"fresh"}},
		{[]string{"--max-lag", "2m", "--stream-id", "late"}, 0, nil, nil},
		{[]string{"--max-lag", "1m", "--stream-id", "fresh"}, 0, nil, nil},
		{[]string{"--max-lag", "1m", "--stream-id", "late", "--json"}, 1, []string{"late (lag 90.0s)"}, nil},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"sluice", "sync", "status", "--state-dir", dir}, tc.args...)
		code := run(context.Background(), args, &stdout, &stderr)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, code, tc.code, stderr.String())
		}
		for _, s := range tc.named {
			if !strings.Contains(stderr.String(), s) {
				t.Errorf("%v: stderr %q does not name %q", tc.args, stderr.String(), s)
			}
		}
		for _, s := range tc.notNamed {
			if strings.Contains(stderr.String(), s) {
				t.Errorf("%v: stderr %q names %q", tc.args, stderr.String(), s)
			}
		}
	}
}
