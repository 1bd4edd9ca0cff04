package main

import (
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{9, 1, 5}, 5},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestBacklogStatements(t *testing.T) {
	for _, pg := range []bool{true, false} {
		sh := shapeFor(0.001) // 100 inserts, 50 updates, 20 deletes
		stmts := sh.statements(pg)
		if want := (100+50+20)/nativeTxSize + 1; len(stmts) != want {
			t.Fatalf("pg=%v: %d statements, want %d", pg, len(stmts), want)
		}
		for i, prefix := range map[int]string{0: "INSERT", 9: "INSERT", 10: "UPDATE", 14: "UPDATE", 15: "DELETE", 16: "DELETE", 17: "INSERT INTO items VALUES (0,"} {
			if !strings.HasPrefix(stmts[i], prefix) {
				t.Errorf("pg=%v: statement %d = %q, want prefix %q", pg, i, stmts[i], prefix)
			}
		}
		if !strings.Contains(stmts[15], "BETWEEN 81 AND 90") || !strings.Contains(stmts[16], "BETWEEN 91 AND 100") {
			t.Errorf("pg=%v: deletes %q, %q: want the last 20 inserted ids", pg, stmts[15], stmts[16])
		}
	}
}

func TestRenderNative(t *testing.T) {
	nc := nativeConfig{scale: 1, runs: 3, rtts: []time.Duration{0, 96 * time.Millisecond}, myThreads: 4}
	var rs []nativeRun
	add := func(sys string, rtt time.Duration, secs ...float64) {
		for i, s := range secs {
			rs = append(rs, nativeRun{system: sys, rtt: rtt, run: i + 1, changes: 170000, elapsed: time.Duration(s * float64(time.Second)), verified: true})
		}
	}
	add(sysPGNative, 0, 4, 5, 6)                    // median 34.0k/s
	add(sysPGNative, 96*time.Millisecond, 10, 9, 8) // median 18.9k/s
	add(sysPGSluice, 0, 4, 4, 4)                    // 42.5k/s
	add(sysPGSluice, 96*time.Millisecond, 5, 5, 5)  // 34.0k/s
	rs[len(rs)-1].verified = false
	out := renderNative(nc, rs, time.Minute)
	for _, want := range []string{
		"| PostgreSQL logical replication (subscription) | 34.0k/s | 18.9k/s | 0.56 |",
		"| sluice, pgoutput → PostgreSQL | 42.5k/s | 34.0k/s (**1 of 3 runs MISMATCH**) | 0.80 |",
		"sluice ÷ native at 96 ms: **1.80×**",
		"96 ms ÷ 0 ms: **0.80** (goal ≥ 0.9) **✗ under the goal**",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MariaDB replication") {
		t.Errorf("report has MariaDB rows with no MariaDB runs:\n%s", out)
	}
}
