package main

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCPUsOf(t *testing.T) {
	for _, tc := range []struct {
		set  []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{3, 1, 64, 1023}, "1,3,64,1023"},
	} {
		var s unix.CPUSet
		for _, c := range tc.set {
			s.Set(c)
		}
		if got := cpuListString(cpusOf(&s)); got != tc.want {
			t.Errorf("cpusOf(%v) = %q, want %q", tc.set, got, tc.want)
		}
	}
}

func TestDescendants(t *testing.T) {
	tr := procs{
		1:  {ppid: 0},
		10: {ppid: 1}, // the server
		12: {ppid: 10},
		11: {ppid: 10},
		13: {ppid: 11}, // a grandchild
		20: {ppid: 1},  // another process
	}
	if got, want := tr.descendants(10), []int{11, 12, 13}; !slices.Equal(got, want) {
		t.Errorf("descendants(10) = %v, want %v", got, want)
	}
	if got := tr.descendants(20); len(got) != 0 {
		t.Errorf("descendants(20) = %v, want none", got)
	}
}

// TestPinTree pins a real process tree (a shell, its children and the one
// it forks after the pinning) and gives it every CPU back.
func TestPinTree(t *testing.T) {
	p, err := newPinning()
	if err != nil {
		t.Skip(err)
	}
	// The shell forks one sleep now and one once the file "go" exists.
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `sleep 30 & while [ ! -e go ]; do sleep 0.05; done; sleep 30 & wait`)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	root := cmd.Process.Pid
	waitKids := func(n int) []int {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			tree, err := procTree()
			if err != nil {
				t.Fatal(err)
			}
			// The loop's own short sleeps come and go: count the long ones.
			var kids []int
			for _, pid := range tree.descendants(root) {
				if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && strings.Contains(string(b), "30") {
					kids = append(kids, pid)
				}
			}
			if len(kids) >= n {
				return kids
			}
		}
		t.Fatalf("no %d children of %d within 10 s", n, root)
		return nil
	}
	waitKids(1)

	undo, err := p.pin(nil, []int{root})
	if err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			undo()
		}
	}()
	if err := os.WriteFile(dir+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	kids := waitKids(2)
	// The shell is the test's child, but not on its side: the test's own
	// threads count on the source side, not its children.
	nSrc, nDst, err := p.check(nil, []int{root})
	if err != nil {
		t.Fatal(err)
	}
	if nSrc < 1 || nDst < 3 {
		t.Errorf("check counted %d threads on the source side, %d on the target side; want ≥ 1 (the test's) and ≥ 3 (sh, 2 sleeps)", nSrc, nDst)
	}
	// A process of the source side that has strayed is caught.
	if _, _, err := p.check(nil, []int{os.Getpid()}); err == nil {
		t.Error("check passed the test's threads, on the source CPU, as the target side's")
	}
	tids, err := tasks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		var cur unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &cur); err != nil {
			continue // it exited
		}
		if got := cpuListString(cpusOf(&cur)); got != strconv.Itoa(p.source) {
			t.Errorf("the test's thread %d: CPUs %s, want %d", tid, got, p.source)
		}
	}
	for _, pid := range append([]int{root}, kids...) {
		if got := allowed(t, pid); got != strconv.Itoa(p.target) {
			t.Errorf("process %d: Cpus_allowed_list %q, want %d", pid, got, p.target)
		}
	}
	undo()
	restored = true
	want := cpuListString(cpusOf(&p.all))
	for _, pid := range append([]int{root, os.Getpid()}, kids...) {
		var cur unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &cur); err != nil {
			t.Fatal(err)
		}
		if got := cpuListString(cpusOf(&cur)); got != want {
			t.Errorf("process %d after undo: CPUs %s, want %s", pid, got, want)
		}
	}
}

// allowed is the Cpus_allowed_list line of /proc/PID/status.
func allowed(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no Cpus_allowed_list", pid)
	return ""
}
