package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/daemon"
)

// messages is a log handler that keeps every message, at every level.
type messages struct {
	slog.Handler
	mu   *sync.Mutex
	msgs *[]string
}

func newMessages(t *testing.T) messages {
	return messages{slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}), &sync.Mutex{}, &[]string{}}
}

func (h messages) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.msgs = append(*h.msgs, r.Message)
	h.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h messages) WithAttrs(a []slog.Attr) slog.Handler {
	return messages{h.Handler.WithAttrs(a), h.mu, h.msgs}
}

func (h messages) Enabled(context.Context, slog.Level) bool { return true }

// logged reports whether a message containing s was logged.
func (h messages) logged(s string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(*h.msgs, func(m string) bool { return strings.Contains(m, s) })
}

// TestResumeStateFileBehindTarget: a stream that resumes opens its log
// reader at the state file's position while the target connects (see
// daemon's Start-up overlap). When the state file is behind the target (a
// crash between a commit and the file's write, here an older copy of the
// file put back), that reader must be closed and the source read from the
// target's checkpoint: read from the file's, the changes applied since
// would be applied again. Applied counts each source change the stream
// applied, so it must equal the changes written, and the target the
// source.
func TestResumeStateFileBehindTarget(t *testing.T) {
	t.Parallel() // databases of its own, a stream id (slot) the suite's alone; its subtests run in turn
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			ctx := context.Background()
			src, dst := newEndpoint(t, eng), newEndpoint(t, eng)
			for _, e := range []*endpoint{src, dst} {
				if err := e.exec(ctx, "CREATE TABLE eo (id bigint PRIMARY KEY, v varchar(40) NOT NULL)"); err != nil {
					t.Fatal(err)
				}
			}
			tables := []string{"eo"}
			o := logOptions(t, "eo", src, dst.url, tables)
			dropSlotAtCleanup(t, src, o.ID, tables)
			written := 0
			write := func(q string, n int) {
				t.Helper()
				for i := range n {
					if err := src.exec(ctx, fmt.Sprintf(q, i)); err != nil {
						t.Fatal(err)
					}
				}
				written += n
			}
			run := func(what string) messages {
				t.Helper()
				h := newMessages(t)
				o.Logger = slog.New(h)
				r := startStream(t, o)
				r.waitStarted(t, 60*time.Second)
				waitEqual(t, src, dst, tables, 60*time.Second, r)
				// The target equals the source once the last commit
				// returns; the stream counts it just after.
				deadline := time.Now().Add(10 * time.Second)
				for r.current.Load().Stats().Applied < uint64(written) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				st := r.current.Load().Stats()
				if err := r.stop(t); err != nil {
					t.Fatalf("%s: stream stopped with error: %v", what, err)
				}
				if st.Applied != uint64(written) {
					t.Fatalf("%s: the stream applied %d changes in all, the source wrote %d", what, st.Applied, written)
				}
				return h
			}
			file := filepath.Join(o.StateDir, checkpoint.FileName)

			r := startStream(t, o) // --from-now: the stream starts before the rows
			r.waitStarted(t, 60*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			write("INSERT INTO eo VALUES (%d, 'one')", 40)
			run("first")
			older, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			write("UPDATE eo SET v = 'two' WHERE id = %d", 40)
			h := run("second")
			if !h.logged("opened early") {
				t.Fatal("the resume did not use the reader opened early at the state file's position, which matched the target's")
			}

			// The state file loses the second run's commits; a backlog
			// waits.
			if err := os.WriteFile(file, older, 0o600); err != nil {
				t.Fatal(err)
			}
			write("DELETE FROM eo WHERE id = %d", 15)
			write("INSERT INTO eo VALUES (%d + 100, 'three')", 15)
			h = run("third")
			for _, want := range []string{"target checkpoint is newer than the state file", "opening it again"} {
				if !h.logged(want) {
					t.Errorf("third run: no log line %q", want)
				}
			}
		})
	}
}
