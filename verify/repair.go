package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/pglogical"
)

// RepairTarget writes a repair batch in one target transaction that, for
// a stream, holds the stream's fence row exclusively while read runs and
// while the rows are written (apply/postgres, apply/mysql and
// apply/typemap targets: their Repair).
type RepairTarget interface {
	Repair(ctx context.Context, stream string, tables []*sluice.Table, read func(ctx context.Context) (*apply.Batch, error)) error
}

// RowReader reads the source's current rows by primary key, each value in
// the text the stream's reader gives it, inside one snapshot begun when
// the reader was opened.
type RowReader interface {
	// ReadKeys emits the rows of t whose keys are keys; a key without a
	// row is left out.
	ReadKeys(ctx context.Context, t *sluice.Table, keys []sluice.Row, emit func([]sluice.Row) error) error
	Close() error
}

// RepairConfig says where a repair writes and how it reads the source.
type RepairConfig struct {
	Target RepairTarget
	// OpenRows begins a source snapshot and returns its reader. Repair
	// calls it once the target holds the stream's fence. With settle > 0
	// (a stream that reads the source's log) the snapshot must also hold
	// every transaction the log has given so far, which the stream may
	// have applied though other sessions do not see it yet (a commit
	// waiting for synchronous standbys or semi-synchronous replicas): it
	// waits up to settle for them, then fails.
	OpenRows func(ctx context.Context, settle time.Duration) (RowReader, error)
}

// RepairReport is what a repair wrote and what verifying those keys again
// found.
type RepairReport struct {
	Tables []*TableRepair `json:"tables"`
	// After is the comparison of the repaired keys, after the repair.
	After *Report `json:"after"`
	// Equal: After found every repaired key equal.
	Equal bool `json:"equal"`
	// More names the tables with more differences than verify keeps
	// (Config.MaxDiffs): only those kept were repaired.
	More []string `json:"more_differences,omitempty"`
}

// TableRepair is what a repair wrote to one table: the keys whose source
// rows it wrote (present on the source) and the keys it deleted (absent
// on the source), as the source spells them.
type TableRepair struct {
	Source  string   `json:"source"`
	Target  string   `json:"target"`
	Written []string `json:"written"`
	Deleted []string `json:"deleted"`
}

// Keys counts the keys repaired.
func (r *RepairReport) Keys() int {
	n := 0
	for _, t := range r.Tables {
		n += len(t.Written) + len(t.Deleted)
	}
	return n
}

// repairTable is one table to repair: its keys (raw, as verify found
// them) and its source description as the target's apply path takes it.
type repairTable struct {
	tb   *table
	desc *sluice.Table
	keys []sluice.Row
	out  *TableRepair
}

// Repair writes, for every differing key of rep (a report of Run with
// cfg), the source's current row to the target, or deletes it from the
// target when the source has none, in one target transaction through the
// target's normal apply statements (deletes, then upserts, as a batch of
// the stream); then it compares those keys again, as Run does, in
// RepairReport.After. With cfg.Stream the transaction holds the stream's
// fence (see RepairTarget) and the source rows are read only once it is
// held, so that the running stream converges on top of them. Tables that
// differ without a primary key cannot be repaired: an error says so.
// Keys reported unsettled are not repaired.
func Repair(ctx context.Context, cfg Config, rc RepairConfig, rep *Report) (*RepairReport, error) {
	cfg.defaults()
	start := time.Now()
	v := &run{cfg: cfg, start: start, rounds: make(chan struct{}, 2*cfg.Workers)}
	if cfg.Stream != "" {
		if err := v.streamKind(ctx); err != nil {
			return nil, err
		}
	}
	if len(rep.Tables) != len(cfg.Tables) {
		return nil, fmt.Errorf("repair: the report holds %d tables, the run %d", len(rep.Tables), len(cfg.Tables))
	}
	var todo []*repairTable
	for i, tr := range rep.Tables {
		if tr.NoKey {
			return nil, fmt.Errorf("repair: table %s differs but has no primary key: its rows cannot be named, so they cannot be repaired one by one (copy the table again)", tr.Source)
		}
		if len(tr.Diffs) == 0 {
			continue
		}
		tb, err := v.table(ctx, cfg.Tables[i])
		if err != nil {
			return nil, err
		}
		desc := *tb.desc
		if db, ok := cfg.Source.(interface{ Database() string }); ok && desc.Name.Schema == "" {
			// A MySQL source's reader names its tables with their database.
			desc.Name.Schema = db.Database()
		}
		rt := &repairTable{tb: tb, desc: &desc, out: &TableRepair{Source: tr.Source, Target: tr.Target}}
		for _, d := range tr.Diffs {
			rt.keys = append(rt.keys, d.Raw)
		}
		todo = append(todo, rt)
	}
	out := &RepairReport{}
	for _, tr := range rep.Tables {
		if tr.Truncated {
			out.More = append(out.More, tr.Source)
		}
	}
	if len(todo) == 0 {
		out.After, out.Equal = &Report{Live: cfg.Stream != ""}, true
		return out, nil
	}
	tables := make([]*sluice.Table, len(todo))
	for i, rt := range todo {
		tables[i] = rt.desc
	}
	var settle time.Duration
	if v.kind == pglogical.Kind || v.kind == binlog.Kind {
		// The log gives a commit before other sessions see it (see
		// RepairConfig.OpenRows).
		settle = cfg.CatchUp
	}
	err := rc.Target.Repair(ctx, cfg.Stream, tables, func(ctx context.Context) (*apply.Batch, error) {
		rr, err := rc.OpenRows(ctx, settle)
		if err != nil {
			return nil, fmt.Errorf("repair: begin a snapshot of the source %s: %w", cfg.Source.Where(), err)
		}
		defer rr.Close()
		b := &apply.Batch{}
		for _, rt := range todo {
			tb, err := rt.batch(ctx, rr)
			if err != nil {
				return nil, err
			}
			b.Tables = append(b.Tables, tb)
			b.Rows += len(tb.Deletes) + len(tb.Upserts)
		}
		return b, nil
	})
	if err != nil {
		return nil, fmt.Errorf("repair: nothing was written: %w", err)
	}
	after := &Report{Live: cfg.Stream != ""}
	for _, rt := range todo {
		out.Tables = append(out.Tables, rt.out)
		tr := &TableReport{Source: rt.out.Source, Target: rt.out.Target}
		if err := v.compareRows(ctx, rt.tb, tr, rt.tb.src.keysWhere(rt.keys), rt.tb.tgt.keysWhere(rt.keys)); err != nil {
			return nil, fmt.Errorf("repair: the rows are written; verifying them again failed: %w", err)
		}
		after.Tables = append(after.Tables, tr)
	}
	after.Elapsed = time.Since(start)
	out.After = after
	out.Equal = after.Differences() == 0 && after.Unsettled() == 0
	return out, nil
}

// batch reads the table's keys on the source and returns the work that
// makes the target hold the same: every row read as an upsert, every key
// without a row as a delete. A key whose text the reader spells otherwise
// than verify found it (a MySQL ZEROFILL key) is deleted and written
// again, which ends the same: the deletes run before the upserts.
func (rt *repairTable) batch(ctx context.Context, rr RowReader) (*apply.TableBatch, error) {
	tb := &apply.TableBatch{Table: rt.desc}
	present := map[string]bool{}
	err := rr.ReadKeys(ctx, rt.desc, rt.keys, func(rows []sluice.Row) error {
		for _, r := range rows {
			r = append(sluice.Row(nil), r...) // the reader may reuse it
			tb.Upserts = append(tb.Upserts, r)
			k := rt.desc.FormatKey(rt.desc.KeyOf(r))
			present[k] = true
			rt.out.Written = append(rt.out.Written, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("repair: read %d rows of table %s on the source: %w", len(rt.keys), rt.desc.Name, err)
	}
	for _, k := range rt.keys {
		if name := rt.desc.FormatKey(k); !present[name] {
			tb.Deletes = append(tb.Deletes, k)
			rt.out.Deleted = append(rt.out.Deleted, name)
		}
	}
	return tb, nil
}

// OpenRows returns how to read the source side's rows for a repair (see
// RepairConfig.OpenRows): raw is the source's connection string, as Open
// took it.
func OpenRows(raw string, source Side) func(ctx context.Context, settle time.Duration) (RowReader, error) {
	return func(ctx context.Context, settle time.Duration) (RowReader, error) {
		switch s := source.(type) {
		case *pgSide:
			if settle > 0 {
				if err := s.awaitCommitsSeen(ctx, settle); err != nil {
					return nil, err
				}
			}
			return s.beginRows(ctx)
		case *mySide:
			return binlog.OpenKeyReader(ctx, raw, settle)
		}
		return nil, errors.New("repair: the source is neither PostgreSQL nor MySQL")
	}
}

// pgRows reads rows in a snapshot of a PostgreSQL source as ::text under
// keyrange.PGSetLocal (which the snapshot sets): the text both stream
// readers and the initial copy give.
type pgRows struct{ snap *pgSnap }

func (s *pgSide) beginRows(ctx context.Context) (RowReader, error) {
	snap, err := s.Begin(ctx)
	if err != nil {
		return nil, err
	}
	p := &pgRows{snap: snap.(*pgSnap)}
	// The snapshot is taken by the transaction's first query: now.
	if _, err := p.snap.Query(ctx, "SELECT 1"); err != nil {
		snap.Close()
		return nil, fmt.Errorf("begin a snapshot on %s: %w", s.Where(), err)
	}
	return p, nil
}

func (p *pgRows) ReadKeys(ctx context.Context, t *sluice.Table, keys []sluice.Row, emit func([]sluice.Row) error) error {
	sp := &spec{dialect: PostgreSQL}
	sel := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		sel[i] = quoteIdent(PostgreSQL, c.Name) + "::text"
	}
	for _, k := range t.Key {
		sp.keyIdents = append(sp.keyIdents, quoteIdent(PostgreSQL, t.Columns[k].Name))
	}
	rows, err := p.snap.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+quoteTable(PostgreSQL, t.Name)+" WHERE "+sp.keysWhere(keys))
	if err != nil {
		return err
	}
	out := make([]sluice.Row, len(rows))
	for i, r := range rows {
		row := make(sluice.Row, len(r))
		for j, v := range r {
			if v == nil {
				row[j] = sluice.Null
			} else {
				row[j] = sluice.Text(*v)
			}
		}
		out[i] = row
	}
	return emit(out)
}

func (p *pgRows) Close() error {
	p.snap.Close()
	return nil
}
