package mysql

import (
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/coltype"
)

// myType is a MySQL column type as coltype.ParseMySQL reads it (a
// canonical base name, its numeric modifiers, signedness and, for ENUM and
// SET, the members), with the modifiers MySQL assumes filled in.
type myType = coltype.Type

// parseType reads a MySQL column type with coltype.ParseMySQL and fills in
// the modifiers the server assumes when none are written (decimal is
// decimal(10,0), char is char(1), datetime is datetime(0)), so that fits
// compares like with like; float and year keep none.
func parseType(s string) myType {
	t := coltype.ParseMySQL(s)
	switch t.Base {
	case "decimal":
		switch len(t.Mods) {
		case 0:
			t.Mods = []int{10, 0}
		case 1:
			t.Mods = append(t.Mods, 0)
		}
	case "float", "year":
		t.Mods = nil
	case "char", "binary", "bit":
		if len(t.Mods) == 0 {
			t.Mods = []int{1}
		}
	case "varchar", "varbinary":
		if len(t.Mods) == 0 {
			t.Mods = []int{65535}
		}
	case "datetime", "timestamp", "time":
		if len(t.Mods) == 0 {
			t.Mods = []int{0}
		}
	}
	return t
}

// maxCharBytes bounds the bytes of one character, for comparing a
// varchar(n) with a TEXT type: utf8mb4 takes up to 4.
const maxCharBytes = 4

// fits reports whether every value of the MySQL-family source type src can
// be stored in a target column of type dst and read back with the same
// text (or, for wider fractional seconds and BIT, the same value). When not,
// it says why in a phrase that follows "values may not fit: ...".
func fits(src, dst myType) (bool, string) {
	if sb, db := coltype.MySQLIntBits(src.Base), coltype.MySQLIntBits(dst.Base); sb > 0 || db > 0 {
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
	case (src.Base == "char" || src.Base == "varchar") && coltype.IsMySQLText(dst.Base):
		if int64(src.Mods[0])*maxCharBytes > coltype.MySQLStringBytes(dst.Base) {
			return false, "the target text type holds fewer bytes"
		}
		return true, ""
	case coltype.IsMySQLText(src.Base) && dst.Base == "varchar":
		if int64(dst.Mods[0]) < coltype.MySQLStringBytes(src.Base) {
			return false, "the source text type holds more than the target length limit"
		}
		return true, ""
	case coltype.IsMySQLText(src.Base) && coltype.IsMySQLText(dst.Base), coltype.IsMySQLBlob(src.Base) && coltype.IsMySQLBlob(dst.Base):
		if coltype.MySQLStringBytes(dst.Base) < coltype.MySQLStringBytes(src.Base) {
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
	case (src.Base == "binary" || src.Base == "varbinary") && coltype.IsMySQLBlob(dst.Base):
		if int64(src.Mods[0]) > coltype.MySQLStringBytes(dst.Base) {
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
