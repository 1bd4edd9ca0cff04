package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// tableDesc is a target table checked against one source description, with
// the SQL built for it so far.
type tableDesc struct {
	src *sluice.Table
	// merge is the allowMerge the description was checked with.
	merge   bool
	display string      // schema.table as resolved on the target
	ident   string      // quoted, qualified name used in SQL
	cols    []sqlColumn // aligned with src.Columns
	// generated marks the columns (aligned with src.Columns) the target
	// generates: never written, the target computes them from the
	// others. written holds the indexes of the others, in column order.
	generated []bool
	written   []int
	// warnings are what the check found that does not stop the stream.
	warnings []string
	// deletes and upserts are the statements built so far, by parameter
	// kinds (see kindsKey): deletes by the key columns' kinds, upserts by
	// the present columns' mask with their kinds.
	deletes map[string]string
	upserts map[string]string
}

// statement is one data statement of a batch and what it does, for errors.
type statement struct {
	table *sluice.Table // nil for the checkpoint
	sql   string
	args  []any
	what  string // e.g. "upsert of 500 rows to public.orders"
	// keyChange marks an ordered key change, which fails when the row it
	// moves is missing.
	keyChange bool
	// inPlace marks an update of rows with values the source did not
	// send, which fails when one of them is missing (see buildUpdate).
	inPlace bool
	// chain marks the lock of a chained transaction (see ApplyAfter).
	chain bool
}

// plan turns a batch into statements: per compacted table its truncate,
// its moves in place (one statement each), its deletes, then its upserts
// grouped by the set of columns present; then the ordered changes, one
// statement each, in source order, each after the foreign-key actions it
// fired on the source (cascade.go); part after part (apply.Batch.Next).
func (t *Target) plan(ctx context.Context, b *apply.Batch, perRow bool) ([]statement, error) {
	// The last batch's parameters were sent: their space is this one's.
	t.params.reset()
	return apply.AppendParts(nil, b, func(stmts []statement, part *apply.Batch) ([]statement, error) {
		return t.planPart(ctx, stmts, part, perRow)
	})
}

// planPart appends the statements of one part of a batch (see plan).
func (t *Target) planPart(ctx context.Context, stmts []statement, b *apply.Batch, perRow bool) ([]statement, error) {
	for _, tb := range b.Tables {
		d, err := t.describe(ctx, tb.Table)
		if err != nil {
			return nil, err
		}
		if tb.Truncate {
			stmts = append(stmts, d.truncateStatement())
		}
		for _, mv := range tb.Moves {
			st, err := d.keyChangeStatement(mv.Key, mv.Row)
			if err != nil {
				return nil, err
			}
			stmts = append(stmts, st)
		}
		stmts, err = d.appendDeletes(&t.params, stmts, tb.Deletes, perRow)
		if err != nil {
			return nil, err
		}
		stmts, err = d.appendUpserts(&t.params, stmts, tb.Upserts, perRow)
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
			stmts, err = d.appendUpserts(&t.params, stmts, []sluice.Row{c.Row}, true)
		case sluice.OpUpdate:
			switch {
			case c.Key != nil && !apply.KeysEqual(c.Key, c.Table.KeyOf(c.Row)) && fired && !apply.HasUnchanged(c.Row):
				// A key change whose actions sluice carried out just
				// before: a delete and an insert, as compaction writes
				// it, which a batch applied again survives (its actions
				// too find their rows by the old key's values).
				if stmts, err = d.appendDeletes(&t.params, stmts, []sluice.Row{c.Key}, true); err == nil {
					stmts, err = d.appendUpserts(&t.params, stmts, []sluice.Row{c.Row}, true)
				}
			case c.Key != nil && !apply.KeysEqual(c.Key, c.Table.KeyOf(c.Row)):
				var st statement
				st, err = d.keyChangeStatement(c.Key, c.Row)
				stmts = append(stmts, st)
			default:
				stmts, err = d.appendUpserts(&t.params, stmts, []sluice.Row{c.Row}, true)
			}
		case sluice.OpDelete:
			stmts, err = d.appendDeletes(&t.params, stmts, []sluice.Row{c.Key}, true)
		case sluice.OpTruncate:
			stmts = append(stmts, d.truncateStatement())
		}
		if err != nil {
			return nil, err
		}
	}
	return stmts, nil
}

func (d *tableDesc) truncateStatement() statement {
	return statement{table: d.src, sql: buildTruncate(d.ident), what: "truncate of " + d.display}
}

// keyChangeStatement updates the row at old in place to img, primary key
// included, leaving the columns img does not carry as they are.
func (d *tableDesc) keyChangeStatement(old, img sluice.Row) (statement, error) {
	if len(img) != len(d.cols) || len(old) != len(d.src.Key) {
		return statement{}, fmt.Errorf("apply key change in %s: row has %d values and key %d, want %d and %d",
			d.display, len(img), len(old), len(d.cols), len(d.src.Key))
	}
	var cols []sqlColumn
	var args []any
	for _, i := range d.written {
		if img[i].Unchanged {
			continue
		}
		cols = append(cols, d.cols[i])
		args = append(args, textArg(img[i]))
	}
	key := make([]sqlColumn, len(d.src.Key))
	for i, k := range d.src.Key {
		if old[i].Null || old[i].Unchanged || img[k].Null || img[k].Unchanged {
			return statement{}, fmt.Errorf("apply key change in %s: key %s has a NULL or missing value", d.display, d.src.FormatKey(old))
		}
		key[i] = d.cols[k]
		args = append(args, old[i].Text)
	}
	return statement{table: d.src, sql: buildKeyChange(d.ident, cols, key), args: args, keyChange: true,
		what: fmt.Sprintf("key change %s → %s in %s", d.src.FormatKey(old), d.src.FormatKey(d.src.KeyOf(img)), d.display)}, nil
}

// textArg is a value as a text parameter: nil for NULL.
func textArg(v sluice.Value) any {
	if v.Null {
		return nil
	}
	return v.Text
}

func (d *tableDesc) appendDeletes(arena *paramArena, stmts []statement, keys []sluice.Row, perRow bool) ([]statement, error) {
	if len(keys) == 0 {
		return stmts, nil
	}
	key := make([]sqlColumn, len(d.src.Key))
	for i, k := range d.src.Key {
		key[i] = d.cols[k]
	}
	for i, k := range keys {
		if len(k) != len(d.src.Key) {
			return nil, fmt.Errorf("apply delete to %s: key has %d values, want %d", d.display, len(k), len(d.src.Key))
		}
		for _, v := range k {
			if v.Null || v.Unchanged {
				return nil, fmt.Errorf("apply delete to %s: key %s has a NULL or missing value", d.display, d.src.FormatKey(k))
			}
		}
		if perRow {
			sql, args := d.deleteStatement(arena, key, keys[i:i+1])
			stmts = append(stmts, statement{table: d.src, sql: sql, args: args,
				what: fmt.Sprintf("delete of %s from %s", d.src.FormatKey(k), d.display)})
		}
	}
	if !perRow {
		sql, args := d.deleteStatement(arena, key, keys)
		stmts = append(stmts, statement{table: d.src, sql: sql, args: args,
			what: fmt.Sprintf("delete of %s from %s", rowCount(len(keys)), d.display)})
	}
	return stmts, nil
}

// deleteStatement is the statement deleting keys (of the key columns key)
// and its parameters; the statement is built once per set of parameter
// kinds.
func (d *tableDesc) deleteStatement(arena *paramArena, key []sqlColumn, keys []sluice.Row) (string, []any) {
	args, kinds := columnParams(arena, keys, nil, key)
	cacheKey := kindsKey(nil, kinds)
	sql, ok := d.deletes[cacheKey]
	if !ok {
		for i := range key {
			key[i].Param = kinds[i]
		}
		sql = buildDelete(d.ident, key)
		d.deletes[cacheKey] = sql
	}
	return sql, args
}

// kindsKey is a statement cache key: the presence mask (nil: every column)
// with each present column's parameter kind in place of its '1'.
func kindsKey(mask []byte, kinds []paramKind) string {
	if mask == nil {
		b := make([]byte, len(kinds))
		for i, k := range kinds {
			b[i] = k.code()
		}
		return string(b)
	}
	b := []byte(string(mask))
	j := 0
	for i := range b {
		if b[i] == '1' {
			b[i] = kinds[j].code()
			j++
		}
	}
	return string(b)
}

func (d *tableDesc) appendUpserts(arena *paramArena, stmts []statement, rows []sluice.Row, perRow bool) ([]statement, error) {
	if len(rows) == 0 {
		return stmts, nil
	}
	groups, err := apply.GroupUpserts(d.src, rows, d.generated, d.display, func(i int) string { return d.cols[i].Name })
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		op := "upsert of %s to %s"
		if g.Partial {
			op = "update of %s in %s, keeping the values the source did not send"
		}
		if perRow {
			for i := range g.Rows {
				sql, args := d.upsertStatement(arena, g.Mask, g.Present, g.Partial, g.Rows[i:i+1])
				stmts = append(stmts, statement{table: d.src, sql: sql, args: args, inPlace: g.Partial,
					what: fmt.Sprintf(op, d.src.FormatKey(d.src.KeyOf(g.Rows[i])), d.display)})
			}
			continue
		}
		which := rowCount(len(g.Rows))
		if len(g.Rows) == 1 {
			which = d.src.FormatKey(d.src.KeyOf(g.Rows[0]))
		}
		sql, args := d.upsertStatement(arena, g.Mask, g.Present, g.Partial, g.Rows)
		stmts = append(stmts, statement{table: d.src, sql: sql, args: args, inPlace: g.Partial,
			what: fmt.Sprintf(op, which, d.display)})
	}
	return stmts, nil
}

// upsertStatement is the statement upserting rows, which carry the columns
// at the indexes in present (mask: '1' for those, '0' for the others), or
// with partial (some of the others are unsent values, not generated
// columns) updating them in place, and its parameters; the statement is
// built once per mask and set of parameter kinds (the mask tells partial).
func (d *tableDesc) upsertStatement(arena *paramArena, mask string, present []int, partial bool, rows []sluice.Row) (string, []any) {
	args, kinds := columnParams(arena, rows, present, d.cols)
	cacheKey := kindsKey([]byte(mask), kinds)
	sql, ok := d.upserts[cacheKey]
	if !ok {
		cols := make([]sqlColumn, len(present))
		pos := make(map[int]int, len(present))
		for i, c := range present {
			cols[i] = d.cols[c]
			cols[i].Param = kinds[i]
			pos[c] = i
		}
		key := make([]int, len(d.src.Key))
		for i, k := range d.src.Key {
			key[i] = pos[k]
		}
		if partial {
			sql = buildUpdate(d.ident, cols, key)
		} else {
			sql = buildUpsert(d.ident, cols, key)
		}
		d.upserts[cacheKey] = sql
	}
	return sql, args
}

func rowCount(n int) string {
	if n == 1 {
		return "1 row"
	}
	return strconv.Itoa(n) + " rows"
}
