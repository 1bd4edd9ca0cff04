package stream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/controller"
)

// laneRows is a target database shared by the lanes' connections: rows,
// one checkpoint row per lane (as the real targets keep them), and how
// many times each source change was committed.
type laneRows struct {
	mu      sync.Mutex
	rows    map[string]string
	cps     map[int]sluice.Checkpoint
	applied map[string]int // change position → commits
	// hold, when set, runs before each transaction: it can delay it, or
	// fail it.
	hold func(ctx context.Context, b *apply.Batch) error
}

func newLaneRows() *laneRows {
	return &laneRows{rows: map[string]string{}, cps: map[int]sluice.Checkpoint{}, applied: map[string]int{}}
}

// onBatch counts the changes of every committed transaction.
func (db *laneRows) onBatch(cs []sluice.Change, _ time.Duration, err error) {
	if err != nil {
		return
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, c := range cs {
		if c.Op != sluice.OpProgress {
			db.applied[c.Pos.Token]++
		}
	}
}

// laneConn is one lane's connection; slow makes its transactions take
// longer, so that the other lanes commit ahead of it.
type laneConn struct {
	db   *laneRows
	slow time.Duration
}

func (t *laneConn) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	if t.db.hold != nil {
		if err := t.db.hold(ctx, b); err != nil {
			return err
		}
	}
	time.Sleep(time.Millisecond + t.slow)
	t.db.mu.Lock()
	defer t.db.mu.Unlock()
	for _, tb := range b.Tables {
		for _, k := range tb.Deletes {
			delete(t.db.rows, k[0].Text)
		}
		for _, r := range tb.Upserts {
			t.db.rows[r[0].Text] = r[1].Text
		}
	}
	for _, c := range b.Ordered {
		switch c.Op {
		case sluice.OpDelete:
			delete(t.db.rows, c.Key[0].Text)
		default:
			if c.Key != nil {
				delete(t.db.rows, c.Key[0].Text)
			}
			t.db.rows[c.Row[0].Text] = c.Row[1].Text
		}
	}
	if cp.Stream != "" {
		t.db.cps[cp.Lane] = cp
	}
	return nil
}

func (t *laneConn) Ping(context.Context) (time.Duration, error) { return time.Millisecond, nil }

// testCovers compares the test positions, which are change numbers.
func testCovers(p, c sluice.Position) (bool, bool, error) {
	pn, err1 := strconv.Atoi(p.Token)
	cn, err2 := strconv.Atoi(c.Token)
	if err := errors.Join(err1, err2); err != nil {
		return false, false, err
	}
	return cn <= pn, cn > pn, nil
}

// workload makes n changes over 200 keys (inserts, updates, deletes, key
// changes, also across lanes), numbered by position, and the rows they
// leave.
func workload(seed uint64, n int) ([]sluice.Change, map[string]string) {
	r := rand.New(rand.NewPCG(seed, 1))
	want := map[string]string{}
	var cs []sluice.Change
	for len(cs) < n {
		id := strconv.Itoa(r.IntN(200))
		pos := sluice.Position{Kind: "test", Token: strconv.Itoa(len(cs))}
		v := "v" + pos.Token
		switch _, exists := want[id]; {
		case !exists:
			cs = append(cs, sluice.Change{Table: table, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(id), sluice.Text(v)}, Pos: pos})
			want[id] = v
		case r.IntN(6) == 0:
			cs = append(cs, sluice.Change{Table: table, Op: sluice.OpDelete, Key: sluice.Row{sluice.Text(id)}, Pos: pos})
			delete(want, id)
		case r.IntN(8) == 0:
			nid := strconv.Itoa(r.IntN(200))
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
	return cs, want
}

// runLaned runs a stream of 4 lanes (lane 0's connection slow) over cs from
// start until stop says so, then cancels it as a kill would leave it: the
// lanes undrained.
func runLaned(t *testing.T, db *laneRows, cs []sluice.Change, start sluice.Checkpoint, rec *Recovery, minLanes, maxLanes int,
	stop func(s *Stream) bool) {
	t.Helper()
	first := &laneConn{db: db, slow: 15 * time.Millisecond}
	newTarget := func(context.Context) (Target, error) { return &laneConn{db: db}, nil }
	newSizer := func() Sizer {
		return controller.NewBatch(controller.BatchConfig{Initial: 5, Fixed: 5, Budget: time.Second})
	}
	store := &memStore{target: &rowTarget{}}
	s := New(Config{
		ID: "r", Reader: &scriptReader{cs: cs}, Target: first, Store: store, Batch: newSizer(),
		MinLanes: minLanes, MaxLanes: maxLanes, NewTarget: newTarget, NewSizer: newSizer,
		Start: start, Recovery: rec, Covers: testCovers, OnBatch: db.onBatch, ShutdownTimeout: time.Nanosecond,
		IdleWait: 20 * time.Millisecond,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for !stop(s) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond) // polling the stream's figures, not waiting for replication
	}
	if ctx.Err() != nil {
		t.Fatal("the stream did not get there in time")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// restart is where a stream resumes from the lanes' rows, as the daemon
// works it out: the highest watermark, and the lanes whose last change is
// past it.
func restart(db *laneRows) (sluice.Checkpoint, *Recovery) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return restartFrom(db.cps)
}

// nextAfter is the index of the first test change after start's position
// (the test positions are the changes' indexes).
func nextAfter(start sluice.Checkpoint) int {
	if start.Position.IsZero() {
		return 0
	}
	n, _ := strconv.Atoi(start.Position.Token)
	return n + 1
}

// restartFrom is restart from the lanes' rows cps.
func restartFrom(rows map[int]sluice.Checkpoint) (sluice.Checkpoint, *Recovery) {
	cps := make([]sluice.Checkpoint, 0, len(rows))
	for _, cp := range rows {
		cps = append(cps, cp)
	}
	start, _ := apply.Resume(cps)
	rec := &Recovery{Lanes: 4, Last: map[int]sluice.Position{}}
	for _, cp := range cps {
		start.Seq = max(start.Seq, cp.Seq)
		if covered, _, _ := testCovers(start.Position, cp.Last); !covered {
			rec.Last[cp.Lane] = cp.Last
		}
	}
	return start, rec
}

// TestLanesRecoverExactlyOnce stops a stream of 4 lanes without draining
// them, several times, with lane 0 slow so that the others commit well past
// the watermark, and resumes it as the daemon does. The changes the lanes
// had committed past the watermark must be skipped when read again: every
// change is committed exactly once, and the rows are the source's. Without
// the recovery the same restart commits some twice: the test can fail.
func TestLanesRecoverExactlyOnce(t *testing.T) {
	cs, want := workload(11, 3000)
	for _, withRecovery := range []bool{true, false} {
		t.Run(fmt.Sprintf("recovery=%v", withRecovery), func(t *testing.T) {
			db := newLaneRows()
			var start sluice.Checkpoint
			var rec *Recovery
			ahead := 0
			for round := 0; ; round++ {
				from := nextAfter(start)
				if rec != nil {
					ahead += len(rec.Last)
				}
				if !withRecovery {
					rec = nil
				}
				final := round == 3
				target := from + 600
				runLaned(t, db, cs[from:], start, rec, 4, 4, func(s *Stream) bool {
					if final {
						db.mu.Lock()
						defer db.mu.Unlock()
						return maps.Equal(db.rows, want) && s.Stats().CaughtUp
					}
					return s.Stats().Applied >= uint64(target)
				})
				if final {
					break
				}
				start, rec = restart(db)
			}
			if ahead == 0 {
				t.Fatal("no lane was ever past the watermark at a stop: the test proves nothing")
			}
			db.mu.Lock()
			defer db.mu.Unlock()
			var twice []string
			for _, c := range cs {
				switch n := db.applied[c.Pos.Token]; {
				case n > 1:
					twice = append(twice, c.Pos.Token)
				case n == 0:
					t.Fatalf("change %s was never committed", c.Pos.Token)
				}
			}
			if withRecovery && len(twice) > 0 {
				t.Fatalf("%d changes committed twice, e.g. %s", len(twice), strings.Join(twice[:min(5, len(twice))], ","))
			}
			if !withRecovery && len(twice) == 0 {
				t.Fatal("without the recovery no change was committed twice: the stops did not leave lanes ahead")
			}
			t.Logf("%d lane stops past the watermark, %d changes committed twice", ahead, len(twice))
		})
	}
}

// TestProgressMarkersCheckpoint: a reader's progress markers move the
// checkpoint and the source's acknowledgement while no change arrives, in
// the single loop and with lanes, and count as no change applied.
func TestProgressMarkersCheckpoint(t *testing.T) {
	for _, lanes := range []int{1, 3} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			var cs []sluice.Change
			for i := range 10 {
				id := strconv.Itoa(i)
				cs = append(cs, sluice.Change{Table: table, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(id), sluice.Text("v")},
					Pos: sluice.Position{Kind: "test", Token: id}})
			}
			for i := 10; i < 15; i++ {
				cs = append(cs, sluice.Change{Op: sluice.OpProgress, Pos: sluice.Position{Kind: "test", Token: strconv.Itoa(i)}})
			}
			db := newLaneRows()
			rd := &scriptReader{cs: cs}
			store := &laneStore{db: db}
			newSizer := func() Sizer { return controller.NewBatch(controller.BatchConfig{Initial: 4, Budget: time.Second}) }
			s := New(Config{ID: "p", Reader: rd, Target: &laneConn{db: db}, Store: store, Batch: newSizer(), MinLanes: lanes, MaxLanes: lanes,
				NewTarget: func(context.Context) (Target, error) { return &laneConn{db: db}, nil }, NewSizer: newSizer,
				IdleWait: 20 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			for ctx.Err() == nil {
				store.mu.Lock()
				at := store.cp.Position.Token
				store.mu.Unlock()
				rd.mu.Lock()
				acked := rd.acked.Token
				rd.mu.Unlock()
				if at == "14" && acked == "14" {
					break
				}
				time.Sleep(5 * time.Millisecond) // polling the checkpoint
			}
			if ctx.Err() != nil {
				t.Fatalf("checkpoint did not follow the progress markers: state file at %v", store.cp.Position)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.Applied != 10 {
				t.Errorf("applied = %d, want 10 (markers are not changes)", st.Applied)
			}
			if err := store.bad; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// laneStore is a state file that checks it never passes what the lanes'
// checkpoint rows on the target hold.
type laneStore struct {
	db  *laneRows
	mu  sync.Mutex
	cp  sluice.Checkpoint
	bad error
}

func (s *laneStore) Commit(cp sluice.Checkpoint) error {
	s.db.mu.Lock()
	var held uint64
	for _, r := range s.db.cps {
		held = max(held, r.Applied)
	}
	s.db.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if cp.Applied > held && s.bad == nil {
		s.bad = fmt.Errorf("state file at %d changes, the target's checkpoints hold %d", cp.Applied, held)
	}
	s.cp = cp
	return nil
}

func (s *laneStore) SetError(string, string) error { return nil }

// TestReorderOnConstraint: a target that refuses a compacted batch on a
// constraint (as a unique swap does) gets it again at once with the table's
// changes in source order, not smaller and not after a backoff; a batch
// that breaks a constraint in source order too stops the stream, saying the
// target differs from the source.
func TestReorderOnConstraint(t *testing.T) {
	cs, want := workload(3, 400)
	users := table.Name
	ce := func() error {
		return &apply.ConstraintError{Tables: []sluice.TableName{users}, Constraint: "t_v_key", Detail: "Key (v)=(x) already exists.", Err: errors.New("duplicate key")}
	}
	for _, tc := range []struct {
		name    string
		fail    func(b *apply.Batch) error
		wantErr string
	}{
		{"compacted batches fail", func(b *apply.Batch) error {
			if len(b.Tables) > 0 {
				return ce()
			}
			return nil
		}, ""},
		{"ordered batches fail too", func(b *apply.Batch) error { return ce() }, "target differs from the source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgt := &rowTarget{rows: map[string]string{}, fail: func(_ int, b *apply.Batch) error { return tc.fail(b) }}
			ordered := 0
			s := New(Config{ID: "o", Reader: &scriptReader{cs: cs}, Target: orderedTarget{tgt, &ordered}, Store: &memStore{target: tgt},
				Batch: controller.NewBatch(controller.BatchConfig{Initial: 50, Budget: time.Second}), IdleWait: 20 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			var err error
			for ctx.Err() == nil {
				select {
				case err = <-done:
				case <-time.After(5 * time.Millisecond): // polling the rows
				}
				if err != nil {
					break
				}
				tgt.mu.Lock()
				same := maps.Equal(tgt.rows, want)
				tgt.mu.Unlock()
				if same {
					break
				}
			}
			cancel()
			if err == nil {
				err = <-done
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if st := s.Stats(); st.Retries != 0 {
					t.Errorf("%d retries: a reorder is no failed attempt", st.Retries)
				}
				if ordered == 0 {
					t.Error("no batch was applied in source order")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "t_v_key") {
				t.Fatalf("err = %v, want one saying %q and naming the constraint", err, tc.wantErr)
			}
		})
	}
}

// orderedTarget applies a batch's ordered changes to a rowTarget too.
type orderedTarget struct {
	*rowTarget
	n *int
}

func (t orderedTarget) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	if err := t.rowTarget.Apply(ctx, b, cp); err != nil {
		return err
	}
	t.rowTarget.mu.Lock()
	defer t.rowTarget.mu.Unlock()
	if len(b.Ordered) > 0 {
		*t.n++
	}
	for _, c := range b.Ordered {
		switch c.Op {
		case sluice.OpDelete:
			delete(t.rows, c.Key[0].Text)
		default:
			if c.Key != nil {
				delete(t.rows, c.Key[0].Text)
			}
			t.rows[c.Row[0].Text] = c.Row[1].Text
		}
	}
	return nil
}

// keysOfLanes returns, for each of n lanes, count keys of table that are
// routed to it.
func keysOfLanes(n, count int) [][]string {
	probe := &multi{s: &Stream{}}
	out := make([][]string, n)
	for i, full := 0, 0; full < n; i++ {
		k := "k" + strconv.Itoa(i)
		l := probe.laneOf(table, sluice.Row{sluice.Text(k)}, n)
		if len(out[l]) < count {
			out[l] = append(out[l], k)
			if len(out[l]) == count {
				full++
			}
		}
	}
	return out
}

// keyInserts is an insert of each key, positioned by its index, and the
// rows they leave.
func keyInserts(keys []string) ([]sluice.Change, map[string]string) {
	var cs []sluice.Change
	want := map[string]string{}
	for i, k := range keys {
		cs = append(cs, sluice.Change{Table: table, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(k), sluice.Text("v" + k)},
			Pos: sluice.Position{Kind: "test", Token: strconv.Itoa(i)}})
		want[k] = "v" + k
	}
	return cs, want
}

// batchHas reports whether b writes the row of key k.
func batchHas(b *apply.Batch, k string) bool {
	for _, tb := range b.Tables {
		for _, r := range tb.Upserts {
			if r[0].Text == k {
				return true
			}
		}
	}
	return false
}

// TestLaneZeroWatermarkKeepsItsLast (issue 28, item 5): lane 0 writes the
// watermark when the lanes went quiet ahead of what their rows hold, here
// while lane 1 is stuck on an earlier change and lane 0's own changes lie
// past the watermark. Its row must still name lane 0's last change, so
// that after a kill the restart skips those changes rather than applying
// them a second time.
func TestLaneZeroWatermarkKeepsItsLast(t *testing.T) {
	lanes := keysOfLanes(4, 6)
	stuck, first, second := lanes[1][0], lanes[2][0], lanes[3][0]
	// Lanes 2 and 3 send their change together and lane 3 commits last,
	// so that its row holds a watermark older than the one its commit
	// makes true: lane 0, done with its own changes, writes that one.
	cs, want := keyInserts(append([]string{first, second, stuck}, lanes[0]...))
	db := newLaneRows()
	released := make(chan struct{})
	db.hold = func(ctx context.Context, b *apply.Batch) error {
		var d time.Duration
		switch {
		case batchHas(b, first):
			d = 50 * time.Millisecond
		case batchHas(b, second):
			d = 150 * time.Millisecond
		case batchHas(b, stuck):
			select {
			case <-released: // the run after the kill
				return nil
			default:
			}
			<-ctx.Done() // stuck until the kill
			return ctx.Err()
		}
		time.Sleep(d)
		return nil
	}
	runLaned(t, db, cs, sluice.Checkpoint{}, nil, 4, 4, func(*Stream) bool {
		db.mu.Lock()
		defer db.mu.Unlock()
		return db.cps[0].Position.Token == "1" // lane 0 wrote the watermark: the change before the stuck one
	})
	close(released)
	db.mu.Lock()
	lane0 := db.cps[0]
	db.mu.Unlock()
	start, rec := restart(db)
	if start.Position.Token != "1" {
		t.Fatalf("restart at %v, want the watermark lane 0 wrote (1)", start.Position)
	}
	runLaned(t, db, cs[2:], start, rec, 4, 4, func(s *Stream) bool {
		db.mu.Lock()
		defer db.mu.Unlock()
		return maps.Equal(db.rows, want) && s.Stats().CaughtUp
	})
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, c := range cs {
		if n := db.applied[c.Pos.Token]; n != 1 {
			t.Errorf("change %s (%s) committed %d times, want once (lane 0's row before the kill: watermark %s, last %s)",
				c.Pos.Token, c.Row[0].Text, n, lane0.Position.Token, lane0.Last.Token)
		}
	}
}
