package dbtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// shared holds the servers a test binary starts on first use and stops in
// Main: one of each per binary keeps the run fast, and tests isolate
// themselves with a database each.
var shared struct {
	mu       sync.Mutex
	pg       *Postgres
	pgErr    error // a failed start is remembered so later tests fail fast
	maria    *MariaDB
	mariaErr error
	seq      int // numbers the databases handed out, to keep names unique
}

// Main runs the tests and then stops every server they started. Use it as
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
func Main(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	defer stopShared()
	code := m.Run()
	if code != 0 {
		reportServerLogs(os.Stderr)
	}
	return code
}

// reportServerLogs writes, after a failed run, what the shared servers
// logged about sessions ending: a test that saw its connection cut
// ("invalid connection", "unexpected EOF") can then be matched with the
// server's account of it (killed, aborted, the server restarted), which is
// gone with the servers' directories once they stop.
func reportServerLogs(w io.Writer) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	type serverLog struct{ name, path string }
	var logs []serverLog
	if shared.pg != nil {
		logs = append(logs, serverLog{"postgres", shared.pg.logPath})
	}
	if shared.maria != nil {
		logs = append(logs, serverLog{"mariadb", shared.maria.logPath})
	}
	for _, l := range logs {
		lines, err := notableLines(l.path, serverLogLines)
		if err != nil {
			fmt.Fprintf(w, "dbtest: read the shared %s server's log: %v\n", l.name, err)
			continue
		}
		fmt.Fprintf(w, "dbtest: the shared %s server's log, its last %d lines on sessions ending, errors and restarts (%s):\n%s",
			l.name, len(lines), l.path, strings.Join(lines, ""))
	}
}

// serverLogLines is how many notable lines of a server's log a failed run
// prints.
const serverLogLines = 60

// notableLines returns the last n lines of the log at path that tell of a
// session ending, an error, or the server starting or stopping.
func notableLines(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if line != "" && notable(line) {
			lines = append(lines, line)
			if len(lines) > 2*n {
				lines = append(lines[:0], lines[len(lines)-n:]...)
			}
		}
		if err != nil {
			break
		}
	}
	return lines[max(len(lines)-n, 0):], nil
}

func notable(line string) bool {
	l := strings.ToLower(line)
	for _, w := range []string{"abort", "kill", "terminat", "error", "fatal", "panic", "shutdown", "ready for connections", "ready to accept"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pg != nil {
		if err := shared.pg.Stop(); err != nil {
			slog.Error("dbtest: stop shared postgres", "err", err)
		}
		shared.pg = nil
	}
	if shared.maria != nil {
		if err := shared.maria.Stop(); err != nil {
			slog.Error("dbtest: stop shared mariadb", "err", err)
		}
		shared.maria = nil
	}
}

func skipIfNoDB(tb testing.TB) {
	tb.Helper()
	if os.Getenv("SLUICE_TEST_SKIP_DB") == "1" {
		tb.Skip("SLUICE_TEST_SKIP_DB=1: skipping test that needs a database server")
	}
}

// PG returns the test binary's shared PostgreSQL server, starting it on first
// use. Tests that use it must run through Main so it is stopped afterwards.
func PG(tb testing.TB) *Postgres {
	tb.Helper()
	skipIfNoDB(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pg == nil && shared.pgErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
		defer cancel()
		shared.pg, shared.pgErr = StartPostgres(ctx)
	}
	if shared.pgErr != nil {
		tb.Fatalf("shared postgres: %v", shared.pgErr)
	}
	return shared.pg
}

// Maria returns the test binary's shared MariaDB server, starting it on first
// use. Tests that use it must run through Main so it is stopped afterwards.
func Maria(tb testing.TB) *MariaDB {
	tb.Helper()
	skipIfNoDB(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.maria == nil && shared.mariaErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
		defer cancel()
		shared.maria, shared.mariaErr = StartMariaDB(ctx)
	}
	if shared.mariaErr != nil {
		tb.Fatalf("shared mariadb: %v", shared.mariaErr)
	}
	return shared.maria
}

// PGDatabase creates a fresh database on the shared PostgreSQL server, named
// after the test, drops it when the test ends, and returns its name.
func PGDatabase(tb testing.TB) string {
	tb.Helper()
	pg := PG(tb)
	name := databaseName(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.CreateDatabase(ctx, name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pg.DropDatabase(ctx, name); err != nil {
			tb.Error(err)
		}
	})
	return name
}

// MariaDatabase creates a fresh database on the shared MariaDB server, named
// after the test, drops it when the test ends, and returns its name.
func MariaDatabase(tb testing.TB) string {
	tb.Helper()
	m := Maria(tb)
	name := databaseName(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.CreateDatabase(ctx, name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.DropDatabase(ctx, name); err != nil {
			tb.Error(err)
		}
	})
	return name
}

// databaseName turns the test's name into an identifier both servers accept
// unquoted (lower-case letters, digits, underscores), made unique within the
// binary by a sequence number and kept within PostgreSQL's 63-byte limit.
func databaseName(tb testing.TB) string {
	shared.mu.Lock()
	shared.seq++
	seq := shared.seq
	shared.mu.Unlock()
	var b strings.Builder
	for _, r := range strings.ToLower(tb.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	suffix := fmt.Sprintf("_%d", seq)
	base := b.String()
	const maxLen = 63
	if room := maxLen - len("t_") - len(suffix); len(base) > room {
		base = base[:room]
	}
	return "t_" + base + suffix
}
