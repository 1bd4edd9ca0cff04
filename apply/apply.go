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

// Batch is a run of consecutive source changes compacted to the final state
// of each row key they touch.
type Batch struct {
	Tables []*TableBatch
	// Changes counts the source changes the batch carries (before
	// compaction), Rows the row operations left after it.
	Changes int
	Rows    int
	// Last is the position of the batch's last change: once the batch is
	// committed, the stream may be checkpointed there.
	Last sluice.Position
}

// TableBatch is the compacted work for one table.
type TableBatch struct {
	Table *sluice.Table
	// Deletes holds the keys (aligned with Table.Key) of rows that end the
	// batch absent.
	Deletes []sluice.Row
	// Upserts holds the final full images (aligned with Table.Columns) of
	// rows that end the batch present. An image may hold Unchanged values.
	Upserts []sluice.Row
	// Moves holds, in source order, primary-key updates whose new image
	// has Unchanged values that no earlier image in the batch can fill
	// (PostgreSQL does not send unchanged TOASTed values, and the old key
	// does not carry them). A target applies each before the table's
	// deletes and upserts, in place: it deletes any row at To and changes
	// the key of the row at From to To, so the unchanged values stay; the
	// row's upsert then writes the columns that were sent.
	Moves []Move
}

// Move changes a row's primary key in place.
type Move struct {
	From, To sluice.Row // keys, aligned with Table.Key
}

type keyState struct {
	table   *sluice.Table
	key     sluice.Row
	deleted bool
	image   sluice.Row
	order   int
}

// Compact folds changes, in source order, into a Batch: per key the last
// image wins, a key whose last change is a delete is deleted (even when the
// batch also inserted it: see below), a delete followed by an insert becomes
// an upsert of the new image, and an update that changes the primary key
// deletes the old key and upserts the new one. Unchanged values in an
// update are filled from an earlier image of the same row in the batch when
// there is one.
//
// An insert followed by a delete still deletes the key: the batch may be a
// replay whose insert an earlier, differently cut batch already committed
// (lanes commit past the checkpoint's low watermark, and a replay after a
// crash starts from it). Dropping the pair would leave that row on the
// target for good; deleting a key that is absent costs nothing.
func Compact(changes []sluice.Change) *Batch {
	b := &Batch{Changes: len(changes)}
	if len(changes) == 0 {
		return b
	}
	b.Last = changes[len(changes)-1].Pos
	states := make(map[string]*keyState, len(changes))
	var order []*keyState
	tableOrder := map[*sluice.Table]int{}
	var tables []*sluice.Table
	moves := map[*sluice.Table][]Move{}

	touch := func(t *sluice.Table, key sluice.Row) *keyState {
		if _, ok := tableOrder[t]; !ok {
			tableOrder[t] = len(tables)
			tables = append(tables, t)
		}
		k := encodeKey(t, key)
		st, ok := states[k]
		if !ok {
			st = &keyState{table: t, key: key, order: len(order)}
			states[k] = st
			order = append(order, st)
		}
		// A reader hands out a new *Table when the table's definition
		// changes; the key's latest change is aligned with the latest one.
		st.table = t
		return st
	}

	for i := range changes {
		c := &changes[i]
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
			if !keysEqual(oldKey, newKey) {
				old := touch(c.Table, oldKey)
				prev = old.image
				old.deleted = true
				old.image = nil
			}
			st := touch(c.Table, newKey)
			moved := false
			if prev == nil && !keysEqual(oldKey, newKey) && hasUnchanged(c.Row) {
				// The values the source did not send are only on the
				// target, in the row at the old key: move that row.
				moves[c.Table] = append(moves[c.Table], Move{From: oldKey, To: newKey})
				moved = true
			}
			if prev == nil && !moved {
				prev = st.image
			}
			st.deleted = false
			st.image = fillUnchanged(c.Row, prev)
		case sluice.OpDelete:
			st := touch(c.Table, c.Key)
			st.deleted = true
			st.image = nil
		}
	}

	tbs := make([]*TableBatch, len(tables))
	for i, t := range tables {
		tbs[i] = &TableBatch{Table: t, Moves: moves[t]}
		b.Rows += len(moves[t])
	}
	for _, st := range order {
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
		if len(tb.Deletes)+len(tb.Upserts)+len(tb.Moves) > 0 {
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

func keysEqual(a, b sluice.Row) bool {
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
