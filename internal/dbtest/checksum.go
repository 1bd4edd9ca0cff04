package dbtest

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
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

// MariaChecksum is the MariaDB counterpart of Checksum: the row count
// and an md5 over every row's text form (the text protocol's, under
// time_zone '+00:00') in primary-key order, each row's values
// length-prefixed and NULL marked.
func MariaChecksum(ctx context.Context, db *sql.DB, table string) (TableSum, error) {
	var keys []string
	rows, err := db.QueryContext(ctx, `SELECT column_name FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = ? AND index_name = 'PRIMARY' ORDER BY seq_in_index`, table)
	if err != nil {
		return TableSum{}, fmt.Errorf("checksum %s: primary key: %w", table, err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return TableSum{}, fmt.Errorf("checksum %s: primary key: %w", table, err)
		}
		keys = append(keys, quoteMySQLIdent(k))
	}
	if err := rows.Err(); err != nil {
		return TableSum{}, fmt.Errorf("checksum %s: primary key: %w", table, err)
	}
	if len(keys) == 0 {
		return TableSum{}, fmt.Errorf("checksum %s: table has no primary key", table)
	}
	// No arguments: the text protocol, so every value arrives as the
	// server's text.
	rows, err = db.QueryContext(ctx, fmt.Sprintf("SELECT * FROM %s ORDER BY %s", quoteMySQLIdent(table), strings.Join(keys, ", ")))
	if err != nil {
		return TableSum{}, fmt.Errorf("checksum %s: %w", table, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return TableSum{}, fmt.Errorf("checksum %s: %w", table, err)
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var s TableSum
	all := md5.New()
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return TableSum{}, fmt.Errorf("checksum %s: %w", table, err)
		}
		row := md5.New()
		for _, v := range vals {
			if v == nil {
				row.Write([]byte("N;"))
				continue
			}
			fmt.Fprintf(row, "%d:", len(v))
			row.Write(v)
		}
		all.Write([]byte(hex.EncodeToString(row.Sum(nil))))
		s.Rows++
	}
	if err := rows.Err(); err != nil {
		return TableSum{}, fmt.Errorf("checksum %s: %w", table, err)
	}
	if s.Rows > 0 {
		s.Sum = hex.EncodeToString(all.Sum(nil))
	}
	return s, nil
}
