package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Health is what a stream's source keeps for it, as its last health check
// found: its PostgreSQL replication slot, or the binlog its position
// needs; and the warnings of that check.
type Health struct {
	// Slot is set for a logical-replication stream whose slot exists.
	Slot                         bool
	SlotActive                   bool
	SlotRetained, SlotLimit      float64
	SlotInactive                 float64
	Binlog                       bool
	BinlogPurgeIn                float64 // seconds; negative: no expiry
	BinlogFilesBefore            float64 // -1: unknown
	SlotWAL, SlotIdle, PurgeSoon bool    // the warnings
}

// healthCollector exports each stream's last health check, read at
// scrape time.
type healthCollector Metrics

var (
	slotRetained = prometheus.NewDesc(ns+"_slot_retained_wal_bytes", "WAL the stream's replication slot keeps on the source (current WAL position minus its restart_lsn).", []string{"stream"}, nil)
	slotLimit    = prometheus.NewDesc(ns+"_slot_wal_limit_bytes", "The retained WAL the slot warnings are fractions of: max_slot_wal_keep_size, or --slot-wal-limit where the server sets none.", []string{"stream"}, nil)
	slotActive   = prometheus.NewDesc(ns+"_slot_active", "1 while the stream's replication slot has a reader.", []string{"stream"}, nil)
	slotInactive = prometheus.NewDesc(ns+"_slot_inactive_seconds", "How long the stream's replication slot has had no reader (0 while it has one).", []string{"stream"}, nil)
	purgeIn      = prometheus.NewDesc(ns+"_binlog_purge_seconds", "Estimated seconds until the binlog the stream's checkpoint needs may be purged by binlog_expire_logs_seconds (absent when binlogs never expire).", []string{"stream"}, nil)
	filesBefore  = prometheus.NewDesc(ns+"_binlog_files_before_needed", "Binlogs on the source older than the one the stream's checkpoint needs: expiry and PURGE remove those first.", []string{"stream"}, nil)
	warning      = prometheus.NewDesc(ns+"_health_warning", "1 while the stream's health check warns, by check: slot_wal (retained WAL past 70 % of the limit), slot_inactive, binlog_purge.", []string{"stream", "check"}, nil)
)

// AddHealth exports a stream's health checks; last returns the latest
// and false before the first.
func (m *Metrics) AddHealth(id string, last func() (Health, bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.health == nil {
		m.health = map[string]func() (Health, bool){}
		m.reg.MustRegister((*healthCollector)(m))
	}
	m.health[id] = last
}

// RemoveHealth stops exporting a stream's health (it left the process).
func (m *Metrics) RemoveHealth(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.health, id)
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{slotRetained, slotLimit, slotActive, slotInactive, purgeIn, filesBefore, warning} {
		ch <- d
	}
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	all := make(map[string]func() (Health, bool), len(c.health))
	for id, f := range c.health {
		all[id] = f
	}
	c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for id, f := range all {
		h, ok := f()
		if !ok {
			continue
		}
		if h.Slot {
			gauge(slotRetained, h.SlotRetained, id)
			gauge(slotLimit, h.SlotLimit, id)
			gauge(slotActive, b2f(h.SlotActive), id)
			gauge(slotInactive, h.SlotInactive, id)
			gauge(warning, b2f(h.SlotWAL), id, "slot_wal")
			gauge(warning, b2f(h.SlotIdle), id, "slot_inactive")
		}
		if h.Binlog {
			if h.BinlogPurgeIn >= 0 {
				gauge(purgeIn, h.BinlogPurgeIn, id)
			}
			if h.BinlogFilesBefore >= 0 {
				gauge(filesBefore, h.BinlogFilesBefore, id)
			}
			gauge(warning, b2f(h.PurgeSoon), id, "binlog_purge")
		}
	}
}
