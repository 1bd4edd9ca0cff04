package controller

import (
	"testing"
	"time"
)

// link simulates a target where a batch of n changes takes a + s·n.
type link struct{ a, s time.Duration }

func (l link) cost(n int) time.Duration { return l.a + time.Duration(n)*l.s }

func TestBatchConvergesUnderBudget(t *testing.T) {
	tests := []struct {
		name   string
		link   link
		budget time.Duration
		wantLo int
		wantHi int
	}{
		// 96 ms RTT, cheap rows: amortise the round trip ~10×.
		{"wan cheap rows", link{96 * time.Millisecond, 10 * time.Microsecond}, 5 * time.Second, 80_000, 110_000},
		// Expensive rows: the budget caps the size.
		{"budget bound", link{96 * time.Millisecond, time.Millisecond}, 2 * time.Second, 900, 1600},
		// Per-row apply: every change costs a round trip; the fixed part is
		// small, so the budget is what bounds it.
		{"round-trip bound", link{0, 96 * time.Millisecond}, 2 * time.Second, 1, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBatch(BatchConfig{Budget: tt.budget, Initial: 100, Max: 200_000})
			for i := 0; i < 60; i++ {
				n := b.Size()
				d := tt.link.cost(n)
				if i > 10 && d > tt.budget {
					t.Fatalf("step %d: batch of %d takes %v, over the %v budget", i, n, d, tt.budget)
				}
				b.Observe(n, d)
			}
			if n := b.Size(); n < tt.wantLo || n > tt.wantHi {
				t.Fatalf("size = %d, want in [%d, %d]", n, tt.wantLo, tt.wantHi)
			}
			a, s, ok := b.Model()
			if !ok {
				t.Fatal("model not fitted")
			}
			if diff := a - tt.link.a; diff > time.Millisecond || diff < -time.Millisecond {
				t.Errorf("fixed cost = %v, want %v", a, tt.link.a)
			}
			if diff := s - tt.link.s; diff > tt.link.s/10+time.Microsecond || diff < -tt.link.s/10-time.Microsecond {
				t.Errorf("per-change cost = %v, want %v", s, tt.link.s)
			}
		})
	}
}

func TestBatchFollowsRTTChange(t *testing.T) {
	b := NewBatch(BatchConfig{Budget: 2 * time.Second, Initial: 100})
	slow := link{10 * time.Millisecond, time.Millisecond}
	for i := 0; i < 40; i++ {
		b.Observe(b.Size(), slow.cost(b.Size()))
	}
	before := b.Size()
	fast := link{10 * time.Millisecond, 100 * time.Microsecond}
	for i := 0; i < 80; i++ {
		b.Observe(b.Size(), fast.cost(b.Size()))
	}
	if after := b.Size(); after < 2*before {
		t.Fatalf("per-change cost fell 10×, size went %d → %d", before, after)
	}
}

func TestSmallBatchesDoNotShrinkSize(t *testing.T) {
	b := NewBatch(BatchConfig{Budget: 2 * time.Second, Initial: 1000})
	l := link{96 * time.Millisecond, 20 * time.Microsecond}
	for i := 0; i < 30; i++ {
		b.Observe(b.Size(), l.cost(b.Size()))
	}
	size := b.Size()
	// A quiet source hands over a few changes at a time.
	for i := 0; i < 30; i++ {
		b.Observe(3, l.cost(3))
	}
	if b.Size() < size {
		t.Fatalf("trickle of 3-change batches shrank size %d → %d", size, b.Size())
	}
}

func TestFixedSizeIsPinned(t *testing.T) {
	b := NewBatch(BatchConfig{Fixed: 80})
	for i := 0; i < 10; i++ {
		b.Observe(80, time.Duration(i+1)*time.Second)
	}
	if b.Size() != 80 || !b.Fixed() {
		t.Fatalf("size = %d, want pinned 80", b.Size())
	}
	if retry := b.Failed(80, 3*time.Second, true); retry != 40 || b.Size() != 80 {
		t.Fatalf("Failed: retry %d size %d; want retry 40, size still 80", retry, b.Size())
	}
}

func TestFailedShrinksRetry(t *testing.T) {
	b := NewBatch(BatchConfig{Budget: time.Second, Initial: 1000})
	if r := b.Failed(1000, 4*time.Second, true); r != 500 {
		t.Fatalf("retry = %d, want 500", r)
	}
	if b.Size() > 500 {
		t.Fatalf("size after kill = %d, want ≤ 500", b.Size())
	}
	if r := b.Failed(1, time.Second, true); r != 1 {
		t.Fatalf("retry of 1 = %d, want 1", r)
	}
}

// TestKillsLowerTheBudget replays the field failure: the configured budget
// is larger than the target's real kill timeout. The first kills must
// teach the controller the real limit so that it stops growing back into
// the killer, while still committing batches (no convergence to a stall).
func TestKillsLowerTheBudget(t *testing.T) {
	// 96 ms RTT, 2 ms per row on the target, killer at 1 s: ~150 rows fit
	// in half the kill timeout.
	l := link{96 * time.Millisecond, 2 * time.Millisecond}
	const killAfter = time.Second
	b := NewBatch(BatchConfig{Budget: 5 * time.Second, Initial: 2000})
	kills, late, committed := 0, 0, 0
	retry := 0
	for i := 0; i < 200; i++ {
		n := b.Size()
		if retry > 0 {
			n, retry = retry, 0
		}
		if d := l.cost(n); d > killAfter {
			kills++
			if i > 20 {
				late++
			}
			retry = b.Failed(n, killAfter, true)
			continue
		}
		b.Observe(n, l.cost(n))
		committed += n
	}
	if late > 0 {
		t.Fatalf("%d kills after the first 20 batches (%d in all): the controller keeps growing into the killer", late, kills)
	}
	if got := b.Budget(); got != killAfter/2 {
		t.Fatalf("budget = %v, want half the observed kill time %v", got, killAfter/2)
	}
	if n := b.Size(); n < 100 {
		t.Fatalf("size = %d: collapsed far below what fits in the budget (~150)", n)
	}
	t.Logf("%d kills, final size %d, %d changes committed", kills, b.Size(), committed)
}

func TestSetRTTCapsFirstPerRowBatch(t *testing.T) {
	b := NewBatch(BatchConfig{Budget: 15 * time.Second, Initial: 1000, RoundTripsPerChange: 1})
	b.SetRTT(96 * time.Millisecond)
	// 0.5 × 15 s / 96 ms − 2 ≈ 76 changes.
	if n := b.Size(); n < 60 || n > 80 {
		t.Fatalf("first per-row batch at 96 ms = %d changes, want ~76 (inside half the budget)", n)
	}
	p := NewBatch(BatchConfig{Budget: 15 * time.Second, Initial: 1000})
	p.SetRTT(96 * time.Millisecond)
	if p.Size() != 1000 {
		t.Fatalf("pipelined first batch = %d, want the configured 1000", p.Size())
	}
}

// TestRTTFloorsFixedCost: noisy samples that book the round trip as
// per-change cost would keep batches small; the measured RTT corrects it.
func TestRTTFloorsFixedCost(t *testing.T) {
	b := NewBatch(BatchConfig{Budget: 15 * time.Second, Initial: 1000})
	b.SetRTT(96 * time.Millisecond)
	// Samples that fit a = 20 ms, s = 34 µs (what a CPU-starved box gave).
	for _, n := range []int{1000, 2000, 4000, 8000, 6400, 10000} {
		b.model.add(float64(n), 0.020+34e-6*float64(n))
	}
	a, s, ok := b.Model()
	if !ok || a < 96*time.Millisecond {
		t.Fatalf("fixed cost %v (ok %v), want at least the 96 ms RTT", a, ok)
	}
	if s >= 34*time.Microsecond {
		t.Fatalf("per-change cost %v did not shed the round trip it had absorbed", s)
	}
}

func TestBatchFirstSizedFromBacklog(t *testing.T) {
	tests := []struct {
		name    string
		cfg     BatchConfig
		rtt     time.Duration
		waiting int
		want    int
	}{
		// ½·(1 s − 2·20 ms) ÷ 100 µs: half of what the budget leaves after
		// two round trips, under the pessimistic cost.
		{"budget bound", BatchConfig{Budget: time.Second, Initial: 1000}, 20 * time.Millisecond, 300_000, 4800},
		{"backlog bound", BatchConfig{Budget: time.Second, Initial: 1000}, 20 * time.Millisecond, 3000, 3000},
		{"never under Initial", BatchConfig{Budget: time.Second, Initial: 1000}, 20 * time.Millisecond, 10, 1000},
		{"default budget", BatchConfig{Budget: 15 * time.Second, Initial: 1000}, 96 * time.Millisecond, 170_000, 74_040},
		// Round trips take most of the budget: ½·(1 s − 0.6 s) ÷ 100 µs.
		{"round trips a large part of the budget", BatchConfig{Budget: time.Second, Initial: 1000}, 300 * time.Millisecond, 300_000, 2000},
		{"no room in the budget", BatchConfig{Budget: time.Second, Initial: 1000}, 500 * time.Millisecond, 300_000, 1000},
		{"RTT not measured", BatchConfig{Budget: time.Second, Initial: 1000}, 0, 300_000, 1000},
		// Per-row apply pays a round trip per change: ½·(15 s − 0.192 s) ÷ 96.1 ms.
		{"per row", BatchConfig{Budget: 15 * time.Second, Initial: 1000, RoundTripsPerChange: 1}, 96 * time.Millisecond, 300_000, 77},
		{"pinned", BatchConfig{Budget: time.Second, Fixed: 500}, 20 * time.Millisecond, 300_000, 500},
		{"max", BatchConfig{Budget: 15 * time.Second, Initial: 1000, Max: 20_000}, 20 * time.Millisecond, 300_000, 20_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBatch(tt.cfg)
			b.SetRTT(tt.rtt)
			// The reader's page: at least what SizeFor gives any backlog.
			if page := b.BacklogSize(); page < tt.want {
				t.Fatalf("BacklogSize = %d, under the %d SizeFor gives", page, tt.want)
			}
			if got := b.SizeFor(tt.waiting); got != tt.want {
				t.Fatalf("SizeFor(%d) = %d, want %d", tt.waiting, got, tt.want)
			}
		})
	}
}

func TestBatchBacklogSizingStops(t *testing.T) {
	rtt := 20 * time.Millisecond
	tests := []struct {
		name string
		// before is what happens before SizeFor is asked again.
		before func(b *Batch)
	}{
		{"after a kill", func(b *Batch) { b.Failed(4600, 2*time.Second, true) }},
		{"after a batch slower than the pessimistic cost", func(b *Batch) { b.Observe(4600, 2*time.Second) }},
		{"once the model is fitted", func(b *Batch) {
			l := link{rtt, 10 * time.Microsecond}
			for _, n := range []int{1000, 2000, 4000} {
				b.Observe(n, l.cost(n))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBatch(BatchConfig{Budget: time.Second, Initial: 1000})
			b.SetRTT(rtt)
			tt.before(b)
			size := b.Size()
			if got := b.SizeFor(300_000); got != size {
				t.Fatalf("SizeFor = %d, want the controller's own size %d", got, size)
			}
			if got := b.BacklogSize(); got != size {
				t.Fatalf("BacklogSize = %d, want the controller's own size %d", got, size)
			}
		})
	}
}

// TestBatchBacklogRampStaysInBudget runs a backlog through the controller
// on targets up to twice as slow per change as the pessimistic cost: no
// batch, the first ones included, may be predicted over the budget.
func TestBatchBacklogRampStaysInBudget(t *testing.T) {
	budget := time.Second
	for _, l := range []link{
		{20 * time.Millisecond, 15 * time.Microsecond},
		{96 * time.Millisecond, 15 * time.Microsecond},
		{300 * time.Millisecond, 15 * time.Microsecond},
		{20 * time.Millisecond, 2 * PessimisticPerChange},
	} {
		b := NewBatch(BatchConfig{Budget: budget, Initial: 1000})
		b.SetRTT(l.a)
		backlog := 300_000
		var sizes []int
		for backlog > 0 {
			n := min(b.SizeFor(backlog), backlog)
			sizes = append(sizes, n)
			if d := l.cost(n); d > budget {
				t.Fatalf("link %v: batch %d of %d changes takes %v, over the %v budget (sizes %v)", l, len(sizes), n, d, budget, sizes)
			}
			b.Observe(n, l.cost(n))
			backlog -= n
		}
		if l.s < PessimisticPerChange && sizes[0] <= 1000 {
			t.Errorf("link %v: first batch %d, want it sized from the backlog (sizes %v)", l, sizes[0], sizes)
		}
	}
}

// TestBatchGrowthBoundByLargestMeasured: noise that makes larger batches
// look cheaper fits a zero per-change cost, and the fit alone would grow
// the size 4× into a transaction far over the budget. Growth stops at the
// largest measured batch scaled to ditherShare of the budget (before any
// overrun is measured).
func TestBatchGrowthBoundByLargestMeasured(t *testing.T) {
	b := NewBatch(BatchConfig{Budget: time.Second, Initial: 10_000})
	b.SetRTT(20 * time.Millisecond)
	for _, s := range []struct {
		n int
		d time.Duration
	}{{10_000, 400 * time.Millisecond}, {12_000, 380 * time.Millisecond}, {8_000, 420 * time.Millisecond}} {
		b.Observe(s.n, s.d)
	}
	// 12,000 changes took 380 ms: 0.95 s holds 30,000 at that rate.
	if got := b.Size(); got > 30_000 || got < 10_000 {
		t.Fatalf("size = %d, want in [10000, 30000]", got)
	}
}

// TestBatchNoisyTargetStaysInBudget: a target whose transactions run from
// 0.8× to 1.4× the time their size predicts (a busy shared machine). The
// controller aims by the worst overrun it measured, so that no transaction
// passes the budget, the first batches included, at any RTT.
func TestBatchNoisyTargetStaysInBudget(t *testing.T) {
	noise := []float64{1.0, 0.8, 1.4, 0.9, 1.2, 1.0, 1.3, 0.85}
	budget := time.Second
	for _, l := range []link{
		{20 * time.Millisecond, 5 * time.Microsecond},
		{20 * time.Millisecond, 20 * time.Microsecond},
		{96 * time.Millisecond, 5 * time.Microsecond},
		{96 * time.Millisecond, 20 * time.Microsecond},
		{300 * time.Millisecond, 5 * time.Microsecond},
		{300 * time.Millisecond, 20 * time.Microsecond},
	} {
		// Every starting point of the noise: which batch meets the slow
		// sample after a fast one decides whether growth overshoots.
		for rot := range noise {
			// The noise stretches the round trip too: harsher than a busy
			// target, which stretches only its own part.
			b := NewBatch(BatchConfig{Budget: budget, Initial: 1000})
			b.SetRTT(l.a)
			var sizes []int
			for i := range 80 {
				n := b.SizeFor(1_000_000)
				d := time.Duration(float64(l.cost(n)) * noise[(i+rot)%len(noise)])
				sizes = append(sizes, n)
				if d > budget {
					t.Fatalf("link %v, noise from %d: batch %d of %d changes took %v, over the %v budget (sizes %v)", l, rot, i, n, d, budget, sizes)
				}
				b.Observe(n, d)
			}
		}
	}
}

// TestBatchRecoversAfterLockWaits: batches that waited on a lock ran far
// over their prediction. The overrun they show must not keep later
// batches at a sliver of the budget once the lock is gone.
func TestBatchRecoversAfterLockWaits(t *testing.T) {
	l := link{48 * time.Millisecond, 200 * time.Microsecond}
	b := NewBatch(BatchConfig{Budget: time.Second, Initial: 1000})
	b.SetRTT(l.a)
	for range 40 {
		b.Observe(b.Size(), l.cost(b.Size()))
	}
	steady := b.Size()
	for range 5 {
		b.Observe(b.Size(), l.cost(b.Size())+1500*time.Millisecond)
	}
	// Once the lock's samples have left the window (and the size has had
	// a few batches to grow back), their overruns must be gone too.
	for range 2 * modelWindow {
		b.Observe(b.Size(), l.cost(b.Size()))
	}
	if got := b.Size(); got < steady*3/4 {
		t.Fatalf("size %d two windows after the lock, %d before it: collapsed", got, steady)
	} else {
		t.Logf("size %d before the lock, %d after", steady, got)
	}
}

// TestBatchRampWhereRoundTripsDominate: on a 300 ms link with a 1 s budget
// a round trip is most of a transaction. Growth scaled from a measured
// batch's whole time, and steps of 1.25× the size near the budget, took
// ten transactions to reach the size the model aims at, and the first
// eight ran at under half its rate (32k/s of 67k/s at 8 µs a change).
// Steps of 1.25× the time, with only a fraction of the round trip taken
// as fixed, must keep the first eight at 0.7 of it, none over the budget.
func TestBatchRampWhereRoundTripsDominate(t *testing.T) {
	budget := time.Second
	for _, l := range []link{
		{300 * time.Millisecond, 8 * time.Microsecond},
		{300 * time.Millisecond, 20 * time.Microsecond},
		{200 * time.Millisecond, 8 * time.Microsecond},
	} {
		b := NewBatch(BatchConfig{Budget: budget, Initial: 1000})
		b.SetRTT(l.a)
		var sizes []int
		var changes int
		var took time.Duration
		for range 8 {
			n := b.SizeFor(1_000_000)
			sizes = append(sizes, n)
			d := l.cost(n)
			if d > budget {
				t.Fatalf("link %v: batch %d of %d changes takes %v, over the %v budget (sizes %v)", l, len(sizes), n, d, budget, sizes)
			}
			changes += n
			took += d
			b.Observe(n, d)
		}
		// The size the model aims at before it has measured its overruns:
		// chooseShare of the budget over the assumed overrun.
		aim := (chooseShare/assumedOverrun*budget.Seconds() - l.a.Seconds()) / l.s.Seconds()
		aimRate := aim / l.cost(int(aim)).Seconds()
		if rate := float64(changes) / took.Seconds(); rate < 0.7*aimRate {
			t.Errorf("link %v: first 8 batches at %.0f changes/s, %.2f of the %.0f/s of the size aimed at (%.0f); want at least 0.7 (sizes %v)", l, rate, rate/aimRate, aimRate, aim, sizes)
		}
	}
}
