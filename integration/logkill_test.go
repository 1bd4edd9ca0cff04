package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/source/pglogical"
)

// committedTx is a workload transaction known to have committed, with an
// upper bound of its commit LSN: pg_current_wal_insert_lsn() read after
// COMMIT returned is past the commit record.
type committedTx struct {
	id    int64
	upper pglogrepl.LSN
}

// txLogWorkload runs the three-table workload with one more statement per
// transaction, last: an insert of the transaction's own id into txlog
// (insert-only, replicated). Its presence on the target says the whole
// transaction was applied (a batch applies a prefix of the change
// sequence).
type txLogWorkload struct {
	w      workload
	nextID atomic.Int64
	mu     sync.Mutex
	done   []committedTx
}

func (l *txLogWorkload) committed() []committedTx {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]committedTx(nil), l.done...)
}

func (l *txLogWorkload) run(ctx context.Context, p *pgxpool.Pool, r *rand.Rand, workers int, stop <-chan struct{}) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 0; i < workers; i++ {
		seed := r.Uint64()
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			wr := rand.New(rand.NewPCG(seed, uint64(worker)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := l.nextID.Add(1)
				err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					for j := 0; j < l.w.ops; j++ {
						if err := l.w.op(ctx, tx, wr, worker); err != nil {
							return err
						}
					}
					_, err := tx.Exec(ctx, `INSERT INTO txlog (id, worker) VALUES ($1, $2)`, id, worker)
					return err
				})
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", worker, err)
					return
				}
				var s string
				if err := p.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
					errs <- err
					return
				}
				upper, err := pglogrepl.ParseLSN(s)
				if err != nil {
					errs <- err
					return
				}
				l.mu.Lock()
				l.done = append(l.done, committedTx{id: id, upper: upper})
				l.mu.Unlock()
				time.Sleep(l.w.pause) // shapes the workload; not a wait for replication
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// slotState waits until the slot has no walsender (the killed sluice's
// has exited, so nothing can move it any more) and returns its
// confirmed_flush_lsn.
func slotState(t *testing.T, p *pgxpool.Pool, slot string) pglogrepl.LSN {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		var confirmed string
		err := p.QueryRow(ctx, `SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active, &confirmed)
		if err != nil {
			t.Fatalf("slot %s: %v", slot, err)
		}
		if !active {
			lsn, err := pglogrepl.ParseLSN(confirmed)
			if err != nil {
				t.Fatal(err)
			}
			return lsn
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s still active 30 s after sluice was killed", slot)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// targetCheckpoint reads the stream's checkpoint row on a PostgreSQL
// target: the position token "pglogical:<lsn>/<k>" means every transaction
// whose commit record starts below lsn is applied, and (k > 0) the first k
// changes of the one committing at lsn.
func targetCheckpoint(t *testing.T, p *pgxpool.Pool, stream string) (pglogrepl.LSN, int64) {
	t.Helper()
	var pos string
	// The lanes' rows: the stream resumes from the highest watermark.
	if err := p.QueryRow(context.Background(), `SELECT position FROM sluice.checkpoint WHERE stream = $1 ORDER BY applied DESC, seq DESC LIMIT 1`, stream).Scan(&pos); err != nil {
		t.Fatalf("target checkpoint of %s: %v", stream, err)
	}
	tok, ok := strings.CutPrefix(pos, pglogical.Kind+":")
	if !ok {
		t.Fatalf("target checkpoint position %q is not a pglogical position", pos)
	}
	// "<commit>@<change>.<i>" inside a transaction, "<lsn>/0" at a boundary.
	var k int64
	if commit, _, in := strings.Cut(tok, "@"); in {
		tok, k = commit+"/1", 1
	}
	i := strings.LastIndexByte(tok, '/')
	if i < 0 {
		t.Fatalf("target checkpoint position %q is not a pglogical position", pos)
	}
	lsn, err := pglogrepl.ParseLSN(tok[:i])
	if err != nil {
		t.Fatalf("target checkpoint position %q: %v", pos, err)
	}
	if k == 0 {
		fmt.Sscan(tok[i+1:], &k)
	}
	return lsn, k
}

// TestLogReadKill9 kills a `sluice sync start --source-mode logical`
// process with SIGKILL at random points ten times while a workload writes
// the source, restarting it each time, and after each kill checks that the
// slot's confirmed_flush_lsn never passed what the target had committed.
// Then it lets sluice catch up and compares the target with the source.
//
// The assertion after each kill. With the process dead and its walsender
// gone, confirmed_flush_lsn C is final: on restart the server resends only
// the transactions whose commit record starts at or after C. So every
// transaction committed below C must already be on the target, or it is
// lost. The workload records, for each committed transaction, an upper
// bound U of its commit LSN (pg_current_wal_insert_lsn() after COMMIT
// returned) and writes its id into the replicated txlog table as its last
// statement. The check: every transaction with U ≤ C has its txlog row on
// the target. (Transactions with U > C may commit below or above C; they
// are not checked after this kill, but later kills and the final
// convergence check cover them.)
//
// And the slot is told only what the target's checkpoint holds (an idle
// stream's progress is checkpointed on the target before the slot moves),
// so confirmed_flush_lsn is never past the target's checkpoint.
func TestLogReadKill9(t *testing.T) {
	t.Parallel() // kills only its own sluice process; slot "lk9" is the suite's alone
	bin := buildSluice(t)
	ddl := append(append([]string(nil), schema...), `CREATE TABLE txlog (id bigint PRIMARY KEY, worker integer NOT NULL)`)
	p := newPair(t, 10*time.Millisecond, ddl...)
	ctx := context.Background()
	tables := append(append([]string(nil), schemaTables...), "public.txlog")
	const stream = "lk9"
	slot := pglogical.DefaultName(stream)
	src := &endpoint{engine: daemon.EnginePostgres, url: p.srcURL}
	dropSlotAtCleanup(t, src, stream, tables)
	r := rng(t)
	dir := t.TempDir()
	args := []string{"sync", "start", "--source", p.srcURL, "--target", p.dstURL,
		"--tables", strings.Join(tables, ","), "--state-dir", dir, "--stream-id", stream,
		"--source-mode", "logical", "--from-now", "--apply-batch-size", "40", "--poll-interval", "50ms", "--log-format", "json"}

	l := &txLogWorkload{w: workload{ops: 6, pause: 10 * time.Millisecond}}
	stop := make(chan struct{})
	werr := make(chan error, 1)
	var stopOnce sync.Once
	stopWorkload := func() { stopOnce.Do(func() { close(stop) }) }
	defer stopWorkload()

	var applied uint64
	var prevC pglogrepl.LSN
	checked := 0
	for i := 0; i < 10; i++ {
		proc := startSluice(t, bin, args...)
		if i == 0 {
			// The slot is created and moved to "now" before the status
			// says running; only then may the workload start.
			waitStatus(t, proc, dir, 60*time.Second, "start", func(s daemon.Status) bool { return s.Running })
			go func() { werr <- l.run(ctx, p.src, r, 3, stop) }()
		}
		// A checkpoint exists (Applied > 0) before the first kill: a
		// restart without one would start "from now" again.
		st := waitStatus(t, proc, dir, 60*time.Second, "progress after restart", func(s daemon.Status) bool {
			return s.Running && s.Applied > applied+30
		})
		applied = st.Applied
		time.Sleep(time.Duration(r.IntN(400)) * time.Millisecond) // a random kill point, not a wait for replication
		if err := proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-proc.done
		proc.done <- nil

		c := slotState(t, p.src, slot)
		lsn, k := targetCheckpoint(t, p.dst, stream)
		if c < prevC {
			t.Errorf("kill %d: confirmed_flush_lsn went back from %s to %s", i+1, prevC, c)
		}
		prevC = c
		if c > lsn {
			// The slot is told only what the target's checkpoint holds
			// (idle progress included), so it can never be past it.
			t.Errorf("kill %d: confirmed_flush_lsn %s is past the target's checkpoint %s/%d", i+1, c, lsn, k)
		}
		var below []int64
		for _, tx := range l.committed() {
			if tx.upper <= c {
				below = append(below, tx.id)
			}
		}
		var onTarget []int64
		rows, err := p.dst.Query(ctx, `SELECT id FROM txlog WHERE id = ANY($1)`, below)
		if err != nil {
			t.Fatal(err)
		}
		onTarget, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		checked += len(below)
		if len(onTarget) != len(below) {
			have := map[int64]bool{}
			for _, id := range onTarget {
				have[id] = true
			}
			var missing []int64
			for _, id := range below {
				if !have[id] {
					missing = append(missing, id)
				}
			}
			sort.Slice(missing, func(a, b int) bool { return missing[a] < missing[b] })
			if len(missing) > 10 {
				missing = missing[:10]
			}
			t.Fatalf("kill %d: confirmed_flush_lsn %s passed transactions the target had not committed (target checkpoint %s/%d): %d of the %d transactions committed below it are missing on the target, e.g. txlog ids %v; log:\n%s",
				i+1, c, lsn, k, len(below)-len(onTarget), len(below), missing, proc.logText())
		}
		t.Logf("kill %d: applied %d; confirmed_flush %s, target checkpoint %s/%d; %d transactions committed below confirmed_flush, all on the target",
			i+1, applied, c, lsn, k, len(below))
	}
	stopWorkload()
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if prevC == 0 || checked == 0 {
		t.Fatalf("the slot never moved (confirmed_flush %s, %d transactions checked): the test checked nothing", prevC, checked)
	}
	proc := startSluice(t, bin, args...)
	waitConverged(t, p, tables, 90*time.Second, nil)
	sigtermWithin(t, proc, 60*time.Second)
	t.Logf("10 kills; %d transactions; confirmed_flush never past the target's checkpoint", len(l.committed()))
}
