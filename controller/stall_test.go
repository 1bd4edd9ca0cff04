package controller

import (
	"strings"
	"testing"
	"time"
)

func TestStall(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name          string
		sourcePerSec  uint64
		appliedPerSec uint64
		pending       bool
		seconds       int
		wantStalled   bool
	}{
		{"keeping up", 100, 100, true, 30, false},
		{"round-trip-bound crawl", 100, 5, true, 30, true},
		{"nothing applied while work waits", 0, 0, true, 30, true},
		{"idle source is not a stall", 0, 0, false, 30, false},
		{"slow but inside the ratio", 100, 20, true, 30, false},
		{"too short to call", 100, 1, true, 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStall(StallConfig{Ratio: 0.1, Window: 10 * time.Second})
			var st StallState
			for i := 0; i <= tt.seconds; i++ {
				st = s.Observe(t0.Add(time.Duration(i)*time.Second), uint64(i)*tt.sourcePerSec, uint64(i)*tt.appliedPerSec, tt.pending)
			}
			if st.Stalled != tt.wantStalled {
				t.Fatalf("stalled = %v, want %v (%+v)", st.Stalled, tt.wantStalled, st)
			}
		})
	}
}

func TestDiagnoseRoundTripBound(t *testing.T) {
	msg := Diagnose(StallState{Stalled: true, SourceRate: 50, ApplyRate: 9, Since: time.Now().Add(-2 * time.Minute)},
		96*time.Millisecond, 1, 1, 40, 4*time.Second, 5*time.Second, 0, 0, 96*time.Millisecond)
	for _, want := range []string{"round-trip-bound", "96ms RTT", "best possible 10 changes/s", "--apply-mode=pipelined"} {
		if !strings.Contains(msg, want) {
			t.Errorf("diagnosis %q does not say %q", msg, want)
		}
	}
}
