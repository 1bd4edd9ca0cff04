package mysql

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/internal/mysqltype"
)

// myType is a MySQL column type reduced to what decides whether values fit:
// a canonical base name, its numeric modifiers, signedness and, for ENUM and
// SET, the members.
type myType struct {
	Base     string
	Mods     []int // e.g. [12 4] for decimal(12,4), [6] for datetime(6); nil when absent
	Unsigned bool
	Members  []string // ENUM / SET members
}

// parseType reads a MySQL column type as the source spells it or as
// information_schema.COLUMNS.COLUMN_TYPE prints it, e.g. "int(11) unsigned
// zerofill", "decimal(12,4)", "enum('a','b')", "datetime(6)". It does not
// validate: unknown names are kept, lower-cased.
func parseType(s string) myType {
	s = strings.TrimSpace(s)
	var t myType
	lower := strings.ToLower(s)
	if open := strings.IndexByte(lower, '('); open >= 0 {
		base := strings.TrimSpace(lower[:open])
		end := closingParen(s, open)
		inner := s[open+1 : end]
		rest := lower[min(end+1, len(lower)):]
		if base == "enum" || base == "set" {
			t.Members = mysqltype.Members(inner)
		} else {
			for _, m := range strings.Split(inner, ",") {
				if n, err := strconv.Atoi(strings.TrimSpace(m)); err == nil {
					t.Mods = append(t.Mods, n)
				}
			}
		}
		lower = base + " " + rest
	}
	words := strings.Fields(lower)
	var base []string
	for _, w := range words {
		switch w {
		case "unsigned":
			t.Unsigned = true
		case "signed", "zerofill":
		default:
			base = append(base, w)
		}
	}
	t.Base = canonicalType(strings.Join(base, " "), &t)
	return t
}

// closingParen finds the parenthesis closing the one at open, skipping
// quoted ENUM members.
func closingParen(s string, open int) int {
	inQuote := false
	for i := open + 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' && inQuote && i+1 < len(s) && s[i+1] == '\'':
			i++
		case c == '\'':
			inQuote = !inQuote
		case c == ')' && !inQuote:
			return i
		}
	}
	return len(s)
}

// canonicalType maps synonyms to one name and fills default modifiers.
func canonicalType(s string, t *myType) string {
	switch s {
	case "bool", "boolean":
		t.Mods = []int{1}
		return "tinyint"
	case "integer":
		return "int"
	case "middleint", "int3":
		return "mediumint"
	case "int1":
		return "tinyint"
	case "int2":
		return "smallint"
	case "int4":
		return "int"
	case "int8":
		return "bigint"
	case "serial":
		t.Unsigned = true
		return "bigint"
	case "dec", "numeric", "fixed", "decimal":
		switch len(t.Mods) {
		case 0:
			t.Mods = []int{10, 0}
		case 1:
			t.Mods = append(t.Mods, 0)
		}
		return "decimal"
	case "real", "double precision", "float8", "double":
		return "double"
	case "float4":
		return "float"
	case "float":
		// float(p) with p > 24 is a double.
		if len(t.Mods) == 1 && t.Mods[0] > 24 {
			t.Mods = nil
			return "double"
		}
		t.Mods = nil
		return "float"
	case "character", "nchar", "national char", "national character", "char":
		if len(t.Mods) == 0 {
			t.Mods = []int{1}
		}
		return "char"
	case "character varying", "nvarchar", "national varchar", "varchar", "char varying":
		if len(t.Mods) == 0 {
			t.Mods = []int{65535}
		}
		return "varchar"
	case "varbinary", "binary varying":
		if len(t.Mods) == 0 {
			t.Mods = []int{65535}
		}
		return "varbinary"
	case "binary":
		if len(t.Mods) == 0 {
			t.Mods = []int{1}
		}
		return "binary"
	case "bit":
		if len(t.Mods) == 0 {
			t.Mods = []int{1}
		}
		return "bit"
	case "datetime", "timestamp", "time":
		if len(t.Mods) == 0 {
			t.Mods = []int{0}
		}
		return s
	case "year":
		t.Mods = nil
		return "year"
	case "long varchar", "long":
		return "mediumtext"
	case "long varbinary":
		return "mediumblob"
	}
	return s
}

func (t myType) String() string {
	s := t.Base
	if len(t.Members) > 0 {
		q := make([]string, len(t.Members))
		for i, m := range t.Members {
			q[i] = "'" + strings.ReplaceAll(m, "'", "''") + "'"
		}
		s += "(" + strings.Join(q, ",") + ")"
	} else if len(t.Mods) > 0 {
		parts := make([]string, len(t.Mods))
		for i, m := range t.Mods {
			parts[i] = strconv.Itoa(m)
		}
		s += "(" + strings.Join(parts, ",") + ")"
	}
	if t.Unsigned {
		s += " unsigned"
	}
	return s
}

// maxCharBytes bounds the bytes of one character, for comparing a
// varchar(n) with a TEXT type: utf8mb4 takes up to 4.
const maxCharBytes = 4

// fits reports whether every value of the MySQL-family source type src can
// be stored in a target column of type dst and read back with the same
// text (or, for wider fractional seconds and BIT, the same value). When not,
// it says why in a phrase that follows "values may not fit: ...".
func fits(src, dst myType) (bool, string) {
	if sb, db := mysqltype.IntBits(src.Base), mysqltype.IntBits(dst.Base); sb > 0 || db > 0 {
		if sb == 0 || db == 0 {
			return false, "the types differ"
		}
		switch {
		case src.Unsigned && !dst.Unsigned:
			if db > sb {
				return true, ""
			}
			return false, "the source is unsigned and the target's signed integer is not wider"
		case !src.Unsigned && dst.Unsigned:
			return false, "the source allows negative values but the target is unsigned"
		case db < sb:
			return false, "the target integer type is narrower"
		}
		return true, ""
	}
	switch {
	case src.Base == dst.Base:
	case src.Base == "float" && dst.Base == "double":
		return true, ""
	case src.Base == "timestamp" && dst.Base == "datetime":
		// The session's time zone is UTC on both sides, so the text is the
		// same; a datetime holds every timestamp.
		return fsp(src, dst)
	case (src.Base == "char" || src.Base == "varchar") && (dst.Base == "varchar" || dst.Base == "char"):
		if dst.Base == "char" {
			// char strips trailing blanks on read, varchar keeps them.
			return false, "a char target drops the trailing blanks of a varchar value"
		}
		if dst.Mods[0] < src.Mods[0] {
			return false, "the target length limit is shorter"
		}
		return true, ""
	case (src.Base == "char" || src.Base == "varchar") && mysqltype.IsText(dst.Base):
		if int64(src.Mods[0])*maxCharBytes > mysqltype.StringBytes(dst.Base) {
			return false, "the target text type holds fewer bytes"
		}
		return true, ""
	case mysqltype.IsText(src.Base) && dst.Base == "varchar":
		if int64(dst.Mods[0]) < mysqltype.StringBytes(src.Base) {
			return false, "the source text type holds more than the target length limit"
		}
		return true, ""
	case mysqltype.IsText(src.Base) && mysqltype.IsText(dst.Base), mysqltype.IsBlob(src.Base) && mysqltype.IsBlob(dst.Base):
		if mysqltype.StringBytes(dst.Base) < mysqltype.StringBytes(src.Base) {
			return false, "the target type holds fewer bytes"
		}
		return true, ""
	case src.Base == "json" && dst.Base == "longtext":
		// MariaDB's JSON is an alias of LONGTEXT with a json_valid check.
		return true, ""
	case (src.Base == "binary" || src.Base == "varbinary") && dst.Base == "varbinary":
		if dst.Mods[0] < src.Mods[0] {
			return false, "the target length limit is shorter"
		}
		return true, ""
	case (src.Base == "binary" || src.Base == "varbinary") && mysqltype.IsBlob(dst.Base):
		if int64(src.Mods[0]) > mysqltype.StringBytes(dst.Base) {
			return false, "the target blob type holds fewer bytes"
		}
		return true, ""
	default:
		return false, "the types differ"
	}
	switch src.Base {
	case "decimal":
		if src.Unsigned && !dst.Unsigned {
			// Fine: a signed decimal holds every unsigned one of its size.
		} else if !src.Unsigned && dst.Unsigned {
			return false, "the source allows negative values but the target is unsigned"
		}
		if dst.Mods[1] != src.Mods[1] {
			return false, "the scales differ"
		}
		if dst.Mods[0] < src.Mods[0] {
			return false, "the target precision is smaller"
		}
		return true, ""
	case "float", "double":
		if !src.Unsigned && dst.Unsigned {
			return false, "the source allows negative values but the target is unsigned"
		}
		return true, ""
	case "varchar", "varbinary":
		if dst.Mods[0] < src.Mods[0] {
			return false, "the target length limit is shorter"
		}
		return true, ""
	case "char":
		if dst.Mods[0] < src.Mods[0] {
			return false, "the target length limit is shorter"
		}
		return true, ""
	case "binary":
		// binary(n) values are zero-padded to n: another n changes them.
		if dst.Mods[0] != src.Mods[0] {
			return false, "the target length differs (binary values are zero-padded)"
		}
		return true, ""
	case "bit":
		if dst.Mods[0] < src.Mods[0] {
			return false, "the target has fewer bits"
		}
		return true, ""
	case "datetime", "timestamp", "time":
		return fsp(src, dst)
	case "enum", "set":
		for _, m := range src.Members {
			if !slices.Contains(dst.Members, m) {
				return false, fmt.Sprintf("the target lacks the member %q", m)
			}
		}
		if src.Base == "set" && !slices.Equal(src.Members, dst.Members) {
			// A SET value's text lists its members in definition order.
			return false, "the members are in a different order"
		}
		return true, ""
	}
	// Same type, no modifiers that matter (date, year, json, text, blob, …).
	return true, ""
}

// fsp compares fractional-second precisions: a wider one holds every value.
func fsp(src, dst myType) (bool, string) {
	if dst.Mods[0] < src.Mods[0] {
		return false, "the target keeps fewer fractional digits"
	}
	return true, ""
}

// fitError is the preflight message for a column whose target type cannot
// hold the source's values exactly.
func fitError(table, col, srcType, dstType, why string) error {
	return fmt.Errorf("column %s.%s is %s on the target but %s on the source: values may not fit (%s); alter the target column: ALTER TABLE %s MODIFY %s %s",
		table, col, dstType, srcType, why, table, quoteIdent(col), srcType)
}

// TypeFits reports whether every value of MySQL-family type src is stored
// exactly by a column of type dst (COLUMN_TYPE spellings or the user's),
// and when not why: the rule the preflight applies, for the schema
// package's diff and for a change of a source column's type that a stream
// follows.
func TypeFits(src, dst string) (bool, string) { return fits(parseType(src), parseType(dst)) }
