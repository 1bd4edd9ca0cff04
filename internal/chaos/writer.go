package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	wlgen "github.com/sluice-cdc/sluice/internal/workload"
)

// writer is the live source workload: the generator's transactions, one
// at a time, with a random update of a chaos_bulk row after about one in
// three. The scenarios hold it (hold/release) while the source restarts,
// so that no commit is in doubt (the generator's model needs every
// transaction committed exactly once, in order), and while they check.
type writer struct {
	pr      *pairRun
	txs     []wlgen.Tx
	rng     *rand.Rand
	gate    sync.Mutex
	next    int
	changes atomic.Int64
	pause   atomic.Int64 // nanoseconds between transactions
	done    chan struct{}
	stop    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	err     error
}

func newWriter(pr *pairRun, txs []wlgen.Tx) *writer {
	w := &writer{pr: pr, txs: txs, rng: rand.New(rand.NewPCG(pr.seed, 0xb01c)), done: make(chan struct{}), stop: make(chan struct{})}
	// Paced: a sustained stream over the whole run rather than one burst.
	w.pause.Store(int64(pr.cfg.Pause))
	return w
}

func (w *writer) hold()    { w.gate.Lock() }
func (w *writer) release() { w.gate.Unlock() }

func (w *writer) exhausted() bool {
	w.gate.Lock()
	defer w.gate.Unlock()
	return w.next >= len(w.txs)
}

func (w *writer) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *writer) finish() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *writer) run(ctx context.Context) {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		w.gate.Lock()
		if w.next >= len(w.txs) {
			w.gate.Unlock()
			return
		}
		err := w.step(ctx)
		w.gate.Unlock()
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			w.pr.logf("source workload stopped: %v", err)
			return
		}
		select {
		case <-w.stop:
			return
		case <-time.After(time.Duration(w.pause.Load())):
		}
	}
}

// step commits the next transaction, retrying one that failed before its
// commit (a connection left stale by a server restart): with the source
// restarts held off, no failure leaves a commit in doubt.
func (w *writer) step(ctx context.Context) error {
	tx := w.txs[w.next]
	db := w.pr.srcWorkloadDB()
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		if err = w.pr.w.Apply(ctx, db, []wlgen.Tx{tx}); err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(250 * time.Millisecond) // retry interval
	}
	if err != nil {
		return err
	}
	w.next++
	w.changes.Add(int64(len(tx.Stmts)))
	if w.rng.IntN(3) != 0 {
		return nil
	}
	id := 1 + w.rng.IntN(w.pr.cfg.BulkRows)
	q := fmt.Sprintf("UPDATE chaos_bulk SET k = k + 1, c = md5(random()::text) WHERE id = %d", id)
	if w.pr.spec.Src == daemon.EngineMySQL {
		q = fmt.Sprintf("UPDATE chaos_bulk SET k = k + 1, c = MD5(RAND()) WHERE id = %d", id)
	}
	for attempt := 0; attempt < 8; attempt++ {
		if err = w.pr.src.exec(ctx, q); err == nil {
			w.changes.Add(1)
			return nil
		}
		time.Sleep(250 * time.Millisecond) // retry interval
	}
	return fmt.Errorf("update chaos_bulk: %w", err)
}
