package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
)

// catalogSQL describes a table's columns as the target has them. The cast
// type is the column's own pg_type row, or a domain's base type: a cast to
// the domain would apply the base type's typmod as an explicit cast does
// (truncating), while the assignment of the base value to the column still
// checks the domain.
const catalogSQL = `SELECT n.nspname, c.relname, a.attname,
	format_type(a.atttypid, a.atttypmod),
	tn.nspname, t.typname,
	a.attnotnull, a.atthasdef OR a.attidentity <> '', a.attgenerated <> '',
	coalesce(array_position(pk.conkey, a.attnum), 0)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t0 ON t0.oid = a.atttypid
JOIN pg_type t ON t.oid = CASE WHEN t0.typtype = 'd' THEN t0.typbasetype ELSE t0.oid END
JOIN pg_namespace tn ON tn.oid = t.typnamespace
LEFT JOIN pg_constraint pk ON pk.conrelid = c.oid AND pk.contype = 'p'
WHERE c.oid = to_regclass($1)
ORDER BY a.attnum`

// targetColumn is one row of catalogSQL.
type targetColumn struct {
	name       string
	fullType   string
	cast       sqlColumn
	notNull    bool
	hasDefault bool
	generated  bool
	pkPos      int
}

// Preflight checks, before any data moves, that every table exists on the
// target with the source's primary key and columns whose types hold the
// source's values exactly. It reports every problem it finds, each naming
// the table or column and the fix.
func (t *Target) Preflight(ctx context.Context, tables []*sluice.Table) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	var errs []error
	for _, tbl := range tables {
		if _, err := t.load(ctx, tbl); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("preflight of target PostgreSQL at %s, database %s: %w", t.addr, t.database, errors.Join(errs...))
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
	ident := tableIdent(tbl.Name)
	var schema, relname string
	var tcols []targetColumn
	err := t.reading(ctx, func() error {
		tcols = tcols[:0]
		rows, err := t.conn.Query(ctx, catalogSQL, ident)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c targetColumn
			if err := rows.Scan(&schema, &relname, &c.name, &c.fullType, &c.cast.TypeSchema, &c.cast.TypeName,
				&c.notNull, &c.hasDefault, &c.generated, &c.pkPos); err != nil {
				return err
			}
			c.cast.Name = c.name
			tcols = append(tcols, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read target catalog for table %s: %w", tbl.Name, err)
	}
	if len(tcols) == 0 {
		return nil, fmt.Errorf("target table %s does not exist in database %s: create it with the source's columns", tbl.Name, t.database)
	}
	display := sluice.TableName{Schema: schema, Name: relname}.String()
	d, err := check(tbl, display, tcols)
	if err != nil {
		return nil, err
	}
	d.ident = ident
	t.tables[tbl.Name] = d
	return d, nil
}

// tableIdent quotes a table name for SQL; an empty schema resolves through
// the search_path as the source's default schema would.
func tableIdent(n sluice.TableName) string {
	if n.Schema == "" {
		return pgx.Identifier{n.Name}.Sanitize()
	}
	return pgx.Identifier{n.Schema, n.Name}.Sanitize()
}

// check compares a source table with the target's columns.
func check(src *sluice.Table, display string, tcols []targetColumn) (*tableDesc, error) {
	var errs []error
	if len(src.Key) == 0 {
		return nil, fmt.Errorf("source table %s has no primary key: sluice needs one to apply updates and deletes; add a primary key on the source", src.Name)
	}
	byName := make(map[string]*targetColumn, len(tcols))
	var targetKey []string
	for i := range tcols {
		byName[tcols[i].name] = &tcols[i]
	}
	keyCols := slices.DeleteFunc(slices.Clone(tcols), func(c targetColumn) bool { return c.pkPos == 0 })
	slices.SortFunc(keyCols, func(a, b targetColumn) int { return a.pkPos - b.pkPos })
	for _, c := range keyCols {
		targetKey = append(targetKey, c.name)
	}
	srcKey := src.KeyNames()
	switch {
	case len(targetKey) == 0:
		errs = append(errs, fmt.Errorf("target table %s has no primary key: add PRIMARY KEY (%s) as on the source",
			display, strings.Join(srcKey, ", ")))
	case !sameSet(targetKey, srcKey):
		errs = append(errs, fmt.Errorf("primary key of %s is (%s) on the target but (%s) on the source: make the target's primary key (%s)",
			display, strings.Join(targetKey, ", "), strings.Join(srcKey, ", "), strings.Join(srcKey, ", ")))
	}

	d := &tableDesc{src: src, display: display, cols: make([]sqlColumn, len(src.Columns)), upserts: map[string]string{}}
	seen := make(map[string]bool, len(src.Columns))
	for i, sc := range src.Columns {
		seen[sc.Name] = true
		tc := byName[sc.Name]
		if tc == nil {
			errs = append(errs, fmt.Errorf("column %s.%s is missing on the target: add it with ALTER TABLE %s ADD COLUMN %s %s",
				display, sc.Name, display, sc.Name, sc.Type))
			continue
		}
		d.cols[i] = tc.cast
		if tc.generated {
			errs = append(errs, fmt.Errorf("column %s.%s is a generated column on the target and cannot be written: drop its generation expression",
				display, sc.Name))
			continue
		}
		if ok, why := fits(parseType(sc.Type), parseType(tc.fullType)); !ok {
			errs = append(errs, fitError(display, sc.Name, sc.Type, tc.fullType, why))
		}
		if sc.Nullable && tc.notNull {
			errs = append(errs, fmt.Errorf("column %s.%s is NOT NULL on the target but nullable on the source: NULL values would fail; ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL",
				display, sc.Name, display, sc.Name))
		}
	}
	for _, tc := range tcols {
		if !seen[tc.name] && tc.notNull && !tc.hasDefault && !tc.generated {
			errs = append(errs, fmt.Errorf("column %s.%s exists only on the target and is NOT NULL without a default: inserts would fail; give it a default or drop NOT NULL",
				display, tc.name))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// ColumnTypes returns the target table's columns and their types as
// format_type prints them, or nil when the table does not exist. It lets a
// cross-engine type map decide how source values are written.
func (t *Target) ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return nil, err
	}
	out := map[string]string{}
	err := t.reading(ctx, func() error {
		clear(out)
		rows, err := t.conn.Query(ctx, catalogSQL, tableIdent(name))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c targetColumn
			var schema, relname string
			if err := rows.Scan(&schema, &relname, &c.name, &c.fullType, &c.cast.TypeSchema, &c.cast.TypeName,
				&c.notNull, &c.hasDefault, &c.generated, &c.pkPos); err != nil {
				return err
			}
			out[c.name] = c.fullType
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read target catalog for table %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// HasUniqueKeys reports whether the target table has a unique index or
// constraint besides its primary key. Lanes keep such a table's changes in
// one lane: a change that releases a unique value and one that takes it
// must not be applied out of order by different connections.
func (t *Target) HasUniqueKeys(ctx context.Context, name sluice.TableName) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return false, err
	}
	var has bool
	err := t.reading(ctx, func() error {
		return t.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = to_regclass($1) AND indisunique AND NOT indisprimary)`,
			tableIdent(name)).Scan(&has)
	})
	if err != nil {
		return false, fmt.Errorf("read unique indexes of target table %s: %w", name, err)
	}
	return has, nil
}
