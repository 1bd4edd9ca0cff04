package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	wlgen "github.com/sluice-cdc/sluice/internal/workload"
)

// TestForeignKeysTargetRestart streams the seeded workload's foreign-key
// graph (parents deleted and renumbered, so that ON DELETE CASCADE, SET
// NULL and ON UPDATE CASCADE fire on the source) from a MariaDB source,
// whose log omits the rows those actions change, so that sluice carries
// them out on the target. Mid-stream the target's server crashes
// (PostgreSQL: an immediate shutdown; MariaDB: SIGKILL) while the writer
// goes on, and then sluice itself is restarted, as a supervisor or an
// operator would after such an episode. After each step the target must
// equal the source, whole tables compared.
//
// Seen before the fix (TestChaosShort's "target restarts", seed
// 1796577081404945867): a run that resumed from its state file took the
// binlog reader opened early, wrapped in the read ahead, which hid the
// reader's ForeignKeys; the stream ran with no cascades at all, and every
// row a parent's delete or renumbering changed on the source stayed on the
// target (extra lines and orders, notes not set to NULL), in silence. A
// target restart is such a resume whenever it stops the stream (a
// PostgreSQL target answering "the database system is starting up" while
// it recovers). The trigger sources open no reader early; they are run
// through the same steps.
func TestForeignKeysTargetRestart(t *testing.T) {
	for i, tc := range []fkPair{
		{"maria_binlog", daemon.EnginePostgres, 1},
		{"maria_binlog", daemon.EngineMySQL, 3},
		{"maria_trigger", daemon.EnginePostgres, 3},
		{"maria_trigger", daemon.EngineMySQL, 1},
	} {
		t.Run(tc.String(), func(t *testing.T) {
			t.Parallel()
			runFKTargetRestart(t, tc.source(), tc.to, tc.lanes, fmt.Sprintf("fkrestart%d", i), wlgen.Seed(t, uint64(20261207+i)))
		})
	}
}

func runFKTargetRestart(t *testing.T, src randomizedSource, to daemon.Engine, lanes int, id string, seed uint64) {
	ctx := context.Background()
	const txs = 150
	steps := [...]int{30, 90, txs} // the writer's ends: before the crash, through it, after sluice's restart
	w := wlgen.Generate(wlgen.Config{Seed: seed, Source: wlgen.Engine(src.engine), Target: wlgen.Engine(to), Txs: txs, MaxStmts: 6, ForeignKeys: true})
	// The target on a server of its own, which the test crashes; the
	// source on the shared one.
	s, d := newEndpoint(t, src.engine), privateEndpoint(t, to)
	for _, e := range []*endpoint{s, d} {
		for _, ddl := range w.Schema.DDL(wlgen.Engine(e.engine)) {
			if err := e.exec(ctx, ddl); err != nil {
				t.Fatalf("%s: %s: %v", e.engine, ddl, err)
			}
		}
	}
	srcDB, srcCmp := workloadDB(s)
	_, dstCmp := workloadDB(d)
	tables := w.Schema.GraphTableNames()
	dstURL, _ := d.viaProxy(t, 2*time.Millisecond)
	o := logOptions(t, id, s, dstURL, tables)
	if src.mode == daemon.ModeTrigger {
		o.SourceMode, o.FromNow = daemon.ModeTrigger, false
	}
	o.MinLanes, o.MaxLanes = 1, lanes
	// The stream waits out the target's restart in the process, as a lone
	// `sluice sync start` does.
	o.TransientRetryFor = 2 * time.Minute
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)
	first := run.current.Load()

	write := func(from, to int, pace time.Duration) <-chan error {
		done := make(chan error, 1)
		go func() {
			for i := from; i < to; i++ {
				if err := w.Apply(ctx, srcDB, w.Txs[i:i+1]); err != nil {
					done <- fmt.Errorf("source transaction %d: %w", i, err)
					return
				}
				time.Sleep(pace) // the writer's pace, not a wait for replication
			}
			done <- nil
		}()
		return done
	}
	converged := func(step string) {
		t.Helper()
		diffs, why := waitCompared(t, srcCmp, dstCmp, tables, run, 90*time.Second)
		if why != "" {
			t.Fatalf("seed %d, %s → %s, lanes 1–%d, %s: %s\n%s%s", seed, src.name, to, lanes, step, why, diffs, w.TraceDiffs(diffs))
		}
	}

	if err := <-write(0, steps[0], 0); err != nil {
		t.Fatal(err)
	}
	converged("before the target's crash")

	// The target's server crashes while batches are in flight.
	written := write(steps[0], steps[1], 15*time.Millisecond)
	run.waitApplied(t, 20, 60*time.Second)
	if err := d.server.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if d.pg != nil {
		d.pg.Reset() // the pool's connections died with the server
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	converged("after the target's crash")
	restarted := run.current.Load() != first
	t.Logf("target crashed mid-stream; the stream was started again in the process: %v", restarted)

	// sluice restarts, resuming from its state file and the target's
	// checkpoint, while the writer goes on.
	if err := run.stop(t); err != nil {
		t.Fatalf("stream stopped with error: %v", err)
	}
	run = startStream(t, o)
	written = write(steps[1], steps[2], 5*time.Millisecond)
	run.waitStarted(t, 60*time.Second)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	converged("after sluice's restart")
	if src.engine == daemon.EngineMySQL && to == daemon.EngineMySQL {
		if err := dbtest.CompareChecksumTable(ctx, s.my, d.my, tables...); err != nil {
			t.Fatalf("seed %d: CHECKSUM TABLE differs: %v", seed, err)
		}
	}
	if err := run.stop(t); err != nil {
		t.Errorf("stream stopped with error: %v", err)
	}
	t.Logf("converged: %d transactions, %d statements", len(w.Txs), w.Statements())
}
