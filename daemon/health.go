package daemon

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/metrics"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/pglogical"
)

// Health defaults (see StreamOptions).
const (
	defaultHealthInterval   = 30 * time.Second
	defaultSlotWALLimit     = 1 << 30
	defaultSlotInactiveWarn = 10 * time.Minute
	defaultBinlogPurgeWarn  = 24 * time.Hour
)

// Slot warning levels, in percent of the retained-WAL limit.
const (
	slotWarnPercent  = 70
	slotAlarmPercent = 85
)

// HealthStatus is a stream's last health check: what its source keeps for
// it, and the warnings that follow. The daemon writes it to
// health/<stream>.json in the state dir after every check; `sync status`
// shows it.
type HealthStatus struct {
	Stream   string        `json:"stream"`
	Checked  time.Time     `json:"checked"`
	Slot     *SlotHealth   `json:"slot,omitempty"`
	Binlog   *BinlogHealth `json:"binlog,omitempty"`
	Warnings []string      `json:"warnings,omitempty"`
	// Error is why the last check could not be made.
	Error string `json:"error,omitempty"`
}

// SlotHealth is a logical-replication stream's slot.
type SlotHealth struct {
	Slot   string `json:"slot"`
	Exists bool   `json:"exists"`
	// Active: the slot has a reader (a session holds it, or the stream
	// applies in this process).
	Active bool `json:"active"`
	// InactiveSeconds is how long the slot has had no reader, as this
	// process saw it (its own stream applying counts as a reader).
	InactiveSeconds float64 `json:"inactive_seconds"`
	RetainedBytes   int64   `json:"retained_bytes"`
	// LimitBytes is what Percent is of, and Limit where it comes from:
	// max_slot_wal_keep_size, or --slot-wal-limit on a server without one.
	LimitBytes int64   `json:"limit_bytes"`
	Limit      string  `json:"limit"`
	Percent    float64 `json:"percent"`
	WALStatus  string  `json:"wal_status,omitempty"`
}

// BinlogHealth is the binlog a binlog stream's checkpoint needs.
type BinlogHealth struct {
	Needs string `json:"needs,omitempty"`
	// FilesBefore counts the source's binlogs older than Needs (-1:
	// unknown), Files all of them.
	FilesBefore int `json:"files_before"`
	Files       int `json:"files"`
	// ExpireSeconds is the server's binlog expiry (0: never), Setting the
	// variable that sets it.
	ExpireSeconds int64  `json:"expire_seconds"`
	Setting       string `json:"setting"`
	// PurgeInSeconds estimates when expiry may purge Needs: the expiry
	// counted from the stream's last checkpoint (Checkpoint), when the
	// binlog it needs was still being written, or after.
	PurgeInSeconds float64   `json:"purge_in_seconds,omitempty"`
	Checkpoint     time.Time `json:"checkpoint"`
}

// healthWatch checks, every HealthInterval, what a stream's source keeps
// for it, whatever the stream's state (copying, failed and waiting to
// restart, applying): a slot with no reader or retaining WAL towards its
// limit, a binlog close to expiry. Each warning is logged when it appears
// and when it worsens, exported as sluice_health_warning, and shown by
// `sync status`.
type healthWatch struct {
	o     StreamOptions
	log   *slog.Logger
	sl    *slot
	store *checkpoint.Store
	dir   string

	pg *pgx.Conn
	my *sql.DB
	// inactiveSince is when the slot was first seen without a reader.
	inactiveSince time.Time
	// logged is the warning last logged of each check.
	logged map[string]string

	mu   sync.Mutex
	last HealthStatus
	fig  metrics.Health
	ok   bool
}

// watchHealth runs a stream's health checks until ctx ends.
func (p *process) watchHealth(ctx context.Context, sl *slot) {
	o := sl.o
	eng, err := endpoint.EngineOf(o.SourceURL)
	if err != nil {
		return
	}
	rec, _, _ := p.store.Get(o.ID)
	mode, err := endpoint.ResolveMode(eng, o.SourceMode, rec.Position)
	if err != nil || mode == ModeTrigger {
		return // a trigger stream's changelog is its own table: nothing expires
	}
	w := &healthWatch{o: o, log: o.Logger, sl: sl, store: p.store, dir: p.stateDir, logged: map[string]string{}}
	defer w.close()
	if p.svc.metrics != nil {
		p.svc.metrics.AddHealth(o.ID, w.figures)
		defer p.svc.metrics.RemoveHealth(o.ID)
	}
	every := cmp.Or(o.HealthInterval, defaultHealthInterval)
	for {
		w.check(ctx, mode)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func (w *healthWatch) figures() (metrics.Health, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fig, w.ok
}

func (w *healthWatch) close() {
	if w.pg != nil {
		w.pg.Close(context.Background())
	}
	if w.my != nil {
		w.my.Close()
	}
	// A stream that left the process has no current health.
	_ = os.Remove(healthPath(w.dir, w.o.ID))
}

func healthPath(dir, stream string) string { return filepath.Join(dir, "health", stream+".json") }

// check runs one check and publishes it.
func (w *healthWatch) check(ctx context.Context, mode string) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hs := HealthStatus{Stream: w.o.ID, Checked: time.Now().UTC()}
	var fig metrics.Health
	var err error
	switch mode {
	case ModeLogical:
		err = w.checkSlot(cctx, &hs, &fig)
	case ModeBinlog:
		err = w.checkBinlog(cctx, &hs, &fig)
	}
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		hs.Error = redactErr(w.o, err)
		w.log.Debug("health check failed", "stream", w.o.ID, "err", hs.Error)
	}
	w.mu.Lock()
	w.last, w.fig, w.ok = hs, fig, err == nil
	w.mu.Unlock()
	if err := writeHealthFile(w.dir, hs); err != nil {
		w.log.Warn("write health file", "stream", w.o.ID, "err", err)
	}
}

// warn logs a check's warning when it appears or changes; an empty msg
// clears it.
func (w *healthWatch) warn(check, level, msg string) {
	prev, had := w.logged[check]
	switch {
	case msg == "" && had:
		delete(w.logged, check)
		w.log.Info("health: warning cleared", "stream", w.o.ID, "check", check)
	case msg != "" && prev != level:
		w.logged[check] = level
		w.log.Warn(msg, "stream", w.o.ID, "check", check)
	}
}

func (w *healthWatch) checkSlot(ctx context.Context, hs *HealthStatus, fig *metrics.Health) error {
	if w.pg == nil || w.pg.IsClosed() {
		conn, err := endpoint.ConnectPostgres(ctx, w.o.SourceURL)
		if err != nil {
			return err
		}
		w.pg = conn
	}
	slot := pglogical.DefaultName(w.o.ID)
	st, err := pglogical.ReadSlotState(ctx, w.pg, slot)
	if err != nil {
		w.pg.Close(context.WithoutCancel(ctx))
		w.pg = nil
		return err
	}
	h := &SlotHealth{Slot: slot, Exists: st.Exists, Active: st.Active, RetainedBytes: st.RetainedBytes, WALStatus: st.WALStatus}
	hs.Slot = h
	if !st.Exists {
		w.inactiveSince = time.Time{}
		w.warn("slot_wal", "", "")
		w.warn("slot_inactive", "", "")
		return nil
	}
	_, applying := w.sl.running()
	now := time.Now()
	// A stream applying in this process reads its slot, also while a
	// catch-up reads a copy of it.
	h.Active = st.Active || applying
	if h.Active {
		w.inactiveSince = time.Time{}
	} else if w.inactiveSince.IsZero() {
		w.inactiveSince = now
	}
	if !w.inactiveSince.IsZero() {
		h.InactiveSeconds = now.Sub(w.inactiveSince).Seconds()
	}
	h.LimitBytes, h.Limit = st.MaxKeepBytes, "max_slot_wal_keep_size"
	if st.MaxKeepBytes < 0 {
		h.LimitBytes, h.Limit = cmp.Or(w.o.SlotWALLimit, defaultSlotWALLimit), "--slot-wal-limit"
	}
	if h.LimitBytes > 0 {
		h.Percent = 100 * float64(h.RetainedBytes) / float64(h.LimitBytes)
	}
	where := endpoint.MaskURL(w.o.SourceURL)
	walLevel, walMsg := slotWALWarning(h, where)
	idleMsg := slotIdleWarning(h, where, w.o.ID, cmp.Or(w.o.SlotInactiveWarn, defaultSlotInactiveWarn))
	w.warn("slot_wal", walLevel, walMsg)
	idleLevel := ""
	if idleMsg != "" {
		idleLevel = "idle"
	}
	w.warn("slot_inactive", idleLevel, idleMsg)
	for _, m := range []string{walMsg, idleMsg} {
		if m != "" {
			hs.Warnings = append(hs.Warnings, m)
		}
	}
	*fig = metrics.Health{Slot: true, SlotActive: h.Active, SlotRetained: float64(h.RetainedBytes), SlotLimit: float64(h.LimitBytes),
		SlotInactive: h.InactiveSeconds, SlotWAL: walMsg != "", SlotIdle: idleMsg != ""}
	return nil
}

// slotWALWarning is the retained-WAL warning of a slot, with its level:
// at 70 % and at 85 % of the limit, and whenever the server says the slot
// is past max_wal_size (unreserved).
func slotWALWarning(h *SlotHealth, where string) (level, msg string) {
	pct := h.Percent
	switch {
	case h.WALStatus == "unreserved" || pct >= slotAlarmPercent:
		level = fmt.Sprint(slotAlarmPercent)
	case pct >= slotWarnPercent:
		level = fmt.Sprint(slotWarnPercent)
	default:
		return "", ""
	}
	fate := "past max_slot_wal_keep_size the server invalidates the slot, and the stream's changes are lost (exit 7)"
	if h.Limit != "max_slot_wal_keep_size" {
		fate = "the server sets no max_slot_wal_keep_size, so the slot keeps WAL until the source's disk fills"
	}
	msg = fmt.Sprintf("replication slot %s on %s retains %s of WAL, %.0f%% of %s (%s, warnings at %d%% and %d%%): %s; the stream is behind or not reading (see sync status)",
		h.Slot, where, byteSize(h.RetainedBytes), pct, h.Limit, byteSize(h.LimitBytes), slotWarnPercent, slotAlarmPercent, fate)
	if h.WALStatus == "unreserved" {
		msg += "; the server already calls it unreserved (past max_wal_size): its WAL goes at the next checkpoint unless the stream reads it"
	}
	return level, msg
}

// slotIdleWarning is the warning of a slot without a reader for longer
// than limit.
func slotIdleWarning(h *SlotHealth, where, stream string, limit time.Duration) string {
	idle := time.Duration(h.InactiveSeconds * float64(time.Second))
	if h.Active || idle < limit {
		return ""
	}
	return fmt.Sprintf("replication slot %s on %s has had no reader for %s (--slot-inactive-warn %s): it keeps every WAL segment written meanwhile; start stream %s again, or drop the slot if the stream is retired (sluice source uninstall --source-mode logical --stream-id %s)",
		h.Slot, where, idle.Round(time.Second), limit, stream, stream)
}

func (w *healthWatch) checkBinlog(ctx context.Context, hs *HealthStatus, fig *metrics.Health) error {
	rec, found, err := w.store.Get(w.o.ID)
	if err != nil {
		return err
	}
	if !found || rec.Position.IsZero() {
		return nil // the stream has no position yet: nothing to keep
	}
	if w.my == nil {
		if w.my, err = endpoint.ConnectMySQL(w.o.SourceURL); err != nil {
			return err
		}
	}
	ret, err := binlog.ReadRetention(ctx, w.my, rec.Position)
	if err != nil {
		return err
	}
	h := &BinlogHealth{Needs: ret.Needs, FilesBefore: ret.NeedsIndex, Files: len(ret.Logs), ExpireSeconds: ret.ExpireSeconds, Setting: ret.Setting, Checkpoint: rec.Time}
	if h.ExpireSeconds > 0 {
		h.PurgeInSeconds = time.Until(rec.Time.Add(time.Duration(h.ExpireSeconds) * time.Second)).Seconds()
	}
	hs.Binlog = h
	msg := binlogWarning(h, rec.Position, endpoint.MaskURL(w.o.SourceURL), cmp.Or(w.o.BinlogPurgeWarn, defaultBinlogPurgeWarn), w.o.BinlogPurgeWarnFiles)
	level := ""
	if msg != "" {
		level = "purge"
		hs.Warnings = append(hs.Warnings, msg)
	}
	w.warn("binlog_purge", level, msg)
	*fig = metrics.Health{Binlog: true, BinlogPurgeIn: -1, BinlogFilesBefore: float64(h.FilesBefore), PurgeSoon: msg != ""}
	if h.ExpireSeconds > 0 {
		fig.BinlogPurgeIn = max(0, h.PurgeInSeconds)
	}
	return nil
}

// binlogWarning is the warning of a binlog stream whose needed binlog may
// be purged within warnIn (by expiry, counted from its last checkpoint),
// or is among the warnFiles oldest (and not the binlog being written).
func binlogWarning(h *BinlogHealth, pos sluice.Position, where string, warnIn time.Duration, warnFiles int) string {
	needs := "the binlog"
	if h.Needs != "" {
		needs = "binlog " + h.Needs
	}
	fate := "if it goes before the stream has read past it, the stream's changes are lost (exit 7) and its tables need a fresh copy; keep the stream running and caught up, or keep binlogs longer"
	left := time.Duration(h.PurgeInSeconds * float64(time.Second))
	switch {
	case h.ExpireSeconds > 0 && left < warnIn:
		return fmt.Sprintf("%s, which stream position %s needs on %s, may be purged in about %s (%s %d, counted from the stream's last checkpoint at %s; --binlog-purge-warn %s): %s",
			needs, pos, where, max(0, left).Round(time.Second), h.Setting, h.ExpireSeconds, h.Checkpoint.Format(time.RFC3339), warnIn, fate)
	case warnFiles > 0 && h.FilesBefore >= 0 && h.FilesBefore < warnFiles && h.FilesBefore < h.Files-1:
		return fmt.Sprintf("%s, which stream position %s needs on %s, has only %d older binlogs before it of the source's %d (--binlog-purge-warn-files %d): expiry and PURGE BINARY LOGS remove the oldest first; %s",
			needs, pos, where, h.FilesBefore, h.Files, warnFiles, fate)
	}
	return ""
}

func writeHealthFile(dir string, hs HealthStatus) error {
	return writeJSONFile(healthPath(dir, hs.Stream), hs)
}

// readHealthFile returns a stream's last health check, if the state dir
// holds one.
func readHealthFile(dir, stream string) (*HealthStatus, bool) {
	b, err := os.ReadFile(healthPath(dir, stream))
	if err != nil {
		return nil, false
	}
	var hs HealthStatus
	if json.Unmarshal(b, &hs) != nil {
		return nil, false
	}
	return &hs, true
}
