package typemap

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// Inner is the target a Target writes through.
type Inner interface {
	Preflight(ctx context.Context, tables []*sluice.Table) error
	Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error
	ReadCheckpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error)
	ReadCheckpoints(ctx context.Context, stream string) ([]sluice.Checkpoint, error)
	// ForeignKeys returns the tables a foreign key joins to the target
	// table, either way, as the target names them.
	ForeignKeys(ctx context.Context, name sluice.TableName) ([]sluice.TableName, error)
	Ping(ctx context.Context) (time.Duration, error)
	Close(ctx context.Context) error
	// ColumnTypes returns the target table's column types as the target
	// spells them, or nil when the table does not exist.
	ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error)
	// HasUniqueKeys reports whether the target table has unique keys
	// besides its primary key.
	HasUniqueKeys(ctx context.Context, name sluice.TableName) (bool, error)
	// TxTimeout is the target's limit on a transaction's time, and what
	// sets it; zero when it has none.
	TxTimeout(ctx context.Context) (time.Duration, string, error)
	// OldestTransaction describes the oldest open transaction on the
	// target besides the applier's.
	OldestTransaction(ctx context.Context) (string, error)
}

// Target writes a source of one engine to a target of another: it checks
// every column pair before data moves and converts each value's text form
// on the way.
type Target struct {
	Inner
	from, to Engine
	// keepSchema keeps the source's schema in target table names. A MySQL
	// target's tables live in the database its connection names, and a
	// PostgreSQL target fed from MySQL (whose "schema" is the source
	// database) uses its search_path, so only PostgreSQL to PostgreSQL keeps
	// it.
	keepSchema bool

	mu     sync.Mutex
	tables map[*sluice.Table]*tableMap
}

type tableMap struct {
	src   *sluice.Table
	out   *sluice.Table // the source table with the target's column types
	convs []Conv        // per column; nil entries keep the text
	// keyConvs are convs of the key's columns, aligned with src.Key.
	keyConvs []Conv
	// identity: no column converts, so rows and keys pass as they are
	// (every table of a same-engine stream, most of a cross-engine one).
	identity bool
}

func newTableMap(src, out *sluice.Table, convs []Conv) *tableMap {
	m := &tableMap{src: src, out: out, convs: convs, keyConvs: make([]Conv, len(src.Key)), identity: true}
	for _, c := range convs {
		if c != nil {
			m.identity = false
		}
	}
	for x, c := range src.Key {
		m.keyConvs[x] = convs[c]
	}
	return m
}

// Wrap returns a Target that writes values read from a from-engine source
// to inner, a to-engine target. from may equal to: then values pass as they
// are and only table names are mapped.
func Wrap(inner Inner, from, to Engine) *Target {
	return &Target{Inner: inner, from: from, to: to, keepSchema: from == Postgres && to == Postgres,
		tables: map[*sluice.Table]*tableMap{}}
}

// Preflight maps every column of every table, refusing (all at once) the
// pairs whose values the target cannot hold exactly, then runs the inner
// target's own checks on the mapped tables.
func (t *Target) Preflight(ctx context.Context, tables []*sluice.Table) error {
	var errs []error
	mapped := make([]*sluice.Table, 0, len(tables))
	for _, tbl := range tables {
		m, err := t.mapTable(ctx, tbl)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		mapped = append(mapped, m.out)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s source to %s target: %w", t.from, t.to, errors.Join(errs...))
	}
	return t.Inner.Preflight(ctx, mapped)
}

func (t *Target) mapTable(ctx context.Context, tbl *sluice.Table) (*tableMap, error) {
	t.mu.Lock()
	m := t.tables[tbl]
	t.mu.Unlock()
	if m != nil {
		return m, nil
	}
	// A description equal to one mapped already (the stream's reader
	// describes the tables again after the initial copy) maps the same.
	t.mu.Lock()
	for _, old := range t.tables {
		if reflect.DeepEqual(*old.src, *tbl) {
			m = newTableMap(tbl, old.out, old.convs)
			t.tables[tbl] = m
			break
		}
	}
	t.mu.Unlock()
	if m != nil {
		return m, nil
	}
	name := tbl.Name
	if !t.keepSchema {
		name.Schema = ""
	}
	types, err := t.Inner.ColumnTypes(ctx, name)
	if err != nil {
		return nil, err
	}
	out := &sluice.Table{Name: name, Key: tbl.Key, Columns: make([]sluice.Column, len(tbl.Columns)), Omitted: tbl.Omitted}
	convs := make([]Conv, len(tbl.Columns))
	var errs []error
	for i, c := range tbl.Columns {
		out.Columns[i] = c
		dst, ok := types[c.Name]
		if !ok || t.from == t.to {
			// The inner target checks missing columns and same-engine
			// types; a column it generates (not in types) it never
			// writes, so its values need no conversion.
			continue
		}
		conv, err := Column(t.from, t.to, c, dst)
		if err != nil {
			errs = append(errs, fmt.Errorf("column %s.%s (%s on the %s source, %s on the %s target): %w", tbl.Name, c.Name, c.Type, t.from, dst, t.to, err))
			continue
		}
		out.Columns[i].Type = dst
		convs[i] = conv
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m = newTableMap(tbl, out, convs)
	t.mu.Lock()
	t.tables[tbl] = m
	t.mu.Unlock()
	return m, nil
}

// Apply converts the batch's values and applies it through the inner
// target. A value the target cannot hold fails the batch with an error
// naming the table, column and row key; nothing of the batch is applied.
func (t *Target) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	out, err := t.convert(ctx, b)
	if err != nil {
		return err
	}
	return t.sourceNames(t.learn(ctx, b, t.Inner.Apply(ctx, out, cp)))
}

// learner is an inner target that keeps each table's definition for the
// foreign-key actions whose path runs through a table no batch names.
type learner interface {
	Learn(tbl *sluice.Table)
}

// learn hands the inner target a table's definition as a schema change
// left it, converted, once the change's batch applied: the batch carries
// the source's definition, which the inner target knows under another
// name and shape, and which can only be converted once the target's
// table has the change.
func (t *Target) learn(ctx context.Context, b *apply.Batch, err error) error {
	if err != nil || b.Schema == nil || b.Schema.Table == nil {
		return err
	}
	if l, ok := t.Inner.(learner); ok {
		// A definition that does not convert is left out: the changes
		// after it fail on it, naming the column.
		if m, merr := t.mapTable(ctx, b.Schema.Table); merr == nil {
			l.Learn(m.out)
		}
	}
	return nil
}

// chainer is a target that can chain a lane's transactions (see
// apply.ErrChainBroken).
type chainer interface {
	ApplyAfter(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint, after uint64, written func()) error
}

// Chains reports whether the inner target can chain transactions
// (ApplyAfter).
func (t *Target) Chains() bool {
	_, ok := t.Inner.(chainer)
	return ok
}

// ApplyAfter is the inner target's, with b converted as Apply does; an
// error when the inner target cannot chain (see Chains).
func (t *Target) ApplyAfter(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint, after uint64, written func()) error {
	c, ok := t.Inner.(chainer)
	if !ok {
		return fmt.Errorf("%s target cannot chain transactions", t.to)
	}
	out, err := t.convert(ctx, b)
	if err != nil {
		return err
	}
	return t.sourceNames(t.learn(ctx, b, c.ApplyAfter(ctx, out, cp, after, written)))
}

// unknownKeeper is an inner target that keeps the batches whose commit
// outcome a failure left unknown (see apply.ErrCommittedBefore).
type unknownKeeper interface {
	TakeUnknown() []sluice.Checkpoint
	KeepUnknown(cps []sluice.Checkpoint)
}

// TakeUnknown is the inner target's; nil when it keeps none.
func (t *Target) TakeUnknown() []sluice.Checkpoint {
	if k, ok := t.Inner.(unknownKeeper); ok {
		return k.TakeUnknown()
	}
	return nil
}

// KeepUnknown is the inner target's, when it has one.
func (t *Target) KeepUnknown(cps []sluice.Checkpoint) {
	if k, ok := t.Inner.(unknownKeeper); ok {
		k.KeepUnknown(cps)
	}
}

// convert returns b with its tables mapped and its values converted, part
// after part.
func (t *Target) convert(ctx context.Context, b *apply.Batch) (*apply.Batch, error) {
	var first, prev *apply.Batch
	for _, part := range b.Parts() {
		out, err := t.convertPart(ctx, part)
		if err != nil {
			return nil, err
		}
		if prev == nil {
			first = out
		} else {
			prev.Next = out
		}
		prev = out
	}
	return first, nil
}

// convertPart converts one part of a batch.
func (t *Target) convertPart(ctx context.Context, b *apply.Batch) (*apply.Batch, error) {
	out := &apply.Batch{Changes: b.Changes, Rows: b.Rows, Last: b.Last, Schema: b.Schema, DDL: b.DDL, Tables: make([]*apply.TableBatch, len(b.Tables))}
	for i, tb := range b.Tables {
		m, err := t.mapTable(ctx, tb.Table)
		if err != nil {
			return nil, err
		}
		ob := &apply.TableBatch{Table: m.out, Truncate: tb.Truncate}
		if len(tb.Moves) > 0 {
			ob.Moves = make([]sluice.Change, len(tb.Moves))
		}
		for j, c := range tb.Moves {
			if ob.Moves[j], err = m.change(c); err != nil {
				return nil, err
			}
		}
		if ob.Deletes, err = convertRows(tb.Deletes, m.key); err != nil {
			return nil, err
		}
		if ob.Upserts, err = convertRows(tb.Upserts, m.row); err != nil {
			return nil, err
		}
		out.Tables[i] = ob
	}
	if len(b.Ordered) > 0 {
		out.Ordered = make([]sluice.Change, len(b.Ordered))
	}
	for i, c := range b.Ordered {
		m, err := t.mapTable(ctx, c.Table)
		if err != nil {
			return nil, err
		}
		if out.Ordered[i], err = m.change(c); err != nil {
			return nil, err
		}
	}
	if b.Cascades != nil {
		// The foreign-key actions name tables as the source does; their
		// values come from the ordered changes, converted above.
		name := func(n sluice.TableName) sluice.TableName {
			if !t.keepSchema {
				n.Schema = ""
			}
			return n
		}
		out.Cascades = make([][]apply.Cascade, len(b.Cascades))
		for i, steps := range b.Cascades {
			for _, c := range steps {
				out.Cascades[i] = append(out.Cascades[i], c.Map(name))
			}
		}
	}
	return out, nil
}

// convertRows returns rows converted by conv: rows itself while conv
// returns each row as it is (no value to convert, or only values whose
// text stays), a copy from the first row it changes. The inner target
// only reads the rows.
func convertRows(rows []sluice.Row, conv func(sluice.Row) (sluice.Row, error)) ([]sluice.Row, error) {
	out := rows
	for j, r := range rows {
		nr, err := conv(r)
		if err != nil {
			return nil, err
		}
		if sameRow(nr, r) {
			continue
		}
		if &out[0] == &rows[0] {
			out = append([]sluice.Row(nil), rows...)
		}
		out[j] = nr
	}
	return out, nil
}

// sameRow reports whether a and b are the same slice.
func sameRow(a, b sluice.Row) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// change converts a change of the source table: its table, key and row.
func (m *tableMap) change(c sluice.Change) (sluice.Change, error) {
	oc := c
	oc.Table = m.out
	var err error
	if c.Key != nil {
		if oc.Key, err = m.key(c.Key); err != nil {
			return oc, err
		}
	}
	if c.Row != nil {
		if oc.Row, err = m.row(c.Row); err != nil {
			return oc, err
		}
	}
	return oc, nil
}

// sourceNames renames the tables of a constraint error to their source
// names: the stream knows its tables by those.
func (t *Target) sourceNames(err error) error {
	var ce *apply.ConstraintError
	if errors.As(err, &ce) {
		t.mu.Lock()
		for i, n := range ce.Tables {
			for _, m := range t.tables {
				if m.out.Name == n {
					ce.Tables[i] = m.src.Name
					break
				}
			}
		}
		t.mu.Unlock()
	}
	return err
}

// key converts a key aligned with the source table's Key.
func (m *tableMap) key(k sluice.Row) (sluice.Row, error) {
	if m.identity {
		return k, nil
	}
	return convertRow(k, m.keyConvs, m.src, func() sluice.Row { return k }, func(i int) string { return m.src.Columns[m.src.Key[i]].Name })
}

// row converts a full row image.
func (m *tableMap) row(r sluice.Row) (sluice.Row, error) {
	if m.identity {
		return r, nil
	}
	return convertRow(r, m.convs, m.src, func() sluice.Row { return m.src.KeyOf(r) }, func(i int) string { return m.src.Columns[i].Name })
}

// convertRow converts r's values with convs, aligned with r, returning r
// itself when no value changes. key and name give the row's key and the
// name of r's i-th column for an error: only a failure needs them.
func convertRow(r sluice.Row, convs []Conv, tbl *sluice.Table, key func() sluice.Row, name func(i int) string) (sluice.Row, error) {
	var out sluice.Row
	for i, v := range r {
		if i >= len(convs) || convs[i] == nil || v.Null || v.Unchanged {
			continue
		}
		nv, err := convs[i](v.Text)
		if err != nil {
			return nil, fmt.Errorf("table %s, column %s, row %s: %w; the value cannot be written to the target exactly, so the stream stops here (fix the value on the source, or change the target column)",
				tbl.Name, name(i), tbl.FormatKey(key()), err)
		}
		if nv != v.Text {
			if out == nil {
				out = append(sluice.Row(nil), r...)
			}
			out[i].Text = nv
		}
	}
	if out == nil {
		return r, nil
	}
	return out, nil
}

// HasUniqueKeys asks the inner target about the table as it is named there.
func (t *Target) HasUniqueKeys(ctx context.Context, name sluice.TableName) (bool, error) {
	if !t.keepSchema {
		name.Schema = ""
	}
	return t.Inner.HasUniqueKeys(ctx, name)
}

// ForeignKeys asks the inner target about the table as it is named there.
func (t *Target) ForeignKeys(ctx context.Context, name sluice.TableName) ([]sluice.TableName, error) {
	if !t.keepSchema {
		name.Schema = ""
	}
	return t.Inner.ForeignKeys(ctx, name)
}

// MeasuredRTT is the inner target's, where it has one (see
// stream.Config.Target).
func (t *Target) MeasuredRTT() (time.Duration, bool) {
	if m, ok := t.Inner.(interface {
		MeasuredRTT() (time.Duration, bool)
	}); ok {
		return m.MeasuredRTT()
	}
	return 0, false
}

// ChecksForeignKeys is the inner target's, where it has one: whether the
// target's foreign keys check, and act on, sluice's writes.
func (t *Target) ChecksForeignKeys() bool {
	if c, ok := t.Inner.(interface{ ChecksForeignKeys() bool }); ok {
		return c.ChecksForeignKeys()
	}
	return false
}

// Fence is the inner target's, where it has one (see the targets' Fence).
func (t *Target) Fence(ctx context.Context, stream string) (int64, error) {
	if f, ok := t.Inner.(interface {
		Fence(ctx context.Context, stream string) (int64, error)
	}); ok {
		return f.Fence(ctx, stream)
	}
	return 0, nil
}

// WrittenColumns is the inner target's for the table as it maps it (its
// columns are the source table's, in the same order), where it has one.
func (t *Target) WrittenColumns(tbl *sluice.Table) []int {
	w, ok := t.Inner.(interface {
		WrittenColumns(*sluice.Table) []int
	})
	if !ok {
		return nil
	}
	t.mu.Lock()
	m := t.tables[tbl]
	t.mu.Unlock()
	if m == nil {
		return nil
	}
	return w.WrittenColumns(m.out)
}

// PreflightWarnings is the inner target's, where it has them (see the
// targets' PreflightWarnings).
func (t *Target) PreflightWarnings() []string {
	if w, ok := t.Inner.(interface{ PreflightWarnings() []string }); ok {
		return w.PreflightWarnings()
	}
	return nil
}

// SetGeneration is the inner target's, where it has one.
func (t *Target) SetGeneration(stream string, gen int64) {
	if f, ok := t.Inner.(interface{ SetGeneration(string, int64) }); ok {
		f.SetGeneration(stream, gen)
	}
}

// ForgetTables is the inner target's, where it has one, and drops the
// column maps made from the target's catalog.
func (t *Target) ForgetTables() {
	if f, ok := t.Inner.(interface{ ForgetTables() }); ok {
		f.ForgetTables()
	}
	t.mu.Lock()
	clear(t.tables)
	t.mu.Unlock()
}
