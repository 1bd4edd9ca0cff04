// Package metrics exposes sluice's streams to Prometheus: a registry per
// process (never the global default), with every figure labelled by
// stream. Most figures are read from the stream's live Stats at scrape
// time; changes applied and transaction durations are counted as batches
// commit (ObserveBatch).
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/stream"
	"github.com/sluice-cdc/sluice/tablecopy"
)

const ns = "sluice"

// Metrics is a process's registry.
type Metrics struct {
	reg     *prometheus.Registry
	applied *prometheus.CounterVec
	txTime  *prometheus.HistogramVec
	batches *prometheus.CounterVec

	mu      sync.Mutex
	streams map[string]streamSource
	copies  map[string]func() (tablecopy.Progress, bool)
	health  map[string]func() (Health, bool)
}

type streamSource struct {
	stats  func() (stream.Stats, bool)
	budget time.Duration
}

// New returns a registry with the process and Go runtime collectors and
// sluice's stream metrics.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "changes_applied_total",
			Help: "Source changes committed on the target by this process, by table and kind (insert, update, delete); replays after a restart count again.",
		}, []string{"stream", "table", "kind"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "transactions_total",
			Help: "Target transactions, by outcome (commit, rollback).",
		}, []string{"stream", "outcome"}),
		streams: map[string]streamSource{},
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.applied, m.batches, (*statsCollector)(m), memoryCollector{})
	return m
}

// Registry returns the registry, for further collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Buckets returns the transaction-duration histogram's buckets, in seconds,
// laid against the kill budget: from 1 % of it to twice it.
func Buckets(budget time.Duration) []float64 {
	if budget <= 0 {
		budget = 15 * time.Second
	}
	b := budget.Seconds()
	fr := []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2}
	out := make([]float64, len(fr))
	for i, f := range fr {
		out[i] = f * b
	}
	return out
}

// Stream is one stream's metrics.
type Stream struct {
	id      string
	applied *prometheus.CounterVec
	commits prometheus.Counter
	fails   prometheus.Counter
	txTime  prometheus.ObserverVec

	mu     sync.Mutex
	tables map[*sluice.Table]string
}

// AddStream registers a stream: stats is read at every scrape (it returns
// false while the stream is not running: only sluice_up and the budget are
// then exported), and budget lays out the
// transaction-duration buckets. The histogram's buckets are fixed by the
// first stream added.
func (m *Metrics) AddStream(id string, budget time.Duration, stats func() (stream.Stats, bool)) *Stream {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.txTime == nil {
		m.txTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "transaction_duration_seconds",
			Help:    "Duration of target transactions (apply and commit, or until rolled back), by outcome; the buckets are fractions of the kill budget (sluice_kill_budget_seconds).",
			Buckets: Buckets(budget),
		}, []string{"stream", "outcome"})
		m.reg.MustRegister(m.txTime)
	}
	m.streams[id] = streamSource{stats, budget}
	return &Stream{
		id:      id,
		applied: m.applied,
		commits: m.batches.WithLabelValues(id, "commit"),
		fails:   m.batches.WithLabelValues(id, "rollback"),
		txTime:  m.txTime.MustCurryWith(prometheus.Labels{"stream": id}),
		tables:  map[*sluice.Table]string{},
	}
}

// RemoveStream forgets a stream that left the configuration: its figures
// are no longer exported.
func (m *Metrics) RemoveStream(id string) {
	m.mu.Lock()
	delete(m.streams, id)
	txTime := m.txTime
	m.mu.Unlock()
	m.applied.DeletePartialMatch(prometheus.Labels{"stream": id})
	m.batches.DeletePartialMatch(prometheus.Labels{"stream": id})
	if txTime != nil {
		txTime.DeletePartialMatch(prometheus.Labels{"stream": id})
	}
}

// ObserveBatch counts a target transaction: its changes by table and kind
// when err is nil, and its duration. It fits stream.Config.OnBatch.
// A nil *Stream (no metrics served) does nothing.
func (s *Stream) ObserveBatch(cs []sluice.Change, d time.Duration, err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.fails.Inc()
		s.txTime.WithLabelValues("rollback").Observe(d.Seconds())
		return
	}
	s.commits.Inc()
	s.txTime.WithLabelValues("commit").Observe(d.Seconds())
	type key struct {
		t  *sluice.Table
		op sluice.Op
	}
	counts := map[key]int{}
	for i := range cs {
		if cs[i].Op == sluice.OpProgress {
			continue // no change of a row
		}
		counts[key{cs[i].Table, cs[i].Op}]++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range counts {
		name, ok := s.tables[k.t]
		if !ok {
			name = "?"
			if k.t != nil {
				name = k.t.Name.String()
			}
			s.tables[k.t] = name
		}
		s.applied.WithLabelValues(s.id, name, k.op.String()).Add(float64(n))
	}
}

// statsCollector turns each stream's live Stats into gauges and counters
// at scrape time.
type statsCollector Metrics

type desc struct {
	d    *prometheus.Desc
	kind prometheus.ValueType
	// val reads the figure from Stats; nil for the first two (sluice_up
	// and the budget), which are exported while the stream is not running.
	val func(s stream.Stats) float64
}

func newDesc(name, help string, kind prometheus.ValueType, val func(s stream.Stats) float64) desc {
	return desc{prometheus.NewDesc(ns+"_"+name, help, []string{"stream"}, nil), kind, val}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

var descs = []desc{
	{prometheus.NewDesc(ns+"_up", "1 while the stream runs (every startup check passed), 0 before and after.", []string{"stream"}, nil),
		prometheus.GaugeValue, nil},
	{prometheus.NewDesc(ns+"_kill_budget_seconds", "Longest a target transaction may be predicted to take.", []string{"stream"}, nil),
		prometheus.GaugeValue, nil},
	newDesc("checkpoint_applied_changes", "Changes applied and checkpointed over the stream's whole life (the state file's count, across restarts).", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return float64(s.Applied) }),
	newDesc("checkpoint_sequence", "Sequence number of the last checkpoint.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return float64(s.Seq) }),
	newDesc("last_checkpoint_timestamp_seconds", "Unix time of the last checkpoint (target commit) by this process; 0 before the first.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return unix(s.LastCommit) }),
	newDesc("apply_lag_seconds", "Age of the oldest change read from the source and not yet committed on the target; 0 when caught up.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return s.Lag.Seconds() }),
	newDesc("apply_rate", "Recent apply rate, changes per second.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return s.Rate }),
	newDesc("source_rate", "Recent rate at which changes were read from the source, changes per second.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return s.SourceRate }),
	newDesc("caught_up", "1 when every change read has been applied and the reader found nothing new.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return b2f(s.CaughtUp) }),
	newDesc("batch_size", "Changes per target transaction the controller asks for now.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return float64(s.BatchSize) }),
	newDesc("last_batch_changes", "Changes in the last target transaction.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return float64(s.LastBatch) }),
	newDesc("last_transaction_seconds", "Duration of the last target transaction.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return s.LastTxTime.Seconds() }),
	newDesc("rtt_seconds", "Measured round-trip time to the target.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return s.RTT.Seconds() }),
	newDesc("fitted_fixed_cost_seconds", "Fitted fixed cost a of a batch, t(n) ≈ a + s·n.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return s.FixedCost.Seconds() }),
	newDesc("fitted_per_change_seconds", "Fitted per-change cost s of a batch, t(n) ≈ a + s·n.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return s.PerChange.Seconds() }),
	newDesc("lanes", "Lanes (concurrent target connections) applying changes.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return float64(s.Lanes) }),
	newDesc("queue_changes", "Changes read from the source and not yet applied.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return float64(s.QueueLen) }),
	newDesc("queue_bytes", "Memory held by changes read and not yet applied.", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return float64(s.QueueBytes) }),
	newDesc("kills_total", "Target transactions killed (by the target's transaction killer or a lost connection) and retried.", prometheus.CounterValue,
		func(s stream.Stats) float64 { return float64(s.Kills) }),
	newDesc("retries_total", "Batches rolled back and retried.", prometheus.CounterValue,
		func(s stream.Stats) float64 { return float64(s.Retries) }),
	newDesc("stalled", "1 while durable progress stays under the stall ratio of the source's rate (see sync status for the diagnosis).", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return b2f(s.Stalled) }),
	newDesc("error", "1 while the last target transaction or ping failed (cleared by the next commit).", prometheus.GaugeValue,
		func(s stream.Stats) float64 { return b2f(s.LastError != "" || s.PingError != "") }),
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d.d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	streams := make(map[string]streamSource, len(c.streams))
	for id, src := range c.streams {
		streams[id] = src
	}
	c.mu.Unlock()
	for id, src := range streams {
		s, running := src.stats()
		for i, d := range descs {
			var v float64
			switch {
			case i == 0:
				v = b2f(running)
			case i == 1:
				v = src.budget.Seconds()
			case !running:
				continue
			default:
				v = d.val(s)
			}
			ch <- prometheus.MustNewConstMetric(d.d, d.kind, v, id)
		}
	}
}
