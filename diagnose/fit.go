package diagnose

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bound says what limits a mode's throughput.
type Bound string

const (
	// RoundTripBound: every change costs a round trip, so throughput per
	// connection is capped near 1/RTT whatever the batch size.
	RoundTripBound Bound = "round-trip-bound"
	// ServerBound: a batch costs a constant number of round trips, and at
	// the sizes measured the server's per-change cost dominates.
	ServerBound Bound = "server-bound"
	// Scales: a batch costs a constant number of round trips and
	// throughput still rises with the batch size.
	Scales Bound = "scales with batch size"
	// Unknown: too little was measured.
	Unknown Bound = "unknown"
)

// Fit is the cost model of one mode, fitted to its measured cells:
// R(n) = RoundTripsPerBatch + RoundTripsPerChange·n round trips for a
// batch of n changes (from the counts) and t(n) = R(n)·RTT + n·PerChange
// (from the times).
type Fit struct {
	Mode Mode
	// Cells is the number of sizes measured; OK is true when two or more
	// sizes let the fit tell fixed from per-change costs.
	Cells int
	OK    bool
	// RoundTripsPerBatch (k) and RoundTripsPerChange are the fitted round
	// trips of a batch.
	RoundTripsPerBatch  float64
	RoundTripsPerChange float64
	// RTT is the fitted round-trip time, PerChange (s) the server's cost per
	// change beyond the round trips.
	RTT       time.Duration
	PerChange time.Duration
	Bound     Bound
	// Ceiling is the throughput per connection as batches grow without
	// bound, 1/(RoundTripsPerChange·RTT + PerChange) changes/s; 0 when no
	// per-change cost was measured.
	Ceiling float64
	// MaxBatch is the largest batch predicted to finish within the kill
	// budget: 0 when not even one change fits, -1 when nothing measured
	// limits it.
	MaxBatch int
	// Largest is the largest size measured.
	Largest int
}

// Fixed is the cost of a batch that does not depend on its size.
func (f Fit) Fixed() time.Duration {
	return time.Duration(f.RoundTripsPerBatch * float64(f.RTT))
}

// Predict is the fitted transaction time of a batch of n changes.
func (f Fit) Predict(n int) time.Duration {
	trips := f.RoundTripsPerBatch + f.RoundTripsPerChange*float64(n)
	return time.Duration(trips*float64(f.RTT) + float64(n)*float64(f.PerChange))
}

// fitMode fits the measured cells of mode. warmTrips, the round trips of
// the one-change batch the mode started with, is one more point of R(n).
// pingRTT stands in for the fitted RTT when the times cannot separate it.
func fitMode(mode Mode, cells []Cell, warmTrips int64, pingRTT, budget time.Duration) Fit {
	f := Fit{Mode: mode, Bound: Unknown, MaxBatch: -1}
	var ns, rs, ts []float64
	sizes := map[int]bool{}
	for _, c := range cells {
		if c.Mode != mode || c.Status != Measured || c.TxTime <= 0 {
			continue
		}
		ns = append(ns, float64(c.Size))
		rs = append(rs, float64(c.RoundTrips))
		ts = append(ts, c.TxTime.Seconds())
		sizes[c.Size] = true
		f.Largest = max(f.Largest, c.Size)
	}
	f.Cells = len(ns)
	if f.Cells == 0 {
		return f
	}
	f.OK = len(sizes) >= 2

	// Round trips: a straight line through the counts (and the first,
	// one-change batch's).
	rn, rr := ns, rs
	if warmTrips > 0 {
		rn = append(append([]float64(nil), ns...), 1)
		rr = append(append([]float64(nil), rs...), float64(warmTrips))
	}
	r0, r1, ok := line(rn, rr)
	if !ok {
		// One size only: all of it is fixed, except that per-row pays
		// (by construction) one round trip per change.
		if mode == PerRow {
			r1 = 1
		}
		r0 = max(mean(rr)-r1*mean(rn), 0)
	}
	f.RoundTripsPerBatch, f.RoundTripsPerChange = max(r0, 0), max(r1, 0)

	// Times: t = R·rtt + n·s, least squares weighted by 1/t² so that every
	// cell's relative error counts alike across decades of sizes.
	rtt, s, ok := timeFit(rs, ns, ts)
	if !ok || !f.OK {
		rtt = pingRTT.Seconds()
		var num, den float64
		for i := range ns {
			w := 1 / (ts[i] * ts[i])
			num += w * ns[i] * (ts[i] - rs[i]*rtt)
			den += w * ns[i] * ns[i]
		}
		s = max(num/den, 0)
	}
	f.RTT = seconds(rtt)
	f.PerChange = seconds(s)

	perChange := f.RoundTripsPerChange*rtt + s
	if perChange > 0 {
		f.Ceiling = 1 / perChange
		room := budget.Seconds() - f.RoundTripsPerBatch*rtt
		f.MaxBatch = max(int(room/perChange), 0)
	}
	switch {
	case f.RoundTripsPerChange >= 0.5:
		f.Bound = RoundTripBound
	case !f.OK:
		f.Bound = Unknown
	default:
		fixed := f.RoundTripsPerBatch * rtt
		if total := fixed + s*float64(f.Largest); total > 0 && fixed/total < 0.2 {
			f.Bound = ServerBound
		} else {
			f.Bound = Scales
		}
	}
	return f
}

// line fits y = a + b·x by least squares.
func line(x, y []float64) (a, b float64, ok bool) {
	n := float64(len(x))
	if len(x) < 2 {
		return 0, 0, false
	}
	mx, my := mean(x), mean(y)
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	if sxx <= 1e-9*n*mx*mx || sxx == 0 {
		return 0, 0, false
	}
	b = sxy / sxx
	return my - b*mx, b, true
}

// timeFit solves t = R·rtt + n·s for rtt and s, weighted by 1/t², with both
// kept non-negative.
func timeFit(r, n, t []float64) (rtt, s float64, ok bool) {
	var a11, a12, a22, b1, b2 float64
	for i := range t {
		w := 1 / (t[i] * t[i])
		a11 += w * r[i] * r[i]
		a12 += w * r[i] * n[i]
		a22 += w * n[i] * n[i]
		b1 += w * r[i] * t[i]
		b2 += w * n[i] * t[i]
	}
	det := a11*a22 - a12*a12
	if len(t) < 2 || a11 <= 0 || a22 <= 0 || det <= 1e-9*a11*a22 {
		return 0, 0, false
	}
	rtt = (b1*a22 - b2*a12) / det
	s = (a11*b2 - a12*b1) / det
	switch {
	case s < 0:
		s, rtt = 0, b1/a11
	case rtt < 0:
		rtt, s = 0, b2/a22
	}
	return rtt, s, true
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// verdict writes the diagnosis from the fits.
func verdict(rep *StaticBatchReport) []string {
	var lines, bound []string
	byMode := map[Mode]Fit{}
	for _, f := range rep.Fits {
		byMode[f.Mode] = f
		lines = append(lines, modeVerdict(f, rep.KillBudget))
		if f.Bound == RoundTripBound {
			bound = append(bound, string(f.Mode))
		}
	}
	if len(rep.Fits) == 0 {
		return []string{"nothing was measured: every cell was skipped or failed (raise --max-time, or use smaller --sizes)"}
	}
	if len(bound) > 0 {
		s := "the link is round-trip-bound for " + strings.Join(bound, " and ") +
			" apply: its throughput levels off at ~1/RTT per connection however large the batch, so no batch-size setting helps there"
		if p, ok := byMode[Pipelined]; ok && p.Bound != RoundTripBound && p.Cells > 0 {
			if n, x, ok := speedup(rep, PerRow, Pipelined); ok {
				s += fmt.Sprintf("; pipelined apply was %s× faster at %s changes per batch", FormatCount(x), FormatCount(float64(n)))
			}
		}
		lines = append(lines, s)
	} else {
		lines = append(lines, "no mode measured is round-trip-bound: a batch costs a constant number of round trips, so larger batches amortise the RTT")
	}
	for _, f := range rep.Fits {
		if f.Cells > 0 && rep.RTT.P50 > 0 && f.OK {
			if d := math.Abs(f.RTT.Seconds()-rep.RTT.P50.Seconds()) / rep.RTT.P50.Seconds(); d > 0.5 {
				lines = append(lines, fmt.Sprintf("note: %s's fitted RTT (%s) differs from the pinged RTT (%s) by %.0f%%: part of the per-batch cost is the server's (commit, flush), not the link's",
					f.Mode, FormatDuration(f.RTT), FormatDuration(rep.RTT.P50), 100*d))
			}
		}
	}
	return lines
}

// speedup compares two modes at the largest size measured in both.
func speedup(rep *StaticBatchReport, slow, fast Mode) (int, float64, bool) {
	best := 0
	var ratio float64
	for _, a := range rep.Cells {
		if a.Mode != slow || a.Status != Measured {
			continue
		}
		if b, ok := rep.Cell(fast, a.Size); ok && b.Status == Measured && a.Size > best && a.Rate > 0 {
			best, ratio = a.Size, b.Rate/a.Rate
		}
	}
	return best, ratio, best > 0
}

func modeVerdict(f Fit, budget time.Duration) string {
	fits := func() string {
		switch {
		case f.MaxBatch < 0:
			return fmt.Sprintf("nothing measured limits the batch size within a %s kill budget", FormatDuration(budget))
		case f.MaxBatch == 0:
			return fmt.Sprintf("a %s kill budget fits not even one change (a batch costs %s)", FormatDuration(budget), FormatDuration(f.Predict(1)))
		}
		s := fmt.Sprintf("a %s kill budget fits ~%s changes per batch", FormatDuration(budget), FormatApprox(float64(f.MaxBatch)))
		if f.Largest > 0 && f.MaxBatch > 10*f.Largest {
			s += fmt.Sprintf(" (extrapolated from batches of up to %s)", FormatCount(float64(f.Largest)))
		}
		return s
	}
	switch f.Bound {
	case RoundTripBound:
		return fmt.Sprintf("%s is round-trip-bound: %s per change, %s RTT → at most ~%s changes/s per connection whatever the batch size; %s",
			f.Mode, plural(f.RoundTripsPerChange, "round trip"), FormatDuration(f.RTT), FormatApprox(f.Ceiling), fits())
	case Unknown:
		return fmt.Sprintf("%s: measured at one batch size only (%s round trips per batch, RTT %s assumed from the pings): too little to fit; %s",
			f.Mode, FormatCount(f.RoundTripsPerBatch), FormatDuration(f.RTT), fits())
	}
	s := fmt.Sprintf("%s: k=%s per batch, RTT %s, s=%s/change", f.Mode, plural(f.RoundTripsPerBatch, "round trip"),
		FormatDuration(f.RTT), FormatDuration(f.PerChange))
	if f.Bound == ServerBound {
		s += fmt.Sprintf(" → server-bound: at %s changes per batch the round trips are under 20%% of the time; at most ~%s changes/s per connection",
			FormatCount(float64(f.Largest)), FormatApprox(f.Ceiling))
	} else {
		s += " → throughput still rises with the batch size"
		if f.PerChange > 0 {
			// The size at which the fixed cost is a tenth of the batch.
			n10 := 9 * f.Fixed().Seconds() / f.PerChange.Seconds()
			s += fmt.Sprintf(" (the round trips fall under 10%% of the time from ~%s changes per batch; at most ~%s changes/s per connection)",
				FormatApprox(n10), FormatApprox(f.Ceiling))
		}
	}
	return s + "; " + fits()
}

func plural(x float64, unit string) string {
	s := FormatCount(x)
	if s == "1" {
		return "1 " + unit
	}
	return s + " " + unit + "s"
}

// FormatDuration prints a duration with 2-3 significant digits in a fitting
// unit: 12 µs, 4.2 ms, 96 ms, 1.25 s, 96 s.
func FormatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 s"
	case d < time.Millisecond:
		return sig(float64(d)/float64(time.Microsecond)) + " µs"
	case d < time.Second:
		return sig(float64(d)/float64(time.Millisecond)) + " ms"
	}
	return sig(d.Seconds()) + " s"
}

// sig prints x with up to 3 significant digits (no exponent, integers
// above 100 as they are).
func sig(x float64) string {
	switch {
	case x >= 100:
		return FormatCount(math.Round(x))
	case x >= 10:
		return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64)
	}
	return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
}

// FormatCount prints x with thousands separators: whole numbers as such,
// smaller ones with up to 3 significant digits.
func FormatCount(x float64) string {
	if x < 0 {
		return "-" + FormatCount(-x)
	}
	if x < 100 && x != math.Trunc(x) {
		return sig(x)
	}
	s := strconv.FormatInt(int64(math.Round(x)), 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// FormatApprox prints x rounded to 2 significant digits: 388,731 → 390,000.
func FormatApprox(x float64) string {
	if x <= 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return FormatCount(x)
	}
	if x < 10 {
		return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64)
	}
	p := math.Pow(10, math.Floor(math.Log10(x))-1)
	return FormatCount(math.Round(x/p) * p)
}
