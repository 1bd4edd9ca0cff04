package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// copyWanted says whether a stream with no checkpoint copies the tables'
// rows before it streams.
func (o StreamOptions) copyWanted() bool {
	switch o.InitialCopy {
	case "off":
		return false
	case "on":
		return true
	}
	return !o.FromNow
}

// followsSchema says whether the stream follows the source's DDL: a log
// read (logical or binlog) with --schema-changes follow.
func (o StreamOptions) followsSchema() bool {
	if o.SchemaChanges == "stop" {
		return false
	}
	eng, err := endpoint.EngineOf(o.SourceURL)
	if err != nil {
		return false
	}
	mode, err := endpoint.ResolveMode(eng, o.SourceMode, sluice.Position{})
	return err == nil && mode != ModeTrigger
}

// copySource is the source of a stream's initial copy, read as the stream
// will read it (mode).
func copySource(o StreamOptions, mode string) (tablecopy.Source, error) {
	eng, err := endpoint.EngineOf(o.SourceURL)
	if err != nil {
		return nil, fmt.Errorf("--source: %w", err)
	}
	switch {
	case mode == ModeLogical:
		return pglogical.NewCopySource(o.SourceURL, pglogical.Config{Tables: o.Tables, Stream: o.ID, Logger: o.Logger}), nil
	case mode == ModeBinlog:
		return binlog.NewCopySource(o.SourceURL, binlog.Config{Tables: o.Tables, Logger: o.Logger}), nil
	case mode == ModeTrigger && eng == EnginePostgres:
		return pgtrigger.NewCopySource(o.SourceURL, pgtrigger.Config{Stream: o.ID, Tables: o.Tables, Install: true, Logger: o.Logger}), nil
	case mode == ModeTrigger && eng == EngineMySQL:
		return mytrigger.NewCopySource(o.SourceURL, mytrigger.Config{Stream: o.ID, Tables: o.Tables, Install: true, Logger: o.Logger}), nil
	}
	return nil, fmt.Errorf("--source: %s sources in --source-mode %s cannot be copied", eng, mode)
}

// writtenColumns is the target's WrittenColumns, where it has one: the
// copy leaves out the columns the target generates.
func writtenColumns(tgt target) func(*sluice.Table) []int {
	if w, ok := tgt.(interface {
		WrittenColumns(*sluice.Table) []int
	}); ok {
		return w.WrittenColumns
	}
	return nil
}

// openCopyTarget opens a target connection for a copy worker.
func openCopyTarget(ctx context.Context, topts targetOptions) (tablecopy.Target, error) {
	t, err := endpoint.OpenTarget(ctx, topts)
	if err != nil {
		return nil, err
	}
	ct, ok := t.(tablecopy.Target)
	if !ok {
		t.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("this target cannot write an initial copy; load it yourself and start with --initial-copy=off --from-now")
	}
	return ct, nil
}

// unfinishedCopy refuses to stream into a target that holds part of an
// initial copy: its rows are of a snapshot the stream would not start at.
func unfinishedCopy(ctx context.Context, o StreamOptions, t tablecopy.Target) error {
	p, err := t.ReadPlan(ctx, o.ID)
	if err != nil {
		return Fail(ExitTarget, fmt.Errorf("stream %s: read the copy plan from the target: %w", o.ID, err))
	}
	if p == nil || !p.HandedOff.IsZero() {
		return nil
	}
	done := 0
	for _, c := range p.Chunks {
		if c.Done {
			done++
		}
	}
	return Fail(ExitUsage, fmt.Errorf("stream %s has an unfinished initial copy on the target (%d of %d chunks done, epoch %d) and would now stream without it (--initial-copy=off or --from-now): "+
		"the target's rows are of a snapshot the stream does not start at, so rows would be missing or stale; "+
		"start without --from-now and with --initial-copy auto or on to finish the copy, or empty the target tables and delete the stream's rows from sluice's copy_plan and copy_chunk tables to start over",
		o.ID, done, len(p.Chunks), p.Epoch))
}

// initialCopy copies the stream's tables and returns the position the
// stream starts from, or a zero position when the stream copies nothing.
// gen is the stream's generation on the target, which tgt took: every
// copy transaction is checked against it, as the stream's batches are, so
// that a killed process's late chunk cannot commit over this one's copy.
func initialCopy(ctx context.Context, o StreamOptions, log *slog.Logger, tgt target, gen int64, topts targetOptions, sl *slot, svc *service, store *checkpoint.Store, warned *preflightWarnings) (sluice.Position, error) {
	plan, ok := tgt.(tablecopy.Target)
	if !ok {
		if o.copyWanted() {
			return sluice.Position{}, Fail(ExitUsage, fmt.Errorf("this target cannot write an initial copy; load it yourself and start with --initial-copy=off --from-now"))
		}
		return sluice.Position{}, nil
	}
	if !o.copyWanted() {
		if err := unfinishedCopy(ctx, o, plan); err != nil {
			return sluice.Position{}, err
		}
		return sluice.Position{}, nil
	}
	eng, _ := endpoint.EngineOf(o.SourceURL)
	tgtEng, _ := endpoint.EngineOf(o.TargetURL)
	mode, err := endpoint.ResolveMode(eng, o.SourceMode, sluice.Position{})
	if err != nil {
		return sluice.Position{}, Fail(ExitUsage, err)
	}
	src, err := copySource(o, mode)
	if err != nil {
		return sluice.Position{}, Fail(ExitUsage, err)
	}
	sl.copying(tablecopy.Progress{})
	// The service is up while the copy runs (it may take hours): systemd
	// hears READY=1 with the copy's progress as STATUS, while /readyz
	// says not ready until the hand-off.
	svc.settled()
	mcopy := svc.addCopy(sl)
	defer mcopy()
	lastLog := time.Now()
	tables := endpoint.SourceTableNames(eng, o.Tables)
	res, err := tablecopy.Run(ctx, tablecopy.Config{
		Stream: o.ID,
		Tables: tables,
		Source: src,
		// The stream's own target connection reads and writes the plan
		// and checks the tables; the workers open theirs.
		Target: plan,
		Preflight: func(ctx context.Context, tables []*sluice.Table) error {
			err := tgt.Preflight(ctx, tables)
			warned.flush()
			return err
		},
		Written: writtenColumns(tgt),
		NewTarget: func(ctx context.Context) (tablecopy.Target, error) {
			t, err := openCopyTarget(ctx, topts)
			if f, ok := t.(fencer); ok && gen > 0 {
				f.SetGeneration(o.ID, gen)
			}
			return t, err
		},
		Workers:   o.CopyWorkers,
		ChunkRows: o.CopyChunkRows,
		Digests:   eng == tgtEng,
		Logger:    log,
		Progress: func(p tablecopy.Progress) {
			sl.copying(p)
			if err := WriteCopyStatus(store.Dir(), o.ID, p); err != nil {
				log.Warn("write status file", "err", err)
			}
			switch {
			case o.Progress != nil:
				fmt.Fprintf(o.Progress, "\r%s %s   ", time.Now().Format("15:04:05"), copyLine(p))
				if p.Done {
					fmt.Fprintln(o.Progress)
				}
			case time.Since(lastLog) >= 10*time.Second:
				lastLog = time.Now()
				logCopyProgress(log, o.ID, p)
			}
		},
	})
	if err != nil {
		var se *tablecopy.SourceError
		var te *tablecopy.TargetError
		switch {
		case errors.Is(err, tablecopy.ErrTargetNotEmpty):
			err = Fail(ExitUsage, err)
		case errors.As(err, &se):
			err = Fail(ExitSource, err)
		case errors.As(err, &te):
			err = Fail(ExitTarget, err)
		}
		return sluice.Position{}, err
	}
	if o.CreateTables != "off" {
		if err := finishTables(ctx, o, log); err != nil {
			return sluice.Position{}, err
		}
		forgetTables(tgt)
	}
	return res.Position, nil
}

// forgetTables makes a target read its tables' catalog again: sluice
// changed their schema since it opened.
func forgetTables(t target) {
	if f, ok := t.(interface{ ForgetTables() }); ok {
		f.ForgetTables()
	}
}

// finishCopy records the hand-off on the target's copy plan, once the
// stream's start checkpoint holds the copy's position.
func finishCopy(ctx context.Context, log *slog.Logger, tgt target, id string, pos sluice.Position) {
	ct, ok := tgt.(tablecopy.Target)
	if !ok {
		return
	}
	if err := ct.FinishCopy(ctx, id, pos); err != nil {
		// The checkpoint is what the stream resumes from; the plan's mark
		// is a record for people.
		log.Warn("mark the initial copy handed off on the target", "stream", id, "err", err)
		return
	}
	log.Info("initial copy handed off to the stream", "stream", id, "position", pos.String())
}

// copyLine is the copy's one-line summary (terminal, sync status, systemd
// STATUS, /readyz).
func copyLine(p tablecopy.Progress) string {
	var b strings.Builder
	if p.Done {
		b.WriteString("initial copy done: ")
	} else {
		b.WriteString("initial copy: ")
	}
	fmt.Fprintf(&b, "%d of ~%d rows", p.Rows, p.Total)
	if p.Total > 0 {
		fmt.Fprintf(&b, " (%.0f%%)", min(100, 100*float64(p.Rows)/float64(p.Total)))
	}
	fmt.Fprintf(&b, ", %s, %.0f rows/s", byteSize(p.Bytes), p.Rate)
	if p.ETA > 0 {
		fmt.Fprintf(&b, ", ETA %s", p.ETA.Round(time.Second))
	}
	var busy []string
	for _, t := range p.Tables {
		if t.ChunksDone < t.Chunks {
			busy = append(busy, fmt.Sprintf("%s %.0f%%", t.Table, t.Percent()))
		}
	}
	if len(busy) > 0 && !p.Done {
		if len(busy) > 3 {
			busy = append(busy[:3], fmt.Sprintf("+%d more", len(busy)-3))
		}
		fmt.Fprintf(&b, "; %s", strings.Join(busy, ", "))
	}
	return b.String()
}

func logCopyProgress(log *slog.Logger, id string, p tablecopy.Progress) {
	log.Info("initial copy progress", "stream", id, "rows", p.Rows, "rows_estimate", p.Total, "bytes", p.Bytes,
		"rows_per_s", int64(p.Rate), "eta", p.ETA.Round(time.Second).String())
	for _, t := range p.Tables {
		if t.ChunksDone < t.Chunks {
			log.Info("initial copy progress", "stream", id, "table", t.Table.String(), "rows", t.Rows, "rows_estimate", t.Total,
				"bytes", t.Bytes, "percent", fmt.Sprintf("%.1f", t.Percent()), "chunks_done", t.ChunksDone, "chunks", t.Chunks)
		}
	}
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
