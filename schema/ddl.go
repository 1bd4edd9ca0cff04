package schema

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply/typemap"
)

// PlanOptions says what a plan is for.
type PlanOptions struct {
	From, To Engine
	// Flavor is the target's dialect (MariaDB or MySQL on a MySQL-family
	// target: their byte-exact collations differ).
	Flavor Flavor
	// OmitsGenerated says that the source's stream leaves generated
	// columns out (PostgreSQL logical replication does): the target
	// computes them or does without them.
	OmitsGenerated bool
	// Streamed are the stream's tables, as the source names them: foreign
	// keys to them are created. Nil: the tables planned.
	Streamed []sluice.TableName
}

// Plan is the DDL that creates source tables on a target.
type Plan struct {
	From   Engine      `json:"source_engine"`
	To     Engine      `json:"target_engine"`
	Flavor Flavor      `json:"target_flavor"`
	Tables []TablePlan `json:"tables"`
}

// TablePlan is the DDL of one table: Create before the initial copy, then,
// after it and once every table's Create ran, Indexes of every table, then
// ForeignKeys of every table (a foreign key needs its referenced key).
type TablePlan struct {
	Source      sluice.TableName `json:"source"`
	Target      sluice.TableName `json:"target"`
	Create      []Step           `json:"create"`
	Indexes     []Step           `json:"indexes,omitempty"`
	ForeignKeys []Step           `json:"foreign_keys,omitempty"`
	// Notes say where the target differs from the source, and why.
	Notes []string `json:"notes,omitempty"`
}

// Step is one statement of a plan.
type Step struct {
	SQL string `json:"sql"`
	// Exists, when set, is a query whose one value counts what SQL
	// creates on the target already: above zero, the step is done (a run
	// that stopped midway) and is skipped.
	Exists string `json:"-"`
}

// Phase names a part of a plan.
type Phase string

const (
	PhaseCreate      Phase = "create"
	PhaseIndexes     Phase = "indexes"
	PhaseForeignKeys Phase = "foreign_keys"
)

// Steps returns the plan's steps of a phase, table after table.
func (p *Plan) Steps(ph Phase) []Step {
	var out []Step
	for _, t := range p.Tables {
		switch ph {
		case PhaseCreate:
			out = append(out, t.Create...)
		case PhaseIndexes:
			out = append(out, t.Indexes...)
		case PhaseForeignKeys:
			out = append(out, t.ForeignKeys...)
		}
	}
	return out
}

// Text renders the plan as an SQL script with comments.
func (p *Plan) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- sluice schema plan: %s source, %s target\n", p.From, p.Flavor)
	section := func(title string, ph Phase) {
		steps := p.Steps(ph)
		if len(steps) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n-- %s\n", title)
		for _, s := range steps {
			b.WriteString(s.SQL)
			b.WriteString(";\n")
		}
	}
	for _, t := range p.Tables {
		fmt.Fprintf(&b, "\n-- table %s (target %s)\n", t.Source, t.Target)
		for _, n := range t.Notes {
			fmt.Fprintf(&b, "-- note: %s\n", n)
		}
		for _, s := range t.Create {
			b.WriteString(s.SQL)
			b.WriteString(";\n")
		}
	}
	section("after the initial copy: unique keys and secondary indexes", PhaseIndexes)
	section("after the initial copy: foreign keys", PhaseForeignKeys)
	return b.String()
}

// BuildPlan generates the DDL that creates tables on a target, as their
// definitions on the source are; every table of a stream at once, so that
// foreign keys between them are created (those to a table not in the list
// are left out, noted). Columns whose values no target type holds exactly
// are refused, each an *Error naming the column, the cause and the
// choices; the plan holds the tables that were not refused.
func BuildPlan(tables []*Table, opt PlanOptions) (*Plan, error) {
	p := &Plan{From: opt.From, To: opt.To, Flavor: opt.Flavor}
	g := &generator{opt: opt, streamed: map[sluice.TableName]bool{}, types: map[string]bool{}, schemas: map[string]bool{}}
	for _, t := range tables {
		g.streamed[t.Name] = true
	}
	for _, n := range opt.Streamed {
		g.streamed[n] = true
	}
	var errs []error
	for _, t := range tables {
		tp, err := g.table(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Tables = append(p.Tables, tp)
	}
	return p, errors.Join(errs...)
}

// generator builds a plan's statements.
type generator struct {
	opt      PlanOptions
	streamed map[sluice.TableName]bool
	types    map[string]bool // PostgreSQL user types created so far
	schemas  map[string]bool // PostgreSQL schemas created so far
}

func (g *generator) pgTarget() bool { return g.opt.To == Postgres }

// ident quotes an identifier for the target.
func (g *generator) ident(s string) string { return quoteIdent(g.opt.To, s) }

// tableIdent quotes a target table name.
func (g *generator) tableIdent(n sluice.TableName) string { return quoteTable(g.opt.To, n) }

func quoteIdent(e Engine, s string) string {
	if e == Postgres {
		return pgx.Identifier{s}.Sanitize()
	}
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}

func quoteTable(e Engine, n sluice.TableName) string {
	if n.Schema == "" {
		return quoteIdent(e, n.Name)
	}
	return quoteIdent(e, n.Schema) + "." + quoteIdent(e, n.Name)
}

// quoteString quotes a string literal: doubled quotes, valid whether or
// not the server reads backslashes as escapes (a value holding one is not
// written as a literal: see literal).
func quoteString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func (g *generator) idents(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = g.ident(c)
	}
	return strings.Join(q, ", ")
}

// targetColumn is a column as the target gets it.
type targetColumn struct {
	def   string // the column's definition in CREATE TABLE
	typ   string // its type
	omit  bool
	notes []string
}

func (g *generator) table(t *Table) (TablePlan, error) {
	from, to := g.opt.From, g.opt.To
	tn := TargetName(from, to, t.Name)
	tp := TablePlan{Source: t.Name, Target: tn}
	if len(t.PrimaryKey) == 0 {
		return tp, &Error{Table: t.Name, Err: errors.New("it has no primary key; sluice needs one to apply changes idempotently: add one on the source")}
	}
	if g.pgTarget() && tn.Schema != "" && tn.Schema != "public" && !g.schemas[tn.Schema] {
		g.schemas[tn.Schema] = true
		tp.Create = append(tp.Create, Step{SQL: "CREATE SCHEMA IF NOT EXISTS " + g.ident(tn.Schema)})
	}
	var defs []string
	var errs []error
	for i := range t.Columns {
		c := &t.Columns[i]
		tc, err := g.column(t, c, &tp)
		if err != nil {
			errs = append(errs, &Error{Table: t.Name, Column: c.Name, Err: err})
			continue
		}
		tp.Notes = append(tp.Notes, tc.notes...)
		if !tc.omit {
			defs = append(defs, "  "+tc.def)
		}
	}
	if len(errs) > 0 {
		return tp, errors.Join(errs...)
	}
	defs = append(defs, "  PRIMARY KEY ("+g.idents(t.PrimaryKey)+")")
	create := "CREATE TABLE IF NOT EXISTS " + g.tableIdent(tn) + " (\n" + strings.Join(defs, ",\n") + "\n)"
	if !g.pgTarget() {
		charset, coll := "utf8mb4", exactCollation(g.opt.Flavor)
		if from == MySQL && t.Collation != "" {
			charset, coll = t.Charset, t.Collation
		}
		create += " ENGINE=InnoDB DEFAULT CHARSET=" + charset + " COLLATE=" + coll
	}
	tp.Create = append(tp.Create, Step{SQL: create})
	for _, ix := range t.Indexes {
		g.index(t, tn, ix, &tp)
	}
	for _, fk := range t.ForeignKeys {
		g.foreignKey(t, tn, fk, &tp)
	}
	return tp, nil
}

// column generates a column's definition.
func (g *generator) column(t *Table, c *Column, tp *TablePlan) (targetColumn, error) {
	from, to := g.opt.From, g.opt.To
	var out targetColumn
	generated := false
	if c.Generated != "" {
		expr, err := g.targetExpr(t, c)
		switch {
		case from == Postgres && to == Postgres:
			out.def = g.ident(c.Name) + " " + g.pgType(c, tp) + " GENERATED ALWAYS AS (" + c.Generated + ") STORED"
			return out, nil
		case err == nil:
			generated = true
			if from != to {
				out.notes = append(out.notes, fmt.Sprintf("generated column %s is created as generated, its expression translated from %s (%s) to %s (%s)", c.Name, from, c.Generated, to, expr))
			}
		case g.opt.OmitsGenerated:
			out.omit = true
			out.notes = append(out.notes, fmt.Sprintf("generated column %s is not created: the source's stream does not carry generated columns, and its expression (%s) cannot be translated safely: %v; add it on the target in the target's dialect if you need it", c.Name, c.Generated, err))
			return out, nil
		default:
			// The stream writes the source's values into it.
			out.notes = append(out.notes, fmt.Sprintf("generated column %s is created as a plain column holding the source's values: its expression (%s) cannot be translated safely: %v", c.Name, c.Generated, err))
		}
	}
	typ, err := g.columnType(t, c, tp)
	if err != nil {
		return out, err
	}
	out.typ = typ
	var b strings.Builder
	b.WriteString(g.ident(c.Name))
	b.WriteByte(' ')
	b.WriteString(typ)
	b.WriteString(g.collation(t, c, typ))
	if generated {
		// The target computes it; it takes no default. MariaDB takes no
		// NOT NULL on a generated column (the source's computed values
		// are what they are either way).
		expr, _ := g.targetExpr(t, c)
		if to == Postgres {
			b.WriteString(" GENERATED ALWAYS AS (" + expr + ") STORED")
		} else {
			kind := " VIRTUAL"
			if c.Stored || from == Postgres {
				kind = " STORED" // PostgreSQL stores every generated column
			}
			b.WriteString(" AS (" + expr + ")" + kind)
		}
		if !c.Nullable && (to == Postgres || g.opt.Flavor == FlavorMySQL) {
			b.WriteString(" NOT NULL")
		}
		out.def = b.String()
		return out, nil
	}
	if !c.Nullable {
		b.WriteString(" NOT NULL")
	}
	if def, note := g.defaultClause(c, typ); def != "" {
		b.WriteString(" DEFAULT ")
		b.WriteString(def)
	} else if note != "" {
		out.notes = append(out.notes, note)
	}
	if c.AutoIncrement {
		switch {
		case from == MySQL && to == MySQL && len(t.PrimaryKey) > 0 && t.PrimaryKey[0] == c.Name:
			b.WriteString(" AUTO_INCREMENT")
		default:
			out.notes = append(out.notes, fmt.Sprintf("column %s is not an identity/auto-increment column on the target: its values come from the source", c.Name))
		}
	}
	out.def = b.String()
	return out, nil
}

// targetExpr is a generated column's expression in the target's dialect:
// the source's own between servers of one engine, else translated
// (translateGenerated), or the reason it cannot be.
func (g *generator) targetExpr(t *Table, c *Column) (string, error) {
	if g.opt.From == g.opt.To {
		return c.Generated, nil
	}
	return translateGenerated(g.opt.From, g.opt.To, c.Generated, t)
}

// omitted reports whether the plan leaves a column out of the target: a
// generated column that the source's stream does not carry and whose
// expression the target cannot compute.
func (g *generator) omitted(t *Table, col string) bool {
	c := t.Column(col)
	if c == nil || c.Generated == "" || !g.opt.OmitsGenerated || g.opt.From == Postgres && g.opt.To == Postgres {
		return false
	}
	_, err := g.targetExpr(t, c)
	return err != nil
}

// columnType chooses a column's target type.
func (g *generator) columnType(t *Table, c *Column, tp *TablePlan) (string, error) {
	from, to := g.opt.From, g.opt.To
	if from == Postgres && to == Postgres {
		return g.pgType(c, tp), nil
	}
	if from == MySQL && to == MySQL {
		if c.JSON {
			return "json", nil
		}
		return c.Type, nil
	}
	return typemap.TargetType(from, to, c.Type, typemap.TypeOptions{Labels: c.Labels, JSON: c.JSON, Indexed: slices.Contains(t.PrimaryKey, c.Name)})
}

// pgType is a PostgreSQL column's type on a PostgreSQL target: the user
// types it needs are created first (enums, domains), or noted when sluice
// does not create them (an extension's types).
func (g *generator) pgType(c *Column, tp *TablePlan) string {
	if c.UserType == "" {
		return c.Type
	}
	typ := c.UserType
	if strings.HasSuffix(c.Type, "[]") {
		typ += "[]"
	}
	if g.types[c.UserType] {
		return typ
	}
	g.types[c.UserType] = true
	schema, name := splitQualified(c.UserType)
	exists := fmt.Sprintf("SELECT count(*) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = %s AND t.typname = %s",
		quoteString(schema), quoteString(name))
	if schema != "public" && !g.schemas[schema] {
		g.schemas[schema] = true
		tp.Create = append(tp.Create, Step{SQL: "CREATE SCHEMA IF NOT EXISTS " + g.ident(schema)})
	}
	switch c.Kind {
	case "e":
		q := make([]string, len(c.Labels))
		for i, l := range c.Labels {
			q[i] = quoteString(l)
		}
		tp.Create = append(tp.Create, Step{SQL: "CREATE TYPE " + c.UserType + " AS ENUM (" + strings.Join(q, ", ") + ")", Exists: exists})
	case "d":
		d := "CREATE DOMAIN " + c.UserType + " AS " + c.Domain.Base
		if c.Domain.NotNull {
			d += " NOT NULL"
		}
		for _, ck := range c.Domain.Constraints {
			d += " " + ck
		}
		tp.Create = append(tp.Create, Step{SQL: d, Exists: exists})
	default:
		tp.Notes = append(tp.Notes, fmt.Sprintf("type %s of column %s must exist on the target (sluice creates enums and domains, not an extension's or a composite type): CREATE EXTENSION or CREATE TYPE it first", c.UserType, c.Name))
	}
	return typ
}

// splitQualified splits a quoted schema.name as quote_ident wrote it.
func splitQualified(s string) (string, string) {
	unq := func(p string) string {
		if len(p) >= 2 && p[0] == '"' {
			return strings.ReplaceAll(p[1:len(p)-1], `""`, `"`)
		}
		return p
	}
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '"':
			inQuote = !inQuote
		case s[i] == '.' && !inQuote:
			return unq(s[:i]), unq(s[i+1:])
		}
	}
	return "", unq(s)
}

// isStringType reports whether a target type holds text under a
// collation.
func isStringType(e Engine, typ string) bool {
	base := strings.ToLower(typ)
	if i := strings.IndexAny(base, "( "); i >= 0 {
		base = base[:i]
	}
	switch base {
	case "char", "varchar", "character", "text", "tinytext", "mediumtext", "longtext", "enum", "set":
		return true
	}
	return false
}

// collation is a column's COLLATE clause on the target: the source's own
// between servers of one engine; between engines the byte-exact one where
// keys must compare as on the source (every string column of a MySQL
// target, whose unique keys may be added later; the key columns of a
// PostgreSQL target).
func (g *generator) collation(t *Table, c *Column, typ string) string {
	from, to := g.opt.From, g.opt.To
	switch {
	case from == Postgres && to == Postgres:
		if c.Collation != "" {
			return " COLLATE " + c.Collation
		}
	case from == MySQL && to == MySQL:
		if c.Charset != "" && c.Collation != "" && !c.JSON {
			return " CHARACTER SET " + c.Charset + " COLLATE " + c.Collation
		}
	case to == MySQL:
		if isStringType(MySQL, typ) {
			return " CHARACTER SET utf8mb4 COLLATE " + exactCollation(g.opt.Flavor)
		}
	case to == Postgres:
		if isStringType(Postgres, typ) && t.keyColumn(c.Name) {
			return ` COLLATE "C"`
		}
	}
	return ""
}

// defaultClause is a column's DEFAULT on the target: a constant default,
// converted through the type map between engines; a default expression
// only between servers of one engine, and not one that names a sequence.
// When a default is left out, note says which and why.
func (g *generator) defaultClause(c *Column, typ string) (def, note string) {
	from, to := g.opt.From, g.opt.To
	if c.Default == nil {
		switch {
		case c.DefaultExpr == "":
			return "", ""
		case from == to && !strings.Contains(c.DefaultExpr, "nextval("):
			if to == MySQL && g.opt.Flavor == FlavorMySQL && !strings.HasPrefix(strings.ToUpper(c.DefaultExpr), "CURRENT_TIMESTAMP") {
				return "(" + c.DefaultExpr + ")", ""
			}
			return c.DefaultExpr, ""
		}
		return "", fmt.Sprintf("column %s's default %s is not created: it is not a constant, and sluice writes every column's value from the source", c.Name, c.DefaultExpr)
	}
	v, err := convertValue(from, to, c.Type, c.Labels, typ, *c.Default)
	if err != nil {
		return "", fmt.Sprintf("column %s's default %s is not created: %v", c.Name, *c.Default, err)
	}
	lit, ok := literal(to, g.opt.Flavor, typ, v)
	if !ok {
		return "", fmt.Sprintf("column %s's default is not created: its value cannot be written as a literal portably", c.Name)
	}
	return lit, ""
}

// convertValue converts a source value's text to the target's through the
// type map.
func convertValue(from, to Engine, srcType string, labels []string, dstType, v string) (string, error) {
	if from == to {
		return v, nil
	}
	conv, err := typemap.Column(from, to, typemap.SourceColumn(srcType, labels), dstType)
	if err != nil {
		return "", err
	}
	if conv == nil {
		return v, nil
	}
	return conv(v)
}

// literal writes a value as an SQL literal of a target column's type:
// quoted (the server casts it), a hex literal for MySQL's binary types,
// and, on MySQL, in parentheses for the types that take a default only as
// an expression.
func literal(to Engine, f Flavor, typ, v string) (string, bool) {
	base := strings.ToLower(typ)
	if i := strings.IndexAny(base, "( "); i >= 0 {
		base = base[:i]
	}
	if to == Postgres {
		return quoteString(v), true
	}
	var lit string
	switch base {
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit":
		lit = fmt.Sprintf("X'%x'", v)
	default:
		if strings.ContainsAny(v, "\\\x00") {
			return "", false
		}
		lit = quoteString(v)
	}
	switch base {
	case "tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob", "json":
		if f == FlavorMySQL {
			lit = "(" + lit + ")"
		}
	}
	return lit, true
}

// index generates a secondary index (and a unique key) after the copy.
func (g *generator) index(t *Table, tn sluice.TableName, ix Index, tp *TablePlan) {
	from, to := g.opt.From, g.opt.To
	name := ix.Name
	if from == MySQL && to == Postgres && !strings.HasPrefix(name, tn.Name+"_") {
		// MySQL names an index within its table, PostgreSQL within the
		// schema.
		name = truncateName(tn.Name + "_" + name)
	}
	for _, col := range ix.Columns {
		if g.omitted(t, col) {
			tp.Notes = append(tp.Notes, fmt.Sprintf("index %s is not created: its column %s is not created (see above)", ix.Name, col))
			return
		}
	}
	switch {
	case from == Postgres && to == Postgres && (ix.Constraint || ix.Definition != ""):
		if ix.Constraint {
			tp.Indexes = append(tp.Indexes, Step{
				SQL:    fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s UNIQUE (%s)", g.tableIdent(tn), g.ident(name), g.idents(ix.Columns)),
				Exists: pgConstraintExists(tn, name),
			})
			return
		}
		def := ix.Definition
		def = strings.Replace(def, "CREATE UNIQUE INDEX ", "CREATE UNIQUE INDEX IF NOT EXISTS ", 1)
		def = strings.Replace(def, "CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)
		tp.Indexes = append(tp.Indexes, Step{SQL: def})
		return
	case ix.Partial:
		tp.Notes = append(tp.Notes, fmt.Sprintf("index %s is not created: it has expressions, a predicate or included columns, which only a target of the source's engine can take", ix.Name))
		return
	case from == Postgres && ix.Method != "btree" && ix.Method != "hash":
		tp.Notes = append(tp.Notes, fmt.Sprintf("index %s is not created: MySQL has no %s index", ix.Name, ix.Method))
		return
	case from == MySQL && to == Postgres && (ix.Method == "FULLTEXT" || ix.Method == "SPATIAL"):
		tp.Notes = append(tp.Notes, fmt.Sprintf("index %s is not created: it is a %s index, which PostgreSQL has not", ix.Name, ix.Method))
		return
	}
	if to == Postgres {
		kind := "INDEX"
		if ix.Unique {
			kind = "UNIQUE INDEX"
		}
		tp.Indexes = append(tp.Indexes, Step{SQL: fmt.Sprintf("CREATE %s IF NOT EXISTS %s ON %s (%s)", kind, g.ident(name), g.tableIdent(tn), g.idents(ix.Columns))})
		return
	}
	// A MySQL target.
	kind := "INDEX"
	switch {
	case ix.Unique:
		kind = "UNIQUE INDEX"
	case from == MySQL && (ix.Method == "FULLTEXT" || ix.Method == "SPATIAL"):
		kind = ix.Method + " INDEX"
	}
	parts := make([]string, len(ix.Columns))
	for i, col := range ix.Columns {
		parts[i] = g.ident(col)
		prefix := 0
		if i < len(ix.Prefix) {
			prefix = ix.Prefix[i]
		}
		if from == Postgres {
			c := t.Column(col)
			typ, err := g.columnType(t, c, tp)
			if err == nil && needsPrefix(typ) {
				if ix.Unique {
					tp.Notes = append(tp.Notes, fmt.Sprintf("unique key %s is not created: its column %s is %s on the target, and a MySQL index key holds at most %d bytes (the target needs no unique key to stay equal: sluice applies only rows the source accepted)", ix.Name, col, typ, 3072))
					return
				}
				prefix = 255
			}
		}
		if prefix > 0 {
			parts[i] += fmt.Sprintf("(%d)", prefix)
		}
	}
	tp.Indexes = append(tp.Indexes, Step{
		SQL:    fmt.Sprintf("CREATE %s %s ON %s (%s)", kind, g.ident(name), g.tableIdent(tn), strings.Join(parts, ", ")),
		Exists: myIndexExists(tn, name),
	})
}

// needsPrefix reports whether a MySQL type can be an index key part only
// with a prefix length.
func needsPrefix(typ string) bool {
	switch strings.ToLower(typ) {
	case "tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob":
		return true
	}
	return false
}

// truncateName cuts a PostgreSQL name to its 63 bytes.
func truncateName(s string) string {
	for len(s) > 63 {
		s = s[:len(s)-1]
	}
	return s
}

func pgConstraintExists(tn sluice.TableName, name string) string {
	return fmt.Sprintf("SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass(%s) AND conname = %s",
		quoteString(quoteTable(Postgres, tn)), quoteString(name))
}

func myIndexExists(tn sluice.TableName, name string) string {
	return fmt.Sprintf("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND INDEX_NAME = %s",
		quoteString(tn.Name), quoteString(name))
}

func myForeignKeyExists(tn sluice.TableName, name string) string {
	return fmt.Sprintf("SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = %s AND CONSTRAINT_NAME = %s AND CONSTRAINT_TYPE = 'FOREIGN KEY'",
		quoteString(tn.Name), quoteString(name))
}

// foreignKey generates a foreign key after the copy: on PostgreSQL NOT
// VALID, then validated, so that adding it does not hold the table's lock
// while every row is checked.
func (g *generator) foreignKey(t *Table, tn sluice.TableName, fk ForeignKey, tp *TablePlan) {
	from, to := g.opt.From, g.opt.To
	ref := fk.RefTable
	if from == MySQL && ref.Schema == "" {
		ref.Schema = t.Name.Schema
	}
	if !g.streamed[ref] && !g.streamed[sluice.TableName{Name: ref.Name}] {
		tp.Notes = append(tp.Notes, fmt.Sprintf("foreign key %s is not created: it references %s, which is not among the stream's tables", fk.Name, fk.RefTable))
		return
	}
	if to == MySQL && (fk.OnDelete == "SET DEFAULT" || fk.OnUpdate == "SET DEFAULT") {
		tp.Notes = append(tp.Notes, fmt.Sprintf("foreign key %s is not created: InnoDB has no SET DEFAULT action", fk.Name))
		return
	}
	rn := TargetName(from, to, ref)
	sql := fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s FOREIGN KEY (%s) REFERENCES %s (%s) ON DELETE %s ON UPDATE %s",
		g.tableIdent(tn), g.ident(fk.Name), g.idents(fk.Columns), g.tableIdent(rn), g.idents(fk.RefColumns), fk.OnDelete, fk.OnUpdate)
	if to == Postgres {
		tp.ForeignKeys = append(tp.ForeignKeys,
			Step{SQL: sql + " NOT VALID", Exists: pgConstraintExists(tn, fk.Name)},
			Step{SQL: fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s", g.tableIdent(tn), g.ident(fk.Name))})
		return
	}
	tp.ForeignKeys = append(tp.ForeignKeys, Step{SQL: sql, Exists: myForeignKeyExists(tn, fk.Name)})
}
