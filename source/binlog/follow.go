package binlog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/coltype"
)

// Following a table's DDL. The binlog logs a DDL statement as a QUERY
// event, at its exact place in the change order: ALTER TABLE, CREATE
// INDEX and DROP INDEX of a streamed table become an OpSchema change at
// the position after the statement, saying what changed (read from the
// statement: added, dropped, modified and renamed columns, with an added
// column's default, its value in the rows that existed before it;
// nullability; indexes), and the table's new shape, which the next table
// map confirms. What the statement changes that sluice does not follow
// (the primary key, a column's character set by CONVERT TO) is an
// Unfollowable edit: the stream stops at it.

// schemaChangeOf reads a DDL statement of a streamed table into a schema
// change; nil when it is none (another table's, not DDL, a change that
// alters no column or index).
func (s *state) schemaChangeOf(query, defaultDB string) *sluice.Change {
	toks := words(tokenize(query))
	kw := toks.kw
	tableAt := func(i int) (string, string, int) { return toks.tableAt(i, defaultDB) }
	var schema, table string
	var edits []ddlEdit
	switch kw(0) {
	case "ALTER":
		var clauses [][]token
		var ok bool
		schema, table, clauses, ok = toks.alterTable(defaultDB)
		if !ok || s.r.repl[schema+"."+table] == nil {
			return nil
		}
		for _, clause := range clauses {
			edits = append(edits, alterEdits(clause)...)
		}
	case "CREATE":
		i := 1
		if kw(i) == "OR" && kw(i+1) == "REPLACE" {
			i += 2
		}
		unique, method := false, ""
		switch kw(i) {
		case "UNIQUE":
			unique = true
			i++
		case "FULLTEXT", "SPATIAL":
			method = kw(i)
			i++
		}
		if kw(i) != "INDEX" {
			return nil
		}
		i++
		if kw(i) == "IF" && kw(i+1) == "NOT" && kw(i+2) == "EXISTS" {
			i += 3
		}
		if i >= len(toks) {
			return nil
		}
		name := toks[i].s
		for i < len(toks) && kw(i) != "ON" {
			i++
		}
		var j int
		schema, table, j = tableAt(i + 1)
		if s.r.repl[schema+"."+table] == nil {
			return nil
		}
		cols := indexColumns(toks[j:])
		edits = append(edits, edit(sluice.SchemaEdit{Kind: sluice.CreateIndex, Index: &sluice.Index{Name: name, Columns: cols, Unique: unique, Definition: method}}))
	case "DROP":
		i := 1
		if kw(i) == "ONLINE" || kw(i) == "OFFLINE" {
			i++
		}
		if kw(i) != "INDEX" {
			return nil
		}
		i++
		if kw(i) == "IF" && kw(i+1) == "EXISTS" {
			i += 2
		}
		if i+1 >= len(toks) || kw(i+1) != "ON" {
			return nil
		}
		name := toks[i].s
		schema, table, _ = tableAt(i + 2)
		if s.r.repl[schema+"."+table] == nil {
			return nil
		}
		edits = append(edits, edit(sluice.SchemaEdit{Kind: sluice.DropIndex, Index: &sluice.Index{Name: name}}))
	default:
		return nil
	}
	if len(edits) == 0 {
		return nil
	}
	name := schema + "." + table
	before := s.byName[name]
	if before == nil {
		before = s.r.repl[name]
	}
	next, out := s.applyEdits(before, edits)
	return &sluice.Change{Op: sluice.OpSchema, Table: next, Schema: &sluice.SchemaChange{Before: before, Edits: out, Statement: query}}
}

// ddlEdit is an edit as a statement says it, before the table's shape
// completes it: the type a column is added or modified with, and whether
// it may hold NULL.
type ddlEdit struct {
	sluice.SchemaEdit
	typ      string
	nullable bool
	// generated: an added column the source computes (its expression is
	// read from the catalog, as Open describes one).
	generated bool
}

func edit(e sluice.SchemaEdit) ddlEdit { return ddlEdit{SchemaEdit: e} }

func edits(es ...sluice.SchemaEdit) []ddlEdit {
	out := make([]ddlEdit, len(es))
	for i, e := range es {
		out[i] = edit(e)
	}
	return out
}

// columnDef is a column as a statement defines it.
type columnDef struct {
	name, typ string
	nullable  bool
	def       *sluice.Value // DEFAULT's value; nil when none
	volatile  string        // DEFAULT's expression when it is not a constant
	primary   bool
	generated bool
	after     string // AFTER's column; "\x00" for FIRST
}

// alterEdits reads one clause of ALTER TABLE.
func alterEdits(c []token) []ddlEdit {
	kw := words(c).kw
	i := 0
	switch kw(0) {
	case "ADD":
		i = 1
		if kw(i) == "CONSTRAINT" {
			i++
			if kw(i) != "UNIQUE" && kw(i) != "PRIMARY" && kw(i) != "FOREIGN" && kw(i) != "CHECK" {
				i++ // the constraint's name
			}
		}
		switch kw(i) {
		case "PRIMARY":
			return edits(sluice.SchemaEdit{Kind: sluice.Unfollowable, Reason: "a primary key was added: the stream keys rows by the primary key and cannot follow a change of it"})
		case "FOREIGN", "CHECK", "PARTITION", "PERIOD", "SYSTEM":
			return nil // not the target's to enforce: sluice applies only what the source accepted
		case "UNIQUE", "INDEX", "KEY", "FULLTEXT", "SPATIAL":
			ix := &sluice.Index{}
			switch kw(i) {
			case "UNIQUE":
				ix.Unique = true
				i++
			case "FULLTEXT", "SPATIAL":
				ix.Definition = kw(i)
				i++
			}
			if kw(i) == "INDEX" || kw(i) == "KEY" {
				i++
			}
			if kw(i) == "IF" && kw(i+1) == "NOT" && kw(i+2) == "EXISTS" {
				i += 3
			}
			if i < len(c) && c[i].s != "(" && kw(i) != "USING" {
				ix.Name = c[i].s
			}
			ix.Columns = indexColumns(c[i:])
			if ix.Name == "" && len(ix.Columns) > 0 {
				ix.Name = ix.Columns[0] // MySQL names it after its first column
			}
			return edits(sluice.SchemaEdit{Kind: sluice.CreateIndex, Index: ix})
		case "COLUMN":
			i++
		}
		if kw(i) == "IF" && kw(i+1) == "NOT" && kw(i+2) == "EXISTS" {
			i += 3
		}
		if i < len(c) && c[i].s == "(" && !c[i].quoted {
			// ADD COLUMN (a INT, b INT)
			var out []ddlEdit
			end := len(c) - 1
			for end > i && c[end].s != ")" {
				end--
			}
			for _, d := range splitTop(c[i+1 : end]) {
				out = append(out, addEdit(parseColumnDef(d)))
			}
			return out
		}
		return []ddlEdit{addEdit(parseColumnDef(c[i:]))}
	case "DROP":
		i = 1
		switch kw(i) {
		case "PRIMARY":
			return edits(sluice.SchemaEdit{Kind: sluice.Unfollowable, Reason: "the primary key was dropped: the stream keys rows by the primary key and cannot follow a change of it"})
		case "INDEX", "KEY":
			i++
			if kw(i) == "IF" && kw(i+1) == "EXISTS" {
				i += 2
			}
			if i < len(c) {
				return edits(sluice.SchemaEdit{Kind: sluice.DropIndex, Index: &sluice.Index{Name: c[i].s}})
			}
			return nil
		case "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION", "PERIOD", "SYSTEM", "DEFAULT":
			return nil
		case "COLUMN":
			i++
		}
		if kw(i) == "IF" && kw(i+1) == "EXISTS" {
			i += 2
		}
		if i < len(c) {
			return edits(sluice.SchemaEdit{Kind: sluice.DropColumn, Column: c[i].s})
		}
	case "MODIFY", "CHANGE":
		i = 1
		if kw(i) == "COLUMN" {
			i++
		}
		if kw(i) == "IF" && kw(i+1) == "EXISTS" {
			i += 2
		}
		if kw(0) == "CHANGE" {
			if i+1 < len(c) && !strings.EqualFold(c[i].s, c[i+1].s) {
				return edits(sluice.SchemaEdit{Kind: sluice.RenameColumn, Column: c[i].s, To: c[i+1].s})
			}
			i++
		}
		d := parseColumnDef(c[i:])
		if d.primary {
			return edits(sluice.SchemaEdit{Kind: sluice.Unfollowable, Reason: "column " + d.name + " became the primary key: the stream keys rows by the primary key and cannot follow a change of it"})
		}
		// Compared with the column before in applyEdits.
		return []ddlEdit{{SchemaEdit: sluice.SchemaEdit{Kind: sluice.AlterColumnType, Column: d.name}, typ: d.typ, nullable: d.nullable}}
	case "RENAME":
		switch kw(1) {
		case "COLUMN":
			if len(c) >= 5 {
				return edits(sluice.SchemaEdit{Kind: sluice.RenameColumn, Column: c[2].s, To: c[4].s})
			}
		case "INDEX", "KEY":
			if len(c) >= 5 {
				return edits(sluice.SchemaEdit{Kind: sluice.Unfollowable, Reason: fmt.Sprintf("index %s was renamed to %s: sluice follows a created or dropped index, not a renamed one", c[2].s, c[4].s)})
			}
		}
	case "CONVERT":
		if kw(1) == "TO" {
			return edits(sluice.SchemaEdit{Kind: sluice.Unfollowable, Reason: "CONVERT TO CHARACTER SET changes every text column's character set and may change its type"})
		}
	}
	return nil
}

// addEdit is the edit of an added column.
func addEdit(d columnDef) ddlEdit {
	e := ddlEdit{SchemaEdit: sluice.SchemaEdit{Kind: sluice.AddColumn, Column: d.name, Fill: sluice.Null}, typ: d.typ, nullable: d.nullable, generated: d.generated}
	switch {
	case d.primary:
		return edit(sluice.SchemaEdit{Kind: sluice.Unfollowable, Reason: "column " + d.name + " was added as the primary key: the stream keys rows by the primary key and cannot follow a change of it"})
	case d.generated:
		return e // the source computes it for the rows; they come with their values
	case d.volatile != "":
		e.Volatile = true
		e.Reason = "its default " + d.volatile + " was computed when the column was added"
	case d.def != nil:
		e.Fill = *d.def
	case !d.nullable:
		e.Fill = sluice.Text(implicitDefault(d.typ))
	}
	return e
}

// implicitDefault is what MySQL gives the rows of a NOT NULL column added
// without a default: the type's zero.
func implicitDefault(typ string) string {
	t := strings.ToLower(typ)
	base := t
	if i := strings.IndexAny(t, "( "); i >= 0 {
		base = t[:i]
	}
	switch {
	case coltype.MySQLIntBits(base) > 0, base == "decimal", base == "dec", base == "numeric", base == "float", base == "double", base == "real", base == "bit":
		return "0"
	case base == "date":
		return "0000-00-00"
	case base == "datetime", base == "timestamp":
		return "0000-00-00 00:00:00"
	case base == "time":
		return "00:00:00"
	case base == "year":
		return "0000"
	case base == "enum":
		if open := strings.IndexByte(typ, '('); open >= 0 {
			if m := coltype.Members(typ[open+1 : strings.LastIndexByte(typ, ')')]); len(m) > 0 {
				return m[0]
			}
		}
	}
	return ""
}

// parseColumnDef reads "name type [attributes]" (the column definition of
// ADD, MODIFY and CHANGE after the names).
func parseColumnDef(c []token) columnDef {
	d := columnDef{nullable: true}
	if len(c) == 0 {
		return d
	}
	d.name = c[0].s
	kw := words(c).kw
	// The type: its name, a parenthesized list, UNSIGNED, ZEROFILL, and a
	// character set or collation.
	var typ strings.Builder
	i := 1
	if i < len(c) {
		typ.WriteString(strings.ToLower(c[i].s))
		i++
	}
	if i < len(c) && c[i].s == "(" && !c[i].quoted {
		depth := 0
		for ; i < len(c); i++ {
			t := c[i]
			switch {
			case t.quoted:
				typ.WriteString("'" + strings.ReplaceAll(t.s, "'", "''") + "'")
			default:
				typ.WriteString(t.s)
			}
			if !t.quoted && t.s == "(" {
				depth++
			}
			if !t.quoted && t.s == ")" {
				depth--
				if depth == 0 {
					i++
					break
				}
			}
		}
	}
	for ; i < len(c); i++ {
		switch kw(i) {
		case "UNSIGNED", "ZEROFILL", "SIGNED":
			typ.WriteString(" " + strings.ToLower(c[i].s))
			continue
		case "PRECISION", "VARYING":
			typ.WriteString(" " + strings.ToLower(c[i].s))
			continue
		}
		break
	}
	d.typ = typ.String()
	for ; i < len(c); i++ {
		switch kw(i) {
		case "NOT":
			if kw(i+1) == "NULL" {
				d.nullable = false
				i++
			}
		case "NULL":
			d.nullable = true
		case "PRIMARY":
			d.primary = true
		case "DEFAULT":
			i++
			d.def, d.volatile, i = defaultValue(c, i)
		case "GENERATED", "AS":
			d.generated = true
		case "FIRST":
			d.after = "\x00"
		case "AFTER":
			if i+1 < len(c) {
				d.after = c[i+1].s
				i++
			}
		}
	}
	return d
}

// defaultValue reads DEFAULT's operand at c[i]: a constant's value, or the
// text of an expression; it returns the index of the operand's last token.
func defaultValue(c []token, i int) (*sluice.Value, string, int) {
	if i >= len(c) {
		return nil, "", i
	}
	t := c[i]
	if t.quoted {
		v := sluice.Text(t.s)
		return &v, "", i
	}
	switch u := strings.ToUpper(t.s); {
	case u == "NULL":
		v := sluice.Null
		return &v, "", i
	case u == "TRUE" || u == "FALSE":
		v := sluice.Text(map[string]string{"TRUE": "1", "FALSE": "0"}[u])
		return &v, "", i
	case (t.s == "-" || t.s == "+") && i+1 < len(c) && isNumber(c[i+1].s):
		v := sluice.Text(strings.TrimPrefix(t.s, "+") + numberAt(c, i+1))
		return &v, "", i + numberLen(c, i+1)
	case isNumber(t.s):
		v := sluice.Text(numberAt(c, i))
		return &v, "", i + numberLen(c, i) - 1
	}
	// An expression: a function (CURRENT_TIMESTAMP, now(), uuid()) or a
	// parenthesized one.
	j, depth := i, 0
	var b strings.Builder
	for ; j < len(c); j++ {
		if !c[j].quoted {
			switch c[j].s {
			case "(":
				depth++
			case ")":
				depth--
			}
		}
		b.WriteString(c[j].s)
		if depth == 0 && (j+1 >= len(c) || c[j+1].s != "(") {
			break
		}
	}
	return nil, b.String(), j
}

func isNumber(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) < 0
}

// numberAt reads a number the tokenizer split at its point (1 . 5).
func numberAt(c []token, i int) string {
	s := c[i].s
	if i+2 < len(c) && c[i+1].s == "." && isNumber(c[i+2].s) {
		s += "." + c[i+2].s
	}
	return s
}

func numberLen(c []token, i int) int {
	if i+2 < len(c) && c[i+1].s == "." && isNumber(c[i+2].s) {
		return 3
	}
	return 1
}

// indexColumns reads an index's key list "(a, b(20) DESC)" into its
// columns.
func indexColumns(c []token) []string {
	start := slices.IndexFunc(c, func(t token) bool { return t.s == "(" && !t.quoted })
	if start < 0 {
		return nil
	}
	var cols []string
	depth := 0
	expect := true
	for _, t := range c[start:] {
		switch {
		case !t.quoted && t.s == "(":
			depth++
			continue
		case !t.quoted && t.s == ")":
			depth--
			if depth == 0 {
				return cols
			}
			continue
		case depth == 1 && !t.quoted && t.s == ",":
			expect = true
			continue
		}
		if depth == 1 && expect {
			cols = append(cols, t.s)
			expect = false
		}
	}
	return cols
}

// applyEdits makes the table's new shape from its shape before and the
// edits, completing them with what only the shape before says (whether a
// MODIFY changed the type or nullability). Types are spelled as the
// server has them now where the column's base type is the same.
func (s *state) applyEdits(before *sluice.Table, edits []ddlEdit) (*sluice.Table, []sluice.SchemaEdit) {
	next := &sluice.Table{Name: before.Name, Columns: slices.Clone(before.Columns)}
	keys := before.KeyNames()
	var now map[string]sluice.Column
	spell := func(col, typ string) string {
		if now == nil {
			now = s.r.currentColumns(before.Name)
		}
		if c, ok := now[col]; ok && sameBase(c.Type, typ) {
			return c.Type
		}
		return typ
	}
	var out []sluice.SchemaEdit
	for _, de := range edits {
		e := de.SchemaEdit
		switch e.Kind {
		case sluice.AddColumn:
			c := sluice.Column{Name: e.Column, Type: spell(e.Column, de.typ), Nullable: de.nullable}
			if de.generated {
				c.Generated = now[c.Name].Generated // spell read the catalog
			}
			if next.ColumnIndex(c.Name) < 0 {
				next.Columns = append(next.Columns, c)
			}
			if !c.Nullable {
				// Added nullable and made NOT NULL: the target's rows get
				// the value first.
				out = append(out, e, sluice.SchemaEdit{Kind: sluice.SetNotNull, Column: c.Name})
				continue
			}
		case sluice.DropColumn:
			// Kept when the shape lacks the column already (a statement
			// replayed after a restart, the shape read from the catalog
			// after it): the target may still have it.
			if j := indexColumn(next, e.Column); j >= 0 {
				e.Column = next.Columns[j].Name
				if slices.Contains(keys, e.Column) {
					e = sluice.SchemaEdit{Kind: sluice.Unfollowable, Reason: "primary key column " + e.Column + " was dropped: the stream keys rows by the primary key and cannot follow a change of it"}
					break
				}
				next.Columns = slices.Delete(next.Columns, j, j+1)
			}
		case sluice.AlterColumnType:
			j := indexColumn(next, e.Column)
			if j < 0 {
				continue
			}
			old := next.Columns[j]
			typ := spell(old.Name, de.typ)
			nullable := de.nullable
			next.Columns[j].Type, next.Columns[j].Nullable = typ, nullable
			// A replayed statement finds the shape changed already: the
			// edits go out all the same, and the target's catalog says
			// what is left to do.
			replayed := sameType(old.Type, typ) && old.Nullable == nullable
			if !sameType(old.Type, typ) || replayed {
				out = append(out, sluice.SchemaEdit{Kind: sluice.AlterColumnType, Column: old.Name})
			}
			switch {
			case !nullable && (old.Nullable || replayed):
				out = append(out, sluice.SchemaEdit{Kind: sluice.SetNotNull, Column: old.Name})
			case nullable && (!old.Nullable || replayed):
				out = append(out, sluice.SchemaEdit{Kind: sluice.DropNotNull, Column: old.Name})
			}
			continue
		case sluice.RenameColumn:
			if j := indexColumn(next, e.Column); j >= 0 {
				next.Columns[j].Name = e.To
			}
		}
		out = append(out, e)
	}
	for _, k := range keys {
		if j := next.ColumnIndex(k); j >= 0 {
			next.Key = append(next.Key, j)
		}
	}
	return next, out
}

// indexColumn finds a column by name as MySQL does, whatever its case.
func indexColumn(t *sluice.Table, name string) int {
	return slices.IndexFunc(t.Columns, func(c sluice.Column) bool { return strings.EqualFold(c.Name, name) })
}

// sameType compares two spellings of a column type, display widths aside
// (int and int(11) are one type).
func sameType(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.Join(strings.Fields(s), " "))
		for _, base := range []string{"tinyint", "smallint", "mediumint", "int", "bigint"} {
			if strings.HasPrefix(s, base+"(") && !strings.HasPrefix(s, "tinyint(1)") {
				if end := strings.IndexByte(s, ')'); end > 0 {
					s = base + s[end+1:]
				}
			}
		}
		return s
	}
	return norm(a) == norm(b)
}

// schemaChange ends the DDL's transaction and hands out its schema change
// at the position after it; the table's shape is the change's from then
// on, and the table maps seen before it are forgotten, so that the next
// one is checked against the new shape.
func (s *state) schemaChange(ctx context.Context, h *replication.EventHeader, c *sluice.Change) error {
	s.flush(ctx)
	if err := s.commit(h); err != nil {
		return err
	}
	name := c.Table.Name.Schema + "." + c.Table.Name.Name
	c.Time = time.Unix(int64(h.Timestamp), 0).UTC()
	c.Pos = s.boundary()
	s.emit(*c)
	s.flush(ctx)
	s.byName[name] = c.Table
	delete(s.defs, name)
	for id, tm := range s.byID {
		if tm.name == name {
			delete(s.byID, id)
		}
	}
	s.r.log.Info("binlog: source table's definition changed", "table", name, "statement", clip(c.Schema.Statement))
	return nil
}
