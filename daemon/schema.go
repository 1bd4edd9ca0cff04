package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/schema"
)

// OpenSchemaDB opens a session for reading a database's catalog or
// changing its schema (see package schema); close it with the function
// returned.
func OpenSchemaDB(ctx context.Context, rawURL string) (*schema.DB, func(), error) {
	eng, err := endpoint.EngineOf(rawURL)
	if err != nil {
		return nil, nil, err
	}
	switch eng {
	case EnginePostgres:
		conn, err := endpoint.ConnectPostgresUnprepared(ctx, rawURL)
		if err != nil {
			return nil, nil, err
		}
		cfg := conn.Config()
		return schema.NewPG(conn, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)), func() { conn.Close(context.WithoutCancel(ctx)) }, nil
	case EngineMySQL:
		cfg, err := connstr.ParseMySQL(rawURL)
		if err != nil {
			return nil, nil, err
		}
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, nil, err
		}
		db := sql.OpenDB(connector)
		d, err := schema.NewMy(ctx, db, cfg.DBName, cfg.Addr)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return d, func() { db.Close() }, nil
	}
	return nil, nil, fmt.Errorf("%s databases are not supported", eng)
}

// SchemaSides opens sessions on a stream's source and target for schema
// work, and returns the plan options of the pair; close both with the
// function returned. Errors are tagged with the side's exit code.
func SchemaSides(ctx context.Context, o StreamOptions) (src, tgt *schema.DB, opt schema.PlanOptions, closeAll func(), err error) {
	src, closeSrc, err := OpenSchemaDB(ctx, o.SourceURL)
	if err != nil {
		return nil, nil, opt, nil, Fail(ExitSource, fmt.Errorf("source: %w", err))
	}
	tgt, closeTgt, err := OpenSchemaDB(ctx, o.TargetURL)
	if err != nil {
		closeSrc()
		return nil, nil, opt, nil, Fail(ExitTarget, fmt.Errorf("target: %w", err))
	}
	mode, _ := endpoint.ResolveMode(Engine(src.Engine), o.SourceMode, sluice.Position{})
	opt = schema.PlanOptions{From: src.Engine, To: tgt.Engine, Flavor: tgt.Flavor, OmitsGenerated: mode == ModeLogical}
	return src, tgt, opt, func() { closeTgt(); closeSrc() }, nil
}

// StreamTables are a stream's tables as its source names them.
func StreamTables(o StreamOptions) []sluice.TableName {
	eng, _ := endpoint.EngineOf(o.SourceURL)
	return endpoint.SourceTableNames(eng, o.Tables)
}

// createTables creates the target tables that a new stream's initial copy
// will fill and that are missing, from the source's definitions: the
// tables with their primary keys now, their unique keys, indexes and
// foreign keys after the copy (finishTables). The steps are recorded on
// the target before any runs, so that a run killed midway finishes them.
func createTables(ctx context.Context, o StreamOptions, log *slog.Logger) error {
	src, tgt, opt, closeAll, err := SchemaSides(ctx, o)
	if err != nil {
		return err
	}
	defer closeAll()
	j := schema.NewJournal(tgt, o.ID)
	// Steps recorded by a run that stopped midway run first.
	if n, err := j.Run(ctx, log, schema.PhaseCreate); err != nil {
		return Fail(ExitTarget, err)
	} else if n > 0 {
		log.Info("finished creating target tables begun by an earlier run", "stream", o.ID, "statements", n)
	}
	names := StreamTables(o)
	tables, err := src.ReadTables(ctx, names)
	if err != nil {
		return Fail(ExitSource, err)
	}
	var missing []*schema.Table
	for _, t := range tables {
		have, err := tgt.ReadTable(ctx, schema.TargetName(opt.From, opt.To, t.Name))
		if err != nil {
			return Fail(ExitTarget, err)
		}
		if have == nil {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	opt.Streamed = names
	plan, err := schema.BuildPlan(missing, opt)
	if err != nil {
		return Fail(ExitTarget, fmt.Errorf("create the missing target tables on %s: %w; (--create-tables=off leaves the target's tables to you)", tgt, err))
	}
	if err := j.Record(ctx, plan); err != nil {
		return Fail(ExitTarget, err)
	}
	if _, err := j.Run(ctx, log, schema.PhaseCreate); err != nil {
		return Fail(ExitTarget, err)
	}
	for _, tp := range plan.Tables {
		log.Info("created target table", "stream", o.ID, "table", tp.Target.String(), "source_table", tp.Source.String(),
			"indexes_after_copy", len(tp.Indexes), "foreign_keys_after_copy", len(tp.ForeignKeys))
		for _, n := range tp.Notes {
			log.Info("created target table differs from the source", "stream", o.ID, "table", tp.Target.String(), "note", n)
		}
	}
	return nil
}

// finishTables runs the steps createTables recorded for after the copy:
// the unique keys, indexes and foreign keys of the tables it created.
func finishTables(ctx context.Context, o StreamOptions, log *slog.Logger) error {
	tgt, closeTgt, err := OpenSchemaDB(ctx, o.TargetURL)
	if err != nil {
		return Fail(ExitTarget, fmt.Errorf("target: %w", err))
	}
	defer closeTgt()
	n, err := schema.NewJournal(tgt, o.ID).Run(ctx, log, schema.PhaseIndexes, schema.PhaseForeignKeys)
	if err != nil {
		return Fail(ExitTarget, fmt.Errorf("after the initial copy: %w", err))
	}
	if n > 0 {
		log.Info("created the unique keys, indexes and foreign keys of the created target tables after the initial copy", "stream", o.ID, "statements", n)
	}
	return nil
}

// schemaFollower follows a stream's schema changes (see schema.Follower)
// over sessions of its own, opened at the first change and again after
// one failed.
type schemaFollower struct {
	o        StreamOptions
	log      *slog.Logger
	f        *schema.Follower
	closeAll func()
	// defs records each followed table's new definition, for the lanes'
	// connections opened after it.
	defs *tableDefs
}

// tableDefs is the stream's tables as the schema changes applied so far
// left them.
type tableDefs struct {
	mu     sync.Mutex
	tables []*sluice.Table
}

func newTableDefs(tables []*sluice.Table) *tableDefs {
	return &tableDefs{tables: slices.Clone(tables)}
}

func (d *tableDefs) list() []*sluice.Table {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.tables)
}

// set replaces the definition of t's table.
func (d *tableDefs) set(t *sluice.Table) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, old := range d.tables {
		if old.Name == t.Name {
			d.tables[i] = t
			return
		}
	}
}

func (sf *schemaFollower) statements(ctx context.Context, c *sluice.Change) ([]string, error) {
	stmts, err := sf.follow(ctx, c)
	if err == nil && sf.defs != nil && c.Table != nil {
		sf.defs.set(c.Table)
	}
	return stmts, err
}

func (sf *schemaFollower) follow(ctx context.Context, c *sluice.Change) ([]string, error) {
	if sf.f == nil {
		src, tgt, opt, closeAll, err := SchemaSides(ctx, sf.o)
		if err != nil {
			return nil, &apply.RetryableError{Err: err}
		}
		opt.Streamed = StreamTables(sf.o)
		sf.f = &schema.Follower{Stream: sf.o.ID, Mode: sf.o.SchemaChanges, Opt: opt, Target: tgt, Source: src, Log: sf.log}
		sf.closeAll = closeAll
	}
	stmts, err := sf.f.Statements(ctx, c)
	if _, retry := apply.IsRetryable(err); retry {
		sf.close()
	}
	return stmts, err
}

func (sf *schemaFollower) close() {
	if sf.closeAll != nil {
		sf.closeAll()
	}
	sf.f, sf.closeAll = nil, nil
}

// reconcile makes a following stream's target ready for the source's
// tables as the reader describes them at start, when its preflight
// refused them for what the stream's DDL will change anyway: a type the
// source widened, NULL allowed, is changed on the target now (the target
// loses nothing); a column the target lacks is left out of the check, for
// the stream adds it when it meets the source's ADD COLUMN (a change that
// carries it before then stops the stream, naming it). It returns the
// tables the target is to be checked with, and whether it changed
// anything.
func reconcile(ctx context.Context, o StreamOptions, log *slog.Logger, tables []*sluice.Table) ([]*sluice.Table, bool, error) {
	src, tgt, opt, closeAll, err := SchemaSides(ctx, o)
	if err != nil {
		return nil, false, err
	}
	defer closeAll()
	out := slices.Clone(tables)
	changed := false
	for i, t := range tables {
		st, err := src.ReadTable(ctx, t.Name)
		if err != nil || st == nil {
			return nil, false, err
		}
		dt, err := tgt.ReadTable(ctx, schema.TargetName(opt.From, opt.To, t.Name))
		if err != nil || dt == nil {
			return nil, false, err
		}
		var missing []string
		diffs := schema.Diff(st, dt, opt)
		for _, d := range diffs {
			switch {
			case d.Kind == schema.DiffColumnMissing && t.ColumnIndex(d.Object) >= 0 && !slices.Contains(t.KeyNames(), d.Object):
				if renamed := renamedFrom(st, dt, d.Object, diffs, opt); renamed != "" {
					return nil, false, Fail(ExitTarget, fmt.Errorf("table %s: column %s is on the source but not on the target, and column %s of its type on the target but not on the source: if the source renamed %s to %s while sluice was stopped, run on the target ALTER TABLE %s RENAME COLUMN %s TO %s, then start sluice again; "+
						"if the source added %s and dropped %s, drop %s from the target and start again (sluice adds %s when the stream meets the ADD COLUMN)",
						t.Name, d.Object, renamed, renamed, d.Object, schema.TargetName(opt.From, opt.To, t.Name), renamed, d.Object, d.Object, renamed, renamed, d.Object))
				}
				missing = append(missing, d.Object)
			case d.Safe && d.Fix != "":
				if err := tgt.Exec(ctx, d.Fix); err != nil {
					return nil, false, fmt.Errorf("on %s: %s: %w", tgt, d.Fix, err)
				}
				log.Warn("the target differed from the source in a way the stream follows: changed at start", "stream", o.ID, "table", t.Name.String(), "difference", d.Kind+" "+d.Object, "sql", d.Fix)
				changed = true
			}
		}
		if len(missing) > 0 {
			log.Warn("source columns missing on the target: the stream adds each when it meets the source's ADD COLUMN; a change that carries one before (it was added while sluice was stopped, with no change to its table since the stream's checkpoint, or dropped from the target by hand) stops the stream, naming it",
				"stream", o.ID, "table", t.Name.String(), "columns", strings.Join(missing, ", "))
			out[i] = withoutColumns(t, missing)
			changed = true
		}
	}
	return out, changed, nil
}

// renamedFrom names a target-only column that the source's column col
// may have been renamed from: one whose type holds col's values, while no
// change said so (a rename while sluice was stopped). "" when none.
func renamedFrom(st, dt *schema.Table, col string, diffs []schema.Difference, opt schema.PlanOptions) string {
	sc := st.Column(col)
	for _, d := range diffs {
		if d.Kind != schema.DiffColumnExtra {
			continue
		}
		if dc := dt.Column(d.Object); dc != nil && sc != nil && schema.TypeHolds(opt, sc.Type, dc.Type, sc.Labels) {
			return d.Object
		}
	}
	return ""
}

// withoutColumns is t without some of its columns (none of its key).
func withoutColumns(t *sluice.Table, drop []string) *sluice.Table {
	out := &sluice.Table{Name: t.Name}
	keys := t.KeyNames()
	for _, c := range t.Columns {
		if !slices.Contains(drop, c.Name) {
			out.Columns = append(out.Columns, c)
		}
	}
	for _, k := range keys {
		out.Key = append(out.Key, out.ColumnIndex(k))
	}
	return out
}
