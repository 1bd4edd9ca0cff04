// Package pgcatalog reads what the PostgreSQL readers (logical and
// trigger-based) both need of a source table from the catalog: its oid,
// replica identity, primary key, collations and enum labels.
package pgcatalog

import (
	"context"
	"errors"
	"fmt"

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
