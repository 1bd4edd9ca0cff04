package daemon

import (
	"context"
	"reflect"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/stream"
)

// How a changed setting takes effect when the configuration is reloaded
// (SIGHUP).
type reloadScope int

const (
	// restartStream: the stream is restarted inside the process. Its batch
	// in flight commits (or rolls back), it checkpoints, and it reopens its
	// source and target with the new settings and resumes from that
	// checkpoint, so no change is lost or applied twice; the other streams,
	// the metrics endpoint and the systemd service are not touched. This
	// covers the table list and every controller setting.
	restartStream reloadScope = iota
	// restartProcess: the setting is kept as it was, with a warning, until
	// sluice is restarted. Pointing a running stream at another source or
	// target server, or reading its source another way, would resume from
	// a position that means nothing there; that must be an operator's
	// deliberate act. The state dir and the metrics address belong to the
	// process.
	restartProcess
)

// reloadKeys classifies every setting of StreamOptions by its config key.
// Fields not listed (ID, Logger, Progress, OnStart) are not settings of
// the file. A test checks that every field is classified.
var reloadKeys = map[string]struct {
	key   string
	scope reloadScope
}{
	"SourceURL":           {"source", restartProcess},
	"TargetURL":           {"target", restartProcess},
	"Tables":              {"tables", restartStream},
	"StateDir":            {"state_dir", restartProcess},
	"SourceMode":          {"source_mode", restartProcess},
	"FromNow":             {"from_now", restartStream},
	"InitialCopy":         {"initial_copy", restartStream},
	"CreateTables":        {"create_tables", restartStream},
	"SchemaChanges":       {"schema_changes", restartStream},
	"CopyWorkers":         {"copy_workers", restartStream},
	"CopyChunkRows":       {"copy_chunk_rows", restartStream},
	"ApplyMode":           {"apply_mode", restartStream},
	"MultiStatements":     {"multi_statements", restartStream},
	"DisableFKChecks":     {"disable_fk_checks", restartStream},
	"AllowCollationMerge": {"allow_collation_merge", restartStream},
	"BatchSize":           {"apply_batch_size", restartStream},
	"NoAutoTune":          {"no_auto_tune", restartStream},
	"Controller":          {"controller", restartStream},
	"StallRatio":          {"stall_ratio", restartStream},
	"StallWindow":         {"stall_window", restartStream},
	"ExitOnStall":         {"exit_on_stall", restartStream},
	"MinLanes":            {"min_lanes", restartStream},
	"MaxLanes":            {"max_lanes", restartStream},
	"NoOverlap":           {"no_overlap", restartStream},
	"KillBudget":          {"kill_budget", restartStream},
	"TargetTxTimeout":     {"target_tx_timeout", restartStream},
	"MaxBatchBytes":       {"max_batch_bytes", restartStream},
	"PollInterval":        {"poll_interval", restartStream},
	"MaxQueueBytes":       {"max_queue_bytes", restartStream},
	"ShutdownTimeout":     {"shutdown_timeout", restartStream},
	"TransientRetryFor":   {"transient_retry_for", restartStream},
	"MetricsListen":       {"metrics_listen", restartProcess},
	// The health checks' settings restart the stream like the others: a
	// stream's health watch runs with its options.
	"HealthInterval":       {"health_interval", restartStream},
	"SlotWALLimit":         {"slot_wal_limit", restartStream},
	"SlotInactiveWarn":     {"slot_inactive_warn", restartStream},
	"BinlogPurgeWarn":      {"binlog_purge_warn", restartStream},
	"BinlogPurgeWarnFiles": {"binlog_purge_warn_files", restartStream},
}

// notSettings are the StreamOptions fields that are not reloaded.
var notSettings = []string{"ID", "Logger", "Progress", "OnStart", "ProgressInterval"}

// optionsDiff is what changed between a stream's running and new options,
// as config keys.
type optionsDiff struct {
	stream, process []string
}

// diffOptions compares a stream's running options with the new ones. A
// connection string whose only change is its password (a rotated secret)
// restarts the stream: it is the same server.
func diffOptions(old, new StreamOptions) optionsDiff {
	var d optionsDiff
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(new)
	t := ov.Type()
	for i := range t.NumField() {
		name := t.Field(i).Name
		k, ok := reloadKeys[name]
		if !ok || reflect.DeepEqual(ov.Field(i).Interface(), nv.Field(i).Interface()) {
			continue
		}
		if k.scope == restartProcess && (name == "SourceURL" || name == "TargetURL") &&
			endpoint.MaskURL(ov.Field(i).String()) == endpoint.MaskURL(nv.Field(i).String()) {
			d.stream = append(d.stream, k.key+" password")
			continue
		}
		if k.scope == restartProcess {
			d.process = append(d.process, k.key)
		} else {
			d.stream = append(d.stream, k.key)
		}
	}
	return d
}

// keepProcessSettings returns new with the settings that need a restart of
// sluice put back to their running values.
func keepProcessSettings(old, new StreamOptions) StreamOptions {
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(&new).Elem()
	t := ov.Type()
	for i := range t.NumField() {
		name := t.Field(i).Name
		k, ok := reloadKeys[name]
		if !ok || k.scope != restartProcess {
			continue
		}
		if (name == "SourceURL" || name == "TargetURL") && endpoint.MaskURL(ov.Field(i).String()) == endpoint.MaskURL(nv.Field(i).String()) {
			continue // a new password is taken
		}
		nv.Field(i).Set(ov.Field(i))
	}
	return new
}

// reload applies a new list of streams: streams that left it are stopped,
// new ones started, and changed ones restarted inside the process or, for
// settings that need it, told to wait for a restart of sluice. An invalid
// list changes nothing.
func (p *process) reload(ctx context.Context, next []StreamOptions) {
	log := p.log
	if len(next) == 0 {
		log.Error("reload: the configuration names no stream; the running streams go on unchanged")
		return
	}
	for i := range next {
		next[i] = withDefaults(next[i])
	}
	if err := checkSet(next); err != nil {
		log.Error("reload refused; the running streams go on unchanged", "err", err.Error())
		return
	}
	for i := range next {
		if next[i].StateDir != p.stateDir {
			log.Warn("reload: state_dir takes effect only when sluice restarts", "stream", next[i].ID, "running", p.stateDir, "configured", next[i].StateDir)
			next[i].StateDir = p.stateDir
		}
		if next[i].MetricsListen != p.metricsListen {
			log.Warn("reload: metrics_listen takes effect only when sluice restarts", "stream", next[i].ID, "running", p.metricsListen, "configured", next[i].MetricsListen)
			next[i].MetricsListen = p.metricsListen
		}
	}
	cur := map[string]*slot{}
	for _, sl := range p.list() {
		cur[sl.o.ID] = sl
	}
	changed := false
	for _, n := range next {
		sl := cur[n.ID]
		if sl == nil {
			log.Info("reload: new stream; starting it", "stream", n.ID)
			p.start(ctx, n)
			changed = true
			continue
		}
		delete(cur, n.ID)
		d := diffOptions(sl.o, n)
		if len(d.process) > 0 {
			log.Warn("reload: these settings take effect only when sluice restarts (a stream must not resume its position on another server or source mode by itself); the stream keeps the running ones",
				"stream", n.ID, "settings", strings.Join(d.process, ", "))
			n = keepProcessSettings(sl.o, n)
		}
		if len(d.stream) == 0 {
			continue
		}
		changed = true
		log.Info("reload: restarting the stream with its new settings; it checkpoints and resumes from its checkpoint, the other streams go on",
			"stream", n.ID, "settings", strings.Join(d.stream, ", "))
		if err := p.stop(sl); err != nil {
			log.Error("reload: the stream did not stop cleanly; starting it again anyway", append(stream.ErrAttrs(err), "stream", n.ID)...)
		}
		p.start(ctx, n)
	}
	for id, sl := range cur {
		changed = true
		log.Info("reload: stream left the configuration; stopping it (its checkpoint stays in the state file)", "stream", id)
		if err := p.stop(sl); err != nil {
			log.Error("reload: the stream did not stop cleanly", append(stream.ErrAttrs(err), "stream", id)...)
		}
		p.svc.removeStream(id)
	}
	// Keep the configuration's order for status lines and /readyz.
	order := make(map[string]int, len(next))
	for i, n := range next {
		order[n.ID] = i
	}
	p.mu.Lock()
	slices.SortStableFunc(p.slots, func(a, b *slot) int { return order[a.o.ID] - order[b.o.ID] })
	p.mu.Unlock()
	if !changed {
		log.Info("reload: no stream setting changed")
	}
}
