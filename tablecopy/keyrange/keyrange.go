// Package keyrange writes the SQL the initial copy shares between a source
// and a target of one engine: the predicate that selects a chunk's
// primary-key range, and the digest query whose result both servers must
// compute identically for equal rows. Keeping both in one place is what
// makes a source's digest comparable with a target's.
package keyrange

import (
	"sort"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// PGLiteral quotes s as a PostgreSQL string literal (standard conforming:
// only quotes are doubled; an E-string is used when s holds a backslash so that the
// literal means the same whatever standard_conforming_strings says).
func PGLiteral(s string) string {
	if strings.Contains(s, `\`) {
		return "E'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// MyLiteral quotes s as a MySQL string literal under the default sql_mode
// (backslash escapes on).
func MyLiteral(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case 0:
			b.WriteString(`\0`)
		case '\'':
			b.WriteString(`\'`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case 0x1a:
			b.WriteString(`\Z`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// PG returns the WHERE condition selecting r on a PostgreSQL table whose key
// columns, quoted, are keyCols. A row comparison "(a, b) >= ('1', 'x')"
// resolves each literal to its column's type and is served by the primary
// key's index. The whole range is "TRUE".
func PG(keyCols []string, r tablecopy.Range) string {
	var conds []string
	bound := func(k sluice.Row, op string) {
		if k == nil {
			return
		}
		cols := keyCols[:len(k)]
		lits := make([]string, len(k))
		for i, v := range k {
			lits[i] = PGLiteral(v.Text)
		}
		if len(k) == 1 {
			conds = append(conds, cols[0]+" "+op+" "+lits[0])
			return
		}
		conds = append(conds, "("+strings.Join(cols, ", ")+") "+op+" ("+strings.Join(lits, ", ")+")")
	}
	bound(r.From, ">=")
	bound(r.To, "<")
	if len(conds) == 0 {
		return "TRUE"
	}
	return strings.Join(conds, " AND ")
}

// My returns the WHERE condition selecting r on a MySQL table whose key
// columns, quoted, are keyCols. Row comparisons are spelled out
// ("a > x OR (a = x AND b >= y)") so that every MySQL and MariaDB version
// uses the primary key's index for them. The whole range is "TRUE".
func My(keyCols []string, r tablecopy.Range) string {
	var conds []string
	bound := func(k sluice.Row, strict, last string) {
		if k == nil {
			return
		}
		// (c1..cn) op (v1..vn) = c1 strict v1 OR (c1 = v1 AND (c2..cn) op (v2..vn)),
		// with the last column compared by last.
		var expr string
		for i := len(k) - 1; i >= 0; i-- {
			lit := MyLiteral(k[i].Text)
			if i == len(k)-1 {
				expr = keyCols[i] + " " + last + " " + lit
				continue
			}
			expr = keyCols[i] + " " + strict + " " + lit + " OR (" + keyCols[i] + " = " + lit + " AND (" + expr + "))"
		}
		conds = append(conds, "("+expr+")")
	}
	bound(r.From, ">", ">=")
	bound(r.To, "<", "<")
	if len(conds) == 0 {
		return "TRUE"
	}
	return strings.Join(conds, " AND ")
}

// PGSettings are the session settings under which sluice's PostgreSQL
// readers give a value's text (the text forms of timestamps, floats,
// intervals and bytea depend on them) and under which both sides compute a
// PostgreSQL digest: the stream's readers, the copy's and the target's
// digest share this one list.
func PGSettings() map[string]string {
	return map[string]string{
		"TimeZone":           "UTC",
		"DateStyle":          "ISO, MDY",
		"IntervalStyle":      "postgres",
		"extra_float_digits": "3",
		"bytea_output":       "hex",
	}
}

// PGSetLocal returns PGSettings as SET LOCAL statements, in name order.
func PGSetLocal() []string {
	set := PGSettings()
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, k := range names {
		out[i] = "SET LOCAL " + k + " = " + PGLiteral(set[k])
	}
	return out
}

// PGDigest returns the query of a range's digest on PostgreSQL: the row
// count and the sum of the first 60 bits of each row's md5, which does not
// depend on the order rows are read in. cols are the source's columns,
// quoted, in source order; table is the quoted table name. Run it under
// PGSetLocal. It returns two text columns.
func PGDigest(table string, cols []string, where string) string {
	return "SELECT count(*)::text, coalesce(sum(('x' || left(md5(ROW(" + strings.Join(cols, ", ") + ")::text), 15))::bit(60)::bigint), 0)::text FROM " +
		table + " WHERE " + where
}

// MySession is the setting under which both sides compute a MySQL digest
// (TIMESTAMP text depends on the session time zone).
const MySession = "SET time_zone = '+00:00'"

// MyDigestColumn is what a MySQL digest hashes of a column (quoted) of
// type typ, as its side spells it (COLUMN_TYPE, or the source's type on a
// target): the column, whose text is exact for every type but FLOAT (6
// significant digits: 12345.67 and 12345.68 both print 12345.7), and a
// FLOAT or DOUBLE widened to DOUBLE, whose text is its shortest round-trip
// digits. Both sides of a digest spell a column so.
func MyDigestColumn(quoted, typ string) string {
	base := strings.ToLower(strings.TrimSpace(typ))
	if i := strings.IndexAny(base, "( "); i >= 0 {
		base = base[:i]
	}
	switch base {
	case "float", "double", "real":
		return "CAST(" + quoted + " AS DOUBLE)"
	}
	return quoted
}

// MyDigest returns the query of a range's digest on MySQL/MariaDB, like
// PGDigest: QUOTE keeps NULL apart from the string 'NULL'. cols are the
// columns as MyDigestColumn gives them. It returns two columns, the count
// and the sum, both readable as text.
func MyDigest(table string, cols []string, where string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = "QUOTE(" + c + ")"
	}
	return "SELECT COUNT(*), COALESCE(SUM(CAST(CONV(LEFT(MD5(CONCAT_WS(',', " + strings.Join(q, ", ") + ")), 15), 16, 10) AS UNSIGNED)), 0) FROM " +
		table + " WHERE " + where
}
