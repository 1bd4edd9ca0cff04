package apply

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sluice-cdc/sluice"
)

// A MySQL or MariaDB source's log omits the rows its foreign-key actions
// change: InnoDB writes no row event for a cascaded delete or update, and
// fires no trigger for it, so neither the binlog nor a changelog filled by
// triggers ever holds them. A MySQL replica gets them right only because
// its own InnoDB runs the action again when it applies the parent's change.
// sluice does what that InnoDB does, from the source's foreign keys: right
// before it applies a parent's delete or update, in the same transaction
// and in source order, it applies the actions that change triggered on the
// source. Cascades plans those statements; the targets write them.
//
// Each statement (a Cascade) changes the rows of one table that reference
// the change's row through a path of foreign keys, joined back to the
// change's row by its old primary key. The statements of one change run
// deepest first, before the change's own statement: each still finds the
// rows it joins through as they were before the change, which is what the
// source's InnoDB saw when it ran the action row by row.
//
// As InnoDB does:
//   - ON DELETE CASCADE deletes the referencing rows, and their deletes
//     cascade further; ON DELETE SET NULL sets their columns to NULL;
//   - ON UPDATE CASCADE gives the referencing rows the referenced columns'
//     new values, and ON UPDATE SET NULL sets them to NULL, only when the
//     update changed those columns; the referencing rows' changed columns
//     in turn fire the foreign keys that reference them;
//   - RESTRICT and NO ACTION change nothing (the source refused the change
//     if a row referenced it);
//   - an update that would cascade into a table a row update of the same
//     cascade already changed is refused by InnoDB (a self-referencing ON
//     UPDATE CASCADE whose row has children), and so is a cascade more than
//     maxCascadeDepth rows deep: the source's statement failed and left no
//     change in the log, so such paths are not planned.
//
// A change applies its cascades correctly only when the target holds
// exactly the source's rows when it runs, so a batch is cut after each
// change that fires an action (Compactor.Cut = Fires): the changes before
// it are compacted and applied first, it follows with its actions, and the
// changes after it are compacted apart. The lanes keep the tables a
// foreign key joins in one lane.

// maxCascadeDepth is the deepest row a cascade reaches below the change's
// row: InnoDB refuses a cascade at FK_MAX_CASCADE_DEL = 15 ancestors, so
// 14 levels succeed (measured on MariaDB 10.11: a self-referencing ON
// DELETE CASCADE chain of 15 rows deletes, one of 16 fails with error 193).
const maxCascadeDepth = 14

// maxCascades bounds the statements one change's cascades may take: a
// table with two self-references would otherwise take 2^14 paths.
const maxCascades = 128

// Cascade is one statement of the foreign-key actions a change fires on
// the source, which the target carries out right before the change itself
// (see the comment above). Tables and columns are named as the target
// names them (the cross-engine wrapper renames the tables).
type Cascade struct {
	// Path joins the rows the statement changes to the change's row:
	// Path[0].Table holds the rows, each link's RefTable is the next
	// link's Table, and the last link's RefTable is the change's table,
	// whose row is found there by the change's old primary key.
	Path []CascadeLink
	// Delete deletes the rows; otherwise Set's columns are set.
	Delete bool
	Set    []CascadeSet
	// IfChanged holds columns of the change's table, when set: the
	// statement runs only if the change's row holds, before the change,
	// values in them other than the change's new image (an update whose
	// change of referenced columns outside the primary key only the
	// target's row can tell).
	IfChanged []string
	// Constraint names the foreign key whose action the statement carries
	// out (Path[0]'s), for errors.
	Constraint string
}

// CascadeLink is one foreign key of a Cascade's path: Columns of Table
// reference RefColumns of RefTable.
type CascadeLink struct {
	Table      sluice.TableName
	Columns    []string
	RefTable   sluice.TableName
	RefColumns []string
}

// CascadeSet is a column a Cascade sets: to the value column From has in
// the change's new image, or to NULL when From is empty.
type CascadeSet struct {
	Column string
	From   string
}

// String describes the statement for errors, e.g. "ON DELETE CASCADE of
// foreign key lines_order_fk (shop.order_lines → shop.orders →
// shop.customers)".
func (c Cascade) String() string {
	what := "ON UPDATE CASCADE"
	switch {
	case c.Delete:
		what = "ON DELETE CASCADE"
	case len(c.Set) > 0 && c.Set[0].From == "":
		what = "SET NULL"
	}
	names := make([]string, 0, len(c.Path)+1)
	for _, l := range c.Path {
		names = append(names, l.Table.String())
	}
	if len(c.Path) > 0 {
		names = append(names, c.Path[len(c.Path)-1].RefTable.String())
	}
	return fmt.Sprintf("%s of foreign key %s (%s)", what, c.Constraint, strings.Join(names, " → "))
}

// CascadeArgs are the values a target writes a Cascade with, taken from
// the change that fired it.
type CascadeArgs struct {
	// Set holds the values of the Cascade's Set columns (NULL for SET
	// NULL), News the change's new values of its IfChanged columns.
	Set, News []sluice.Value
	// Old is the change's row's primary key before the change.
	Old sluice.Row
	// Ref holds, when the last link of the path references columns of
	// the change's primary key, their values before the change (from
	// Old): the target then finds the rows by them, not by joining the
	// changed row, so that the statement does its work whether that row
	// is on the target or not (a batch applied again after an unknown
	// commit outcome meets it deleted already). Nil otherwise.
	Ref []sluice.Value
}

// Args returns the values of the statement for change ch, which must be
// of the table the statement's path ends at.
func (c Cascade) Args(ch *sluice.Change) (CascadeArgs, error) {
	fail := func(format string, args ...any) (CascadeArgs, error) {
		return CascadeArgs{}, fmt.Errorf("apply %s for the %s in %s: %s", c, ch.Op, ch.Table.Name, fmt.Sprintf(format, args...))
	}
	if len(c.Path) == 0 || c.Path[len(c.Path)-1].RefTable != ch.Table.Name {
		return fail("its path does not end at %s", ch.Table.Name)
	}
	var a CascadeArgs
	value := func(col string) (sluice.Value, bool) {
		i := ch.Table.ColumnIndex(col)
		if i < 0 || i >= len(ch.Row) || ch.Row[i].Unchanged {
			return sluice.Value{}, false
		}
		return ch.Row[i], true
	}
	for _, s := range c.Set {
		v := sluice.Null
		if s.From != "" {
			var ok bool
			if v, ok = value(s.From); !ok {
				return fail("the change carries no value of %s", s.From)
			}
		}
		a.Set = append(a.Set, v)
	}
	for _, col := range c.IfChanged {
		v, ok := value(col)
		if !ok {
			return fail("the change carries no value of %s", col)
		}
		a.News = append(a.News, v)
	}
	a.Old = ch.Key
	if a.Old == nil && ch.Row != nil {
		a.Old = ch.Table.KeyOf(ch.Row)
	}
	if len(a.Old) != len(ch.Table.Key) {
		return fail("the key has %d values, want %d", len(a.Old), len(ch.Table.Key))
	}
	keys := ch.Table.KeyNames()
	for _, rc := range c.Path[len(c.Path)-1].RefColumns {
		k := slices.Index(keys, rc)
		if k < 0 {
			a.Ref = nil
			break
		}
		a.Ref = append(a.Ref, a.Old[k])
	}
	return a, nil
}

// Map returns the cascade with its tables renamed by name (the
// cross-engine wrapper's names on the target).
func (c Cascade) Map(name func(sluice.TableName) sluice.TableName) Cascade {
	out := c
	out.Path = make([]CascadeLink, len(c.Path))
	for i, l := range c.Path {
		l.Table, l.RefTable = name(l.Table), name(l.RefTable)
		out.Path[i] = l
	}
	return out
}

// CascadeError is a foreign key of the source whose action sluice cannot
// carry out on the target, found before any data moves.
type CascadeError struct {
	FK  sluice.ForeignKey
	Err error
}

func (e *CascadeError) Error() string { return e.Err.Error() }
func (e *CascadeError) Unwrap() error { return e.Err }

// TableOf names the foreign key's table, for the log's table field.
func (e *CascadeError) TableOf() (sluice.TableName, bool) { return e.FK.Table, true }

// fkLink is a foreign key between two streamed tables, with an action.
type fkLink struct {
	fk   sluice.ForeignKey
	link CascadeLink
}

// Cascades plans the foreign-key actions of a stream's source that the
// target carries out (see the comment above). Its methods may be called
// from several goroutines.
type Cascades struct {
	// refs holds, per referenced table, the foreign keys with an action
	// whose both tables the stream carries.
	refs map[sluice.TableName][]fkLink
	// keys holds each streamed table's primary key columns.
	keys   map[sluice.TableName][]string
	groups [][2]sluice.TableName

	mu    sync.Mutex
	plans map[string][]Cascade
}

// NewCascades plans the actions of fks, the foreign keys of a source
// whose log omits the rows they change, for a stream of tables. It
// refuses, with a *CascadeError naming the constraint and the fix, what
// it cannot follow: a streamed table referencing, with an action, a table
// the stream does not carry (its parent's deletes never reach sluice, so
// the rows they change would stay on the target); SET DEFAULT; a graph
// whose actions take more than maxCascades statements for one change.
func NewCascades(fks []sluice.ForeignKey, tables []*sluice.Table) (*Cascades, error) {
	cs := &Cascades{refs: map[sluice.TableName][]fkLink{}, keys: map[sluice.TableName][]string{}, plans: map[string][]Cascade{}}
	byName := map[sluice.TableName]*sluice.Table{}
	for _, t := range tables {
		byName[t.Name] = t
		cs.keys[t.Name] = t.KeyNames()
	}
	for _, f := range fks {
		child, parent := byName[f.Table], byName[f.RefTable]
		if child == nil {
			continue // its rows are not streamed: what happens to them is not sluice's
		}
		if parent != nil && f.Table != f.RefTable {
			cs.groups = append(cs.groups, [2]sluice.TableName{f.Table, f.RefTable})
		}
		if !f.Acts() {
			continue
		}
		if f.OnDelete == sluice.FKSetDefault || f.OnUpdate == sluice.FKSetDefault {
			return nil, &CascadeError{FK: f, Err: fmt.Errorf("%s has an action SET DEFAULT (ON DELETE %s, ON UPDATE %s), which sluice does not carry out on the target: change it on the source",
				f, f.OnDelete, f.OnUpdate)}
		}
		if parent == nil {
			return nil, &CascadeError{FK: f, Err: fmt.Errorf("%s has ON DELETE %s ON UPDATE %s, but the stream does not carry %s: "+
				"its deletes and updates, and the rows of %s they change, never reach sluice, which would leave those rows on the target as they were; "+
				"add %s to the stream's tables",
				f, f.OnDelete, f.OnUpdate, f.RefTable, f.Table, f.RefTable)}
		}
		for _, cols := range []struct {
			t     *sluice.Table
			names []string
		}{{child, f.Columns}, {parent, f.RefColumns}} {
			for _, c := range cols.names {
				if cols.t.ColumnIndex(c) < 0 {
					return nil, &CascadeError{FK: f, Err: fmt.Errorf("%s names column %s, which %s does not have", f, c, cols.t.Name)}
				}
			}
		}
		if len(f.Columns) != len(f.RefColumns) || len(f.Columns) == 0 {
			return nil, &CascadeError{FK: f, Err: fmt.Errorf("%s has %d columns referencing %d", f, len(f.Columns), len(f.RefColumns))}
		}
		cs.refs[f.RefTable] = append(cs.refs[f.RefTable], fkLink{fk: f,
			link: CascadeLink{Table: f.Table, Columns: f.Columns, RefTable: f.RefTable, RefColumns: f.RefColumns}})
	}
	// The most statements a change can take: a delete, and an update of
	// every referenced column.
	for _, t := range tables {
		if len(cs.refs[t.Name]) == 0 {
			continue
		}
		var all []string
		for _, l := range cs.refs[t.Name] {
			all = append(all, l.link.RefColumns...)
		}
		for _, del := range []bool{true, false} {
			if n, f := cs.count(t.Name, del, all); n > maxCascades {
				return nil, &CascadeError{FK: f, Err: fmt.Errorf("the foreign keys of %s cascade along more than %d paths (%s among them), more than sluice carries out per change: "+
					"drop the action of one of them on the source", t.Name, maxCascades, f)}
			}
		}
	}
	return cs, nil
}

// Fires reports whether change c fired a foreign-key action on the
// source: the batch is cut after it (Compactor.Cut).
func (cs *Cascades) Fires(c *sluice.Change) bool { return len(cs.For(c)) > 0 }

// Joined lists the pairs of distinct streamed tables a source foreign key
// joins, with an action or without: the lanes keep each pair in one lane.
func (cs *Cascades) Joined() [][2]sluice.TableName {
	if cs == nil {
		return nil
	}
	return cs.groups
}

// Acting lists the foreign keys whose actions the target carries out:
// those with an action between two streamed tables.
func (cs *Cascades) Acting() []sluice.ForeignKey {
	if cs == nil {
		return nil
	}
	var out []sluice.ForeignKey
	for _, ls := range cs.refs {
		for _, l := range ls {
			out = append(out, l.fk)
		}
	}
	slices.SortFunc(out, func(a, b sluice.ForeignKey) int {
		return strings.Compare(a.Table.String()+" "+a.Name, b.Table.String()+" "+b.Name)
	})
	return out
}

// Summary lists Acting for logs and reports, e.g. "orders_customer_fk
// (shop.orders → shop.customers, ON DELETE CASCADE ON UPDATE NO ACTION)";
// empty when there are none.
func (cs *Cascades) Summary() string {
	acting := cs.Acting()
	names := make([]string, len(acting))
	for i, f := range acting {
		names[i] = fmt.Sprintf("%s (%s → %s, ON DELETE %s ON UPDATE %s)", f.Name, f.Table, f.RefTable, f.OnDelete, f.OnUpdate)
	}
	return strings.Join(names, "; ")
}

// Empty reports whether no change fires an action sluice carries out.
func (cs *Cascades) Empty() bool { return cs == nil || len(cs.refs) == 0 }

// For returns the statements, deepest first, that carry out the actions
// change c fired on the source, to be run right before c; nil when it
// fired none (a session with foreign key checks off fires none).
func (cs *Cascades) For(c *sluice.Change) []Cascade {
	if cs == nil || (c.Op != sluice.OpDelete && c.Op != sluice.OpUpdate) || c.FKChecksOff || len(cs.refs[c.Table.Name]) == 0 {
		return nil
	}
	name := c.Table.Name
	if c.Op == sluice.OpDelete {
		return cs.plan(name, true, nil)
	}
	// An update fires the foreign keys whose referenced columns changed.
	// Those in the primary key are compared with the old key; the others
	// only the target's row holds before the change, so their statements
	// carry the condition (IfChanged).
	keys := cs.keys[name]
	var changed []string
	seen := map[string]bool{}
	for _, l := range cs.refs[name] {
		for _, col := range l.link.RefColumns {
			if seen[col] {
				continue
			}
			seen[col] = true
			k := slices.Index(keys, col)
			if k < 0 {
				changed = append(changed, col)
				continue
			}
			i := c.Table.ColumnIndex(col)
			if c.Key == nil || i < 0 || i >= len(c.Row) || k >= len(c.Key) {
				continue
			}
			if v := c.Row[i]; v.Null != c.Key[k].Null || v.Text != c.Key[k].Text {
				changed = append(changed, col)
			}
		}
	}
	if len(changed) == 0 {
		return nil
	}
	slices.Sort(changed)
	return cs.plan(name, false, changed)
}

// Attach fills the Cascades of b's parts for their ordered changes; it
// leaves them nil where none fired an action.
func (cs *Cascades) Attach(b *Batch) {
	if cs.Empty() {
		return
	}
	for _, part := range b.Parts() {
		part.Cascades = nil
		for i := range part.Ordered {
			if p := cs.For(&part.Ordered[i]); len(p) > 0 {
				if part.Cascades == nil {
					part.Cascades = make([][]Cascade, len(part.Ordered))
				}
				part.Cascades[i] = p
			}
		}
	}
}

// plan returns, from the cache, the statements of a delete of a row of
// table, or of an update changing the columns changed.
func (cs *Cascades) plan(table sluice.TableName, del bool, changed []string) []Cascade {
	key := fmt.Sprintf("%q %q %v %q", table.Schema, table.Name, del, changed)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if p, ok := cs.plans[key]; ok {
		return p
	}
	var out []Cascade
	cs.walk(cs.root(table, del, changed), nil, &out, func(Cascade) bool { return true })
	cs.plans[key] = out
	return out
}

// count is how many statements plan would return, counting no further
// than one past maxCascades, and the foreign key of the last one.
func (cs *Cascades) count(table sluice.TableName, del bool, changed []string) (int, sluice.ForeignKey) {
	n := 0
	var last sluice.ForeignKey
	cs.walk(cs.root(table, del, changed), nil, nil, func(c Cascade) bool {
		n++
		for _, l := range cs.refs[c.Path[0].RefTable] {
			if l.fk.Name == c.Constraint && l.fk.Table == c.Path[0].Table {
				last = l.fk
			}
		}
		return n <= maxCascades
	})
	return n, last
}

// cascadeNode is a row change of a cascade: the change's own, or one its
// actions make.
type cascadeNode struct {
	table   sluice.TableName
	deleted bool
	// set holds, for an update, the columns it changes, each to the value
	// of a column of the change's new image (or NULL: "").
	set []CascadeSet
	// ifChanged is the condition of every statement below the node.
	ifChanged []string
	// updated lists the tables updated by the node and its ancestors.
	updated []sluice.TableName
	depth   int
}

func (cs *Cascades) root(table sluice.TableName, del bool, changed []string) cascadeNode {
	n := cascadeNode{table: table, deleted: del}
	if !del {
		for _, c := range changed {
			n.set = append(n.set, CascadeSet{Column: c, From: c})
		}
		n.updated = []sluice.TableName{table}
	}
	return n
}

// walk appends to out (when not nil) the statements of the actions n
// fires, deepest first, each with path, the links from n's table up to
// the change's; emit sees each statement and stops the walk by returning
// false.
func (cs *Cascades) walk(n cascadeNode, path []CascadeLink, out *[]Cascade, emit func(Cascade) bool) bool {
	if n.depth == maxCascadeDepth {
		return true
	}
	for _, l := range cs.refs[n.table] {
		child := cascadeNode{table: l.fk.Table, depth: n.depth + 1, ifChanged: n.ifChanged}
		action := l.fk.OnDelete
		if !n.deleted {
			action = l.fk.OnUpdate
			// Fired only when the update changes a referenced column.
			fired, certain := false, true
			for _, rc := range l.link.RefColumns {
				if slices.ContainsFunc(n.set, func(s CascadeSet) bool { return s.Column == rc }) {
					fired = true
				}
			}
			if !fired {
				continue
			}
			if n.depth == 0 {
				keys := cs.keys[n.table]
				for _, rc := range l.link.RefColumns {
					certain = certain && slices.Contains(keys, rc)
				}
				if !certain {
					child.ifChanged = l.link.RefColumns
				}
			}
		}
		switch {
		case action == sluice.FKNoAction:
			continue
		case action == sluice.FKCascade && n.deleted:
			child.deleted = true
		case action == sluice.FKSetNull:
			for _, c := range l.link.Columns {
				child.set = append(child.set, CascadeSet{Column: c})
			}
		case action == sluice.FKCascade:
			for i, rc := range l.link.RefColumns {
				for _, s := range n.set {
					if s.Column == rc {
						child.set = append(child.set, CascadeSet{Column: l.link.Columns[i], From: s.From})
					}
				}
			}
		}
		if !child.deleted {
			// InnoDB refuses an update of a table an update of the same
			// cascade changed: the source's statement failed.
			if slices.Contains(n.updated, child.table) {
				continue
			}
			child.updated = append(slices.Clone(n.updated), child.table)
		} else {
			child.updated = n.updated
		}
		p := make([]CascadeLink, 0, len(path)+1)
		p = append(append(p, l.link), path...)
		if !cs.walk(child, p, out, emit) {
			return false
		}
		c := Cascade{Path: p, Delete: child.deleted, Set: child.set, IfChanged: child.ifChanged, Constraint: l.fk.Name}
		if !emit(c) {
			return false
		}
		if out != nil {
			*out = append(*out, c)
		}
	}
	return true
}
