package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/source"
	"github.com/urfave/cli/v2"
)

// Exit codes of a refused preflight (the team's table in docs/operating.md).
const (
	exitPreflightOther  = 1
	exitPreflightSource = 3
	exitPreflightTarget = 4
)

func preflightCommand() *cli.Command {
	return &cli.Command{
		Name:   "preflight",
		Usage:  "run every source and target check and the type map, print what sync start would do, and change nothing on either database (same flags as sync start)",
		Flags:  append(syncStartFlags(), preflightFlags()[1]),
		Action: preflight,
	}
}

// preflightFlags are the flags `sync start` adds for --check; preflight
// takes the second.
func preflightFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "check", Usage: "run the preflight (as sluice preflight) instead: every check, nothing changed on either database"},
		&cli.BoolFlag{Name: "json", Usage: "with --check: print the report as JSON"},
	}
}

// preflightReport is one stream's preflight.
type preflightReport struct {
	Stream string         `json:"stream"`
	Mode   string         `json:"source_mode"`
	OK     bool           `json:"ok"`
	Checks []source.Check `json:"checks"`
}

func preflight(c *cli.Context) error {
	streams, err := resolveStreams(c)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var reports []preflightReport
	var failed error
	for _, s := range streams {
		if _, _, err := s.ApplySecrets(); err != nil {
			return err
		}
		rep, code := preflightStream(c.Context, s, log)
		reports = append(reports, rep)
		if code != 0 && failed == nil {
			failed = daemon.Fail(code, fmt.Errorf("preflight: stream %s would not start", s.StreamID))
		}
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			return err
		}
	} else {
		for _, r := range reports {
			fmt.Fprintf(w, "stream %s (source mode %s):\n", r.Stream, r.Mode)
			for _, ch := range r.Checks {
				mark := "✓"
				switch {
				case !ch.OK:
					mark = "✗"
				case ch.Warning:
					mark = "!"
				}
				fmt.Fprintf(w, "  %s %s: %s\n", mark, ch.Object, ch.Detail)
			}
			if r.OK {
				fmt.Fprintln(w, "  sync start would start this stream")
			} else {
				fmt.Fprintln(w, "  sync start would refuse this stream")
			}
		}
	}
	if failed != nil {
		return failed
	}
	return nil
}

// preflightStream checks one stream, reading only, and returns its report
// and the exit code (0 when sync start would start it).
func preflightStream(ctx context.Context, s config.Stream, log *slog.Logger) (preflightReport, int) {
	rep := preflightReport{Stream: s.StreamID, Mode: s.SourceMode}
	fail := func(obj string, err error, code int) (preflightReport, int) {
		rep.Checks = append(rep.Checks, source.Check{Object: obj, Detail: err.Error()})
		return rep, code
	}
	tables, err := endpoint.ParseTables(s.Tables)
	if err != nil {
		return fail("tables", err, exitPreflightOther)
	}
	srcEng, err := endpoint.EngineOf(s.Source)
	if err != nil {
		return fail("source", err, exitPreflightSource)
	}
	mode := s.SourceMode
	if mode == "" || mode == "auto" {
		mode = endpoint.DefaultMode(srcEng)
	}
	rep.Mode = mode
	creates := false // sync start would create the missing target tables
	if _, err := os.Stat(filepath.Join(s.StateDir, checkpoint.FileName)); errors.Is(err, fs.ErrNotExist) {
		copyOn := s.InitialCopy == "on" || (s.InitialCopy != "off" && !s.FromNow)
		creates = copyOn && s.CreateTables != "off"
		switch {
		case copyOn:
			rep.Checks = append(rep.Checks, source.Check{OK: true, Object: "stream " + s.StreamID, Detail: "no state file in " + s.StateDir + ": sync start copies the tables' existing rows first (initial copy; the target tables must be empty), then streams from the copy's snapshot"})
		case mode != endpoint.ModeTrigger && !s.FromNow:
			return fail("stream "+s.StreamID, fmt.Errorf("stream %s has no state file in %s, --initial-copy is off and --from-now is not given: nothing says where a log-read stream starts; let sluice copy (--initial-copy auto), or start with --from-now when the target already holds the source's rows", s.StreamID, s.StateDir), exitPreflightOther)
		}
	} else {
		rep.Checks = append(rep.Checks, source.Check{OK: true, Object: "stream " + s.StreamID, Detail: "state file in " + s.StateDir + ": sync start resumes from its checkpoint (preflight checks the source as for a new stream)"})
	}
	src, err := endpoint.CheckSource(ctx, srcEng, mode, endpoint.SourceOptions{URL: s.Source, Tables: tables, Stream: s.StreamID, Logger: log})
	var modeErr *endpoint.ModeError
	if errors.As(err, &modeErr) {
		return fail("source mode", err, exitPreflightOther)
	}
	rep.Checks = append(rep.Checks, src.Checks...)
	if err != nil {
		return rep, exitPreflightSource
	}
	// The source's foreign-key actions sluice carries out (a MySQL
	// source's: its log omits the rows they change), as sync start plans
	// them.
	cascades, err := apply.NewCascades(src.ForeignKeys, src.Tables)
	if err != nil {
		return fail("source foreign keys", err, exitPreflightSource)
	}
	if !cascades.Empty() {
		rep.Checks = append(rep.Checks, source.Check{OK: true, Object: "source foreign keys",
			Detail: "the source's log omits the rows their actions change: sync start carries them out on the target, applying the tables they join in source order: " + cascades.Summary()})
	}
	checked, err := preflightSchema(ctx, s, src.Tables, creates, &rep)
	if err != nil {
		return rep, daemon.ExitCode(err)
	}
	if err := preflightTarget(ctx, s, srcEng, checked, cascades, log, &rep); err != nil {
		return rep, exitPreflightTarget
	}
	rep.OK = true
	return rep, 0
}

// preflightSchema compares the source's tables with the target's (as
// sluice schema diff does): a table the target lacks is reported as
// created when sync start would create it, and left out of the target's
// checks; the differences sync start streams through are reported as
// notes. It returns the tables the target's checks are to see.
func preflightSchema(ctx context.Context, s config.Stream, tables []*sluice.Table, creates bool, rep *preflightReport) ([]*sluice.Table, error) {
	o, err := streamOptions(s)
	if err != nil {
		return nil, err
	}
	sd, closeAll, err := readSides(ctx, o)
	if err != nil {
		rep.Checks = append(rep.Checks, source.Check{Object: "schema", Detail: err.Error()})
		return nil, err
	}
	defer closeAll()
	missing := map[sluice.TableName]bool{}
	for i, t := range sd.tables {
		if sd.targets[i] == nil {
			missing[t.Name] = true
		}
	}
	if creates && len(missing) > 0 {
		p, err := schema.BuildPlan(sd.missing(), sd.opt)
		if err != nil {
			rep.Checks = append(rep.Checks, source.Check{Object: "target tables", Detail: "sync start cannot create the missing tables: " + err.Error()})
			return nil, daemon.Fail(daemon.ExitTarget, err)
		}
		for _, tp := range p.Tables {
			detail := "missing: sync start creates it before the initial copy, its unique keys, indexes and foreign keys after it (sluice schema plan prints the DDL)"
			for _, n := range tp.Notes {
				detail += "; note: " + n
			}
			rep.Checks = append(rep.Checks, source.Check{OK: true, Object: "target table " + tp.Target.String(), Detail: detail})
		}
		tables = slices.DeleteFunc(slices.Clone(tables), func(t *sluice.Table) bool { return missing[t.Name] })
	}
	for _, td := range sd.diffs() {
		for _, d := range td.Differences {
			if !d.Blocking {
				rep.Checks = append(rep.Checks, source.Check{OK: true, Object: "target table " + td.Target.String(), Detail: "differs from the source (sync start streams through it): " + d.String()})
			}
		}
	}
	return tables, nil
}

// preflightTarget opens the target check-only (no checkpoint table is
// created) and runs its preflight on the source's tables, through the
// cross-engine type map where sync start would use it.
func preflightTarget(ctx context.Context, s config.Stream, srcEng endpoint.Engine, tables []*sluice.Table, cascades *apply.Cascades, log *slog.Logger, rep *preflightReport) error {
	fail := func(obj string, err error) error {
		rep.Checks = append(rep.Checks, source.Check{Object: obj, Detail: err.Error()})
		return err
	}
	tgt, err := endpoint.OpenTarget(ctx, endpoint.TargetOptions{URL: s.Target, Mode: s.ApplyMode, SourceEngine: srcEng,
		AllowCollationMerge: s.AllowCollationMerge, Logger: log, CheckOnly: true})
	if err != nil {
		return fail("target", err)
	}
	checkpoint := "sluice.checkpoints"
	if eng, _ := endpoint.EngineOf(s.Target); eng == endpoint.EngineMySQL {
		checkpoint = "the sluice checkpoint table in the target database"
	}
	defer tgt.Close(context.WithoutCancel(ctx))
	rep.Checks = append(rep.Checks, source.Check{OK: true, Object: "target " + endpoint.MaskURL(s.Target), Detail: "connected"})
	if err := tgt.Preflight(ctx, tables); err != nil {
		return fail("target tables", err)
	}
	if err := daemon.CheckCascadeTarget(ctx, tgt, cascades); err != nil {
		return fail("target foreign keys", err)
	}
	for _, t := range tables {
		rep.Checks = append(rep.Checks, source.Check{OK: true, Object: "target table " + t.Name.String(), Detail: "columns, types, keys and collations fit the source"})
	}
	if w, ok := tgt.(interface{ PreflightWarnings() []string }); ok {
		for _, s := range w.PreflightWarnings() {
			rep.Checks = append(rep.Checks, source.Check{OK: true, Warning: true, Object: "target tables", Detail: "warning: " + s})
		}
	}
	rep.Checks = append(rep.Checks, source.Check{OK: true, Object: "checkpoint table", Detail: "would create " + checkpoint + " if missing"})
	return nil
}
