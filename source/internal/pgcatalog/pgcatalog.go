// Package pgcatalog reads what the PostgreSQL readers (logical and
// trigger-based) both need of a source table from the catalog: its oid,
// replica identity, primary key, collations, generated columns and enum
// labels.
package pgcatalog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
)

// Querier is a connection, pool or transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Table finds a source table (an ordinary or partitioned table) in database
// db: its oid and its replica identity (pg_class.relreplident: d, n, f or
// i). A missing table is an error naming it and the fix.
func Table(ctx context.Context, q Querier, db string, name sluice.TableName) (oid uint32, replIdent string, err error) {
	err = q.QueryRow(ctx, `SELECT c.oid, c.relreplident::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, name.Schema, name.Name).Scan(&oid, &replIdent)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", fmt.Errorf("source table %s does not exist in database %s: create it or fix the table list", name, db)
	}
	if err != nil {
		return 0, "", fmt.Errorf("look up source table %s: %w", name, err)
	}
	return oid, replIdent, nil
}

// PrimaryKey returns the names of the table's primary key columns in key
// order (indkey's, which need not be the column order); none when it has
// no primary key.
func PrimaryKey(ctx context.Context, q Querier, name sluice.TableName, oid uint32) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT a.attname
		FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1 AND i.indisprimary
		ORDER BY k.ord`, oid)
	if err != nil {
		return nil, fmt.Errorf("read primary key of source table %s: %w", name, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read primary key of source table %s: %w", name, err)
	}
	return keys, nil
}

// Collations returns, for each column of the table whose values the source
// may find equal though their bytes differ, its collation's name: the
// columns with a nondeterministic collation (pg_collation.
// collisdeterministic false, e.g. an ICU case-insensitive one). A column
// with a deterministic collation, or of a type without one, compares equal
// only when its bytes are, and is not in the map. See sluice.Column.
func Collations(ctx context.Context, q Querier, name sluice.TableName, oid uint32) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT a.attname, c.collname
		FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND NOT c.collisdeterministic`, oid)
	if err != nil {
		return nil, fmt.Errorf("read collations of source table %s: %w", name, err)
	}
	out := map[string]string{}
	for rows.Next() {
		var col, coll string
		if err := rows.Scan(&col, &coll); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read collations of source table %s: %w", name, err)
		}
		out[col] = coll
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read collations of source table %s: %w", name, err)
	}
	return out, nil
}

// GeneratedColumns returns the table's generated columns in column order,
// each with its type, nullability and expression (pg_get_expr, as
// sluice.Column.Generated holds it).
func GeneratedColumns(ctx context.Context, q Querier, name sluice.TableName, oid uint32) ([]sluice.Column, error) {
	rows, err := q.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
		FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> ''
		ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("read generated columns of source table %s: %w", name, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sluice.Column, error) {
		var c sluice.Column
		err := r.Scan(&c.Name, &c.Type, &c.Nullable, &c.Generated)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read generated columns of source table %s: %w", name, err)
	}
	return out, nil
}

// ColumnState is what the catalog says of a column now, beyond its name
// and type (which a relation message carries): for following a change of
// the table's definition.
type ColumnState struct {
	Attnum  int16
	NotNull bool
	// Default is the column's default expression; "" when it has none.
	Default string
	// HasMissing says that rows stored before the column was added hold
	// Missing in it (PostgreSQL 11's fast ADD COLUMN of a non-volatile
	// default): the value every row existing then got. Missing is that
	// value's output text, MissingNull whether it is NULL.
	HasMissing  bool
	Missing     string
	MissingNull bool
}

// ColumnStates returns the state of a table's columns that are not
// generated, by name.
func ColumnStates(ctx context.Context, q Querier, name sluice.TableName, oid uint32) (map[string]ColumnState, error) {
	rows, err := q.Query(ctx, `SELECT a.attname, a.attnum, a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
			a.atthasmissing, coalesce(a.attmissingval::text, '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''`, oid)
	if err != nil {
		return nil, fmt.Errorf("read the columns of source table %s: %w", name, err)
	}
	out := map[string]ColumnState{}
	var col, missing string
	var st ColumnState
	_, err = pgx.ForEachRow(rows, []any{&col, &st.Attnum, &st.NotNull, &st.Default, &st.HasMissing, &missing}, func() error {
		s := st
		if s.HasMissing {
			s.Missing, s.MissingNull = oneElement(missing)
		}
		out[col] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the columns of source table %s: %w", name, err)
	}
	return out, nil
}

// oneElement reads the one element of an array literal as anyarray's
// output prints it ({5}, {"a b"}, {NULL}): its text, or NULL.
func oneElement(s string) (string, bool) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	if s == "NULL" {
		return "", true
	}
	if len(s) < 2 || s[0] != '"' {
		return s, false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		if s[i] == '\\' && i+1 < len(s)-1 {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String(), false
}

// Indexes returns a table's valid secondary indexes (its primary key's
// left out), by name, with the definition of those with expressions, a
// predicate or included columns.
func Indexes(ctx context.Context, q Querier, name sluice.TableName, oid uint32) ([]sluice.Index, error) {
	rows, err := q.Query(ctx, `SELECT ic.relname, i.indisunique,
			ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(n, o)
				JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
				WHERE k.o <= i.indnkeyatts ORDER BY k.o),
			CASE WHEN i.indexprs IS NOT NULL OR i.indpred IS NOT NULL OR i.indnkeyatts <> i.indnatts OR am.amname <> 'btree'
				THEN pg_get_indexdef(i.indexrelid) ELSE '' END
		FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
		WHERE i.indrelid = $1 AND i.indisvalid AND NOT i.indisprimary
		ORDER BY ic.relname`, oid)
	if err != nil {
		return nil, fmt.Errorf("read the indexes of source table %s: %w", name, err)
	}
	var out []sluice.Index
	var ix sluice.Index
	_, err = pgx.ForEachRow(rows, []any{&ix.Name, &ix.Unique, &ix.Columns, &ix.Definition}, func() error {
		out = append(out, ix)
		ix = sluice.Index{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the indexes of source table %s: %w", name, err)
	}
	return out, nil
}

// EnumLabels returns, for each column of the table whose type is an enum
// (or a domain over one), the enum's labels in their order, spelled as
// sluice.Column.Enum holds them ('sad','ok').
func EnumLabels(ctx context.Context, q Querier, name sluice.TableName, oid uint32) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT a.attname, string_agg('''' || replace(e.enumlabel, '''', '''''') || '''', ',' ORDER BY e.enumsortorder)
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		JOIN pg_enum e ON e.enumtypid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		GROUP BY a.attname`, oid)
	if err != nil {
		return nil, fmt.Errorf("read the enum labels of source table %s: %w", name, err)
	}
	out := map[string]string{}
	for rows.Next() {
		var col, labels string
		if err := rows.Scan(&col, &labels); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the enum labels of source table %s: %w", name, err)
		}
		out[col] = labels
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the enum labels of source table %s: %w", name, err)
	}
	return out, nil
}
