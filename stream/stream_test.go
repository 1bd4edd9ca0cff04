package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/controller"
)

var table = &sluice.Table{
	Name:    sluice.TableName{Schema: "public", Name: "t"},
	Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "v", Type: "text"}},
	Key:     []int{0},
}

// sliceReader hands out n inserts in chunks, then reports idle.
type sliceReader struct {
	mu    sync.Mutex
	next  int
	n     int
	acked sluice.Position
}

func (r *sliceReader) Tables() []*sluice.Table { return []*sluice.Table{table} }

func (r *sliceReader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next >= r.n {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		return nil, nil
	}
	k := min(max, 37, r.n-r.next)
	out := inserts(r.next, k)
	r.next += k
	return out, nil
}

// inserts returns k inserts of rows from, from+1, …, each at its own
// position.
func inserts(from, k int) []sluice.Change {
	out := make([]sluice.Change, k)
	for i := range out {
		id := strconv.Itoa(from + i)
		out[i] = sluice.Change{Table: table, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(id), sluice.Text("v" + id)},
			Pos: sluice.Position{Kind: "test", Token: id}}
	}
	return out
}

func (r *sliceReader) Ack(_ context.Context, pos sluice.Position) error {
	r.mu.Lock()
	r.acked = pos
	r.mu.Unlock()
	return nil
}

func (r *sliceReader) Close() error { return nil }

// rowTarget applies batches to a map; fail decides per attempt whether the
// batch fails.
type rowTarget struct {
	mu      sync.Mutex
	rows    map[string]string
	cp      sluice.Checkpoint
	applies int
	fail    func(attempt int, b *apply.Batch) error
}

func (t *rowTarget) Apply(_ context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.applies++
	if t.fail != nil {
		if err := t.fail(t.applies, b); err != nil {
			return err
		}
	}
	for _, tb := range b.Tables {
		for _, k := range tb.Deletes {
			delete(t.rows, k[0].Text)
		}
		for _, r := range tb.Upserts {
			t.rows[r[0].Text] = r[1].Text
		}
	}
	t.cp = cp
	return nil
}

func (t *rowTarget) Ping(context.Context) (time.Duration, error) { return time.Millisecond, nil }

// memStore checks that the state file never moves ahead of the target.
type memStore struct {
	mu     sync.Mutex
	target *rowTarget
	cp     sluice.Checkpoint
	err    string
	bad    error
}

func (s *memStore) Commit(cp sluice.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.target.mu.Lock()
	onTarget := s.target.cp
	s.target.mu.Unlock()
	if onTarget.Seq < cp.Seq && s.bad == nil {
		s.bad = fmt.Errorf("state file checkpoint seq %d ahead of the target's %d", cp.Seq, onTarget.Seq)
	}
	s.cp = cp
	return nil
}

func (s *memStore) SetError(_, msg string) error {
	s.mu.Lock()
	s.err = msg
	s.mu.Unlock()
	return nil
}

func run(t *testing.T, n int, fail func(int, *apply.Batch) error, batch int) (*rowTarget, *memStore, *sliceReader, error) {
	t.Helper()
	return runWith(t, n, fail, controller.BatchConfig{Initial: batch, Budget: time.Second})
}

// runWith is run with the batch controller configured by cfg.
func runWith(t *testing.T, n int, fail func(int, *apply.Batch) error, cfg controller.BatchConfig) (*rowTarget, *memStore, *sliceReader, error) {
	t.Helper()
	rd := &sliceReader{n: n}
	tgt := &rowTarget{rows: map[string]string{}, fail: fail}
	store := &memStore{target: tgt}
	s := New(Config{
		ID: "test", Reader: rd, Target: tgt, Store: store,
		Batch:       controller.NewBatch(cfg),
		MaxAttempts: 6,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for {
		select {
		case err := <-done:
			return tgt, store, rd, err
		case <-time.After(5 * time.Millisecond):
		}
		if st := s.Stats(); st.Applied == uint64(n) && st.CaughtUp {
			cancel()
			return tgt, store, rd, <-done
		}
	}
}

func TestStreamAppliesEverythingOnce(t *testing.T) {
	const n = 1000
	tgt, store, rd, err := run(t, n, nil, 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(tgt.rows) != n {
		t.Fatalf("target has %d rows, want %d", len(tgt.rows), n)
	}
	if store.bad != nil {
		t.Fatal(store.bad)
	}
	if store.cp.Applied != n || store.cp.Position.Token != strconv.Itoa(n-1) || rd.acked != store.cp.Position {
		t.Fatalf("checkpoint %+v, acked %v", store.cp, rd.acked)
	}
}

func TestStreamRetriesKilledBatchesSmaller(t *testing.T) {
	const n = 500
	var sizes []int
	fail := func(attempt int, b *apply.Batch) error {
		sizes = append(sizes, b.Changes)
		// The target kills any transaction of more than 50 changes.
		if b.Changes > 50 {
			return &apply.RetryableError{Err: errors.New("tx killer rollback"), Killed: true}
		}
		return nil
	}
	tgt, store, _, err := run(t, n, fail, 400)
	if err != nil {
		t.Fatalf("stream failed: %v (batch sizes %v)", err, sizes)
	}
	if len(tgt.rows) != n || store.cp.Applied != n || store.bad != nil {
		t.Fatalf("rows %d, checkpoint %+v, %v", len(tgt.rows), store.cp, store.bad)
	}
}

func TestStreamStopsOnPermanentError(t *testing.T) {
	fail := func(attempt int, b *apply.Batch) error {
		if attempt == 3 {
			return errors.New(`apply upsert of 10 rows to public.t: violates check constraint "t_v_check"`)
		}
		return nil
	}
	// Pinned: the first batches would otherwise be sized from the backlog,
	// and this wants the third of several.
	_, store, _, err := runWith(t, 1000, fail, controller.BatchConfig{Fixed: 10, Budget: time.Second})
	if err == nil || store.err == "" {
		t.Fatalf("err %v, state file error %q; want the CHECK error in both", err, store.err)
	}
	if store.cp.Seq != 2 {
		t.Fatalf("checkpoint seq %d, want 2: the failed batch must not be checkpointed", store.cp.Seq)
	}
}

func TestStreamGivesUpAfterRepeatedKills(t *testing.T) {
	fail := func(int, *apply.Batch) error {
		return &apply.RetryableError{Err: errors.New("tx killer rollback"), Killed: true}
	}
	_, store, _, err := run(t, 10, fail, 10)
	if err == nil || store.cp.Seq != 0 {
		t.Fatalf("err %v, checkpoint %+v; want an error and no checkpoint", err, store.cp)
	}
}

func TestBytePrefix(t *testing.T) {
	size := func(n *int64) int64 { return *n }
	tests := []struct {
		name  string
		sizes []int64
		max   int64
		want  int
	}{
		{"no cap", []int64{100, 100, 100}, 0, 3},
		{"all fit", []int64{100, 100, 100}, 300, 3},
		{"cut", []int64{100, 100, 100}, 250, 2},
		{"first alone over the cap", []int64{500, 10}, 100, 1},
		{"empty", nil, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bytePrefix(tt.sizes, tt.max, size); got != tt.want {
				t.Fatalf("bytePrefix(%v, %d) = %d, want %d", tt.sizes, tt.max, got, tt.want)
			}
		})
	}
}

// TestMaxBatchBytes runs the single apply loop and lanes with a batch size
// (in changes) far above what the byte cap allows: every transaction must
// stay under the cap, and everything must still be applied once.
func TestMaxBatchBytes(t *testing.T) {
	const n = 2000
	var cs []sluice.Change
	for i := range n {
		id := strconv.Itoa(i)
		cs = append(cs, sluice.Change{Table: table, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(id), sluice.Text("v" + id)},
			Pos: sluice.Position{Kind: "test", Token: id}})
	}
	one := int64(cs[0].Size())
	maxBytes := 8 * one // about 8 changes, against a batch size of 500
	tests := []struct {
		name  string
		lanes int
	}{
		{"single loop", 1},
		{"lanes", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := &sharedRows{rows: map[string]string{}}
			newSizer := func() Sizer {
				return controller.NewBatch(controller.BatchConfig{Initial: 500, Min: 500, Max: 500, Budget: time.Second})
			}
			var mu sync.Mutex
			var over []int64
			largest := 0
			s := New(Config{
				ID: "bytes", Reader: &scriptReader{cs: cs}, Target: &laneTarget{db},
				Store: &memStore{target: &rowTarget{rows: map[string]string{}}}, Batch: newSizer(),
				MinLanes: tt.lanes, MaxLanes: tt.lanes,
				NewTarget:     func(context.Context) (Target, error) { return &laneTarget{db}, nil },
				NewSizer:      newSizer,
				MaxBatchBytes: maxBytes,
				OnBatch: func(batch []sluice.Change, _ time.Duration, err error) {
					var sum int64
					for i := range batch {
						sum += int64(batch[i].Size())
					}
					mu.Lock()
					defer mu.Unlock()
					if sum > maxBytes && len(batch) > 1 {
						over = append(over, sum)
					}
					largest = max(largest, len(batch))
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			for s.Stats().Applied < n && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond) // polling interval
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := s.Stats().Applied; got != n {
				t.Fatalf("applied %d of %d changes", got, n)
			}
			if len(db.rows) != n {
				t.Fatalf("target has %d rows, want %d", len(db.rows), n)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(over) > 0 {
				t.Fatalf("%d transactions carried more than %d bytes, e.g. %d", len(over), maxBytes, over[0])
			}
			// The cap must cut batches, not shrink them to single changes.
			if largest < 2 {
				t.Fatalf("largest batch %d changes: the byte cap should allow several", largest)
			}
		})
	}
}

// backlogReader holds a backlog of n inserts that its first Read returns
// (as many as asked for) only after delay, as a source does when it opens.
type backlogReader struct {
	sliceReader
	delay time.Duration
	once  sync.Once
}

func (r *backlogReader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	r.once.Do(func() {
		select {
		case <-ctx.Done():
		case <-time.After(r.delay):
		}
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next >= r.n {
		r.mu.Unlock()
		defer r.mu.Lock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		return nil, nil
	}
	k := min(max, r.n-r.next)
	out := inserts(r.next, k)
	r.next += k
	return out, nil
}

// measuredTarget is a rowTarget that measured the link's round trip while it
// opened.
type measuredTarget struct{ *rowTarget }

func (measuredTarget) MeasuredRTT() (time.Duration, bool) { return 20 * time.Millisecond, true }

// TestStreamFirstBatchSizedFromBacklog: the apply loop finds the queue
// empty at start (the source is still opening); when the backlog arrives
// its first batch is sized from it (controller.Batch.SizeFor), not from
// Initial as the empty queue would have it.
func TestStreamFirstBatchSizedFromBacklog(t *testing.T) {
	const n = 3000
	rd := &backlogReader{sliceReader: sliceReader{n: n}, delay: 100 * time.Millisecond}
	var sizes []int
	tgt := &rowTarget{rows: map[string]string{}, fail: func(_ int, b *apply.Batch) error {
		sizes = append(sizes, len(b.Tables[0].Upserts))
		return nil
	}}
	s := New(Config{
		ID: "test", Reader: rd, Target: measuredTarget{tgt}, Store: &memStore{target: tgt},
		// With a 20 ms round trip the budget allows ½·(1 s − 40 ms) ÷
		// 100 µs = 4,800 changes first: the whole backlog.
		Batch:       controller.NewBatch(controller.BatchConfig{Initial: 1000, Budget: time.Second}),
		MaxAttempts: 6,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for st := s.Stats(); st.Applied < n; st = s.Stats() {
		select {
		case err := <-done:
			t.Fatalf("stream stopped after %d of %d changes: %v", st.Applied, n, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tgt.mu.Lock()
	defer tgt.mu.Unlock()
	if len(tgt.rows) != n || len(sizes) == 0 || sizes[0] != n {
		t.Fatalf("%d rows on the target, batches %v: want the %d-change backlog in the first batch", len(tgt.rows), sizes, n)
	}
}
