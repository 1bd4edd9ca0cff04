package dbtest

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier is what Checksum needs of a PostgreSQL connection or pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TableSum is a table's row count and an md5 over every row's text form in
// primary-key order. Two tables with equal sums hold the same rows, as long
// as both were read in sessions with the same TimeZone and DateStyle.
type TableSum struct {
	Rows int64
	Sum  string
}

// Checksum returns table's TableSum on PostgreSQL. table is a name as
// regclass reads it, e.g. "public.accounts".
func Checksum(ctx context.Context, q Querier, table string) (TableSum, error) {
	rows, err := q.Query(ctx, `
		SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisprimary
		ORDER BY array_position(i.indkey, a.attnum)`, table)
	if err != nil {
		return TableSum{}, fmt.Errorf("checksum %s: primary key: %w", table, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return TableSum{}, fmt.Errorf("checksum %s: primary key: %w", table, err)
	}
	if len(keys) == 0 {
		return TableSum{}, fmt.Errorf("checksum %s: table has no primary key", table)
	}
	order := make([]string, len(keys))
	for i, k := range keys {
		order[i] = pgx.Identifier{k}.Sanitize()
	}
	var s TableSum
	sql := fmt.Sprintf(`SELECT count(*), coalesce(md5(string_agg(md5(t::text), '' ORDER BY %s)), '') FROM %s t`,
		strings.Join(order, ", "), table)
	if err := q.QueryRow(ctx, sql).Scan(&s.Rows, &s.Sum); err != nil {
		return TableSum{}, fmt.Errorf("checksum %s: %w", table, err)
	}
	return s, nil
}
