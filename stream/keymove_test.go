package stream

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/controller"
)

// docs is a table whose body, like a TOASTed value, a source may leave out
// of an update that does not change it.
var docs = &sluice.Table{
	Name:    sluice.TableName{Schema: "public", Name: "docs"},
	Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "v", Type: "text"}, {Name: "body", Type: "text"}},
	Key:     []int{0},
}

// docRow is a row of docs but its key.
type docRow struct{ v, body string }

// strictDocs applies batches of docs as the real targets do, and fails
// where they fail: an image that leaves the body unchanged needs the row
// on the target (its body is kept), and a key change in place (a table's
// moves, first, or an ordered one) needs the row at its old key and none
// at its new one. A change applied out of its source order shows as one of
// these failures, or as a row that differs.
func strictDocs(rows map[string]docRow, b *apply.Batch) error {
	upsert := func(r sluice.Row) error {
		k := r[0].Text
		d := docRow{v: r[1].Text, body: r[2].Text}
		if r[2].Unchanged {
			old, ok := rows[k]
			if !ok {
				return fmt.Errorf("upsert of %s leaves the body unchanged, but the target has no row %s", k, k)
			}
			d.body = old.body
		}
		rows[k] = d
		return nil
	}
	move := func(c sluice.Change) error {
		old, ok := rows[c.Key[0].Text]
		if !ok {
			return fmt.Errorf("key change %s → %s: no row has the old key on the target", c.Key[0].Text, c.Row[0].Text)
		}
		if _, taken := rows[c.Row[0].Text]; taken {
			return fmt.Errorf("key change %s → %s: the new key is taken on the target", c.Key[0].Text, c.Row[0].Text)
		}
		delete(rows, c.Key[0].Text)
		d := docRow{v: c.Row[1].Text, body: c.Row[2].Text}
		if c.Row[2].Unchanged {
			d.body = old.body
		}
		rows[c.Row[0].Text] = d
		return nil
	}
	for _, tb := range b.Tables {
		for _, c := range tb.Moves {
			if err := move(c); err != nil {
				return err
			}
		}
		for _, k := range tb.Deletes {
			delete(rows, k[0].Text)
		}
		for _, r := range tb.Upserts {
			if err := upsert(r); err != nil {
				return err
			}
		}
	}
	for _, c := range b.Ordered {
		switch {
		case c.Op == sluice.OpDelete:
			delete(rows, c.Key[0].Text)
		case c.Op == sluice.OpUpdate && c.Key[0].Text != c.Row[0].Text:
			if err := move(c); err != nil {
				return err
			}
		default:
			if err := upsert(c.Row); err != nil {
				return err
			}
		}
	}
	return nil
}

// docWorkload makes n changes of docs over hot keys: inserts, updates
// that leave the body out, key moves (movePct of the changes) that leave
// it out too (only the target's old row holds it, so they are applied in
// place), chains of moves (a row moved again at once), moves back (A → B
// → A), deletes and re-inserts of keys a move left; and the rows they
// leave.
func docWorkload(seed uint64, n, hot, movePct int) ([]sluice.Change, map[string]docRow) {
	r := rand.New(rand.NewPCG(seed, 29))
	rows := map[string]docRow{}
	var cs []sluice.Change
	free := func() string {
		for {
			if k := strconv.Itoa(r.IntN(hot)); rows[k] == (docRow{}) {
				return k
			}
		}
	}
	existing := func() string {
		for {
			if k := strconv.Itoa(r.IntN(hot)); rows[k] != (docRow{}) {
				return k
			}
		}
	}
	unchanged := sluice.Value{Unchanged: true}
	moved := ""
	for len(cs) < n {
		pos := sluice.Position{Kind: "test", Token: strconv.Itoa(len(cs))}
		v := sluice.Text("v" + pos.Token)
		switch p := r.IntN(100); {
		case len(rows) < hot/3 || (p < 15 && len(rows) < hot*2/3):
			k := free()
			d := docRow{v: v.Text, body: "body" + pos.Token}
			cs = append(cs, sluice.Change{Table: docs, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(k), v, sluice.Text(d.body)}, Pos: pos})
			rows[k] = d
		case p < 25:
			k := existing()
			cs = append(cs, sluice.Change{Table: docs, Op: sluice.OpDelete, Key: sluice.Row{sluice.Text(k)}, Pos: pos})
			delete(rows, k)
		case p < 25+movePct:
			k := existing()
			if moved != "" && p < 25+movePct/2 {
				k = moved // a chain: the row just moved moves again
			}
			nk := free()
			cs = append(cs, sluice.Change{Table: docs, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text(k)}, Row: sluice.Row{sluice.Text(nk), v, unchanged}, Pos: pos})
			rows[nk] = docRow{v: v.Text, body: rows[k].body}
			delete(rows, k)
			moved = nk
			continue
		default:
			k := existing()
			cs = append(cs, sluice.Change{Table: docs, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text(k)}, Row: sluice.Row{sluice.Text(k), v, unchanged}, Pos: pos})
			rows[k] = docRow{v: v.Text, body: rows[k].body}
		}
		moved = ""
	}
	return cs, rows
}

// docsReader hands out changes of docs.
type docsReader struct{ scriptReader }

func (r *docsReader) Tables() []*sluice.Table { return []*sluice.Table{docs} }

// strictConn is a lane's connection to a strictDocs target; each
// transaction takes a random few milliseconds, so that lanes overtake
// each other. With chain it can also chain a lane's transactions (see
// Overlap): they lock the lane's row and check its sequence.
type strictConn struct {
	db *strictTarget
}

type strictTarget struct {
	mu      sync.Mutex
	rows    map[string]docRow
	seq     map[int]uint64
	locks   map[int]*sync.Mutex
	rnd     *rand.Rand
	applies int
	chained int
	failed  error
	// server is how long a transaction holds its lane's lock.
	server time.Duration
	// cps are the lanes' checkpoint rows; committed counts the commits of
	// each change (by position).
	cps       map[int]sluice.Checkpoint
	committed map[string]int
}

func newStrictTarget(seed uint64) *strictTarget {
	return &strictTarget{rows: map[string]docRow{}, seq: map[int]uint64{}, locks: map[int]*sync.Mutex{}, rnd: rand.New(rand.NewPCG(seed, 2)),
		server: 2 * time.Millisecond, cps: map[int]sluice.Checkpoint{}, committed: map[string]int{}}
}

// onBatch counts the changes of every committed transaction.
func (db *strictTarget) onBatch(cs []sluice.Change, _ time.Duration, err error) {
	if err != nil {
		return
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, c := range cs {
		db.committed[c.Pos.Token]++
	}
}

func (c *strictConn) Ping(context.Context) (time.Duration, error) { return time.Millisecond, nil }

func (c *strictConn) Apply(_ context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	return c.apply(b, cp, 0, nil)
}

func (c *strictConn) ApplyAfter(_ context.Context, b *apply.Batch, cp sluice.Checkpoint, after uint64, written func()) error {
	return c.apply(b, cp, after, written)
}

func (c *strictConn) apply(b *apply.Batch, cp sluice.Checkpoint, after uint64, written func()) error {
	db := c.db
	if written != nil {
		written()
	}
	db.mu.Lock()
	d := time.Duration(db.rnd.Int64N(int64(3 * time.Millisecond)))
	lk := db.locks[cp.Lane]
	if lk == nil {
		lk = &sync.Mutex{}
		db.locks[cp.Lane] = lk
	}
	db.mu.Unlock()
	time.Sleep(d)
	lk.Lock()
	defer lk.Unlock()
	time.Sleep(db.server) // on the server, holding the lock
	db.mu.Lock()
	defer db.mu.Unlock()
	db.applies++
	if after > 0 {
		db.chained++
		if db.seq[cp.Lane] != after {
			return &apply.RetryableError{Err: fmt.Errorf("%w: lane %d holds %d, not %d", apply.ErrChainBroken, cp.Lane, db.seq[cp.Lane], after)}
		}
	}
	rows := maps.Clone(db.rows)
	if err := strictDocs(rows, b); err != nil {
		if db.failed == nil {
			db.failed = err
		}
		return err
	}
	db.rows = rows
	db.seq[cp.Lane] = cp.Seq
	db.cps[cp.Lane] = cp
	return nil
}

// TestKeyMovesInPlaceKeepOrder runs moves whose values only the target's
// old row holds (applied in place, in source order), chains of them, moves
// back and re-inserts of the keys they left, through 4 lanes whose
// transactions overtake each other, alone and overlapped: a move must wait
// for the last change of its old key in another lane, and the old key's
// later changes for the move, or the strict target fails or ends with
// other rows.
func TestKeyMovesInPlaceKeepOrder(t *testing.T) {
	for _, tc := range []struct {
		name         string
		hot, movePct int
		overlap      bool
		wantChained  bool
	}{
		// Moves of recently changed keys: most wait for another lane.
		{"hot keys, many moves", 60, 30, false, false},
		{"hot keys, many moves, overlapped", 60, 30, true, false},
		// Fewer waits, slower transactions: the lanes' queues hold the
		// next batch while one is in flight, and it is sent overlapped.
		{"few moves, overlapped", 4000, 5, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overlap := tc.overlap
			seed := uint64(time.Now().UnixNano())
			cs, want := docWorkload(seed, 3000, tc.hot, tc.movePct)
			db := newStrictTarget(seed)
			if tc.wantChained {
				db.server = 10 * time.Millisecond
			}
			newSizer := func() Sizer {
				return controller.NewBatch(controller.BatchConfig{Initial: 40, Max: 100, Budget: time.Second})
			}
			s := New(Config{
				ID: "moves", Reader: &docsReader{scriptReader{cs: cs}}, Target: &strictConn{db}, Store: &memStore{target: &rowTarget{rows: map[string]string{}}},
				Batch: newSizer(), MinLanes: 4, MaxLanes: 4, NoOverlap: !overlap,
				NewTarget: func(context.Context) (Target, error) { return &strictConn{db}, nil },
				NewSizer:  newSizer,
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			var err error
			for s.Stats().Applied < uint64(len(cs)) && ctx.Err() == nil && err == nil {
				select {
				case err = <-done:
				case <-time.After(5 * time.Millisecond): // polling the stream's count
				}
			}
			cancel()
			if err == nil {
				err = <-done
			}
			db.mu.Lock()
			defer db.mu.Unlock()
			if db.failed != nil {
				t.Fatalf("seed %d: a change was applied out of its key's order: %v", seed, db.failed)
			}
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if got := s.Stats().Applied; got != uint64(len(cs)) {
				t.Fatalf("seed %d: applied %d of %d changes", seed, got, len(cs))
			}
			if !maps.Equal(db.rows, want) {
				for k, w := range want {
					if db.rows[k] != w {
						t.Errorf("seed %d: row %s = %+v, want %+v", seed, k, db.rows[k], w)
					}
				}
				for k, g := range db.rows {
					if _, ok := want[k]; !ok {
						t.Errorf("seed %d: row %s = %+v, want none", seed, k, g)
					}
				}
				t.FailNow()
			}
			if tc.wantChained && db.chained == 0 {
				t.Fatalf("seed %d: no transaction was sent while another was in flight", seed)
			}
			t.Logf("seed %d: %d transactions, %d chained", seed, db.applies, db.chained)
		})
	}
}

// coldMoves is n inserts, then n changes that update the first half of
// the rows and move each row of the second half to a new key (id + 10⁶),
// and the rows they leave: a backlog whose moves find their old key's last
// change (its insert) long committed, as in a large table.
func coldMoves(n int) ([]sluice.Change, map[string]string) {
	want := map[string]string{}
	var cs []sluice.Change
	add := func(c sluice.Change) {
		c.Table, c.Pos = table, sluice.Position{Kind: "test", Token: strconv.Itoa(len(cs))}
		cs = append(cs, c)
	}
	for i := range n {
		id := strconv.Itoa(i)
		add(sluice.Change{Op: sluice.OpInsert, Row: sluice.Row{sluice.Text(id), sluice.Text("v" + id)}})
		want[id] = "v" + id
	}
	for i := range n {
		id := strconv.Itoa(i/2 + n/2*(i%2))
		v := "u" + strconv.Itoa(i)
		if i%2 == 0 {
			add(sluice.Change{Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text(id)}, Row: sluice.Row{sluice.Text(id), sluice.Text(v)}})
			want[id] = v
			continue
		}
		nid := strconv.Itoa(1_000_000 + i)
		add(sluice.Change{Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text(id)}, Row: sluice.Row{sluice.Text(nid), sluice.Text(v)}})
		delete(want, id)
		want[nid] = v
	}
	return cs, want
}

// TestKeyMovesCostNoDrain (issue 29): a backlog that moves rows to keys
// of other lanes, over a target where every transaction costs a round
// trip, must cost about what any backlog of updates costs. Draining every
// lane before and after each move (as sluice did) costs the whole stream
// a transaction of its own and two round trips per move; a move that
// waits only for its keys' changes costs nothing more here, where they
// are long committed.
func TestKeyMovesCostNoDrain(t *testing.T) {
	const lanes = 4
	cs, want := coldMoves(2000)
	probe := &multi{s: &Stream{}}
	across := 0
	for _, c := range cs {
		if c.Key != nil && probe.laneOf(table, c.Key, lanes) != probe.laneOf(table, c.NewKey(), lanes) {
			across++
		}
	}
	db := &sharedRows{rows: map[string]string{}}
	newSizer := func() Sizer {
		return controller.NewBatch(controller.BatchConfig{Initial: 100, Max: 200, Budget: time.Second})
	}
	const rtt = 5 * time.Millisecond
	runUntilApplied(t, Config{
		ID: "moves", Reader: &scriptReader{cs: cs}, Target: &rttTarget{db, rtt}, Store: &memStore{target: &rowTarget{rows: map[string]string{}}},
		Batch: newSizer(), MinLanes: lanes, MaxLanes: lanes, NoOverlap: true,
		NewTarget: func(context.Context) (Target, error) { return &rttTarget{db, rtt}, nil },
		NewSizer:  newSizer,
	}, len(cs), time.Minute)
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.bad != nil {
		t.Fatal(db.bad)
	}
	if !maps.Equal(db.rows, want) {
		t.Fatalf("target has %d rows, want %d (or other values)", len(db.rows), len(want))
	}
	// 4,000 changes in batches of 100–200 over 4 lanes: a few dozen
	// transactions. A drain per move: at least one per move.
	t.Logf("%d changes, %d of them moves between lanes: %d transactions", len(cs), across, db.applies)
	if db.applies > across/4 {
		t.Fatalf("%d transactions for %d changes with %d moves between lanes: the moves cost transactions of their own (drains?)", db.applies, len(cs), across)
	}
}

// TestKeyOrderForgetsCommitted routes changes through orderByKey with a
// key move now and then, committing each lane's changes a few hundred
// behind: the tracked keys must stay bounded by the changes not yet
// committed, a move must wait for an uncommitted change of its old key in
// another lane and not for a committed one, and the tracking must stop
// once no move happened for keyOrderIdle changes.
func TestKeyOrderForgetsCommitted(t *testing.T) {
	const lanes, behind, idle, minPrune = 4, 500, 20_000, 5_000
	m := &multi{s: &Stream{}, active: lanes, next: 1, keys: keyOrder{idle: idle, minPrune: minPrune}}
	for i := range lanes {
		m.lanes = append(m.lanes, &lane{id: i})
	}
	hash := func(k int) uint64 { return m.routeHash(table, sluice.Row{sluice.Text(strconv.Itoa(k))}) }
	// route numbers and routes a change of key k (moved from old when
	// old >= 0) and commits the changes more than behind before it.
	route := func(k, old int) (*lane, []laneWait) {
		seq := m.next
		m.next++
		h := hash(k)
		l := m.lanes[h%lanes]
		l.fifo = append(l.fifo, seq)
		waits := len(l.waits)
		if old >= 0 {
			m.orderByKey(l, seq, h, hash(old), true)
		} else {
			m.orderByKey(l, seq, h, 0, false)
		}
		l.routed++
		if seq > behind {
			m.w = seq - behind
			for _, o := range m.lanes {
				for len(o.fifo) > 0 && o.fifo[0] <= m.w {
					o.fifo = o.fifo[1:]
				}
			}
		}
		return l, l.waits[waits:]
	}
	// A key whose lane differs from key 1's.
	other := 2
	for hash(other)%lanes == hash(1)%lanes {
		other++
	}
	route(1, -1)
	if _, waits := route(other, 1); len(waits) != 1 || waits[0].lane != int(hash(1)%lanes) {
		t.Fatalf("a move of a key changed just before in another lane waits for %+v, want that lane", waits)
	}
	peak := 0
	for i := range 4*minPrune + idle + 2*behind {
		k := 10 + i%50_000
		old := -1
		if i < 4*minPrune && i%50 == 0 {
			old = 1_000_000 + i // its last change long committed, if any
		}
		if _, waits := route(k, old); old >= 0 && len(waits) > 0 && i > 2*behind {
			t.Fatalf("change %d: a move whose old key has no uncommitted change waits for %+v", i, waits)
		}
		peak = max(peak, len(m.keys.last))
	}
	if peak > minPrune+2*behind {
		t.Fatalf("%d keys tracked at most, with %d changes not committed: committed ones are kept", peak, behind)
	}
	if m.keys.last != nil {
		t.Fatalf("keys still tracked (%d) %d changes after the last move", len(m.keys.last), idle)
	}
}

// runUntilApplied runs a stream of cfg until it applied n changes (the
// test fails after within), and stops it.
func runUntilApplied(t *testing.T, cfg Config, n int, within time.Duration) *Stream {
	t.Helper()
	s := New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopWhenApplied(ctx, t, s, n, cancel, done)
	return s
}

// TestKeyMovesRecoverExactlyOnce stops a stream of 4 lanes whose changes
// move keys between lanes in place (waiting for each other's lanes) several
// times without draining it, as a kill -9 does, and resumes it from the
// lanes' rows as the daemon does. Each lane's row still says which of its
// changes it committed, whatever it waited for: none is applied twice (a
// move applied again finds no row at its old key on the strict target),
// none is lost, and the rows are the source's.
func TestKeyMovesRecoverExactlyOnce(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	cs, want := docWorkload(seed, 3000, 200, 20)
	db := newStrictTarget(seed)
	newSizer := func() Sizer {
		return controller.NewBatch(controller.BatchConfig{Initial: 10, Max: 60, Budget: time.Second})
	}
	var start sluice.Checkpoint
	var rec *Recovery
	ahead := 0
	for round := 0; ; round++ {
		from := nextAfter(start)
		if rec != nil {
			ahead += len(rec.Last)
		}
		final := round == 4
		s := New(Config{
			ID: "r", Reader: &docsReader{scriptReader{cs: cs[from:]}}, Target: &strictConn{db}, Store: &memStore{target: &rowTarget{}},
			Batch: newSizer(), MinLanes: 4, MaxLanes: 4, NoOverlap: round%2 == 1,
			NewTarget: func(context.Context) (Target, error) { return &strictConn{db}, nil }, NewSizer: newSizer,
			Start: start, Recovery: rec, Covers: testCovers, OnBatch: db.onBatch, ShutdownTimeout: time.Nanosecond,
			IdleWait: 20 * time.Millisecond,
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		target := uint64(from + 500)
		for ctx.Err() == nil {
			db.mu.Lock()
			stop := db.failed != nil || (final && maps.Equal(db.rows, want))
			db.mu.Unlock()
			if stop || (!final && s.Stats().Applied >= target) || (final && s.Stats().CaughtUp && stop) {
				break
			}
			time.Sleep(2 * time.Millisecond) // polling the target and the stream's figures
		}
		cancel()
		err := <-done
		db.mu.Lock()
		failed := db.failed
		db.mu.Unlock()
		if failed != nil {
			t.Fatalf("seed %d, round %d: %v", seed, round, failed)
		}
		if err != nil {
			t.Fatalf("seed %d, round %d: %v", seed, round, err)
		}
		if ctx.Err() == context.DeadlineExceeded {
			t.Fatalf("seed %d, round %d: the stream did not get there in time", seed, round)
		}
		if final {
			break
		}
		db.mu.Lock()
		start, rec = restartFrom(db.cps)
		db.mu.Unlock()
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, c := range cs {
		if n := db.committed[c.Pos.Token]; n != 1 {
			t.Fatalf("seed %d: change %s committed %d times, want once", seed, c.Pos.Token, n)
		}
	}
	if !maps.Equal(db.rows, want) {
		t.Fatalf("seed %d: the target's rows differ from the source's", seed)
	}
	if ahead == 0 {
		t.Fatalf("seed %d: no lane was ever past the watermark at a stop: the test proves nothing", seed)
	}
	t.Logf("seed %d: %d lane stops past the watermark, %d transactions", seed, ahead, db.applies)
}

// BenchmarkOrderByKey is the dispatcher's cost per change of ordering key
// moves: moves is one change in how many that moves a key (0: none, so
// the keys are not tracked).
func BenchmarkOrderByKey(b *testing.B) {
	for _, every := range []int{0, 40} {
		b.Run(fmt.Sprintf("move every %d", every), func(b *testing.B) {
			const lanes, behind = 4, 20_000
			m := &multi{s: &Stream{}, active: lanes, next: 1, keys: keyOrder{idle: keyOrderIdle, minPrune: keyOrderPrune}}
			for i := range lanes {
				m.lanes = append(m.lanes, &lane{id: i})
			}
			hashes := make([]uint64, 100_000)
			for i := range hashes {
				hashes[i] = m.routeHash(table, sluice.Row{sluice.Text(strconv.Itoa(i))})
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				seq := m.next
				m.next++
				h := hashes[i%len(hashes)]
				l := m.lanes[h%lanes]
				l.fifo = append(l.fifo, seq)
				moved := every > 0 && i%every == 0
				m.orderByKey(l, seq, h, hashes[(i+7)%len(hashes)], moved)
				l.routed++
				if seq > behind && i%1000 == 0 {
					m.w = seq - behind
					for _, o := range m.lanes {
						for len(o.fifo) > 0 && o.fifo[0] <= m.w {
							o.fifo = o.fifo[1:]
						}
						o.waits = o.waits[:0]
					}
				}
			}
		})
	}
}
