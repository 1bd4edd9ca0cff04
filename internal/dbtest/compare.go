package dbtest

// Table equality that cannot share a bug with sluice.
//
// sluice carries every value as the text its source prints and lets the
// target parse it. A check that compares the text both servers print
// shares that path's blind spots: MariaDB's text protocol prints a FLOAT
// with 6 significant digits, so two FLOATs that differ in their 7th digit
// print alike, and a carrier that rounds them passes. CompareTable instead
// reads both tables through each server's binary protocol — pgx's binary
// result format; go-sql-driver's server-side prepared statements, which
// return FLOAT as float32, DOUBLE as float64 and temporal values as their
// binary fields — and compares canonical Go values per column type:
// integers and decimals as exact rationals (math/big), floats by their
// bits, timestamps as UTC instants at microsecond precision, bytes and
// text byte for byte, JSON by value, booleans against tinyint(1) and uuid
// against char(36) by value.

import (
	"bytes"
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Querier is what the comparison needs of a PostgreSQL connection, pool or
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is one side of a comparison: a PostgreSQL database read through pgx
// (a *pgx.Conn, *pgxpool.Pool or pgx.Tx), or a MySQL-family database read
// through go-sql-driver. Exactly one is set.
type DB struct {
	PG Querier
	My *sql.DB
}

// pg is d.PG, or nil also when it holds a nil pointer (a DB built from a
// nil *pgxpool.Pool is not a PostgreSQL side).
func (d DB) pg() Querier {
	if d.PG == nil {
		return nil
	}
	if v := reflect.ValueOf(d.PG); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return d.PG
}

func (d DB) String() string {
	if d.pg() != nil {
		return "postgres"
	}
	return "mysql"
}

// DiffKind says how a row differs.
type DiffKind string

const (
	// Missing: the row is in want but not in got.
	Missing DiffKind = "missing"
	// Extra: the row is in got but not in want.
	Extra DiffKind = "extra"
	// Different: both hold the row, with different values.
	Different DiffKind = "different"
)

// ColumnDiff is one column of a Different row, with both values in their
// canonical form.
type ColumnDiff struct {
	Column    string
	Want, Got string
}

// RowDiff is one row that differs, named by its primary key, e.g.
// "(id=7)" or "(order_id=3, line_no=1)".
type RowDiff struct {
	Key     string
	Kind    DiffKind
	Columns []ColumnDiff
}

func (r RowDiff) String() string {
	if r.Kind != Different {
		return fmt.Sprintf("%s: %s", r.Key, r.Kind)
	}
	parts := make([]string, len(r.Columns))
	for i, c := range r.Columns {
		parts[i] = fmt.Sprintf("%s: want %s, got %s", c.Column, c.Want, c.Got)
	}
	return fmt.Sprintf("%s: different: %s", r.Key, strings.Join(parts, "; "))
}

// TableDiff is how table got differs from table want; no Rows means
// equal.
type TableDiff struct {
	Table             string
	WantRows, GotRows int
	Rows              []RowDiff
}

// Equal reports whether the tables hold the same rows.
func (d *TableDiff) Equal() bool { return len(d.Rows) == 0 }

// maxShown bounds the rows a String lists; the count says how many more.
const maxShown = 20

func (d *TableDiff) String() string {
	if d.Equal() {
		return fmt.Sprintf("%s: equal (%d rows)", d.Table, d.WantRows)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d rows want, %d got, %d differ", d.Table, d.WantRows, d.GotRows, len(d.Rows))
	for i, r := range d.Rows {
		if i == maxShown {
			fmt.Fprintf(&b, "\n  … and %d more", len(d.Rows)-maxShown)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(r.String())
	}
	return b.String()
}

// Diffs is the comparison of several tables.
type Diffs []*TableDiff

// Equal reports whether every table is equal.
func (ds Diffs) Equal() bool {
	for _, d := range ds {
		if !d.Equal() {
			return false
		}
	}
	return true
}

// String lists the tables that differ (all of them when all are equal).
func (ds Diffs) String() string {
	var parts []string
	for _, d := range ds {
		if !d.Equal() || ds.Equal() {
			parts = append(parts, d.String())
		}
	}
	return strings.Join(parts, "\n")
}

// CompareTables compares each table of want with the table of the same
// name in got.
func CompareTables(ctx context.Context, want, got DB, tables ...string) (Diffs, error) {
	var out Diffs
	for _, t := range tables {
		d, err := CompareTable(ctx, want, got, t)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// CompareTable reads table on both sides and says, row by row, how got
// differs from want. Columns are matched by name and must exist on both
// sides with types whose values can be compared (see canonical kinds
// below); the primary keys must have the same columns. A -0.0 and a 0.0
// are told apart only when both sides are PostgreSQL, the one engine of
// the two that keeps a zero's sign.
func CompareTable(ctx context.Context, want, got DB, table string) (*TableDiff, error) {
	return CompareTableAs(ctx, want, table, got, table)
}

// CompareTableAs is CompareTable for tables of different names: wantTable
// in want (a copy of a table kept for later, say) and gotTable in got.
func CompareTableAs(ctx context.Context, want DB, wantTable string, got DB, gotTable string) (*TableDiff, error) {
	w, err := readTable(ctx, want, wantTable)
	if err != nil {
		return nil, fmt.Errorf("compare %s: read want (%s): %w", wantTable, want, err)
	}
	g, err := readTable(ctx, got, gotTable)
	if err != nil {
		return nil, fmt.Errorf("compare %s: read got (%s): %w", gotTable, got, err)
	}
	return diffTables(gotTable, w, g, want.pg() != nil && got.pg() != nil)
}

// CompareChecksumTable compares tables between two MySQL-family databases
// with the server's own CHECKSUM TABLE … EXTENDED, which hashes every
// row's stored bytes: an equality check that shares no code with sluice
// or with CompareTable. It returns an error naming each table whose
// checksums differ.
func CompareChecksumTable(ctx context.Context, want, got *sql.DB, tables ...string) error {
	var errs []error
	for _, t := range tables {
		a, err := checksumTable(ctx, want, t)
		if err != nil {
			return err
		}
		b, err := checksumTable(ctx, got, t)
		if err != nil {
			return err
		}
		if a != b {
			errs = append(errs, fmt.Errorf("CHECKSUM TABLE %s: want %s, got %s", t, a, b))
		}
	}
	return errors.Join(errs...)
}

func checksumTable(ctx context.Context, db *sql.DB, table string) (string, error) {
	var name string
	var sum sql.NullString
	if err := db.QueryRowContext(ctx, "CHECKSUM TABLE "+quoteMySQLIdent(table)+" EXTENDED").Scan(&name, &sum); err != nil {
		return "", fmt.Errorf("CHECKSUM TABLE %s: %w", table, err)
	}
	if !sum.Valid {
		return "", fmt.Errorf("CHECKSUM TABLE %s: no such table", table)
	}
	return sum.String, nil
}

// A class is what a column's values are on one side, from its type.
type class int

const (
	clsInt class = iota + 1
	clsDec
	clsTinyint1 // MySQL's boolean
	clsF32
	clsF64
	clsBool
	clsBytes
	clsText
	clsChar // blank-padded: trailing spaces are not part of the value
	clsTimestamp
	clsDate
	clsTimeOfDay
	clsUUID
	clsJSON
	// clsPGBinary is any other PostgreSQL type (inet, arrays, enums, …):
	// its binary send form, compared byte for byte with a column of the
	// same type on another PostgreSQL, and the text PostgreSQL prints for
	// it (its output function), compared with a MySQL text column, which
	// the cross-engine map fills with that text.
	clsPGBinary
	// clsPGBits (bit, varbit) and clsPGInterval are clsPGBinary that also
	// compare with a MySQL BIT (as the bits' number) and a MySQL TIME (as
	// microseconds: an interval without months).
	clsPGBits
	clsPGInterval
)

// A kind is a canonical value's type; each class reads into one, and a
// pair of classes compares in one (resolveKind).
type kind int

const (
	kNum  kind = iota + 1 // exact rational: integers and decimals
	kF32                  // float32 bits
	kF64                  // float64 bits
	kBool                 // bool
	kTime                 // UTC instant, microseconds
	kDate                 // civil date
	kTOD                  // time of day, microseconds
	kBytes
	kText
	kUUID     // 16 bytes
	kJSON     // decoded document
	kPGBinary // a PostgreSQL type's binary send form
	kBits     // a bit string as its number, in binary digits without leading zeros
)

func (c class) kind() kind {
	switch c {
	case clsInt, clsDec, clsTinyint1:
		return kNum
	case clsF32:
		return kF32
	case clsF64:
		return kF64
	case clsBool:
		return kBool
	case clsBytes:
		return kBytes
	case clsText, clsChar:
		return kText
	case clsTimestamp:
		return kTime
	case clsDate:
		return kDate
	case clsTimeOfDay:
		return kTOD
	case clsUUID:
		return kUUID
	case clsJSON:
		return kJSON
	case clsPGBinary, clsPGBits, clsPGInterval:
		return kPGBinary
	}
	panic(fmt.Sprintf("dbtest: class %d", c))
}

var kindNames = map[kind]string{kNum: "number", kF32: "float32", kF64: "float64", kBool: "boolean", kTime: "timestamp",
	kDate: "date", kTOD: "time", kBytes: "bytes", kText: "text", kUUID: "uuid", kJSON: "json", kPGBinary: "PostgreSQL binary form", kBits: "bits"}

// resolveKind is the kind two columns compare in: their common kind, or
// the richer one where a type pair of the cross-engine map meets (a FLOAT
// against a DOUBLE compares as float64, tinyint(1) against boolean as
// booleans, char(36) against uuid as UUIDs, MariaDB's JSON — a longtext —
// against jsonb as JSON documents).
func resolveKind(a, b class) (kind, error) {
	ka, kb := a.kind(), b.kind()
	if ka == kb {
		return ka, nil
	}
	pair := func(x, y kind) bool { return ka == x && kb == y || ka == y && kb == x }
	switch {
	case pair(kF32, kF64):
		return kF64, nil
	case pair(kBool, kNum) && (a == clsTinyint1 || b == clsTinyint1 || a == clsInt || b == clsInt):
		return kBool, nil
	case pair(kUUID, kText), pair(kUUID, kBytes):
		return kUUID, nil
	case pair(kJSON, kText):
		return kJSON, nil
	case pair(kPGBinary, kText):
		// A PostgreSQL type without a MySQL one, kept as its text.
		return kText, nil
	case pair(kPGBinary, kBytes) && (a == clsPGBits || b == clsPGBits):
		return kBits, nil
	case pair(kPGBinary, kTOD) && (a == clsPGInterval || b == clsPGInterval):
		return kTOD, nil
	case pair(kF64, kText), pair(kNum, kText):
		// A float or numeric kept as its text: compared by value.
		if ka == kText {
			return kb, nil
		}
		return ka, nil
	}
	return 0, fmt.Errorf("values of %s and %s cannot be compared", kindNames[ka], kindNames[kb])
}

// cval is a canonical value.
type cval struct {
	kind    kind
	null    bool
	num     *big.Rat
	special string // NaN, ±Infinity of numeric or timestamp
	f32     float32
	f64     float64
	b       bool
	t       time.Time
	us      int64
	raw     []byte // bytes, text, uuid
	js      any
	// out is the text PostgreSQL prints for a kPGBinary value; hasTOD
	// says an interval's us holds its length (it has no months).
	out    []byte
	hasTOD bool
}

// coerce turns v into kind k where a pair of classes calls for it; a value
// that does not convert (a tinyint 2, a char(36) that is no UUID) keeps its
// kind and so compares unequal to anything of kind k.
func (v cval) coerce(k kind) cval {
	if v.null || v.kind == k || v.special != "" {
		return v
	}
	switch {
	case v.kind == kF32 && k == kF64:
		return cval{kind: kF64, f64: float64(v.f32)}
	case v.kind == kNum && k == kBool:
		if v.num.Sign() == 0 {
			return cval{kind: kBool, b: false}
		}
		if v.num.Cmp(big.NewRat(1, 1)) == 0 {
			return cval{kind: kBool, b: true}
		}
	case v.kind == kText && k == kUUID:
		if len(v.raw) == 36 {
			if u, err := uuid.ParseBytes(v.raw); err == nil {
				return cval{kind: kUUID, raw: u[:]}
			}
		}
	case v.kind == kText && k == kJSON:
		if js, err := decodeJSON(v.raw); err == nil {
			return cval{kind: kJSON, js: js}
		}
	case v.kind == kPGBinary && k == kText && v.out != nil:
		return cval{kind: kText, raw: v.out}
	case v.kind == kPGBinary && k == kBits && v.out != nil:
		n, ok := new(big.Int).SetString(string(v.out), 2)
		if !ok {
			return v
		}
		return cval{kind: kBits, raw: []byte(n.Text(2))}
	case v.kind == kBytes && k == kBits:
		return cval{kind: kBits, raw: []byte(new(big.Int).SetBytes(v.raw).Text(2))}
	case v.kind == kPGBinary && k == kTOD && v.hasTOD:
		return cval{kind: kTOD, us: v.us}
	case v.kind == kBytes && k == kUUID && len(v.raw) == 16:
		return cval{kind: kUUID, raw: v.raw}
	case v.kind == kText && k == kF64:
		if f, err := strconv.ParseFloat(string(v.raw), 64); err == nil {
			return cval{kind: kF64, f64: f}
		}
	case v.kind == kText && k == kNum:
		switch t := string(v.raw); t {
		case "NaN", "Infinity", "-Infinity":
			return cval{kind: kNum, special: t}
		default:
			if r, ok := new(big.Rat).SetString(t); ok {
				return cval{kind: kNum, num: r}
			}
		}
	}
	return v
}

func (v cval) equal(o cval, signedZero bool) bool {
	if v.null || o.null {
		return v.null == o.null
	}
	if v.kind != o.kind || v.special != o.special {
		return false
	}
	if v.special != "" {
		return true
	}
	switch v.kind {
	case kNum:
		return v.num.Cmp(o.num) == 0
	case kF32:
		a, b := float64(v.f32), float64(o.f32)
		return floatEqual(a, b, math.Float32bits(v.f32) == math.Float32bits(o.f32), signedZero)
	case kF64:
		return floatEqual(v.f64, o.f64, math.Float64bits(v.f64) == math.Float64bits(o.f64), signedZero)
	case kBool:
		return v.b == o.b
	case kTime, kDate:
		return v.t.Equal(o.t)
	case kTOD:
		return v.us == o.us
	case kBytes, kText, kUUID, kPGBinary, kBits:
		return bytes.Equal(v.raw, o.raw)
	case kJSON:
		return jsonEqual(v.js, o.js)
	}
	return false
}

// floatEqual: the same bits, or two zeros where the sign is not kept, or
// two NaNs (whose payloads no engine promises to keep).
func floatEqual(a, b float64, sameBits, signedZero bool) bool {
	switch {
	case sameBits:
		return true
	case a == 0 && b == 0:
		return !signedZero
	case math.IsNaN(a) && math.IsNaN(b):
		return true
	}
	return false
}

// String renders the value for a report: exact, and short for long
// values.
func (v cval) String() string {
	if v.null {
		return "NULL"
	}
	if v.special != "" {
		return v.special
	}
	switch v.kind {
	case kNum:
		return ratString(v.num)
	case kF32:
		return fmt.Sprintf("%s (float32 %#08x)", strconv.FormatFloat(float64(v.f32), 'g', -1, 32), math.Float32bits(v.f32))
	case kF64:
		return fmt.Sprintf("%s (float64 %#016x)", strconv.FormatFloat(v.f64, 'g', -1, 64), math.Float64bits(v.f64))
	case kBool:
		return strconv.FormatBool(v.b)
	case kTime:
		return v.t.Format("2006-01-02 15:04:05.000000 UTC")
	case kDate:
		return v.t.Format("2006-01-02")
	case kTOD:
		d := time.Duration(v.us) * time.Microsecond
		return fmt.Sprintf("%02d:%02d:%02d.%06d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60, v.us%1e6)
	case kBytes, kPGBinary:
		if len(v.raw) <= 32 {
			return `\x` + hex.EncodeToString(v.raw)
		}
		sum := md5.Sum(v.raw)
		return fmt.Sprintf(`%d bytes \x%s… md5 %x`, len(v.raw), hex.EncodeToString(v.raw[:16]), sum)
	case kBits:
		return "bits " + string(v.raw)
	case kText:
		if len(v.raw) <= 80 {
			return strconv.Quote(string(v.raw))
		}
		sum := md5.Sum(v.raw)
		return fmt.Sprintf("%d bytes %s… md5 %x", len(v.raw), strconv.Quote(string(v.raw[:40])), sum)
	case kUUID:
		u, _ := uuid.FromBytes(v.raw)
		return u.String()
	case kJSON:
		b, _ := json.Marshal(v.js) // numbers are json.Numbers: printed as read
		if len(b) > 120 {
			return string(b[:100]) + fmt.Sprintf("… (%d bytes)", len(b))
		}
		return string(b)
	}
	return fmt.Sprintf("kind %d", v.kind)
}

// keyString is an exact, unambiguous encoding of a key value, for
// matching rows across the two sides.
func (v cval) keyString() string {
	switch {
	case v.null:
		return "N"
	case v.special != "":
		return "S" + v.special
	case v.kind == kNum:
		return "n" + v.num.RatString()
	case v.kind == kF32:
		return fmt.Sprintf("f%x", math.Float32bits(v.f32))
	case v.kind == kF64:
		return fmt.Sprintf("d%x", math.Float64bits(v.f64))
	case v.kind == kTime || v.kind == kDate:
		return "t" + strconv.FormatInt(v.t.UnixMicro(), 10)
	case v.kind == kBytes || v.kind == kText || v.kind == kUUID:
		return "b" + hex.EncodeToString(v.raw)
	}
	return "v" + v.String()
}

// less orders key values: numbers by value, the rest by their encoding.
func (v cval) less(o cval) bool {
	if v.kind == kNum && o.kind == kNum && !v.null && !o.null && v.special == "" && o.special == "" {
		return v.num.Cmp(o.num) < 0
	}
	return v.keyString() < o.keyString()
}

// ratString prints an exact rational that came from a decimal as one:
// its denominator is a product of 2s and 5s, so a finite number of
// fraction digits holds it exactly.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	d := new(big.Int).Set(r.Denom())
	digits := 0
	for _, p := range []*big.Int{big.NewInt(2), big.NewInt(5)} {
		n := 0
		for new(big.Int).Mod(d, p).Sign() == 0 {
			d.Div(d, p)
			n++
		}
		digits = max(digits, n)
	}
	if d.Cmp(big.NewInt(1)) != 0 {
		return r.RatString() // not a decimal: print the fraction
	}
	return r.FloatString(digits)
}

// column is a column as one side reads it.
type column struct {
	name string
	typ  string // the server's name of the type, for messages
	cls  class
}

type tableData struct {
	cols []column
	key  []string
	rows [][]cval // aligned with cols
}

func readTable(ctx context.Context, db DB, table string) (*tableData, error) {
	switch pg := db.pg(); {
	case pg != nil && db.My == nil:
		return readPG(ctx, pg, table)
	case db.My != nil && pg == nil:
		return readMy(ctx, db.My, table)
	}
	return nil, errors.New("dbtest.DB needs exactly one of PG and My")
}

func pgTableName(table string) string {
	parts := strings.Split(table, ".")
	return pgx.Identifier(parts).Sanitize()
}

func readPG(ctx context.Context, q Querier, table string) (*tableData, error) {
	name := pgTableName(table)
	rows, err := q.Query(ctx, `
		SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisprimary
		ORDER BY array_position(i.indkey, a.attnum)`, name)
	if err != nil {
		return nil, fmt.Errorf("primary key: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("primary key: %w", err)
	}
	if len(keys) == 0 {
		return nil, errors.New("table has no primary key")
	}
	// Every column in binary: the values' stored form, decoded by pgx's
	// binary codecs, never by the server's output functions; but for the
	// types compared as their text with a MySQL column that holds it
	// (clsPGBinary), that text too, in a column of its own after the
	// table's. DescribeExec: a cached plan of an earlier shape of the
	// table (a test that altered it) must not be used.
	rows, err = q.Query(ctx, "SELECT * FROM "+name+" LIMIT 0", pgx.QueryExecModeDescribeExec, pgx.QueryResultFormats{pgx.BinaryFormatCode})
	if err != nil {
		return nil, err
	}
	var printed []string
	var printedOf []int
	for i, fd := range rows.FieldDescriptions() {
		if cls, err := pgClass(fd.DataTypeOID); err == nil && cls.kind() == kPGBinary {
			id := pgx.Identifier{fd.Name}.Sanitize()
			printed = append(printed, "CASE WHEN "+id+" IS NOT NULL THEN format('%s', "+id+") END")
			printedOf = append(printedOf, i)
		}
	}
	rows.Close()
	sel := strings.Join(append([]string{"*"}, printed...), ", ")
	rows, err = q.Query(ctx, "SELECT "+sel+" FROM "+name, pgx.QueryExecModeDescribeExec, pgx.QueryResultFormats{pgx.BinaryFormatCode})
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := pgtype.NewMap()
	td := &tableData{key: keys}
	fds := rows.FieldDescriptions()
	fds = fds[:len(fds)-len(printed)]
	var unknown []int // columns of types pgx does not know, named below
	for _, fd := range fds {
		typ := strconv.FormatUint(uint64(fd.DataTypeOID), 10)
		if t, ok := m.TypeForOID(fd.DataTypeOID); ok {
			typ = t.Name
		} else {
			unknown = append(unknown, len(td.cols))
		}
		cls, err := pgClass(fd.DataTypeOID)
		if err != nil {
			return nil, fmt.Errorf("column %s (%s): %w", fd.Name, typ, err)
		}
		td.cols = append(td.cols, column{name: fd.Name, typ: typ, cls: cls})
	}
	for first := true; rows.Next(); first = false {
		if first {
			for _, fd := range rows.FieldDescriptions() {
				if fd.Format != pgx.BinaryFormatCode {
					return nil, fmt.Errorf("column %s came in text format: the connection must use the extended protocol (not QueryExecModeSimpleProtocol)", fd.Name)
				}
			}
		}
		raw := rows.RawValues()
		row := make([]cval, len(fds))
		for i, fd := range fds {
			if raw[i] == nil {
				row[i] = cval{kind: td.cols[i].cls.kind(), null: true}
				continue
			}
			v, err := pgValue(m, fd.DataTypeOID, raw[i])
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", fd.Name, err)
			}
			row[i] = v
		}
		for j, i := range printedOf {
			if t := raw[len(fds)+j]; t != nil {
				row[i].out = bytes.Clone(t)
			}
		}
		td.rows = append(td.rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	// Types pgx does not know (enums, domains, …) are compared by name:
	// their oids differ between databases.
	for _, i := range unknown {
		if err := q.QueryRow(ctx, "SELECT format_type($1::oid, NULL)", fds[i].DataTypeOID).Scan(&td.cols[i].typ); err != nil {
			return nil, fmt.Errorf("column %s: type %d: %w", fds[i].Name, fds[i].DataTypeOID, err)
		}
	}
	return td, nil
}

func pgClass(oid uint32) (class, error) {
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		return clsInt, nil
	case pgtype.NumericOID:
		return clsDec, nil
	case pgtype.Float4OID:
		return clsF32, nil
	case pgtype.Float8OID:
		return clsF64, nil
	case pgtype.BoolOID:
		return clsBool, nil
	case pgtype.ByteaOID:
		return clsBytes, nil
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.NameOID:
		return clsText, nil
	case pgtype.BPCharOID:
		return clsChar, nil
	case pgtype.TimestampOID, pgtype.TimestamptzOID:
		return clsTimestamp, nil
	case pgtype.DateOID:
		return clsDate, nil
	case pgtype.TimeOID:
		return clsTimeOfDay, nil
	case pgtype.UUIDOID:
		return clsUUID, nil
	case pgtype.JSONOID, pgtype.JSONBOID:
		return clsJSON, nil
	case pgtype.BitOID, pgtype.VarbitOID:
		return clsPGBits, nil
	case pgtype.IntervalOID:
		return clsPGInterval, nil
	}
	return clsPGBinary, nil
}

func pgValue(m *pgtype.Map, oid uint32, raw []byte) (cval, error) {
	bin := int16(pgx.BinaryFormatCode)
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		var v int64
		if err := m.Scan(oid, bin, raw, &v); err != nil {
			return cval{}, err
		}
		return cval{kind: kNum, num: new(big.Rat).SetInt64(v)}, nil
	case pgtype.NumericOID:
		var n pgtype.Numeric
		if err := m.Scan(oid, bin, raw, &n); err != nil {
			return cval{}, err
		}
		switch {
		case n.NaN:
			return cval{kind: kNum, special: "NaN"}, nil
		case n.InfinityModifier == pgtype.Infinity:
			return cval{kind: kNum, special: "Infinity"}, nil
		case n.InfinityModifier == pgtype.NegativeInfinity:
			return cval{kind: kNum, special: "-Infinity"}, nil
		}
		r := new(big.Rat).SetInt(n.Int)
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(n.Exp))), nil)
		if n.Exp >= 0 {
			r.Mul(r, new(big.Rat).SetInt(p))
		} else {
			r.Quo(r, new(big.Rat).SetInt(p))
		}
		return cval{kind: kNum, num: r}, nil
	case pgtype.Float4OID:
		var f float32
		err := m.Scan(oid, bin, raw, &f)
		return cval{kind: kF32, f32: f}, err
	case pgtype.Float8OID:
		var f float64
		err := m.Scan(oid, bin, raw, &f)
		return cval{kind: kF64, f64: f}, err
	case pgtype.BoolOID:
		var b bool
		err := m.Scan(oid, bin, raw, &b)
		return cval{kind: kBool, b: b}, err
	case pgtype.ByteaOID:
		return cval{kind: kBytes, raw: bytes.Clone(raw)}, nil
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.NameOID:
		// The binary form of text is its bytes.
		return cval{kind: kText, raw: bytes.Clone(raw)}, nil
	case pgtype.BPCharOID:
		return cval{kind: kText, raw: bytes.TrimRight(bytes.Clone(raw), " ")}, nil
	case pgtype.TimestampOID:
		var ts pgtype.Timestamp
		if err := m.Scan(oid, bin, raw, &ts); err != nil {
			return cval{}, err
		}
		if s := infinity(ts.InfinityModifier); s != "" {
			return cval{kind: kTime, special: s}, nil
		}
		// timestamp without time zone: its wall clock, read as UTC (the
		// cross-engine map writes a MySQL DATETIME's wall clock to it).
		t := ts.Time
		return cval{kind: kTime, t: time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)}, nil
	case pgtype.TimestamptzOID:
		var ts pgtype.Timestamptz
		if err := m.Scan(oid, bin, raw, &ts); err != nil {
			return cval{}, err
		}
		if s := infinity(ts.InfinityModifier); s != "" {
			return cval{kind: kTime, special: s}, nil
		}
		return cval{kind: kTime, t: ts.Time.UTC()}, nil
	case pgtype.DateOID:
		var d pgtype.Date
		if err := m.Scan(oid, bin, raw, &d); err != nil {
			return cval{}, err
		}
		if s := infinity(d.InfinityModifier); s != "" {
			return cval{kind: kDate, special: s}, nil
		}
		t := d.Time
		return cval{kind: kDate, t: time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)}, nil
	case pgtype.TimeOID:
		var t pgtype.Time
		err := m.Scan(oid, bin, raw, &t)
		return cval{kind: kTOD, us: t.Microseconds}, err
	case pgtype.UUIDOID:
		var u pgtype.UUID
		err := m.Scan(oid, bin, raw, &u)
		return cval{kind: kUUID, raw: bytes.Clone(u.Bytes[:])}, err
	case pgtype.JSONOID, pgtype.JSONBOID:
		var b []byte
		if err := m.Scan(oid, bin, raw, &b); err != nil {
			return cval{}, err
		}
		js, err := decodeJSON(b)
		return cval{kind: kJSON, js: js}, err
	case pgtype.IntervalOID:
		var iv pgtype.Interval
		if err := m.Scan(oid, bin, raw, &iv); err != nil {
			return cval{}, err
		}
		return cval{kind: kPGBinary, raw: bytes.Clone(raw), us: int64(iv.Days)*86_400_000_000 + iv.Microseconds, hasTOD: iv.Months == 0}, nil
	}
	return cval{kind: kPGBinary, raw: bytes.Clone(raw)}, nil
}

func abs(x int32) int32 {
	if x < 0 {
		return -x
	}
	return x
}

func infinity(m pgtype.InfinityModifier) string {
	switch m {
	case pgtype.Infinity:
		return "infinity"
	case pgtype.NegativeInfinity:
		return "-infinity"
	}
	return ""
}

func splitMyTable(table string) (schema, name string) {
	if s, n, ok := strings.Cut(table, "."); ok {
		return s, n
	}
	return "", table
}

func readMy(ctx context.Context, db *sql.DB, table string) (_ *tableData, err error) {
	schema, name := splitMyTable(table)
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	schemaCond, args := "table_schema = DATABASE()", []any{name}
	if schema != "" {
		schemaCond, args = "table_schema = ?", []any{schema, name}
	}
	td := &tableData{}
	rows, err := conn.QueryContext(ctx, "SELECT column_name, data_type, column_type FROM information_schema.columns WHERE "+
		schemaCond+" AND table_name = ? ORDER BY ordinal_position", args...)
	if err != nil {
		return nil, fmt.Errorf("columns: %w", err)
	}
	for rows.Next() {
		var c column
		var dataType string
		if err := rows.Scan(&c.name, &dataType, &c.typ); err != nil {
			rows.Close()
			return nil, fmt.Errorf("columns: %w", err)
		}
		if c.cls, err = myClass(dataType, c.typ); err != nil {
			rows.Close()
			return nil, fmt.Errorf("column %s (%s): %w", c.name, c.typ, err)
		}
		td.cols = append(td.cols, c)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("columns: %w", err)
	}
	if len(td.cols) == 0 {
		return nil, errors.New("no such table")
	}
	// MariaDB's JSON is a longtext with a json_valid check: compare such
	// columns as documents, like MySQL's own JSON type.
	rows, err = conn.QueryContext(ctx, "SELECT check_clause FROM information_schema.check_constraints WHERE "+
		strings.ReplaceAll(schemaCond, "table_schema", "constraint_schema")+" AND table_name = ?", args...)
	if err != nil {
		return nil, fmt.Errorf("check constraints: %w", err)
	}
	checks := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return nil, fmt.Errorf("check constraints: %w", err)
		}
		checks[c] = true
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("check constraints: %w", err)
	}
	for i, c := range td.cols {
		if c.cls == clsText && checks["json_valid("+quoteMySQLIdent(c.name)+")"] {
			td.cols[i].cls = clsJSON
		}
	}
	rows, err = conn.QueryContext(ctx, "SELECT column_name FROM information_schema.statistics WHERE "+
		schemaCond+" AND table_name = ? AND index_name = 'PRIMARY' ORDER BY seq_in_index", args...)
	if err != nil {
		return nil, fmt.Errorf("primary key: %w", err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, fmt.Errorf("primary key: %w", err)
		}
		td.key = append(td.key, k)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("primary key: %w", err)
	}
	if len(td.key) == 0 {
		return nil, errors.New("table has no primary key")
	}

	// TIMESTAMP values travel in the session's time zone: read them in
	// UTC, and give the pooled connection its setting back afterwards.
	var tz string
	if err := conn.QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&tz); err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "SET time_zone = '+00:00'"); err != nil {
		return nil, err
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SET time_zone = '"+strings.ReplaceAll(tz, "'", "''")+"'"); rerr != nil && err == nil {
			err = rerr
		}
	}()

	names := make([]string, len(td.cols))
	for i, c := range td.cols {
		names[i] = quoteMySQLIdent(c.name)
	}
	from := quoteMySQLIdent(name)
	if schema != "" {
		from = quoteMySQLIdent(schema) + "." + from
	}
	// An explicitly prepared statement is a server-side one whatever the
	// DSN says (interpolateParams only affects unprepared queries), and
	// its rows come in the binary protocol. The argument makes it a query
	// with a parameter as well.
	stmt, err := conn.PrepareContext(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE ? = 1", strings.Join(names, ", "), from))
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	rows, err = stmt.QueryContext(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vals := make([]any, len(td.cols))
	ptrs := make([]any, len(td.cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := make([]cval, len(td.cols))
		for i, c := range td.cols {
			v, err := myValue(c.cls, vals[i])
			if err != nil {
				return nil, fmt.Errorf("column %s (%s): %w", c.name, c.typ, err)
			}
			row[i] = v
		}
		td.rows = append(td.rows, row)
	}
	return td, rows.Err()
}

func myClass(dataType, columnType string) (class, error) {
	switch strings.ToLower(dataType) {
	case "tinyint":
		ct := strings.ToLower(columnType)
		if strings.HasPrefix(ct, "tinyint(1)") && !strings.Contains(ct, "unsigned") {
			return clsTinyint1, nil
		}
		return clsInt, nil
	case "smallint", "mediumint", "int", "integer", "bigint", "year":
		return clsInt, nil
	case "decimal", "numeric":
		return clsDec, nil
	case "float":
		return clsF32, nil
	case "double", "real":
		return clsF64, nil
	case "char":
		return clsChar, nil
	case "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "uuid":
		return clsText, nil // MariaDB's UUID reads as its text
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit":
		return clsBytes, nil
	case "datetime", "timestamp":
		return clsTimestamp, nil
	case "date":
		return clsDate, nil
	case "time":
		return clsTimeOfDay, nil
	case "json":
		return clsJSON, nil
	}
	return 0, errors.New("type not supported by the comparison")
}

// myValue canonicalises one value as go-sql-driver's binary protocol
// returns it: integers as int64 (uint64, or digits, past MaxInt64 when
// unsigned), FLOAT as float32, DOUBLE as float64, DECIMAL as its digits
// (the protocol's own encoding of it), temporal types as time.Time
// (parseTime) or the driver's rendering of their binary fields, and the
// rest as bytes.
func myValue(cls class, v any) (cval, error) {
	k := cls.kind()
	if v == nil {
		return cval{kind: k, null: true}, nil
	}
	switch cls {
	case clsInt, clsTinyint1, clsDec:
		switch x := v.(type) {
		case int64:
			return cval{kind: kNum, num: new(big.Rat).SetInt64(x)}, nil
		case uint64:
			return cval{kind: kNum, num: new(big.Rat).SetInt(new(big.Int).SetUint64(x))}, nil
		case []byte:
			r, ok := new(big.Rat).SetString(string(x))
			if !ok {
				return cval{}, fmt.Errorf("number %q", x)
			}
			return cval{kind: kNum, num: r}, nil
		}
	case clsF32:
		if f, ok := v.(float32); ok {
			return cval{kind: kF32, f32: f}, nil
		}
	case clsF64:
		if f, ok := v.(float64); ok {
			return cval{kind: kF64, f64: f}, nil
		}
	case clsTimestamp, clsDate:
		var t time.Time
		switch x := v.(type) {
		case time.Time:
			t = x
		case []byte:
			layout := "2006-01-02 15:04:05.999999"
			if cls == clsDate {
				layout = "2006-01-02"
			}
			var err error
			if t, err = time.Parse(layout, string(x)); err != nil {
				return cval{}, err
			}
		default:
			return cval{}, fmt.Errorf("unexpected %T", v)
		}
		// The wall clock the server sent (in UTC: readMy's session), whatever
		// location the driver put it in.
		t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
		return cval{kind: k, t: t}, nil
	case clsTimeOfDay:
		if b, ok := v.([]byte); ok {
			us, err := parseTimeOfDay(string(b))
			return cval{kind: kTOD, us: us}, err
		}
	case clsBytes, clsText, clsChar, clsJSON:
		var b []byte
		switch x := v.(type) {
		case []byte:
			b = bytes.Clone(x)
		case string:
			b = []byte(x)
		default:
			return cval{}, fmt.Errorf("unexpected %T", v)
		}
		switch cls {
		case clsChar:
			b = bytes.TrimRight(b, " ")
		case clsJSON:
			js, err := decodeJSON(b)
			return cval{kind: kJSON, js: js}, err
		}
		return cval{kind: k, raw: b}, nil
	}
	return cval{}, fmt.Errorf("unexpected %T from the driver (a text-protocol value?)", v)
}

// parseTimeOfDay reads "[-]HHH:MM:SS[.ffffff]" into microseconds.
func parseTimeOfDay(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var h, m int64
	var sec string
	if _, err := fmt.Sscanf(s, "%d:%d:%s", &h, &m, &sec); err != nil {
		return 0, fmt.Errorf("time %q: %w", s, err)
	}
	whole, frac, _ := strings.Cut(sec, ".")
	sv, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("time %q: %w", s, err)
	}
	frac = (frac + "000000")[:6]
	fv, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("time %q: %w", s, err)
	}
	us := ((h*60+m)*60+sv)*1e6 + fv
	if neg {
		us = -us
	}
	return us, nil
}

// decodeJSON decodes a document keeping numbers exact.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("json: trailing data after the document")
	}
	return v, nil
}

// jsonEqual compares documents by value: objects as sets of members,
// arrays in order, numbers exactly (jsonb keeps 1.50 as 1.50 and 1e2 as
// 100; by value both are what they were).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		p, ok1 := new(big.Rat).SetString(string(x))
		q, ok2 := new(big.Rat).SetString(string(y))
		if !ok1 || !ok2 {
			return x == y
		}
		return p.Cmp(q) == 0
	default: // string, bool, nil
		return a == b
	}
}

// diffTables matches rows by primary key and compares them column by
// column.
func diffTables(table string, w, g *tableData, signedZero bool) (*TableDiff, error) {
	if strings.Join(w.key, ",") != strings.Join(g.key, ",") {
		return nil, fmt.Errorf("compare %s: primary keys differ: want (%s), got (%s)", table, strings.Join(w.key, ", "), strings.Join(g.key, ", "))
	}
	gIndex := map[string]int{}
	for i, c := range g.cols {
		gIndex[c.name] = i
	}
	if len(w.cols) != len(g.cols) {
		return nil, fmt.Errorf("compare %s: want has %d columns, got %d", table, len(w.cols), len(g.cols))
	}
	type pairing struct {
		name   string
		wi, gi int
		kind   kind
	}
	pairs := make([]pairing, len(w.cols))
	for i, c := range w.cols {
		j, ok := gIndex[c.name]
		if !ok {
			return nil, fmt.Errorf("compare %s: column %s is missing on got", table, c.name)
		}
		k, err := resolveKind(c.cls, g.cols[j].cls)
		if err == nil && k == kPGBinary && c.typ != g.cols[j].typ {
			err = fmt.Errorf("binary forms of different types")
		}
		if err != nil {
			return nil, fmt.Errorf("compare %s: column %s (%s against %s): %w", table, c.name, c.typ, g.cols[j].typ, err)
		}
		pairs[i] = pairing{c.name, i, j, k}
	}
	keyPos := func(cols []column, names []string) []int {
		pos := make([]int, len(names))
		for i, n := range names {
			for j, c := range cols {
				if c.name == n {
					pos[i] = j
				}
			}
		}
		return pos
	}
	wKey, gKey := keyPos(w.cols, w.key), keyPos(g.cols, g.key)
	kindOf := func(col int, cols []column) kind {
		for _, p := range pairs {
			if cols[col].name == p.name {
				return p.kind
			}
		}
		return 0
	}
	keyVals := func(row []cval, pos []int, cols []column) []cval {
		out := make([]cval, len(pos))
		for i, p := range pos {
			out[i] = row[p].coerce(kindOf(p, cols))
		}
		return out
	}
	enc := func(k []cval) string {
		parts := make([]string, len(k))
		for i, v := range k {
			parts[i] = v.keyString()
		}
		return strings.Join(parts, "\x00")
	}
	show := func(k []cval) string {
		parts := make([]string, len(k))
		for i, v := range k {
			parts[i] = w.key[i] + "=" + v.String()
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}

	type keyed struct {
		key []cval
		row []cval
	}
	gRows := map[string]keyed{}
	for _, r := range g.rows {
		k := keyVals(r, gKey, g.cols)
		gRows[enc(k)] = keyed{k, r}
	}
	type found struct {
		key []cval
		d   RowDiff
	}
	var diffs []found
	seen := map[string]bool{}
	for _, r := range w.rows {
		k := keyVals(r, wKey, w.cols)
		e := enc(k)
		seen[e] = true
		gr, ok := gRows[e]
		if !ok {
			diffs = append(diffs, found{k, RowDiff{Key: show(k), Kind: Missing}})
			continue
		}
		var cols []ColumnDiff
		for _, p := range pairs {
			a, b := r[p.wi].coerce(p.kind), gr.row[p.gi].coerce(p.kind)
			if !a.equal(b, signedZero) {
				cols = append(cols, ColumnDiff{Column: p.name, Want: a.String(), Got: b.String() + firstDifference(a, b)})
			}
		}
		if cols != nil {
			diffs = append(diffs, found{k, RowDiff{Key: show(k), Kind: Different, Columns: cols}})
		}
	}
	for e, gr := range gRows {
		if !seen[e] {
			diffs = append(diffs, found{gr.key, RowDiff{Key: show(gr.key), Kind: Extra}})
		}
	}
	sort.Slice(diffs, func(i, j int) bool {
		a, b := diffs[i].key, diffs[j].key
		for x := range a {
			if a[x].less(b[x]) {
				return true
			}
			if b[x].less(a[x]) {
				return false
			}
		}
		return false
	})
	td := &TableDiff{Table: table, WantRows: len(w.rows), GotRows: len(g.rows)}
	for _, d := range diffs {
		td.Rows = append(td.Rows, d.d)
	}
	return td, nil
}

// firstDifference points at the first differing byte of two long byte or
// text values, which their short forms may not show.
func firstDifference(a, b cval) string {
	if a.null || b.null || a.kind != b.kind || (a.kind != kBytes && a.kind != kText) {
		return ""
	}
	if len(a.raw) <= 32 && len(b.raw) <= 32 {
		return ""
	}
	n := min(len(a.raw), len(b.raw))
	for i := 0; i < n; i++ {
		if a.raw[i] != b.raw[i] {
			return fmt.Sprintf(" (first difference at byte %d: want %#02x, got %#02x)", i, a.raw[i], b.raw[i])
		}
	}
	return fmt.Sprintf(" (equal for %d bytes, then one is longer)", n)
}

// JSONEqual reports whether two JSON documents are equal by value, as
// CompareTable compares JSON columns.
func JSONEqual(a, b []byte) (bool, error) {
	x, err := decodeJSON(a)
	if err != nil {
		return false, err
	}
	y, err := decodeJSON(b)
	if err != nil {
		return false, err
	}
	return jsonEqual(x, y), nil
}
