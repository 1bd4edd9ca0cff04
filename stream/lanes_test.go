package stream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/controller"
)

// scriptReader hands out a fixed list of changes.
type scriptReader struct {
	mu    sync.Mutex
	cs    []sluice.Change
	next  int
	acked sluice.Position
}

func (r *scriptReader) Tables() []*sluice.Table { return []*sluice.Table{table} }
func (r *scriptReader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next >= len(r.cs) {
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
		r.mu.Lock()
		return nil, ctx.Err()
	}
	k := min(max, 50, len(r.cs)-r.next)
	// A copy: a read's slice is the caller's (source.Reader), and the
	// stream clears the changes it routed.
	out := slices.Clone(r.cs[r.next : r.next+k])
	r.next += k
	return out, nil
}
func (r *scriptReader) Ack(_ context.Context, p sluice.Position) error {
	r.mu.Lock()
	r.acked = p
	r.mu.Unlock()
	return nil
}
func (r *scriptReader) Close() error { return nil }

// sharedRows is the target database the lanes' connections write to. It
// checks, at every commit, that the checkpoint committed with a batch
// never passes a change that is not committed.
type sharedRows struct {
	mu        sync.Mutex
	rows      map[string]string
	committed int
	bad       error
	maxCP     uint64
	// failEvery > 0 fails every failEvery-th transaction (of more than one
	// change) as a lost connection; failed counts them.
	failEvery int
	applies   int
	failed    int
}

type laneTarget struct{ db *sharedRows }

func (t *laneTarget) Apply(_ context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	time.Sleep(time.Millisecond) // a round trip; lets lanes interleave
	t.db.mu.Lock()
	defer t.db.mu.Unlock()
	t.db.applies++
	if t.db.failEvery > 0 && t.db.applies%t.db.failEvery == 0 && b.Changes > 1 {
		// The connection dropped: nothing of the batch is committed.
		t.db.failed++
		return &apply.RetryableError{Err: errors.New("connection lost")}
	}
	for _, tb := range b.Tables {
		for _, k := range tb.Deletes {
			delete(t.db.rows, k[0].Text)
		}
		for _, r := range tb.Upserts {
			t.db.rows[r[0].Text] = r[1].Text
		}
	}
	t.db.committed += b.Changes
	// The watermark counts committed changes: it can never exceed them.
	if int(cp.Applied) > t.db.committed && t.db.bad == nil {
		t.db.bad = fmt.Errorf("checkpoint applied=%d committed with only %d changes committed", cp.Applied, t.db.committed)
	}
	t.db.maxCP = max(t.db.maxCP, cp.Applied)
	return nil
}

func (t *laneTarget) Ping(context.Context) (time.Duration, error) { return time.Millisecond, nil }

// orderWorkload is n changes to 300 keys, with deletes and, if moves, key
// moves, and the rows they leave.
func orderWorkload(n int, moves bool) ([]sluice.Change, map[string]string) {
	r := rand.New(rand.NewPCG(7, 9))
	want := map[string]string{}
	var cs []sluice.Change
	for i := 0; i < n; i++ {
		id := strconv.Itoa(r.IntN(300))
		pos := sluice.Position{Kind: "test", Token: strconv.Itoa(i)}
		v := fmt.Sprintf("v%d", i)
		switch _, exists := want[id]; {
		case !exists:
			cs = append(cs, sluice.Change{Table: table, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(id), sluice.Text(v)}, Pos: pos})
			want[id] = v
		case r.IntN(5) == 0:
			cs = append(cs, sluice.Change{Table: table, Op: sluice.OpDelete, Key: sluice.Row{sluice.Text(id)}, Pos: pos})
			delete(want, id)
		case moves && r.IntN(5) == 0:
			// Primary-key change to a free id: probably another lane.
			nid := strconv.Itoa(300 + r.IntN(300))
			if _, taken := want[nid]; taken {
				continue
			}
			cs = append(cs, sluice.Change{Table: table, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text(id)}, Row: sluice.Row{sluice.Text(nid), sluice.Text(v)}, Pos: pos})
			delete(want, id)
			want[nid] = v
		default:
			cs = append(cs, sluice.Change{Table: table, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text(id)}, Row: sluice.Row{sluice.Text(id), sluice.Text(v)}, Pos: pos})
			want[id] = v
		}
	}
	for i := range cs {
		cs[i].Pos.Token = strconv.Itoa(i)
	}
	return cs, want
}

func TestLanesKeepRowOrderAndWatermark(t *testing.T) {
	cs, want := orderWorkload(4000, true)
	db := &sharedRows{rows: map[string]string{}}
	rd := &scriptReader{cs: cs}
	store := &memStore{target: &rowTarget{rows: map[string]string{}}}
	newSizer := func() Sizer {
		return controller.NewBatch(controller.BatchConfig{Initial: 40, Max: 200, Budget: time.Second})
	}
	s := New(Config{
		ID: "lanes", Reader: rd, Target: &laneTarget{db}, Store: store, Batch: newSizer(),
		MinLanes: 4, MaxLanes: 4,
		NewTarget: func(context.Context) (Target, error) { return &laneTarget{db}, nil },
		NewSizer:  newSizer,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(25 * time.Second)
	for s.Stats().Applied < uint64(len(cs)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if db.bad != nil {
		t.Fatal(db.bad)
	}
	if got := s.Stats().Applied; got != uint64(len(cs)) {
		t.Fatalf("applied %d of %d changes", got, len(cs))
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
}

// countingTarget records which connection applied each table's rows.
type countingTarget struct {
	laneTarget
	id   int
	used map[string]map[int]bool
	mu   *sync.Mutex
}

func (t *countingTarget) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	t.mu.Lock()
	for _, tb := range b.Tables {
		if t.used[tb.Table.Name.Name] == nil {
			t.used[tb.Table.Name.Name] = map[int]bool{}
		}
		t.used[tb.Table.Name.Name][t.id] = true
	}
	t.mu.Unlock()
	return t.laneTarget.Apply(ctx, b, cp)
}

func TestWholeTableStaysInOneLane(t *testing.T) {
	uniq := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "users"}, Columns: table.Columns, Key: []int{0}}
	var cs []sluice.Change
	for i := 0; i < 2000; i++ {
		tb := table
		if i%2 == 0 {
			tb = uniq
		}
		id := strconv.Itoa(i)
		cs = append(cs, sluice.Change{Table: tb, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(id), sluice.Text("v")},
			Pos: sluice.Position{Kind: "test", Token: id}})
	}
	db := &sharedRows{rows: map[string]string{}}
	used := map[string]map[int]bool{}
	var mu sync.Mutex
	next := 0
	newTarget := func(context.Context) (Target, error) {
		mu.Lock()
		defer mu.Unlock()
		next++
		return &countingTarget{laneTarget: laneTarget{db}, id: next, used: used, mu: &mu}, nil
	}
	first, _ := newTarget(context.Background())
	newSizer := func() Sizer {
		return controller.NewBatch(controller.BatchConfig{Initial: 20, Max: 50, Budget: time.Second})
	}
	s := New(Config{
		ID: "whole", Reader: &scriptReader{cs: cs}, Target: first, Store: &memStore{target: &rowTarget{rows: map[string]string{}}},
		Batch: newSizer(), MinLanes: 4, MaxLanes: 4, NewTarget: newTarget, NewSizer: newSizer,
		Groups: map[sluice.TableName]string{uniq.Name: uniq.Name.String()},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for s.Stats().Applied < uint64(len(cs)) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(used["users"]); n != 1 {
		t.Fatalf("users (unique keys) was applied by %d connections, want 1", n)
	}
	if n := len(used["t"]); n < 2 {
		t.Fatalf("t was applied by %d connections; keyed routing should spread it", n)
	}
}

// rttTarget is a target on a slow link whose server is never the limit:
// every transaction costs one round trip, whatever it carries, and
// several connections run side by side.
type rttTarget struct {
	db  *sharedRows
	rtt time.Duration
}

func (t *rttTarget) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	time.Sleep(t.rtt)
	return (&laneTarget{t.db}).Apply(ctx, b, cp)
}

func (t *rttTarget) Ping(context.Context) (time.Duration, error) { return t.rtt, nil }

// TestLanesGrowWhenRoundTripBound: with batches capped by MaxBatchBytes,
// one lane is bound by the round trip (cap/RTT), and every added lane adds
// as much again. The lane count must climb well above one, and the
// backlog must drain faster than one lane could.
func TestLanesGrowWhenRoundTripBound(t *testing.T) {
	const (
		n   = 6000
		rtt = 20 * time.Millisecond
	)
	var cs []sluice.Change
	for i := range n {
		id := strconv.Itoa(i)
		cs = append(cs, sluice.Change{Table: table, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(id), sluice.Text("v" + id)},
			Pos: sluice.Position{Kind: "test", Token: id}})
	}
	maxBytes := 20 * int64(cs[0].Size()) // ~20 changes a batch: one lane ≈ 1,000/s
	db := &sharedRows{rows: map[string]string{}}
	newSizer := func() Sizer {
		return controller.NewBatch(controller.BatchConfig{Initial: 500, Budget: time.Second})
	}
	s := New(Config{
		ID: "rtt", Reader: &scriptReader{cs: cs}, Target: &rttTarget{db, rtt},
		Store: &memStore{target: &rowTarget{rows: map[string]string{}}}, Batch: newSizer(),
		MinLanes: 1, MaxLanes: 4, LaneWindow: 300 * time.Millisecond,
		NewTarget:     func(context.Context) (Target, error) { return &rttTarget{db, rtt}, nil },
		NewSizer:      newSizer,
		MaxBatchBytes: maxBytes,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Run(ctx) }()
	peak := 0
	for s.Stats().Applied < n && ctx.Err() == nil {
		peak = max(peak, s.Stats().Lanes)
		time.Sleep(5 * time.Millisecond) // sampling interval
	}
	took := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Applied; got != n {
		t.Fatalf("applied %d of %d changes", got, n)
	}
	// One lane needs n/20 round trips: 300 × 20 ms = 6 s.
	oneLane := time.Duration(n/20) * rtt
	t.Logf("%d changes in %v with up to %d lanes (one lane: ~%v)", n, took.Round(time.Millisecond), peak, oneLane)
	if peak < 3 {
		t.Fatalf("lanes peaked at %d: a round-trip-bound lane should be joined by more", peak)
	}
	if took > oneLane*3/4 {
		t.Fatalf("took %v, one lane alone takes ~%v: the added lanes did not raise throughput", took, oneLane)
	}
}

// TestBatchesCompactedAheadSurviveFailures runs the order workload with the
// next batch compacted while the one before it is in flight, with
// transactions failing on the way: each failed batch is retried in pieces
// while the batch after it is already compacted. The rows must come out
// as the source left them, the checkpoint never ahead of the commits, and
// batches must have been compacted ahead.
func TestBatchesCompactedAheadSurviveFailures(t *testing.T) {
	tests := []struct {
		name      string
		lanes     int
		failEvery int
		// Whether a lane holds a second batch when it sends one depends on
		// how fast the dispatcher routes: lanes must converge whether or
		// not they compacted ahead, the single loop must compact ahead.
		wantAhead bool
	}{
		{"one loop", 1, 0, true},
		{"one loop, failures", 1, 10, true},
		{"lanes", 4, 0, false},
		{"lanes, failures", 4, 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs, want := orderWorkload(3000, true)
			db := &sharedRows{rows: map[string]string{}, failEvery: tt.failEvery}
			rd := &scriptReader{cs: cs}
			store := &memStore{target: &rowTarget{rows: map[string]string{}}}
			newSizer := func() Sizer {
				return controller.NewBatch(controller.BatchConfig{Initial: 40, Max: 200, Budget: time.Second})
			}
			s := New(Config{
				ID: "ahead", Reader: rd, Target: &laneTarget{db}, Store: store, Batch: newSizer(),
				MinLanes: tt.lanes, MaxLanes: tt.lanes, MaxAttempts: 20,
				NewTarget: func(context.Context) (Target, error) { return &laneTarget{db}, nil },
				NewSizer:  newSizer,
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			deadline := time.Now().Add(25 * time.Second)
			for s.Stats().Applied < uint64(len(cs)) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			db.mu.Lock()
			defer db.mu.Unlock()
			if db.bad != nil {
				t.Fatal(db.bad)
			}
			if st.Applied != uint64(len(cs)) {
				t.Fatalf("applied %d of %d changes", st.Applied, len(cs))
			}
			if tt.failEvery > 0 && db.failed == 0 {
				t.Fatal("no transaction failed: the test did not test retries")
			}
			if tt.wantAhead && st.CompactedAhead == 0 {
				t.Fatalf("no batch was compacted ahead (%d transactions)", db.applies)
			}
			if len(db.rows) != len(want) {
				t.Fatalf("target has %d rows, want %d", len(db.rows), len(want))
			}
			for k, v := range want {
				if db.rows[k] != v {
					t.Fatalf("row %s = %q, want %q", k, db.rows[k], v)
				}
			}
			t.Logf("%d transactions, %d failed, %d batches compacted ahead", db.applies, db.failed, st.CompactedAhead)
		})
	}
}

// TestPositionsModel pushes and drops positions at random against a map
// from change number to position, as the watermark and the dispatcher
// move them: at and drop must agree with it however the buffer wraps.
func TestPositionsModel(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		var p positions
		model := map[uint64]sluice.Position{}
		var w, next uint64 = 0, 1 // held: w+1 .. next-1
		for step := 0; step < 600; step++ {
			if r.IntN(2) == 0 {
				for range r.IntN(3000) {
					pos := sluice.Position{Kind: "t", Token: strconv.FormatUint(next, 10)}
					p.push(pos)
					model[next] = pos
					next++
				}
			} else if held := next - 1 - w; held > 0 {
				n := 1 + r.Uint64N(held)
				got := p.drop(int(n))
				if want := model[w+n]; got != want {
					t.Fatalf("seed %d step %d: drop(%d) = %v, want %v", seed, step, n, got, want)
				}
				for q := w + 1; q <= w+n; q++ {
					delete(model, q)
				}
				w += n
			}
			for range 5 {
				q := w + r.Uint64N(next-w+1) // from the watermark to one past the last
				got, ok := p.at(int(q) - int(w) - 1)
				want, wantOK := model[q]
				if ok != wantOK || got != want {
					t.Fatalf("seed %d step %d: at change %d = %v, %v; want %v, %v", seed, step, q, got, ok, want, wantOK)
				}
			}
		}
	}
}
