package integration

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/daemon"
	sluiceendpoint "github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/stream"
)

// installCapture does what `sluice source install` does, before the
// workload starts, so every change is captured.
func installCapture(t *testing.T, url string, tables []string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var names []sluice.TableName
	for _, s := range tables {
		n, err := sluice.ParseTableName(s)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := pgtrigger.Install(ctx, conn, "sluice", names); err != nil {
		t.Fatal(err)
	}
}

func tableNames(t *testing.T, list []string) []sluice.TableName {
	t.Helper()
	out, err := sluiceendpoint.ParseTables(list)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// running is a sluice stream running in this process.
type running struct {
	cancel  context.CancelFunc
	done    chan error
	current atomic.Pointer[stream.Stream]
}

func startStream(t *testing.T, o daemon.StreamOptions) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	o.OnStart = func(s *stream.Stream) { r.current.Store(s) }
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	go func() { r.done <- daemon.RunStream(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// stop cancels the stream as SIGINT would and returns its error.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("stream did not stop within 60 s of cancel")
		return nil
	}
}

// waitApplied polls the stream's stats until it has applied at least n
// changes since it started.
func (r *running) waitApplied(t *testing.T, n uint64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var base uint64
	var haveBase bool
	for time.Now().Before(deadline) {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("stream stopped: %v", err)
		default:
		}
		if s := r.current.Load(); s != nil {
			st := s.Stats()
			if !haveBase {
				base, haveBase = st.Applied, true
			}
			if st.Applied-base >= n {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("stream applied fewer than %d changes within %v", n, within)
}

func streamOptions(t *testing.T, p *pair, tables []string) daemon.StreamOptions {
	return daemon.StreamOptions{
		ID:           "e2e",
		SourceURL:    p.srcURL,
		TargetURL:    p.dstURL,
		Tables:       tableNames(t, tables),
		StateDir:     t.TempDir(),
		PollInterval: 50 * time.Millisecond,
		SourceMode:   "trigger",
		KillBudget:   5 * time.Second,
		// These tests stream what the changelog holds since capture was
		// installed; the initial copy has its own (copy_test.go).
		InitialCopy: "off",
	}
}

// TestEndToEndOverWAN is the slice's acceptance test: three tables (a
// composite key; every supported type and NULLs; primary-key updates),
// concurrent source transactions, one long transaction that takes its
// changelog ids first and commits last, all applied over a 96 ms link.
func TestEndToEndOverWAN(t *testing.T) {
	t.Parallel() // a database pair of its own; a trigger stream's state lives in it
	p := newPair(t, 48*time.Millisecond, schema...)
	ctx := context.Background()
	installCapture(t, p.srcURL, schemaTables)
	r := rng(t)

	// The long transaction writes first, so its changelog ids are the
	// lowest, and commits after everything else: a reader that reads by id
	// with a naive fence would skip or misorder it.
	long, err := p.src.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(ctx)
	lw := &workload{ops: 1}
	for i := 0; i < 40; i++ {
		if err := lw.op(ctx, long, r, 15); err != nil {
			t.Fatal(err)
		}
	}

	o := streamOptions(t, p, schemaTables)
	run := startStream(t, o)

	w := &workload{pool: p.src, workers: 4, txs: 150, ops: 8, pause: 40 * time.Millisecond}
	if err := w.run(ctx, t, r); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if err := lw.op(ctx, long, r, 15); err != nil {
			t.Fatal(err)
		}
	}
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, p, schemaTables, 120*time.Second, run)
	if err := run.stop(t); err != nil {
		t.Fatalf("stream stopped with error: %v", err)
	}
	st, err := daemon.ReadStatus(o.StateDir)
	if err != nil || len(st) != 1 || st[0].Applied == 0 || st[0].LastError != "" {
		t.Fatalf("status after stop = %+v, %v", st, err)
	}
	t.Logf("applied %d changes in %d commits", st[0].Applied, st[0].Seq)
}

// TestRestartMidStream stops the stream (as SIGINT does) several times
// while the source is being written and restarts it from its checkpoint.
func TestRestartMidStream(t *testing.T) {
	t.Parallel() // a database pair of its own; a trigger stream's state lives in it
	p := newPair(t, 5*time.Millisecond, schema...)
	ctx := context.Background()
	installCapture(t, p.srcURL, schemaTables)
	r := rng(t)
	o := streamOptions(t, p, schemaTables)
	o.BatchSize = 50 // many small commits, so stops land mid-stream

	w := &workload{pool: p.src, workers: 3, txs: 120, ops: 6, pause: 20 * time.Millisecond}
	werr := make(chan error, 1)
	go func() { werr <- w.run(ctx, t, r) }()

	stops := 0
	for i := 0; i < 4 && w.done.Load() < int64(w.workers*w.txs)*3/4; i++ {
		run := startStream(t, o)
		run.waitApplied(t, 60, 60*time.Second)
		if err := run.stop(t); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
		stops++
	}
	if stops < 2 {
		t.Fatalf("only %d stops landed while the workload ran; make it longer", stops)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	run := startStream(t, o)
	waitConverged(t, p, schemaTables, 90*time.Second, run)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput checks that each misconfiguration stops sluice before any
// data moves, with an error that names the object and the fix.
func TestBadInput(t *testing.T) {
	t.Parallel() // each case fails before it applies anything, on databases of its own
	tests := []struct {
		name      string
		srcDDL    []string
		dstDDL    []string
		tables    []string
		targetURL func(p *pair) string
		want      []string
	}{
		{
			name:   "unreachable target",
			srcDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`},
			dstDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`},
			tables: []string{"t"},
			targetURL: func(p *pair) string {
				return "postgres://postgres:x@127.0.0.1:1/db?sslmode=disable&connect_timeout=3"
			},
			want: []string{"127.0.0.1:1"},
		},
		{
			name:   "wrong password",
			srcDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`},
			dstDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`},
			tables: []string{"t"},
			targetURL: func(p *pair) string {
				return strings.Replace(p.dstDirect, ":sluice-test-pw@", ":wrong-pw@", 1)
			},
			want: []string{"password", "postgres"},
		},
		{
			name:   "table missing on target",
			srcDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE gone (id int PRIMARY KEY)`},
			dstDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`},
			tables: []string{"t", "gone"},
			want:   []string{"public.gone", "does not exist"},
		},
		{
			name:   "table without primary key",
			srcDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE nokey (id int, v text)`},
			dstDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE nokey (id int, v text)`},
			tables: []string{"t", "nokey"},
			want:   []string{"public.nokey", "primary key"},
		},
		{
			name:   "target column too narrow",
			srcDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE wide (id int PRIMARY KEY, big bigint)`},
			dstDDL: []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE wide (id int PRIMARY KEY, big integer)`},
			tables: []string{"t", "wide"},
			want:   []string{"wide", "big", "bigint"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPair(t, 0)
			for _, s := range tt.srcDDL {
				exec1(t, p.src, s)
			}
			for _, s := range tt.dstDDL {
				exec1(t, p.dst, s)
			}
			// Capture is installed where it can be and the source written,
			// so there would be something to apply.
			if tt.name != "table without primary key" {
				installCapture(t, p.srcURL, tt.tables)
				exec1(t, p.src, `INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 50) g`)
			}
			o := streamOptions(t, p, tt.tables)
			o.Logger = testLogger(t)
			if tt.targetURL != nil {
				o.TargetURL = tt.targetURL(p)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			err := daemon.RunStream(ctx, o)
			t.Logf("error: %v", err)
			if err == nil {
				t.Fatal("RunStream succeeded; want an error")
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("RunStream ran until the deadline instead of failing: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			var n int
			if err := p.dst.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("target table t has %d rows; nothing should have been applied", n)
			}
			st, err := daemon.ReadStatus(o.StateDir)
			if err != nil || len(st) != 1 || !strings.Contains(st[0].LastError, tt.want[0]) {
				t.Errorf("state file should record the error: %+v, %v", st, err)
			}
		})
	}
}

// waitStarted waits until the stream passed its checks and is running.
func (r *running) waitStarted(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for r.current.Load() == nil {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("stream stopped while starting: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream did not start within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLanesOverWAN runs the end-to-end workload (primary-key updates
// included, which move rows between lanes) through several lanes, each with
// its own target connection, over a 96 ms link.
func TestLanesOverWAN(t *testing.T) {
	t.Parallel() // a database pair of its own; a trigger stream's state lives in it
	p := newPair(t, 48*time.Millisecond, schema...)
	ctx := context.Background()
	installCapture(t, p.srcURL, schemaTables)
	r := rng(t)
	o := streamOptions(t, p, schemaTables)
	o.MinLanes, o.MaxLanes = 3, 4
	o.BatchSize = 100
	run := startStream(t, o)
	w := &workload{pool: p.src, workers: 4, txs: 120, ops: 8, pause: 20 * time.Millisecond}
	if err := w.run(ctx, t, r); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, p, schemaTables, 120*time.Second, run)
	st := run.current.Load().Stats()
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if st.Lanes < 3 {
		t.Fatalf("stream ran with %d lanes, want at least 3", st.Lanes)
	}
	t.Logf("applied %d changes with %d lanes", st.Applied, st.Lanes)
}
