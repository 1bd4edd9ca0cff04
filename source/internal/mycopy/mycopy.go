// Package mycopy reads MySQL and MariaDB tables inside one consistent
// snapshot for the initial copy (tablecopy.Reader): a connection in a
// REPEATABLE READ, READ ONLY transaction started WITH CONSISTENT SNAPSHOT.
// The sources (source/binlog, source/mytrigger) take the snapshot at their
// boundary and hand out these readers.
//
// Values are rendered as the stream's reader of the same source renders the
// same row, so that a row reaches the target with identical text whether it
// came by the copy or by the stream. The text protocol's form is that for
// most types; the exceptions differ between the two readers (Style):
//
//   - FLOAT: the text protocol prints 6 significant digits, which is not the
//     stored float32. It is selected as CAST(c AS DOUBLE) (the exact value)
//     and written as the shortest text that reads back to the same float32.
//     The trigger reader keeps FLOAT(M,D) as CAST(c AS CHAR) gives it, with
//     all D decimals ("1234.500"; the text protocol sends "1234.5").
//   - DOUBLE: the text is parsed and written as the reader writes it (the
//     binlog reader ignores DOUBLE(M,D)'s display decimals, the trigger
//     reader keeps them, as CAST AS CHAR writes them).
//   - YEAR 0: "0000" from the binlog, "0" from the triggers.
//   - ZEROFILL integers: without the padding.
//   - -0 (FLOAT, DOUBLE): "-0" from the binlog, "0" from the triggers.
//
// TIMESTAMPs are rendered in UTC (the session's time_zone is '+00:00', as
// both readers assume and keyrange.MySession sets). Character columns come
// converted to utf8mb4 by the server (the connection's character set), as
// the binlog reader converts them from the table map's character set.
package mycopy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

// Style names the stream reader whose value text the copy reproduces.
type Style int

const (
	// Binlog renders values as source/binlog does.
	Binlog Style = iota
	// Trigger renders values as source/mytrigger does.
	Trigger
)

// Batch bounds: a batch is emitted when it holds this many rows or bytes.
const (
	batchRows  = 1000
	batchBytes = 1 << 20
)

// smallTable is the TABLE_ROWS estimate under which Split counts the rows
// instead (InnoDB's estimate is off by much for small tables, and a count
// of them is cheap).
const smallTable = 100_000

// Config configures a Reader.
type Config struct {
	Style Style
	// MariaDB selects MariaDB's DOUBLE text layout for Binlog (MySQL 8
	// writes exponents differently).
	MariaDB bool
	Logger  *slog.Logger
}

// Reader reads tables in a snapshot. It implements tablecopy.Reader.
type Reader struct {
	cfg   Config
	log   *slog.Logger
	db    *sql.DB
	conn  *sql.Conn
	types map[sluice.TableName][]colType
}

var _ tablecopy.Reader = (*Reader)(nil)

// Begin takes a connection of db and starts the snapshot's transaction on
// it; the snapshot is the state of the InnoDB tables at this moment. The
// Reader owns db from then on: Close closes it (a source opens one pool per
// reader so that each holds exactly one connection).
func Begin(ctx context.Context, db *sql.DB, cfg Config) (*Reader, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("copy snapshot: connect: %w", err)
	}
	r := &Reader{cfg: cfg, log: cfg.Logger, db: db, conn: conn, types: map[sluice.TableName][]colType{}}
	for _, s := range []string{
		// TIMESTAMP text and the digest depend on the time zone;
		// keyrange.MySession is the one both sides of a digest use.
		keyrange.MySession,
		// Text in UTF-8 whatever the connection string asks for, as the
		// stream readers give it.
		"SET NAMES utf8mb4",
		"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		"START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
	} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			r.Close()
			return nil, fmt.Errorf("copy snapshot: %s: %w", s, err)
		}
	}
	return r, nil
}

// Conn is the snapshot's connection, for a source that reads the
// snapshot's log position on it (MariaDB's binlog_snapshot_* status).
func (r *Reader) Conn() *sql.Conn { return r.conn }

// Close ends the snapshot.
func (r *Reader) Close() error {
	var errs []error
	if r.conn != nil {
		_, _ = r.conn.ExecContext(context.Background(), "ROLLBACK")
		errs = append(errs, r.conn.Close())
		r.conn = nil
	}
	if r.db != nil {
		errs = append(errs, r.db.Close())
		r.db = nil
	}
	return errors.Join(errs...)
}

// render says how a column is selected and its text turned into the
// reader's.
type render uint8

const (
	rText     render = iota // as the text protocol sends it
	rFloat                  // CAST(c AS DOUBLE), written as a float32
	rDouble                 // parsed and written as a double
	rYear                   // the number, padded to 4 digits by Binlog
	rZerofill               // the number without the padding
	rCastChar               // CAST(c AS CHAR), as the trigger reader captures it
)

type colType struct {
	dataType, columnType string
	render               render
}

func renderFor(style Style, dataType, columnType string) render {
	fixed := strings.Contains(columnType, ",") // FLOAT(M,D), DOUBLE(M,D)
	switch strings.ToLower(dataType) {
	case "float":
		if style == Trigger && fixed {
			return rCastChar
		}
		return rFloat
	case "double", "real", "double precision":
		if style == Trigger && fixed {
			return rCastChar
		}
		return rDouble
	case "year":
		return rYear
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		if strings.Contains(strings.ToLower(columnType), "zerofill") {
			return rZerofill
		}
	}
	return rText
}

// columnTypes reads t's column types (information_schema is not
// versioned: this is the definition now, which a snapshot taken under the
// source's boundary shares).
func (r *Reader) columnTypes(ctx context.Context, t *sluice.Table) ([]colType, error) {
	if ct, ok := r.types[t.Name]; ok {
		return ct, nil
	}
	rows, err := r.conn.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`, t.Name.Schema, t.Name.Name)
	if err != nil {
		return nil, fmt.Errorf("copy %s: read column types: %w", t.Name, err)
	}
	defer rows.Close()
	byName := map[string]colType{}
	for rows.Next() {
		var n, dt, ct string
		if err := rows.Scan(&n, &dt, &ct); err != nil {
			return nil, fmt.Errorf("copy %s: read column types: %w", t.Name, err)
		}
		byName[n] = colType{dataType: strings.ToLower(dt), columnType: strings.ToLower(ct), render: renderFor(r.cfg.Style, dt, ct)}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("copy %s: read column types: %w", t.Name, err)
	}
	out := make([]colType, len(t.Columns))
	for i, c := range t.Columns {
		ct, ok := byName[c.Name]
		if !ok {
			return nil, fmt.Errorf("copy %s: column %s is not on the source any more: the table changed after the stream described it; restart the copy", t.Name, c.Name)
		}
		out[i] = ct
	}
	r.types[t.Name] = out
	return out, nil
}

// QuoteIdent quotes a MySQL identifier.
func QuoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func quoteTable(t sluice.TableName) string { return QuoteIdent(t.Schema) + "." + QuoteIdent(t.Name) }

func (r *Reader) selectList(cols []string, types []colType) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		q := QuoteIdent(c)
		switch types[i].render {
		case rFloat:
			q = "CAST(" + q + " AS DOUBLE)"
		case rCastChar:
			q = "CAST(" + q + " AS CHAR)"
		}
		parts[i] = q
	}
	return strings.Join(parts, ", ")
}

// value turns one column's text-protocol bytes into the reader's text.
func (r *Reader) value(b sql.RawBytes, ct colType) (sluice.Value, error) {
	if b == nil {
		return sluice.Null, nil
	}
	s := string(b)
	switch ct.render {
	case rFloat, rDouble:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return sluice.Value{}, fmt.Errorf("%s value %q: %w", ct.columnType, s, err)
		}
		bits := 64
		if ct.render == rFloat {
			bits = 32
		}
		if r.cfg.Style == Trigger {
			if f == 0 {
				return sluice.Text("0"), nil
			}
			return sluice.Text(strconv.FormatFloat(f, 'g', -1, bits)), nil
		}
		return sluice.Text(FormatFloat(f, bits, r.cfg.MariaDB)), nil
	case rYear:
		n, err := strconv.Atoi(s)
		if err != nil {
			return sluice.Value{}, fmt.Errorf("year value %q: %w", s, err)
		}
		if r.cfg.Style == Trigger {
			return sluice.Text(strconv.Itoa(n)), nil
		}
		return sluice.Text(fmt.Sprintf("%04d", n)), nil
	case rZerofill:
		t := strings.TrimLeft(s, "0")
		if t == "" {
			t = "0"
		}
		return sluice.Text(t), nil
	}
	return sluice.Text(s), nil
}

// keyCols returns t's key column names, quoted, and their types.
func keyCols(t *sluice.Table, types []colType) ([]string, []string, []colType) {
	names := t.KeyNames()
	q := make([]string, len(names))
	kt := make([]colType, len(names))
	for i, n := range names {
		q[i] = QuoteIdent(n)
		kt[i] = types[t.Key[i]]
	}
	return names, q, kt
}

// Split divides t into ranges of about rowsPerChunk rows. An integer first
// key column is split into equal-width ranges of its values between MIN
// and MAX (bounds on that column only), which needs no scan; any other key
// by every rowsPerChunk-th key in key order (full-key bounds), one scan of
// the primary key.
func (r *Reader) Split(ctx context.Context, t *sluice.Table, rowsPerChunk int) ([]tablecopy.Range, int64, error) {
	if rowsPerChunk <= 0 {
		rowsPerChunk = 10000
	}
	if len(t.Key) == 0 {
		n, err := r.estimate(ctx, t)
		return []tablecopy.Range{{}}, n, err
	}
	types, err := r.columnTypes(ctx, t)
	if err != nil {
		return nil, 0, err
	}
	est, err := r.estimate(ctx, t)
	if err != nil {
		return nil, 0, err
	}
	if est <= int64(rowsPerChunk) {
		return []tablecopy.Range{{}}, est, nil
	}
	names, qk, kt := keyCols(t, types)
	switch kt[0].dataType {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		rs, err := r.splitInteger(ctx, t, qk[0], est, rowsPerChunk)
		return rs, est, err
	}
	rs, err := r.splitByRowNumber(ctx, t, names, qk, kt, rowsPerChunk)
	return rs, est, err
}

// estimate is InnoDB's row estimate, or the count when that is small.
func (r *Reader) estimate(ctx context.Context, t *sluice.Table) (int64, error) {
	var est sql.NullInt64
	if err := r.conn.QueryRowContext(ctx, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		t.Name.Schema, t.Name.Name).Scan(&est); err != nil {
		return 0, fmt.Errorf("copy %s: estimate rows (information_schema.TABLES): %w", t.Name, err)
	}
	if est.Valid && est.Int64 >= smallTable {
		return est.Int64, nil
	}
	var n int64
	if err := r.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoteTable(t.Name)).Scan(&n); err != nil {
		return 0, fmt.Errorf("copy %s: count rows: %w", t.Name, err)
	}
	return n, nil
}

func (r *Reader) splitInteger(ctx context.Context, t *sluice.Table, col string, est int64, rowsPerChunk int) ([]tablecopy.Range, error) {
	var lo, hi sql.NullString
	if err := r.conn.QueryRowContext(ctx, "SELECT MIN("+col+"), MAX("+col+") FROM "+quoteTable(t.Name)).Scan(&lo, &hi); err != nil {
		return nil, fmt.Errorf("copy %s: key bounds of %s: %w", t.Name, col, err)
	}
	if !lo.Valid || !hi.Valid {
		return []tablecopy.Range{{}}, nil
	}
	min, ok1 := new(big.Int).SetString(lo.String, 10)
	max, ok2 := new(big.Int).SetString(hi.String, 10)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("copy %s: key bounds of %s are not integers: %q, %q", t.Name, col, lo.String, hi.String)
	}
	span := new(big.Int).Sub(max, min)
	span.Add(span, big.NewInt(1))
	n := big.NewInt((est + int64(rowsPerChunk) - 1) / int64(rowsPerChunk))
	if n.Cmp(span) > 0 {
		n.Set(span)
	}
	chunks := int(n.Int64())
	if chunks <= 1 {
		return []tablecopy.Range{{}}, nil
	}
	out := make([]tablecopy.Range, 0, chunks)
	var from sluice.Row
	for i := 1; i < chunks; i++ {
		b := new(big.Int).Mul(span, big.NewInt(int64(i)))
		b.Quo(b, n)
		b.Add(b, min)
		to := sluice.Row{sluice.Text(b.String())}
		out = append(out, tablecopy.Range{From: from, To: to})
		from = to
	}
	return append(out, tablecopy.Range{From: from}), nil
}

func (r *Reader) splitByRowNumber(ctx context.Context, t *sluice.Table, names, qk []string, kt []colType, rowsPerChunk int) ([]tablecopy.Range, error) {
	order := strings.Join(qk, ", ")
	q := "SELECT " + r.selectList(names, kt) + " FROM (SELECT " + order + ", ROW_NUMBER() OVER (ORDER BY " + order +
		") AS sluice_rn FROM " + quoteTable(t.Name) + ") AS k WHERE sluice_rn % " + strconv.Itoa(rowsPerChunk) +
		" = 1 AND sluice_rn > 1 ORDER BY sluice_rn"
	rows, err := r.conn.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("copy %s: split by key (ROW_NUMBER needs MySQL 8 or MariaDB 10.2): %w", t.Name, err)
	}
	defer rows.Close()
	var out []tablecopy.Range
	var from sluice.Row
	raw := make([]sql.RawBytes, len(qk))
	ptrs := make([]any, len(qk))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("copy %s: split by key: %w", t.Name, err)
		}
		to := make(sluice.Row, len(qk))
		for i := range raw {
			if kt[i].render == rYear && raw[i] != nil {
				// As a literal, the trigger reader's "0" would be the
				// year 2000: the bound keeps the server's "0000".
				to[i] = sluice.Text(string(raw[i]))
				continue
			}
			if to[i], err = r.value(raw[i], kt[i]); err != nil {
				return nil, fmt.Errorf("copy %s: split by key: column %s: %w", t.Name, names[i], err)
			}
		}
		out = append(out, tablecopy.Range{From: from, To: to})
		from = to
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("copy %s: split by key: %w", t.Name, err)
	}
	return append(out, tablecopy.Range{From: from}), nil
}

// Read emits the rows of range rg of t in batches of at most 1000 rows or
// about 1 MiB.
func (r *Reader) Read(ctx context.Context, t *sluice.Table, rg tablecopy.Range, emit func([]sluice.Row) error) error {
	return r.readWhere(ctx, t, rg, func(qk []string) string { return keyrange.My(qk, rg) }, emit)
}

// readWhere emits the rows of t that where(the quoted key columns)
// selects; rg names them in errors.
func (r *Reader) readWhere(ctx context.Context, t *sluice.Table, rg fmt.Stringer, where func(qk []string) string, emit func([]sluice.Row) error) error {
	types, err := r.columnTypes(ctx, t)
	if err != nil {
		return err
	}
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	_, qk, _ := keyCols(t, types)
	q := "SELECT " + r.selectList(names, types) + " FROM " + quoteTable(t.Name) + " WHERE " + where(qk)
	rows, err := r.conn.QueryContext(ctx, q)
	if err != nil {
		return fmt.Errorf("copy %s %s: %w", t.Name, rg, err)
	}
	defer rows.Close()
	raw := make([]sql.RawBytes, len(names))
	ptrs := make([]any, len(names))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	batch := make([]sluice.Row, 0, batchRows)
	size := 0
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("copy %s %s: %w", t.Name, rg, err)
		}
		row := make(sluice.Row, len(names))
		for i := range raw {
			if row[i], err = r.value(raw[i], types[i]); err != nil {
				return fmt.Errorf("copy %s %s: column %s: %w", t.Name, rg, names[i], err)
			}
			size += len(raw[i])
		}
		batch = append(batch, row)
		if len(batch) >= batchRows || size >= batchBytes {
			if err := emit(batch); err != nil {
				return err
			}
			batch, size = batch[:0], 0
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("copy %s %s: %w", t.Name, rg, err)
	}
	if len(batch) > 0 {
		return emit(batch)
	}
	return nil
}

// Digest computes keyrange.MyDigest of a range over t.Columns. The
// session's time_zone is keyrange.MySession's (set at Begin), which is
// also the one Read renders TIMESTAMPs in.
func (r *Reader) Digest(ctx context.Context, t *sluice.Table, rg tablecopy.Range) (tablecopy.Digest, error) {
	types, err := r.columnTypes(ctx, t)
	if err != nil {
		return tablecopy.Digest{}, err
	}
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = keyrange.MyDigestColumn(QuoteIdent(c.Name), types[i].columnType)
	}
	qk := make([]string, len(t.Key))
	for i, n := range t.KeyNames() {
		qk[i] = QuoteIdent(n)
	}
	var d tablecopy.Digest
	var sum sql.NullString
	if err := r.conn.QueryRowContext(ctx, keyrange.MyDigest(quoteTable(t.Name), cols, keyrange.My(qk, rg))).Scan(&d.Rows, &sum); err != nil {
		return d, fmt.Errorf("copy %s %s: digest: %w", t.Name, rg, err)
	}
	d.Sum = sum.String
	return d, nil
}

// FormatFloat writes a FLOAT (bits 32) or DOUBLE as the binlog reader gives
// it, which uses this one function so that the copy and the stream agree:
// the shortest text that reads back to the identical value, FLOAT in Go's
// %g layout, DOUBLE as the flavor's text protocol writes it.
func FormatFloat(f float64, bits int, mariadb bool) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return strconv.FormatFloat(f, 'g', -1, bits)
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0"
		}
		return "0"
	}
	if bits == 32 {
		return strconv.FormatFloat(f, 'g', -1, 32)
	}
	if mariadb {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expS, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expS)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	const limit = 15
	var out string
	switch {
	case exp < -4 || exp >= limit:
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		out += "e" + strconv.Itoa(exp)
	case exp < 0:
		out = "0." + strings.Repeat("0", -exp-1) + digits
	case len(digits) <= exp+1:
		out = digits + strings.Repeat("0", exp+1-len(digits))
	default:
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		out = "-" + out
	}
	return out
}
