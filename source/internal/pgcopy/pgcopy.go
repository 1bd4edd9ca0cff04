// Package pgcopy reads a PostgreSQL source's tables inside an exported
// snapshot, for the initial copy: each Reader is one session in a
// REPEATABLE READ READ ONLY transaction that imported the snapshot, so every
// Reader of one snapshot sees the same rows, exactly those committed before
// the stream's start position.
//
// Values are read as col::text under the settings of keyrange.PGSetLocal,
// which are the settings both PostgreSQL stream readers pin
// (pgtrigger.SessionSettings; the pglogical walsender runs with them and
// turns pgoutput's text into the ::text form): a copied row has the same
// text as the stream would give it. The digest query runs under the same
// settings, as the target's does.
package pgcopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

const (
	// batchRows and batchBytes bound a batch handed to emit.
	batchRows  = 1000
	batchBytes = 1 << 20
	// countBelow: a table whose row estimate is below it (or unknown) is
	// counted exactly; counting is then cheap and the chunks come out even.
	countBelow = 1_000_000
)

// Reader reads tables inside one imported snapshot. It is used by one
// goroutine at a time. Its queries hold a range's bounds as literals and
// run unprepared (pgx.QueryExecModeExec): each runs once, and caching them
// would only churn prepared statements on the server.
type Reader struct {
	conn     *pgx.Conn
	snapshot string
	// batch and rows are reused between batches: emit may not keep them.
	batch []sluice.Row
	rows  []sluice.Row
}

var (
	_ tablecopy.Reader     = (*Reader)(nil)
	_ tablecopy.CopyReader = (*Reader)(nil)
)

// Open connects with cfg (a copy of it; application_name defaults to
// "sluice-copy") and starts a REPEATABLE READ READ ONLY transaction that
// imports the exported snapshot, whose exporting transaction (or
// replication connection) must still be open.
func Open(ctx context.Context, cfg *pgx.ConnConfig, snapshot string) (*Reader, error) {
	cfg = cfg.Copy()
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "sluice-copy"
	}
	addr := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("copy: connect to PostgreSQL source %s as %s: %w", addr, cfg.User, err)
	}
	// SET TRANSACTION SNAPSHOT must come before the transaction's first
	// query; the SET LOCALs are not queries and last as long as the
	// transaction, i.e. the Reader.
	stmts := append([]string{
		"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
		"SET TRANSACTION SNAPSHOT " + keyrange.PGLiteral(snapshot),
	}, keyrange.PGSetLocal()...)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("copy: import snapshot %s on %s (%s): the exporting session must still be open: %w", snapshot, addr, s, err)
		}
	}
	return &Reader{conn: conn, snapshot: snapshot}, nil
}

// OpenN opens n Readers of one snapshot, closing those opened when one
// fails.
func OpenN(ctx context.Context, cfg *pgx.ConnConfig, snapshot string, n int) ([]tablecopy.Reader, error) {
	if n < 1 {
		n = 1
	}
	out := make([]tablecopy.Reader, 0, n)
	for range n {
		r, err := Open(ctx, cfg, snapshot)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Close ends the transaction and the session.
func (r *Reader) Close() error {
	if r.conn == nil {
		return nil
	}
	ctx := context.Background()
	_, err := r.conn.Exec(ctx, "ROLLBACK")
	err = errors.Join(err, r.conn.Close(ctx))
	r.conn = nil
	return err
}

func quote(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

func tableName(t *sluice.Table) string { return quote(t.Name.Schema, t.Name.Name) }

func keyCols(t *sluice.Table) []string {
	out := make([]string, len(t.Key))
	for i, k := range t.Key {
		out[i] = quote(t.Columns[k].Name)
	}
	return out
}

// integerKey reports whether the first key column is smallint, integer or
// bigint (as format_type spells them), which Split cuts by value.
func integerKey(t *sluice.Table) bool {
	if len(t.Key) == 0 {
		return false
	}
	switch t.Columns[t.Key[0]].Type {
	case "smallint", "integer", "bigint":
		return true
	}
	return false
}

// Rows estimates the rows of t in the snapshot: the planner's estimate, or
// an exact count when the table is small or has never been analyzed.
func (r *Reader) Rows(ctx context.Context, t *sluice.Table) (int64, error) {
	var est float64
	err := r.conn.QueryRow(ctx, `SELECT reltuples::float8 FROM pg_class WHERE oid = $1::regclass`, tableName(t)).Scan(&est)
	if err != nil {
		return 0, fmt.Errorf("copy: estimate the rows of source table %s: %w", t.Name, err)
	}
	if est >= countBelow {
		return int64(est), nil
	}
	var n int64
	if err := r.conn.QueryRow(ctx, `SELECT count(*) FROM `+tableName(t)).Scan(&n); err != nil {
		return 0, fmt.Errorf("copy: count the rows of source table %s: %w", t.Name, err)
	}
	return n, nil
}

// Split divides t into ranges of about rowsPerChunk rows. An integer first
// key column is cut into equal-width ranges of its values between min and
// max (one-value bounds, from the index's two ends: no scan); any other
// key into ranges bounded by every rowsPerChunk-th key in key order (full
// keys, from one scan of the key's index).
func (r *Reader) Split(ctx context.Context, t *sluice.Table, rowsPerChunk int) ([]tablecopy.Range, int64, error) {
	rows, err := r.Rows(ctx, t)
	if err != nil {
		return nil, 0, err
	}
	if rowsPerChunk < 1 {
		rowsPerChunk = 1
	}
	whole := []tablecopy.Range{{}}
	if len(t.Key) == 0 || rows <= int64(rowsPerChunk) {
		return whole, rows, nil
	}
	var bounds []sluice.Row
	if integerKey(t) {
		bounds, err = r.intBounds(ctx, t, rows, rowsPerChunk)
	} else {
		bounds, err = r.keyBounds(ctx, t, rowsPerChunk)
	}
	if err != nil {
		return nil, 0, err
	}
	ranges := make([]tablecopy.Range, 0, len(bounds)+1)
	var from sluice.Row
	for _, b := range bounds {
		ranges = append(ranges, tablecopy.Range{From: from, To: b})
		from = b
	}
	return append(ranges, tablecopy.Range{From: from}), rows, nil
}

// intBounds cuts [min, max] of the first key column into about
// rows/rowsPerChunk ranges of equal width. The arithmetic is exact for any
// bigint span.
func (r *Reader) intBounds(ctx context.Context, t *sluice.Table, rows int64, rowsPerChunk int) ([]sluice.Row, error) {
	k := keyCols(t)[0]
	var lo, hi *string
	if err := r.conn.QueryRow(ctx, `SELECT min(`+k+`)::text, max(`+k+`)::text FROM `+tableName(t)).Scan(&lo, &hi); err != nil {
		return nil, fmt.Errorf("copy: read the key range of source table %s: %w", t.Name, err)
	}
	if lo == nil || hi == nil {
		return nil, nil
	}
	min, ok1 := new(big.Int).SetString(*lo, 10)
	max, ok2 := new(big.Int).SetString(*hi, 10)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("copy: key range %s..%s of source table %s is not integer", *lo, *hi, t.Name)
	}
	n := (rows + int64(rowsPerChunk) - 1) / int64(rowsPerChunk)
	span := new(big.Int).Sub(max, min)
	span.Add(span, big.NewInt(1))
	if span.Cmp(big.NewInt(n)) < 0 {
		n = span.Int64()
	}
	// width = ceil(span / n): n ranges cover the span.
	width := new(big.Int).Add(span, big.NewInt(n-1))
	width.Quo(width, big.NewInt(n))
	var out []sluice.Row
	b := new(big.Int).Set(min)
	for i := int64(1); i < n; i++ {
		b.Add(b, width)
		if b.Cmp(max) > 0 {
			break
		}
		out = append(out, sluice.Row{sluice.Text(b.String())})
	}
	return out, nil
}

// keyBounds returns every rowsPerChunk-th key in key order: the window
// over the key columns alone is served by an index-only scan of the
// primary key.
func (r *Reader) keyBounds(ctx context.Context, t *sluice.Table, rowsPerChunk int) ([]sluice.Row, error) {
	keys := keyCols(t)
	order := strings.Join(keys, ", ")
	// The subquery's columns are renamed (k1.., n) so that the row number
	// cannot clash with a key column's name. ORDER BY names them qualified:
	// an unqualified name means the output column, the key's text, whose
	// order is not the key's.
	alias := make([]string, len(keys))
	sel := make([]string, len(keys))
	for i := range keys {
		alias[i] = fmt.Sprintf("k%d", i+1)
		sel[i] = alias[i] + "::text"
	}
	q := `SELECT ` + strings.Join(sel, ", ") + ` FROM (SELECT ` + order + `, row_number() OVER (ORDER BY ` + order + `) FROM ` + tableName(t) +
		`) s(` + strings.Join(alias, ", ") + `, n) WHERE n % $1 = 1 AND n > 1 ORDER BY s.` + strings.Join(alias, ", s.")
	res, err := r.conn.Query(ctx, q, pgx.QueryExecModeExec, pgx.QueryResultFormats{pgx.TextFormatCode}, int64(rowsPerChunk))
	if err != nil {
		return nil, fmt.Errorf("copy: split source table %s by its key: %w", t.Name, err)
	}
	defer res.Close()
	var out []sluice.Row
	for res.Next() {
		raw := res.RawValues()
		b := make(sluice.Row, len(raw))
		for i, v := range raw {
			if v == nil {
				return nil, fmt.Errorf("copy: split source table %s: NULL in primary key column %s", t.Name, keys[i])
			}
			b[i] = sluice.Text(string(v))
		}
		out = append(out, b)
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("copy: split source table %s by its key: %w", t.Name, err)
	}
	return out, nil
}

// Read emits the rows of range rg of t in key order, every column as its
// ::text, in batches of at most batchRows rows or about batchBytes bytes.
func (r *Reader) Read(ctx context.Context, t *sluice.Table, rg tablecopy.Range, emit func(batch []sluice.Row) error) error {
	q := rangeQuery(t, rg)
	fail := func(err error) error {
		return fmt.Errorf("copy: read source table %s range %s: %w", t.Name, rg, err)
	}
	res, err := r.conn.Query(ctx, q, pgx.QueryExecModeExec, pgx.QueryResultFormats{pgx.TextFormatCode})
	if err != nil {
		return fail(err)
	}
	defer res.Close()
	ncol := len(t.Columns)
	batch, size := r.batch[:0], 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := emit(batch)
		r.batch = batch[:0]
		batch, size = batch[:0], 0
		return err
	}
	var text []byte
	for res.Next() {
		raw := res.RawValues()
		if len(raw) != ncol {
			return fail(fmt.Errorf("got %d columns, want %d", len(raw), ncol))
		}
		// One string per row holds every value's text: one allocation
		// instead of one per value.
		text = text[:0]
		for _, v := range raw {
			text = append(text, v...)
		}
		s := string(text)
		var row sluice.Row
		if n := len(batch); n < len(r.rows) && cap(r.rows[n]) >= ncol {
			row = r.rows[n][:ncol]
		} else {
			row = make(sluice.Row, ncol)
			if n < len(r.rows) {
				r.rows[n] = row
			} else {
				r.rows = append(r.rows, row)
			}
		}
		off := 0
		for i, v := range raw {
			if v == nil {
				row[i] = sluice.Null
				continue
			}
			row[i] = sluice.Text(s[off : off+len(v)])
			off += len(v)
		}
		batch = append(batch, row)
		size += len(s) + 16*ncol
		if len(batch) >= batchRows || size >= batchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := res.Err(); err != nil {
		return fail(err)
	}
	return flush()
}

// Digest computes keyrange.PGDigest of range rg of t over t.Columns, under
// keyrange.PGSetLocal (set for the whole transaction).
func (r *Reader) Digest(ctx context.Context, t *sluice.Table, rg tablecopy.Range) (tablecopy.Digest, error) {
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = quote(c.Name)
	}
	var d tablecopy.Digest
	var rows string
	err := r.conn.QueryRow(ctx, keyrange.PGDigest(tableName(t), cols, keyrange.PG(keyCols(t), rg)), pgx.QueryExecModeExec).Scan(&rows, &d.Sum)
	if err != nil {
		return d, fmt.Errorf("copy: digest source table %s range %s: %w", t.Name, rg, err)
	}
	if d.Rows, err = strconv.ParseInt(rows, 10, 64); err != nil {
		return d, fmt.Errorf("copy: digest source table %s range %s: row count %q: %w", t.Name, rg, rows, err)
	}
	return d, nil
}

// rangeQuery selects a range's rows as the stream's text, in key order.
func rangeQuery(t *sluice.Table, rg tablecopy.Range) string {
	sel := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		sel[i] = quote(c.Name) + "::text"
	}
	keys := keyCols(t)
	q := `SELECT ` + strings.Join(sel, ", ") + ` FROM ` + tableName(t) + ` WHERE ` + keyrange.PG(keys, rg)
	if len(keys) > 0 {
		// Key order reads the range along the primary key's index and
		// hands the target its rows in index order.
		// Qualified: a bare name would mean the output column, the text.
		q += ` ORDER BY ` + tableName(t) + `.` + strings.Join(keys, ", "+tableName(t)+".")
	}
	return q
}

// CopyOut writes a range's rows into w as COPY text (tablecopy.CopyReader):
// the same values Read gives, escaped as COPY escapes them, which a
// PostgreSQL target's COPY FROM takes as they are, without sluice parsing
// them.
func (r *Reader) CopyOut(ctx context.Context, t *sluice.Table, rg tablecopy.Range, w io.Writer) (int64, error) {
	tag, err := r.conn.PgConn().CopyTo(ctx, w, "COPY ("+rangeQuery(t, rg)+") TO STDOUT")
	if err != nil {
		return 0, fmt.Errorf("copy: read source table %s range %s: %w", t.Name, rg, err)
	}
	return tag.RowsAffected(), nil
}
