// Package controller decides how much work sluice hands the target at once.
// Batch sizes a transaction from a fitted model of what a batch costs,
// t(n) ≈ a + s·n (a: the fixed cost, about k round trips; s: the target's
// per-change cost), so that every transaction is predicted to finish well
// inside the target's kill budget while carrying enough changes that the
// fixed cost is amortised. It never converges to "small enough to commit,
// too small to keep up" by halving on every failure: sizes come from the
// model, and failures only shrink the retry of the batch that failed.
package controller

import (
	"math"
	"sync"
	"time"
)

// BatchConfig configures a Batch.
type BatchConfig struct {
	// Budget is the longest a transaction may be predicted to take: a
	// fraction of the target's transaction kill timeout.
	Budget time.Duration
	// Initial is the first batch size, before anything is measured.
	Initial int
	// Min and Max bound the size.
	Min, Max int
	// Fixed pins the size (--no-auto-tune --apply-batch-size N); the model
	// is still fitted and reported.
	Fixed int
	// RoundTripsPerChange is how many round trips the apply path pays per
	// change: 0 for pipelined apply (a batch costs about one round trip),
	// 1 for per-row apply. With the measured RTT it bounds the first
	// batches, before anything has been fitted.
	RoundTripsPerChange float64
}

// DefaultBatchConfig returns the configuration sluice starts from: a 15 s
// budget (a quarter of a 60 s transaction timeout), 1,000 changes first.
func DefaultBatchConfig() BatchConfig {
	return BatchConfig{Budget: 15 * time.Second, Initial: 1000, Min: 1, Max: 200_000}
}

// Batch is the batch-size controller of one lane. It is safe for concurrent
// use.
type Batch struct {
	mu    sync.Mutex
	cfg   BatchConfig
	size  int
	model costModel
	step  int
	// rtt is the latest measured round trip to the target. A batch costs at
	// least one, so the fitted fixed cost is never taken below it.
	rtt time.Duration
	// killedAfter is the shortest time after which the target killed a
	// transaction: the target's real kill timeout is at most that, whatever
	// the configured budget says.
	killedAfter time.Duration
	// ramped is set once the backlog no longer sizes batches (see
	// SizeFor): the model is fitted, a batch failed, or one cost more per
	// change than the pessimistic cost assumed.
	ramped bool
}

// PessimisticPerChange is the cost per change the first batches are sized
// with, before the model is fitted: several times what a pipelined upsert
// costs a PostgreSQL or MariaDB target on a loaded two-core machine
// (15–30 µs), so that a batch sized with it to half the budget stays
// inside the budget on a target twice as slow again.
const PessimisticPerChange = 100 * time.Microsecond

// NewBatch returns a controller for cfg, filling zero fields from
// DefaultBatchConfig.
func NewBatch(cfg BatchConfig) *Batch {
	def := DefaultBatchConfig()
	if cfg.Budget <= 0 {
		cfg.Budget = def.Budget
	}
	if cfg.Min <= 0 {
		cfg.Min = def.Min
	}
	if cfg.Max <= 0 {
		cfg.Max = def.Max
	}
	if cfg.Max < cfg.Min {
		cfg.Max = cfg.Min
	}
	if cfg.Initial <= 0 {
		cfg.Initial = def.Initial
	}
	b := &Batch{cfg: cfg, size: clamp(cfg.Initial, cfg.Min, cfg.Max)}
	if cfg.Fixed > 0 {
		b.size = cfg.Fixed
	}
	return b
}

// Size is how many changes the next batch should carry.
func (b *Batch) Size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size
}

// SizeFor is the size of the next batch when waiting changes are queued.
// Until the model is fitted it is at least what the budget allows under
// PessimisticPerChange (half the budget, less two round trips for the
// fixed cost), if that many are waiting: a backlog is taken in a few large
// batches from the start rather than ramped up from Initial at 4× per
// batch. Once the fit takes over, or a batch failed, or one cost more per
// change than assumed, it is Size.
func (b *Batch) SizeFor(waiting int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.Fixed > 0 || b.ramped {
		return b.size
	}
	if _, _, ok := b.fit(); ok {
		b.ramped = true
		return b.size
	}
	if n := min(waiting, b.pessimisticSize()); n > b.size {
		b.size = clamp(n, b.cfg.Min, b.cfg.Max)
	}
	return b.size
}

// BacklogSize is the most changes SizeFor would give the next batch with
// any backlog: the reader reads pages this large, so that the backlog can
// reach the queue. Size when the backlog no longer sizes batches.
func (b *Batch) BacklogSize() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.Fixed > 0 || b.ramped {
		return b.size
	}
	return max(b.size, min(b.pessimisticSize(), b.cfg.Max))
}

// pessimisticSize is the batch whose changes, at PessimisticPerChange
// (plus the round trips per change of the apply path), take half of what
// the budget leaves after two round trips of fixed cost; 0 while the RTT
// is not measured. Its predicted time is half the budget plus one round
// trip: inside the budget while a round trip is under half of it. (Half
// the budget less two round trips was nothing on a 300 ms link with a 1 s
// budget, and the first batches fell back to Initial.)
func (b *Batch) pessimisticSize() int {
	if b.rtt <= 0 {
		return 0
	}
	perChange := PessimisticPerChange.Seconds() + b.cfg.RoundTripsPerChange*b.rtt.Seconds()
	n := 0.5 * (b.budget().Seconds() - 2*b.rtt.Seconds()) / perChange
	if n < 1 {
		return 0
	}
	return int(min(n, float64(b.cfg.Max)))
}

// SetRTT records a measured round trip to the target. Before the model is
// fitted it caps the size so that a batch is predicted (at RoundTripsPerChange
// round trips per change plus two) to take under half the budget: per-row
// apply over 96 ms fits ~75 changes in a 15 s budget, not 1,000.
func (b *Batch) SetRTT(rtt time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rtt = rtt
	if b.cfg.Fixed > 0 || rtt <= 0 || b.cfg.RoundTripsPerChange <= 0 {
		return
	}
	if _, _, ok := b.fit(); ok {
		return
	}
	maxN := int((0.5*b.budget().Seconds()/rtt.Seconds() - 2) / b.cfg.RoundTripsPerChange)
	if b.size > maxN {
		b.size = clamp(maxN, b.cfg.Min, b.cfg.Max)
	}
}

// RTT returns the latest measured round trip.
func (b *Batch) RTT() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rtt
}

// fit is the model's fit with the fixed cost held at one round trip at
// least: a pipelined batch cannot cost less, and on a slow link a fit from
// noisy small batches would otherwise book the round trip as per-change
// cost and keep batches too small to amortise it.
func (b *Batch) fit() (a, s float64, ok bool) {
	a, s, ok = b.model.fit()
	if !ok {
		return a, s, ok
	}
	if r := b.rtt.Seconds(); r > 0 && a < r {
		if s2, ok2 := b.model.slopeGiven(r); ok2 {
			return r, s2, true
		}
	}
	return a, s, ok
}

// Budget is the transaction-time budget the controller keeps batches
// under: the configured one, or half the shortest time after which the
// target has killed a transaction, if that is less.
func (b *Batch) Budget() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.budget()
}

func (b *Batch) budget() time.Duration {
	if b.killedAfter > 0 && b.killedAfter/2 < b.cfg.Budget {
		return b.killedAfter / 2
	}
	return b.cfg.Budget
}

// Fixed reports whether the size is pinned.
func (b *Batch) Fixed() bool { return b.cfg.Fixed > 0 }

// Observe records a committed batch of n changes that took d, from the
// first statement sent to the commit returning, and chooses the next size.
func (b *Batch) Observe(n int, d time.Duration) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.model.add(float64(n), d.Seconds())
	if b.cfg.Fixed > 0 {
		return
	}
	if !b.ramped && d.Seconds() > 2*b.rtt.Seconds()+float64(n)*(PessimisticPerChange.Seconds()+b.cfg.RoundTripsPerChange*b.rtt.Seconds()) {
		// The target is slower than the pessimistic cost: only what was
		// measured sizes batches from now on.
		b.ramped = true
	}
	next := b.dither(b.choose())
	// Move at most 4× up per batch (1.25× once the predicted time passes
	// half the budget, so that the last steps towards the budget are each
	// measured: a target that slows down, because another lane started
	// or the machine got busy, is seen before a batch is far over) so that
	// one odd sample cannot jump the size; shrink faster than halving only
	// when the current size is predicted to overrun the budget.
	limit := 4 * float64(b.size)
	if a, s, ok := b.fit(); ok && a+s*float64(4*b.size) > 0.5*b.budget().Seconds() {
		// 1.25× the predicted time, not the size: where a round trip is
		// most of a transaction, 1.25× the size adds a sliver of time and
		// the ramp to the budget took ten transactions (300 ms, 1 s
		// budget). Only the fixed-cost floor is taken as fixed, so a fit
		// that books per-change cost as fixed does not stretch the step.
		if t, floor := a+s*float64(b.size), b.fixedFloor(); t > floor {
			limit = min(limit, scaleTo(float64(b.size), t, 1.25*t, floor))
		} else {
			limit = min(limit, 1.25*float64(b.size))
		}
	}
	if next > int(limit) {
		next = int(limit)
	}
	if next < b.size/2 {
		if a, s, ok := b.fit(); !ok || a+s*float64(b.size/2) < 0.8*b.budget().Seconds() {
			next = b.size / 2
		}
	}
	// A batch smaller than the current size says only that the source had
	// no more to give; it must not drag the size down.
	if n < b.size && next < b.size && d < b.budget()/2 {
		next = b.size
	}
	// Whatever the fit says, grow no further than the largest recent
	// batch scaled in proportion to its time up to ditherShare of the
	// budget. Scaling the whole time, fixed cost included, overestimates a
	// larger batch, so the size creeps up to the budget one measured step
	// at a time: a fit from a few small, noisy batches (a loaded target,
	// the first batches of a stream) once chose a 2 s transaction against
	// a 1 s budget. (It only holds growth back: shrinking is the fit's.)
	if big := b.model.largest(); next > b.size && big.n > 0 && big.t > 0 {
		// That batch's own time may have been a fast one: divide by the
		// spread of the overruns, not just the worst.
		spread := min(max(b.model.worstOverrun()/max(b.model.leastOverrun(), 0.5), 1), maxSpread)
		if capN := int(scaleTo(big.n, big.t, ditherShare/spread*b.budget().Seconds(), b.fixedFloor())); next > capN {
			next = max(capN, b.size)
		}
	}
	b.size = clamp(next, b.cfg.Min, b.cfg.Max)
}

// fixedFloor is the least fixed cost a batch is taken to have when a
// measured batch is scaled up (see scaleTo): half of the measured round
// trip or of the quickest batch in the window, whichever is less. A
// pipelined batch costs at least one round trip; half of it leaves room
// for a ping that ran slow, and for a batch that ran faster than its
// fixed cost (a sample's noise scales its round trip too). Zero before
// the round trip is measured: scaling is then proportional.
func (b *Batch) fixedFloor() float64 {
	r := b.rtt.Seconds()
	if q := b.model.quickest(); q > 0 && q < r {
		r = q
	}
	return r / maxSpread
}

// scaleTo is the size a batch of n changes that took t would have if it
// took want, were its fixed cost only floor: n·(want−floor)/(t−floor).
// The real fixed cost is at least floor, so the real time of that size
// is at most want. Scaling the whole time (floor 0) holds where round
// trips are cheap; where one is a third of the budget it took the round
// trip for work, and a first batch of 300 ms round trip and 20 ms of
// work could grow only about 2×.
func scaleTo(n, t, want, floor float64) float64 {
	if t <= floor {
		return n
	}
	return n * max(want-floor, 0) / (t - floor)
}

// The model aims a batch at chooseShare of the budget and lets dithering
// reach ditherShare of it, each divided by how far over its prediction a
// recent batch ran (share): on a shared, busy machine a transaction runs
// up to 1.5× its predicted time, on a quiet one about 1.1×, and the budget
// is a promise (the controller bench asserts that no transaction passes
// it), not a target.
const (
	chooseShare = 0.9
	ditherShare = 0.95
)

// share is the part of the budget a batch is aimed at: base divided by the
// worst ratio of measured to predicted time in the window (at least 1).
//
// The overrun counted is at most maxOverrun: a batch that waited on a lock
// or a stalled target ran far over any prediction, and aiming every batch
// at a sliver of the budget because of it is the "small enough to commit,
// too small to keep up" collapse this controller exists to avoid (the
// slow-target test's lock drove batches to one change).
func (b *Batch) share(base float64) float64 {
	return base / min(max(b.model.worstOverrun(), 1), maxOverrun)
}

// maxOverrun bounds the overrun share divides by: the noise of a busy
// machine, not a stall.
const maxOverrun = 1.5

// maxSpread bounds the spread of the overruns (slowest over fastest) that
// growth from the largest batch divides by. It is larger than maxOverrun:
// a busy machine's times spread further than they overrun the fit (the
// noisy-target test's run 0.8× to 1.4× of their cost, a spread of 1.75),
// and growth scaled from a fast sample by less than the spread passed the
// budget when a slow one followed (8 of 48 noise orders in that test).
// It only holds growth back, so a stall's overruns cannot collapse sizes
// through it.
const maxSpread = 2.0

// Failed records that a batch of n changes failed after d (killed by the
// target, timed out, connection lost) and returns the size to retry the
// same changes with. A kill after d says the target's kill timeout is at
// most d: from then on batches are sized to finish in half of it, so the
// controller does not grow back into the killer. (The kill is not a
// sample of t(n): the batch did not finish, its cost is only known to
// exceed d.)
func (b *Batch) Failed(n int, d time.Duration, killed bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if killed && d > 0 && (b.killedAfter == 0 || d < b.killedAfter) {
		b.killedAfter = d
	}
	b.ramped = true
	retry := n / 2
	if retry < 1 {
		retry = 1
	}
	if b.cfg.Fixed == 0 && retry < b.size {
		b.size = clamp(retry, b.cfg.Min, b.cfg.Max)
	}
	return retry
}

// Model returns the fitted fixed cost per batch and cost per change, and
// whether enough has been measured to trust them.
func (b *Batch) Model() (fixed, perChange time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, s, ok := b.fit()
	return seconds(a), seconds(s), ok
}

// Predict returns the model's predicted duration of a batch of n changes.
func (b *Batch) Predict(n int) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, s, ok := b.fit()
	return seconds(a + s*float64(n)), ok
}

// dither varies the size by ±25% on alternate batches. A controller that
// holds one size measures one point of t(n) and can no longer tell the fixed
// cost from the per-change cost, so it would not notice the link changing.
func (b *Batch) dither(n int) int {
	b.step++
	var f float64
	switch b.step % 4 {
	case 1:
		f = 1.25
	case 3:
		f = 0.8
	default:
		return n
	}
	m := int(float64(n) * f)
	if a, s, ok := b.fit(); ok && s > 0 {
		if capN := int((b.share(ditherShare)*b.budget().Seconds() - a) / s); m > capN {
			m = capN
		}
	}
	if m < 1 {
		m = 1
	}
	return m
}

// choose returns the size the model recommends: the smallest that spends
// under a tenth of the batch's time on the fixed cost (past it, doubling n
// gains under 5% throughput), capped so that the predicted time stays
// inside chooseShare of the budget (itself a quarter of the target's
// timeout by default, so a prediction off by 4× still commits).
func (b *Batch) choose() int {
	a, s, ok := b.fit()
	budget := b.share(chooseShare) * b.budget().Seconds()
	if !ok {
		// Too little measured to fit. With the RTT known, the last batch's
		// time beyond one round trip estimates the per-change cost: aim
		// for half the budget. Without it, double while the last batch
		// used under half the budget. Shrink only a batch that came near
		// the budget: halving on latency alone is what makes a naive
		// controller converge to a stall on a slow link.
		last := b.model.last()
		switch {
		case b.model.lastT > budget:
			return b.size / 2
		case b.rtt > 0 && last.n > 0:
			perChange := (last.t - b.rtt.Seconds()) / last.n
			if perChange <= 0 {
				return 4 * b.size
			}
			return int((0.5*b.budget().Seconds() - b.rtt.Seconds()) / perChange)
		case b.model.lastT < budget/2:
			return 2 * b.size
		}
		return b.size
	}
	if s <= 0 {
		return b.cfg.Max
	}
	want := 10 * a / s
	if capN := (budget - a) / s; want > capN {
		want = capN
	}
	if want < 1 {
		want = 1
	}
	if want > float64(b.cfg.Max) {
		return b.cfg.Max
	}
	return int(want)
}

// costModel is a least-squares fit of t = a + s·n over the most recent
// samples, so it follows a changing link or target within a few batches.
// Samples far above the prediction are clipped so that one stall does not
// wreck the fit.
type costModel struct {
	ring    [modelWindow]sample
	samples int
	lastT   float64
	// overrun holds, for the samples taken once the fit stood, how far
	// each ran over (or under) the time the fit predicted for it.
	overrun  [modelWindow]float64
	overruns int
}

// worstOverrun is the largest ratio of measured to predicted time in the
// window; until half the window has been measured, at least
// assumedOverrun.
func (m *costModel) worstOverrun() float64 {
	var w float64
	for _, r := range m.overrun[:min(m.overruns, modelWindow)] {
		w = max(w, r)
	}
	if m.overruns < modelWindow/2 {
		w = max(w, assumedOverrun)
	}
	return w
}

// leastOverrun is the smallest ratio of measured to predicted time in the
// window (at most 1).
func (m *costModel) leastOverrun() float64 {
	l := 1.0
	for _, r := range m.overrun[:min(m.overruns, modelWindow)] {
		l = min(l, r)
	}
	return l
}

// assumedOverrun is how far over its predicted time a batch is assumed to
// run before enough have been measured to know.
const assumedOverrun = 1.4

type sample struct{ n, t float64 }

const modelWindow = 16

// largest returns the sample of the most changes in the window.
func (m *costModel) largest() sample {
	var big sample
	for _, p := range m.ring[:min(m.samples, modelWindow)] {
		if p.n > big.n {
			big = p
		}
	}
	return big
}

// quickest returns the shortest time in the window, 0 when empty.
func (m *costModel) quickest() float64 {
	var q float64
	for i, p := range m.ring[:min(m.samples, modelWindow)] {
		if i == 0 || p.t < q {
			q = p.t
		}
	}
	return q
}

// last returns the newest sample.
func (m *costModel) last() sample {
	if m.samples == 0 {
		return sample{}
	}
	return m.ring[(m.samples-1)%modelWindow]
}

func (m *costModel) add(n, t float64) {
	if m.samples >= 4 {
		if a, s, ok := m.fit(); ok {
			if p := a + s*n; p > 0 {
				m.overrun[m.overruns%modelWindow] = min(t/p, 4)
				m.overruns++
				if t > 4*p {
					t = 4 * p
				}
			}
		}
	}
	m.ring[m.samples%modelWindow] = sample{n, t}
	m.samples++
	m.lastT = t
}

// fit solves the normal equations over the window. It needs samples at
// batch sizes at least 1.2× apart; otherwise the split between a and s is
// not determined.
func (m *costModel) fit() (a, s float64, ok bool) {
	k := m.samples
	if k > modelWindow {
		k = modelWindow
	}
	if k < 3 {
		return 0, 0, false
	}
	var w, sn, st, snn, snt float64
	minN, maxN := math.Inf(1), 0.0
	for _, p := range m.ring[:k] {
		w++
		sn += p.n
		st += p.t
		snn += p.n * p.n
		snt += p.n * p.t
		minN = math.Min(minN, p.n)
		maxN = math.Max(maxN, p.n)
	}
	if maxN < 1.2*minN {
		return 0, 0, false
	}
	den := w*snn - sn*sn
	if den <= 0 {
		return 0, 0, false
	}
	s = (w*snt - sn*st) / den
	a = (st - s*sn) / w
	if s < 0 {
		// Noise made bigger batches look cheaper: treat the cost as all
		// fixed, which grows the size.
		s = 0
		a = st / w
	}
	if a < 0 {
		a = 0
		s = snt / snn
	}
	return a, s, true
}

// slopeGiven fits s in t = a + s·n with a held fixed.
func (m *costModel) slopeGiven(a float64) (float64, bool) {
	k := min(m.samples, modelWindow)
	var num, den float64
	for _, p := range m.ring[:k] {
		num += p.n * (p.t - a)
		den += p.n * p.n
	}
	if den <= 0 {
		return 0, false
	}
	return max(num/den, 0), true
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func clamp(n, lo, hi int) int {
	if n < lo {
		return lo
	}
	if n > hi {
		return hi
	}
	return n
}

// RoundTripsPerChange is the configured round trips per change of the
// apply path (1 for per-row apply, 0 for pipelined).
func (b *Batch) RoundTripsPerChange() float64 { return b.cfg.RoundTripsPerChange }
