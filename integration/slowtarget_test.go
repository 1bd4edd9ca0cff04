package integration

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/internal/txkiller"
)

// batchLog records the stream's own account of its target transactions
// (the "batch committed" debug records and the "retrying smaller"
// warnings) and passes Info and above on to the test log.
type batchLog struct {
	inner slog.Handler
	rec   *batchRecords
}

type batchRecords struct {
	mu        sync.Mutex
	commits   []commitRec
	rollbacks []rollbackRec
	windows   []laneWindow
}

// laneWindow is a decision of the lane controller: the lane count it
// measured over [from, to] and the one it chose.
type laneWindow struct {
	from, to    time.Time
	lanes, next int64
	why         string
}

type commitRec struct {
	at      time.Time
	changes int64
	tx      time.Duration
}

type rollbackRec struct {
	at                 time.Time
	changes, retryWith int64
	killed             bool
}

func (h batchLog) Enabled(_ context.Context, l slog.Level) bool { return true }

func (h batchLog) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "batch committed":
		c := commitRec{at: r.Time}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "changes":
				c.changes = a.Value.Int64()
			case "tx_time":
				c.tx = a.Value.Duration()
			}
			return true
		})
		h.rec.mu.Lock()
		h.rec.commits = append(h.rec.commits, c)
		h.rec.mu.Unlock()
	case "batch rolled back; retrying smaller":
		rb := rollbackRec{at: r.Time}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "changes":
				rb.changes = a.Value.Int64()
			case "retry_with":
				rb.retryWith = a.Value.Int64()
			case "killed":
				rb.killed = a.Value.Bool()
			}
			return true
		})
		h.rec.mu.Lock()
		h.rec.rollbacks = append(h.rec.rollbacks, rb)
		h.rec.mu.Unlock()
	case "lane window":
		w := laneWindow{to: r.Time}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "lanes":
				w.lanes = a.Value.Int64()
			case "next":
				w.next = a.Value.Int64()
			case "window":
				w.from = r.Time.Add(-a.Value.Duration())
			case "why":
				w.why = a.Value.String()
			}
			return true
		})
		h.rec.mu.Lock()
		h.rec.windows = append(h.rec.windows, w)
		h.rec.mu.Unlock()
	}
	if r.Level < slog.LevelInfo && r.Message != "lane window" {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h batchLog) WithAttrs(as []slog.Attr) slog.Handler {
	return batchLog{inner: h.inner.WithAttrs(as), rec: h.rec}
}

func (h batchLog) WithGroup(name string) slog.Handler {
	return batchLog{inner: h.inner.WithGroup(name), rec: h.rec}
}

// lanesSample is the stream's lane count at a moment.
type lanesSample struct {
	at    time.Time
	lanes int
}

// TestSlowTargetBacksOff: over a 96 ms link with a Vitess-style killer at
// 2 s, a sustained source workload (inserts, updates, deletes) runs
// through adaptive lanes (1–4) into a target whose rows are slow enough
// that one lane cannot keep up. Mid-run another session on the target
// holds a lock on the hot table, over and over, for longer than the kill
// budget. Committed transactions must have finished inside the killer's
// limit, every rolled-back one must have been retried smaller, the lane
// count must not grow while the target is locked (and must back off if it
// had grown), and the target must end equal to the source.
func TestSlowTargetBacksOff(t *testing.T) {
	const (
		killAfter = 2 * time.Second
		budget    = time.Second
		sweep     = 200 * time.Millisecond
		// slowFor is how long the target stays locked, drainGrace how long
		// after it a lane switch decided during it may take to land.
		slowFor    = 14 * time.Second
		drainGrace = 8 * time.Second
	)
	p := newPair(t, 48*time.Millisecond,
		`CREATE TABLE hot (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)`,
		`CREATE TABLE events (id bigint PRIMARY KEY, k int NOT NULL, pad text NOT NULL)`)
	ctx := context.Background()
	tables := []string{"public.hot", "public.events"}
	// About a millisecond a row on the target (pg_sleep rounds up): one
	// lane applies under ~1,000 rows/s, less than the source writes, so
	// more lanes help until the target is locked.
	exec1(t, p.dst, `CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.0002); RETURN NEW; END $$`)
	for _, tb := range []string{"hot", "events"} {
		exec1(t, p.dst, fmt.Sprintf(`CREATE TRIGGER slow_row BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION slow_row()`, tb))
	}
	installCapture(t, p.srcURL, tables)
	exec1(t, p.src, `INSERT INTO hot SELECT g, 'h' || g, 0 FROM generate_series(1, 200) g`)

	killer, err := txkiller.StartPostgres(ctx, p.dstDirect, killAfter, sweep)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Stop()

	// The source: every 25 ms one transaction of 20 inserts, 8 updates of
	// hot rows and 4 deletes, ~1,300 changes/s.
	r := rng(t)
	wctx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	writeErr := make(chan error, 1)
	go func() {
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for base := int64(0); ; base += 20 {
			select {
			case <-wctx.Done():
				writeErr <- nil
				return
			case <-tick.C:
			}
			hotIDs := make([]int32, 8)
			for i := range hotIDs {
				hotIDs[i] = int32(1 + r.IntN(200))
			}
			err := func() error {
				tx, err := p.src.Begin(wctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(context.WithoutCancel(wctx))
				if _, err := tx.Exec(wctx, `INSERT INTO events SELECT g, g % 200, md5(g::text) FROM generate_series($1::bigint, $1::bigint + 19) g`, base); err != nil {
					return err
				}
				if _, err := tx.Exec(wctx, `UPDATE hot SET v = md5(v), n = n + 1 WHERE id = ANY($1)`, hotIDs); err != nil {
					return err
				}
				if _, err := tx.Exec(wctx, `DELETE FROM events WHERE id BETWEEN $1::bigint - 400 AND $1::bigint - 397`, base); err != nil {
					return err
				}
				return tx.Commit(wctx)
			}()
			if err != nil {
				if wctx.Err() == nil {
					writeErr <- fmt.Errorf("source workload: %w", err)
				} else {
					writeErr <- nil
				}
				return
			}
		}
	}()

	rec := &batchRecords{}
	o := streamOptions(t, p, tables)
	o.ID = "slow"
	o.KillBudget = budget
	o.MinLanes, o.MaxLanes = 1, 4
	o.Logger = slog.New(batchLog{inner: testLogger(t).Handler(), rec: rec})
	start := time.Now()
	run := startStream(t, o)
	run.waitStarted(t, 30*time.Second)
	st := run.current.Load()

	// Lane count over time, for the whole run.
	var (
		samplesMu sync.Mutex
		samples   []lanesSample
	)
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond) // sampling interval
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case now := <-tick.C:
				n := st.Stats().Lanes
				samplesMu.Lock()
				samples = append(samples, lanesSample{now, n})
				samplesMu.Unlock()
			}
		}
	}()
	lanesAt := func(from, to time.Time) (first, peak, last int) {
		samplesMu.Lock()
		defer samplesMu.Unlock()
		first = -1
		for _, s := range samples {
			if s.at.Before(from) || s.at.After(to) {
				continue
			}
			if first < 0 {
				first = s.lanes
			}
			peak, last = max(peak, s.lanes), s.lanes
		}
		return first, peak, last
	}

	// Normal running: long enough for the lane controller (5 s windows)
	// to climb while the source outruns one lane. Workload shaping, not a
	// wait for replication.
	time.Sleep(18 * time.Second)
	before := st.Stats()

	// The slowdown: another session takes the hot table in SHARE ROW
	// EXCLUSIVE mode (it blocks every insert, update and delete) for
	// 1.5 s at a time, 50 ms apart, for slowFor. A batch that queues behind
	// it and then applies runs past the killer's 2 s.
	slowFrom := time.Now()
	lockErr := make(chan error, 1)
	go func() {
		held := 0
		for end := time.Now().Add(slowFor); time.Now().Before(end); {
			_, err := p.dst.Exec(ctx, `BEGIN; LOCK TABLE hot IN SHARE ROW EXCLUSIVE MODE; SELECT pg_sleep(1.5); COMMIT`)
			if err == nil {
				held++
			}
			// An error is the killer ending the lock holder too (it waited
			// for sluice's transactions before it got the lock): the
			// contention goes on with the next round.
			time.Sleep(50 * time.Millisecond) // gap between lock holds
		}
		if held == 0 {
			lockErr <- fmt.Errorf("the lock holder never held the lock")
			return
		}
		lockErr <- nil
	}()
	if err := <-lockErr; err != nil {
		t.Fatal(err)
	}
	slowTo := time.Now()
	during := st.Stats()

	stopWrites()
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	waitConverged(t, p, []string{"public.hot", "public.events"}, 60*time.Second, run)
	end := st.Stats()
	stopSampling()
	<-sampled
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	startLanes, peakBefore, _ := lanesAt(start, slowFrom)
	atSlow, peakSlow, lastSlow := lanesAt(slowFrom, slowTo)
	t.Logf("lanes: %d at start, peak %d before the slowdown, %d when it began, peak %d and %d at the end of it, %d at the end",
		startLanes, peakBefore, atSlow, peakSlow, lastSlow, end.Lanes)
	t.Logf("applied %d before the slowdown, %d during it, %d in all; kills %d (killer %d), retries %d; %.1f s in all",
		before.Applied, during.Applied-before.Applied, end.Applied, end.Kills, killer.Killed(), end.Retries, time.Since(start).Seconds())

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var slowest time.Duration
	var slowCommits, overBudget int
	for _, c := range rec.commits {
		slowest = max(slowest, c.tx)
		if c.tx > budget {
			overBudget++
		}
		if !c.at.Before(slowFrom) && !c.at.After(slowTo) {
			slowCommits++
		}
	}
	t.Logf("%d transactions committed (%d during the slowdown), slowest %v, %d over the %v budget; %d rolled back",
		len(rec.commits), slowCommits, slowest, overBudget, budget, len(rec.rollbacks))

	// The slowdown must have been felt, or this test proves nothing: a
	// transaction killed, or one that queued behind the lock.
	if end.Kills == 0 && slowest < budget {
		t.Fatalf("no transaction was killed or took over %v: the lock did not slow the target", budget)
	}
	// Whatever committed finished inside the killer's limit, and whatever
	// did not was retried smaller. sluice times a transaction from its
	// first statement sent to the commit's answer, the killer from the
	// server's xact_start, once a sweep: the slack is two round trips and
	// two sweep intervals.
	if limit := killAfter + 2*sweep + 2*96*time.Millisecond; slowest > limit {
		t.Errorf("a transaction committed after %v, past the killer's %v", slowest, killAfter)
	}
	for _, rb := range rec.rollbacks {
		if rb.changes > 1 && rb.retryWith >= rb.changes {
			t.Errorf("a rolled-back batch of %d changes was retried with %d: not smaller", rb.changes, rb.retryWith)
		}
	}
	if end.Retries < end.Kills {
		t.Errorf("%d kills but only %d retries", end.Kills, end.Retries)
	}
	if len(rec.rollbacks) < int(end.Retries) {
		t.Errorf("%d retries but %d rollbacks logged", end.Retries, len(rec.rollbacks))
	}
	// Lanes: locking the target makes every lane wait, so more lanes only
	// add waiters. No window measured mostly inside the slowdown may add a
	// lane; when the slowdown found more than one lane, the count must
	// have come down by the time the lanes drained after it (a switch
	// waits for every lane's routed changes to commit, which the lock
	// delays, and the controller measures nothing while it waits).
	inside := 0
	// A window measured mostly before the slowdown may have chosen more
	// lanes; the switch drains first, so it can land inside the slowdown.
	allowed := max(atSlow, peakBefore)
	for _, w := range rec.windows {
		from, to := w.from, w.to
		if from.Before(slowFrom) {
			from = slowFrom
		}
		if to.After(slowTo) {
			to = slowTo
		}
		if to.Sub(from) < w.to.Sub(w.from)/2 {
			if w.to.Before(slowTo) {
				allowed = max(allowed, int(w.next))
			}
			continue
		}
		inside++
		t.Logf("window %v–%v into the slowdown: %d lanes, chose %d (%s)", w.from.Sub(slowFrom).Round(time.Millisecond), w.to.Sub(slowFrom).Round(time.Millisecond), w.lanes, w.next, w.why)
		if w.next > w.lanes {
			t.Errorf("a window measured while the target was locked grew the lanes %d → %d (%s)", w.lanes, w.next, w.why)
		}
	}
	if inside == 0 {
		t.Errorf("no lane-controller window lay mostly inside the %v slowdown: the lanes were not tested under it", slowTo.Sub(slowFrom))
	}
	if _, _, after := lanesAt(slowFrom, slowTo.Add(drainGrace)); peakSlow > 1 && after >= peakSlow {
		t.Errorf("lanes at %d %v after the slowdown, as many as at its peak during it (%d): no back-off", after, drainGrace, peakSlow)
	}
	if peakSlow > allowed {
		t.Errorf("lanes rose to %d while the target was locked (at most %d before, or chosen on a window measured before it)", peakSlow, allowed)
	}
}

// TestLanesGrowWhenRoundTripBound: batches capped by --max-batch-bytes at
// ~50 changes over a 96 ms link make one lane round-trip-bound, and the
// target has room for more. The lane count must rise above one and the
// apply rate with more lanes must beat the rate with one.
func TestLanesGrowWhenRoundTripBound(t *testing.T) {
	p := newPair(t, 48*time.Millisecond, `CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL)`)
	installCapture(t, p.srcURL, []string{"items"})
	// A backlog no lane count drains within the test.
	exec1(t, p.src, `INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 60000) g`)
	o := streamOptions(t, p, []string{"items"})
	o.ID = "rttbound"
	o.MinLanes, o.MaxLanes = 1, 4
	o.MaxBatchBytes = 50 * 190 // ~50 changes a transaction
	run := startStream(t, o)
	run.waitStarted(t, 30*time.Second)
	st := run.current.Load()

	// Changes applied and time spent at each lane count, sampled.
	type span struct {
		changes uint64
		d       time.Duration
	}
	at := map[int]*span{}
	prev := st.Stats()
	prevT := time.Now()
	for end := time.Now().Add(25 * time.Second); time.Now().Before(end); {
		time.Sleep(250 * time.Millisecond) // sampling interval
		cur, now := st.Stats(), time.Now()
		if cur.LastError != "" && cur.Kills == 0 && cur.Retries == 0 {
			t.Fatalf("stream error: %s", cur.LastError)
		}
		// A sample that straddles a switch is booked to neither count.
		if cur.Lanes == prev.Lanes {
			sp := at[cur.Lanes]
			if sp == nil {
				sp = &span{}
				at[cur.Lanes] = sp
			}
			sp.changes += cur.Applied - prev.Applied
			sp.d += now.Sub(prevT)
		}
		prev, prevT = cur, now
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if prev.Applied >= 60000 {
		t.Fatalf("the backlog drained (%d applied): the lanes were not measured under load", prev.Applied)
	}
	rate := func(n int) float64 {
		sp := at[n]
		if sp == nil || sp.d < time.Second {
			return 0
		}
		return float64(sp.changes) / sp.d.Seconds()
	}
	peak := 0
	for n := range at {
		t.Logf("%d lanes: %.0f changes/s over %v", n, rate(n), at[n].d.Round(time.Millisecond))
		if at[n].d >= time.Second {
			peak = max(peak, n)
		}
	}
	if peak < 2 {
		t.Fatalf("lanes never ran above 1 for a second: a round-trip-bound lane should be joined by more")
	}
	if one, most := rate(1), rate(peak); most < 1.3*one {
		t.Fatalf("%d lanes applied %.0f changes/s, one lane %.0f: the added lanes did not pay", peak, most, one)
	}
}
