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
