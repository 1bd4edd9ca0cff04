package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/tablecopy"
)

// copyCollector exports the initial copies that run, read from their
// progress at scrape time.
type copyCollector Metrics

var (
	copyActive = prometheus.NewDesc(ns+"_copy_active", "1 while the stream copies the tables' existing rows (the initial copy), before it streams.", []string{"stream"}, nil)
	copyRows   = prometheus.NewDesc(ns+"_copy_rows", "Rows the initial copy has committed on the target, by table.", []string{"stream", "table"}, nil)
	copyTotal  = prometheus.NewDesc(ns+"_copy_rows_estimate", "Rows the source's table holds, as estimated when the copy was planned.", []string{"stream", "table"}, nil)
	copyBytes  = prometheus.NewDesc(ns+"_copy_bytes", "Bytes of values the initial copy has committed on the target, by table.", []string{"stream", "table"}, nil)
	copyChunks = prometheus.NewDesc(ns+"_copy_chunks_done", "Chunks of the table committed on the target.", []string{"stream", "table"}, nil)
	copyPlan   = prometheus.NewDesc(ns+"_copy_chunks", "Chunks the table is copied in.", []string{"stream", "table"}, nil)
	copyRate   = prometheus.NewDesc(ns+"_copy_rate", "Rows per second the initial copy commits, since it (re)started.", []string{"stream"}, nil)
	copyETA    = prometheus.NewDesc(ns+"_copy_eta_seconds", "Estimated seconds until the initial copy is done (0: unknown).", []string{"stream"}, nil)
)

// AddCopy exports a stream's initial copy while progress says it runs.
func (m *Metrics) AddCopy(id string, progress func() (tablecopy.Progress, bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.copies == nil {
		m.copies = map[string]func() (tablecopy.Progress, bool){}
		m.reg.MustRegister((*copyCollector)(m))
	}
	m.copies[id] = progress
}

// RemoveCopy stops exporting a stream's copy (it handed off or failed).
func (m *Metrics) RemoveCopy(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.copies, id)
}

func (c *copyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{copyActive, copyRows, copyTotal, copyBytes, copyChunks, copyPlan, copyRate, copyETA} {
		ch <- d
	}
}

func (c *copyCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	copies := make(map[string]func() (tablecopy.Progress, bool), len(c.copies))
	for id, f := range c.copies {
		copies[id] = f
	}
	c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for id, f := range copies {
		p, active := f()
		if !active {
			gauge(copyActive, 0, id)
			continue
		}
		gauge(copyActive, 1, id)
		gauge(copyRate, p.Rate, id)
		gauge(copyETA, p.ETA.Seconds(), id)
		for _, t := range p.Tables {
			name := t.Table.String()
			gauge(copyRows, float64(t.Rows), id, name)
			gauge(copyTotal, float64(t.Total), id, name)
			gauge(copyBytes, float64(t.Bytes), id, name)
			gauge(copyChunks, float64(t.ChunksDone), id, name)
			gauge(copyPlan, float64(t.Chunks), id, name)
		}
	}
}
