package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/schema"
)

// Exit codes of schema diff (the others follow the table in
// docs/operating.md, Exit codes).
const exitDrift = 1

func schemaCommand() *cli.Command {
	flags := func() []cli.Flag {
		return append(syncStartFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"})
	}
	return &cli.Command{
		Name:  "schema",
		Usage: "create the target's tables from the source's definitions, or compare the two (same flags as sync start)",
		Subcommands: []*cli.Command{
			{
				Name:   "plan",
				Usage:  "print the DDL that creates the target tables that are missing (sync start runs it on a stream that copies): tables and primary keys, then unique keys, indexes and foreign keys",
				Flags:  flags(),
				Action: func(c *cli.Context) error { return schemaRun(c, schemaPlan) },
			},
			{
				Name:   "apply",
				Usage:  "create the target tables that are missing, with their unique keys, indexes and foreign keys, as schema plan prints them",
				Flags:  flags(),
				Action: func(c *cli.Context) error { return schemaRun(c, schemaApply) },
			},
			{
				Name:   "diff",
				Usage:  "compare each source table with the target's and name every difference (columns, types, nullability, keys, indexes, foreign keys); exit 1 on any",
				Flags:  flags(),
				Action: func(c *cli.Context) error { return schemaRun(c, schemaDiff) },
			},
		},
	}
}

// schemaSides is one stream's source and target, read.
type schemaSides struct {
	stream   string
	src, tgt *schema.DB
	opt      schema.PlanOptions
	tables   []*schema.Table // the source's
	targets  []*schema.Table // the target's, aligned; nil where missing
}

func schemaRun(c *cli.Context, f func(ctx context.Context, w io.Writer, asJSON bool, sides []*schemaSides) error) error {
	streams, err := resolveStreams(c)
	if err != nil {
		return err
	}
	var all []*schemaSides
	for _, s := range streams {
		if _, _, err := s.ApplySecrets(); err != nil {
			return usageErr(err)
		}
		if err := requireStream(s); err != nil {
			return err
		}
		o, err := streamOptions(s)
		if err != nil {
			return err
		}
		sd, closeAll, err := readSides(c.Context, o)
		if err != nil {
			return err
		}
		defer closeAll()
		all = append(all, sd)
	}
	return f(c.Context, c.App.Writer, c.Bool("json"), all)
}

// requireStream refuses a stream without a source, target or tables.
func requireStream(s config.Stream) error {
	var missing []error
	if s.Source == "" {
		missing = append(missing, fmt.Errorf("stream %s: missing source (--source, or source in a config file)", s.StreamID))
	}
	if s.Target == "" {
		missing = append(missing, fmt.Errorf("stream %s: missing target (--target, or target in a config file)", s.StreamID))
	}
	return usageErr(errors.Join(missing...))
}

// readSides opens a stream's source and target and reads its tables on
// both.
func readSides(ctx context.Context, o daemon.StreamOptions) (*schemaSides, func(), error) {
	src, tgt, opt, closeAll, err := daemon.SchemaSides(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	sd := &schemaSides{stream: o.ID, src: src, tgt: tgt, opt: opt}
	opt.Streamed = daemon.StreamTables(o)
	sd.opt = opt
	if sd.tables, err = src.ReadTables(ctx, opt.Streamed); err != nil {
		closeAll()
		return nil, nil, daemon.Fail(daemon.ExitSource, err)
	}
	for _, t := range sd.tables {
		have, err := tgt.ReadTable(ctx, schema.TargetName(opt.From, opt.To, t.Name))
		if err != nil {
			closeAll()
			return nil, nil, daemon.Fail(daemon.ExitTarget, err)
		}
		sd.targets = append(sd.targets, have)
	}
	return sd, closeAll, nil
}

// missing returns the source tables the target lacks.
func (sd *schemaSides) missing() []*schema.Table {
	var out []*schema.Table
	for i, t := range sd.tables {
		if sd.targets[i] == nil {
			out = append(out, t)
		}
	}
	return out
}

func (sd *schemaSides) existing() []sluice.TableName {
	var out []sluice.TableName
	for i, t := range sd.tables {
		if sd.targets[i] != nil {
			out = append(out, t.Name)
		}
	}
	return out
}

// planJSON is schema plan's --json form of one stream.
type planJSON struct {
	Stream   string             `json:"stream"`
	Plan     *schema.Plan       `json:"plan"`
	Existing []sluice.TableName `json:"existing,omitempty"`
	Refused  []string           `json:"refused,omitempty"`
}

func refusals(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, refusals(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

func schemaPlan(ctx context.Context, w io.Writer, asJSON bool, sides []*schemaSides) error {
	var failed error
	var out []planJSON
	for _, sd := range sides {
		p, err := schema.BuildPlan(sd.missing(), sd.opt)
		if err != nil && failed == nil {
			failed = daemon.Fail(daemon.ExitTarget, fmt.Errorf("stream %s: %w", sd.stream, err))
		}
		if asJSON {
			out = append(out, planJSON{Stream: sd.stream, Plan: p, Existing: sd.existing(), Refused: refusals(err)})
			continue
		}
		fmt.Fprintf(w, "-- stream %s: source %s, target %s\n", sd.stream, sd.src, sd.tgt)
		for _, n := range sd.existing() {
			fmt.Fprintf(w, "-- table %s exists on the target: not created (sluice schema diff compares it)\n", n)
		}
		for _, r := range refusals(err) {
			fmt.Fprintf(w, "-- refused: %s\n", r)
		}
		fmt.Fprint(w, p.Text())
	}
	if asJSON {
		if err := writeJSON(w, out); err != nil {
			return err
		}
	}
	return failed
}

func schemaApply(ctx context.Context, w io.Writer, asJSON bool, sides []*schemaSides) error {
	type applied struct {
		Stream  string             `json:"stream"`
		Created []sluice.TableName `json:"created"`
		Ran     []string           `json:"statements"`
	}
	var out []applied
	for _, sd := range sides {
		p, err := schema.BuildPlan(sd.missing(), sd.opt)
		if err != nil {
			return daemon.Fail(daemon.ExitTarget, fmt.Errorf("stream %s: %w; nothing was created", sd.stream, err))
		}
		a := applied{Stream: sd.stream}
		for _, ph := range []schema.Phase{schema.PhaseCreate, schema.PhaseIndexes, schema.PhaseForeignKeys} {
			steps := p.Steps(ph)
			if err := sd.tgt.Run(ctx, slog.New(slog.DiscardHandler), steps, nil); err != nil {
				return daemon.Fail(daemon.ExitTarget, fmt.Errorf("stream %s: %w", sd.stream, err))
			}
			for _, s := range steps {
				a.Ran = append(a.Ran, s.SQL)
			}
		}
		for _, tp := range p.Tables {
			a.Created = append(a.Created, tp.Target)
			if !asJSON {
				fmt.Fprintf(w, "created table %s (source %s) on %s\n", tp.Target, tp.Source, sd.tgt)
				for _, n := range tp.Notes {
					fmt.Fprintf(w, "  note: %s\n", n)
				}
			}
		}
		if !asJSON && len(p.Tables) == 0 {
			fmt.Fprintf(w, "stream %s: every table exists on %s; nothing to create (sluice schema diff compares them)\n", sd.stream, sd.tgt)
		}
		out = append(out, a)
	}
	if asJSON {
		return writeJSON(w, out)
	}
	return nil
}

// tableDiff is schema diff's result for one table.
type tableDiff struct {
	Stream      string              `json:"stream"`
	Table       sluice.TableName    `json:"table"`
	Target      sluice.TableName    `json:"target"`
	Differences []schema.Difference `json:"differences"`
}

// Diffs compares a stream's tables on both sides.
func (sd *schemaSides) diffs() []tableDiff {
	var out []tableDiff
	for i, t := range sd.tables {
		out = append(out, tableDiff{Stream: sd.stream, Table: t.Name, Target: schema.TargetName(sd.opt.From, sd.opt.To, t.Name),
			Differences: schema.Diff(t, sd.targets[i], sd.opt)})
	}
	return out
}

func schemaDiff(ctx context.Context, w io.Writer, asJSON bool, sides []*schemaSides) error {
	var all []tableDiff
	drift := 0
	for _, sd := range sides {
		for _, td := range sd.diffs() {
			drift += len(td.Differences)
			all = append(all, td)
		}
	}
	if asJSON {
		if err := writeJSON(w, all); err != nil {
			return err
		}
	} else {
		for _, td := range all {
			if len(td.Differences) == 0 {
				fmt.Fprintf(w, "table %s: the same on the target (%s)\n", td.Table, td.Target)
				continue
			}
			fmt.Fprintf(w, "table %s (target %s):\n", td.Table, td.Target)
			for _, d := range td.Differences {
				mark := "  "
				if d.Blocking {
					mark = "! "
				}
				fmt.Fprintf(w, "  %s%s\n", mark, d)
			}
		}
	}
	if drift > 0 {
		return daemon.Fail(exitDrift, fmt.Errorf("schema diff: %d difference(s) between the source's and the target's tables (marked ! where sync start refuses them)", drift))
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
