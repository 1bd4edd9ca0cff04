package schema

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// Follower turns the changes of a streamed table's definition that a
// stream meets (sluice.OpSchema) into the statements that make the target
// follow them, in the change order: an added column (with the value the
// rows that existed before it hold, as its default), a dropped one, a type
// that widens, SET and DROP NOT NULL, a created or dropped index. What it
// cannot follow without guessing or losing values stops the stream, with
// the difference and the statements to run on the target: a rename, a
// type that narrows, a column whose existing rows got values of their own
// (a volatile default), and, in Mode "stop", every change.
//
// Each statement is read off the target's catalog first and left out when
// the target has it already: a change replayed after a kill -9 between
// its DDL and the checkpoint (MySQL's DDL commits on its own) does
// nothing twice. A stopped change is recorded on the target; the stream
// started again after the operator ran the statements goes on from it
// once the target has them (or, for a refusal no catalog can confirm, at
// once: the operator was told).
type Follower struct {
	Stream string
	// Mode is "follow" or "stop".
	Mode string
	Opt  PlanOptions
	// Target is where the statements run (through the stream's batch);
	// the follower reads its catalog and keeps its stop record there.
	// Source, when set, is read for what a change does not carry (a new
	// column's character set, an enum's labels).
	Target, Source *DB
	Log            *slog.Logger
}

// Statements returns the statements that make the target follow c, or
// the error that stops the stream at c.
func (f *Follower) Statements(ctx context.Context, c *sluice.Change) ([]string, error) {
	sc := c.Schema
	if sc == nil {
		return nil, fmt.Errorf("schema change of %s without its description", c.Table.Name)
	}
	tn := TargetName(f.Opt.From, f.Opt.To, c.Table.Name)
	cur, err := f.Target.ReadTable(ctx, tn)
	if err != nil {
		return nil, &apply.RetryableError{Err: fmt.Errorf("follow the schema change of %s: %w", c.Table.Name, err)}
	}
	if cur == nil {
		return nil, &sluice.TableError{Table: c.Table.Name, Err: fmt.Errorf("follow the schema change of %s: target table %s does not exist on %s", c.Table.Name, tn, f.Target)}
	}
	var srcNow *Table
	if f.Source != nil {
		if srcNow, err = f.Source.ReadTable(ctx, c.Table.Name); err != nil {
			return nil, &apply.RetryableError{Err: fmt.Errorf("follow the schema change of %s: %w", c.Table.Name, err)}
		}
	}
	p := &followPlan{f: f, c: c, tn: tn, cur: cur, src: sourceView(c.Table, srcNow),
		g: &generator{opt: f.Opt, streamed: map[sluice.TableName]bool{}, types: map[string]bool{}, schemas: map[string]bool{}}}
	// Indexes dropped first (a dropped column takes its indexes with it on
	// MySQL, so a DROP INDEX after it would fail), created last (on the
	// columns added).
	for _, pass := range []func(sluice.EditKind) bool{
		func(k sluice.EditKind) bool { return k == sluice.DropIndex },
		func(k sluice.EditKind) bool { return k != sluice.DropIndex && k != sluice.CreateIndex },
		func(k sluice.EditKind) bool { return k == sluice.CreateIndex },
	} {
		for _, e := range sc.Edits {
			if pass(e.Kind) {
				p.edit(e)
			}
		}
	}
	key := fmt.Sprintf("%s %s", c.Pos, c.Table.Name)
	if len(p.refused) == 0 && (f.Mode != "stop" || len(p.stmts) == 0) {
		if f.Mode == "stop" {
			// Stopped here before, and the operator ran the statements.
			if err := NewJournal(f.Target, f.Stream).ClearStop(ctx); err != nil {
				return nil, &apply.RetryableError{Err: err}
			}
		}
		if len(p.stmts) > 0 {
			f.Log.Info("following a schema change of the source on the target", "stream", f.Stream, "table", c.Table.Name.String(), "target_table", tn.String(), "statements", len(p.stmts))
			for _, s := range p.stmts {
				f.Log.Debug("schema change statement", "stream", f.Stream, "table", tn.String(), "sql", s)
			}
		}
		return p.stmts, nil
	}
	j := NewJournal(f.Target, f.Stream)
	stopped, err := j.StoppedAt(ctx)
	if err != nil {
		return nil, &apply.RetryableError{Err: err}
	}
	if stopped == key && len(p.stmts) == 0 && p.confirmed() {
		// The operator ran what the stop asked, and started again.
		f.Log.Info("the target was made to match a schema change the stream had stopped at; going on", "stream", f.Stream, "table", c.Table.Name.String())
		return nil, j.ClearStop(ctx)
	}
	if stopped != key {
		if err := j.RecordStop(ctx, key); err != nil {
			return nil, &apply.RetryableError{Err: err}
		}
	}
	return nil, p.stopError()
}

// followPlan is the work of one schema change.
type followPlan struct {
	f   *Follower
	c   *sluice.Change
	tn  sluice.TableName
	cur *Table // the target's
	src *Table // the source's new definition, as the generator reads it
	g   *generator
	// stmts are the statements to run; refused the edits that stop the
	// stream (with the statements that would make the target match, in
	// fixes, and whether the catalog can confirm them).
	stmts   []string
	refused []refusal
}

type refusal struct {
	why   string
	fixes []string
	// confirm reports, from the target's catalog, whether the target
	// matches now; nil: no catalog can tell (values), and the operator's
	// restart is taken as the confirmation.
	confirm func(cur *Table) bool
	after   string // what to do once the stream goes on
}

func (p *followPlan) refuse(r refusal) { p.refused = append(p.refused, r) }

// sourceView is the source's new definition for the generator: the
// stream's description of the table, with what the source's catalog adds
// for columns of the same type (character set, enum labels, user types).
func sourceView(t *sluice.Table, now *Table) *Table {
	v := &Table{Name: t.Name, PrimaryKey: t.KeyNames()}
	for _, c := range t.Columns {
		col := Column{Name: c.Name, Type: c.Type, Nullable: c.Nullable}
		if now != nil {
			if nc := now.Column(c.Name); nc != nil && sameTypeBase(nc.Type, c.Type) {
				col.Collation, col.Charset, col.Labels, col.UserType, col.Kind, col.Domain, col.JSON =
					nc.Collation, nc.Charset, nc.Labels, nc.UserType, nc.Kind, nc.Domain, nc.JSON
			}
		}
		v.Columns = append(v.Columns, col)
	}
	if now != nil {
		v.Charset, v.Collation = now.Charset, now.Collation
	}
	return v
}

// sameTypeBase compares the first words of two type spellings.
func sameTypeBase(a, b string) bool {
	base := func(s string) string {
		if i := strings.IndexAny(s, "( "); i >= 0 {
			s = s[:i]
		}
		return strings.ToLower(s)
	}
	return base(a) == base(b)
}

// alter starts a statement on the target table.
func (p *followPlan) alter() string { return "ALTER TABLE " + p.g.tableIdent(p.tn) }

func (p *followPlan) edit(e sluice.SchemaEdit) {
	g, cur := p.g, p.cur
	switch e.Kind {
	case sluice.AddColumn:
		p.addColumn(e)
	case sluice.DropColumn:
		if cur.Column(e.Column) == nil {
			return
		}
		p.stmts = append(p.stmts, p.alter()+" DROP COLUMN "+g.ident(e.Column))
		if p.f.Opt.From == MySQL && g.pgTarget() {
			// MySQL keeps an index of the dropped column on its other
			// columns; PostgreSQL drops it: made again without it.
			for _, ix := range cur.Indexes {
				if !slices.Contains(ix.Columns, e.Column) || len(ix.Columns) < 2 {
					continue
				}
				kind := "INDEX"
				if ix.Unique {
					kind = "UNIQUE INDEX"
				}
				rest := slices.DeleteFunc(slices.Clone(ix.Columns), func(c string) bool { return c == e.Column })
				p.stmts = append(p.stmts, fmt.Sprintf("CREATE %s IF NOT EXISTS %s ON %s (%s)", kind, g.ident(ix.Name), g.tableIdent(p.tn), g.idents(rest)))
			}
		}
	case sluice.AlterColumnType:
		p.alterType(e)
	case sluice.SetNotNull, sluice.DropNotNull:
		tc := cur.Column(e.Column)
		nullable := e.Kind == sluice.DropNotNull
		if tc == nil || tc.Nullable == nullable {
			return
		}
		p.stmts = append(p.stmts, p.nullStatement(tc, nullable))
	case sluice.CreateIndex:
		p.createIndex(e.Index)
	case sluice.DropIndex:
		p.dropIndex(e.Index)
	case sluice.RenameColumn:
		fix := fmt.Sprintf("%s RENAME COLUMN %s TO %s", p.alter(), g.ident(e.Column), g.ident(e.To))
		from, to := e.Column, e.To
		p.refuse(refusal{
			why:     fmt.Sprintf("column %s was renamed to %s: whether the target's %s is the source's renamed column or another is not for sluice to guess", from, to, from),
			fixes:   []string{fix},
			confirm: func(cur *Table) bool { return cur.Column(to) != nil && cur.Column(from) == nil },
		})
	default:
		p.refuse(refusal{why: e.Reason})
	}
}

// addColumn adds a column holding, in the rows the target has, the value
// the source's rows that existed then got (the target's rows are those).
func (p *followPlan) addColumn(e sluice.SchemaEdit) {
	g := p.g
	sc := p.src.Column(e.Column)
	if sc == nil {
		p.refuse(refusal{why: fmt.Sprintf("column %s was added, but the change does not describe it", e.Column)})
		return
	}
	have := p.cur.Column(e.Column) != nil
	if e.Volatile {
		col := *sc
		col.Nullable, col.Default, col.DefaultExpr = true, nil, ""
		tc, err := g.column(p.src, &col, &TablePlan{})
		var fixes []string
		if !have && err == nil {
			fixes = []string{p.alter() + " ADD COLUMN " + tc.def}
		}
		name := e.Column
		why := fmt.Sprintf("column %s was added, and %s: the rows that existed then got values no row event carries, and the target would compute others", e.Column, cmpOr(e.Reason, "its default is volatile"))
		if have {
			why += " (the target has the column already, with values it computed itself)"
		}
		p.refuse(refusal{
			why:     why,
			fixes:   fixes,
			confirm: func(cur *Table) bool { return cur.Column(name) != nil },
			after:   fmt.Sprintf("once the stream runs past this change, copy the column's values of those rows from the source: sluice verify --tables %s --repair", p.c.Table.Name),
		})
		return
	}
	if have {
		return
	}
	col := *sc
	col.Default, col.DefaultExpr = nil, ""
	if !e.Fill.Null {
		v := e.Fill.Text
		col.Default = &v
	} else {
		col.Nullable = true
	}
	tc, err := g.column(p.src, &col, &TablePlan{})
	if err != nil {
		p.refuse(refusal{why: fmt.Sprintf("column %s was added as %s, which the target cannot hold exactly: %v", e.Column, sc.Type, err)})
		return
	}
	if !col.Nullable && !strings.Contains(tc.def, " DEFAULT ") {
		// The fill did not convert to a literal: rows would need a value.
		p.refuse(refusal{why: fmt.Sprintf("column %s was added NOT NULL with a default the target cannot take as it is (%s)", e.Column, e.Fill.Text)})
		return
	}
	p.stmts = append(p.stmts, p.alter()+" ADD COLUMN "+tc.def)
}

// alterType follows a type that widens; one that narrows stops.
func (p *followPlan) alterType(e sluice.SchemaEdit) {
	from := p.f.Opt.From
	before := p.c.Schema.Before
	var oldType string
	if before != nil {
		if i := before.ColumnIndex(e.Column); i >= 0 {
			oldType = before.Columns[i].Type
		}
	}
	sc := p.src.Column(e.Column)
	tc := p.cur.Column(e.Column)
	if sc == nil || tc == nil {
		return
	}
	want, err := p.g.column(p.src, sc, &TablePlan{})
	if err != nil {
		p.refuse(refusal{why: fmt.Sprintf("column %s became %s, which the target cannot hold exactly: %v", e.Column, sc.Type, err)})
		return
	}
	stmt := p.g.alterType(p.tn, e.Column, want)
	if oldType != "" {
		if widens, _ := typeHolds(from, from, oldType, sc.Type, nil); !widens {
			// Values the target holds may not fit the narrower type:
			// whether to narrow it is the operator's call.
			name, newType, labels := e.Column, sc.Type, sc.Labels
			p.refuse(refusal{
				why:   fmt.Sprintf("column %s's type narrowed from %s to %s, which may not hold values the target has: the target's %s holds every value the source can hold now", e.Column, oldType, sc.Type, tc.Type),
				fixes: []string{stmt},
				confirm: func(cur *Table) bool {
					c := cur.Column(name)
					return c != nil && TypeHolds(p.f.Opt, newType, c.Type, labels)
				},
				after: "or start sluice again without running it: the target keeps the wider type",
			})
			return
		}
	}
	if ok, _ := typeHolds(p.f.Opt.From, p.f.Opt.To, sc.Type, tc.Type, sc.Labels); ok {
		return // the target's type holds the new one's values already
	}
	p.stmts = append(p.stmts, stmt)
}

// nullStatement makes a target column nullable or NOT NULL; MySQL's
// MODIFY restates the column as the target has it.
func (p *followPlan) nullStatement(tc *Column, nullable bool) string {
	if p.g.pgTarget() {
		return p.g.alterNull(p.tn, tc.Name, tc.Type, nullable)
	}
	s := p.alter() + " MODIFY " + p.g.ident(tc.Name) + " " + tc.Type
	if tc.Charset != "" && tc.Collation != "" && !tc.JSON {
		s += " CHARACTER SET " + tc.Charset + " COLLATE " + tc.Collation
	}
	if nullable {
		return s + " NULL"
	}
	return s + " NOT NULL"
}

// targetIndexName is how the target names a source index (see
// generator.index).
func (p *followPlan) targetIndexName(name string) string {
	if p.f.Opt.From == MySQL && p.f.Opt.To == Postgres && !strings.HasPrefix(name, p.tn.Name+"_") {
		return truncateName(p.tn.Name + "_" + name)
	}
	return name
}

func (p *followPlan) createIndex(ix *sluice.Index) {
	// A definition comes with an index that is not a plain one (PostgreSQL:
	// expressions, a predicate, included columns, another method).
	si := Index{Name: ix.Name, Columns: ix.Columns, Unique: ix.Unique, Definition: ix.Definition, Partial: ix.Definition != "", Method: "btree"}
	if p.f.Opt.From == MySQL {
		si.Method = "BTREE"
	}
	if _, rest, ok := strings.Cut(ix.Definition, " USING "); ok {
		si.Method, _, _ = strings.Cut(rest, " ")
	}
	if p.cur.Index(p.targetIndexName(ix.Name)) != nil || (len(si.Columns) > 0 && findIndex(p.cur, si) != nil) {
		return
	}
	var tp TablePlan
	p.g.index(p.src, p.tn, si, &tp)
	for _, s := range tp.Indexes {
		p.stmts = append(p.stmts, s.SQL)
	}
	for _, n := range tp.Notes {
		p.f.Log.Info("source index not followed on the target", "stream", p.f.Stream, "table", p.c.Table.Name.String(), "note", n)
	}
}

func (p *followPlan) dropIndex(ix *sluice.Index) {
	name := p.targetIndexName(ix.Name)
	ti := p.cur.Index(name)
	if ti == nil {
		return
	}
	switch {
	case p.g.pgTarget() && ti.Constraint:
		p.stmts = append(p.stmts, p.alter()+" DROP CONSTRAINT "+p.g.ident(name))
	case p.g.pgTarget():
		n := sluice.TableName{Schema: p.tn.Schema, Name: name}
		p.stmts = append(p.stmts, "DROP INDEX IF EXISTS "+p.g.tableIdent(n))
	default:
		p.stmts = append(p.stmts, "DROP INDEX "+p.g.ident(name)+" ON "+p.g.tableIdent(p.tn))
	}
}

// confirmed reports whether the target matches every refused edit now.
func (p *followPlan) confirmed() bool {
	for _, r := range p.refused {
		if r.confirm != nil && !r.confirm(p.cur) {
			return false
		}
	}
	return true
}

// stopError is the error that stops the stream at the change: what
// changed, why sluice does not follow it, how the target differs, and the
// statements to run on the target.
func (p *followPlan) stopError() error {
	c := p.c
	var why, fixes, after []string
	for _, r := range p.refused {
		why = append(why, r.why)
		fixes = append(fixes, r.fixes...)
		if r.after != "" {
			after = append(after, r.after)
		}
	}
	if len(p.refused) == 0 {
		why = append(why, "--schema-changes is stop")
	}
	fixes = append(fixes, p.stmts...)
	var b strings.Builder
	fmt.Fprintf(&b, "source table %s changed at %s", c.Table.Name, c.Pos)
	if c.Schema.Statement != "" {
		fmt.Fprintf(&b, " (%s)", clip(c.Schema.Statement))
	}
	fmt.Fprintf(&b, " in a way sluice does not follow: %s; the stream stops here, nothing after it applied", strings.Join(why, "; "))
	if d := columnDiff(p); d != "" {
		fmt.Fprintf(&b, "; the target table %s differs: %s", p.tn, d)
	}
	if len(fixes) > 0 {
		fmt.Fprintf(&b, "; run on the target: %s; then start sluice again: it goes on from this change", strings.Join(fixes, "; "))
	} else {
		b.WriteString("; make the target match, then start sluice again: it goes on from this change")
	}
	for _, a := range after {
		fmt.Fprintf(&b, "; %s", a)
	}
	return &sluice.TableError{Table: c.Table.Name, Err: &StopError{msg: b.String()}}
}

// StopError is a schema change the stream stops at (see Follower).
type StopError struct{ msg string }

func (e *StopError) Error() string { return e.msg }

// IsStop reports whether err is a schema change's stop.
func IsStop(err error) bool {
	var se *StopError
	return errors.As(err, &se)
}

// columnDiff is how the target's columns differ from the source's new
// definition, as schema diff says it.
func columnDiff(p *followPlan) string {
	var parts []string
	for _, d := range Diff(p.src, p.cur, p.f.Opt) {
		switch d.Kind {
		case DiffColumnMissing, DiffColumnExtra, DiffColumnType, DiffColumnNull, DiffPrimaryKey:
			parts = append(parts, d.Kind+" "+d.Object+": "+d.Detail)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
