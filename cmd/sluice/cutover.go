package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/cutover"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/stream"
	"github.com/urfave/cli/v2"
)

func cutoverCommand() *cli.Command {
	return &cli.Command{
		Name:  "cutover",
		Usage: "once the application stopped writing the source: check the source is quiet, wait for the stream to apply everything, verify, prime the target's sequences and AUTO_INCREMENTs; exit 0 when the target may take writes, 1 when not, 2 when it could not run",
		Flags: append(pairFlags("cut over", "CUTOVER_STREAM", "", "required: cutover waits for it"),
			&cli.BoolFlag{Name: "source-read-only", EnvVars: env("CUTOVER_SOURCE_READ_ONLY"), Usage: "make the source read-only first (PostgreSQL: new sessions of the database start read-only and the application's open sessions are ended; MySQL: SET GLOBAL read_only = ON, server-wide); it stays so"},
			&cli.DurationFlag{Name: "quiet-window", Value: 5 * time.Second, EnvVars: env("CUTOVER_QUIET_WINDOW"), Usage: "how long no change to the streamed tables may commit on the source before the cutover goes on"},
			&cli.DurationFlag{Name: "catch-up", Value: 10 * time.Minute, EnvVars: env("CUTOVER_CATCH_UP"), Usage: "how long to wait, each time, for the stream to apply up to the source's position"},
			&cli.Int64Flag{Name: "sequence-margin", EnvVars: env("CUTOVER_SEQUENCE_MARGIN"), Usage: "added to the source's next value of each sequence and AUTO_INCREMENT the target's is raised to"},
			&cli.BoolFlag{Name: "reverse", EnvVars: env("CUTOVER_REVERSE"), Usage: "once the target is ready, set up the stream back from the target to the source (its start on the target and checkpoint on the source) and print its [[stream]] block"},
			&cli.StringFlag{Name: "reverse-stream-id", EnvVars: env("CUTOVER_REVERSE_STREAM_ID"), DefaultText: "<stream>-reverse", Usage: "with --reverse: the reverse stream's id"},
			&cli.StringFlag{Name: "reverse-source-mode", Value: "auto", EnvVars: env("CUTOVER_REVERSE_SOURCE_MODE"), Usage: "with --reverse: how the reverse stream reads the target (auto: its log; trigger)"},
		),
		Action: runCutover,
	}
}

func runCutover(c *cli.Context) error {
	ctx := c.Context
	cantRun := func(err error) error { return daemon.Fail(daemon.ExitUsage, err) }
	pair, err := pairEndpoints(c)
	if err != nil {
		return cantRun(err)
	}
	if pair.live == "" {
		return cantRun(usageErr(fmt.Errorf("cutover needs the stream that writes the target: --config FILE --stream ID, or --stream-id ID with --source and --target")))
	}
	tables, err := endpoint.ParseTables(pair.stream.Tables)
	if err != nil {
		return cantRun(err)
	}
	log := slog.New(redactHandler{slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn}), secretsOf(pair.stream)})
	cfg := cutover.Config{
		Stream: pair.live, SourceURL: pair.stream.Source, TargetURL: pair.stream.Target, Tables: tables,
		SourceReadOnly: c.Bool("source-read-only"), QuietWindow: c.Duration("quiet-window"), CatchUp: c.Duration("catch-up"),
		SequenceMargin: c.Int64("sequence-margin"), Logger: log,
	}
	if cfg.SequenceMargin < 0 {
		return cantRun(fmt.Errorf("--sequence-margin %d: want 0 or more", cfg.SequenceMargin))
	}
	if c.Bool("reverse") {
		s := pair.stream
		plan, err := cutover.PlanReverse(cutover.Forward{ID: pair.live, Source: s.Source, Target: s.Target,
			SourcePasswordFile: s.SourcePasswordFile, TargetPasswordFile: s.TargetPasswordFile, Tables: tables},
			c.String("reverse-stream-id"), cfg.SourceReadOnly)
		if err != nil {
			return cantRun(fmt.Errorf("--reverse: %w", err))
		}
		cfg.Reverse = func(ctx context.Context) (*cutover.ReverseReport, error) {
			return startReverse(ctx, s, plan, c.String("reverse-source-mode"), log)
		}
	}
	if isTerminal(os.Stderr) {
		p := &cutoverLine{w: os.Stderr, stream: pair.live}
		cfg.Progress = p.show
		defer p.done()
	}
	rep, err := cutover.Run(ctx, cfg)
	if rep != nil {
		var werr error
		if c.Bool("json") {
			werr = rep.WriteJSON(c.App.Writer)
		} else {
			werr = rep.WriteText(c.App.Writer)
		}
		if err == nil && werr != nil {
			return cantRun(werr)
		}
	}
	switch {
	case err == nil:
		return nil
	case cutover.IsNotReady(err):
		return daemon.Fail(daemon.ExitFailure, err)
	}
	return cantRun(err)
}

// secretsOf is the stream's passwords, for the log's last line of
// defence.
func secretsOf(s config.Stream) *secretSet {
	set := &secretSet{}
	set.addConn(s.Source, s.Target)
	return set
}

// startReverse records the reverse stream's start: it runs the stream as
// sync start would with --from-now and no copy (the target is quiet and
// equal to the source, so "now" is exactly where the way back begins),
// in a state dir of its own, and stops it as soon as its start position
// is recorded on its target (the old source). The stream run from the
// config file afterwards finds that checkpoint there and resumes from
// it.
func startReverse(ctx context.Context, fwd config.Stream, plan cutover.ReversePlan, mode string, log *slog.Logger) (*cutover.ReverseReport, error) {
	rs := fwd
	rs.StreamID, rs.Source, rs.Target = plan.ID, plan.Source, plan.Target
	rs.SourcePasswordFile, rs.TargetPasswordFile = plan.SourcePasswordFile, plan.TargetPasswordFile
	rs.Tables = nil
	for _, t := range plan.Tables {
		rs.Tables = append(rs.Tables, t.String())
	}
	rs.SourceMode, rs.FromNow, rs.InitialCopy = mode, true, "off"
	o, err := streamOptions(rs)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-reverse-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	o.StateDir, o.MetricsListen, o.Logger, o.Progress, o.TransientRetryFor = dir, "", log, nil, 0
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var start sluice.Position
	o.OnStart = func(st *stream.Stream) {
		start = st.Stats().Position
		stop()
	}
	err = daemon.RunStream(sctx, o)
	if start.IsZero() {
		if err == nil {
			err = errors.New("it stopped before recording its start")
		}
		return nil, fmt.Errorf("reverse stream %s: %w", plan.ID, err)
	}
	return &cutover.ReverseReport{Stream: plan.ID, Start: start.String(), Config: plan.Config()}, nil
}

// cutoverLine keeps one line on a terminal: what the cutover waits for.
type cutoverLine struct {
	w      io.Writer
	stream string
	last   time.Time
	shown  bool
}

func (p *cutoverLine) show(pr cutover.Progress) {
	if time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last, p.shown = time.Now(), true
	var line string
	switch pr.Step {
	case "catch-up":
		line = fmt.Sprintf("waiting for stream %s to apply up to %s (checkpoint %s)", p.stream, pr.Want, pr.Have)
		if pr.Unit != "" {
			line += fmt.Sprintf(": %.0f %s behind", pr.Behind, pr.Unit)
			if pr.ETA > 0 {
				line += ", ETA " + pr.ETA.Round(time.Second).String()
			}
		}
	case "quiet":
		line = fmt.Sprintf("quiet window: %s left", pr.Left.Round(100*time.Millisecond))
	case "verify":
		line = "verifying the streamed tables"
	case "counters":
		line = "priming the target's sequences and AUTO_INCREMENTs"
	case "reverse":
		line = "setting up the reverse stream"
	}
	fmt.Fprintf(p.w, "\r\x1b[Kcutover: %s", line)
}

func (p *cutoverLine) done() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
