// Package verify owns `sluice verify`: proving that a target holds exactly
// the source's rows, while a stream runs, with only hashes crossing the
// link. Each table is split into primary-key ranges; each range is hashed
// inside both databases (a count and an order-independent sum of per-row
// hashes of a canonical form of each row); a range that differs is split
// again down to a few keys, whose rows are then compared key by key.
package verify

import (
	"fmt"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/coltype"
)

// Dialect is the SQL dialect of one side of a comparison.
type Dialect int

const (
	PostgreSQL Dialect = iota + 1
	MySQL              // MySQL and MariaDB
)

func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("dialect(%d)", int(d))
}

// CanonColumn is what CanonExpr needs to know of one column on one side.
type CanonColumn struct {
	// Dialect is this side's.
	Dialect Dialect
	// Ident is the column's quoted name in Dialect.
	Ident string
	// Type is this side's column type as its catalog spells it
	// (PostgreSQL's format_type, MySQL's information_schema COLUMN_TYPE).
	Type string
	// Source is the source's column (Type in SourceDialect's spelling). On
	// the source side it is the column itself.
	Source        sluice.Column
	SourceDialect Dialect
	// TargetType is the target's column type in TargetDialect's spelling;
	// on the target side, Type and Dialect. Both sides need it: the
	// canonical form is chosen per pair of types (a MariaDB JSON column is
	// a longtext that only the target's jsonb tells apart from text, a
	// char(36) compares case-blind only against a uuid, any PostgreSQL type
	// kept in a longtext compares as its text form, and a float's zero
	// keeps its sign only between PostgreSQL databases). Unset
	// (TargetDialect zero): the target is taken to be this column itself,
	// which is right on the target side and for a same-engine pair of
	// equal types.
	TargetType    string
	TargetDialect Dialect
}

// CanonExpr returns an SQL expression in c.Dialect whose value is the
// column's canonical text: NULL for NULL, otherwise a text that is equal on
// both sides exactly when sluice, writing the source's value to the target,
// would have written it faithfully. Values are compared at the precision
// the source stores (a FLOAT at float32, a timestamp to the microsecond,
// in UTC), JSON by value and bytes exactly. MySQL expressions yield utf8mb4
// strings.
//
// PostgreSQL expressions assume the session settings of
// keyrange.PGSettings, and jit = off: the planner prices a JSON column's
// nested set-returning functions so high that JIT compiles the query for
// seconds. MySQL expressions assume keyrange.MySession, and MariaDB 10.7
// or later (JSON_NORMALIZE) for a JSON column kept in PostgreSQL.
func CanonExpr(c CanonColumn) (string, error) {
	if c.Dialect != PostgreSQL && c.Dialect != MySQL {
		return "", fmt.Errorf("column %s: no canonical form for dialect %v", c.Ident, c.Dialect)
	}
	srcDialect := c.SourceDialect
	if srcDialect == 0 {
		srcDialect = c.Dialect
	}
	srcType := c.Source.Type
	if srcType == "" {
		srcType = c.Type
	}
	dstDialect, dstType := c.TargetDialect, c.TargetType
	if dstDialect == 0 {
		dstDialect, dstType = c.Dialect, c.Type
	}
	for _, d := range []Dialect{srcDialect, dstDialect} {
		if d != PostgreSQL && d != MySQL {
			return "", fmt.Errorf("column %s (%s, %s on the source, %s on the target): no canonical form for dialect %v", c.Ident, c.Type, c.Source.Type, c.TargetType, d)
		}
	}
	p := pair{
		src: parseType(srcDialect, srcType), srcDialect: srcDialect,
		dst: parseType(dstDialect, dstType), dstDialect: dstDialect,
		srcEnum: srcDialect == PostgreSQL && c.Source.Enum != "",
	}
	f, err := p.form()
	if err != nil {
		return "", fmt.Errorf("column %s (%s on the %s source, %s on the %s target): no canonical form: %w; leave the column out of the verification",
			c.Ident, srcType, srcDialect, dstType, dstDialect, err)
	}
	self := parseType(c.Dialect, c.Type)
	var e string
	if c.Dialect == PostgreSQL {
		e, err = f.pg(c.Ident, self)
	} else {
		e, err = f.my(c.Ident, self)
	}
	if err != nil {
		return "", fmt.Errorf("column %s (%s on the %s side, %s on the %s source): no canonical form: %w",
			c.Ident, c.Type, c.Dialect, srcType, srcDialect, err)
	}
	return e, nil
}

// colType is a column type reduced to what the choice of form needs.
type colType struct {
	base     string // canonical lower-case name
	mods     []int
	unsigned bool
	array    bool
	spelled  string
}

func (t colType) mod(i, def int) int {
	if i < len(t.mods) {
		return t.mods[i]
	}
	return def
}

// parseType reads a type as the catalog spells it, with coltype's parser
// of the dialect: PostgreSQL's format_type ("timestamp(3) with time zone",
// "integer[]"), MySQL's COLUMN_TYPE ("int(10) unsigned", "enum('a')", a
// MariaDB TIMESTAMP with its NULL/DEFAULT clauses). An interval with a
// field restriction keeps it in its base name, as apply/typemap's does.
func parseType(d Dialect, s string) colType {
	parse := coltype.ParseMySQL
	if d == PostgreSQL {
		parse = coltype.ParsePostgres
	}
	c := parse(s)
	return colType{base: c.Name(), mods: c.Mods, unsigned: c.Unsigned, array: c.Array, spelled: c.Spelled}
}

// A pair is the two columns a canonical form is chosen for.
type pair struct {
	src, dst               colType
	srcDialect, dstDialect Dialect
	// srcEnum: the source is a PostgreSQL enum (sluice.Column.Enum).
	srcEnum bool
}

// A form is one canonical text and how each engine computes it from a
// column of a given type.
type form struct {
	name string
	pg   func(x string, t colType) (string, error)
	my   func(x string, t colType) (string, error)
}

func (p pair) form() (form, error) {
	if p.src.array || p.dst.array {
		if p.srcDialect == PostgreSQL && (p.dstDialect == PostgreSQL || isMyText(p.dst.base)) {
			return pgTextForm, nil
		}
		return form{}, fmt.Errorf("arrays compare only as their PostgreSQL text form")
	}
	switch {
	case p.srcDialect == PostgreSQL && p.dstDialect == PostgreSQL:
		return p.pgPG()
	case p.srcDialect == MySQL && p.dstDialect == MySQL:
		return p.myMy()
	case p.srcDialect == PostgreSQL:
		return p.pgMy()
	}
	return p.myPG()
}

// pgPG: under keyrange.PGSettings a value's text is exact (floats print
// their shortest round-trip digits, bytea in hex, timestamptz in UTC), but
// for the forms that compare by value.
func (p pair) pgPG() (form, error) {
	switch {
	case p.src.base == "numeric" && p.dst.base == "numeric":
		return decimalForm, nil
	case isPGJSON(p.src.base) && isPGJSON(p.dst.base):
		return jsonbForm, nil
	case p.src.base == p.dst.base:
		return pgTextForm, nil
	}
	// Differing types: the one-side forms where both have one.
	return p.crossLike()
}

// myMy: the text the server prints is exact for every type but FLOAT,
// printed with 6 significant digits: it is widened to DOUBLE first, which
// is exact, and a DOUBLE prints its shortest round-trip digits.
func (p pair) myMy() (form, error) {
	s, d := p.src.base, p.dst.base
	switch {
	case isMyFloat(s) && isMyFloat(d):
		if s == "float" {
			return floatForm(32, false), nil
		}
		return floatForm(64, false), nil
	case s == "decimal" && d == "decimal":
		return decimalForm, nil
	case isMyBinary(s) && isMyBinary(d):
		return hexForm, nil
	case s == "bit" && d == "bit":
		return bitsForm(p.src.mod(0, 1)), nil
	case s == "json" && d == "json":
		return myTextForm, nil // MySQL's JSON prints its normal form
	case s == "year" && d == "year", coltype.MySQLIntBits(s) > 0 && coltype.MySQLIntBits(d) > 0:
		return intForm, nil
	}
	if s == d || isMyText(s) && isMyText(d) {
		return myTextForm, nil
	}
	return p.crossLike()
}

// crossLike picks the form of a same-engine pair of different types from
// the cross-engine forms of their classes.
func (p pair) crossLike() (form, error) {
	s, d := p.src, p.dst
	cls := func(t colType, dia Dialect) string {
		b := t.base
		switch {
		case dia == MySQL && coltype.MySQLIntBits(b) > 0, b == "smallint", b == "integer", b == "bigint", b == "year":
			return "int"
		case b == "numeric", b == "decimal":
			return "dec"
		case dia == PostgreSQL && (b == "text" || b == "varchar"), dia == MySQL && isMyText(b):
			return "text"
		}
		return b
	}
	cs, cd := cls(s, p.srcDialect), cls(d, p.dstDialect)
	switch {
	case cs == "int" && cd == "int":
		return intForm, nil
	case (cs == "int" || cs == "dec") && (cd == "int" || cd == "dec"):
		return decimalForm, nil
	case cs == "text" && cd == "text":
		if p.srcDialect == PostgreSQL {
			return pgTextForm, nil
		}
		return myTextForm, nil
	case (s.base == "real" || s.base == "float") && isFloat(d.base):
		return floatForm(32, p.srcDialect == PostgreSQL && p.dstDialect == PostgreSQL), nil
	case (s.base == "double precision" || s.base == "double") && isFloat(d.base):
		return floatForm(64, p.srcDialect == PostgreSQL && p.dstDialect == PostgreSQL), nil
	case isTimestamp(s.base) && isTimestamp(d.base):
		return timestampForm, nil
	}
	return form{}, fmt.Errorf("no canonical form between %s and %s", s.spelled, d.spelled)
}

// pgMy follows apply/typemap's PostgreSQL-to-MySQL map. Where the target
// keeps the source's text, the PostgreSQL side computes that text itself,
// from the value, as PostgreSQL prints it (pgOutputForm): a conversion of
// the text on the way (inet's netmask) that went wrong shows.
func (p pair) pgMy() (form, error) {
	s, d := p.src.base, p.dst.base
	if d == "mediumtext" || d == "longtext" {
		// The target keeps the source's text form (a boolean as 1 or 0,
		// a char(n) without its padding).
		switch s {
		case "bytea":
			return form{}, fmt.Errorf("bytea is not kept in a text column")
		case "boolean":
			return boolForm, nil
		case "char":
			return pgTextForm, nil // char(n)::text drops the padding
		}
		return pgOutputForm, nil
	}
	if p.srcEnum {
		if d == "enum" || d == "varchar" {
			return pgOutputForm, nil
		}
		return form{}, fmt.Errorf("sluice maps a PostgreSQL enum to a MySQL enum, varchar or text, not %s", p.dst.spelled)
	}
	switch s {
	case "smallint", "integer", "bigint":
		if d == "decimal" {
			return decimalForm, nil
		}
		return intForm, nil
	case "numeric":
		return decimalForm, nil
	case "real":
		return floatForm(32, false), nil
	case "double precision":
		return floatForm(64, false), nil
	case "boolean":
		return boolForm, nil
	case "varchar", "text":
		return pgTextForm, nil
	case "char":
		return charForm, nil
	case "bytea":
		return hexForm, nil
	case "uuid":
		if d == "binary" {
			return uuidBytesForm, nil
		}
		return uuidForm, nil
	case "date":
		if d == "date" {
			return dateForm, nil
		}
		return timestampForm, nil
	case "timestamp", "timestamptz":
		return timestampForm, nil
	case "time":
		return timeForm, nil
	case "json", "jsonb":
		// sluice writes jsonb's text, PostgreSQL's normal form of the
		// document, and the target keeps it as it is.
		return pgTextForm, nil
	}
	return form{}, fmt.Errorf("sluice maps no PostgreSQL %s to MySQL %s", p.src.spelled, p.dst.spelled)
}

// myPG follows apply/typemap's MySQL-to-PostgreSQL map.
func (p pair) myPG() (form, error) {
	s, d := p.src.base, p.dst.base
	if d == "text" {
		// The target keeps the source's text, which only strings and
		// integers print alike on both engines.
		switch {
		case coltype.MySQLIntBits(s) > 0:
			return intForm, nil
		case isMyText(s) || s == "enum" || s == "set":
			return myTextForm, nil
		}
		return form{}, fmt.Errorf("MySQL %s kept in a PostgreSQL text column has no form both engines print", p.src.spelled)
	}
	switch {
	case s == "tinyint" && p.src.mod(0, 0) == 1 && !p.src.unsigned && d == "boolean":
		return boolForm, nil
	case coltype.MySQLIntBits(s) > 0 || s == "year":
		if d == "numeric" {
			return decimalForm, nil
		}
		return intForm, nil
	}
	switch s {
	case "decimal":
		return decimalForm, nil
	case "float":
		return floatForm(32, false), nil
	case "double":
		return floatForm(64, false), nil
	case "char", "varchar":
		if d == "uuid" {
			return uuidForm, nil
		}
		if s == "char" {
			return charForm, nil
		}
		return myTextForm, nil
	case "tinytext", "text", "mediumtext", "longtext":
		if d == "jsonb" {
			// MariaDB's JSON is a longtext; jsonb holds its value.
			return myJSONNormForm, nil
		}
		return myTextForm, nil // a json column keeps the text as it is
	case "json":
		return myJSONNormForm, nil
	case "enum", "set":
		return myTextForm, nil
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		return hexForm, nil
	case "bit":
		if d == "bytea" {
			return bitBytesForm(p.src.mod(0, 1)), nil
		}
		return bitsForm(p.src.mod(0, 1)), nil
	case "date":
		return dateForm, nil
	case "datetime", "timestamp":
		return timestampForm, nil
	case "time":
		return timeForm, nil
	}
	return form{}, fmt.Errorf("sluice maps no MySQL %s to PostgreSQL %s", p.src.spelled, p.dst.spelled)
}

func isMyText(b string) bool {
	return coltype.IsMySQLText(b) || b == "char" || b == "varchar"
}

func isMyBinary(b string) bool {
	return coltype.IsMySQLBlob(b) || b == "binary" || b == "varbinary"
}

func isMyFloat(b string) bool { return b == "float" || b == "double" }

func isFloat(b string) bool {
	return b == "float" || b == "double" || b == "real" || b == "double precision"
}

func isPGJSON(b string) bool { return b == "json" || b == "jsonb" }

func isTimestamp(b string) bool {
	return b == "timestamp" || b == "timestamptz" || b == "datetime"
}

func unsupported(t colType) error {
	return fmt.Errorf("type %s has no form here", t.spelled)
}

// myUTF8 makes a MySQL string utf8mb4, whatever the column's character
// set, so that both sides hash the same bytes.
func myUTF8(e string) string { return "CONVERT(" + e + " USING utf8mb4)" }

// The forms.

// pgTextForm: PostgreSQL's text form of the value, as sluice's PostgreSQL
// readers print it; a MySQL side holds it as text.
var pgTextForm = form{
	name: "pg-text",
	pg:   func(x string, _ colType) (string, error) { return "(" + x + ")::text", nil },
	my:   func(x string, _ colType) (string, error) { return myUTF8(x), nil },
}

// pgOutputForm: the text PostgreSQL prints for the value (its type's
// output function, which format's %s calls; value::text differs for inet,
// whose cast always shows the netmask), which a MySQL side holds as text.
var pgOutputForm = form{
	name: "pg-output",
	pg: func(x string, _ colType) (string, error) {
		return "CASE WHEN " + x + " IS NOT NULL THEN format('%s', " + x + ") END", nil // format gives '' for NULL
	},
	my: func(x string, _ colType) (string, error) { return myUTF8(x), nil },
}

// myTextForm: MySQL's text of a string, enum or set (or a number, which
// sluice writes as its text).
var myTextForm = form{
	name: "my-text",
	pg:   func(x string, _ colType) (string, error) { return "(" + x + ")::text", nil },
	my:   func(x string, _ colType) (string, error) { return myUTF8(x), nil },
}

// charForm: blank-padded text without its padding (MySQL's CHAR drops it
// on reading, PostgreSQL's char(n) on its cast to text); a varchar that
// holds a char's value holds the padding.
var charForm = form{
	name: "char",
	pg: func(x string, t colType) (string, error) {
		if t.base == "char" {
			return "(" + x + ")::text", nil
		}
		return "rtrim((" + x + ")::text, ' ')", nil
	},
	my: func(x string, _ colType) (string, error) {
		return "TRIM(TRAILING ' ' FROM " + myUTF8(x) + ")", nil
	},
}

// uuidForm: the uuid's lower-case hyphenated text; a char(36) may hold it
// in either case.
var uuidForm = form{
	name: "uuid",
	pg: func(x string, t colType) (string, error) {
		if t.base == "uuid" {
			return "(" + x + ")::text", nil
		}
		return "lower((" + x + ")::text)", nil
	},
	my: func(x string, _ colType) (string, error) { return "LOWER(" + myUTF8(x) + ")", nil },
}

// uuidBytesForm: a uuid kept in a binary(16) as its 16 bytes in network
// order (uuid_send's), in hex.
var uuidBytesForm = form{
	name: "uuid-bytes",
	pg: func(x string, t colType) (string, error) {
		if t.base != "uuid" {
			return "", unsupported(t)
		}
		return "encode(uuid_send(" + x + "), 'hex')", nil
	},
	my: hexForm.my,
}

// intForm: the integer's decimal digits (a YEAR as its number).
var intForm = form{
	name: "int",
	pg:   func(x string, _ colType) (string, error) { return "(" + x + ")::text", nil },
	my: func(x string, t colType) (string, error) {
		if t.base == "year" || t.base == "bit" {
			return myUTF8("CAST(" + x + " + 0 AS CHAR)"), nil
		}
		return myUTF8("CAST(" + x + " AS CHAR)"), nil
	},
}

// decimalForm: the decimal without trailing fraction zeros or point
// (1.50 and 1.5 are one value; scales differ between the two columns).
var decimalForm = form{
	name: "decimal",
	pg: func(x string, t colType) (string, error) {
		if t.base == "numeric" {
			return "trim_scale(" + x + ")::text", nil
		}
		return "(" + x + ")::text", nil // an integer
	},
	my: func(x string, t colType) (string, error) {
		s := myUTF8("CAST(" + x + " AS CHAR)")
		if t.base == "year" {
			s = myUTF8("CAST(" + x + " + 0 AS CHAR)")
		}
		if t.base != "decimal" {
			return s, nil
		}
		return "IF(LOCATE('.', " + s + ") > 0, TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM " + s + ")), " + s + ")", nil
	},
}

// boolForm: 1 or 0, as a tinyint(1) prints it (a tinyint(1) holding any
// other number prints it, which no boolean matches).
var boolForm = form{
	name: "bool",
	pg: func(x string, t colType) (string, error) {
		if t.base == "boolean" {
			return "CASE WHEN " + x + " THEN '1' WHEN NOT " + x + " THEN '0' END", nil
		}
		return "(" + x + ")::text", nil
	},
	my: func(x string, t colType) (string, error) {
		if t.base == "bit" {
			return myUTF8("CAST(" + x + " + 0 AS CHAR)"), nil
		}
		return myUTF8("CAST(" + x + " AS CHAR)"), nil
	},
}

// hexForm: the bytes in lower-case hex (a binary(n) with its zero
// padding, which it stores and sluice reads).
var hexForm = form{
	name: "hex",
	pg: func(x string, t colType) (string, error) {
		if t.base != "bytea" {
			return "", unsupported(t)
		}
		return "encode(" + x + ", 'hex')", nil
	},
	my: func(x string, _ colType) (string, error) { return myUTF8("LOWER(HEX(" + x + "))"), nil },
}

// bitsForm: a bit(n) as its n binary digits.
func bitsForm(n int) form {
	return form{
		name: "bits",
		pg:   func(x string, _ colType) (string, error) { return "(" + x + ")::text", nil },
		my: func(x string, _ colType) (string, error) {
			return myUTF8(fmt.Sprintf("LPAD(BIN(%s + 0), %d, '0')", x, n)), nil
		},
	}
}

// bitBytesForm: a bit(n) kept in a bytea as its bytes, in hex.
func bitBytesForm(n int) form {
	return form{
		name: "bit-bytes",
		pg:   hexForm.pg,
		my: func(x string, _ colType) (string, error) {
			return myUTF8(fmt.Sprintf("LOWER(LPAD(HEX(%s + 0), %d, '0'))", x, 2*((n+7)/8))), nil
		},
	}
}

// dateForm: YYYY-MM-DD (PostgreSQL's own text keeps BC dates and
// infinity apart from any MySQL date).
var dateForm = form{
	name: "date",
	pg:   func(x string, _ colType) (string, error) { return "(" + x + ")::text", nil },
	my: func(x string, _ colType) (string, error) {
		return myUTF8("DATE_FORMAT(" + x + ", '%Y-%m-%d')"), nil
	},
}

// timestampForm: the UTC instant (a wall clock for timestamp and
// DATETIME, which sluice carries as it is) to the microsecond, the finest
// either engine holds: values sluice writes from a column of lower
// precision have zeros past it.
var timestampForm = form{
	name: "timestamp",
	pg: func(x string, t colType) (string, error) {
		const f = "'YYYY-MM-DD HH24:MI:SS.US'"
		switch t.base {
		case "timestamptz":
			return "CASE WHEN isfinite(" + x + ") AND " + x + " >= '0001-01-01 00:00:00+00' THEN to_char(" + x + " AT TIME ZONE 'UTC', " + f + ") ELSE (" + x + ")::text END", nil
		case "timestamp":
			return "CASE WHEN isfinite(" + x + ") AND " + x + " >= '0001-01-01' THEN to_char(" + x + ", " + f + ") ELSE (" + x + ")::text END", nil
		case "date":
			return "CASE WHEN isfinite(" + x + ") AND " + x + " >= '0001-01-01' THEN to_char(" + x + ", 'YYYY-MM-DD') || ' 00:00:00.000000' ELSE (" + x + ")::text END", nil
		}
		return "", unsupported(t)
	},
	my: func(x string, _ colType) (string, error) {
		return myUTF8("DATE_FORMAT(" + x + ", '%Y-%m-%d %H:%i:%s.%f')"), nil
	},
}

// timeForm: [-]HH:MM:SS.ffffff, hours past 24 as they are (a MySQL TIME
// spans ±838 hours; sluice keeps it in a PostgreSQL interval).
var timeForm = form{
	name: "time",
	pg: func(x string, t colType) (string, error) {
		if t.base != "time" && t.base != "interval" {
			return "", unsupported(t)
		}
		us := "(extract(epoch from " + x + ") * 1000000)::bigint"
		a := "abs(" + us + ")"
		h := "(" + a + " / 3600000000)::text" // lpad would cut 838 hours to 83
		return "CASE WHEN " + us + " < 0 THEN '-' ELSE '' END || lpad(" + h + ", greatest(2, length(" + h + ")), '0') || ':' || lpad((" + a + " / 60000000 % 60)::text, 2, '0') || ':' || lpad((" + a + " / 1000000 % 60)::text, 2, '0') || '.' || lpad((" + a + " % 1000000)::text, 6, '0')", nil
	},
	my: func(x string, _ colType) (string, error) {
		s := myUTF8("CAST(" + x + " AS CHAR)")
		return "IF(LOCATE('.', " + s + ") > 0, RPAD(" + s + ", LOCATE('.', " + s + ") + 6, '0'), CONCAT(" + s + ", '.000000'))", nil
	},
}

// jsonbForm: jsonb's text, PostgreSQL's normal form of a document (keys
// ordered and unique, whitespace fixed, numbers as their decimal value).
var jsonbForm = form{
	name: "jsonb",
	pg:   func(x string, _ colType) (string, error) { return "(" + x + ")::jsonb::text", nil },
	my:   func(string, colType) (string, error) { return "", fmt.Errorf("jsonb's normal form is PostgreSQL's") },
}

// floatForm: the value as a float of the source's width (a target of
// another width is rounded to it first: FLOAT and real at float32, DOUBLE
// at float64), widened exactly to float64, as the 16 hex digits of its
// IEEE 754 bits. Digits would not do: the engines' "shortest round-trip"
// texts differ for some values (PostgreSQL's prints 17 digits where 16
// read back, -1.1948147186912461e+17 against MariaDB's
// -1.194814718691246e17), and MariaDB's FLOAT text has only 6. PostgreSQL
// has the bits (float8send); MariaDB computes them: the exponent from
// LOG2, corrected by a division by a power of two, and the mantissa by
// another, both exact. A zero keeps its sign only between PostgreSQL
// databases: MariaDB stores -0 as 0. NaN and ±Infinity (PostgreSQL only)
// are their bits.
func floatForm(bits int, signedZero bool) form {
	return form{
		name: fmt.Sprintf("float%d", bits),
		pg: func(x string, t colType) (string, error) {
			switch {
			case t.base == "real":
				return pgFloatBits("("+x+")::float8", signedZero), nil
			case t.base == "double precision" && bits == 64:
				return pgFloatBits("("+x+")", signedZero), nil
			case t.base == "double precision":
				// Rounded to the source's float32; a value past float32's range
				// (which the cast refuses) keeps its own text, matching none.
				return "CASE WHEN " + x + " = 0 OR abs(" + x + ") BETWEEN 1.401298464324817e-45 AND 3.4028234663852886e38 THEN " +
					pgFloatBits("("+x+")::real::float8", signedZero) + " ELSE 'out of float32 range: ' || (" + x + ")::text END", nil
			}
			return "", unsupported(t)
		},
		my: func(x string, t colType) (string, error) {
			var v string
			switch {
			case t.base == "float":
				v = "CAST(" + x + " AS DOUBLE)"
			case t.base == "double" && bits == 64:
				v = x
			case t.base == "double":
				v = "CAST(CAST(" + x + " AS FLOAT) AS DOUBLE)"
				return "IF(ABS(" + x + ") <= 3.4028234663852886e38, " + myFloatText(v) + ", CONCAT('out of float32 range: ', " + myUTF8("CAST("+x+" AS CHAR)") + "))", nil
			default:
				return "", unsupported(t)
			}
			return myFloatText(v), nil
		},
	}
}

// pgFloatBits is the float8 v's bits in hex; -0 is 0 unless signedZero.
func pgFloatBits(v string, signedZero bool) string {
	if signedZero {
		return "encode(float8send(" + v + "), 'hex')"
	}
	return "CASE WHEN " + v + " = 0 THEN '0000000000000000' ELSE encode(float8send(" + v + "), 'hex') END"
}

// pgDigits parses the decimal text t ([-]digits[.digits][e±exp]) into its
// sign s, its significant digits d (no leading or trailing zeros) and the
// parts of its exponent (the value is 0.d × 10^(ex + length(ip) - lz)),
// and returns the expression out of them, or zero when d is empty.
func pgDigits(t, out, zero string) string {
	return "(SELECT CASE WHEN d = '' THEN " + zero + " ELSE " + out + " END FROM (" +
		"SELECT s, ex, ip, rtrim(ltrim(dg, '0'), '0') AS d, length(dg) - length(ltrim(dg, '0')) AS lz FROM (" +
		"SELECT s, ex, split_part(m, '.', 1) AS ip, replace(m, '.', '') AS dg FROM (" +
		"SELECT CASE WHEN left(t, 1) = '-' THEN '-' ELSE '' END AS s, split_part(ltrim(t, '-'), 'e', 1) AS m, " +
		"coalesce(nullif(split_part(t, 'e', 2), '')::int, 0) AS ex FROM (SELECT " + t + " AS t) AS canon_t" +
		") AS canon_m) AS canon_dg) AS canon_d)"
}

// myFloatText is the DOUBLE v's bits in hex, as pgFloatBits's.
func myFloatText(v string) string {
	a := "ABS(" + v + ")"
	// LOG2 may round across a power of two, past 2^1023 too.
	e0 := "LEAST(GREATEST(FLOOR(LOG2(" + a + ")), -1074), 1023)"
	r := a + " / POW(2, " + e0 + ")"
	e := "(" + e0 + " + IF(" + r + " >= 2, 1, 0) - IF(" + r + " < 1, 1, 0))"
	biased := "IF(" + e + " >= -1022, " + e + " + 1023, 0)"
	mant := "IF(" + e + " >= -1022, " + a + " / POW(2, " + e + " - 52) - POW(2, 52), " + a + " / POW(2, -1074))"
	sign := "IF(" + v + " < 0, 2048, 0)"
	return myUTF8("IF(" + v + " = 0, '0000000000000000', LOWER(CONCAT(LPAD(HEX(" + sign + " + " + biased + "), 3, '0'), LPAD(HEX(CAST(" + mant + " AS UNSIGNED)), 13, '0'))))")
}

// jsonDepth is how deep PostgreSQL rebuilds a document in MariaDB's
// JSON_NORMALIZE form; deeper parts keep jsonb's text (matching only
// where the two agree: scalars other than numbers), so a document nested
// deeper reports a difference. The levels a document does not reach cost
// nothing but the query's length (about 1.2 kB each).
const jsonDepth = 16

// myJSONNormForm: a document from MariaDB (whose JSON is a longtext) in
// MariaDB's JSON_NORMALIZE form: no whitespace, object members ordered by
// their keys' bytes, numbers exactly as D.DDDE±X (1.0E2 for 100, 1e2 and
// 100.0). PostgreSQL rebuilds it from jsonb. Strings (and keys) compare in
// their escaped text: JSON_NORMALIZE keeps a source's escapes as written,
// jsonb prints only the escapes JSON requires, so a document that escapes
// more (\u00e9 for é, \/ for /) reports a difference.
var myJSONNormForm = form{
	name: "json-normalize",
	pg: func(x string, t colType) (string, error) {
		if !isPGJSON(t.base) {
			return "", unsupported(t)
		}
		return pgJSONNorm("(("+x+")::jsonb)", jsonDepth), nil
	},
	my: func(x string, _ colType) (string, error) { return myUTF8("JSON_NORMALIZE(" + x + ")"), nil },
}

func pgJSONNorm(e string, depth int) string {
	num := pgDigits(e+"::text", "s || left(d, 1) || '.' || coalesce(nullif(substr(d, 2), ''), '0') || 'E' || (ex + length(ip) - lz - 1)::text", "'0.0E0'")
	if depth == 0 {
		return "CASE jsonb_typeof(" + e + ") WHEN 'number' THEN " + num + " ELSE " + e + "::text END"
	}
	k, v, n := fmt.Sprintf("k%d", depth), fmt.Sprintf("v%d", depth), fmt.Sprintf("n%d", depth)
	obj := "jsonb_typeof(" + e + ") = 'object'"
	members := "SELECT key, value, 0 FROM jsonb_each(CASE WHEN " + obj + " THEN " + e + " ELSE '{}' END) UNION ALL " +
		"SELECT NULL, value, ordinality FROM jsonb_array_elements(CASE WHEN " + obj + " THEN '[]' ELSE " + e + " END) WITH ORDINALITY"
	container := "(SELECT CASE WHEN " + obj + " THEN '{' ELSE '[' END || coalesce(string_agg(CASE WHEN " + k + " IS NULL THEN '' ELSE to_jsonb(" + k + ")::text || ':' END || " +
		pgJSONNorm(v, depth-1) + ", ',' ORDER BY " + k + " COLLATE \"C\", " + n + "), '') || CASE WHEN " + obj + " THEN '}' ELSE ']' END FROM (" +
		members + ") AS canon_" + v + "(" + k + ", " + v + ", " + n + "))"
	return "CASE WHEN jsonb_typeof(" + e + ") = 'number' THEN " + num + " WHEN jsonb_typeof(" + e + ") IN ('object', 'array') THEN " + container + " ELSE " + e + "::text END"
}
