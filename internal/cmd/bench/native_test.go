package main

import (
	"slices"
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
	nc := nativeConfig{scale: 1, runs: 3, rtts: []time.Duration{0, 96 * time.Millisecond}, myThreads: 4, modes: []string{modeShared, modePinned}}
	var rs []nativeRun
	add := func(sys, mode string, rtt time.Duration, secs ...float64) {
		for i, s := range secs {
			rs = append(rs, nativeRun{system: sys, mode: mode, rtt: rtt, run: i + 1, changes: 170000, elapsed: time.Duration(s * float64(time.Second)), verified: true})
		}
	}
	add(sysPGNative, modeShared, 0, 4, 5, 6)                    // median 34.0k/s
	add(sysPGNative, modeShared, 96*time.Millisecond, 10, 9, 8) // median 18.9k/s
	add(sysPGSluice, modeShared, 0, 4, 4, 4)                    // 42.5k/s
	add(sysPGSluice, modeShared, 96*time.Millisecond, 5, 5, 5)  // 34.0k/s
	rs[len(rs)-1].verified = false
	add(sysPGNative, modePinned, 0, 5, 5, 5)                    // 34.0k/s
	add(sysPGNative, modePinned, 96*time.Millisecond, 10, 9, 8) // 18.9k/s
	add(sysPGSluice, modePinned, 0, 8, 8, 8)                    // 21.2k/s
	add(sysPGSluice, modePinned, 96*time.Millisecond, 10, 9, 8) // 18.9k/s
	// CPU, at 0 ms: per 1,000 of 170,000 changes, the medians are 10 ms
	// (1.7 s), 20 ms (3.4 s) and 30 ms (5.1 s); a native row has no
	// applier. sluice's peak RSS: 40, 50, 60 MB shared (median 50 MB),
	// 90, 120, 130 MB pinned (median 120 MB, over the goal).
	for i := range rs {
		if isSluice(rs[i].system) {
			rs[i].rss = uint64(30+10*rs[i].run) * 1e6
			if rs[i].mode == modePinned {
				rs[i].rss = []uint64{0, 90e6, 120e6, 130e6}[rs[i].run]
			}
		}
		if rs[i].rtt != 0 {
			continue
		}
		k := time.Duration(rs[i].run) // runs 1..3: medians at run 2
		u := runCPU{source: 850 * time.Millisecond * k, target: 2550 * time.Millisecond * k, wall: 4 * time.Second, busy: 7 * time.Second, ok: true}
		if rs[i].system == sysPGSluice {
			u.applier = 1700 * time.Millisecond * k
		}
		rs[i].cpu = u
	}
	out := renderNative(nc, rs, time.Minute)
	for _, want := range []string{
		"| | mode | 0 ms proxy | 96 ms proxy | 96 ms ÷ 0 ms |",
		"| PostgreSQL logical replication (subscription) | shared | 34.0k/s | 18.9k/s | 0.56 |",
		"| sluice, pgoutput → PostgreSQL | shared | 42.5k/s | 34.0k/s (**1 of 3 runs MISMATCH**) | 0.80 |",
		"| PostgreSQL logical replication (subscription) | pinned | 34.0k/s | 18.9k/s | 0.56 |",
		"| sluice, pgoutput → PostgreSQL | pinned | 21.2k/s | 18.9k/s | 0.89 |",
		"* PostgreSQL, shared: sluice ÷ native at 96 ms: **1.80×**",
		"* PostgreSQL, pinned: sluice ÷ native at 96 ms: **1.00×** (18.9k/s vs 18.9k/s; goal ≥ 1.5×) **✗ under the goal**",
		"shared: 96 ms ÷ 0 ms: **0.80** (goal ≥ 0.9) **✗ under the goal**",
		"Modes (issue 32): *shared*",
		"| system | mode | link | source server | sluice | target server | total | cores busy | stolen | sluice peak RSS |",
		"| PostgreSQL logical replication (subscription) | shared | 0 ms proxy | 10.0 | – | 30.0 | 40.0 | 1.75 | 0.00 | – |",
		"| sluice, pgoutput → PostgreSQL | shared | 0 ms proxy | 10.0 | **20.0 ✗** | 30.0 | 60.0 | 1.75 | 0.00 | 50 MB |",
		"| sluice, pgoutput → PostgreSQL | pinned | 0 ms proxy | 10.0 | **20.0 ✗** | 30.0 | 60.0 | 1.75 | 0.00 | **120 MB ✗** |",
		"| 2 | sluice, pgoutput → PostgreSQL | shared | 0 ms proxy | 170000 | 4.00 | 42,500 | 10.0 / 20.0 / 30.0 | 1.75 | 50 MB | equal |",
		"| 1 | sluice, pgoutput → PostgreSQL | shared | 96 ms proxy | 170000 | 5.00 | 34,000 | — | — | 40 MB | equal |",
		"| 3 | sluice, pgoutput → PostgreSQL | pinned | 0 ms proxy | 170000 | 8.00 | 21,250 | 15.0 / 30.0 / 45.0 | 1.75 | **130 MB ✗** | equal |",
		"| 1 | PostgreSQL logical replication (subscription) | pinned | 96 ms proxy | 170000 | 10.00 | 17,000 | — | — | – | equal |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MariaDB replication") {
		t.Errorf("report has MariaDB rows with no MariaDB runs:\n%s", out)
	}
	// Shared rows come before pinned ones of the same system.
	if i, j := strings.Index(out, "| sluice, pgoutput → PostgreSQL | shared | 42.5k/s"), strings.Index(out, "| sluice, pgoutput → PostgreSQL | pinned | 21.2k/s"); i < 0 || j < i {
		t.Errorf("the pinned row does not follow the shared row of its system:\n%s", out)
	}

	// With shared runs only, nothing speaks of the pinned mode.
	var shared []nativeRun
	for _, r := range rs {
		if r.mode == modeShared {
			shared = append(shared, r)
		}
	}
	if out := renderNative(nc, shared, time.Minute); strings.Contains(out, "pinned") {
		t.Errorf("a report of shared runs only mentions the pinned mode:\n%s", out)
	}
}

func TestParseModes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"shared,pinned", []string{modeShared, modePinned}, false},
		{"pinned", []string{modePinned}, false},
		{" Pinned , shared,pinned,", []string{modePinned, modeShared}, false},
		{"shared", []string{modeShared}, false},
		{"", nil, true},
		{" , ", nil, true},
		{"shared,both", nil, true},
	} {
		got, err := parseModes("-native-modes", tc.in)
		if (err != nil) != tc.err {
			t.Errorf("parseModes(%q) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("parseModes(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestApplierGoalCell(t *testing.T) {
	for _, tc := range []struct {
		system string
		ms     float64
		want   string
	}{
		{sysPGNative, 9, "–"},
		{sysPGSluice, 2.96, "3.0"},
		{sysMySluice, 3, "3.0"},
		{sysPGBouncer, 3.04, "3.0"},
		{sysPGBouncer, 3.06, "**3.1 ✗**"},
		{sysMySluice, 5.61, "**5.6 ✗**"},
	} {
		if got := applierGoalCell(tc.system, tc.ms); got != tc.want {
			t.Errorf("applierGoalCell(%s, %v) = %q, want %q", tc.system, tc.ms, got, tc.want)
		}
	}
}

func TestRSSCell(t *testing.T) {
	for _, tc := range []struct {
		b    uint64
		want string
	}{
		{0, "–"},
		{42e6, "42 MB"},
		{100e6, "100 MB"},
		{100e6 + 1, "**100 MB ✗**"},
		{250e6, "**250 MB ✗**"},
	} {
		if got := rssCell(tc.b); got != tc.want {
			t.Errorf("rssCell(%d) = %q, want %q", tc.b, got, tc.want)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (postgres: a (b) c) S 17 4242 4242 0 -1 4194560 12 0 0 0 150 25 7 3 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{ppid: 17, own: 1750 * time.Millisecond, kids: 100 * time.Millisecond}
	if st != want {
		t.Fatalf("parseProcStat = %+v, want %+v", st, want)
	}
	for _, bad := range []string{"", "4242 no-parens S 1", "1 (x) S 1 2"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) did not fail", bad)
		}
	}
}

func TestParseMachineCPU(t *testing.T) {
	busy, steal, err := parseMachineCPU([]byte("cpu  100 5 50 9000 40 3 2 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+irq+softirq; idle and iowait are not busy.
	if busy != 1600*time.Millisecond || steal != 70*time.Millisecond {
		t.Fatalf("busy %v, steal %v; want 1.6s, 70ms", busy, steal)
	}
	if _, _, err := parseMachineCPU([]byte("intr 1 2 3\n")); err == nil {
		t.Error("a /proc/stat without its cpu line did not fail")
	}
}

// TestProcsCPU: a process counts with its live descendants and the
// children it has waited for, not with its parent or its siblings.
func TestProcsCPU(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tr := procs{
		1:  {ppid: 0, own: ms(1000)},
		10: {ppid: 1, own: ms(100), kids: ms(40)}, // the server
		11: {ppid: 10, own: ms(20)},               // a backend
		12: {ppid: 11, own: ms(5)},                // its child
		20: {ppid: 1, own: ms(300)},               // another process
	}
	if got := tr.cpu(10); got != ms(165) {
		t.Errorf("cpu(10) = %v, want 165ms", got)
	}
	if got := tr.cpu(99); got != 0 {
		t.Errorf("cpu of a missing process = %v, want 0", got)
	}
}
