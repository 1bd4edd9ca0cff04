// Package apply turns ordered source changes into batches that a target can
// write in a constant number of round trips: it compacts the changes of a
// batch per row key and groups them per table. Targets live in subpackages.
package apply

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
)

// Target writes batches to a target database.
type Target interface {
	// Apply writes b and the stream checkpoint cp in one target transaction.
	// It returns only after the commit returned; on error nothing of b or cp
	// is committed.
	Apply(ctx context.Context, b *Batch, cp sluice.Checkpoint) error
}

// Batch is a run of consecutive source changes, ready for one target
// transaction: most tables' changes compacted to the final state of each row
// key (Tables), and the changes of tables whose order matters applied one at
// a time in source order (Ordered). A target applies Tables first, then
// Ordered.
type Batch struct {
	Tables []*TableBatch
	// Ordered holds, in source order, every change of the tables the batch
	// applies one change at a time (see Compact). No table is in both
	// Tables and Ordered.
	Ordered []sluice.Change
	// Changes counts the source changes the batch carries (before
	// compaction; progress markers do not count), Rows the row operations
	// left after it.
	Changes int
	Rows    int
	// Last is the position of the batch's last change: once the batch is
	// committed, the stream may be checkpointed there.
	Last sluice.Position
}

// TableBatch is the compacted work for one table, applied in this order:
// the truncate, the deletes, the upserts.
type TableBatch struct {
	Table *sluice.Table
	// Truncate removes every row of the table first: the source truncated
	// it, and Deletes and Upserts hold what happened after.
	Truncate bool
	// Deletes holds the keys (aligned with Table.Key) of rows that end the
	// batch absent.
	Deletes []sluice.Row
	// Upserts holds the final full images (aligned with Table.Columns) of
	// rows that end the batch present. An image may hold Unchanged values
	// of a row whose key did not change: the target keeps those columns.
	Upserts []sluice.Row
}

type keyState struct {
	table   *sluice.Table
	key     sluice.Row
	deleted bool
	image   sluice.Row
	gone    bool // dropped by a later truncate of its table
}

// Compact folds changes, in source order, into a Batch.
//
// The changes of a table go to Batch.Ordered, uncompacted, when inOrder
// says so (the caller saw the table's compacted changes break a constraint:
// a unique value one row releases and another takes, a parent its child
// needs) or when compaction cannot keep them exact: an update that changes
// a row's primary key while leaving values unsent (PostgreSQL's unchanged
// TOAST columns) that no earlier image in the batch supplies. Only the row
// on the target holds those values, so it must be updated in place, and
// each later change of the table must see it where the source had it.
//
// Every other table is compacted per key: the last image wins, a key whose
// last change is a delete is deleted (even when the batch also inserted
// it), a delete followed by an insert becomes an upsert of the new image,
// and an update that changes the primary key deletes the old key and
// upserts the new one. Unchanged values in an update are filled from an
// earlier image of the same row in the batch when there is one. A truncate
// drops what the batch did to the table before it.
//
// An insert followed by a delete still deletes the key: a replay (an
// unknown commit outcome retried) may find the insert already committed,
// and deleting a key that is absent costs nothing.
func Compact(changes []sluice.Change, inOrder func(sluice.TableName) bool) *Batch {
	b := &Batch{}
	if len(changes) == 0 {
		return b
	}
	b.Last = changes[len(changes)-1].Pos
	states := make(map[string]*keyState, len(changes))
	var order []*keyState
	// A reader hands out a new *Table when a table's definition changes:
	// each key's final image goes with the *Table it is aligned with, so
	// one table may have a TableBatch per definition.
	tableOrder := map[*sluice.Table]int{}
	var tables []*sluice.Table
	truncated := map[sluice.TableName]bool{}
	ordered := map[sluice.TableName]bool{}

	touchTable := func(t *sluice.Table) {
		if _, ok := tableOrder[t]; !ok {
			tableOrder[t] = len(tables)
			tables = append(tables, t)
		}
	}
	touch := func(t *sluice.Table, key sluice.Row) *keyState {
		touchTable(t)
		k := encodeKey(t, key)
		st, ok := states[k]
		if !ok {
			st = &keyState{table: t, key: key}
			states[k] = st
			order = append(order, st)
		}
		st.table = t
		return st
	}

	for i := range changes {
		c := &changes[i]
		if c.Op == sluice.OpProgress {
			continue
		}
		b.Changes++
		if inOrder != nil && inOrder(c.Table.Name) {
			ordered[c.Table.Name] = true
		}
		if ordered[c.Table.Name] {
			continue
		}
		switch c.Op {
		case sluice.OpInsert:
			st := touch(c.Table, c.Table.KeyOf(c.Row))
			st.deleted = false
			st.image = c.Row
		case sluice.OpUpdate:
			newKey := c.Table.KeyOf(c.Row)
			oldKey := c.Key
			if oldKey == nil {
				oldKey = newKey
			}
			var prev sluice.Row
			if !KeysEqual(oldKey, newKey) {
				old := touch(c.Table, oldKey)
				prev = old.image
				old.deleted = true
				old.image = nil
			}
			st := touch(c.Table, newKey)
			if prev == nil && KeysEqual(oldKey, newKey) {
				prev = st.image
			}
			img := fillUnchanged(c.Row, prev)
			if !KeysEqual(oldKey, newKey) && hasUnchanged(img) {
				ordered[c.Table.Name] = true
				continue
			}
			st.deleted = false
			st.image = img
		case sluice.OpDelete:
			st := touch(c.Table, c.Key)
			st.deleted = true
			st.image = nil
		case sluice.OpTruncate:
			touchTable(c.Table)
			truncated[c.Table.Name] = true
			for _, st := range order {
				if st.table.Name == c.Table.Name {
					st.gone = true
					delete(states, encodeKey(st.table, st.key))
				}
			}
		}
	}

	for i := range changes {
		if c := &changes[i]; c.Op != sluice.OpProgress && ordered[c.Table.Name] {
			b.Ordered = append(b.Ordered, *c)
			b.Rows++
		}
	}
	tbs := make([]*TableBatch, len(tables))
	for i, t := range tables {
		tbs[i] = &TableBatch{Table: t}
		// The truncate goes with the table's first TableBatch, so that it
		// runs before every row the batch leaves in the table.
		if truncated[t.Name] {
			tbs[i].Truncate = true
			delete(truncated, t.Name)
			b.Rows++
		}
	}
	for _, st := range order {
		if st.gone || ordered[st.table.Name] {
			continue
		}
		tb := tbs[tableOrder[st.table]]
		switch {
		case st.deleted:
			tb.Deletes = append(tb.Deletes, st.key)
			b.Rows++
		case st.image != nil:
			tb.Upserts = append(tb.Upserts, st.image)
			b.Rows++
		}
	}
	for _, tb := range tbs {
		if !ordered[tb.Table.Name] && (tb.Truncate || len(tb.Deletes)+len(tb.Upserts) > 0) {
			b.Tables = append(b.Tables, tb)
		}
	}
	return b
}

// fillUnchanged returns img with its Unchanged values taken from prev, when
// prev has them.
func fillUnchanged(img, prev sluice.Row) sluice.Row {
	if prev == nil {
		return img
	}
	var out sluice.Row
	for i, v := range img {
		if v.Unchanged && i < len(prev) && !prev[i].Unchanged {
			if out == nil {
				out = append(sluice.Row(nil), img...)
			}
			out[i] = prev[i]
		}
	}
	if out == nil {
		return img
	}
	return out
}

func hasUnchanged(r sluice.Row) bool {
	for _, v := range r {
		if v.Unchanged {
			return true
		}
	}
	return false
}

// KeysEqual reports whether two keys (or rows) hold the same values.
func KeysEqual(a, b sluice.Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Null != b[i].Null || a[i].Text != b[i].Text {
			return false
		}
	}
	return true
}

// encodeKey makes a map key from a table and a key row. Values are
// length-prefixed so that no two distinct keys encode alike.
func encodeKey(t *sluice.Table, key sluice.Row) string {
	var b strings.Builder
	// Length-prefixed, so that schema "a" table "b.c" and schema "a.b"
	// table "c" differ.
	for _, part := range []string{t.Name.Schema, t.Name.Name} {
		b.WriteString(itoa(len(part)))
		b.WriteByte(':')
		b.WriteString(part)
	}
	for _, v := range key {
		b.WriteByte(0)
		if v.Null {
			b.WriteString("N")
			continue
		}
		b.WriteString(itoa(len(v.Text)))
		b.WriteByte(':')
		b.WriteString(v.Text)
	}
	return b.String()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}

// Mode chooses how a target sends a batch.
type Mode int

const (
	// Pipelined sends a batch in a constant number of round trips: one
	// pipelined transaction on PostgreSQL; coalesced multi-row statements,
	// in one multi-statement packet where allowed, on MySQL.
	Pipelined Mode = iota
	// PerRow sends one statement per row operation, each its own round
	// trip, as naive appliers do. It exists for comparison and for the
	// static-batch diagnostic.
	PerRow
)

func (m Mode) String() string {
	switch m {
	case Pipelined:
		return "pipelined"
	case PerRow:
		return "per-row"
	}
	return "mode(" + itoa(int(m)) + ")"
}

// ParseMode reads "pipelined" or "per-row"; empty (an unset option) means
// the default, pipelined.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "pipelined", "":
		return Pipelined, nil
	case "per-row":
		return PerRow, nil
	}
	return 0, fmt.Errorf("apply mode %q: want pipelined or per-row", s)
}

// ConstraintError marks an apply failure on a constraint of the target (a
// unique key, a foreign key, a check) after which the target rolled the
// whole batch back. A compacted batch can break a constraint that the
// source's own order of the same changes kept (two rows swapping a unique
// value; a child inserted before its parent), so the stream retries the
// batch with Table's changes in source order (Compact's inOrder). Applied in
// source order onto a target that holds exactly the source's rows, the
// changes cannot break a constraint the source kept: a ConstraintError from
// such a batch means the target differs from the source.
type ConstraintError struct {
	// Tables are the tables the violated constraint concerns, as the
	// batch names them: the failing statement's, and for a foreign key the
	// table on its other side when the target says which.
	Tables []sluice.TableName
	// Constraint is the target's name for the constraint, Detail the
	// target's description of the violation (the key and value), when it
	// gives them.
	Constraint string
	Detail     string
	Err        error
}

func (e *ConstraintError) Error() string { return e.Err.Error() }
func (e *ConstraintError) Unwrap() error { return e.Err }

// TableOf names the table, for the log's table field.
func (e *ConstraintError) TableOf() (sluice.TableName, bool) {
	if len(e.Tables) == 0 {
		return sluice.TableName{}, false
	}
	return e.Tables[0], true
}

// Resume returns the checkpoint a stream resumes from, given the
// checkpoints its target holds (one per lane that wrote one): the highest
// watermark, each lane's being one that was true when it committed.
func Resume(cps []sluice.Checkpoint) (sluice.Checkpoint, bool) {
	var best sluice.Checkpoint
	for i, cp := range cps {
		if i == 0 || cp.Applied > best.Applied || (cp.Applied == best.Applied && cp.Seq > best.Seq) {
			best = cp
		}
	}
	return best, len(cps) > 0
}

// Committed reports whether cps, the checkpoints a target holds for cp's
// stream, show cp committed: after a connection broke while a batch was in
// flight, its commit may or may not have run, and the checkpoint written
// inside the same transaction tells which.
func Committed(cps []sluice.Checkpoint, cp sluice.Checkpoint) bool {
	for _, got := range cps {
		if got.Lane == cp.Lane {
			return got.Seq == cp.Seq && got.Position == cp.Position
		}
	}
	return false
}

// RetryableError marks an apply failure after which the target rolled the
// whole batch back and the same changes may be tried again: the transaction
// was killed (by a transaction killer or a timeout), the connection was lost,
// a deadlock or serialization failure. Killed tells the controller that the
// batch took too long.
type RetryableError struct {
	Err    error
	Killed bool
}

func (e *RetryableError) Error() string { return e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// IsRetryable reports whether err says the batch may be retried, and
// whether it was killed for taking too long.
func IsRetryable(err error) (retry, killed bool) {
	var re *RetryableError
	if errors.As(err, &re) {
		return true, re.Killed
	}
	return false, false
}

// Prefetch names what a stream asks of a target right after opening it,
// so that the target can read it in the round trip that sets up its
// connection instead of one round trip each: over a WAN every start-up
// round trip is time before the first batch. A target answers the first
// matching request (ReadCheckpoints of Stream, Preflight of Tables,
// TxTimeout) from what it prefetched, and later ones from the database.
type Prefetch struct {
	Stream string
	Tables []sluice.TableName
	// Fence takes the stream's next generation on the target, before its
	// checkpoints are read (the stream's own connection only; see the
	// targets' Fence).
	Fence bool
}

// ErrFenced is returned by a Target whose stream a newer sluice process
// has taken over on the target (see Fence in the targets): this process's
// batches would commit over the newer one's, so it must stop. It is not
// retryable.
var ErrFenced = errors.New("a newer sluice process runs this stream on the target")
