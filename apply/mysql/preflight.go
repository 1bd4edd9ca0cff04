package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// targetColumn is one column as information_schema describes it.
type targetColumn struct {
	name       string
	colType    string // COLUMN_TYPE, e.g. int(10) unsigned
	dataType   string // DATA_TYPE, e.g. int
	nullable   bool
	hasDefault bool
	generated  bool
	generation string // GENERATION_EXPRESSION of a generated column
	charset    string // CHARACTER_SET_NAME; "" for binary and non-string types
	collation  string // COLLATION_NAME; "" for binary and non-string types
}

// uniqueIndex is a unique secondary index of a target table.
type uniqueIndex struct {
	name string
	cols []int // indexes in the source columns; nil when a column is target-only
	// releasable: every column is nullable on the target, so the rows
	// giving a value up can hold NULL meanwhile.
	releasable bool
}

// tableDesc is a target table checked against one source description.
type tableDesc struct {
	src *sluice.Table
	// merge is the allowMerge the description was checked with.
	merge   bool
	display string      // db.table as resolved on the target
	ident   string      // quoted, qualified name used in SQL
	cols    []sqlColumn // aligned with src.Columns
	key     []sqlColumn // aligned with src.Key
	uniques []uniqueIndex
	// release holds the source column indexes of every releasable unique
	// index (deduplicated), the columns set to NULL before upserts.
	release []int
	// generated marks the columns (aligned with src.Columns) the target
	// generates: never written, the target computes them from the
	// others. written holds the indexes of the others, in column order.
	generated []bool
	written   []int
	// warnings are what the check found that does not stop the stream.
	warnings []string

	// keyCharsets are the key columns' character sets, aligned with key.
	keyCharsets []charset
}

const columnsSQL = "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, IS_NULLABLE = 'YES', " +
	"COLUMN_DEFAULT IS NOT NULL OR EXTRA LIKE '%%auto_increment%%', COALESCE(GENERATION_EXPRESSION, ''), " +
	"COALESCE(CHARACTER_SET_NAME, ''), COALESCE(COLLATION_NAME, '') " +
	"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION"

const indexesSQL = "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS " +
	"WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX"

// scanColumns reads the rows of columnsSQL.
func scanColumns(rows *sql.Rows) ([]targetColumn, error) {
	var cols []targetColumn
	for rows.Next() {
		var c targetColumn
		if err := rows.Scan(&c.name, &c.colType, &c.dataType, &c.nullable, &c.hasDefault, &c.generation, &c.charset, &c.collation); err != nil {
			return nil, err
		}
		c.generated = c.generation != ""
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

// scanIndexes reads the rows of indexesSQL: each unique index's columns,
// and the indexes in order.
func scanIndexes(rows *sql.Rows) (map[string][]string, []string, error) {
	indexes := map[string][]string{}
	var order []string
	for rows.Next() {
		var idx, col string
		if err := rows.Scan(&idx, &col); err != nil {
			return nil, nil, err
		}
		if _, ok := indexes[idx]; !ok {
			order = append(order, idx)
		}
		indexes[idx] = append(indexes[idx], col)
	}
	return indexes, order, rows.Err()
}

// Preflight checks, before any data moves, that every table exists on the
// target with the source's primary key, columns whose types hold the
// source's values exactly and key columns whose collations keep apart every
// key the source keeps apart, and loads the tables' unique indexes. It
// reports every problem it finds, each naming the table or column and the
// fix.
func (t *Target) Preflight(ctx context.Context, tables []*sluice.Table) error {
	return t.preflight(ctx, tables, t.allowCollationMerge())
}

// preflight is Preflight with the key-collation setting given.
func (t *Target) preflight(ctx context.Context, tables []*sluice.Table, allowMerge bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	var errs []error
	for _, tbl := range tables {
		if d := t.tables[tbl.Name]; d != nil && d.merge == allowMerge && reflect.DeepEqual(*d.src, *tbl) {
			// The same description checked on this connection moments
			// ago (the stream after its initial copy): the check stands.
			d.src = tbl
			continue
		}
		if _, err := t.loadWith(ctx, tbl, allowMerge); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("preflight of target %s at %s, database %s: %w", t.server, t.addr, t.database, errors.Join(errs...))
	}
	return nil
}

// describe returns the checked description of a source table, loading it on
// first use (or when the source's description changed).
func (t *Target) describe(ctx context.Context, tbl *sluice.Table) (*tableDesc, error) {
	if d := t.tables[tbl.Name]; d != nil && d.src == tbl {
		return d, nil
	}
	return t.load(ctx, tbl)
}

func (t *Target) load(ctx context.Context, tbl *sluice.Table) (*tableDesc, error) {
	return t.loadWith(ctx, tbl, t.allowCollationMerge())
}

// loadWith reads the target's description of a table and checks the source's
// against it; allowMerge accepts key collations that merge keys.
func (t *Target) loadWith(ctx context.Context, tbl *sluice.Table, allowMerge bool) (*tableDesc, error) {
	schema := tbl.Name.Schema
	if schema == "" {
		schema = t.database
	}
	var sb, nb strings.Builder
	quoteString(&sb, schema)
	quoteString(&nb, tbl.Name.Name)
	var tcols []targetColumn
	var indexes map[string][]string
	var indexOrder []string
	var err error
	if pt := t.prefetchedTableOf(tbl.Name); pt != nil && !pt.takenByLoad {
		pt.takenByLoad = true
		tcols, indexes, indexOrder = pt.cols, pt.indexes, pt.indexOrder
	} else {
		err = t.reading(ctx, func() error {
			rows, err := t.conn.QueryContext(ctx, fmt.Sprintf(columnsSQL, sb.String(), nb.String()))
			if err != nil {
				return err
			}
			tcols, err = scanColumns(rows)
			rows.Close()
			if err != nil {
				return err
			}
			rows, err = t.conn.QueryContext(ctx, fmt.Sprintf(indexesSQL, sb.String(), nb.String()))
			if err != nil {
				return err
			}
			defer rows.Close()
			indexes, indexOrder, err = scanIndexes(rows)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("read target catalog for table %s: %w", tbl.Name, err)
	}
	display := sluice.TableName{Schema: schema, Name: tbl.Name.Name}.String()
	if len(tcols) == 0 {
		return nil, fmt.Errorf("target table %s does not exist in database %s: create it with the source's columns (sluice schema apply creates it from the source's definition)", display, schema)
	}
	d, err := check(tbl, display, tcols, indexes, indexOrder, keyRules{server: t.server, allowMerge: allowMerge})
	if err != nil {
		return nil, err
	}
	d.ident = tableIdent(tbl.Name)
	d.merge = allowMerge
	t.tables[tbl.Name] = d
	t.known[tbl.Name] = tbl
	t.warnings.Add(d.warnings)
	return d, nil
}

// WrittenColumns returns the indexes of tbl's columns the target writes,
// all but those it generates, as Preflight of tbl found them (nil before):
// the initial copy neither reads nor writes the others.
func (t *Target) WrittenColumns(tbl *sluice.Table) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.tables[tbl.Name]; d != nil && d.src == tbl {
		return slices.Clone(d.written)
	}
	return nil
}

// PreflightWarnings returns what the checks of tables found that does not
// stop the stream (a generated column computed by another expression than
// the source's), each once.
func (t *Target) PreflightWarnings() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.warnings.List()
}

// kindOf says how values of a target column are written.
func kindOf(dataType string) valueKind {
	switch strings.ToLower(dataType) {
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit":
		return kindBinary
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "numeric", "double":
		return kindNumber
	case "float":
		return kindFloat32
	case "year":
		// The text form of the zero year is "0": as a string it would read
		// as 2000, as a number it is 0000.
		return kindNumber
	}
	return kindString
}

// check compares a source table with the target's columns and unique
// indexes.
func check(src *sluice.Table, display string, tcols []targetColumn, indexes map[string][]string, indexOrder []string, rules keyRules) (*tableDesc, error) {
	if len(src.Key) == 0 {
		return nil, fmt.Errorf("source table %s has no primary key: sluice needs one to apply updates and deletes; add a primary key on the source", src.Name)
	}
	var errs []error
	byName := make(map[string]*targetColumn, len(tcols))
	for i := range tcols {
		// MySQL column names are case-insensitive.
		byName[strings.ToLower(tcols[i].name)] = &tcols[i]
	}
	srcKey := src.KeyNames()
	targetKey := indexes["PRIMARY"]
	switch {
	case len(targetKey) == 0:
		errs = append(errs, fmt.Errorf("target table %s has no primary key: ALTER TABLE %s ADD PRIMARY KEY (%s) as on the source",
			display, display, strings.Join(srcKey, ", ")))
	case !sameSet(targetKey, srcKey):
		errs = append(errs, fmt.Errorf("primary key of %s is (%s) on the target but (%s) on the source: make the target's primary key (%s)",
			display, strings.Join(targetKey, ", "), strings.Join(srcKey, ", "), strings.Join(srcKey, ", ")))
	}
	d := &tableDesc{src: src, display: display, cols: make([]sqlColumn, len(src.Columns)), generated: make([]bool, len(src.Columns))}
	seen := make(map[string]bool, len(src.Columns))
	gen := apply.GeneratedCheck{Table: display, Fix: func(name string) string {
		return fmt.Sprintf("ALTER TABLE %s MODIFY %s %s AS (<the source's expression>) STORED", display, quoteIdent(name), byName[strings.ToLower(name)].colType)
	}}
	for i, sc := range src.Columns {
		seen[strings.ToLower(sc.Name)] = true
		tc := byName[strings.ToLower(sc.Name)]
		if tc == nil {
			errs = append(errs, fmt.Errorf("column %s.%s is missing on the target: add it with ALTER TABLE %s ADD COLUMN %s %s",
				display, sc.Name, display, quoteIdent(sc.Name), sc.Type))
			continue
		}
		d.cols[i] = sqlColumn{Name: sc.Name, Kind: kindOf(tc.dataType)}
		if tc.generated {
			// The target computes it: its type need not hold the source's
			// values, which are never written.
			d.generated[i] = true
			gen.Column(src, i, tc.generation)
			continue
		}
		d.written = append(d.written, i)
		if ok, why := fits(parseType(sc.Type), parseType(tc.colType)); !ok {
			errs = append(errs, fitError(display, sc.Name, sc.Type, tc.colType, why))
		}
		if sc.Nullable && !tc.nullable {
			errs = append(errs, fmt.Errorf("column %s.%s is NOT NULL on the target but nullable on the source: NULL values would fail; ALTER TABLE %s MODIFY %s %s NULL",
				display, sc.Name, display, quoteIdent(sc.Name), tc.colType))
		}
	}
	for _, oc := range src.Omitted {
		if tc := byName[strings.ToLower(oc.Name)]; tc != nil {
			seen[strings.ToLower(oc.Name)] = true
			gen.Omitted(oc, tc.generated, tc.generation)
		}
	}
	errs = append(errs, gen.Errs...)
	d.warnings = gen.Warnings
	for _, tc := range tcols {
		if !seen[strings.ToLower(tc.name)] && !tc.nullable && !tc.hasDefault && !tc.generated {
			errs = append(errs, fmt.Errorf("column %s.%s exists only on the target and is NOT NULL without a default: inserts would fail; give it a default or make it nullable",
				display, tc.name))
		}
	}
	errs = append(errs, keyCollationErrors(src, display, byName, indexes, indexOrder, rules)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	d.key = make([]sqlColumn, len(src.Key))
	d.keyCharsets = make([]charset, len(src.Key))
	for i, k := range src.Key {
		d.key[i] = d.cols[k]
		tc := byName[strings.ToLower(src.Columns[k].Name)]
		d.keyCharsets[i] = charset{name: tc.charset, collation: tc.collation}
	}
	inRelease := map[int]bool{}
	for _, name := range indexOrder {
		if name == "PRIMARY" {
			continue
		}
		u := uniqueIndex{name: name, releasable: true}
		for _, col := range indexes[name] {
			ci := -1
			for i, sc := range src.Columns {
				if strings.EqualFold(sc.Name, col) {
					ci = i
				}
			}
			if ci < 0 {
				u.cols, u.releasable = nil, false
				break
			}
			u.cols = append(u.cols, ci)
			if tc := byName[strings.ToLower(col)]; tc == nil || !tc.nullable || tc.generated {
				// A generated column cannot be set to NULL.
				u.releasable = false
			}
		}
		d.uniques = append(d.uniques, u)
		if u.releasable {
			for _, c := range u.cols {
				if !inRelease[c] {
					inRelease[c] = true
					d.release = append(d.release, c)
				}
			}
		}
	}
	slices.Sort(d.release)
	return d, nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	for i := range a {
		a[i] = strings.ToLower(a[i])
	}
	for i := range b {
		b[i] = strings.ToLower(b[i])
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// ColumnTypes returns the target table's columns and their COLUMN_TYPE
// (e.g. "int(10) unsigned"), or nil when the table does not exist. It lets a
// cross-engine type map decide how source values are written, so it leaves
// out the generated columns, which are never written.
func (t *Target) ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return nil, err
	}
	schema := name.Schema
	if schema == "" {
		schema = t.database
	}
	var sb, nb strings.Builder
	quoteString(&sb, schema)
	quoteString(&nb, name.Name)
	var cols []targetColumn
	var err error
	if pt := t.prefetchedTableOf(name); pt != nil && !pt.takenByType {
		pt.takenByType = true
		cols = pt.cols
	} else {
		err = t.reading(ctx, func() error {
			rows, err := t.conn.QueryContext(ctx, fmt.Sprintf(columnsSQL, sb.String(), nb.String()))
			if err != nil {
				return err
			}
			defer rows.Close()
			cols, err = scanColumns(rows)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("read target catalog for table %s: %w", name, err)
	}
	if len(cols) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, c := range cols {
		if !c.generated {
			out[c.name] = c.colType
		}
	}
	return out, nil
}

// HasUniqueKeys reports whether the target table has a unique index
// besides its primary key. Lanes keep such a table's changes in one lane:
// a change that releases a unique value and one that takes it must not be
// applied out of order by different connections.
func (t *Target) HasUniqueKeys(ctx context.Context, name sluice.TableName) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return false, err
	}
	schema := name.Schema
	if schema == "" {
		schema = t.database
	}
	var sb, nb strings.Builder
	quoteString(&sb, schema)
	quoteString(&nb, name.Name)
	if pt := t.prefetchedTableOf(name); pt != nil && !pt.takenByUnique {
		pt.takenByUnique = true
		for _, idx := range pt.indexOrder {
			if idx != "PRIMARY" {
				return true, nil
			}
		}
		return false, nil
	}
	var n int
	err := t.reading(ctx, func() error {
		return t.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = "+sb.String()+
			" AND TABLE_NAME = "+nb.String()+" AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY'").Scan(&n)
	})
	if err != nil {
		return false, fmt.Errorf("read unique indexes of target table %s: %w", name, err)
	}
	return n > 0, nil
}
