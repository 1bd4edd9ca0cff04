package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestLargeTransactionBoundedMemory streams one source transaction many
// times larger than the queue (an INSERT of every row, an UPDATE of all,
// a DELETE of half, each a single transaction) with small settings, and
// samples the process's Go heap (from `sync status`) and its peak RSS
// while it runs: both must stay under the memory formula of the README
// (queue bytes, plus batch bytes per lane and per chained transaction,
// plus a fixed overhead), not grow with the transaction. The tables must
// then be equal by the independent comparison.
func TestLargeTransactionBoundedMemory(t *testing.T) {
	bin := buildSluice(t)
	for _, engine := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(engine), func(t *testing.T) {
			largeTransactionMemory(t, bin, engine)
		})
	}
}

func largeTransactionMemory(t *testing.T, bin string, engine daemon.Engine) {
	ctx := context.Background()
	src, dst := newEndpoint(t, engine), newEndpoint(t, engine)
	ddl := `CREATE TABLE big (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)`
	for _, e := range []*endpoint{src, dst} {
		if err := e.exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	table := "big"
	if engine == daemon.EnginePostgres {
		table = "public.big"
		dropSlotAtCleanup(t, src, "mem", []string{table})
	}
	const (
		rows  = 200_000
		queue = 8 << 20
		batch = 2 << 20
		lanes = 2
		fixed = daemon.FixedMemoryBytes // the Go runtime, drivers, decoded events
	)
	// The README's formula: fixed + Q + R + min(L × T × B, Q/2), with the
	// reader's read-ahead R a quarter of the queue (at least 1 MiB) and T
	// two transactions per lane (one in flight, one chained).
	bound := int64(fixed + queue + max(queue/4, 1<<20) + min(lanes*2*batch, queue/2))
	dir := t.TempDir()
	proc := startSluice(t, bin, "sync", "start", "--source", src.url, "--target", dst.url, "--tables", table,
		"--state-dir", dir, "--stream-id", "mem", "--from-now", "--max-queue-bytes", strconv.Itoa(queue),
		"--max-batch-bytes", strconv.Itoa(batch), "--max-lanes", strconv.Itoa(lanes), "--log-format", "json")
	waitStatus(t, proc, dir, 60*time.Second, "start", func(s daemon.Status) bool { return s.Running })

	// Each statement is one source transaction of every (or half of
	// every) row: about 75 MB of changes as the queue counts them, nine
	// times the queue.
	gen := map[daemon.Engine]string{
		daemon.EnginePostgres: `INSERT INTO big SELECT g, md5(g::text) || md5((g+1)::text), g FROM generate_series(1, %d) g`,
		daemon.EngineMySQL:    `INSERT INTO big SELECT seq, CONCAT(MD5(seq), MD5(seq+1)), seq FROM seq_1_to_%d`,
	}[engine]
	stmts := []string{fmt.Sprintf(gen, rows), `UPDATE big SET n = n + 1, v = concat(v, 'x')`, `DELETE FROM big WHERE id % 2 = 0`}
	srcErr := make(chan error, 1)
	go func() {
		for _, q := range stmts {
			if err := src.exec(ctx, q); err != nil {
				srcErr <- fmt.Errorf("%s: %w", q, err)
				return
			}
		}
		srcErr <- nil
	}()

	var peakHeap, peakRSS int64
	samples := 0
	sample := func() {
		_, hwm, err := rssKiB(proc.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		peakRSS = max(peakRSS, hwm<<10)
		if st, err := daemon.ReadStatus(dir); err == nil && len(st) == 1 && st[0].Memory != nil {
			peakHeap = max(peakHeap, int64(st[0].Memory.HeapBytes))
			samples++
		}
	}
	srcDone := false
	deadline := time.Now().Add(180 * time.Second)
	for {
		sample()
		if !srcDone {
			select {
			case err := <-srcErr:
				if err != nil {
					t.Fatal(err)
				}
				srcDone = true
			default:
			}
		}
		if srcDone {
			if diffs, err := dbtest.CompareTables(ctx, src.db(), dst.db(), table); err == nil && diffs.Equal() {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("target not equal to the source after 180 s; sluice log:\n%s", proc.logText())
		}
		time.Sleep(200 * time.Millisecond) // sampling interval
	}
	sample()
	t.Logf("%s: %d rows a transaction: peak Go heap %d KiB over %d samples, peak RSS %d KiB, bound %d KiB",
		engine, rows, peakHeap>>10, samples, peakRSS>>10, bound>>10)
	if samples == 0 {
		t.Fatalf("sync status never showed the process's memory: the heap was not measured")
	}
	if peakHeap > bound {
		t.Errorf("Go heap peaked at %d KiB, over the formula's bound of %d KiB: memory follows the transaction, not the settings", peakHeap>>10, bound>>10)
	}
	// RSS adds what is not Go heap: the binary's pages, stacks, C
	// libraries, pages the runtime freed but the kernel still counts.
	if rssBound := bound + 48<<20; peakRSS > rssBound {
		t.Errorf("peak RSS %d KiB over %d KiB: memory follows the transaction, not the settings", peakRSS>>10, rssBound>>10)
	}
	sigtermWithin(t, proc, 60*time.Second)
}
