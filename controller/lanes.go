package controller

import (
	"sync"
	"time"
)

// LanesConfig bounds the lane count.
type LanesConfig struct {
	Min, Max int
	// Window is how long each lane count is measured before the next
	// decision. Default 5 s.
	Window time.Duration
}

// Lanes adapts how many lanes apply concurrently by hill climbing on
// measured throughput: it adds a lane while total throughput keeps rising
// by more than 5%, and takes one back when it did not, or when transaction
// latency rose without throughput (past the target's peak, the Universal
// Scalability Law says more concurrency makes everything slower; a target
// that is locked or saturated by someone else looks the same, and more
// lanes only add waiters). It only explores while there is a backlog: a
// caught-up stream measures the source, not the target.
//
// Transactions are reported with Tx as they end, committed or not, so the
// latency of a window is its own mean, and a window in which transactions
// were stuck counts them as slow rather than not at all. It is safe for
// concurrent use.
type Lanes struct {
	mu       sync.Mutex
	cfg      LanesConfig
	n        int
	start    time.Time
	applied  uint64
	prevRate float64
	prevLat  time.Duration
	grew     bool // the last decision added a lane
	hold     int  // windows to wait before exploring again
	// calm is the latency before the rise that made the controller back
	// off, zero when it did not; while latency stays well above it the
	// hold does not count down (for at most maxSlowHold windows, so a
	// link that got slower for good does not stop exploring forever).
	calm     time.Duration
	slowHeld int
	txSum    time.Duration
	txCount  int
	last     Decision
	fresh    bool // last has not been returned by LastDecision yet
}

// Decision is what the last closed window measured and why the count is
// what it is, for the log.
type Decision struct {
	// From and To are the window measured.
	From, To time.Time
	N        int
	Rate     float64
	Latency  time.Duration
	Reason   string
}

// backOffHold is how many windows the controller waits after a back-off
// before it explores again; maxSlowHold bounds how many more it waits
// while latency stays above what it was before the back-off.
const (
	backOffHold = 6
	maxSlowHold = 12
)

// NewLanes returns a controller starting at cfg.Min lanes.
func NewLanes(cfg LanesConfig) *Lanes {
	if cfg.Min < 1 {
		cfg.Min = 1
	}
	if cfg.Max < cfg.Min {
		cfg.Max = cfg.Min
	}
	if cfg.Window <= 0 {
		cfg.Window = 5 * time.Second
	}
	return &Lanes{cfg: cfg, n: cfg.Min}
}

// N is the current lane count.
func (l *Lanes) N() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Window is how long each lane count is measured.
func (l *Lanes) Window() time.Duration { return l.cfg.Window }

// Tx records a target transaction that ended (committed or rolled back)
// after d.
func (l *Lanes) Tx(d time.Duration) {
	l.mu.Lock()
	l.txSum += d
	l.txCount++
	l.mu.Unlock()
}

// Restart begins a new measurement window at now, with applied changes
// applied so far. The caller switches lanes only after draining the old
// ones and opening the new ones' connections; that time belongs to neither
// count, and measuring it would make every added lane look like a loss.
func (l *Lanes) Restart(now time.Time, applied uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start, l.applied = now, applied
	l.txSum, l.txCount = 0, 0
}

// LastDecision returns the decision of the window that closed last, once:
// ok is false when no window closed since the previous call.
func (l *Lanes) LastDecision() (d Decision, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok = l.last, l.fresh
	l.fresh = false
	return d, ok
}

// Observe takes the total changes applied so far and whether a backlog is
// waiting, and returns the lane count to use from now on. inFlight is the
// age of the oldest transaction still running (zero if none): a window in
// which nothing ended is as slow as that.
func (l *Lanes) Observe(now time.Time, applied uint64, inFlight time.Duration, backlog bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() {
		l.start, l.applied = now, applied
		l.txSum, l.txCount = 0, 0
		return l.n
	}
	span := now.Sub(l.start)
	if span < l.cfg.Window {
		return l.n
	}
	from := l.start
	rate := float64(applied-l.applied) / span.Seconds()
	lat := time.Duration(0)
	if l.txCount > 0 {
		lat = l.txSum / time.Duration(l.txCount)
	}
	lat = max(lat, inFlight)
	l.start, l.applied = now, applied
	l.txSum, l.txCount = 0, 0
	if !backlog {
		l.grew = false
		l.prevRate, l.prevLat = rate, lat
		l.last, l.fresh = Decision{From: from, To: now, N: l.n, Rate: rate, Latency: lat, Reason: "no backlog"}, true
		return l.n
	}
	var why string
	latencyRose := l.prevLat > 0 && lat > l.prevLat*3/2
	switch {
	case l.grew && rate < 1.05*l.prevRate:
		// The added lane did not pay: give it back and stay a while.
		l.n = max(l.n-1, l.cfg.Min)
		l.grew, l.hold = false, backOffHold
		why = "the added lane did not raise throughput"
		if latencyRose {
			l.calm, l.slowHeld = l.prevLat, 0
		}
	case latencyRose && rate < 1.05*l.prevRate:
		// Latency up, throughput not: past the peak, or the target is
		// slowed by something else (locks, load). Fewer lanes, and no
		// exploring until latency has come back down; at the minimum,
		// only the latter.
		l.n = max(l.n-1, l.cfg.Min)
		l.grew, l.hold = false, backOffHold
		l.calm, l.slowHeld = l.prevLat, 0
		why = "latency rose without throughput"
	case l.calm > 0 && lat > l.calm*3/2 && l.slowHeld < maxSlowHold:
		// Still slow: an added lane would only wait with the others.
		l.slowHeld++
		l.grew = false
		why = "holding while latency stays high"
	case l.hold > 0:
		l.hold--
		l.grew = false
		why = "holding after a back-off"
		if l.hold == 0 {
			l.calm = 0
		}
	case l.n < l.cfg.Max:
		l.n++
		l.grew = true
		why = "exploring one more lane"
	default:
		l.grew = false
		why = "at the maximum"
	}
	l.prevRate, l.prevLat = rate, lat
	l.last, l.fresh = Decision{From: from, To: now, N: l.n, Rate: rate, Latency: lat, Reason: why}, true
	return l.n
}
