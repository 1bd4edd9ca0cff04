package mytrigger

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice"
)

// capture says how a trigger records a column's value in the JSON row image
// so that the reader can give back exactly the text the server's text
// protocol sends for it (what `SELECT col` returns).
type capture uint8

const (
	// capText: CAST(col AS CHAR), a JSON string. The cast uses the same
	// conversion as the text protocol (the field's val_str) for integers
	// (with ZEROFILL padding), DECIMAL (scale kept), DATE, DATETIME(n),
	// TIME(n), character types (converted to utf8mb4 like a utf8mb4
	// session's results), ENUM, SET and JSON (text kept verbatim; without
	// the cast JSON_OBJECT would embed a JSON column as JSON, and write
	// SQL NULL and the JSON value null alike: as a string, the JSON null
	// is "null" and SQL NULL the image's null).
	capText capture = iota
	// capBase64: TO_BASE64(col), decoded by the reader: raw bytes for the
	// binary string types, BIT(n) and the spatial types, which JSON cannot
	// carry.
	capBase64
	// capDouble: the DOUBLE itself, which JSON_OBJECT writes as a JSON
	// number with the shortest digits that read back as the same double;
	// the reader formats it the way the text protocol does (%g style with
	// shortest digits, e.g. 1.234567e+06). CAST AS CHAR spells exponents
	// differently (1e15 vs 1e+15), hence not capText.
	capDouble
	// capFloat: CAST(col AS DOUBLE), the FLOAT's exact value (JSON_OBJECT
	// and CAST AS CHAR round it to 6 digits in a different layout); the
	// reader writes the shortest text that reads back as the same float32.
	// Not the text protocol's 6 significant digits: that is a display
	// rounding (1234567 shows as 1.23457e+06), and a target that stores
	// the displayed text holds another number.
	capFloat
	// capTimestamp: UNIX_TIMESTAMP(col), the stored instant with the
	// column's fractional digits, independent of the writer's time_zone;
	// the reader renders it in UTC (the text form under time_zone
	// '+00:00'). 0 is the zero timestamp.
	capTimestamp
	// capYear: CAST AS CHAR gives "0000" for the year 0, the text protocol
	// "0": the reader prints the number.
	capYear
	// capZerofill: integers with ZEROFILL, which CAST pads and the text
	// protocol does not (the client is expected to pad): the reader prints
	// the number.
	capZerofill
)

// captureFor decides the capture of a column from information_schema's
// DATA_TYPE and COLUMN_TYPE.
func captureFor(dataType, columnType string) capture {
	switch strings.ToLower(dataType) {
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit",
		"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
		"multipolygon", "geometrycollection", "geomcollection":
		return capBase64
	case "double", "real", "double precision":
		if strings.Contains(columnType, ",") { // DOUBLE(M,D): fixed decimals, val_str is exact
			return capText
		}
		return capDouble
	case "float":
		if strings.Contains(columnType, ",") {
			return capText
		}
		return capFloat
	case "timestamp":
		return capTimestamp
	case "year":
		return capYear
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		if strings.Contains(strings.ToLower(columnType), "zerofill") {
			return capZerofill
		}
	}
	return capText
}

// expr is the SQL expression a trigger uses to capture column c of the row
// alias (NEW or OLD).
func (c capture) expr(alias, col string) string {
	ref := alias + "." + quoteIdent(col)
	switch c {
	case capBase64:
		return "TO_BASE64(" + ref + ")"
	case capDouble:
		return ref
	case capFloat:
		return "CAST(" + ref + " AS DOUBLE)"
	case capTimestamp:
		// UNIX_TIMESTAMP gives NULL for the zero timestamp.
		return "COALESCE(CAST(UNIX_TIMESTAMP(" + ref + ") AS CHAR), IF(CAST(" + ref + " AS CHAR) LIKE '0000-00-00%', '0', NULL))"
	}
	return "CAST(" + ref + " AS CHAR)"
}

// decode turns a captured JSON value back into the column's text.
func (c capture) decode(v any, scale int) (sluice.Value, error) {
	if v == nil {
		return sluice.Null, nil
	}
	switch c {
	case capDouble, capFloat:
		n, ok := v.(json.Number)
		if !ok {
			return sluice.Value{}, fmt.Errorf("want a JSON number, got %T", v)
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return sluice.Value{}, err
		}
		return sluice.Text(formatFloat(f, c == capFloat)), nil
	}
	s, ok := v.(string)
	if !ok {
		return sluice.Value{}, fmt.Errorf("want a JSON string, got %T", v)
	}
	switch c {
	case capBase64:
		b, err := base64.StdEncoding.DecodeString(s) // skips TO_BASE64's line breaks
		if err != nil {
			return sluice.Value{}, fmt.Errorf("base64: %w", err)
		}
		return sluice.Text(string(b)), nil
	case capTimestamp:
		t, err := formatTimestamp(s, scale)
		if err != nil {
			return sluice.Value{}, err
		}
		return sluice.Text(t), nil
	case capZerofill:
		t := strings.TrimLeft(s, "0")
		if t == "" {
			t = "0"
		}
		return sluice.Text(t), nil
	case capYear:
		n, err := strconv.Atoi(s)
		if err != nil {
			return sluice.Value{}, fmt.Errorf("year %q: %w", s, err)
		}
		return sluice.Text(strconv.Itoa(n)), nil
	}
	return sluice.Text(s), nil
}

// formatFloat writes a DOUBLE, or a FLOAT (float32Col, f being its exact
// value widened to a double), as the shortest text that reads back as the
// identical double or float32, in the text protocol's %g layout (exponent
// with a sign and at least two digits). Zero has no sign: the server
// stores -0 as 0.
func formatFloat(f float64, float32Col bool) string {
	if f == 0 {
		return "0"
	}
	if float32Col {
		return strconv.FormatFloat(float64(float32(f)), 'g', -1, 32)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// formatTimestamp renders UNIX_TIMESTAMP's "seconds[.fraction]" in UTC with
// scale fractional digits, the TIMESTAMP(scale) text under time_zone
// '+00:00'. Zero seconds is the zero timestamp (the smallest real one is
// 1970-01-01 00:00:01 UTC).
func formatTimestamp(s string, scale int) (string, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n < 0 || len(frac) > 6 {
		return "", fmt.Errorf("timestamp %q: want seconds since the epoch", s)
	}
	for len(frac) < scale {
		frac += "0"
	}
	frac = frac[:scale]
	var out string
	if n == 0 && strings.Trim(frac, "0") == "" {
		out = "0000-00-00 00:00:00"
	} else {
		out = time.Unix(n, 0).UTC().Format(time.DateTime)
	}
	if scale > 0 {
		out += "." + frac
	}
	return out, nil
}

// columnCollation is what a column's COLLATION_NAME means for
// sluice.Column.Collation: empty for non-string columns (no collation) and
// the binary character set, whose values are equal only when their bytes
// are; otherwise the collation, even a _bin one, which pads with spaces
// ('a' = 'a ' under utf8mb4_bin). The binlog reader says the same.
func columnCollation(name string) string {
	if name == "binary" {
		return ""
	}
	return name
}

// tableInfo is a source table as information_schema describes it.
type tableInfo struct {
	table *sluice.Table
	// captures and scales are aligned with table.Columns.
	captures []capture
	scales   []int
}

func (t *tableInfo) keyNames() []string { return t.table.KeyNames() }

// queryer is what a *sql.DB, *sql.Conn and *sql.Tx share.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lookupTable describes a source table: its columns in ordinal order, with
// COLUMN_TYPE as the type, and its primary key in key order. It fails with
// a message naming the table and the fix when the table is missing or has
// no primary key.
func lookupTable(ctx context.Context, q queryer, name sluice.TableName) (*tableInfo, error) {
	var typ string
	var engine sql.NullString
	err := q.QueryRowContext(ctx, `SELECT TABLE_TYPE, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
		name.Schema, name.Name).Scan(&typ, &engine)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("source table %s does not exist in database %s: create it or fix the table list", name, name.Schema)
	}
	if err != nil {
		return nil, fmt.Errorf("look up source table %s: %w", name, err)
	}
	if typ != "BASE TABLE" {
		return nil, fmt.Errorf("source %s is a %s, not a table: triggers can only capture base tables", name, strings.ToLower(typ))
	}
	// A TRUNCATE fires no trigger; the reader notices one by the InnoDB
	// table id changing (see identities), which other engines do not have.
	if !strings.EqualFold(engine.String, "InnoDB") {
		return nil, fmt.Errorf("source table %s uses the %s engine: the trigger reader needs InnoDB tables, whose table id tells it when a TRUNCATE "+
			"(which fires no trigger) removed rows: ALTER TABLE %s ENGINE=InnoDB", name, engine.String, ident(name.Schema, name.Name))
	}
	// A generated column is captured like any other: an AFTER trigger
	// sees its computed value in NEW and OLD.
	rows, err := q.QueryContext(ctx, `SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, IS_NULLABLE = 'YES', COALESCE(DATETIME_PRECISION, 0),
			COALESCE(COLLATION_NAME, ''), COALESCE(GENERATION_EXPRESSION, '')
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, name.Schema, name.Name)
	if err != nil {
		return nil, fmt.Errorf("describe source table %s: %w", name, err)
	}
	info := &tableInfo{table: &sluice.Table{Name: name}}
	for rows.Next() {
		var c sluice.Column
		var dataType string
		var scale int
		var coll string
		if err := rows.Scan(&c.Name, &c.Type, &dataType, &c.Nullable, &scale, &coll, &c.Generated); err != nil {
			rows.Close()
			return nil, fmt.Errorf("describe source table %s: %w", name, err)
		}
		c.Collation = columnCollation(coll)
		info.table.Columns = append(info.table.Columns, c)
		info.captures = append(info.captures, captureFor(dataType, c.Type))
		info.scales = append(info.scales, scale)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe source table %s: %w", name, err)
	}
	rows, err = q.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX`, name.Schema, name.Name)
	if err != nil {
		return nil, fmt.Errorf("read primary key of source table %s: %w", name, err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read primary key of source table %s: %w", name, err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read primary key of source table %s: %w", name, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("table %s has no primary key; sluice needs one to apply changes idempotently: add one", name)
	}
	for _, k := range keys {
		i := info.table.ColumnIndex(k)
		if i < 0 {
			return nil, fmt.Errorf("source table %s: primary key column %s not among its columns", name, k)
		}
		info.table.Key = append(info.table.Key, i)
	}
	return info, nil
}
