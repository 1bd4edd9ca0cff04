package controller

import (
	"testing"
	"time"
)

// usl is the Universal Scalability Law's throughput at n lanes.
func usl(n int, gamma, alpha, beta float64) float64 {
	x := float64(n)
	return gamma * x / (1 + alpha*(x-1) + beta*x*(x-1))
}

func TestLanesClimbsToThePeak(t *testing.T) {
	tests := []struct {
		name        string
		alpha, beta float64
		max         int
		wantLo      int
		wantHi      int
	}{
		// N_max = sqrt((1-α)/β) ≈ 4.4.
		{"peak at 4", 0.05, 0.05, 16, 3, 5},
		// Linear scaling: up to the bound.
		{"linear", 0, 0, 6, 6, 6},
		// Contention from the start: stay at 1–2.
		{"no gain", 0.9, 0.1, 16, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLanes(LanesConfig{Min: 1, Max: tt.max, Window: time.Second})
			now := time.Unix(0, 0)
			var applied float64
			counts := map[int]int{}
			for i := 0; i < 400; i++ {
				n := l.N()
				counts[n]++
				now = now.Add(time.Second)
				applied += usl(n, 1000, tt.alpha, tt.beta)
				l.Observe(now, uint64(applied), time.Duration(n)*10*time.Millisecond, true)
			}
			// The most used lane count over the run is where it settles.
			best, most := 0, 0
			for n, c := range counts {
				if c > most {
					best, most = n, c
				}
			}
			if best < tt.wantLo || best > tt.wantHi {
				t.Fatalf("settled at %d lanes (%v), want %d–%d", best, counts, tt.wantLo, tt.wantHi)
			}
		})
	}
}

func TestLanesHoldWithoutBacklog(t *testing.T) {
	l := NewLanes(LanesConfig{Min: 1, Max: 8, Window: time.Second})
	now := time.Unix(0, 0)
	for i := 1; i < 50; i++ {
		l.Observe(now.Add(time.Duration(i)*time.Second), uint64(i*100), 10*time.Millisecond, false)
	}
	if l.N() != 1 {
		t.Fatalf("caught-up stream grew to %d lanes", l.N())
	}
}

// TestLanesBackOffWhenTheTargetSlows: a target slowed by someone else
// (locks, load) raises latency and lowers throughput whatever the lane
// count. The controller must take lanes back, and must not explore more
// lanes while it lasts, even at the minimum.
func TestLanesBackOffWhenTheTargetSlows(t *testing.T) {
	tests := []struct {
		name  string
		scale func(n int) int // changes per window at n lanes, before
	}{
		{"lanes helped", func(n int) int { return 1000 * n }},
		{"lanes did not help", func(int) int { return 1000 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLanes(LanesConfig{Min: 1, Max: 8, Window: time.Second})
			now := time.Unix(0, 0)
			var applied uint64
			step := func(changes int, lat time.Duration) int {
				now = now.Add(time.Second)
				applied += uint64(changes)
				l.Tx(lat)
				return l.Observe(now, applied, 0, true)
			}
			l.Observe(now, 0, 0, true) // opens the first window
			for range 8 {
				step(tt.scale(l.N()), 100*time.Millisecond)
			}
			start := l.N()
			n := start
			// Fewer slow windows than backOffHold+maxSlowHold, after which
			// it explores again on purpose.
			for i := range backOffHold + maxSlowHold - 2 {
				next := step(100, 2*time.Second)
				if next > n {
					t.Fatalf("window %d of the slowdown: lanes grew %d → %d", i, n, next)
				}
				n = next
			}
			if start > 1 && n >= start {
				t.Fatalf("lanes still %d after the slow windows (from %d): no back-off", n, start)
			}
			// Once the target recovers, it explores again.
			for range 2 * backOffHold {
				step(1000*l.N(), 100*time.Millisecond)
			}
			if l.N() <= n {
				t.Fatalf("lanes stayed at %d after the target recovered", l.N())
			}
		})
	}
}

// TestLanesInFlightCountsAsLatency: when nothing commits in a window (every
// lane waits on a lock) the transactions in flight are the latency.
func TestLanesInFlightCountsAsLatency(t *testing.T) {
	l := NewLanes(LanesConfig{Min: 1, Max: 4, Window: time.Second})
	now := time.Unix(0, 0)
	l.Observe(now, 0, 0, true)
	now = now.Add(time.Second)
	l.Tx(100 * time.Millisecond)
	if n := l.Observe(now, 1000, 0, true); n != 2 {
		t.Fatalf("first window chose %d lanes, want 2 (exploring)", n)
	}
	l.Restart(now, 1000)
	now = now.Add(time.Second)
	// Nothing ended; one transaction has been running for 3 s.
	if n := l.Observe(now, 1000, 3*time.Second, true); n != 1 {
		t.Fatalf("a window with no commits and a 3 s transaction in flight chose %d lanes, want 1", n)
	}
	d, ok := l.LastDecision()
	if !ok || d.Latency != 3*time.Second {
		t.Fatalf("decision %+v (ok %v): want the in-flight 3 s as the latency", d, ok)
	}
}

// TestLanesRestartExcludesTheSwitch: the time spent draining the lanes to
// switch their count must not count against the new count.
func TestLanesRestartExcludesTheSwitch(t *testing.T) {
	l := NewLanes(LanesConfig{Min: 1, Max: 4, Window: time.Second})
	now := time.Unix(0, 0)
	l.Observe(now, 0, 0, true)
	now = now.Add(time.Second)
	l.Tx(100 * time.Millisecond)
	if n := l.Observe(now, 1000, 0, true); n != 2 {
		t.Fatalf("chose %d lanes, want 2", n)
	}
	// The switch took 3 s with nothing applied.
	now = now.Add(3 * time.Second)
	l.Restart(now, 1000)
	now = now.Add(time.Second)
	l.Tx(100 * time.Millisecond)
	if n := l.Observe(now, 2900, 0, true); n != 3 {
		t.Fatalf("two lanes applied 1,900/s against one lane's 1,000/s and the controller chose %d lanes, want 3", n)
	}
}
