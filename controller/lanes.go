package controller

import "time"

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
// Scalability Law says more concurrency makes everything slower). It only
// explores while there is a backlog: a caught-up stream measures the
// source, not the target.
type Lanes struct {
	cfg      LanesConfig
	n        int
	start    time.Time
	applied  uint64
	prevRate float64
	prevLat  time.Duration
	grew     bool // the last decision added a lane
	hold     int  // windows to wait before exploring again
}

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
func (l *Lanes) N() int { return l.n }

// Observe takes the total changes applied so far, the mean transaction
// time over the window and whether a backlog is waiting, and returns the
// lane count to use from now on.
func (l *Lanes) Observe(now time.Time, applied uint64, meanTx time.Duration, backlog bool) int {
	if l.start.IsZero() {
		l.start, l.applied = now, applied
		return l.n
	}
	span := now.Sub(l.start)
	if span < l.cfg.Window {
		return l.n
	}
	rate := float64(applied-l.applied) / span.Seconds()
	l.start, l.applied = now, applied
	if !backlog {
		l.grew = false
		l.prevRate, l.prevLat = rate, meanTx
		return l.n
	}
	switch {
	case l.grew && rate < 1.05*l.prevRate:
		// The added lane did not pay: give it back and stay a while.
		l.n = max(l.n-1, l.cfg.Min)
		l.grew, l.hold = false, 6
	case l.prevLat > 0 && meanTx > l.prevLat*3/2 && rate <= l.prevRate && l.n > l.cfg.Min:
		// Latency up, throughput not: past the peak.
		l.n--
		l.grew, l.hold = false, 6
	case l.hold > 0:
		l.hold--
		l.grew = false
	case l.n < l.cfg.Max:
		l.n++
		l.grew = true
	default:
		l.grew = false
	}
	l.prevRate, l.prevLat = rate, meanTx
	return l.n
}
