package integration

// Acceptance tests of issue 31's day-2 health: slot and binlog retention
// warnings, and a quiet stream's position kept moving by progress markers.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/verify"
)

// waitHealth polls the state dir's status of stream until cond holds of
// its last health check.
func waitHealth(t *testing.T, dir, stream string, within time.Duration, what string, cond func(*daemon.HealthStatus) bool) *daemon.HealthStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	var last *daemon.HealthStatus
	for {
		all, _ := daemon.ReadStatus(dir)
		for _, s := range all {
			if s.Stream == stream && s.Health != nil {
				last = s.Health
				if cond(s.Health) {
					return s.Health
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s: no health check showed %s within %s; the last: %+v", stream, what, within, last)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

func warned(h *daemon.HealthStatus, s string) bool {
	for _, w := range h.Warnings {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

// TestSlotHealthWarnings: of two logical streams in one daemon, one cannot
// start (its target lacks its table) after creating its slot. The slot
// then has no reader, and the WAL the source writes piles up behind it:
// its health check warns of both (log, sync status, metrics), the
// retained WAL past 85 % of --slot-wal-limit (the shared server sets no
// max_slot_wal_keep_size). The stream that runs has a reader.
func TestSlotHealthWarnings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EnginePostgres)
	for _, s := range []string{`CREATE TABLE a (id bigint PRIMARY KEY, pad text)`, `CREATE TABLE b (id bigint PRIMARY KEY)`} {
		if err := src.exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := dst.exec(ctx, `CREATE TABLE a (id bigint PRIMARY KEY, pad text)`); err != nil {
		t.Fatal(err)
	}
	dropSlotAtCleanup(t, src, "hok", []string{"public.a"})
	dropSlotAtCleanup(t, src, "hstuck", []string{"public.b"})
	const limit = 16 << 20
	dir, addr := t.TempDir(), freePort(t)
	log := newMessages(t)
	opts := func(id, table string) daemon.StreamOptions {
		return daemon.StreamOptions{ID: id, SourceURL: src.url, TargetURL: dst.url, Tables: tableNames(t, []string{table}), StateDir: dir,
			SourceMode: daemon.ModeLogical, FromNow: true, PollInterval: 20 * time.Millisecond, KillBudget: 5 * time.Second,
			MetricsListen: addr, Logger: slog.New(log), HealthInterval: 200 * time.Millisecond, SlotWALLimit: limit, SlotInactiveWarn: time.Second}
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(rctx, []daemon.StreamOptions{opts("hok", "public.a"), opts("hstuck", "public.b")}, nil)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	slot := pglogical.DefaultName("hstuck")
	waitHealth(t, dir, "hstuck", 60*time.Second, "the slot without a reader", func(h *daemon.HealthStatus) bool {
		return h.Slot != nil && h.Slot.Exists && !h.Slot.Active && warned(h, "has had no reader")
	})
	// WAL: 20 MiB of rows in the streamed table of the other stream.
	for i := range 20 {
		if err := src.exec(ctx, fmt.Sprintf(`INSERT INTO a SELECT g, repeat(md5(g::text), 32) FROM generate_series(%d, %d) g`, i*1000, i*1000+999)); err != nil {
			t.Fatal(err)
		}
	}
	h := waitHealth(t, dir, "hstuck", 60*time.Second, "retained WAL past 85%", func(h *daemon.HealthStatus) bool {
		return h.Slot != nil && h.Slot.Percent >= 85 && warned(h, "retains")
	})
	if h.Slot.Limit != "--slot-wal-limit" || h.Slot.LimitBytes != limit {
		t.Fatalf("slot health %+v: want the limit of --slot-wal-limit (the server sets no max_slot_wal_keep_size)", h.Slot)
	}
	if !log.logged("replication slot " + slot) {
		t.Fatalf("no warning of slot %s was logged", slot)
	}
	m := scrape(t, addr)
	for name, want := range map[string]float64{
		`sluice_health_warning{check="slot_wal",stream="hstuck"}`:      1,
		`sluice_health_warning{check="slot_inactive",stream="hstuck"}`: 1,
		`sluice_slot_active{stream="hstuck"}`:                          0,
		`sluice_slot_active{stream="hok"}`:                             1,
		`sluice_health_warning{check="slot_inactive",stream="hok"}`:    0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (exported: %v), want %v", name, got, ok, want)
		}
	}
	if got := m[`sluice_slot_retained_wal_bytes{stream="hstuck"}`]; got < 0.85*limit {
		t.Errorf("sluice_slot_retained_wal_bytes of hstuck = %v, want past 85%% of %d", got, limit)
	}
	out, code := runPreflight(t, "sync", "status", "--state-dir", dir, "--stream-id", "hstuck")
	if !strings.Contains(out, "WARNING: replication slot "+slot) {
		t.Errorf("sync status (exit %d) shows no warning of the slot:\n%s", code, out)
	}
}

// TestBinlogPurgeWarning: with binlogs expiring after 30 days, a binlog
// stream's checkpoint needs its binlog for about 30 days from now; a
// --binlog-purge-warn of 31 days warns of it (log, sync status).
func TestBinlogPurgeWarning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, daemon.EngineMySQL)
	for _, e := range []*endpoint{src, dst} {
		if err := e.exec(ctx, `CREATE TABLE t (id bigint PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
	}
	// Server-wide, but harmless to the other tests: nothing on a
	// throwaway server is 30 days old.
	var was int64
	if err := src.my.QueryRowContext(ctx, `SELECT @@GLOBAL.binlog_expire_logs_seconds`).Scan(&was); err != nil {
		t.Fatal(err)
	}
	if err := src.exec(ctx, `SET GLOBAL binlog_expire_logs_seconds = 2592000`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = src.exec(context.Background(), fmt.Sprintf(`SET GLOBAL binlog_expire_logs_seconds = %d`, was))
	})
	log := newMessages(t)
	o := logOptions(t, "hbin", src, dst.url, []string{"t"})
	o.Logger, o.HealthInterval, o.BinlogPurgeWarn = slog.New(log), 200*time.Millisecond, 31*24*time.Hour
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)
	h := waitHealth(t, o.StateDir, "hbin", 30*time.Second, "the purge warning", func(h *daemon.HealthStatus) bool {
		return h.Binlog != nil && warned(h, "may be purged in about")
	})
	if b := h.Binlog; b.Needs == "" || b.FilesBefore < 0 || b.ExpireSeconds != 2592000 || b.PurgeInSeconds < 29*86400 || b.PurgeInSeconds > 30*86400 {
		t.Fatalf("binlog health %+v: want the binlog being written, 30 days of expiry, about 30 days left", b)
	}
	if !log.logged("may be purged in about") {
		t.Fatal("the purge warning was not logged")
	}
}

// TestQuietSourceAdvances: while only a table the stream does not carry is
// written, the stream's progress markers keep its position moving with
// the source's: a PostgreSQL slot's confirmed_flush_lsn passes the WAL
// those writes made, and a binlog stream's checkpoint passes their GTIDs,
// so a quiet stream never keeps the source from dropping its log.
func TestQuietSourceAdvances(t *testing.T) {
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			t.Parallel()
			quietSourceAdvances(t, eng)
		})
	}
}

func quietSourceAdvances(t *testing.T, eng daemon.Engine) {
	ctx := context.Background()
	src, dst := newEndpoint(t, eng), newEndpoint(t, eng)
	for _, s := range []string{`CREATE TABLE streamed (id bigint PRIMARY KEY)`, `CREATE TABLE other (id bigint PRIMARY KEY, pad varchar(200))`} {
		if err := src.exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := dst.exec(ctx, `CREATE TABLE streamed (id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	tables := []string{"public.streamed"}
	if eng == daemon.EngineMySQL {
		tables = []string{"streamed"}
	}
	id := "quiet" + string(eng)[:2]
	dropSlotAtCleanup(t, src, id, tables)
	o := logOptions(t, id, src, dst.url, tables)
	o.Logger, o.ProgressInterval = quietLogger(t), time.Second
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)

	// The application writes only the other table, throughout.
	wctx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	go func() {
		for i := 0; wctx.Err() == nil; i++ {
			_ = src.exec(wctx, fmt.Sprintf(`INSERT INTO other VALUES (%d, '%s')`, i, strings.Repeat("x", 100)))
			time.Sleep(10 * time.Millisecond) // the writer's pace, not a wait for replication
		}
	}()
	tgt, err := verify.Open(ctx, "--target", dst.url)
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	// Twice: the position keeps moving, not once.
	for range 2 {
		if eng == daemon.EnginePostgres {
			var now string
			if err := src.pg.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&now); err != nil {
				t.Fatal(err)
			}
			want, err := pglogrepl.ParseLSN(now)
			if err != nil {
				t.Fatal(err)
			}
			waitSlotConfirmed(t, src, pglogical.DefaultName(id), want, 30*time.Second)
			continue
		}
		var gtid string
		if err := src.my.QueryRowContext(ctx, `SELECT @@GLOBAL.gtid_binlog_pos`).Scan(&gtid); err != nil {
			t.Fatal(err)
		}
		waitCheckpointCovers(t, tgt, id, sluice.Position{Kind: "binlog", Token: "mariadb:" + gtid}, 30*time.Second)
	}
	if st := run.current.Load().Stats(); st.Applied != 0 {
		t.Fatalf("the stream applied %d changes; only an unstreamed table was written", st.Applied)
	}
}

// waitSlotConfirmed polls until the slot's confirmed_flush_lsn is at or
// past want.
func waitSlotConfirmed(t *testing.T, e *endpoint, slot string, want pglogrepl.LSN, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var confirmed string
		if err := e.pg.QueryRow(context.Background(), `SELECT coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed); err != nil {
			t.Fatal(err)
		}
		got, err := pglogrepl.ParseLSN(confirmed)
		if err != nil {
			t.Fatal(err)
		}
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s confirmed %s after %s, want at least %s: the quiet stream holds the source's WAL", slot, got, within, want)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

// waitCheckpointCovers polls the stream's checkpoint on the target until
// it covers source position want.
func waitCheckpointCovers(t *testing.T, tgt verify.Side, stream string, want sluice.Position, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		snap, err := tgt.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cp, ok, err := snap.Checkpoint(ctx, stream)
		snap.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if covered, err := verify.Covers(cp.Position, want); err == nil && covered {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s's checkpoint is %s after %s, want it past %s: the quiet stream holds the source's binlog", stream, cp.Position, within, want)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}
