package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/txkiller"
)

// TestSeedStallIsReported reproduces the field note at test scale: per-row
// apply with the naive AIMD controller over a 96 ms link, a transaction
// killer at 2 s, and a source writing faster than one-statement-per-round-
// trip can apply. sluice must report the round-trip-bound stall within the
// stall window, naming the cause — not crawl silently. The same workload
// with pipelined apply and the model controller then catches up without a
// single killed transaction.
func TestSeedStallIsReported(t *testing.T) {
	// It waits on the link and on timers far more than it computes: it
	// runs beside the package's other parallel tests.
	t.Parallel()
	ddl := `CREATE TABLE events (id bigint PRIMARY KEY, payload text NOT NULL)`
	p := newPair(t, 48*time.Millisecond, ddl)
	ctx := context.Background()
	installCapture(t, p.srcURL, []string{"events"})
	killer, err := txkiller.StartPostgres(ctx, p.dstDirect, 2*time.Second, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Stop()

	// A sustained ~100 changes/s: ten times what per-row apply can do at
	// 96 ms.
	wctx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	written := steadyInserts(wctx, p.src, "events", 5)

	o := streamOptions(t, p, []string{"events"})
	o.ApplyMode = "per-row"
	o.Controller = "aimd"
	o.KillBudget = 2 * time.Second
	o.StallWindow = 10 * time.Second
	o.ExitOnStall = true
	runCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	start := time.Now()
	err = daemon.RunStream(runCtx, o)
	took := time.Since(start)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || runCtx.Err() != nil {
		t.Fatalf("per-row + AIMD ran %v without reporting a stall: %v", took, err)
	}
	for _, want := range []string{"stalled", "round-trip-bound", "RTT", "--apply-mode=pipelined"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("stall error %q does not say %q", err, want)
		}
	}
	if took > 40*time.Second {
		t.Errorf("stall reported after %v; the window is 10 s", took)
	}
	st, _ := daemon.ReadStatus(o.StateDir)
	if len(st) != 1 || !strings.Contains(st[0].LastError, "round-trip-bound") {
		t.Errorf("state file should record the stall: %+v", st)
	}
	t.Logf("stall reported after %v: %v", took.Round(time.Second), err)

	// Same workload, pipelined and the model controller, a fresh stream
	// from the same checkpoint.
	killedBefore := killer.Killed()
	o.ApplyMode, o.Controller, o.ExitOnStall = "pipelined", "model", true
	run := startStream(t, o)
	time.Sleep(5 * time.Second) // let the writer run on while sluice catches up: workload shaping, not a wait for replication
	stopWrites()
	n := <-written
	waitConverged(t, p, []string{"public.events"}, 60*time.Second, run)
	stats := run.current.Load().Stats()
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if k := killer.Killed() - killedBefore; k != 0 || stats.Kills != 0 {
		t.Fatalf("pipelined apply had %d transactions killed (stream saw %d)", k, stats.Kills)
	}
	t.Logf("%d changes written; pipelined caught up with batch %d, no kills", n, stats.BatchSize)
}

// TestStallNamesTheBlockingTransaction: another session on the target
// holds a lock on the table the stream writes, with no transaction killer
// to end either of them. Durable progress stops; the stall is reported
// within its window, and the diagnosis names the session that holds the
// target back, with the command that ends it.
func TestStallNamesTheBlockingTransaction(t *testing.T) {
	ddl := `CREATE TABLE events (id bigint PRIMARY KEY, payload text NOT NULL)`
	p := newPair(t, time.Millisecond, ddl)
	ctx := context.Background()
	installCapture(t, p.srcURL, []string{"events"})

	holder, err := p.dst.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	var pid int32
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "LOCK TABLE events IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	wctx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	steadyInserts(wctx, p.src, "events", 5)

	o := streamOptions(t, p, []string{"events"})
	o.KillBudget = 2 * time.Second
	o.StallWindow = 5 * time.Second
	o.ExitOnStall = true
	runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	err = daemon.RunStream(runCtx, o)
	took := time.Since(start)
	if err == nil || runCtx.Err() != nil {
		t.Fatalf("a stream blocked by a lock ran %v without reporting a stall: %v", took, err)
	}
	for _, want := range []string{"stalled", "a target transaction has been running for", "over the 2s kill budget", "oldest transaction on the target", fmt.Sprintf("pid %d", pid), "idle in transaction", fmt.Sprintf("pg_terminate_backend(%d)", pid)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("stall error %q does not say %q", err, want)
		}
	}
	if took > 30*time.Second {
		t.Errorf("stall reported after %v; the window is 5 s", took)
	}
	t.Logf("stall reported after %v: %v", took.Round(time.Second), err)
}
