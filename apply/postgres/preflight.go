package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/coltype"
)

// catalogSQL describes a table's columns as the target has them. The cast
// type is the column's own pg_type row, or a domain's base type: a cast to
// the domain would apply the base type's typmod as an explicit cast does
// (truncating), while the assignment of the base value to the column still
// checks the domain.
//
// It also gives each column's collation (none for a type that is not
// collatable) and whether it is deterministic — read through to_jsonb,
// since collisdeterministic appeared in PostgreSQL 12 and every collation
// before it is — and the unique indexes besides the primary key that have
// the column among their key columns (not their INCLUDE columns).
const catalogSQL = `SELECT n.nspname, c.relname, a.attname,
	format_type(a.atttypid, a.atttypmod),
	tn.nspname, t.typname,
	a.attnotnull, a.atthasdef OR a.attidentity <> '',
	CASE WHEN a.attgenerated <> '' THEN pg_get_expr(ad.adbin, ad.adrelid) ELSE '' END,
	coalesce(array_position(pk.conkey, a.attnum), 0),
	coalesce(co.collname, ''), coalesce(cn.nspname, ''),
	coalesce((to_jsonb(co) ->> 'collisdeterministic')::boolean, true),
	ARRAY(SELECT ic.relname::text FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
		WHERE i.indrelid = c.oid AND i.indisunique AND NOT i.indisprimary
			AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])
		ORDER BY 1)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t0 ON t0.oid = a.atttypid
JOIN pg_type t ON t.oid = CASE WHEN t0.typtype = 'd' THEN t0.typbasetype ELSE t0.oid END
JOIN pg_namespace tn ON tn.oid = t.typnamespace
LEFT JOIN pg_constraint pk ON pk.conrelid = c.oid AND pk.contype = 'p'
LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
LEFT JOIN pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
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
	generation string // a generated column's expression (pg_get_expr)
	pkPos      int
	collation  columnCollation
	uniques    []string // unique indexes besides the primary key that the column is a key of
}

// columnCollation is a target column's collation.
type columnCollation struct {
	name, schema string // "" when the type is not collatable
	// deterministic: two values are equal only when their bytes are (true
	// for a type that is not collatable).
	deterministic bool
	// merges says which probes a nondeterministic collation of a key column
	// holds equal, e.g. "case ('a' = 'A')".
	merges []string
}

// scanColumn reads one row of catalogSQL.
func scanColumn(rows pgx.Rows, schema, relname *string) (targetColumn, error) {
	var c targetColumn
	err := rows.Scan(schema, relname, &c.name, &c.fullType, &c.cast.TypeSchema, &c.cast.TypeName,
		&c.notNull, &c.hasDefault, &c.generation, &c.pkPos,
		&c.collation.name, &c.collation.schema, &c.collation.deterministic, &c.uniques)
	c.cast.Name = c.name
	c.generated = c.generation != ""
	return c, err
}

// Preflight checks, before any data moves, that every table exists on the
// target with the source's primary key, columns whose types hold the
// source's values exactly and key columns whose collations keep apart every
// key the source keeps apart, and, where batches cannot run with
// session_replication_role = replica, no foreign key between them with an
// action (checkActingForeignKeys). It reports every problem it finds, each
// naming the table or column and the fix.
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
	if len(errs) == 0 && !t.replicaRole {
		if err := t.checkActingForeignKeys(ctx, tables); err != nil {
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
	return t.loadWith(ctx, tbl, t.allowCollationMerge())
}

// loadWith reads the target's description of a table and checks the source's
// against it; allowMerge accepts key collations that merge keys.
func (t *Target) loadWith(ctx context.Context, tbl *sluice.Table, allowMerge bool) (*tableDesc, error) {
	ident := tableIdent(tbl.Name)
	var schema, relname string
	var tcols []targetColumn
	pre, schema0, relname0, prefetched := t.takeCatalog(ident)
	err := t.reading(ctx, func() error {
		if prefetched {
			prefetched = false // a retry reads the catalog
			tcols, schema, relname = pre, schema0, relname0
			return t.probeCollations(ctx, tcols)
		}
		tcols = tcols[:0]
		rows, err := t.conn.Query(ctx, catalogSQL, ident)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			c, err := scanColumn(rows, &schema, &relname)
			if err != nil {
				return err
			}
			tcols = append(tcols, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return t.probeCollations(ctx, tcols)
	})
	if err != nil {
		return nil, fmt.Errorf("read target catalog for table %s: %w", tbl.Name, err)
	}
	if len(tcols) == 0 {
		return nil, fmt.Errorf("target table %s does not exist in database %s: create it with the source's columns (sluice schema apply creates it from the source's definition)", tbl.Name, t.database)
	}
	display := sluice.TableName{Schema: schema, Name: relname}.String()
	d, err := check(tbl, display, tcols, allowMerge)
	if err != nil {
		return nil, err
	}
	d.ident = ident
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

// tableIdent quotes a table name for SQL; an empty schema resolves through
// the search_path as the source's default schema would.
func tableIdent(n sluice.TableName) string {
	if n.Schema == "" {
		return pgx.Identifier{n.Name}.Sanitize()
	}
	return pgx.Identifier{n.Schema, n.Name}.Sanitize()
}

// check compares a source table with the target's columns; allowMerge
// accepts key collations that merge keys.
func check(src *sluice.Table, display string, tcols []targetColumn, allowMerge bool) (*tableDesc, error) {
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

	d := &tableDesc{src: src, display: display, cols: make([]sqlColumn, len(src.Columns)), generated: make([]bool, len(src.Columns)),
		deletes: map[string]string{}, upserts: map[string]string{}}
	seen := make(map[string]bool, len(src.Columns))
	gen := apply.GeneratedCheck{Table: display, Fix: func(name string) string {
		return fmt.Sprintf("ALTER TABLE %s DROP COLUMN %s, ADD COLUMN %s %s GENERATED ALWAYS AS (<the source's expression>) STORED",
			display, ident(name), ident(name), byName[name].fullType)
	}}
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
			// The target computes it: its type need not hold the source's
			// values, which are never written.
			d.generated[i] = true
			gen.Column(src, i, tc.generation)
			continue
		}
		d.written = append(d.written, i)
		if ok, why := fits(coltype.ParsePostgres(sc.Type), coltype.ParsePostgres(tc.fullType)); !ok {
			errs = append(errs, fitError(display, sc.Name, sc.Type, tc.fullType, why))
		}
		if sc.Nullable && tc.notNull {
			errs = append(errs, fmt.Errorf("column %s.%s is NOT NULL on the target but nullable on the source: NULL values would fail; ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL",
				display, sc.Name, display, sc.Name))
		}
	}
	for _, oc := range src.Omitted {
		if tc := byName[oc.Name]; tc != nil {
			seen[oc.Name] = true
			gen.Omitted(oc, tc.generated, tc.generation)
		}
	}
	errs = append(errs, gen.Errs...)
	d.warnings = gen.Warnings
	for _, tc := range tcols {
		if !seen[tc.name] && tc.notNull && !tc.hasDefault && !tc.generated {
			errs = append(errs, fmt.Errorf("column %s.%s exists only on the target and is NOT NULL without a default: inserts would fail; give it a default or drop NOT NULL",
				display, tc.name))
		}
	}
	errs = append(errs, keyCollationErrors(src, display, byName, allowMerge)...)
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
// cross-engine type map decide how source values are written, so it leaves
// out the generated columns, which are never written.
func (t *Target) ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return nil, err
	}
	out := map[string]string{}
	n := 0
	err := t.reading(ctx, func() error {
		clear(out)
		n = 0
		rows, err := t.conn.Query(ctx, catalogSQL, tableIdent(name))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var schema, relname string
			c, err := scanColumn(rows, &schema, &relname)
			if err != nil {
				return err
			}
			if n++; !c.generated {
				out[c.name] = c.fullType
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read target catalog for table %s: %w", name, err)
	}
	if n == 0 {
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
	ident := tableIdent(name)
	if p := t.pre; p != nil {
		if has, ok := p.unique[ident]; ok {
			delete(p.unique, ident)
			return has, nil
		}
	}
	var has bool
	err := t.reading(ctx, func() error {
		return t.conn.QueryRow(ctx, uniqueKeysSQL, ident).Scan(&has)
	})
	if err != nil {
		return false, fmt.Errorf("read unique indexes of target table %s: %w", name, err)
	}
	return has, nil
}

// uniqueKeysSQL tells whether a table has a unique index besides its
// primary key.
const uniqueKeysSQL = `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = to_regclass($1) AND indisunique AND NOT indisprimary)`
