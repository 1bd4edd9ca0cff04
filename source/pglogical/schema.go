package pglogical

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
)

// Following a table's DDL. pgoutput carries no DDL; it sends a table's
// relation message (its columns' names, types and key) before the table's
// first change of a session and again after any DDL on it (a relcache
// invalidation), before the first change decoded after the DDL. The
// reader compares each with the table's shape before it, and reads the
// catalog for what the message does not carry:
//
//   - added, dropped and retyped columns come from the message, exactly at
//     their place in the change order; a column whose number (attnum) is
//     a dropped one's under a new name was renamed;
//   - the value an added column holds in the rows that existed before it
//     is pg_attribute.attmissingval, which PostgreSQL keeps for a
//     constant default (ADD COLUMN … DEFAULT 1); a column with a default
//     but no such value got per-row values (a volatile default such as
//     now() or random(), or the table was rewritten since): Volatile;
//   - nullability and indexes come from the catalog as it is when the
//     message is read, which may be ahead of the stream: what is safe
//     early (DROP NOT NULL, a dropped index, a new plain index) goes out
//     with the message; what is not (SET NOT NULL, a new unique index: the
//     target may hold rows the source changed before its DDL) is held
//     until the stream passes the WAL position the catalog was read at.
//     An index change reaches the target with the table's next change.
//
// A change goes out as an OpSchema change at the position of the change
// handed out before it, so that a resume from there meets the relation
// message again.

// deferredEdits are edits of one table held until the stream passes until.
type deferredEdits struct {
	rel   uint32
	until pglogrepl.LSN
	edits []sluice.SchemaEdit
}

// relation handles a relation message: a table's shape as the changes
// after it have it.
func (r *Reader) relation(ctx context.Context, m *pglogrepl.RelationMessage, at pglogrepl.LSN) error {
	rs := r.rels[m.RelationID]
	var leaf *leafRel
	if rs == nil {
		// A partition of a partitioned table: pgoutput names the leaf.
		var err error
		if leaf, err = r.resolveLeaf(ctx, m.RelationID); err != nil || leaf == nil {
			return err
		}
		rs = leaf.root
	}
	pending := &rs.pending
	if leaf != nil {
		pending = &leaf.pending
	}
	if r.skipping(at) {
		// Resent below the resume position: the changes it describes are
		// skipped. It is checked when a change past the resume position
		// uses it, unless a newer one arrives first: after an operator
		// fixed the target for a schema change and restarted, the
		// transactions before it must not stop the stream again.
		*pending = m
		return nil
	}
	*pending = nil
	if leaf != nil {
		// Compared with the table in the table's column order, under its
		// name.
		m, leaf.perm = leafShape(m, rs.table)
	}
	// Held edits are the table's, whichever partition's message found
	// them.
	rel := rs.info.oid
	cur := rs.table
	if name := (sluice.TableName{Schema: m.Namespace, Name: m.RelationName}); name != cur.Name {
		return r.stop(ctx, &sluice.TableError{Table: cur.Name, Err: fmt.Errorf("source table %s was renamed to %s at LSN %s (stream stopped at %s, nothing after it applied): make the target match, then restart sluice",
			cur.Name, name, r.tx.commit, r.errPos())})
	}
	if !rs.seen {
		replay, err := r.replayed(ctx, rs, m)
		if err != nil || replay {
			return err
		}
	}
	next, typ, err := r.shapeOf(ctx, rs, m)
	if err != nil {
		return err
	}
	states, indexes, readAt, err := r.catalogState(ctx, rs, next)
	if err != nil {
		return err
	}
	edits := columnEdits(rs, cur, next, typ, states)
	var later []sluice.SchemaEdit
	for i, c := range next.Columns {
		st, ok := states[c.Name]
		if !ok {
			continue
		}
		switch {
		case !c.Nullable && !st.NotNull:
			next.Columns[i].Nullable = true
			edits = append(edits, sluice.SchemaEdit{Kind: sluice.DropNotNull, Column: c.Name})
			r.dropDeferred(rel, sluice.SetNotNull, c.Name)
		case c.Nullable && st.NotNull && !r.isDeferred(rel, sluice.SetNotNull, c.Name):
			later = append(later, sluice.SchemaEdit{Kind: sluice.SetNotNull, Column: c.Name})
		}
	}
	if rs.indexes != nil {
		for _, ix := range indexes {
			if slices.ContainsFunc(rs.indexes, func(o sluice.Index) bool { return o.Name == ix.Name }) {
				continue
			}
			e := sluice.SchemaEdit{Kind: sluice.CreateIndex, Index: &ix}
			if ix.Unique {
				later = append(later, e)
			} else {
				edits = append(edits, e)
			}
		}
		for _, ix := range rs.indexes {
			if !slices.ContainsFunc(indexes, func(o sluice.Index) bool { return o.Name == ix.Name }) {
				edits = append(edits, sluice.SchemaEdit{Kind: sluice.DropIndex, Index: &ix})
				r.dropDeferred(rel, sluice.CreateIndex, ix.Name)
			}
		}
	}
	rs.indexes = indexes
	if rs.indexes == nil {
		rs.indexes = []sluice.Index{}
	}
	rs.seen = true
	for name, st := range states {
		rs.attnums[name] = st.Attnum
	}
	if len(later) > 0 {
		r.deferred = append(r.deferred, deferredEdits{rel: rel, until: readAt, edits: later})
	}
	if len(edits) == 0 && sameShape(cur, next) {
		return nil
	}
	return r.schemaChange(ctx, rs, next, typ, edits)
}

// replayed handles the first relation message since Open when it is
// older than the catalog the reader described the table from (resuming
// from before an ADD COLUMN, whose columns still exist): the changes
// before it go out in the message's shape, with no schema change, and the
// ADD COLUMN's own message follows.
func (r *Reader) replayed(ctx context.Context, rs *relState, m *pglogrepl.RelationMessage) (bool, error) {
	cur := rs.table
	n := len(m.Columns)
	if n >= len(cur.Columns) {
		return false, nil
	}
	for i := 0; i < n; i++ {
		mc := m.Columns[i]
		if mc.Name != cur.Columns[i].Name || mc.DataType != rs.typ[i].oid || mc.TypeModifier != rs.typ[i].typmod {
			return false, nil
		}
	}
	if slices.ContainsFunc(cur.Key, func(k int) bool { return k >= n }) {
		return false, nil
	}
	alive, err := r.aliveColumns(ctx, rs.info.oid, cur.Columns[n:])
	if err != nil || !alive {
		return false, err
	}
	rs.table = &sluice.Table{Name: cur.Name, Columns: slices.Clone(cur.Columns[:n]), Key: slices.Clone(cur.Key), Omitted: cur.Omitted}
	rs.typ = slices.Clone(rs.typ[:n])
	rs.seen = true
	return true, nil
}

// shapeOf is the table's shape in a relation message: the columns the
// shape before has with the same type keep their description; the others
// are looked up. A key other than the shape before's is refused: the
// stream keys rows by it.
func (r *Reader) shapeOf(ctx context.Context, rs *relState, m *pglogrepl.RelationMessage) (*sluice.Table, []colType, error) {
	cur := rs.table
	t := &sluice.Table{Name: cur.Name, Omitted: cur.Omitted}
	typ := make([]colType, len(m.Columns))
	var fresh []int // the columns looked up, not kept from cur
	for i, mc := range m.Columns {
		j := cur.ColumnIndex(mc.Name)
		if j >= 0 && rs.typ[j].oid == mc.DataType && rs.typ[j].typmod == mc.TypeModifier {
			t.Columns = append(t.Columns, cur.Columns[j])
			typ[i] = rs.typ[j]
			continue
		}
		tn, base, err := r.formatType(ctx, mc.DataType, mc.TypeModifier)
		if err != nil {
			return nil, nil, err
		}
		c := sluice.Column{Name: mc.Name, Type: tn, Nullable: true}
		if j >= 0 {
			c.Nullable, c.Collation = cur.Columns[j].Nullable, cur.Columns[j].Collation
		}
		fresh = append(fresh, len(t.Columns))
		t.Columns = append(t.Columns, c)
		typ[i] = colType{oid: mc.DataType, typmod: mc.TypeModifier, base: base}
	}
	if len(fresh) > 0 {
		// A column new or retyped here may be of an enum type: its labels
		// choose its MySQL form (sluice.Column.Enum).
		var enums map[string]string
		if err := r.withSQL(ctx, func(conn *pgx.Conn) (err error) {
			enums, err = pgcatalog.EnumLabels(ctx, conn, cur.Name, rs.info.oid)
			return err
		}); err != nil {
			return nil, nil, err
		}
		for _, i := range fresh {
			t.Columns[i].Enum = enums[t.Columns[i].Name]
		}
	}
	var key []string
	for _, mc := range m.Columns {
		if mc.Flags&1 != 0 {
			key = append(key, mc.Name)
		}
	}
	for _, k := range cur.KeyNames() {
		i := t.ColumnIndex(k)
		if i < 0 || !slices.Contains(key, k) {
			break
		}
		t.Key = append(t.Key, i)
	}
	if len(t.Key) != len(cur.Key) || len(key) != len(cur.Key) {
		return nil, nil, r.stop(ctx, &sluice.TableError{Table: cur.Name, Err: fmt.Errorf("source table %s: its primary key changed from (%s) to (%s) at LSN %s: the stream keys rows by it and cannot follow (stream stopped at %s, nothing after it applied): "+
			"make the target's primary key the source's, then restart sluice", cur.Name, strings.Join(cur.KeyNames(), ", "), strings.Join(key, ", "), r.tx.commit, r.errPos())})
	}
	return t, typ, nil
}

// catalogState reads the table's columns and indexes as the catalog has
// them now, and the WAL position they are no older than.
func (r *Reader) catalogState(ctx context.Context, rs *relState, next *sluice.Table) (map[string]pgcatalog.ColumnState, []sluice.Index, pglogrepl.LSN, error) {
	var states map[string]pgcatalog.ColumnState
	var indexes []sluice.Index
	var at pglogrepl.LSN
	err := r.withSQL(ctx, func(conn *pgx.Conn) error {
		var lsn string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return err
		}
		var err error
		if at, err = pglogrepl.ParseLSN(lsn); err != nil {
			return err
		}
		// Logical decoding can hand out a transaction once its commit
		// record is flushed, before the committing backend leaves the
		// process array: a catalog read in that window misses the
		// transaction's own DDL (an added column read as dropped since, a
		// rename as a drop and an add; seen in TestSchemaChanges). A column
		// the message names and the catalog lacks is read again for a
		// short while; one dropped since (the catalog ahead of the stream)
		// stays missing after it, as before.
		for deadline := time.Now().Add(500 * time.Millisecond); ; {
			if states, err = pgcatalog.ColumnStates(ctx, conn, rs.table.Name, rs.info.oid); err != nil {
				return err
			}
			if !slices.ContainsFunc(next.Columns, func(c sluice.Column) bool { _, ok := states[c.Name]; return !ok }) || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond): // polling interval
			}
		}
		indexes, err = pgcatalog.Indexes(ctx, conn, rs.table.Name, rs.info.oid)
		return err
	})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("read the catalog of source table %s after its relation message: %w", rs.table.Name, err)
	}
	return states, indexes, at, nil
}

// columnEdits compares two shapes of a table: a column of the shape
// before whose number a new name has now was renamed; others missing now
// were dropped; new ones added (with the value the rows that existed then
// hold); those of the same name with another type retyped.
func columnEdits(rs *relState, cur, next *sluice.Table, typ []colType, states map[string]pgcatalog.ColumnState) []sluice.SchemaEdit {
	var edits []sluice.SchemaEdit
	var gone []string
	for _, c := range cur.Columns {
		if next.ColumnIndex(c.Name) < 0 {
			gone = append(gone, c.Name)
		}
	}
	renamed := map[string]string{} // new name → old
	for _, c := range next.Columns {
		if cur.ColumnIndex(c.Name) >= 0 {
			continue
		}
		st, ok := states[c.Name]
		if !ok {
			continue
		}
		for _, g := range gone {
			if n, known := rs.attnums[g]; known && n == st.Attnum {
				renamed[c.Name] = g
			}
		}
	}
	for _, g := range gone {
		if !slices.ContainsFunc(next.Columns, func(c sluice.Column) bool { return renamed[c.Name] == g }) {
			edits = append(edits, sluice.SchemaEdit{Kind: sluice.DropColumn, Column: g})
		}
	}
	for i, c := range next.Columns {
		if old, ok := renamed[c.Name]; ok {
			edits = append(edits, sluice.SchemaEdit{Kind: sluice.RenameColumn, Column: old, To: c.Name})
			continue
		}
		j := cur.ColumnIndex(c.Name)
		if j < 0 {
			edits = append(edits, addColumn(c.Name, typ[i].base, states))
			continue
		}
		if rs.typ[j].oid != typ[i].oid || rs.typ[j].typmod != typ[i].typmod {
			edits = append(edits, sluice.SchemaEdit{Kind: sluice.AlterColumnType, Column: c.Name})
		}
	}
	return edits
}

// addColumn is the edit of a column added, with what the rows that
// existed before it hold in it.
func addColumn(name string, base uint32, states map[string]pgcatalog.ColumnState) sluice.SchemaEdit {
	e := sluice.SchemaEdit{Kind: sluice.AddColumn, Column: name, Fill: sluice.Null}
	st, ok := states[name]
	switch {
	case !ok:
		// Dropped since: its values go with it, later in the stream.
	case st.HasMissing && !st.MissingNull:
		e.Fill = sluice.Text(castText(base, st.Missing))
	case st.HasMissing:
	case st.Default != "":
		e.Volatile = true
		e.Reason = fmt.Sprintf("its default %s gave each existing row a value of its own (a volatile default; or the table was rewritten since the column was added)", st.Default)
	}
	return e
}

// schemaChange hands out an OpSchema change at the position of the change
// handed out before it, and makes next the table's shape.
func (r *Reader) schemaChange(ctx context.Context, rs *relState, next *sluice.Table, typ []colType, edits []sluice.SchemaEdit) error {
	if r.hasHeld {
		if err := r.push(ctx, r.heldPos); err != nil {
			return err
		}
	}
	r.held, r.hasHeld = sluice.Change{Op: sluice.OpSchema, Table: next, Time: r.tx.time, Schema: &sluice.SchemaChange{Before: rs.table, Edits: edits}}, true
	if err := r.push(ctx, r.resume); err != nil {
		return err
	}
	r.log.Info("source table's definition changed", "table", next.Name.String(), "changes", describeEdits(edits), "lsn", r.tx.commit.String())
	rs.table, rs.typ = next, typ
	return nil
}

// emitDeferred hands out the held edits whose catalog the stream has now
// passed: the open transaction commits after the catalog was read.
func (r *Reader) emitDeferred(ctx context.Context) error {
	for i := 0; i < len(r.deferred); {
		d := r.deferred[i]
		if r.tx.commit <= d.until {
			i++
			continue
		}
		r.deferred = slices.Delete(r.deferred, i, i+1)
		rs := r.rels[d.rel]
		next := &sluice.Table{Name: rs.table.Name, Columns: slices.Clone(rs.table.Columns), Key: rs.table.Key, Omitted: rs.table.Omitted}
		for _, e := range d.edits {
			if e.Kind == sluice.SetNotNull {
				if j := next.ColumnIndex(e.Column); j >= 0 {
					next.Columns[j].Nullable = false
				}
			}
		}
		if err := r.schemaChange(ctx, rs, next, rs.typ, d.edits); err != nil {
			return err
		}
	}
	return nil
}

// isDeferred reports whether an edit of a column or index is held.
func (r *Reader) isDeferred(rel uint32, kind sluice.EditKind, name string) bool {
	for _, d := range r.deferred {
		if d.rel == rel && slices.ContainsFunc(d.edits, func(e sluice.SchemaEdit) bool { return e.Kind == kind && editName(e) == name }) {
			return true
		}
	}
	return false
}

// dropDeferred forgets a held edit that a newer state undid.
func (r *Reader) dropDeferred(rel uint32, kind sluice.EditKind, name string) {
	for i := range r.deferred {
		if r.deferred[i].rel == rel {
			r.deferred[i].edits = slices.DeleteFunc(r.deferred[i].edits, func(e sluice.SchemaEdit) bool { return e.Kind == kind && editName(e) == name })
		}
	}
}

func editName(e sluice.SchemaEdit) string {
	if e.Index != nil {
		return e.Index.Name
	}
	return e.Column
}

// sameShape reports whether two shapes of a table are the same for the
// changes that use them.
func sameShape(a, b *sluice.Table) bool {
	return slices.Equal(a.Columns, b.Columns) && slices.Equal(a.Key, b.Key)
}

// describeEdits summarises edits for the log.
func describeEdits(edits []sluice.SchemaEdit) string {
	parts := make([]string, len(edits))
	for i, e := range edits {
		switch e.Kind {
		case sluice.AddColumn:
			parts[i] = "add column " + e.Column
		case sluice.DropColumn:
			parts[i] = "drop column " + e.Column
		case sluice.AlterColumnType:
			parts[i] = "retype column " + e.Column
		case sluice.SetNotNull:
			parts[i] = "set not null " + e.Column
		case sluice.DropNotNull:
			parts[i] = "drop not null " + e.Column
		case sluice.CreateIndex:
			parts[i] = "create index " + e.Index.Name
		case sluice.DropIndex:
			parts[i] = "drop index " + e.Index.Name
		case sluice.RenameColumn:
			parts[i] = "rename column " + e.Column + " to " + e.To
		default:
			parts[i] = e.Reason
		}
	}
	if len(parts) == 0 {
		return "column descriptions"
	}
	return strings.Join(parts, ", ")
}
