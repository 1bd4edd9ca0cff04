package stream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/controller"
)

// chainRows is a target whose lanes' checkpoint rows can be locked, as
// the real targets' ApplyAfter does: a transaction sent on a second
// connection waits for the lane's lock, then checks the sequence. Each
// transaction takes a random time on the way (so one sent later can
// arrive first) and on the server, and some fail.
type chainRows struct {
	mu      sync.Mutex
	rows    map[string]string
	seq     map[int]uint64 // per lane, the checkpoint row's sequence
	locks   map[int]*sync.Mutex
	rnd     *rand.Rand
	applies int
	// failEvery > 0 fails every failEvery-th transaction of more than
	// one change, after it took the lock.
	failEvery int
	failed    int
	chained   int // transactions sent with a check of the one before
	broken    int // checks that found it had not committed
	committed int
	bad       error
	// hold > 0 holds every transaction that long on the server, instead
	// of a random few milliseconds.
	hold time.Duration
	// sent lists the transactions in the order they reached it.
	sent []sentTx
}

type sentTx struct {
	seq     uint64
	changes int
	after   uint64 // the transaction it is chained after, or 0
}

func (db *chainRows) lock(lane int) *sync.Mutex {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.locks[lane] == nil {
		db.locks[lane] = &sync.Mutex{}
	}
	return db.locks[lane]
}

func (db *chainRows) sleep(most time.Duration) {
	db.mu.Lock()
	d := time.Duration(db.rnd.Int64N(int64(most)))
	db.mu.Unlock()
	time.Sleep(d)
}

type chainConn struct{ db *chainRows }

func (c *chainConn) Ping(context.Context) (time.Duration, error) { return time.Millisecond, nil }

func (c *chainConn) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	return c.apply(b, cp, false, 0, nil)
}

func (c *chainConn) ApplyAfter(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint, after uint64, written func()) error {
	return c.apply(b, cp, true, after, written)
}

func (c *chainConn) apply(b *apply.Batch, cp sluice.Checkpoint, chain bool, after uint64, written func()) error {
	db := c.db
	if written != nil {
		written()
	}
	db.sleep(3 * time.Millisecond) // on the way
	lk := db.lock(cp.Lane)
	if chain {
		lk.Lock()
		defer lk.Unlock()
	}
	db.mu.Lock()
	db.applies++
	db.sent = append(db.sent, sentTx{cp.Seq, b.Changes, after})
	if after > 0 {
		db.chained++
		if held := db.seq[cp.Lane]; held != after {
			db.broken++
			db.mu.Unlock()
			return &apply.RetryableError{Err: fmt.Errorf("%w: lane %d holds %d, not %d", apply.ErrChainBroken, cp.Lane, held, after)}
		}
	}
	fail := db.failEvery > 0 && db.applies%db.failEvery == 0 && b.Changes > 1
	db.mu.Unlock()
	if db.hold > 0 {
		time.Sleep(db.hold)
	} else {
		db.sleep(2 * time.Millisecond) // on the server, holding the lock
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if fail {
		db.failed++
		return &apply.RetryableError{Err: errors.New("killed")}
	}
	if cp.Seq <= db.seq[cp.Lane] && db.bad == nil {
		db.bad = fmt.Errorf("lane %d committed checkpoint %d after %d", cp.Lane, cp.Seq, db.seq[cp.Lane])
	}
	db.seq[cp.Lane] = cp.Seq
	for _, tb := range b.Tables {
		for _, k := range tb.Deletes {
			delete(db.rows, k[0].Text)
		}
		for _, r := range tb.Upserts {
			db.rows[r[0].Text] = r[1].Text
		}
	}
	db.committed += b.Changes
	if int(cp.Applied) > db.committed && db.bad == nil {
		db.bad = fmt.Errorf("checkpoint applied=%d committed with only %d changes committed", cp.Applied, db.committed)
	}
	return nil
}

// stopWhenApplied waits until s applied n changes (or ctx ended), stops
// it (cancel), and fails the test if Run (whose result done carries)
// returned an error.
func stopWhenApplied(ctx context.Context, t *testing.T, s *Stream, n int, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	for s.Stats().Applied < uint64(n) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOverlapKeepsOrder runs a generated workload through lanes that send
// their next transaction while one is in flight, on a target where
// transactions overtake each other on the way and some fail: every row
// must end as the source left it, each lane's checkpoints must commit in
// order, and no checkpoint may pass an uncommitted change.
func TestOverlapKeepsOrder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failEvery int
		lanes     int
	}{
		{"no failures, 1 lane", 0, 1},
		{"failures, 1 lane", 7, 1},
		{"failures, 3 lanes", 9, 3},
		// --max-lanes 1: one ordering of the changes, still chained.
		{"max lanes 1", 0, 0},
		{"max lanes 1, failures", 7, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			cs, want := orderWorkload(4000, true)
			db := &chainRows{rows: map[string]string{}, seq: map[int]uint64{}, locks: map[int]*sync.Mutex{},
				rnd: rand.New(rand.NewPCG(seed, 1)), failEvery: tc.failEvery}
			rd := &scriptReader{cs: cs}
			newSizer := func() Sizer {
				return controller.NewBatch(controller.BatchConfig{Initial: 40, Max: 100, Budget: time.Second})
			}
			s := New(Config{
				ID: "overlap", Reader: rd, Target: &chainConn{db}, Store: &memStore{target: &rowTarget{rows: map[string]string{}}},
				// Lanes run with MaxLanes > 1; the window keeps the count.
				Batch: newSizer(), MinLanes: max(tc.lanes, 1), MaxLanes: tc.lanes + 1, LaneWindow: time.Hour, MaxAttempts: 50,
				NewTarget: func(context.Context) (Target, error) { return &chainConn{db}, nil },
				NewSizer:  newSizer,
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			stopWhenApplied(ctx, t, s, len(cs), cancel, done)
			db.mu.Lock()
			defer db.mu.Unlock()
			if db.bad != nil {
				t.Fatal(db.bad)
			}
			if got := s.Stats().Applied; got != uint64(len(cs)) {
				t.Fatalf("applied %d of %d changes", got, len(cs))
			}
			if db.chained == 0 {
				t.Fatal("no transaction was sent while another was in flight")
			}
			if len(db.rows) != len(want) {
				t.Fatalf("target has %d rows, want %d", len(db.rows), len(want))
			}
			for k, v := range want {
				if db.rows[k] != v {
					t.Fatalf("row %s = %q, want %q", k, db.rows[k], v)
				}
			}
			if rd.acked.Token != strconv.Itoa(len(cs)-1) {
				t.Fatalf("reader acked %v, want the last change", rd.acked)
			}
			t.Logf("%d transactions, %d chained, %d found the one before not committed, %d failed", db.applies, db.chained, db.broken, db.failed)
		})
	}
}

// TestChainOnceSecondConnectionOpens: over a WAN the lane's second
// connection opens while the first transactions are in flight. A
// transaction sent while it is still opening takes the lane's lock, so
// that the next is sent as soon as the connection is open, chained after
// it, instead of after its commit with the target idle for a round trip.
// The first transaction commits (the lane's checkpoint row exists), the
// second is sent with the connection still opening, which opens while the
// second is held on the target: the third must go out chained after it.
func TestChainOnceSecondConnectionOpens(t *testing.T) {
	cs, want := orderWorkload(3000, false)
	db := &chainRows{rows: map[string]string{}, seq: map[int]uint64{}, locks: map[int]*sync.Mutex{},
		rnd: rand.New(rand.NewPCG(1, 1)), hold: 300 * time.Millisecond}
	release := make(chan struct{})
	newSizer := func() Sizer {
		return controller.NewBatch(controller.BatchConfig{Fixed: 1000, Budget: 10 * time.Second})
	}
	s := New(Config{
		ID: "late-alt", Reader: &scriptReader{cs: cs}, Target: &chainConn{db}, Store: &memStore{target: &rowTarget{rows: map[string]string{}}},
		Batch: newSizer(), MinLanes: 1, MaxLanes: 2, LaneWindow: time.Hour,
		NewTarget: func(ctx context.Context) (Target, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &chainConn{db}, nil
		},
		NewSizer: newSizer,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	applies := func() int {
		db.mu.Lock()
		defer db.mu.Unlock()
		return db.applies
	}
	for applies() < 2 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	close(release)
	stopWhenApplied(ctx, t, s, len(cs), cancel, done)
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.bad != nil {
		t.Fatal(db.bad)
	}
	// The first is as large as the reader's first page; the second was
	// sent while the connection was still opening.
	if len(db.sent) < 3 || db.sent[2].after != db.sent[1].seq || db.sent[1].after != 0 || db.broken != 0 {
		t.Fatalf("transactions (seq, changes, chained after) %v (%d found the one before not committed): want the third chained after the second", db.sent, db.broken)
	}
	if len(db.rows) != len(want) {
		t.Fatalf("target has %d rows, want %d", len(db.rows), len(want))
	}
	for k, v := range want {
		if db.rows[k] != v {
			t.Fatalf("row %s = %q, want %q", k, db.rows[k], v)
		}
	}
}

// TestNoOverlapOneConnection: --max-lanes 1 --no-overlap applies over the
// one target connection the stream was given, one transaction at a time:
// no second connection opens and nothing is chained.
func TestNoOverlapOneConnection(t *testing.T) {
	cs, want := orderWorkload(2000, false)
	db := &chainRows{rows: map[string]string{}, seq: map[int]uint64{}, locks: map[int]*sync.Mutex{},
		rnd: rand.New(rand.NewPCG(1, 2))}
	newSizer := func() Sizer {
		return controller.NewBatch(controller.BatchConfig{Initial: 40, Max: 100, Budget: time.Second})
	}
	var opened atomic.Int32
	s := New(Config{
		ID: "no-overlap", Reader: &scriptReader{cs: cs}, Target: &chainConn{db}, Store: &memStore{target: &rowTarget{rows: map[string]string{}}},
		Batch: newSizer(), MinLanes: 1, MaxLanes: 1, NoOverlap: true,
		NewTarget: func(context.Context) (Target, error) { opened.Add(1); return &chainConn{db}, nil },
		NewSizer:  newSizer,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopWhenApplied(ctx, t, s, len(cs), cancel, done)
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.bad != nil {
		t.Fatal(db.bad)
	}
	if db.chained != 0 || opened.Load() != 0 {
		t.Fatalf("%d transactions chained, %d connections opened: want none with --no-overlap and one lane", db.chained, opened.Load())
	}
	for k, v := range want {
		if db.rows[k] != v {
			t.Fatalf("row %s = %q, want %q", k, db.rows[k], v)
		}
	}
}
