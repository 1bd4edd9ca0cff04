package metrics

import (
	"bufio"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Memory is the process's memory as the Go runtime and the kernel see it:
// what the stream's settings bound (see the README's memory formula) is
// the Go heap; the kernel's figures add the runtime's headroom and what
// it has not returned yet.
type Memory struct {
	// HeapBytes is the Go heap's live and not yet collected objects
	// (/memory/classes/heap/objects:bytes).
	HeapBytes uint64 `json:"heap_bytes"`
	// GoBytes is everything the Go runtime has mapped and not released
	// (/memory/classes/total:bytes minus released pages).
	GoBytes uint64 `json:"go_bytes"`
	// RSSBytes and PeakRSSBytes are the kernel's resident set size and its
	// high-water mark (VmRSS, VmHWM of /proc/self/status; zero where there
	// is no /proc).
	RSSBytes     uint64 `json:"rss_bytes"`
	PeakRSSBytes uint64 `json:"peak_rss_bytes"`
}

// ReadMemory reads the process's memory now.
func ReadMemory() Memory {
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(samples)
	u := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	m := Memory{HeapBytes: u(0), GoBytes: u(1) - min(u(1), u(2))}
	m.RSSBytes, m.PeakRSSBytes = procStatus("/proc/self/status")
	return m
}

// procStatus reads VmRSS and VmHWM (in kB) from a /proc/<pid>/status file,
// in bytes; zeros when it cannot be read.
func procStatus(path string) (rss, peak uint64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak
}

// memoryCollector exports ReadMemory at scrape time as sluice_memory_bytes,
// one series per kind: the process's, not a stream's (streams in one
// process share its memory).
type memoryCollector struct{}

var memoryDesc = prometheus.NewDesc(ns+"_memory_bytes",
	"The process's memory by kind: heap (Go heap objects, what the memory formula of --max-queue-bytes bounds), go (all the Go runtime holds), rss and peak_rss (the kernel's resident set and its high-water mark).",
	[]string{"kind"}, nil)

func (memoryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- memoryDesc }

func (memoryCollector) Collect(ch chan<- prometheus.Metric) {
	m := ReadMemory()
	for _, kv := range []struct {
		kind string
		v    uint64
	}{{"heap", m.HeapBytes}, {"go", m.GoBytes}, {"rss", m.RSSBytes}, {"peak_rss", m.PeakRSSBytes}} {
		ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(kv.v), kv.kind)
	}
}
