package mysql

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// A MySQL source's foreign-key actions (apply.Cascades) are written as
// multi-table statements that join the rows they change back along the
// path of foreign keys, right before the change itself, and find them by
// the changed row's old key values:
//
//	DELETE `x0` FROM `db`.`order_lines` AS `x0`
//	JOIN `db`.`orders` AS `x1` ON `x0`.`order_id` = `x1`.`id`
//	WHERE `x1`.`customer_id` = 7
//
// A path whose last foreign key references columns outside the changed
// row's primary key joins that row too, by its old key. A self-reference
// is a join of the table with itself under other aliases, which MySQL and
// MariaDB accept in a multi-table DELETE or UPDATE (error 1093 concerns
// subqueries reading the table written).

// cascadeSpec is one cascade statement as the SQL builder needs it.
type cascadeSpec struct {
	// tables are the quoted tables the statement joins: tables[0] holds
	// the rows it changes, each next one the rows they reference.
	tables []string
	// joins[i] joins tables[i] (its columns cols) to tables[i+1] (refCols).
	joins  []cascadeJoin
	delete bool
	// set are columns of tables[0] and vals their new values.
	set  []sqlColumn
	vals []sluice.Value
	// where are columns of the last table and is their values: the rows
	// the statement reaches from there.
	where []sqlColumn
	is    []sluice.Value
	// ifChanged are columns of the last table (the changed row's): the
	// statement changes rows only if the row's values in them differ from
	// news.
	ifChanged []sqlColumn
	news      []sluice.Value
}

type cascadeJoin struct{ cols, refCols []string }

func alias(i int) string { return quoteIdent(fmt.Sprintf("x%d", i)) }

// buildCascade writes the statement of s.
func buildCascade(s cascadeSpec) string {
	var b strings.Builder
	if s.delete {
		b.WriteString("DELETE ")
		b.WriteString(alias(0))
		b.WriteString(" FROM ")
	} else {
		b.WriteString("UPDATE ")
	}
	for i, t := range s.tables {
		if i > 0 {
			b.WriteString("\nJOIN ")
		}
		b.WriteString(t)
		b.WriteString(" AS ")
		b.WriteString(alias(i))
		if i == 0 {
			continue
		}
		b.WriteString(" ON ")
		j := s.joins[i-1]
		for k := range j.cols {
			if k > 0 {
				b.WriteString(" AND ")
			}
			fmt.Fprintf(&b, "%s.%s = %s.%s", alias(i-1), quoteIdent(j.cols[k]), alias(i), quoteIdent(j.refCols[k]))
		}
	}
	if !s.delete {
		b.WriteString("\nSET ")
		for i, c := range s.set {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s.%s = ", alias(0), quoteIdent(c.Name))
			writeValue(&b, c.Kind, s.vals[i])
		}
	}
	last := alias(len(s.tables) - 1)
	b.WriteString("\nWHERE ")
	writeConds(&b, last, s.where, s.is, " = ")
	if len(s.ifChanged) > 0 {
		b.WriteString(" AND NOT (")
		writeConds(&b, last, s.ifChanged, s.news, " <=> ")
		b.WriteString(")")
	}
	return b.String()
}

// writeConds writes "alias.col op value" for each column, joined by AND.
func writeConds(b *strings.Builder, alias string, cols []sqlColumn, vals []sluice.Value, op string) {
	for i, c := range cols {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(alias + "." + quoteIdent(c.Name) + op)
		writeValue(b, c.Kind, vals[i])
	}
}

// appendCascades adds the statements that carry out the foreign-key
// actions change c (of d's table) fired on the source, to run right
// before c's own.
func (t *Target) appendCascades(ctx context.Context, stmts []statement, d *tableDesc, c *sluice.Change, steps []apply.Cascade) ([]statement, error) {
	for _, step := range steps {
		a, err := step.Args(c)
		if err != nil {
			return nil, err
		}
		s := cascadeSpec{delete: step.Delete, vals: a.Set}
		var descs []*tableDesc
		for _, l := range step.Path {
			ld, err := t.pathTable(ctx, l.Table)
			if err != nil {
				return nil, err
			}
			if ld == nil {
				return nil, fmt.Errorf("apply %s for the %s in %s: table %s is not among the stream's tables on the target", step, c.Op, d.display, l.Table)
			}
			descs = append(descs, ld)
			s.tables = append(s.tables, ld.ident)
			s.joins = append(s.joins, cascadeJoin{cols: l.Columns, refCols: l.RefColumns})
		}
		last := step.Path[len(step.Path)-1]
		if a.Ref != nil {
			// The rows referencing the changed row, by its old values.
			s.joins = s.joins[:len(s.joins)-1]
			for _, col := range last.Columns {
				s.where = append(s.where, descs[len(descs)-1].column(col))
			}
			s.is = a.Ref
		} else {
			s.tables = append(s.tables, d.ident)
			s.where, s.is = d.key, a.Old
			for i, col := range step.IfChanged {
				s.ifChanged = append(s.ifChanged, d.column(col))
				s.news = append(s.news, a.News[i])
			}
		}
		for _, set := range step.Set {
			s.set = append(s.set, descs[0].column(set.Column))
		}
		stmts = append(stmts, statement{table: descs[0].src, sql: buildCascade(s),
			what: fmt.Sprintf("%s for the %s of %s in %s", step, c.Op, d.src.FormatKey(a.Old), d.display)})
	}
	return stmts, nil
}

// Learn records tbl as the definition of its table, for the foreign-key
// actions whose path runs through it: a cross-engine wrapper's schema
// change reaches the target as the source defines the table, and the
// wrapper hands over the converted definition this way once the change
// applied.
func (t *Target) Learn(tbl *sluice.Table) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.known[tbl.Name] = tbl
}

// pathTable describes a table of a cascade's path; nil when it is not
// among the stream's tables. The descriptions are dropped after a schema
// change, a statement refused as the table changed, or ForgetTables, and
// read again for the tables a batch names; a cascade may join tables the
// batch does not name, which are described again here from the source's
// description they were last checked with, or the one the last schema
// change of the table gave (the batch's, or Learn's).
func (t *Target) pathTable(ctx context.Context, name sluice.TableName) (*tableDesc, error) {
	if d := t.tables[name]; d != nil {
		return d, nil
	}
	src := t.known[name]
	if src == nil {
		return nil, nil
	}
	return t.describe(ctx, src)
}

// column is the target column of the source column named name; a column
// the source does not have is written by name, as text (the statement
// then fails naming it).
func (d *tableDesc) column(name string) sqlColumn {
	if i := d.src.ColumnIndex(name); i >= 0 {
		return d.cols[i]
	}
	return sqlColumn{Name: name}
}
