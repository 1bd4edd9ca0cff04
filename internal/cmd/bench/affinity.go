package main

// The native section's pinned mode (issue 32): the two sides of a run on
// separate cores, as two machines would be. On a shared machine the source
// server, sluice and the target server take each other's cores, and a
// change's cost shows up as the three sides' sum; pinned, each side has a
// core of its own and the side that runs out of it is the bottleneck.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// errFewCPUs is newPinning's error on a machine with one usable CPU.
var errFewCPUs = errors.New("fewer than 2 CPUs")

// pinning is the pinned mode's pair of cores: the source side's (the
// source server, sluice, the bench process and so its WAN proxy) and the
// target side's (the target server, PgBouncer).
type pinning struct {
	all            unix.CPUSet // the bench's own affinity before: what everything gets back
	source, target int         // CPU numbers
}

// newPinning picks the first two CPUs the bench may run on.
func newPinning() (*pinning, error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, fmt.Errorf("the bench's CPU affinity: %w", err)
	}
	cpus := cpusOf(&all)
	if len(cpus) < 2 {
		return nil, fmt.Errorf("%w (CPUs %s)", errFewCPUs, cpuListString(cpus))
	}
	return &pinning{all: all, source: cpus[0], target: cpus[1]}, nil
}

// cpusOf is the CPUs in set, ascending.
func cpusOf(set *unix.CPUSet) []int {
	var out []int
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}

// cpuListString is cpus as a comma-separated list.
func cpuListString(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

func oneCPU(cpu int) unix.CPUSet {
	var s unix.CPUSet
	s.Set(cpu)
	return s
}

// pin puts the bench process and the process trees of src on the source
// CPU, those of dst on the target CPU, and returns the function that gives
// them all back every CPU the bench had. On an error, what was pinned is
// given back before it returns.
func (p *pinning) pin(src, dst []int) (undo func(), err error) {
	self := os.Getpid()
	undo = func() {
		for _, root := range append(append([]int{self}, src...), dst...) {
			var err error
			if root == self {
				_, err = setTasksAffinity(self, &p.all)
			} else {
				err = setTreeAffinity(root, &p.all)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "    warning: give process %d back every CPU: %v\n", root, err)
			}
		}
	}
	srcSet, dstSet := oneCPU(p.source), oneCPU(p.target)
	// The bench's threads each: a thread's affinity is its own, and one
	// set on the process id reaches only the main thread. The threads the
	// runtime starts later inherit it from their creator.
	if _, err := setTasksAffinity(self, &srcSet); err != nil {
		undo()
		return nil, fmt.Errorf("pin the bench to CPU %d: %w", p.source, err)
	}
	for _, side := range []struct {
		roots []int
		set   *unix.CPUSet
		cpu   int
	}{{src, &srcSet, p.source}, {dst, &dstSet, p.target}} {
		for _, root := range side.roots {
			if err := setTreeAffinity(root, side.set); err != nil {
				undo()
				return nil, fmt.Errorf("pin process %d and its children to CPU %d: %w", root, side.cpu, err)
			}
		}
	}
	return undo, nil
}

// check counts the tasks (threads of every process) of the bench and of
// the trees of src, and those of the trees of dst, and fails on the first
// one not on its side's CPU: the processes forked and the threads started
// since pin must have inherited it. The bench's children (the servers it
// started among them) are not the bench's side: only its own threads
// count.
func (p *pinning) check(src, dst []int) (nSrc, nDst int, err error) {
	tree, err := procTree()
	if err != nil {
		return 0, 0, err
	}
	self := os.Getpid()
	count := func(roots []int, cpu int) (int, error) {
		want := oneCPU(cpu)
		n := 0
		for _, root := range roots {
			pids := []int{root}
			if root != self {
				pids = append(pids, tree.descendants(root)...)
			}
			for _, pid := range pids {
				tids, err := tasks(pid)
				if err != nil {
					continue // it exited
				}
				for _, tid := range tids {
					var cur unix.CPUSet
					if err := unix.SchedGetaffinity(tid, &cur); err != nil {
						continue
					}
					if cur != want {
						return n, fmt.Errorf("thread %d of process %d (under %d) may run on CPUs %s, want %d", tid, pid, root, cpuListString(cpusOf(&cur)), cpu)
					}
					n++
				}
			}
		}
		return n, nil
	}
	if nSrc, err = count(append([]int{self}, src...), p.source); err != nil {
		return nSrc, 0, err
	}
	nDst, err = count(dst, p.target)
	return nSrc, nDst, err
}

// tasks is the thread ids of process pid.
func tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// setTasksAffinity sets the affinity of every thread of process pid,
// passing over its threads again until a pass finds them all set: a
// thread started during a pass by one not yet set would be missed.
// changed reports whether any thread was not set before. A process that
// has exited is no error.
func setTasksAffinity(pid int, set *unix.CPUSet) (changed bool, err error) {
	for range 20 {
		tids, err := tasks(pid)
		if errors.Is(err, os.ErrNotExist) {
			return changed, nil
		}
		if err != nil {
			return changed, err
		}
		pass := false
		for _, tid := range tids {
			var cur unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &cur); err == nil && cur == *set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return changed, fmt.Errorf("thread %d of process %d: %w", tid, pid, err)
			}
			pass = true
		}
		if !pass {
			return changed, nil
		}
		changed = true
	}
	return changed, fmt.Errorf("process %d: threads still unset after 20 passes", pid)
}

// setTreeAffinity sets the affinity of process root and of all its
// descendants, every thread of each. Once a process is set, the children
// it forks inherit it; passes over the tree repeat until one sets nothing,
// so a child forked before its parent was set is not missed.
func setTreeAffinity(root int, set *unix.CPUSet) error {
	if _, err := setTasksAffinity(root, set); err != nil {
		return err
	}
	for range 20 {
		tree, err := procTree()
		if err != nil {
			return err
		}
		pass := false
		for _, pid := range tree.descendants(root) {
			changed, err := setTasksAffinity(pid, set)
			if err != nil {
				return err
			}
			pass = pass || changed
		}
		if !pass {
			return nil
		}
	}
	return fmt.Errorf("process %d: children still unset after 20 passes", root)
}

// descendants is every live descendant of root, parents before their
// children.
func (t procs) descendants(root int) []int {
	kids := map[int][]int{}
	for pid, st := range t {
		if pid != st.ppid {
			kids[st.ppid] = append(kids[st.ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		ks := kids[pid]
		slices.Sort(ks)
		for _, k := range ks {
			if k != root && !slices.Contains(out, k) {
				out = append(out, k)
				queue = append(queue, k)
			}
		}
	}
	return out
}
