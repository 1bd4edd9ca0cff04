package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// CPU accounting for the native section. On a small machine the source
// server, the target server and the applier share the cores: once they are
// all busy, a run's rate is set by the CPU each change costs them, not by
// the link, and two systems compare by that cost. A run's runCPU says how
// much each side spent and how busy the machine was.

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// platform Go builds for.
const clockTick = 10 * time.Millisecond

// runCPU is the CPU time spent during one run, by side, and the machine's.
type runCPU struct {
	source, target, applier time.Duration // applier: sluice; 0 for native replication
	wall                    time.Duration
	busy, steal             time.Duration // the whole machine's, all cores
	ok                      bool
}

// cores is how many cores the machine kept busy on average.
func (u runCPU) cores() float64 {
	if u.wall <= 0 {
		return 0
	}
	return u.busy.Seconds() / u.wall.Seconds()
}

// msPerK is d per 1,000 of n changes, in milliseconds.
func msPerK(d time.Duration, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(d*1000/time.Duration(n)) / float64(time.Millisecond)
}

// cpuMeter reads the CPU time of the processes of each side, each with its
// descendants (a PostgreSQL server's backends and workers are the
// postmaster's children), and of the machine.
type cpuMeter struct {
	source, target, applier []int // process ids; a side may be empty
	start                   cpuSample
	at                      time.Time
}

// cpuSides are the process ids of a run's source and target sides.
type cpuSides struct{ source, target []int }

// serverSides are the sides of a run from src to dst, more processes (a
// PgBouncer) counting with the target.
func serverSides(src, dst dbtest.Server, more ...int) cpuSides {
	return cpuSides{source: []int{src.PID()}, target: append([]int{dst.PID()}, more...)}
}

type cpuSample struct {
	source, target, applier time.Duration
	busy, steal             time.Duration
	err                     error
}

func startCPU(sides cpuSides) *cpuMeter {
	m := &cpuMeter{source: sides.source, target: sides.target}
	m.start, m.at = m.sample(), time.Now()
	return m
}

// add adds processes to the applier's side from now on (its CPU before
// they are added is not counted: call it as the process starts).
func (m *cpuMeter) add(pid int) { m.applier = append(m.applier, pid) }

// stop is the CPU spent since startCPU; ok is false when /proc could not
// be read (not Linux).
func (m *cpuMeter) stop() runCPU {
	end := m.sample()
	if m.start.err != nil || end.err != nil {
		return runCPU{}
	}
	return runCPU{
		source:  end.source - m.start.source,
		target:  end.target - m.start.target,
		applier: end.applier - m.start.applier,
		wall:    time.Since(m.at),
		busy:    end.busy - m.start.busy,
		steal:   end.steal - m.start.steal,
		ok:      true,
	}
}

func (m *cpuMeter) sample() cpuSample {
	var s cpuSample
	tree, err := procTree()
	if err != nil {
		return cpuSample{err: err}
	}
	sum := func(pids []int) time.Duration {
		var d time.Duration
		for _, pid := range pids {
			d += tree.cpu(pid)
		}
		return d
	}
	s.source, s.target, s.applier = sum(m.source), sum(m.target), sum(m.applier)
	s.busy, s.steal, s.err = machineCPU()
	return s
}

// procStat is what the bench needs of /proc/PID/stat.
type procStat struct {
	ppid int
	own  time.Duration // utime + stime
	kids time.Duration // cutime + cstime: children it has waited for
}

// procs is every process's stat, by pid.
type procs map[int]procStat

func procTree() (procs, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	t := procs{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // it exited
		}
		st, err := parseProcStat(b)
		if err != nil {
			return nil, fmt.Errorf("%s/stat: %w", d, err)
		}
		t[pid] = st
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("no process under /proc")
	}
	return t, nil
}

// parseProcStat reads a /proc/PID/stat line. The command name, in
// parentheses, may hold spaces and parentheses: fields are counted from
// the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("%d fields after the command name, want at least 15", len(f))
	}
	var n [5]int64
	for k, idx := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("field %d: %w", idx+3, err)
		}
		n[k] = v
	}
	tick := func(v int64) time.Duration { return time.Duration(v) * clockTick }
	return procStat{ppid: int(n[0]), own: tick(n[1] + n[2]), kids: tick(n[3] + n[4])}, nil
}

// cpu is the CPU time of pid, of its children it has waited for, and of
// its live descendants.
func (t procs) cpu(pid int) time.Duration {
	st, ok := t[pid]
	if !ok {
		return 0
	}
	d := st.own + st.kids
	for child, cst := range t {
		if cst.ppid == pid && child != pid {
			d += t.cpu(child)
		}
	}
	return d
}

// machineCPU is the machine's busy and stolen CPU time so far, all cores
// (the first line of /proc/stat; busy leaves out idle, iowait and steal).
func machineCPU() (busy, steal time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseMachineCPU(b)
}

func parseMachineCPU(b []byte) (busy, steal time.Duration, err error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: first line %q is not the cpu totals", line)
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	// user nice system idle iowait irq softirq steal
	busyTicks := v[0] + v[1] + v[2] + v[5] + v[6]
	return time.Duration(busyTicks) * clockTick, time.Duration(v[7]) * clockTick, nil
}
