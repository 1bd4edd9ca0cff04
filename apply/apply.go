// Package apply turns ordered source changes into batches that a target can
// write in a constant number of round trips: it compacts the changes of a
// batch per row key and groups them per table. Targets live in subpackages.
package apply

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// Ordered, then the batch's Next part the same way.
type Batch struct {
	Tables []*TableBatch
	// Ordered holds, in source order, every change of the tables the batch
	// applies one change at a time (see Compact), and last the change that
	// cut the batch before Next, if any. No table is in both Tables and
	// Ordered but for that change's.
	Ordered []sluice.Change
	// Cascades holds, aligned with Ordered (or nil), the statements that
	// carry out the foreign-key actions each ordered change fired on the
	// source, which the target runs right before the change (see
	// Cascades.Attach).
	Cascades [][]Cascade
	// Next is the part of the batch that follows this one, nil for the
	// last: a batch is cut into parts after each change that must find the
	// target as the source had it right before it (Compactor.Cut), and
	// each part is compacted on its own.
	Next *Batch
	// Changes counts the source changes the batch carries (before
	// compaction; progress markers do not count), Rows the row operations
	// left after it; both are the whole batch's, on its first part.
	Changes int
	Rows    int
	// Last is the position of the batch's last change: once the batch is
	// committed, the stream may be checkpointed there.
	Last sluice.Position
	// Schema is the batch's change of a table's definition (an OpSchema
	// change), which a batch carries alone; DDL holds the statements that
	// make the target follow it, which the target runs before the
	// checkpoint: in the same transaction where DDL is transactional
	// (PostgreSQL), each committing on its own before it elsewhere
	// (MySQL), so every statement must be one whose replay does nothing.
	Schema *sluice.Change
	DDL    []string
}

// Parts returns the batch's parts in the order a target applies them: b
// and the parts that follow it.
func (b *Batch) Parts() []*Batch {
	var out []*Batch
	for p := b; p != nil; p = p.Next {
		out = append(out, p)
	}
	return out
}

// AppendParts appends to out what plan makes of each of b's parts, in the
// order a target applies them: how a target turns a batch into its
// statements.
func AppendParts[S any](out []S, b *Batch, plan func(out []S, part *Batch) ([]S, error)) ([]S, error) {
	for _, part := range b.Parts() {
		var err error
		if out, err = plan(out, part); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TableBatch is the compacted work for one table, applied in this order:
// the truncate, the moves, the deletes, the upserts.
type TableBatch struct {
	Table *sluice.Table
	// Truncate removes every row of the table first: the source truncated
	// it, and Deletes and Upserts hold what happened after.
	Truncate bool
	// Moves are updates that change a row's primary key while leaving
	// values unsent (PostgreSQL's unchanged TOAST columns), in source
	// order: each moves the row at its old key (Change.Key) to its new
	// image in place, keeping the values it does not carry. No change of
	// the batch's part before a move touched either of its keys but
	// another move; Deletes and Upserts hold what came after.
	Moves []sluice.Change
	// Deletes holds the keys (aligned with Table.Key) of rows that end the
	// batch absent.
	Deletes []sluice.Row
	// Upserts holds the final full images (aligned with Table.Columns) of
	// rows that end the batch present. An image may hold Unchanged values
	// of a row whose key did not change, which the target must already
	// hold: it updates the row in place, keeping those columns, and fails
	// with ErrRowMissing when the row is not there.
	Upserts []sluice.Row
}

type keyState struct {
	table   *sluice.Table
	key     sluice.Row
	image   sluice.Row
	tix     int32 // table's index in its part's tables
	deleted bool
	gone    bool // dropped by a later truncate of its table
}

// stateKey finds a key's state when the key is one non-NULL value (most
// tables): the value's text, which the source allocated already, with the
// table's number in the Compactor. Other keys go by their encoding
// (appendKey), which costs a string per key.
type stateKey struct {
	table int32
	text  string
}

// Compact folds changes, in source order, into a Batch.
//
// An update that changes a row's primary key while leaving values unsent
// (PostgreSQL's unchanged TOAST columns) that no earlier image in the
// batch supplies must move the row in place: only the row on the target
// holds those values. When no earlier change of the batch's part but
// another such move touched its old or its new key, it goes to
// TableBatch.Moves, which the target applies before the table's deletes
// and upserts: the target then holds the row where the source had it
// before the changes after the move, which are compacted as usual.
//
// The changes of a table go to Batch.Ordered, uncompacted, when inOrder
// says so (the caller saw the table's compacted changes break a constraint:
// a unique value one row releases and another takes, a parent its child
// needs) or when compaction cannot keep them exact: such a move of a key
// that an earlier change of the batch touched. Each later change of the
// table must then see the row where the source had it.
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
	c := NewCompactor(inOrder)
	c.Add(changes)
	return c.Batch()
}

// Compactor is Compact done a run of changes at a time: a batch can be
// compacted while its changes arrive (the stream compacts the next batch
// while the one before it is in flight), and finished when its size is
// known. Add the runs in source order; Batch is what Compact of all of them
// would return. A Compactor is not safe for concurrent use.
type Compactor struct {
	inOrder func(sluice.TableName) bool
	// Cut, when set, names the changes after which the batch is cut into
	// a new part (Batch.Next): the change goes, uncompacted, last in its
	// part's Ordered, and the changes after it are compacted apart from
	// those before. Set it before the first Add.
	Cut func(*sluice.Change) bool
	b   Batch
	// runs are the changes added, kept for Batch.Ordered: a table can turn
	// ordered at any change, and then all of its changes are applied in
	// order, the earlier ones included.
	runs [][]sluice.Change
	// parts are the batch's parts so far: the last one takes the changes
	// added next.
	parts   []*part
	n       int // changes added, progress markers included
	ordered map[sluice.TableName]bool
	// ids number the tables by name (one table may come with several
	// *Table, one per definition) for the keys' states; inOrder is asked
	// when a name gets its number: it takes a lock, and a batch has tens
	// of thousands of changes of a handful of tables.
	ids map[sluice.TableName]int32
	// lastTable and lastID cache the last change's table: a run of
	// changes is mostly of one table.
	lastTable *sluice.Table
	lastID    int32
	// hint is the size of the first run added, to size the first part's
	// maps; parts after a cut grow as they go (a cut could come after every
	// change).
	hint   int
	keyBuf []byte
	// keys is where the keys of row images are cut from, a block at a
	// time instead of a Row per change.
	keys sluice.Row
}

// part is the compaction of the changes between two cuts.
type part struct {
	// single and multi index order by key (see stateKey).
	single map[stateKey]int32
	multi  map[string]int32
	order  []keyState
	// A reader hands out a new *Table when a table's definition changes:
	// each key's final image goes with the *Table it is aligned with, so
	// one table may have a TableBatch per definition.
	tableOrder map[*sluice.Table]int32
	tables     []*sluice.Table
	lastTable  *sluice.Table // cache of tableOrder for the last change's table
	lastIndex  int32
	truncated  map[sluice.TableName]bool
	// moves are each table's moves in place (see TableBatch.Moves).
	moves map[*sluice.Table][]sluice.Change
	// cut is the index (among the changes added) of the change that ends
	// the part; -1 for the last part.
	cut int
}

func newPart() *part {
	return &part{tableOrder: map[*sluice.Table]int32{}, truncated: map[sluice.TableName]bool{}, cut: -1}
}

// NewCompactor returns an empty Compactor; inOrder is as for Compact.
func NewCompactor(inOrder func(sluice.TableName) bool) *Compactor {
	return &Compactor{inOrder: inOrder, parts: []*part{newPart()},
		ordered: map[sluice.TableName]bool{}, ids: map[sluice.TableName]int32{}}
}

// Expect says the batch will hold about n changes, before the first
// Add: the first part's keys are sized for them. A batch compacted while
// its changes arrive is added a few hundred at a time, and growing its
// keys' states and maps from the first run's size copied them a dozen
// times over (half of the compaction's time in a 40,000-change batch).
// At most 1<<16 are sized ahead: past that, growth costs little.
func (c *Compactor) Expect(n int) {
	if c.runs == nil {
		c.hint = min(max(n, 0), 1<<16)
	}
}

// Len is how many changes were added (progress markers included).
func (c *Compactor) Len() int { return c.n }

// tableID numbers t's table, asking inOrder about it the first time.
func (c *Compactor) tableID(t *sluice.Table) int32 {
	if t == c.lastTable {
		return c.lastID
	}
	id, ok := c.ids[t.Name]
	if !ok {
		id = int32(len(c.ids))
		c.ids[t.Name] = id
		if c.inOrder != nil && c.inOrder(t.Name) {
			c.ordered[t.Name] = true
		}
	}
	c.lastTable, c.lastID = t, id
	return id
}

// touchTable returns t's index in p.tables, adding it when new.
func (p *part) touchTable(t *sluice.Table) int32 {
	if t == p.lastTable {
		return p.lastIndex
	}
	i, ok := p.tableOrder[t]
	if !ok {
		i = int32(len(p.tables))
		p.tableOrder[t] = i
		p.tables = append(p.tables, t)
	}
	p.lastTable, p.lastIndex = t, i
	return i
}

// keyOf is t.KeyOf(r), cut from c.keys.
func (c *Compactor) keyOf(t *sluice.Table, r sluice.Row) sluice.Row {
	n := len(t.Key)
	if cap(c.keys)-len(c.keys) < n {
		c.keys = make(sluice.Row, 0, max(n, 1024))
	}
	at := len(c.keys)
	for _, k := range t.Key {
		c.keys = append(c.keys, r[k])
	}
	return c.keys[at:len(c.keys):len(c.keys)]
}

// find returns the index in p.order of the state of key of the table
// numbered id, and whether there is one.
func (c *Compactor) find(p *part, id int32, key sluice.Row) (int32, bool) {
	if len(key) == 1 && !key[0].Null {
		i, ok := p.single[stateKey{id, key[0].Text}]
		return i, ok
	}
	c.keyBuf = appendKey(c.keyBuf[:0], id, key)
	i, ok := p.multi[string(c.keyBuf)]
	return i, ok
}

// index records i as the index of key's state (or drops it when i < 0).
func (c *Compactor) index(p *part, id int32, key sluice.Row, i int32) {
	if len(key) == 1 && !key[0].Null {
		if i < 0 {
			delete(p.single, stateKey{id, key[0].Text})
			return
		}
		if p.single == nil {
			p.single = make(map[stateKey]int32, c.hint)
		}
		p.single[stateKey{id, key[0].Text}] = i
		return
	}
	c.keyBuf = appendKey(c.keyBuf[:0], id, key)
	if i < 0 {
		delete(p.multi, string(c.keyBuf))
		return
	}
	if p.multi == nil {
		p.multi = make(map[string]int32, c.hint)
	}
	p.multi[string(c.keyBuf)] = i
}

// exists reports whether a change of part p (but a move in place)
// touched the key.
func (c *Compactor) exists(p *part, t *sluice.Table, key sluice.Row) bool {
	_, ok := c.find(p, c.tableID(t), key)
	return ok
}

// touch returns the index in p.order of the key's state, added when new.
// A pointer to it holds only until the next touch, which may grow p.order.
func (c *Compactor) touch(p *part, t *sluice.Table, key sluice.Row) int32 {
	tix := p.touchTable(t)
	id := c.tableID(t)
	i, ok := c.find(p, id, key)
	if !ok {
		if p.order == nil {
			p.order = make([]keyState, 0, c.hint)
		}
		i = int32(len(p.order))
		p.order = append(p.order, keyState{key: key})
		c.index(p, id, key, i)
	}
	st := &p.order[i]
	st.table, st.tix = t, tix
	return i
}

// Add folds changes, the next in source order, into the batch. The
// Compactor keeps changes (not a copy): they must not change until Batch
// has been called.
func (c *Compactor) Add(changes []sluice.Change) {
	if len(changes) == 0 {
		return
	}
	if c.runs == nil {
		c.hint = max(c.hint, len(changes))
	}
	c.runs = append(c.runs, changes)
	c.b.Last = changes[len(changes)-1].Pos
	for i := range changes {
		ch := &changes[i]
		c.n++
		if ch.Op == sluice.OpProgress {
			continue
		}
		c.b.Changes++
		if ch.Op == sluice.OpSchema {
			c.b.Schema = ch
			continue
		}
		name := ch.Table.Name
		c.tableID(ch.Table)
		p := c.parts[len(c.parts)-1]
		if c.Cut != nil && c.Cut(ch) {
			p.cut = c.n - 1
			c.hint = 0
			c.parts = append(c.parts, newPart())
			continue
		}
		if c.ordered[name] {
			continue
		}
		switch ch.Op {
		case sluice.OpInsert:
			st := &p.order[c.touch(p, ch.Table, c.keyOf(ch.Table, ch.Row))]
			st.deleted = false
			st.image = ch.Row
		case sluice.OpUpdate:
			newKey := c.keyOf(ch.Table, ch.Row)
			oldKey := ch.Key
			if oldKey == nil {
				oldKey = newKey
			}
			if !KeysEqual(oldKey, newKey) && HasUnchanged(ch.Row) && !c.exists(p, ch.Table, oldKey) && !c.exists(p, ch.Table, newKey) {
				p.touchTable(ch.Table)
				if p.moves == nil {
					p.moves = map[*sluice.Table][]sluice.Change{}
				}
				p.moves[ch.Table] = append(p.moves[ch.Table], *ch)
				continue
			}
			var prev sluice.Row
			if !KeysEqual(oldKey, newKey) {
				old := &p.order[c.touch(p, ch.Table, oldKey)]
				prev = old.image
				old.deleted = true
				old.image = nil
			}
			st := &p.order[c.touch(p, ch.Table, newKey)]
			if prev == nil && KeysEqual(oldKey, newKey) {
				prev = st.image
			}
			img := fillUnchanged(ch.Row, prev)
			if !KeysEqual(oldKey, newKey) && HasUnchanged(img) {
				c.ordered[name] = true
				continue
			}
			st.deleted = false
			st.image = img
		case sluice.OpDelete:
			st := &p.order[c.touch(p, ch.Table, ch.Key)]
			st.deleted = true
			st.image = nil
		case sluice.OpTruncate:
			p.touchTable(ch.Table)
			p.truncated[name] = true
			for t := range p.moves {
				if t.Name == name {
					delete(p.moves, t)
				}
			}
			id := c.tableID(ch.Table)
			for i := range p.order {
				st := &p.order[i]
				if st.table.Name == name && !st.gone {
					st.gone = true
					c.index(p, id, st.key, -1)
				}
			}
		}
	}
}

// Batch returns the batch of every change added. Call it once, after the
// last Add.
func (c *Compactor) Batch() *Batch {
	out := make([]*Batch, len(c.parts))
	for i := range out {
		out[i] = &Batch{}
		if i > 0 {
			out[i-1].Next = out[i]
		}
	}
	b := &c.b
	out[0].Changes, out[0].Last, out[0].Schema = b.Changes, b.Last, b.Schema
	rows := 0
	at, pi := 0, 0
	for _, run := range c.runs {
		for i := range run {
			ch := &run[i]
			cut := at == c.parts[pi].cut
			if ch.Op != sluice.OpProgress && ch.Op != sluice.OpSchema && (cut || c.ordered[ch.Table.Name]) {
				out[pi].Ordered = append(out[pi].Ordered, *ch)
				rows++
			}
			if cut {
				pi++
			}
			at++
		}
	}
	for i, p := range c.parts {
		rows += c.partTables(out[i], p)
	}
	out[0].Rows = rows
	return out[0]
}

// partTables fills pb.Tables from part p's compaction and returns how many
// row operations it holds.
func (c *Compactor) partTables(pb *Batch, p *part) int {
	rows := 0
	tbs := make([]TableBatch, len(p.tables))
	ordered := make([]bool, len(p.tables))
	truncated := p.truncated
	for i, t := range p.tables {
		tbs[i] = TableBatch{Table: t, Moves: p.moves[t]}
		ordered[i] = c.ordered[t.Name]
		rows += len(tbs[i].Moves)
		// The truncate goes with the table's first TableBatch, so that it
		// runs before every row the batch leaves in the table.
		if truncated[t.Name] {
			tbs[i].Truncate = true
			delete(truncated, t.Name)
			rows++
		}
	}
	// Count first, so that each table's rows are allocated once.
	counts := make([]struct{ deletes, upserts int }, len(p.tables))
	for i := range p.order {
		st := &p.order[i]
		switch {
		case st.gone:
		case st.deleted:
			counts[st.tix].deletes++
		case st.image != nil:
			counts[st.tix].upserts++
		}
	}
	for i, n := range counts {
		if ordered[i] {
			continue
		}
		if n.deletes > 0 {
			tbs[i].Deletes = make([]sluice.Row, 0, n.deletes)
		}
		if n.upserts > 0 {
			tbs[i].Upserts = make([]sluice.Row, 0, n.upserts)
		}
	}
	for i := range p.order {
		st := &p.order[i]
		if st.gone || ordered[st.tix] {
			continue
		}
		tb := &tbs[st.tix]
		switch {
		case st.deleted:
			tb.Deletes = append(tb.Deletes, st.key)
			rows++
		case st.image != nil:
			tb.Upserts = append(tb.Upserts, st.image)
			rows++
		}
	}
	for i := range tbs {
		tb := &tbs[i]
		if ordered[i] {
			rows -= len(tb.Moves) // in Ordered, with the table's other changes
			continue
		}
		if tb.Truncate || len(tb.Moves)+len(tb.Deletes)+len(tb.Upserts) > 0 {
			pb.Tables = append(pb.Tables, tb)
		}
	}
	return rows
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

// HasUnchanged reports whether r holds a value the source did not send.
func HasUnchanged(r sluice.Row) bool {
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

// appendKey appends to buf a map key for the table numbered id and a key
// row. Values are length-prefixed so that no two distinct keys encode
// alike.
func appendKey(buf []byte, id int32, key sluice.Row) []byte {
	buf = strconv.AppendInt(buf, int64(id), 10)
	for _, v := range key {
		buf = append(buf, 0)
		if v.Null {
			buf = append(buf, 'N')
			continue
		}
		buf = strconv.AppendInt(buf, int64(len(v.Text)), 10)
		buf = append(buf, ':')
		buf = append(buf, v.Text...)
	}
	return buf
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

// ErrChainBroken is wrapped, in a RetryableError, by a Target's
// ApplyAfter whose transaction found that the one sent before it on the
// same lane did not commit: nothing of it is committed either.
//
// ApplyAfter is Apply for a transaction sent on a connection of its own
// while the lane's transaction before it is still in flight, to hide the
// round trip between two transactions. It first locks the lane's
// checkpoint row (so it runs only once the transaction holding that lock
// has ended: every transaction of a lane that chains takes it first) and,
// when after is not zero, fails unless the row then holds checkpoint
// sequence after, the one before it.
var ErrChainBroken = errors.New("the transaction sent before it on the same lane did not commit")

// ErrCommittedBefore is wrapped by a Target's error when the batch
// before, whose connection broke after it was sent while the target could
// not be asked whether it committed (a server restarting), turns out to
// have committed after all, found when the stream retries its changes.
// Applying them again is not safe: a foreign-key action sluice carries out
// (Cascades) finds its rows by the values they had before the change, and
// run again onto the rows the batch left it changes rows that took those
// values since (a renumbered parent's old key reused). The retry is
// refused, nothing of it applied: the stream stops and resumes from the
// target's checkpoint, which tells exactly what the target holds. It is
// not retryable.
var ErrCommittedBefore = errors.New("the batch before, whose commit outcome a lost connection left unknown, committed after all")

// ErrRowMissing is wrapped by a Target's error when a batch updates a row
// it holds only some values of (the source left the others unsent: a
// PostgreSQL source's unchanged TOASTed values) and the target has no row
// at that key. Such a row cannot be written, since the values it lacks are
// nowhere in the stream, and passing over it would lose it: the target
// differs from the source, and the stream stops.
var ErrRowMissing = errors.New("a row it updates is not on the target, and the source sent only the values that changed (PostgreSQL leaves unchanged TOASTed values out), so the row cannot be written: the target differs from the source (a row the source had is missing); mend it with sluice verify --repair, or load the table again, then restart the stream")
