package mysql

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// statement is one statement of a batch and what it does, for errors.
type statement struct {
	table *sluice.Table // nil for the checkpoint
	sql   string
	what  string // e.g. "upsert of 500 rows to db.orders"
	// guard: an upsert carrying the unique-key guard, whose failure sets a
	// primary key column to NULL.
	guard bool
	// keyCheck marks an ordered key change and the check after it, which
	// fails when the change found no row to move.
	keyCheck bool
	// rowCheck marks the check after an update of rows with values the
	// source did not send, which fails when one of them is missing (see
	// buildUpdates).
	rowCheck bool
	// fence marks the fence check (see Fence).
	fence bool
	// chain marks the chain check (see ApplyAfter).
	chain bool
	// follows: the statement must run right after the one before it (it
	// reads ROW_COUNT()), with no step marker in between; a failure of it
	// is reported as the one before it.
	follows bool
}

// plan turns a batch into statements: per compacted table its truncate,
// its moves in place (with their checks), its deletes, then (for a table
// with nullable unique secondary keys) the
// release of the unique values that change, then its upserts grouped by
// the set of columns present; then the ordered changes, one statement each,
// in source order, each after the foreign-key actions it fired on the
// source (cascade.go); part after part (apply.Batch.Next).
func (t *Target) plan(ctx context.Context, b *apply.Batch, perRow bool) ([]statement, error) {
	return apply.AppendParts(nil, b, func(stmts []statement, part *apply.Batch) ([]statement, error) {
		return t.planPart(ctx, stmts, part, perRow)
	})
}

// planPart appends the statements of one part of a batch (see plan).
func (t *Target) planPart(ctx context.Context, stmts []statement, b *apply.Batch, perRow bool) ([]statement, error) {
	limit := t.maxPacket - 256
	if perRow {
		limit = 0 // one row per statement
	}
	for _, tb := range b.Tables {
		d, err := t.describe(ctx, tb.Table)
		if err != nil {
			return nil, err
		}
		if tb.Truncate {
			stmts = append(stmts, statement{table: d.src, sql: buildTruncate(d.ident), what: "truncate of " + d.display})
		}
		for _, mv := range tb.Moves {
			if stmts, err = d.appendKeyChange(stmts, mv.Key, mv.Row); err != nil {
				return nil, err
			}
		}
		stmts, err = d.appendDeletes(stmts, tb.Deletes, limit)
		if err != nil {
			return nil, err
		}
		stmts, err = d.appendRelease(stmts, tb.Upserts, limit)
		if err != nil {
			return nil, err
		}
		stmts, err = d.appendUpserts(stmts, tb.Upserts, limit)
		if err != nil {
			return nil, err
		}
	}
	for i := range b.Ordered {
		c := &b.Ordered[i]
		d, err := t.describe(ctx, c.Table)
		if err != nil {
			return nil, err
		}
		fired := i < len(b.Cascades) && len(b.Cascades[i]) > 0
		if fired {
			if stmts, err = t.appendCascades(ctx, stmts, d, c, b.Cascades[i]); err != nil {
				return nil, err
			}
		}
		switch c.Op {
		case sluice.OpInsert:
			stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, 0)
		case sluice.OpUpdate:
			switch {
			case c.Key != nil && !apply.KeysEqual(c.Key, c.Table.KeyOf(c.Row)) && fired && !apply.HasUnchanged(c.Row):
				// A key change whose actions sluice carried out just
				// before: a delete and an insert, as compaction writes
				// it, which a batch applied again survives (its actions
				// too find their rows by the old key's values).
				if stmts, err = d.appendDeletes(stmts, []sluice.Row{c.Key}, 0); err == nil {
					stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, 0)
				}
			case c.Key != nil && !apply.KeysEqual(c.Key, c.Table.KeyOf(c.Row)):
				stmts, err = d.appendKeyChange(stmts, c.Key, c.Row)
			default:
				stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, 0)
			}
		case sluice.OpDelete:
			stmts, err = d.appendDeletes(stmts, []sluice.Row{c.Key}, 0)
		case sluice.OpTruncate:
			stmts = append(stmts, statement{table: d.src, sql: buildTruncate(d.ident), what: "truncate of " + d.display})
		}
		if err != nil {
			return nil, err
		}
	}
	return stmts, nil
}

// appendKeyChange adds the update that moves the row at old to img's key
// in place, leaving the columns img does not carry as they are, and the
// check that it found the row.
func (d *tableDesc) appendKeyChange(stmts []statement, old, img sluice.Row) ([]statement, error) {
	if len(img) != len(d.cols) || len(old) != len(d.src.Key) {
		return nil, fmt.Errorf("apply key change in %s: row has %d values and key %d, want %d and %d",
			d.display, len(img), len(old), len(d.cols), len(d.src.Key))
	}
	for i, k := range d.src.Key {
		if old[i].Null || old[i].Unchanged || img[k].Null || img[k].Unchanged {
			return nil, fmt.Errorf("apply key change in %s: key %s has a NULL or missing value", d.display, d.src.FormatKey(old))
		}
	}
	var cols []sqlColumn
	var present []int
	for _, i := range d.written {
		if !img[i].Unchanged {
			cols = append(cols, d.cols[i])
			present = append(present, i)
		}
	}
	update, check := buildKeyChange(d.ident, d.key, cols, present, old, img)
	what := fmt.Sprintf("key change %s → %s in %s", d.src.FormatKey(old), d.src.FormatKey(d.src.KeyOf(img)), d.display)
	return append(stmts, statement{table: d.src, sql: update, what: what, keyCheck: true},
		statement{table: d.src, sql: check, what: what, keyCheck: true, follows: true}), nil
}

// rowsFor names what a statement covers: the key of its one row, or a count.
func (d *tableDesc) rowsFor(n int, first sluice.Row, isKey bool) string {
	if n == 1 && first != nil {
		if !isKey {
			first = d.src.KeyOf(first)
		}
		return d.src.FormatKey(first)
	}
	return rowCount(n)
}

func (d *tableDesc) appendDeletes(stmts []statement, keys []sluice.Row, limit int) ([]statement, error) {
	if len(keys) == 0 {
		return stmts, nil
	}
	for _, k := range keys {
		if len(k) != len(d.src.Key) {
			return nil, fmt.Errorf("apply delete to %s: key has %d values, want %d", d.display, len(k), len(d.src.Key))
		}
		for _, v := range k {
			if v.Null || v.Unchanged {
				return nil, fmt.Errorf("apply delete to %s: key %s has a NULL or missing value", d.display, d.src.FormatKey(k))
			}
		}
	}
	sqls, counts, err := buildDeletes(d.ident, d.key, keys, limit)
	if err != nil {
		return nil, fmt.Errorf("apply delete to %s: %w", d.display, err)
	}
	off := 0
	for i, s := range sqls {
		stmts = append(stmts, statement{table: d.src, sql: s, what: "delete of " + d.rowsFor(counts[i], keys[off], true) + " from " + d.display})
		off += counts[i]
	}
	return stmts, nil
}

// appendRelease adds the statements that set the nullable unique columns of
// the batch's rows whose unique values change to NULL (see the package doc).
// A table with a single upsert cannot collide with itself in the batch.
func (d *tableDesc) appendRelease(stmts []statement, rows []sluice.Row, limit int) ([]statement, error) {
	if len(d.release) == 0 || len(rows) < 2 {
		return stmts, nil
	}
	cols := make([]sqlColumn, len(d.release))
	for i, c := range d.release {
		cols[i] = d.cols[c]
	}
	var keys, vals []sluice.Row
rows:
	for _, r := range rows {
		if len(r) != len(d.cols) {
			return nil, fmt.Errorf("apply upsert to %s: row has %d values, want %d", d.display, len(r), len(d.cols))
		}
		v := make(sluice.Row, len(d.release))
		for i, c := range d.release {
			if r[c].Unchanged {
				continue rows // keeps its value: nothing to release
			}
			v[i] = r[c]
		}
		keys = append(keys, d.src.KeyOf(r))
		vals = append(vals, v)
	}
	if len(keys) == 0 {
		return stmts, nil
	}
	sqls, counts, err := buildRelease(d.ident, d.key, cols, keys, vals, limit)
	if err != nil {
		return nil, fmt.Errorf("apply unique-key release to %s: %w", d.display, err)
	}
	off := 0
	for i, s := range sqls {
		stmts = append(stmts, statement{table: d.src, sql: s,
			what: "release of the unique values of " + d.rowsFor(counts[i], keys[off], true) + " in " + d.display})
		off += counts[i]
	}
	return stmts, nil
}

func (d *tableDesc) appendUpserts(stmts []statement, rows []sluice.Row, limit int) ([]statement, error) {
	if len(rows) == 0 {
		return stmts, nil
	}
	groups, err := apply.GroupUpserts(d.src, rows, d.generated, d.display, func(i int) string { return d.cols[i].Name })
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		if g.Partial {
			if stmts, err = d.appendUpdates(stmts, g.Present, g.Rows, limit); err != nil {
				return nil, err
			}
			continue
		}
		u := &upsertSpec{table: d.ident, guard: len(d.uniques) > 0}
		pos := make(map[int]int, len(g.Present))
		for i, c := range g.Present {
			u.cols = append(u.cols, d.cols[c])
			pos[c] = i
		}
		for _, k := range d.src.Key {
			u.key = append(u.key, pos[k])
		}
		sqls, counts, err := buildUpserts(u, g.Present, g.Rows, limit)
		if err != nil {
			return nil, fmt.Errorf("apply upsert to %s: %w", d.display, err)
		}
		off := 0
		for i, s := range sqls {
			stmts = append(stmts, statement{table: d.src, sql: s, guard: u.guard,
				what: "upsert of " + d.rowsFor(counts[i], g.Rows[off], false) + " to " + d.display})
			off += counts[i]
		}
	}
	return stmts, nil
}

// appendUpdates adds the statements that update rows, which carry only the
// columns at the indexes in present, in place, each with its check that
// every row was there (see buildUpdates).
func (d *tableDesc) appendUpdates(stmts []statement, present []int, rows []sluice.Row, limit int) ([]statement, error) {
	u := &updateSpec{table: d.ident, keyCharsets: d.keyCharsets}
	pos := make(map[int]int, len(present))
	for i, c := range present {
		u.cols = append(u.cols, d.cols[c])
		pos[c] = i
	}
	for _, k := range d.src.Key {
		u.key = append(u.key, pos[k])
	}
	updates, checks, counts, err := buildUpdates(u, present, rows, limit)
	if err != nil {
		return nil, fmt.Errorf("apply update to %s: %w", d.display, err)
	}
	off := 0
	for i := range updates {
		what := "update of " + d.rowsFor(counts[i], rows[off], false) + " in " + d.display + ", keeping the values the source did not send"
		stmts = append(stmts, statement{table: d.src, sql: updates[i], what: what},
			statement{table: d.src, sql: checks[i], what: what, rowCheck: true})
		off += counts[i]
	}
	return stmts, nil
}

func rowCount(n int) string {
	if n == 1 {
		return "1 row"
	}
	return strconv.Itoa(n) + " rows"
}
