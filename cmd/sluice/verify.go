package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/verify"
	"github.com/urfave/cli/v2"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "prove that the target holds exactly the source's rows (hashes computed inside both databases; live against a running stream); exit 0 equal, 1 different, 2 could not run",
		Flags: append(pairFlags("verify", "VERIFY_STREAM", ", live",
			"verify then runs live against its checkpoint row (without it: a still pair)"),
			&cli.IntFlag{Name: "chunk-rows", Value: 10000, EnvVars: env("VERIFY_CHUNK_ROWS"), Usage: "rows per first range; a differing range is cut again down to 1000 rows, then compared key by key"},
			&cli.IntFlag{Name: "workers", Value: 2, EnvVars: env("VERIFY_WORKERS"), Usage: "batches of ranges hashed at once, each on its own connection per side"},
			&cli.StringFlag{Name: "resume", EnvVars: env("VERIFY_RESUME"), Usage: "keep the run's progress in this file as it goes; a run interrupted (killed, lost connection) continues from it when started again with the same file, source, target and tables; the file is removed when the run completes"},
			&cli.BoolFlag{Name: "repair", EnvVars: env("VERIFY_REPAIR"), Usage: "write the source's current rows for the differing keys to the target (delete those the source lacks) through sluice's apply path, in one transaction, then verify those keys again; exit 0 when they are then equal. Against a running stream (--config/--stream or --stream-id) the transaction first locks the stream's fence row, so that no batch of the stream is in flight while the source's rows are read and written, and the stream converges on top of them; it never writes the stream's checkpoint"},
			&cli.DurationFlag{Name: "catch-up", Value: 2 * time.Minute, EnvVars: env("VERIFY_CATCH_UP"), Usage: "live: how long to wait for the target to apply past the source position a range was hashed at"},
		),
		Action: runVerify,
	}
}

// pairFlags are the flags naming the pair a command (verify, cutover)
// works on: a stream of a config file, or a source, a target and tables.
// streamEnv is --stream's variable, configWhat what --config --stream
// adds to "<cmd> that stream's tables", streamIDUse what --stream-id does.
func pairFlags(cmd, streamEnv, configWhat, streamIDUse string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", EnvVars: env("CONFIG"), Usage: "TOML config file of the streams: with --stream, " + cmd + " that stream's tables" + configWhat},
		&cli.StringFlag{Name: "stream", EnvVars: env(streamEnv), Usage: "with --config: the stream (its stream_id) whose tables to " + cmd},
		&cli.StringFlag{Name: "source", EnvVars: env("SOURCE"), Usage: "source database: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or user:pass@tcp(host:3306)/db"},
		&cli.StringFlag{Name: "target", EnvVars: env("TARGET"), Usage: "target database, same forms"},
		&cli.StringSliceFlag{Name: "tables", EnvVars: env("TABLES"), Usage: "tables to " + cmd + ", comma-separated, as the source names them: schema.table or table"},
		&cli.StringFlag{Name: "source-password-file", EnvVars: env("SOURCE_PASSWORD_FILE"), Usage: "file holding the source's password (replaces any in --source)"},
		&cli.StringFlag{Name: "target-password-file", EnvVars: env("TARGET_PASSWORD_FILE"), Usage: "file holding the target's password (replaces any in --target)"},
		&cli.StringFlag{Name: "stream-id", EnvVars: env("STREAM_ID"), Usage: "with --source/--target: the stream writing the target; " + streamIDUse},
		&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
	}
}

// verifyTarget is what to compare, from the flags or a config file.
type verifyTarget struct {
	stream config.Stream
	live   string // the stream, when live
}

// pairEndpoints reads the pair a command compares or cuts over: a
// stream of --config FILE (--stream), or --source, --target and --tables
// (with --stream-id naming the stream that writes the target).
func pairEndpoints(c *cli.Context) (verifyTarget, error) {
	if path := c.String("config"); path != "" {
		id := c.String("stream")
		if id == "" {
			verb := strings.ReplaceAll(c.Command.Name, "cutover", "cut over")
			return verifyTarget{}, usageErr(fmt.Errorf("%s --config %s needs --stream ID: the stream whose tables to %s", c.Command.Name, path, verb))
		}
		f, err := config.Load(path)
		if err != nil {
			return verifyTarget{}, usageErr(err)
		}
		// The file's streams with sync start's defaults: verify's own
		// flags are not config keys.
		set := flag.NewFlagSet("verify", flag.ContinueOnError)
		for _, fl := range syncStartFlags() {
			if err := fl.Apply(set); err != nil {
				return verifyTarget{}, err
			}
		}
		streams, err := config.Resolve(f, cli.NewContext(c.App, set, nil))
		if err != nil {
			return verifyTarget{}, usageErr(err)
		}
		var ids []string
		for _, s := range streams {
			if s.StreamID == id {
				if _, _, err := s.ApplySecrets(); err != nil {
					return verifyTarget{}, usageErr(err)
				}
				return verifyTarget{stream: s, live: id}, nil
			}
			ids = append(ids, s.StreamID)
		}
		return verifyTarget{}, usageErr(fmt.Errorf("--stream %s: %s has no such stream (it has %v)", id, path, ids))
	}
	if c.IsSet("stream") {
		return verifyTarget{}, usageErr(fmt.Errorf("--stream names a stream of --config FILE; with --source and --target, name the stream writing the target with --stream-id"))
	}
	if err := requireFlags(c, "source", "target", "tables"); err != nil {
		return verifyTarget{}, err
	}
	s := config.Stream{StreamID: c.String("stream-id"), Source: c.String("source"), Target: c.String("target"), Tables: c.StringSlice("tables"),
		SourcePasswordFile: c.String("source-password-file"), TargetPasswordFile: c.String("target-password-file")}
	if s.StreamID == "" {
		s.StreamID = "default" // names the SLUICE_<stream>_*_PASSWORD variables
	}
	if _, _, err := s.ApplySecrets(); err != nil {
		return verifyTarget{}, usageErr(err)
	}
	return verifyTarget{stream: s, live: c.String("stream-id")}, nil
}

func runVerify(c *cli.Context) error {
	ctx := c.Context
	// Every failure to run exits 2; a difference exits 1.
	cantRun := func(err error) error { return daemon.Fail(daemon.ExitUsage, err) }
	vt, err := pairEndpoints(c)
	if err != nil {
		return cantRun(err)
	}
	tables, err := endpoint.ParseTables(vt.stream.Tables)
	if err != nil {
		return cantRun(err)
	}
	// Both connections at once: over a slow link each costs round trips.
	var tgt verify.Side
	var terr error
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		tgt, terr = verify.Open(ctx, "--target", vt.stream.Target)
	}()
	src, err := verify.Open(ctx, "--source", vt.stream.Source)
	<-opened
	if src != nil {
		defer src.Close()
	}
	if tgt != nil {
		defer tgt.Close()
	}
	if err = errors.Join(err, terr); err != nil {
		return cantRun(err)
	}
	cfg := verify.Config{Source: src, Target: tgt, Tables: tables, ChunkRows: c.Int("chunk-rows"),
		Workers: c.Int("workers"), CatchUp: c.Duration("catch-up")}
	if vt.live != "" {
		cfg.Stream, cfg.Covers = vt.live, verify.Covers
	}
	if path := c.String("resume"); path != "" {
		// The run's identity holds no password: a state file may be read
		// by others.
		run := fmt.Sprintf("source %s, target %s, tables %s, chunk rows %d", connstr.Mask(vt.stream.Source), connstr.Mask(vt.stream.Target),
			strings.Join(vt.stream.Tables, ","), cfg.ChunkRows)
		if cfg.State, err = verify.LoadState(path, run); err != nil {
			return cantRun(err)
		}
	}
	if isTerminal(os.Stderr) {
		p := &progressLine{w: os.Stderr}
		cfg.Progress = p.show
		defer p.done()
	}
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		return cantRun(fmt.Errorf("verify: %w", err))
	}
	if err := cfg.State.Remove(); err != nil {
		return cantRun(fmt.Errorf("verify is complete, but its state file stays: %w", err))
	}
	if c.Bool("repair") && rep.Differences() > 0 {
		if rep.Repair, err = repairTarget(ctx, cfg, vt.stream, rep); err != nil {
			// What verify found is still worth printing.
			_ = rep.WriteText(c.App.ErrWriter)
			return cantRun(err)
		}
	}
	if c.Bool("json") {
		err = rep.WriteJSON(c.App.Writer)
	} else {
		err = rep.WriteText(c.App.Writer)
	}
	if err != nil {
		return cantRun(err)
	}
	switch {
	case rep.Repair != nil && !rep.Repair.Equal:
		return daemon.Fail(daemon.ExitFailure, fmt.Errorf("verify --repair: the repaired keys still differ (listed above): the target may refuse the source's values, or something else writes the target"))
	case rep.Repair != nil && len(rep.Repair.More) > 0:
		return daemon.Fail(daemon.ExitFailure, fmt.Errorf("verify --repair: %s had more differences than verify keeps; those found were repaired: run verify --repair again", strings.Join(rep.Repair.More, ", ")))
	case rep.Differences() > 0 && rep.Repair == nil:
		return daemon.Fail(daemon.ExitFailure, fmt.Errorf("verify: %d rows differ between source and target (listed above)", rep.Differences()))
	case rep.Unsettled() > 0:
		return cantRun(fmt.Errorf("verify: %d keys kept changing on the source and were neither proven equal nor different: run verify again (the stream may be far behind, or a hot row changes on every round)", rep.Unsettled()))
	}
	return nil
}

// progressLine keeps one line on a terminal: table, rows hashed and ETA.
type progressLine struct {
	w    io.Writer
	last time.Time
}

func (p *progressLine) show(pr verify.Progress) {
	if time.Since(p.last) < 200*time.Millisecond && pr.RowsDone < pr.RowsTotal {
		return
	}
	p.last = time.Now()
	eta := "?"
	if pr.RowsDone > 0 && pr.RowsTotal > pr.RowsDone {
		rate := float64(pr.RowsDone) / pr.Elapsed.Seconds()
		eta = (time.Duration(float64(pr.RowsTotal-pr.RowsDone) / rate * float64(time.Second))).Round(time.Second).String()
	} else if pr.RowsDone >= pr.RowsTotal {
		eta = "0s"
	}
	fmt.Fprintf(p.w, "\r\x1b[Kverify table %d/%d %s: %d/%d rows hashed, ETA %s", pr.TableIndex+1, pr.Tables, pr.Table, pr.RowsDone, pr.RowsTotal, eta)
}

func (p *progressLine) done() {
	if !p.last.IsZero() {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

// repairTarget repairs rep's differing keys (verify.Repair) on the
// target opened as sync start opens it.
func repairTarget(ctx context.Context, cfg verify.Config, s config.Stream, rep *verify.Report) (*verify.RepairReport, error) {
	rc, closeTarget, err := verify.OpenRepair(ctx, s.Source, s.Target, cfg.Source,
		verify.RepairOptions{AllowCollationMerge: s.AllowCollationMerge})
	if err != nil {
		return nil, fmt.Errorf("--repair: %w", err)
	}
	defer closeTarget()
	return verify.Repair(ctx, cfg, rc, rep)
}
