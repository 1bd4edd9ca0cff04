package typemap

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/coltype"
)

// Conv converts one non-NULL value from the source's text form to the
// target's. A nil Conv keeps the text as it is.
type Conv func(string) (string, error)

// Column decides how values of the source column src (its Type as engine
// from spells it) are written to a target column of type dstType on engine
// to. It returns an error saying why, and what to do, when some value of
// the source type cannot be represented exactly by the target type.
func Column(from, to Engine, src sluice.Column, dstType string) (Conv, error) {
	return column(from, to, parseColumn(from, src), parse(to, dstType))
}

// parseColumn is the source column's type, a PostgreSQL enum's labels
// included.
func parseColumn(e Engine, c sluice.Column) colType {
	t := parse(e, c.Type)
	if e == Postgres && c.Enum != "" {
		t.enum, t.labels = true, coltype.Members(c.Enum)
	}
	return t
}

func column(from, to Engine, src, dst colType) (Conv, error) {
	var conv Conv
	var r *refusal
	switch {
	case from == Postgres && to == MySQL:
		conv, r = pgToMy(src, dst)
	case from == MySQL && to == Postgres:
		conv, r = myToPg(src, dst)
	default:
		return nil, fmt.Errorf("no type map from %s to %s", from, to)
	}
	if r != nil {
		return nil, r
	}
	return conv, nil
}

// pgToMy maps a PostgreSQL column to a MySQL-family column.
func pgToMy(s, d colType) (Conv, *refusal) {
	if s.array {
		if coltype.IsMySQLText(d.base) && d.base != "tinytext" || d.base == "json" {
			if d.base == "json" {
				return nil, refuse("a PostgreSQL array's text form ('{1,2}') is not JSON", "make the target column longtext to keep the array's text form")
			}
			return nil, nil
		}
		return nil, refuse("MySQL has no array type", "make the target column mediumtext or longtext: sluice stores the array's PostgreSQL text form ('{a,b}')")
	}
	if s.enum {
		return pgEnumToMy(s, d)
	}
	// Any type can be kept as its PostgreSQL text form in a large enough
	// text column.
	if d.base == "mediumtext" || d.base == "longtext" {
		switch s.base {
		case "bytea":
			return nil, refuse("bytea into a text column would change its bytes to their hex text", "make the target column mediumblob or longblob")
		case "boolean":
			return boolToInt, nil
		case "inet":
			return inetOutput, nil
		}
		return noNUL, nil
	}
	switch s.base {
	case "smallint", "integer", "bigint":
		if b := coltype.MySQLIntBits(d.base); b > 0 && !d.unsigned && b >= pgIntBits(s.base) {
			return nil, nil
		}
		if d.base == "decimal" && d.mod(0, 10)-d.mod(1, 0) >= 19 {
			return nil, nil
		}
		return nil, refuse("%s values do not all fit in %s", fitFix(d), s.base, myName(d))
	case "numeric":
		if d.base != "decimal" {
			return nil, refuse("numeric values need a DECIMAL column", "make the target column decimal(p,s) with the source's precision and scale")
		}
		if s.mods == nil {
			return nil, refuse("numeric without precision and scale can hold values no MySQL DECIMAL can (up to 131072 digits)", "declare the source column numeric(p,s), or make the target column longtext")
		}
		sp, ss := s.mod(0, 0), s.mod(1, 0)
		dp, ds := d.mod(0, 10), d.mod(1, 0)
		if ds < ss || dp-ds < sp-ss {
			return nil, refuse("numeric(%d,%d) values do not fit in decimal(%d,%d)", fmt.Sprintf("make the target column decimal(%d,%d)", max(sp, dp), max(ss, ds)), sp, ss, dp, ds)
		}
		return nanRefused("numeric"), nil
	case "real":
		if d.base == "float" || d.base == "double" {
			return nanRefused("real"), nil
		}
		return nil, refuse("real values need a FLOAT or DOUBLE column", "make the target column float")
	case "double precision":
		if d.base == "double" {
			return nanRefused("double precision"), nil
		}
		return nil, refuse("double precision values need a DOUBLE column", "make the target column double")
	case "boolean":
		if coltype.MySQLIntBits(d.base) > 0 || d.base == "bit" && d.mod(0, 1) == 1 {
			return boolToInt, nil
		}
		return nil, refuse("boolean needs a TINYINT(1) column", "make the target column tinyint(1)")
	case "text":
		return nil, refuse("text values can exceed what MySQL's TEXT/VARCHAR hold", "make the target column mediumtext or longtext")
	case "varchar", "char":
		n := s.mod(0, -1)
		if n < 0 {
			return nil, refuse(s.base+" without a length can hold values of any length", "make the target column mediumtext or longtext")
		}
		switch {
		case d.base == "varchar" || d.base == "char" && s.base == "char":
			if d.mod(0, 1) >= n {
				return noNUL, nil
			}
		case coltype.IsMySQLText(d.base):
			if coltype.MySQLStringBytes(d.base) >= int64(4*n) {
				return noNUL, nil
			}
		}
		return nil, refuse("%s(%d) values do not fit in %s", fmt.Sprintf("make the target column varchar(%d) or longer", n), s.base, n, myName(d))
	case "bytea":
		if d.base == "mediumblob" || d.base == "longblob" {
			return byteaToRaw, nil
		}
		return nil, refuse("bytea values can exceed what %s holds", "make the target column mediumblob or longblob", myName(d))
	case "uuid":
		switch {
		case d.base == "uuid", (d.base == "char" || d.base == "varchar") && d.mod(0, 1) >= 36:
			return nil, nil // MariaDB's UUID reads and prints PostgreSQL's text form
		case d.base == "binary" && d.mod(0, 1) == 16:
			return uuidBytes, nil
		}
		return nil, refuse("uuid needs a UUID (MariaDB 10.7 or later), BINARY(16) or CHAR(36) column", "make the target column uuid, binary(16) or char(36)")
	case "date":
		if d.base == "date" || d.base == "datetime" {
			return pgDate, nil
		}
		return nil, refuse("date needs a DATE column", "make the target column date")
	case "timestamp", "timestamptz":
		p := s.mod(0, 6)
		if d.base == "datetime" && d.mod(0, 0) >= p {
			return pgTimestamp, nil
		}
		if d.base == "timestamp" && d.mod(0, 0) >= p {
			return pgToMyTimestamp, nil
		}
		return nil, refuse("%s(%d) needs a DATETIME(%d) column", fmt.Sprintf("make the target column datetime(%d) (timestamptz is stored in UTC)", p), s.base, p, p)
	case "time":
		if d.base == "time" && d.mod(0, 0) >= s.mod(0, 6) {
			return nil, nil
		}
		return nil, refuse("time(%d) needs a TIME(%d) column", fmt.Sprintf("make the target column time(%d)", s.mod(0, 6)), s.mod(0, 6), s.mod(0, 6))
	case "json", "jsonb":
		// MariaDB's JSON is a longtext (above), which keeps the text;
		// MySQL's keeps the document's value.
		if d.base == "json" {
			return myJSONExact, nil
		}
		return nil, refuse("%s needs a JSON column", "make the target column json", s.base)
	case "interval":
		return nil, refuse("MySQL has no interval type", "make the target column mediumtext or longtext: sluice stores the interval's text form")
	}
	return nil, refuse("no exact MySQL mapping for PostgreSQL type %s (target %s)", "make the target column mediumtext or longtext to keep its text form", s.base, myName(d))
}

// pgEnumToMy maps a PostgreSQL enum: to a MySQL ENUM that has each of its
// labels, in the same order (it may have more); to a varchar long enough
// for every label; or to a text column large enough for any.
func pgEnumToMy(s, d colType) (Conv, *refusal) {
	fix := "make the target column enum(" + quoteLabels(s.labels) + "), with the same labels in the same order"
	switch d.base {
	case "mediumtext", "longtext":
		return noNUL, nil
	case "enum":
		next := 0
		for _, l := range s.labels {
			i := slices.Index(d.labels[next:], l)
			if i < 0 {
				why := "it lacks the label %q"
				if slices.Contains(d.labels, l) {
					why = "its labels are in another order (at %q)"
				}
				return nil, refuse("the target %s does not hold every label of PostgreSQL enum %s exactly: "+why, fix, myName(d), s.base, l)
			}
			next += i + 1
		}
		return labelOf(d.labels), nil
	case "varchar":
		longest := 0
		for _, l := range s.labels {
			longest = max(longest, utf8.RuneCountInString(l))
		}
		if d.mod(0, 0) >= longest {
			return fitsChars(d.mod(0, 0)), nil
		}
	}
	return nil, refuse("no exact MySQL mapping for PostgreSQL enum %s (target %s)", fix, s.base, myName(d))
}

func quoteLabels(labels []string) string {
	q := make([]string, len(labels))
	for i, l := range labels {
		q[i] = "'" + strings.ReplaceAll(l, "'", "''") + "'"
	}
	return strings.Join(q, ",")
}

// myToPg maps a MySQL-family column to a PostgreSQL column.
func myToPg(s, d colType) (Conv, *refusal) {
	if d.base == "text" && !d.array {
		switch {
		case coltype.IsMySQLBlob(s.base) || s.base == "binary" || s.base == "varbinary" || s.base == "bit":
			return nil, refuse("binary values in a text column would have to be valid UTF-8", "make the target column bytea")
		}
		return utf8NoNUL, nil
	}
	if bits := coltype.MySQLIntBits(s.base); bits > 0 {
		if s.base == "tinyint" && s.mod(0, 0) == 1 && !s.unsigned && d.base == "boolean" {
			return intToBool, nil
		}
		need := bits
		if s.unsigned {
			need = bits + 1
		}
		if pb := pgIntBits(d.base); pb > 0 && pb >= need {
			return nil, nil
		}
		if d.base == "numeric" && (d.mods == nil || d.mod(0, 0)-d.mod(1, 0) >= 20) {
			return nil, nil
		}
		want := "bigint"
		switch {
		case need <= 16:
			want = "smallint"
		case need <= 32:
			want = "integer"
		case need > 64:
			want = "numeric(20,0)"
		}
		return nil, refuse("%s values do not all fit in %s", "make the target column "+want, myName(s), d.base)
	}
	switch s.base {
	case "decimal":
		sp, ss := s.mod(0, 10), s.mod(1, 0)
		if d.base == "numeric" && (d.mods == nil || d.mod(1, 0) >= ss && d.mod(0, 0)-d.mod(1, 0) >= sp-ss) {
			return nil, nil
		}
		return nil, refuse("decimal(%d,%d) values do not fit in %s", fmt.Sprintf("make the target column numeric(%d,%d)", sp, ss), sp, ss, d.base)
	case "float":
		if d.base == "real" || d.base == "double precision" {
			return nil, nil
		}
		return nil, refuse("float values need a real column", "make the target column real")
	case "double":
		if d.base == "double precision" {
			return nil, nil
		}
		return nil, refuse("double values need a double precision column", "make the target column double precision")
	case "char", "varchar":
		n := s.mod(0, 1)
		if d.base == "uuid" && n == 36 {
			return nil, nil
		}
		if (d.base == "varchar" || d.base == "char" && s.base == "char") && (d.mods == nil || d.mod(0, 0) >= n) {
			return utf8NoNUL, nil
		}
		return nil, refuse("%s(%d) values do not fit in %s", fmt.Sprintf("make the target column varchar(%d) or text", n), s.base, n, d.base)
	case "tinytext", "text", "mediumtext", "longtext":
		switch d.base {
		case "json":
			return nil, nil // MariaDB reports JSON columns as longtext
		case "jsonb":
			return jsonbExact, nil
		}
		if d.base == "varchar" && d.mods == nil {
			return utf8NoNUL, nil
		}
		return nil, refuse("%s values need a text column", "make the target column text", s.base)
	case "json":
		switch d.base {
		case "json":
			return nil, nil
		case "jsonb":
			return jsonbExact, nil
		}
		return nil, refuse("json needs a json or jsonb column", "make the target column jsonb")
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		if d.base == "bytea" {
			return rawToBytea, nil
		}
		return nil, refuse("%s needs a bytea column", "make the target column bytea", s.base)
	case "bit":
		n := s.mod(0, 1)
		if (d.base == "bit" || d.base == "varbit") && d.mod(0, n) >= n {
			return bitsToPg(n), nil
		}
		if d.base == "bytea" {
			return rawToBytea, nil
		}
		return nil, refuse("bit(%d) needs a bit(%d) column", fmt.Sprintf("make the target column bit(%d)", n), n, n)
	case "date":
		if d.base == "date" {
			return myDate, nil
		}
		return nil, refuse("date needs a date column", "make the target column date")
	case "datetime":
		p := s.mod(0, 0)
		if (d.base == "timestamp" || d.base == "timestamptz") && d.mod(0, 6) >= p {
			return myDateTime, nil
		}
		return nil, refuse("datetime(%d) needs a timestamp(%d) column", fmt.Sprintf("make the target column timestamp(%d)", p), p, p)
	case "timestamp":
		p := s.mod(0, 0)
		if (d.base == "timestamptz" || d.base == "timestamp") && d.mod(0, 6) >= p {
			return myTimestamp(d.base == "timestamptz"), nil
		}
		return nil, refuse("timestamp(%d) needs a timestamptz(%d) column", fmt.Sprintf("make the target column timestamptz(%d)", p), p, p)
	case "time":
		if d.base == "interval" {
			return nil, nil
		}
		if d.base == "time" && d.mod(0, 6) >= s.mod(0, 0) {
			return myTime, nil
		}
		return nil, refuse("time needs a time or interval column", "make the target column interval (MySQL TIME spans ±838 hours) or time")
	case "year":
		if pgIntBits(d.base) > 0 {
			return nil, nil
		}
		return nil, refuse("year needs an integer column", "make the target column smallint")
	case "enum", "set":
		longest := 0
		for _, l := range s.labels {
			longest = max(longest, utf8.RuneCountInString(l))
		}
		if s.base == "set" {
			longest = len(strings.Join(s.labels, ","))
		}
		if d.base == "varchar" && (d.mods == nil || d.mod(0, 0) >= longest) {
			return nil, nil
		}
		return nil, refuse("%s labels need a text column", "make the target column text", s.base)
	}
	return nil, refuse("no exact PostgreSQL mapping for MySQL type %s (target %s)", "make the target column text to keep its text form", myName(s), d.base)
}

func myName(t colType) string {
	s := t.base
	if len(t.mods) > 0 {
		parts := make([]string, len(t.mods))
		for i, m := range t.mods {
			parts[i] = fmt.Sprint(m)
		}
		s += "(" + strings.Join(parts, ",") + ")"
	}
	if t.unsigned {
		s += " unsigned"
	}
	return s
}

func fitFix(d colType) string {
	return "make the target column a signed integer at least as wide as the source's"
}

// Value conversions. Their errors are wrapped by the caller with the table,
// column and row key.

var errNUL = errors.New("text contains a NUL byte, which PostgreSQL cannot store")

func noNUL(v string) (string, error) { return v, nil }

func utf8NoNUL(v string) (string, error) {
	if !utf8.ValidString(v) {
		return "", errors.New("text is not valid UTF-8, which PostgreSQL requires")
	}
	if strings.IndexByte(v, 0) >= 0 {
		return "", errNUL
	}
	return v, nil
}

func boolToInt(v string) (string, error) {
	switch v {
	case "t", "true":
		return "1", nil
	case "f", "false":
		return "0", nil
	}
	return "", fmt.Errorf("boolean value %q", v)
}

func intToBool(v string) (string, error) {
	switch v {
	case "0":
		return "f", nil
	case "1":
		return "t", nil
	}
	return "", fmt.Errorf("tinyint(1) value %s is neither 0 nor 1 and has no boolean equivalent", v)
}

func nanRefused(typ string) Conv {
	return func(v string) (string, error) {
		switch strings.ToLower(v) {
		case "nan", "infinity", "-infinity", "inf", "-inf":
			return "", fmt.Errorf("%s value %s has no MySQL equivalent", typ, v)
		case "-0":
			if typ != "numeric" {
				return "", fmt.Errorf("%s value -0 (a negative zero) has no MariaDB equivalent: MariaDB stores it as 0", typ)
			}
		}
		return v, nil
	}
}

func byteaToRaw(v string) (string, error) {
	if !strings.HasPrefix(v, `\x`) {
		return "", fmt.Errorf("bytea value is not in hex format (set bytea_output = hex)")
	}
	b, err := hex.DecodeString(v[2:])
	if err != nil {
		return "", fmt.Errorf("bytea value: %w", err)
	}
	return string(b), nil
}

func rawToBytea(v string) (string, error) { return `\x` + hex.EncodeToString([]byte(v)), nil }

func bitsToPg(n int) Conv {
	return func(v string) (string, error) {
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			fmt.Fprintf(&b, "%08b", v[i])
		}
		s := b.String()
		if len(s) < n {
			s = strings.Repeat("0", n-len(s)) + s
		}
		return s[len(s)-n:], nil
	}
}

// pgDate refuses the dates MySQL cannot hold.
func pgDate(v string) (string, error) {
	if v == "infinity" || v == "-infinity" || strings.HasSuffix(v, " BC") {
		return "", fmt.Errorf("date %s has no MySQL equivalent", v)
	}
	if len(v) > 10 {
		return "", fmt.Errorf("date %s is past year 9999", v)
	}
	return v, nil
}

// pgTimestamp turns "2024-01-02 03:04:05.123+00" (timestamptz under
// TimeZone=UTC) or "2024-01-02 03:04:05.123" into MySQL's form.
func pgTimestamp(v string) (string, error) {
	if v == "infinity" || v == "-infinity" || strings.HasSuffix(v, " BC") {
		return "", fmt.Errorf("timestamp %s has no MySQL equivalent", v)
	}
	if i := strings.LastIndexAny(v, "+-"); i > 10 {
		if v[i:] != "+00" && v[i:] != "+00:00" {
			return "", fmt.Errorf("timestamp %s is not in UTC (the source session must use TimeZone=UTC)", v)
		}
		v = v[:i]
	}
	if len(v) < 19 || v[4] != '-' {
		return "", fmt.Errorf("timestamp %s is outside MySQL's range", v)
	}
	return v, nil
}

// myDate refuses MySQL's zero dates, which PostgreSQL cannot hold.
func myDate(v string) (string, error) {
	if strings.HasPrefix(v, "0000-") || strings.Contains(v, "-00") {
		return "", fmt.Errorf("zero date %s has no PostgreSQL equivalent", v)
	}
	return v, nil
}

func myDateTime(v string) (string, error) {
	if _, err := myDate(v[:min(10, len(v))]); err != nil {
		return "", fmt.Errorf("zero datetime %s has no PostgreSQL equivalent", v)
	}
	return v, nil
}

// myTimestamp: MySQL TIMESTAMP values are read in UTC (the session's
// time_zone is +00:00), so a timestamptz target gets them with +00.
func myTimestamp(tz bool) Conv {
	return func(v string) (string, error) {
		if _, err := myDateTime(v); err != nil {
			return "", err
		}
		if tz {
			return v + "+00", nil
		}
		return v, nil
	}
}

// myTime refuses a MySQL TIME outside PostgreSQL's time range, 00:00:00
// to 24:00:00 (whatever zeros of fraction MySQL prints after it).
func myTime(v string) (string, error) {
	if strings.HasPrefix(v, "-") || len(v) > 2 && v[2] != ':' || v[:min(2, len(v))] >= "24" && strings.Trim(v, "0:.") != "24" {
		return "", fmt.Errorf("time %s is outside PostgreSQL's time range (00:00–24:00); use an interval column", v)
	}
	return v, nil
}

// inetOutput turns inet's value::text, which the readers give and which
// always shows the netmask, into the text PostgreSQL prints for the value
// (its output function, as psql, COPY and pg_dump give it): without the
// netmask where it is the address's full width, /32 for IPv4 and /128 for
// IPv6. (A cidr prints its netmask always, and is kept as it is.)
func inetOutput(v string) (string, error) {
	addr, bits, ok := strings.Cut(v, "/")
	if !ok {
		return v, nil // the output function's text already
	}
	if bits == "32" && !strings.Contains(addr, ":") || bits == "128" && strings.Contains(addr, ":") {
		return addr, nil
	}
	return v, nil
}

// uuidBytes turns a uuid's text into its 16 bytes in the order the text
// spells them: network order, as PostgreSQL's uuid_send gives them.
func uuidBytes(v string) (string, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(v, "-", ""))
	if err != nil || len(b) != 16 {
		return "", fmt.Errorf("uuid value %q is not 32 hex digits", v)
	}
	return string(b), nil
}

// labelOf accepts only the labels of the target's ENUM, byte for byte: a
// label added to the source's enum since the check is not among them, and
// MySQL would take a label that differs in case for another.
func labelOf(labels []string) Conv {
	return func(v string) (string, error) {
		if slices.Contains(labels, v) {
			return v, nil
		}
		return "", fmt.Errorf("enum label %q is not among the target ENUM's labels (%s): add it to the target column, in the place it has on the source, and restart", v, quoteLabels(labels))
	}
}

// fitsChars refuses a text longer than n characters (an enum label added
// to the source since the check).
func fitsChars(n int) Conv {
	return func(v string) (string, error) {
		if c := utf8.RuneCountInString(v); c > n {
			return "", fmt.Errorf("text of %d characters does not fit in varchar(%d)", c, n)
		}
		return v, nil
	}
}

// MySQL's TIMESTAMP range, in UTC; its value 0 is the "zero" timestamp.
const (
	myTimestampMin = "1970-01-01 00:00:01"
	myTimestampMax = "2038-01-19 03:14:07.999999"
)

// pgToMyTimestamp is pgTimestamp for a MySQL TIMESTAMP column, refusing the
// instants outside its range (the text is fixed-width up to the fraction,
// so it orders as the instants do).
func pgToMyTimestamp(v string) (string, error) {
	t, err := pgTimestamp(v)
	if err != nil {
		return "", err
	}
	if t < myTimestampMin || t > myTimestampMax {
		return "", fmt.Errorf("timestamp %s is outside MySQL TIMESTAMP's range (%s to %s UTC): make the target column datetime(6)", v, myTimestampMin, myTimestampMax)
	}
	return t, nil
}

// A jsonTarget is a target JSON column that keeps a document's value, not
// its text (PostgreSQL's jsonb, MySQL's JSON): objects as sets of
// members, so a key given twice keeps one value (the last), which is not
// the value MySQL's and MariaDB's JSON functions read in the source's
// text (the first), and numbers as the column holds them.
type jsonTarget struct {
	name, fix string
	// nul: a NUL character (\u0000) cannot be stored.
	nul bool
	// number refuses a number the column does not hold exactly; nil when
	// it holds any.
	number func(json.Number) error
}

// jsonbExact refuses the documents jsonb would not hold as the source
// does: a key twice in an object, a NUL character (which jsonb rejects).
var jsonbExact = jsonTarget{name: "jsonb", fix: "make the target column json to keep the document as it is", nul: true}.conv

// myJSONExact refuses the documents MySQL's JSON type (not MariaDB's,
// a longtext) would not hold as the source does: a key twice in an
// object, and a number that is not an integer MySQL keeps or a double
// that reads back as the same decimal value (12345678901234567890.5 is
// stored as 1.2345678901234567e19).
var myJSONExact = jsonTarget{name: "MySQL's JSON", fix: "make the target column longtext to keep the document's text", number: myJSONNumber}.conv

func myJSONNumber(n json.Number) error {
	s := string(n)
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return nil
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	want, ok1 := new(big.Rat).SetString(s)
	got, ok2 := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	if err != nil || !ok1 || !ok2 || want.Cmp(got) != 0 {
		return fmt.Errorf("JSON number %s would be stored as the double %s", s, strconv.FormatFloat(f, 'g', -1, 64))
	}
	return nil
}

func (j jsonTarget) conv(v string) (string, error) {
	d := json.NewDecoder(strings.NewReader(v))
	d.UseNumber() // a number is any length of digits
	if err := j.value(d); err != nil {
		return "", fmt.Errorf("%w: %s", err, j.fix)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("JSON document: text after its end")
	}
	return v, nil
}

func (j jsonTarget) value(d *json.Decoder) error {
	tok, err := d.Token()
	if err != nil {
		return fmt.Errorf("JSON document: %w", err)
	}
	switch x := tok.(type) {
	case string:
		return j.text(x)
	case json.Number:
		if j.number != nil {
			return j.number(x)
		}
	case json.Delim:
		var seen map[string]bool
		if x == '{' {
			seen = map[string]bool{}
		}
		for d.More() {
			if seen != nil {
				k, err := d.Token()
				if err != nil {
					return fmt.Errorf("JSON document: %w", err)
				}
				key := k.(string)
				if seen[key] {
					return fmt.Errorf("JSON object has the key %q twice, and %s keeps only the last value", key, j.name)
				}
				if err := j.text(key); err != nil {
					return err
				}
				seen[key] = true
			}
			if err := j.value(d); err != nil {
				return err
			}
		}
		if _, err := d.Token(); err != nil { // the closing delimiter
			return fmt.Errorf("JSON document: %w", err)
		}
	}
	return nil
}

func (j jsonTarget) text(s string) error {
	if j.nul && strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf(`JSON document holds a NUL character (\u0000), which %s cannot store`, j.name)
	}
	return nil
}
