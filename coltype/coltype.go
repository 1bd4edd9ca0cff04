// Package coltype reads column types as each engine spells them, one
// parser per engine: PostgreSQL's format_type ("character varying(40)",
// "timestamp(3) with time zone", "integer[]") and MySQL's COLUMN_TYPE
// ("int(10) unsigned zerofill", "enum('a','b')", "datetime(6)"), or the
// user's spelling of either. The targets' preflights, the cross-engine
// type map and verify's canonical forms all read types here, so that they
// agree on what a type is; each keeps its own rules of what fits what.
// The tests' oracle (internal/dbtest) reads types on its own, on purpose.
package coltype

import (
	"strconv"
	"strings"
)

// Type is a column type reduced to its parts. The parsers do not
// validate: an unknown name is kept, lower-cased, so that user-defined
// types compare by name.
type Type struct {
	// Base is the one lower-case name of the type among its spellings
	// ("int4" and "integer" are "integer" on PostgreSQL; "integer" is
	// "int" on MySQL), without modifiers.
	Base string
	// Mods holds the numeric modifiers as written, e.g. [12 4] for
	// numeric(12,4); nil when there are none.
	Mods []int
	// Unsigned: a MySQL UNSIGNED (or SERIAL) type.
	Unsigned bool
	// Array: a PostgreSQL array type (integer[], integer ARRAY).
	Array bool
	// Fields is a PostgreSQL interval's field restriction, e.g.
	// "year to month".
	Fields string
	// Members holds a MySQL ENUM's or SET's members, their case kept.
	Members []string
	// Spelled is the type as given, trimmed and lower-cased.
	Spelled string
}

// Mod returns the i-th modifier, or def when the type has fewer.
func (t Type) Mod(i, def int) int {
	if i < len(t.Mods) {
		return t.Mods[i]
	}
	return def
}

// Name is Base with an interval's field restriction after it
// ("interval year to month"): a name that tells apart what holds
// different values.
func (t Type) Name() string {
	if t.Fields != "" {
		return t.Base + " " + t.Fields
	}
	return t.Base
}

// String spells the type from its parts: base, interval fields,
// members or modifiers, unsigned, [].
func (t Type) String() string {
	s := t.Base
	if t.Fields != "" {
		s += " " + t.Fields
	}
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
	if t.Array {
		s += "[]"
	}
	return s
}

// mods reads a modifier list "12, 4"; what is not a number is skipped.
func mods(inner string) []int {
	var out []int
	for _, m := range strings.Split(inner, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(m)); err == nil {
			out = append(out, n)
		}
	}
	return out
}
