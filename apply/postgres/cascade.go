package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// A MySQL source's foreign-key actions (apply.Cascades) are written as a
// DELETE … USING or an UPDATE … FROM that joins the rows they change back
// along the path of foreign keys, right before the change itself, and
// finds them by the changed row's old key values:
//
//	DELETE FROM "shop"."order_lines" AS "x0"
//	USING "shop"."orders" AS "x1"
//	WHERE "x0"."order_id" = "x1"."id" AND "x1"."customer_id" = $1::text::"pg_catalog"."int8"
//
// A path whose last foreign key references columns outside the changed
// row's primary key joins that row too, by its old key.
//
// The batch runs with session_replication_role = replica where the user
// may set it, so the target's own foreign keys do not act a second time;
// where it may not, Preflight refuses foreign keys with actions between
// the stream's tables (checkActingForeignKeys), and the daemon a source's
// ON UPDATE CASCADE into tables the target checks a foreign key between.

// cascadeSpec is one cascade statement as the SQL builder needs it.
type cascadeSpec struct {
	// tables are the quoted tables the statement joins: tables[0] holds
	// the rows it changes, each next one the rows they reference.
	tables []string
	// joins[i] joins tables[i] (its columns cols) to tables[i+1] (refCols).
	joins  []cascadeJoin
	delete bool
	// set are columns of tables[0]; setNull says which become NULL (the
	// others take the next parameter each).
	set     []sqlColumn
	setNull []bool
	// where are columns of the last table (a parameter each, after
	// set's): the rows the statement reaches from there. ifChanged are
	// columns of the last table (the changed row's; a parameter each,
	// after where's): the statement changes rows only if the row's values
	// in them differ from the parameters.
	where     []sqlColumn
	ifChanged []sqlColumn
}

type cascadeJoin struct{ cols, refCols []string }

func alias(i int) string { return ident(fmt.Sprintf("x%d", i)) }

// buildCascade writes the statement of s.
func buildCascade(s cascadeSpec) string {
	var b strings.Builder
	n := 0
	param := func(c sqlColumn) string {
		n++
		return "$" + itoa(n) + "::text::" + c.cast()
	}
	if s.delete {
		fmt.Fprintf(&b, "DELETE FROM %s AS %s", s.tables[0], alias(0))
		if len(s.tables) > 1 {
			b.WriteString("\nUSING ")
		}
	} else {
		fmt.Fprintf(&b, "UPDATE %s AS %s\nSET ", s.tables[0], alias(0))
		for i, c := range s.set {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(ident(c.Name))
			b.WriteString(" = ")
			if s.setNull[i] {
				b.WriteString("NULL")
			} else {
				b.WriteString(param(c))
			}
		}
		if len(s.tables) > 1 {
			b.WriteString("\nFROM ")
		}
	}
	for i := 1; i < len(s.tables); i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s AS %s", s.tables[i], alias(i))
	}
	b.WriteString("\nWHERE ")
	for i, j := range s.joins {
		for k := range j.cols {
			fmt.Fprintf(&b, "%s.%s = %s.%s AND ", alias(i), ident(j.cols[k]), alias(i+1), ident(j.refCols[k]))
		}
	}
	last := alias(len(s.tables) - 1)
	for i, c := range s.where {
		if i > 0 {
			b.WriteString(" AND ")
		}
		fmt.Fprintf(&b, "%s.%s = %s", last, ident(c.Name), param(c))
	}
	if len(s.ifChanged) > 0 {
		b.WriteString(" AND (")
		for i, c := range s.ifChanged {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s.%s", last, ident(c.Name))
		}
		b.WriteString(") IS DISTINCT FROM (")
		for i, c := range s.ifChanged {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(param(c))
		}
		b.WriteString(")")
	}
	return b.String()
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
		s := cascadeSpec{delete: step.Delete}
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
		var args []any
		for i, set := range step.Set {
			s.set = append(s.set, descs[0].column(set.Column))
			s.setNull = append(s.setNull, set.From == "")
			if set.From != "" {
				args = append(args, textArg(a.Set[i]))
			}
		}
		last := step.Path[len(step.Path)-1]
		if a.Ref != nil {
			// The rows referencing the changed row, by its old values.
			s.joins = s.joins[:len(s.joins)-1]
			for i, col := range last.Columns {
				s.where = append(s.where, descs[len(descs)-1].column(col))
				args = append(args, textArg(a.Ref[i]))
			}
		} else {
			s.tables = append(s.tables, d.ident)
			for i, k := range d.src.Key {
				s.where = append(s.where, d.cols[k])
				args = append(args, textArg(a.Old[i]))
			}
			for i, col := range step.IfChanged {
				s.ifChanged = append(s.ifChanged, d.column(col))
				args = append(args, textArg(a.News[i]))
			}
		}
		stmts = append(stmts, statement{table: descs[0].src, sql: buildCascade(s), args: args,
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
// the source does not have is written by name, cast to text (the
// statement then fails naming it).
func (d *tableDesc) column(name string) sqlColumn {
	if i := d.src.ColumnIndex(name); i >= 0 {
		return d.cols[i]
	}
	return sqlColumn{Name: name, TypeSchema: "pg_catalog", TypeName: "text"}
}

// actingForeignKeysSQL lists the foreign keys between two of the tables
// named in $1 (quoted identifiers) with an action: ON DELETE or ON UPDATE
// other than NO ACTION and RESTRICT.
const actingForeignKeysSQL = `SELECT f.conname, cn.nspname, c.relname, pn.nspname, p.relname, f.confdeltype::text, f.confupdtype::text
FROM pg_constraint f
JOIN pg_class c ON c.oid = f.conrelid
JOIN pg_namespace cn ON cn.oid = c.relnamespace
JOIN pg_class p ON p.oid = f.confrelid
JOIN pg_namespace pn ON pn.oid = p.relnamespace
WHERE f.contype = 'f' AND (f.confdeltype NOT IN ('a', 'r') OR f.confupdtype NOT IN ('a', 'r'))
	AND f.conrelid IN (SELECT to_regclass(x) FROM unnest($1::text[]) x)
	AND f.confrelid IN (SELECT to_regclass(x) FROM unnest($1::text[]) x)
ORDER BY 2, 3, 1`

// pgActions names pg_constraint's action codes.
var pgActions = map[string]string{"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}

// checkActingForeignKeys refuses the foreign keys between the stream's
// tables with an action, for a target whose batches cannot run with
// session_replication_role = replica: the action would run for sluice's
// writes as well, a second time, since the source's log (PostgreSQL) or
// sluice (apply.Cascades, for a MySQL source) carries it out already. A
// parent's key change done twice finds the rows it moves gone, and a
// compacted key change (a delete and an insert) would delete or null
// rows the source keeps. The caller holds t.mu.
func (t *Target) checkActingForeignKeys(ctx context.Context, tables []*sluice.Table) error {
	idents := make([]string, len(tables))
	for i, tbl := range tables {
		idents[i] = tableIdent(tbl.Name)
	}
	var errs []error
	err := t.reading(ctx, func() error {
		errs = errs[:0]
		rows, err := t.conn.Query(ctx, actingForeignKeysSQL, idents)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name, cs, cn, ps, pn, del, upd string
			if err := rows.Scan(&name, &cs, &cn, &ps, &pn, &del, &upd); err != nil {
				return err
			}
			errs = append(errs, fmt.Errorf("target foreign key %s of %s.%s (ON DELETE %s ON UPDATE %s, referencing %s.%s) would act on sluice's writes a second time: "+
				"user %q may not set session_replication_role, so the target's foreign keys act on the rows sluice applies, while the source's log (or sluice, for a MySQL source) carries the action out already; "+
				"GRANT SET ON PARAMETER session_replication_role TO %q (PostgreSQL 15 and later; or connect as a superuser), or drop the action on the target (recreate %s without ON DELETE/ON UPDATE)",
				name, cs, cn, pgActions[del], pgActions[upd], ps, pn, t.connConfig.User, t.connConfig.User, name))
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("read the target's foreign keys: %w", err)
	}
	return errors.Join(errs...)
}

// ChecksForeignKeys reports whether the target's foreign keys check, and
// act on, sluice's writes: where its batches cannot run with
// session_replication_role = replica.
func (t *Target) ChecksForeignKeys() bool { return !t.replicaRole }
