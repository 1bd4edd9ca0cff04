package schema

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice"
	mysqltarget "github.com/sluice-cdc/sluice/apply/mysql"
	"github.com/sluice-cdc/sluice/apply/postgres"
	"github.com/sluice-cdc/sluice/apply/typemap"
)

// Difference is one way a target table differs from its source table.
type Difference struct {
	Table sluice.TableName `json:"table"`
	// Kind is one of the Diff… constants.
	Kind string `json:"kind"`
	// Object names the column, index or constraint ("" for the table).
	Object string `json:"object,omitempty"`
	Detail string `json:"detail"`
	// Fix is the statement that makes the target match, where there is
	// one.
	Fix string `json:"fix,omitempty"`
	// Blocking marks a difference sluice cannot stream through: sync start
	// refuses it (or a change would fail to apply). The others are noted.
	Blocking bool `json:"blocking"`
	// Safe marks a fix that loses nothing the target holds (a wider type,
	// NULL allowed): a stream that follows the source's DDL runs it at
	// start, as the DDL it has yet to meet would.
	Safe bool `json:"-"`
}

// Kinds of Difference.
const (
	DiffTableMissing     = "table missing"
	DiffColumnMissing    = "column missing"
	DiffColumnExtra      = "column only on the target"
	DiffColumnType       = "column type"
	DiffColumnNull       = "nullability"
	DiffPrimaryKey       = "primary key"
	DiffIndexMissing     = "index missing"
	DiffIndexExtra       = "index only on the target"
	DiffForeignKeyMiss   = "foreign key missing"
	DiffForeignKeyExtra  = "foreign key only on the target"
	DiffForeignKeyAction = "foreign key actions"
)

func (d Difference) String() string {
	s := fmt.Sprintf("%s: %s", d.Kind, d.Detail)
	if d.Object != "" {
		s = fmt.Sprintf("%s %s: %s", d.Kind, d.Object, d.Detail)
	}
	if d.Fix != "" {
		s += "; fix: " + d.Fix
	}
	return s
}

// Diff compares a source table with the target's table (nil: it does not
// exist there) and names each difference: columns added, dropped, retyped
// or whose nullability differs, the primary key, secondary indexes and
// foreign keys. Column types compare by whether the target's holds every
// source value exactly (the preflight's rule, and the type map's between
// engines), not by their spelling; indexes and foreign keys by their
// columns, not their names.
func Diff(src, dst *Table, opt PlanOptions) []Difference {
	g := &generator{opt: opt, streamed: map[sluice.TableName]bool{}, types: map[string]bool{}, schemas: map[string]bool{}}
	tn := TargetName(opt.From, opt.To, src.Name)
	var out []Difference
	add := func(kind, obj, detail, fix string, blocking bool) {
		out = append(out, Difference{Table: src.Name, Kind: kind, Object: obj, Detail: detail, Fix: fix, Blocking: blocking})
	}
	if dst == nil {
		add(DiffTableMissing, "", fmt.Sprintf("the target has no table %s", tn), "sluice schema apply (or sync start, which creates it before the initial copy)", true)
		return out
	}
	var scratch TablePlan
	alter := "ALTER TABLE " + g.tableIdent(tn)
	for i := range src.Columns {
		sc := &src.Columns[i]
		dc := dst.Column(sc.Name)
		tc, terr := g.column(src, sc, &scratch)
		if tc.omit {
			continue
		}
		if dc == nil {
			fix := ""
			if terr == nil {
				fix = alter + " ADD COLUMN " + tc.def
			}
			add(DiffColumnMissing, sc.Name, fmt.Sprintf("%s on the source, missing on the target", sc.Type), fix, true)
			continue
		}
		if ok, why := typeHolds(opt.From, opt.To, sc.Type, dc.Type, sc.Labels); !ok {
			fix := ""
			if terr == nil {
				fix = g.alterType(tn, sc.Name, tc)
			}
			add(DiffColumnType, sc.Name, fmt.Sprintf("%s on the source, %s on the target: %s", sc.Type, dc.Type, why), fix, true)
			if fix != "" {
				out[len(out)-1].Safe, _ = typeHolds(opt.To, opt.To, dc.Type, tc.typ, nil)
			}
		}
		switch {
		case dc.Generated != "":
			// The target computes it: its nullability is its
			// expression's (MariaDB takes no NOT NULL on a generated
			// column), and sluice never writes it.
		case sc.Nullable && !dc.Nullable:
			add(DiffColumnNull, sc.Name, "nullable on the source, NOT NULL on the target: a NULL from the source would fail", g.alterNull(tn, sc.Name, dc.Type, true), true)
			out[len(out)-1].Safe = opt.To == Postgres // MySQL's MODIFY restates the column: left to the operator
		case !sc.Nullable && dc.Nullable:
			add(DiffColumnNull, sc.Name, "NOT NULL on the source, nullable on the target", g.alterNull(tn, sc.Name, dc.Type, false), false)
		}
	}
	for _, dc := range dst.Columns {
		if src.Column(dc.Name) == nil {
			blocking := !dc.Nullable && dc.Default == nil && dc.DefaultExpr == "" && dc.Generated == "" && !dc.AutoIncrement
			detail := dc.Type + " only on the target"
			if blocking {
				detail += ", NOT NULL without a default: inserts from the source would fail"
			}
			add(DiffColumnExtra, dc.Name, detail, alter+" DROP COLUMN "+g.ident(dc.Name), blocking)
		}
	}
	if !slices.Equal(src.PrimaryKey, dst.PrimaryKey) {
		add(DiffPrimaryKey, "", fmt.Sprintf("(%s) on the source, (%s) on the target", strings.Join(src.PrimaryKey, ", "), strings.Join(dst.PrimaryKey, ", ")),
			fmt.Sprintf("make the target's primary key (%s)", strings.Join(src.PrimaryKey, ", ")), true)
	}
	// Indexes and unique keys: those the plan would create.
	var want TablePlan
	for _, ix := range src.Indexes {
		before := len(want.Indexes)
		g.index(src, tn, ix, &want)
		if len(want.Indexes) == before {
			continue // not created on this target (noted by the plan)
		}
		if findIndex(dst, ix) == nil {
			kind := "index"
			if ix.Unique {
				kind = "unique key"
			}
			add(DiffIndexMissing, ix.Name, fmt.Sprintf("%s (%s) on the source, missing on the target", kind, strings.Join(ix.Columns, ", ")), want.Indexes[len(want.Indexes)-1].SQL, false)
		}
	}
	for _, ix := range dst.Indexes {
		if opt.To == MySQL && !ix.Unique && backsForeignKey(dst, ix) {
			continue // InnoDB made it for the foreign key
		}
		if findIndex(src, ix) == nil {
			kind := "index"
			if ix.Unique {
				kind = "unique key"
			}
			add(DiffIndexExtra, ix.Name, fmt.Sprintf("%s (%s) only on the target", kind, strings.Join(ix.Columns, ", ")), "", false)
		}
	}
	for _, fk := range src.ForeignKeys {
		dfk := findForeignKey(dst, fk)
		if dfk == nil {
			add(DiffForeignKeyMiss, fk.Name, fmt.Sprintf("(%s) references %s (%s) on the source, missing on the target", strings.Join(fk.Columns, ", "), fk.RefTable, strings.Join(fk.RefColumns, ", ")), "", false)
			continue
		}
		if dfk.OnDelete != fk.OnDelete || dfk.OnUpdate != fk.OnUpdate {
			add(DiffForeignKeyAction, fk.Name, fmt.Sprintf("ON DELETE %s ON UPDATE %s on the source, ON DELETE %s ON UPDATE %s on the target", fk.OnDelete, fk.OnUpdate, dfk.OnDelete, dfk.OnUpdate), "", false)
		}
	}
	for _, fk := range dst.ForeignKeys {
		if findForeignKey(src, fk) == nil {
			add(DiffForeignKeyExtra, fk.Name, fmt.Sprintf("(%s) references %s only on the target", strings.Join(fk.Columns, ", "), fk.RefTable), "", false)
		}
	}
	return out
}

// TypeHolds reports whether a target column of type dst holds every
// value of a source column of type src exactly.
func TypeHolds(opt PlanOptions, src, dst string, labels []string) bool {
	ok, _ := typeHolds(opt.From, opt.To, src, dst, labels)
	return ok
}

// typeHolds reports whether a target column of type dst holds every value
// of a source column of type src exactly, and why not.
func typeHolds(from, to Engine, src, dst string, labels []string) (bool, string) {
	switch {
	case from != to:
		if _, err := typemap.Column(from, to, typemap.SourceColumn(src, labels), dst); err != nil {
			return false, err.Error()
		}
		return true, ""
	case from == Postgres:
		return postgres.TypeFits(src, dst)
	}
	return mysqltarget.TypeFits(src, dst)
}

// alterType is the statement that gives a target column the type (and, on
// MySQL, whose MODIFY restates the whole column, the rest of the
// definition) it would be created with.
func (g *generator) alterType(tn sluice.TableName, col string, tc targetColumn) string {
	if g.pgTarget() {
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", g.tableIdent(tn), g.ident(col), tc.typ)
	}
	return fmt.Sprintf("ALTER TABLE %s MODIFY %s", g.tableIdent(tn), tc.def)
}

// alterNull is the statement that makes a target column nullable or NOT
// NULL (typ: its type on the target, which MySQL's MODIFY repeats).
func (g *generator) alterNull(tn sluice.TableName, col, typ string, nullable bool) string {
	if g.pgTarget() {
		verb := "SET NOT NULL"
		if nullable {
			verb = "DROP NOT NULL"
		}
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s %s", g.tableIdent(tn), g.ident(col), verb)
	}
	null := " NOT NULL"
	if nullable {
		null = " NULL"
	}
	return fmt.Sprintf("ALTER TABLE %s MODIFY %s %s%s", g.tableIdent(tn), g.ident(col), typ, null)
}

// findIndex finds an index of t with ix's columns and uniqueness.
func findIndex(t *Table, ix Index) *Index {
	for i := range t.Indexes {
		o := &t.Indexes[i]
		if o.Unique == ix.Unique && slices.Equal(o.Columns, ix.Columns) && (len(ix.Columns) > 0 || o.Name == ix.Name) {
			return o
		}
	}
	return nil
}

// backsForeignKey reports whether an index has exactly a foreign key's
// columns: the index InnoDB creates for a foreign key that has none.
func backsForeignKey(t *Table, ix Index) bool {
	for _, fk := range t.ForeignKeys {
		if slices.Equal(fk.Columns, ix.Columns) {
			return true
		}
	}
	return false
}

// findForeignKey finds a foreign key of t with fk's columns and
// referenced table and columns.
func findForeignKey(t *Table, fk ForeignKey) *ForeignKey {
	for i := range t.ForeignKeys {
		o := &t.ForeignKeys[i]
		if slices.Equal(o.Columns, fk.Columns) && o.RefTable.Name == fk.RefTable.Name && slices.Equal(o.RefColumns, fk.RefColumns) {
			return o
		}
	}
	return nil
}
