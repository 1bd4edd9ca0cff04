package postgres

import (
	"fmt"
	"strconv"
	"strings"
)

// pgType is a column type reduced to what decides whether values fit: a
// canonical base name, its modifiers and its array dimensions.
type pgType struct {
	Base string
	// Mods holds the numeric modifiers, e.g. [12 4] for numeric(12,4); nil
	// when the type is unbounded.
	Mods []int
	// Fields holds an interval's field restriction, e.g. "year to month".
	Fields string
	Array  bool
}

// canonicalType maps the spellings PostgreSQL accepts (and format_type
// prints) to one name per type; other names are returned as they are.
func canonicalType(s string) string {
	switch s {
	case "int2", "smallint", "smallserial", "serial2":
		return "smallint"
	case "int4", "int", "integer", "serial", "serial4":
		return "integer"
	case "int8", "bigint", "bigserial", "serial8":
		return "bigint"
	case "float4", "real":
		return "real"
	case "float8", "double precision", "float":
		return "double precision"
	case "numeric", "decimal":
		return "numeric"
	case "bool", "boolean":
		return "boolean"
	case "varchar", "character varying":
		return "varchar"
	case "bpchar", "char", "character":
		return "char"
	case "timestamp", "timestamp without time zone":
		return "timestamp"
	case "timestamptz", "timestamp with time zone":
		return "timestamptz"
	case "time", "time without time zone":
		return "time"
	case "timetz", "time with time zone":
		return "timetz"
	case "varbit", "bit varying":
		return "varbit"
	}
	return s
}

// parseType reads a type as the source spells it or as format_type prints
// it. It does not validate: unknown names are kept, lower-cased, so that
// user-defined types compare by name.
func parseType(s string) pgType {
	s = strings.ToLower(strings.TrimSpace(s))
	var t pgType
	for {
		switch {
		case strings.HasSuffix(s, "[]"):
			s = strings.TrimSpace(strings.TrimSuffix(s, "[]"))
			t.Array = true
			continue
		case strings.HasSuffix(s, " array"):
			s = strings.TrimSpace(strings.TrimSuffix(s, " array"))
			t.Array = true
			continue
		}
		break
	}
	if open := strings.IndexByte(s, '('); open >= 0 {
		if end := strings.IndexByte(s[open:], ')'); end >= 0 {
			for _, m := range strings.Split(s[open+1:open+end], ",") {
				n, err := strconv.Atoi(strings.TrimSpace(m))
				if err != nil {
					continue
				}
				t.Mods = append(t.Mods, n)
			}
			s = s[:open] + " " + s[open+end+1:]
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	if rest, ok := strings.CutPrefix(s, "interval"); ok && (rest == "" || rest[0] == ' ') {
		t.Base = "interval"
		t.Fields = strings.TrimSpace(rest)
		return t
	}
	s = strings.TrimPrefix(s, "pg_catalog.")
	s = strings.Trim(s, `"`)
	s = canonicalType(s)
	// User types compare by their own name: the source may qualify them and
	// format_type omits a schema that is on the search_path.
	if i := strings.LastIndexByte(s, '.'); i >= 0 && !strings.Contains(s, " ") {
		s = strings.Trim(s[i+1:], `"`)
	}
	t.Base = s
	return t
}

func (t pgType) String() string {
	s := t.Base
	if t.Fields != "" {
		s += " " + t.Fields
	}
	if len(t.Mods) > 0 {
		parts := make([]string, len(t.Mods))
		for i, m := range t.Mods {
			parts[i] = strconv.Itoa(m)
		}
		s += "(" + strings.Join(parts, ",") + ")"
	}
	if t.Array {
		s += "[]"
	}
	return s
}

// intWidth orders the integer types by range; 0 means not an integer type.
func intWidth(base string) int {
	switch base {
	case "smallint":
		return 1
	case "integer":
		return 2
	case "bigint":
		return 3
	}
	return 0
}

// fits reports whether every value of the source type src can be stored in
// a target column of type dst and read back with the same text. When not, it
// says why in a phrase that follows "values may not fit: ...".
func fits(src, dst pgType) (bool, string) {
	if src.Array != dst.Array {
		return false, "one is an array and the other is not"
	}
	if src.Base != dst.Base {
		switch {
		case intWidth(src.Base) > 0 && intWidth(dst.Base) > 0:
			if intWidth(dst.Base) >= intWidth(src.Base) {
				return true, ""
			}
			return false, "the target integer type is narrower"
		case src.Base == "real" && dst.Base == "double precision":
			return true, ""
		case (src.Base == "varchar" || src.Base == "text") && dst.Base == "text":
			return true, ""
		case src.Base == "text" && dst.Base == "varchar":
			if dst.Mods == nil {
				return true, ""
			}
			return false, "text is unbounded but the target has a length limit"
		}
		return false, "the types differ"
	}
	switch src.Base {
	case "varchar", "varbit":
		// A longer limit holds every shorter value unchanged.
		if dst.Mods == nil {
			return true, ""
		}
		if src.Mods == nil || dst.Mods[0] < src.Mods[0] {
			return false, "the target length limit is shorter"
		}
		return true, ""
	case "char", "bit":
		// A char(n) value is blank-padded to n; a different n changes it.
		// Unbounded bpchar keeps the padded value as is.
		if dst.Mods == nil || (src.Mods != nil && src.Mods[0] == dst.Mods[0]) ||
			(src.Mods == nil && dst.Mods[0] == 1) {
			return true, ""
		}
		return false, "the target length differs"
	case "numeric":
		if dst.Mods == nil {
			return true, ""
		}
		if src.Mods == nil {
			return false, "the source numeric is unconstrained but the target's is not"
		}
		sp, ss := src.Mods[0], scale(src.Mods)
		dp, ds := dst.Mods[0], scale(dst.Mods)
		if ds != ss {
			// A different scale rounds or pads the digits after the point.
			return false, "the scales differ"
		}
		if dp < sp {
			return false, "the target precision is smaller"
		}
		return true, ""
	case "timestamp", "timestamptz", "time", "timetz", "interval":
		if src.Fields != dst.Fields && dst.Fields != "" {
			return false, "the interval fields differ"
		}
		// Fractional-second precision: unbounded means 6.
		if dst.Mods == nil {
			return true, ""
		}
		if src.Mods == nil || dst.Mods[len(dst.Mods)-1] < src.Mods[len(src.Mods)-1] {
			return false, "the target keeps fewer fractional digits"
		}
		return true, ""
	}
	// Any other type: the same type with the same (or no) modifiers.
	if dst.Mods == nil || equalInts(src.Mods, dst.Mods) {
		return true, ""
	}
	return false, "the type modifiers differ"
}

func scale(mods []int) int {
	if len(mods) > 1 {
		return mods[1]
	}
	return 0
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fitError is the preflight message for a column whose target type cannot
// hold the source's values exactly.
func fitError(table, col, srcType, dstType, why string) error {
	return fmt.Errorf("column %s.%s is %s on the target but %s on the source: values may not fit (%s); alter the target column to %s",
		table, col, dstType, srcType, why, srcType)
}

// TypeFits reports whether every value of PostgreSQL type src is stored
// exactly by a column of type dst (both as format_type or the user spells
// them), and when not why, in a phrase that follows "values may not fit":
// the rule the preflight applies, for the schema package's diff and for a
// change of a source column's type that a stream follows.
func TypeFits(src, dst string) (bool, string) { return fits(parseType(src), parseType(dst)) }
