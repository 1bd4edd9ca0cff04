// Package pgcatalog reads what the PostgreSQL readers (logical and
// trigger-based) both need of a source table from the catalog: its oid,
// replica identity and primary key.
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
