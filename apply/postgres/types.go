package postgres

import (
	"fmt"

	"github.com/sluice-cdc/sluice/coltype"
)

// pgType is a column type as coltype.ParsePostgres reads it: its one base
// name, modifiers, interval fields and array dimensions.
type pgType = coltype.Type

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
func TypeFits(src, dst string) (bool, string) {
	return fits(coltype.ParsePostgres(src), coltype.ParsePostgres(dst))
}
