package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/urfave/cli/v2"
)

func env(name string) []string { return []string{"SLUICE_" + name} }

func stateDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "state-dir", Value: "./sluice-state", EnvVars: env("STATE_DIR"), Usage: "directory of the state file (checkpoints) and the lock that keeps a second sluice out"}
}

func streamIDFlag() cli.Flag {
	return &cli.StringFlag{Name: "stream-id", Value: "default", EnvVars: env("STREAM_ID"), Usage: "name of the stream: its checkpoint record in the state file and on the target"}
}

func syncCommand() *cli.Command {
	return &cli.Command{
		Name:  "sync",
		Usage: "stream changes from a source to a target",
		Subcommands: []*cli.Command{
			{
				Name:   "start",
				Usage:  "stream changes until stopped (SIGINT/SIGTERM finish the batch in flight, checkpoint and exit 0)",
				Flags:  append(syncStartFlags(), preflightFlags()...),
				Action: syncStart,
			},
			{
				Name:  "status",
				Usage: "show each stream's position, changes applied, lag and last error (works while sluice runs)",
				Flags: []cli.Flag{
					stateDirFlag(),
					&cli.StringFlag{Name: "stream-id", EnvVars: env("STREAM_ID"), Usage: "show only this stream"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
					&cli.DurationFlag{Name: "max-lag", EnvVars: env("MAX_LAG"), Usage: "also exit 1 when a stream's lag is over this, or it does not run (its lag then unknown): a freshness check for monitors; 0: off"},
				},
				Action: syncStatus,
			},
		},
	}
}

// syncStartFlags are the flags of `sync start` and `config check`: every
// one is also a config file key (config.Keys), and --config names the file.
func syncStartFlags() []cli.Flag {
	return []cli.Flag{
		configFlag(),
		&cli.StringFlag{Name: "source", EnvVars: env("SOURCE"), Usage: "source database: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or user:pass@tcp(host:3306)/db"},
		&cli.StringFlag{Name: "target", EnvVars: env("TARGET"), Usage: "target database: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or user:pass@tcp(host:3306)/db"},
		&cli.StringSliceFlag{Name: "tables", EnvVars: env("TABLES"), Usage: "tables to replicate, comma-separated: schema.table or table (PostgreSQL: schema public; MySQL: the connection's database)"},
		&cli.StringFlag{Name: "source-password-file", EnvVars: env("SOURCE_PASSWORD_FILE"), Usage: "file holding the source's password (replaces any in --source; see also $SLUICE_SOURCE_PASSWORD and systemd credentials)"},
		&cli.StringFlag{Name: "target-password-file", EnvVars: env("TARGET_PASSWORD_FILE"), Usage: "file holding the target's password (replaces any in --target; see also $SLUICE_TARGET_PASSWORD and systemd credentials)"},
		streamIDFlag(),
		stateDirFlag(),
		&cli.StringFlag{Name: "source-mode", Value: "auto", EnvVars: env("SOURCE_MODE"), Usage: "how to read the source: logical (PostgreSQL logical replication), binlog (MySQL/MariaDB binary log), trigger (changelog table filled by triggers, where replication is not allowed), or auto: the log-based reader (or the one that wrote the stream's checkpoint)"},
		&cli.BoolFlag{Name: "from-now", EnvVars: env("FROM_NOW"), Usage: "start a stream that has no checkpoint at the source's current position, without the initial copy: the target must already hold the source's rows (loaded from a consistent dump)"},
		&cli.StringFlag{Name: "initial-copy", Value: "auto", EnvVars: env("INITIAL_COPY"), Usage: "copy the tables' existing rows before streaming, on a stream with no checkpoint: auto (unless --from-now), on, or off (the target already holds them)"},
		&cli.StringFlag{Name: "create-tables", Value: "on", EnvVars: env("CREATE_TABLES"), Usage: "on a stream that copies, create the target tables that are missing from the source's definitions (sluice schema plan prints the DDL): on or off"},
		&cli.StringFlag{Name: "schema-changes", Value: "follow", EnvVars: env("SCHEMA_CHANGES"), Usage: "what a streamed table's DDL on the source does (logical and binlog sources): follow (apply it to the target at its place in the stream; ambiguous or lossy changes stop the stream) or stop (stop at every one, with the statements to run on the target)"},
		&cli.IntFlag{Name: "copy-workers", Value: 4, EnvVars: env("COPY_WORKERS"), Usage: "initial copy: chunks copied at once, each over its own source and target connection"},
		&cli.IntFlag{Name: "copy-chunk-rows", Value: 50000, EnvVars: env("COPY_CHUNK_ROWS"), Usage: "initial copy: rows per chunk; each chunk is one target transaction, with its progress record"},
		&cli.IntFlag{Name: "apply-batch-size", Value: 1000, EnvVars: env("APPLY_BATCH_SIZE"), Usage: "changes per target transaction: the first size with auto-tuning, the fixed size with --no-auto-tune"},
		&cli.BoolFlag{Name: "no-auto-tune", EnvVars: env("NO_AUTO_TUNE"), Usage: "pin the batch size to --apply-batch-size; the cost model is still measured and reported"},
		&cli.StringFlag{Name: "apply-mode", Value: "pipelined", EnvVars: env("APPLY_MODE"), Usage: "pipelined: a batch is one transaction in one round trip; per-row: one statement per round trip, as naive appliers do (for comparison)"},
		&cli.StringFlag{Name: "multi-statements", Value: "auto", EnvVars: env("MULTI_STATEMENTS"), Usage: "MySQL targets: send each batch as one multi-statement packet (auto detects whether the server allows it; on; off)"},
		&cli.BoolFlag{Name: "disable-fk-checks", EnvVars: env("DISABLE_FK_CHECKS"), Usage: "no effect, kept so that older configurations start: a MySQL target's applier session always runs with foreign_key_checks=0"},
		&cli.BoolFlag{Name: "allow-collation-merge", EnvVars: env("ALLOW_COLLATION_MERGE"), Usage: "accept target key columns whose collation treats as equal values the source keeps apart (case, accents, trailing spaces): such rows become one on the target; only when the source never holds two of them"},
		&cli.StringFlag{Name: "controller", Value: "model", EnvVars: env("CONTROLLER"), Usage: "batch-size controller: model (sized from the fitted cost of a batch, under the kill budget) or aimd (naive additive increase, halve on a slow or killed batch; for comparison)"},
		&cli.IntFlag{Name: "min-lanes", Value: 1, EnvVars: env("MIN_LANES"), Usage: "fewest lanes (concurrent target connections) applying changes"},
		&cli.BoolFlag{Name: "no-overlap", EnvVars: env("NO_OVERLAP"), Usage: "send a lane's next transaction only once the one in flight committed, over one target connection per lane (by default a lane sends it on a second connection while one is in flight, and the target never waits a round trip between them)"},
		&cli.IntFlag{Name: "max-lanes", Value: 16, EnvVars: env("MAX_LANES"), Usage: "most lanes: the count grows while total throughput grows and backs off when latency rises without it; 1 keeps one ordering of the changes (its next transaction still goes out on a second connection unless --no-overlap)"},
		&cli.Float64Flag{Name: "stall-ratio", Value: 0.1, EnvVars: env("STALL_RATIO"), Usage: "a stall is durable progress below this fraction of the source's change rate (or none) for --stall-window"},
		&cli.DurationFlag{Name: "stall-window", Value: 2 * time.Minute, EnvVars: env("STALL_WINDOW"), Usage: "how long progress must stay too low before sluice reports a stall (as an error log line, in sync status)"},
		&cli.BoolFlag{Name: "exit-on-stall", EnvVars: env("EXIT_ON_STALL"), Usage: "exit non-zero when the stream stalls, so a supervisor notices"},
		&cli.DurationFlag{Name: "kill-budget", EnvVars: env("KILL_BUDGET"), DefaultText: "a quarter of --target-tx-timeout", Usage: "longest a target transaction may be predicted to take; keep it well under the target's transaction kill timeout"},
		&cli.DurationFlag{Name: "target-tx-timeout", EnvVars: env("TARGET_TX_TIMEOUT"), DefaultText: "detected", Usage: "how long the target lets a transaction run before killing it; detected at start: 20s for Vitess/PlanetScale, the target's own limit where one is set (PostgreSQL transaction_timeout, statement_timeout, idle_in_transaction_session_timeout; MariaDB max_statement_time, idle_transaction_timeout), else 60s"},
		&cli.Int64Flag{Name: "max-batch-bytes", Value: 16 << 20, EnvVars: env("MAX_BATCH_BYTES"), Usage: "most bytes of changes one target transaction carries, whatever the batch size (0: only --max-queue-bytes bounds it)"},
		&cli.DurationFlag{Name: "poll-interval", Value: 200 * time.Millisecond, EnvVars: env("POLL_INTERVAL"), Usage: "how long the reader waits for new changes before it lets the applier flush (trigger mode: how often it polls the changelog)"},
		&cli.Int64Flag{Name: "max-queue-bytes", Value: 32 << 20, EnvVars: env("MAX_QUEUE_BYTES"), Usage: "memory for changes read but not yet applied, wherever they are held (the process's bound follows from it: see the memory formula in docs/operating.md); when full the reader waits"},
		&cli.DurationFlag{Name: "shutdown-timeout", Value: 30 * time.Second, EnvVars: env("SHUTDOWN_TIMEOUT"), Usage: "on SIGINT/SIGTERM, how long the batch in flight may take to commit before it is rolled back"},
		&cli.DurationFlag{Name: "transient-retry-for", Value: 5 * time.Minute, EnvVars: env("TRANSIENT_RETRY_FOR"), Usage: "how long a stream stopped by a passing state of its target or source (starting up or shutting down, read-only, a connection lost after it ran) is started again in the process, with a warning each time, before sluice exits with the error (0: exit at once)"},
		&cli.StringFlag{Name: "metrics-listen", EnvVars: env("METRICS_LISTEN"), Usage: "serve Prometheus /metrics, /healthz and /readyz over HTTP at this address (host:port, e.g. 127.0.0.1:9187); off when empty"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: env("LOG_LEVEL"), Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "auto", EnvVars: env("LOG_FORMAT"), Usage: "text, json, or auto (text with a live progress line on a terminal, json otherwise)"},
		&cli.DurationFlag{Name: "health-interval", Value: 30 * time.Second, EnvVars: env("HEALTH_INTERVAL"), Usage: "how often to check what the source keeps for the stream (its replication slot, the binlog its position needs)"},
		&cli.Int64Flag{Name: "slot-wal-limit", Value: 1 << 30, EnvVars: env("SLOT_WAL_LIMIT"), Usage: "logical: the retained WAL (bytes) the slot warnings at 70% and 85% are fractions of, where the source sets no max_slot_wal_keep_size"},
		&cli.DurationFlag{Name: "slot-inactive-warn", Value: 10 * time.Minute, EnvVars: env("SLOT_INACTIVE_WARN"), Usage: "logical: warn when the stream's replication slot has had no reader this long"},
		&cli.DurationFlag{Name: "binlog-purge-warn", Value: 24 * time.Hour, EnvVars: env("BINLOG_PURGE_WARN"), Usage: "binlog: warn when binlog_expire_logs_seconds (or expire_logs_days) may purge the binlog the stream's checkpoint needs within this time"},
		&cli.IntFlag{Name: "binlog-purge-warn-files", EnvVars: env("BINLOG_PURGE_WARN_FILES"), Usage: "binlog: warn when fewer than this many older binlogs are left before the one the stream's checkpoint needs (0: no warning by count)"},
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newLogger(w *os.File, level, format string) (*slog.Logger, bool, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, false, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	tty := isTerminal(w)
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), false, nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), false, nil
	case "auto", "":
		if tty {
			return slog.New(slog.NewTextHandler(w, opts)), true, nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), false, nil
	}
	return nil, false, fmt.Errorf("--log-format %q: want text, json or auto", format)
}

func syncStart(c *cli.Context) error {
	if c.Bool("check") {
		return preflight(c)
	}
	streams, err := resolveStreams(c)
	if err != nil {
		return err
	}
	log, tty, err := newLogger(os.Stderr, streams[0].LogLevel, streams[0].LogFormat)
	if err != nil {
		return usageErr(err)
	}
	if isTerminal(os.Stderr) {
		// The error that ends sluice is printed once, by main.
		log = slog.New(dropFinal{log.Handler()})
	}
	secrets := &secretSet{}
	log = slog.New(redactHandler{log.Handler(), secrets})
	log.Info("sluice starting", "version", version, "commit", commit, "pid", os.Getpid(), "streams", len(streams))
	var progress io.Writer
	if tty && len(streams) == 1 {
		progress = os.Stderr
	}
	opts, err := daemonOptions(streams, log, progress, secrets)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reloads := make(chan []daemon.StreamOptions)
	go reloadOnHangup(c, hup, reloads, log, streams[0], progress, secrets)
	limitMemory(opts, log)
	return daemon.Run(c.Context, opts, reloads)
}

// limitMemory sets the Go runtime's soft memory limit to the memory
// formula's bound (daemon.MemoryBound), unless GOMEMLIMIT sets one: the
// collector then runs before the heap's garbage takes the process past
// what its settings allow, rather than at twice the live heap (GOGC),
// which is what made the resident size follow a large transaction. The
// limit is the streams' at start; a reload keeps it.
func limitMemory(opts []daemon.StreamOptions, log *slog.Logger) {
	bound := daemon.MemoryBound(opts)
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Debug("memory", "bound_bytes", bound, "go_memory_limit", "GOMEMLIMIT")
		return
	}
	debug.SetMemoryLimit(bound)
	log.Debug("memory", "bound_bytes", bound, "go_memory_limit", bound)
}

// daemonOptions turns effective settings into the daemon's stream options,
// reading the password files and credentials.
func daemonOptions(streams []config.Stream, log *slog.Logger, progress io.Writer, secrets *secretSet) ([]daemon.StreamOptions, error) {
	opts := make([]daemon.StreamOptions, len(streams))
	for i, s := range streams {
		srcFrom, tgtFrom, err := s.ApplySecrets()
		if err != nil {
			return nil, usageErr(err)
		}
		secrets.addConn(s.Source, s.Target)
		if srcFrom != "" || tgtFrom != "" {
			log.Info("passwords", "stream", s.StreamID, "source_password", orURL(srcFrom), "target_password", orURL(tgtFrom))
		}
		if opts[i], err = streamOptions(s); err != nil {
			return nil, err
		}
		opts[i].Logger, opts[i].Progress = log, progress
	}
	return opts, nil
}

// reloadOnHangup reads the configuration again on every SIGHUP (password
// files and credentials included) and hands the new stream list to the
// daemon. A file that does not parse or validate changes nothing.
func reloadOnHangup(c *cli.Context, hup <-chan os.Signal, reloads chan<- []daemon.StreamOptions, log *slog.Logger, first config.Stream, progress io.Writer, secrets *secretSet) {
	for {
		select {
		case <-c.Context.Done():
			return
		case <-hup:
		}
		path := c.String("config")
		if path == "" {
			log.Warn("SIGHUP: no --config file to read again: flags and environment variables change only with a restart")
			continue
		}
		log.Info("SIGHUP: reading the configuration again", "config", path)
		streams, err := resolveStreams(c)
		if err != nil {
			log.Error("SIGHUP: configuration not reloaded; the running streams go on unchanged", "config", path, "err", err.Error())
			continue
		}
		if streams[0].LogLevel != first.LogLevel || streams[0].LogFormat != first.LogFormat {
			log.Warn("SIGHUP: log_level and log_format take effect only when sluice restarts")
		}
		if len(streams) > 1 {
			progress = nil
		}
		opts, err := daemonOptions(streams, log, progress, secrets)
		if err != nil {
			log.Error("SIGHUP: configuration not reloaded; the running streams go on unchanged", "config", path, "err", err.Error())
			continue
		}
		select {
		case reloads <- opts:
		case <-c.Context.Done():
			return
		}
	}
}

func orURL(from string) string {
	if from == "" {
		return "from the connection string"
	}
	return "from " + from
}

func streamOptions(s config.Stream) (daemon.StreamOptions, error) {
	tables, err := endpoint.ParseTables(s.Tables)
	if err != nil {
		return daemon.StreamOptions{}, usageErr(fmt.Errorf("stream %s: %w", s.StreamID, err))
	}
	o := daemon.StreamOptions{
		ID:                  s.StreamID,
		SourceURL:           s.Source,
		TargetURL:           s.Target,
		Tables:              tables,
		StateDir:            s.StateDir,
		SourceMode:          s.SourceMode,
		FromNow:             s.FromNow,
		InitialCopy:         s.InitialCopy,
		CreateTables:        s.CreateTables,
		SchemaChanges:       s.SchemaChanges,
		CopyWorkers:         s.CopyWorkers,
		CopyChunkRows:       s.CopyChunkRows,
		ApplyMode:           s.ApplyMode,
		MultiStatements:     s.MultiStatements,
		DisableFKChecks:     s.DisableFKChecks,
		AllowCollationMerge: s.AllowCollationMerge,
		BatchSize:           s.ApplyBatchSize,
		NoAutoTune:          s.NoAutoTune,
		KillBudget:          s.KillBudget,
		TargetTxTimeout:     s.TargetTxTimeout,
		MaxBatchBytes:       s.MaxBatchBytes,
		Controller:          s.Controller,
		StallRatio:          s.StallRatio,
		StallWindow:         s.StallWindow,
		ExitOnStall:         s.ExitOnStall,
		MinLanes:            s.MinLanes,
		MaxLanes:            s.MaxLanes,
		NoOverlap:           s.NoOverlap,
		PollInterval:        s.PollInterval,
		MaxQueueBytes:       s.MaxQueueBytes,
		ShutdownTimeout:     s.ShutdownTimeout,
		TransientRetryFor:   s.TransientRetryFor,
		MetricsListen:       s.MetricsListen,
	}
	o.HealthInterval, o.SlotWALLimit, o.SlotInactiveWarn = s.HealthInterval, s.SlotWALLimit, s.SlotInactiveWarn
	o.BinlogPurgeWarn, o.BinlogPurgeWarnFiles = s.BinlogPurgeWarn, s.BinlogPurgeWarnFiles
	return o, nil
}

func syncStatus(c *cli.Context) error {
	dir := c.String("state-dir")
	only := c.String("stream-id")
	all, err := daemon.ReadStatus(dir)
	if err != nil {
		return daemon.Fail(daemon.ExitState, err)
	}
	var list []daemon.Status
	for _, s := range all {
		if only == "" || s.Stream == only {
			list = append(list, s)
		}
	}
	if only != "" && len(list) == 0 {
		return fmt.Errorf("stream %q has no record in %s", only, dir)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(list); err != nil {
			return err
		}
		return unhealthy(list, c.Duration("max-lag"))
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tSTATE\tAPPLIED\tRATE/S\tSOURCE/S\tLAG\tBATCH\tLANES\tRTT\tLAST COMMIT\tPOSITION\tLAST ERROR")
	for _, s := range list {
		state := "stopped"
		if s.Running {
			state = "running"
		}
		if s.Stalled {
			state = "STALLED"
		}
		if s.Copy != nil {
			state = "copying"
			if !s.Running {
				state = "copy stopped"
			}
		}
		if !s.Running && s.LastError != "" {
			state = "FAILED"
			if !s.RetryAt.IsZero() {
				state = "FAILED, restart " + s.RetryAt.Local().Format("15:04:05")
			}
		}
		last := "-"
		if !s.LastCommit.IsZero() {
			last = s.LastCommit.Format(time.RFC3339)
		}
		lag, rtt := fmt.Sprintf("%.1fs", s.LagSeconds), fmt.Sprintf("%.1fms", s.RTTMS)
		if neverConnected(s) {
			lag = "—"
		}
		if s.RTTMS == 0 && neverConnected(s) {
			rtt = "—"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Stream, state, s.Applied, s.Rate, s.SourceRate, lag,
			s.BatchSize, s.Lanes, rtt, last, s.Position, oneLine(s.LastError))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range list {
		if s.Stalled {
			fmt.Fprintf(c.App.Writer, "\nstream %s is STALLED: %s\n", s.Stream, s.StallWhy)
		}
		if s.Copy != nil {
			printCopy(c.App.Writer, s)
		}
		if m := s.Memory; m != nil && s.Running {
			fmt.Fprintf(c.App.Writer, "\nstream %s: memory: Go heap %s, Go runtime %s, RSS %s, peak RSS %s; queue %s\n",
				s.Stream, mib(m.HeapBytes), mib(m.GoBytes), mib(m.RSSBytes), mib(m.PeakRSSBytes), mib(uint64(max(0, s.QueueBytes))))
		}
		if s.Health != nil {
			printHealth(c.App.Writer, s.Stream, s.Health)
		}
	}
	return unhealthy(list, c.Duration("max-lag"))
}

// mib formats bytes in MiB, to a tenth.
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// printHealth shows a stream's last health check: what its source keeps
// for it, and the warnings.
func printHealth(w io.Writer, stream string, h *daemon.HealthStatus) {
	at := h.Checked.Local().Format("15:04:05")
	switch {
	case h.Slot != nil && h.Slot.Exists:
		sl := h.Slot
		reader := "has a reader"
		if !sl.Active {
			reader = fmt.Sprintf("no reader for %s", (time.Duration(sl.InactiveSeconds) * time.Second).String())
		}
		fmt.Fprintf(w, "\nstream %s: slot %s retains %d bytes of WAL, %.0f%% of %s (%d bytes); %s (checked %s)\n",
			stream, sl.Slot, sl.RetainedBytes, sl.Percent, sl.Limit, sl.LimitBytes, reader, at)
	case h.Binlog != nil:
		b := h.Binlog
		needs := b.Needs
		if needs == "" {
			needs = "(not told by a GTID set)"
		}
		expiry := "binlogs never expire"
		if b.ExpireSeconds > 0 {
			expiry = fmt.Sprintf("%s %d: may be purged in about %s", b.Setting, b.ExpireSeconds, (time.Duration(max(0, b.PurgeInSeconds)) * time.Second).String())
		}
		fmt.Fprintf(w, "\nstream %s: needs binlog %s, %d older of %d; %s (checked %s)\n", stream, needs, b.FilesBefore, b.Files, expiry, at)
	}
	for _, m := range h.Warnings {
		fmt.Fprintf(w, "stream %s: WARNING: %s\n", stream, m)
	}
	if h.Error != "" {
		fmt.Fprintf(w, "stream %s: the health check failed: %s\n", stream, h.Error)
	}
}

// printCopy shows a stream's initial copy, table by table.
func printCopy(w io.Writer, s daemon.Status) {
	cp := s.Copy
	fmt.Fprintf(w, "\nstream %s %s (epoch %d)\n", s.Stream, cp.Line, cp.Epoch)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TABLE\tROWS\tOF ~\tPERCENT\tBYTES\tCHUNKS")
	for _, t := range cp.Tables {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%.1f%%\t%d\t%d/%d\n", t.Table, t.Rows, t.Total, t.Percent, t.Bytes, t.ChunksDone, t.Chunks)
	}
	tw.Flush()
}

// neverConnected is a stream with no measurement yet: its lag and RTT are
// unknown, not zero.
func neverConnected(s daemon.Status) bool {
	return s.Lanes == 0 && s.LastCommit.IsZero() && s.Applied == 0
}

// unhealthy fails (exit 1) when a stream is failed or stalled, or, with
// maxLag, when its lag is over it or it does not run, so that monitoring
// can run sync status.
func unhealthy(list []daemon.Status, maxLag time.Duration) error {
	var bad, late []string
	for _, s := range list {
		if s.Stalled || (!s.Running && s.LastError != "") {
			bad = append(bad, s.Stream)
		}
		switch {
		case maxLag <= 0:
		case !s.Running:
			late = append(late, s.Stream+" (not running: its lag is unknown)")
		case s.LagSeconds > maxLag.Seconds():
			late = append(late, fmt.Sprintf("%s (lag %.1fs)", s.Stream, s.LagSeconds))
		}
	}
	var msgs []string
	if len(bad) > 0 {
		msgs = append(msgs, "stream(s) failed or stalled: "+strings.Join(bad, ", "))
	}
	if len(late) > 0 {
		msgs = append(msgs, fmt.Sprintf("stream(s) over --max-lag %s: %s", maxLag, strings.Join(late, ", ")))
	}
	if len(msgs) == 0 {
		return nil
	}
	return daemon.Fail(daemon.ExitFailure, errors.New(strings.Join(msgs, "; ")))
}

// dropFinal drops the error log line of the failure that ends sluice,
// which main prints itself, so that a terminal shows the error once.
type dropFinal struct{ slog.Handler }

func (d dropFinal) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelError && r.Message == daemon.MsgStreamStopped {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

func (d dropFinal) WithAttrs(as []slog.Attr) slog.Handler { return dropFinal{d.Handler.WithAttrs(as)} }
func (d dropFinal) WithGroup(g string) slog.Handler       { return dropFinal{d.Handler.WithGroup(g)} }

func oneLine(s string) string {
	if s == "" {
		return "-"
	}
	return strings.ReplaceAll(s, "\n", " ")
}
