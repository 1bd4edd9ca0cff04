package controller

import (
	"fmt"
	"time"
)

// StallConfig configures stall detection.
type StallConfig struct {
	// Ratio: durable progress below Ratio × the source's change rate, for
	// Window, is a stall. Default 0.1.
	Ratio float64
	// Window is how long progress must stay too low. Default 2 min.
	Window time.Duration
}

// Stall watches durable progress against the rate at which the source
// produces changes and says, with a diagnosis, when a stream cannot keep
// up. A stall is a state, not an error by itself: the stream reports it
// loudly and, if configured, stops.
type Stall struct {
	cfg     StallConfig
	samples []progress
	since   time.Time // when progress first fell below the ratio; zero if it is not
}

type progress struct {
	t       time.Time
	read    uint64 // changes read from the source so far
	applied uint64 // changes durably applied so far
	pending bool   // changes were waiting to be applied
}

// StallState is the detector's verdict at one moment.
type StallState struct {
	Stalled bool
	// SourceRate and ApplyRate are changes/s over the window.
	SourceRate, ApplyRate float64
	// Since is when progress fell below the ratio.
	Since time.Time
}

// NewStall returns a detector, filling zero fields with the defaults.
func NewStall(cfg StallConfig) *Stall {
	if cfg.Ratio <= 0 {
		cfg.Ratio = 0.1
	}
	if cfg.Window <= 0 {
		cfg.Window = 2 * time.Minute
	}
	return &Stall{cfg: cfg}
}

// Window is the configured stall window.
func (s *Stall) Window() time.Duration { return s.cfg.Window }

// Observe records the counters at now and returns the verdict. read counts
// changes taken from the source, applied those committed on the target;
// pending says whether changes were waiting to be applied.
func (s *Stall) Observe(now time.Time, read, applied uint64, pending bool) StallState {
	s.samples = append(s.samples, progress{now, read, applied, pending})
	// Keep one sample at or before the window's start.
	for len(s.samples) > 2 && now.Sub(s.samples[1].t) >= s.cfg.Window {
		s.samples = s.samples[1:]
	}
	first := s.samples[0]
	span := now.Sub(first.t).Seconds()
	var st StallState
	if span <= 0 {
		return st
	}
	st.SourceRate = float64(read-first.read) / span
	st.ApplyRate = float64(applied-first.applied) / span
	// Too slow: nothing applied while work waits, or applying at under the
	// ratio of what the source produces.
	slow := pending && (applied == first.applied || st.ApplyRate < s.cfg.Ratio*st.SourceRate)
	if !slow {
		s.since = time.Time{}
		return st
	}
	if s.since.IsZero() {
		s.since = first.t
	}
	st.Since = s.since
	st.Stalled = now.Sub(s.since) >= s.cfg.Window
	return st
}

// Diagnose explains a stall from the stream's own measurements.
func Diagnose(st StallState, rtt time.Duration, rtPerChange float64, lanes int, batch int, lastTx, budget time.Duration, kills uint64, fixed, perChange time.Duration) string {
	if lanes < 1 {
		lanes = 1
	}
	base := fmt.Sprintf("durable progress %.1f changes/s against a source rate of %.1f changes/s for %s", st.ApplyRate, st.SourceRate, time.Since(st.Since).Round(time.Second))
	// Per-row apply is known from the apply mode; it also shows in the
	// measurements as a per-change cost of about a round trip.
	if rtPerChange < 1 && rtt > 0 && perChange >= rtt/2 {
		rtPerChange = float64(perChange) / float64(rtt)
		if rtPerChange < 1 {
			rtPerChange = 1
		}
	}
	switch {
	case rtPerChange >= 1 && rtt > 0:
		best := float64(lanes) / (rtPerChange * rtt.Seconds())
		return fmt.Sprintf("%s: apply is round-trip-bound: %.0f statement per row, %s RTT, best possible %.0f changes/s with %d lane(s); use --apply-mode=pipelined",
			base, rtPerChange, rtt.Round(time.Millisecond), best, lanes)
	case kills > 0 && batch <= 1:
		return fmt.Sprintf("%s: every batch of ≥ 1 change exceeds the %s kill budget (%d transactions killed): the target is saturated or locked; look for the oldest blocking transaction on the target",
			base, budget, kills)
	case perChange > 0:
		best := float64(lanes) / perChange.Seconds()
		return fmt.Sprintf("%s: the target applies at most ~%.0f changes/s (%s per change, %s per batch of %d, last transaction %s): it cannot keep up with the source; a faster target or more lanes are needed",
			base, best, perChange, fixed.Round(time.Millisecond), batch, lastTx.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s: batch %d, last transaction %s, RTT %s", base, batch, lastTx.Round(time.Millisecond), rtt.Round(time.Millisecond))
}
