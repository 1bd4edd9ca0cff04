// Package cutover owns the switch of an application from a stream's source
// to its target: it checks that the source is quiet (no change to the
// streamed tables commits during a window, no write transaction left
// open), waits until the stream, running in another process, has applied
// everything the source committed, proves the target equal to the source
// with verify, primes the target's sequences and AUTO_INCREMENT counters
// from the source's, and reports whether the target may take the
// application's writes. A reverse stream (the way back) is started by the
// caller through Config.Reverse, once the target is ready.
//
// Quiet is measured by the stream itself: the checkpoint a stream writes
// on its target counts the changes of the streamed tables it has applied,
// so two checkpoints that cover two source positions and count the same
// number of changes prove that no change to those tables committed on the
// source between the positions, whatever else the server writes (other
// tables, other databases, the target itself on the same server).
package cutover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/verify"
)

// Config says which stream to cut over and how.
type Config struct {
	// Stream is the stream that writes the target; it must be running
	// (in another process) for the cutover to see it apply.
	Stream string
	// SourceURL and TargetURL are the stream's endpoints, passwords
	// applied.
	SourceURL, TargetURL string
	// Tables are the stream's tables as the source names them.
	Tables []sluice.TableName
	// SourceReadOnly sets the source read-only before the quiet window
	// (see the servers' setReadOnly for what that stops).
	SourceReadOnly bool
	// QuietWindow is how long no change to the streamed tables may
	// commit on the source (5 s).
	QuietWindow time.Duration
	// CatchUp bounds each wait for the stream to apply up to a source
	// position (10 min); Poll is how often its checkpoint is read (200 ms).
	CatchUp, Poll time.Duration
	// SequenceMargin is added to the source's next value of every counter
	// the target's is raised to.
	SequenceMargin int64
	// ChunkRows and Workers shape verify (its defaults when zero).
	ChunkRows, Workers int
	// Reverse, when set, is called once the target is ready and the
	// source and target are still quiet, to set up the stream back.
	Reverse func(ctx context.Context) (*ReverseReport, error)
	// Progress, when set, is told what the cutover waits for.
	Progress func(Progress)
	Logger   *slog.Logger
}

// Progress is what a cutover is doing, for a live line on a terminal.
type Progress struct {
	// Step names it: "catch-up", "quiet", "verify", "counters", "reverse".
	Step string
	// Want is the source position waited for, Have the stream's
	// checkpoint (catch-up).
	Want, Have sluice.Position
	// Behind is how far Have is from Want, in Unit ("bytes",
	// "transactions", "changes"); ETA from the rate it shrinks at. Both
	// zero when unknown.
	Behind float64
	Unit   string
	ETA    time.Duration
	// Left is the time left of the quiet window.
	Left time.Duration
}

// NotReadyError says the target must not take writes yet: a row differs,
// the source was written during the cutover, the stream did not catch up,
// or a counter could not be primed. The report says which.
type NotReadyError struct{ Reason string }

func (e *NotReadyError) Error() string { return "cutover: the target is not ready: " + e.Reason }

// IsNotReady reports whether err is a NotReadyError.
func IsNotReady(err error) bool {
	var nr *NotReadyError
	return errors.As(err, &nr)
}

func (c *Config) defaults() {
	if c.QuietWindow <= 0 {
		c.QuietWindow = 5 * time.Second
	}
	if c.CatchUp <= 0 {
		c.CatchUp = 10 * time.Minute
	}
	if c.Poll <= 0 {
		c.Poll = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = func(Progress) {}
	}
}

// cutover is one run.
type cutover struct {
	cfg      Config
	src, tgt server
	// vsrc and vtgt are verify's sides, also used to read the stream's
	// checkpoint on the target.
	vsrc, vtgt verify.Side
	rep        *Report
	kind, like string
}

// Run cuts the stream over. It returns the report with a nil error when
// the target is ready to take writes; with a *NotReadyError (the report
// says why) when it is not; with another error when the cutover could not
// run (a connection, a stream without a checkpoint). A report is returned
// whenever something was found.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	start := time.Now()
	c := &cutover{cfg: cfg, rep: &Report{Stream: cfg.Stream}}
	defer func() { c.rep.Elapsed = time.Since(start) }()
	if err := c.open(ctx); err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.run(ctx); err != nil {
		var nr *NotReadyError
		if errors.As(err, &nr) {
			c.rep.Failure = nr.Reason
		}
		return c.rep, err
	}
	c.rep.Ready = true
	return c.rep, nil
}

func (c *cutover) open(ctx context.Context) error {
	type opened struct {
		s   server
		v   verify.Side
		err error
	}
	openBoth := func(role, raw string) opened {
		s, err := openServer(ctx, role, raw)
		if err != nil {
			return opened{err: err}
		}
		v, err := verify.Open(ctx, role, raw)
		if err != nil {
			s.close()
			return opened{err: err}
		}
		return opened{s: s, v: v}
	}
	tch := make(chan opened, 1)
	go func() { tch <- openBoth("--target", c.cfg.TargetURL) }()
	so := openBoth("--source", c.cfg.SourceURL)
	to := <-tch
	c.src, c.vsrc, c.tgt, c.vtgt = so.s, so.v, to.s, to.v
	if err := errors.Join(so.err, to.err); err != nil {
		c.close()
		return err
	}
	return nil
}

func (c *cutover) close() {
	for _, s := range []server{c.src, c.tgt} {
		if s != nil {
			s.close()
		}
	}
	for _, v := range []verify.Side{c.vsrc, c.vtgt} {
		if v != nil {
			v.Close()
		}
	}
}

func (c *cutover) run(ctx context.Context) error {
	cp, err := c.checkpoint(ctx)
	if err != nil {
		return err
	}
	c.kind, c.like = cp.Position.Kind, cp.Position.Token
	c.rep.SourceMode = c.kind
	if c.cfg.SourceReadOnly {
		if c.kind == pgtrigger.Kind || c.kind == mytrigger.Kind {
			return fmt.Errorf("--source-read-only: stream %s reads the source with triggers, and its reader writes its own position to the source, which a read-only source would refuse: stop the application's writers yourself and run cutover without --source-read-only", c.cfg.Stream)
		}
		if c.rep.ReadOnly, err = c.src.setReadOnly(ctx); err != nil {
			return err
		}
		c.cfg.Logger.Info("source set read-only", "stream", c.cfg.Stream, "how", c.rep.ReadOnly)
	}

	second, err := c.quiet(ctx)
	if err != nil {
		return err
	}
	c.rep.QuietWindow = c.cfg.QuietWindow
	if open, err := c.src.openWriters(ctx, c.cfg.Tables); err != nil {
		// The final check still sees what such a transaction commits
		// before the cutover ends; only a later commit would be missed.
		c.rep.Warnings = append(c.rep.Warnings, fmt.Sprintf("could not look for write transactions left open on the source, which would be missed if they committed after the cutover: %v", err))
	} else if len(open) > 0 {
		return &NotReadyError{fmt.Sprintf("the source is not quiet: transactions still open on %s have written and may commit after the cutover: %s; end them (or pass --source-read-only) and run cutover again",
			c.src.where(), strings.Join(open, "; "))}
	}
	c.rep.SourcePosition, c.rep.Checkpoint, c.rep.Applied = second.want.String(), second.cp.Position.String(), second.cp.Applied

	if err := c.verify(ctx); err != nil {
		return err
	}
	if err := c.primeCounters(ctx); err != nil {
		return err
	}
	// Nothing may have committed on the source while verify and the
	// counters ran: the stream's count is the same at a position read
	// now.
	last, err := c.caughtUp(ctx)
	if err != nil {
		return err
	}
	if n := int64(last.cp.Applied) - int64(second.cp.Applied); n != 0 {
		return &NotReadyError{fmt.Sprintf("the source was written during the cutover: %d changes to the streamed tables committed on %s after the quiet window (the stream's checkpoints %s and %s); "+
			"what verify compared is not the source any more: stop the writers and run cutover again", n, c.src.where(), second.cp.Position, last.cp.Position)}
	}
	c.rep.SourcePosition, c.rep.Checkpoint = last.want.String(), last.cp.Position.String()
	if c.cfg.Reverse != nil {
		c.cfg.Progress(Progress{Step: "reverse"})
		rr, err := c.cfg.Reverse(ctx)
		c.rep.Reverse = rr
		if err != nil {
			return &NotReadyError{fmt.Sprintf("the target is ready to take writes, but the reverse stream could not be set up, so there is no way back yet: %v", err)}
		}
		warn, err := c.reverseWarnings(ctx)
		if err != nil {
			return err
		}
		rr.Warnings = append(rr.Warnings, warn...)
	}
	return nil
}

// quiet proves that no change to the streamed tables committed on the
// source for a whole window. The stream's checkpoint read at the window's
// start (any checkpoint: everything committed on the source after it was
// read comes after its position) and the first one that covers the
// source's position at the window's end count the same changes, or
// something committed in between. A stream still applying an earlier
// backlog counts that too, so a first window that counted changes is
// tried once more, from the checkpoint that ended it: one that counts
// changes again saw them commit.
func (c *cutover) quiet(ctx context.Context) (reached, error) {
	base, err := c.checkpoint(ctx)
	if err != nil {
		return reached{}, err
	}
	for try := 1; ; try++ {
		if err := c.quietWindow(ctx); err != nil {
			return reached{}, err
		}
		end, err := c.caughtUp(ctx)
		if err != nil {
			return reached{}, err
		}
		n := int64(end.cp.Applied) - int64(base.Applied)
		if n == 0 {
			return end, nil
		}
		if try == 2 {
			return reached{}, &NotReadyError{fmt.Sprintf("the source is not quiet: %d changes to the streamed tables committed on %s during the %s window (the stream's checkpoints %s and %s): "+
				"stop the application's writes to the source (or pass --source-read-only) and run cutover again", n, c.src.where(), c.cfg.QuietWindow, base.Position, end.cp.Position)}
		}
		c.cfg.Logger.Info("the stream applied changes during the first quiet window (a backlog, or writes): watching one more", "stream", c.cfg.Stream, "changes", n)
		base = end.cp
	}
}

// quietWindow waits out the window, telling the progress line.
func (c *cutover) quietWindow(ctx context.Context) error {
	end := time.Now().Add(c.cfg.QuietWindow)
	tick := time.NewTicker(c.cfg.Poll)
	defer tick.Stop()
	for {
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		c.cfg.Progress(Progress{Step: "quiet", Left: left})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// verify compares the streamed tables as a still pair: the source is
// quiet and the stream has applied everything it committed.
func (c *cutover) verify(ctx context.Context) error {
	c.cfg.Progress(Progress{Step: "verify"})
	rep, err := verify.Run(ctx, verify.Config{Source: c.vsrc, Target: c.vtgt, Tables: c.cfg.Tables,
		ChunkRows: c.cfg.ChunkRows, Workers: c.cfg.Workers, Logger: c.cfg.Logger})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	c.rep.Verify = rep
	for _, t := range rep.Tables {
		c.rep.RowsVerified += t.SourceRows
	}
	if n := rep.Differences(); n > 0 {
		var named []string
		for _, t := range rep.Tables {
			for _, d := range t.Diffs {
				if len(named) < 10 {
					named = append(named, fmt.Sprintf("%s %s %s", t.Source, d.Key, d.Kind))
				}
			}
		}
		return &NotReadyError{fmt.Sprintf("%d rows differ between source and target although the stream has applied everything the source committed (%s%s): "+
			"the target was written behind sluice's back, or a bug; mend them (sluice verify --repair) and run cutover again",
			n, strings.Join(named, ", "), map[bool]string{true: ", …"}[n > len(named)])}
	}
	if n := rep.Unsettled(); n > 0 {
		return &NotReadyError{fmt.Sprintf("%d keys changed while verify compared them: the source is not quiet; run cutover again", n)}
	}
	return nil
}
