package mysql

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice"
)

// Key collations.
//
// The target finds the row an upsert updates through its unique indexes,
// and compares key values there under the key columns' collations. A
// collation that holds as equal two keys the source keeps apart ('a' and
// 'A' under a _ci collation, 'e' and 'é' under an accent-insensitive one,
// 'a' and 'a ' under any PAD SPACE one, MariaDB's utf8mb4_bin included)
// makes two source rows one target row. On the primary key, INSERT … ON
// DUPLICATE KEY UPDATE of the second overwrites the first and nothing
// fails; on a unique secondary index the upsert's guard fails the batch,
// which stops the stream midway. So before any data moves, every column of the source's primary key and of the target's
// unique indexes must compare on the target at least as strictly as on the
// source, unless the setting accepts the merge.

// allowMergeFlag is the setting that accepts key collations which merge
// keys, as the operator sets it.
const allowMergeFlag = "--allow-collation-merge"

// allowCollationMerge reports whether preflight accepts key columns whose
// target collation merges keys the source keeps distinct
// (Config.AllowCollationMerge).
func (t *Target) allowCollationMerge() bool { return t.cfg.AllowCollationMerge }

// keyRules says how check judges the collations of key columns.
type keyRules struct {
	server     string // "MySQL" or "MariaDB": which byte-exact collation a fix names
	allowMerge bool
}

// keyColumn is a source column that is a key on the target.
type keyColumn struct {
	col   int    // index in the source columns
	roles string // what makes it a key, e.g. "primary key, unique index `email`"
	pk    bool   // part of the primary key
}

// keyColumns returns the source columns that are keys on the target: the
// source's primary key, and the columns of the target's unique indexes
// that the source has, in source column order.
func keyColumns(src *sluice.Table, indexes map[string][]string, indexOrder []string) []keyColumn {
	roles := map[int][]string{}
	for _, k := range src.Key {
		roles[k] = append(roles[k], "primary key")
	}
	for _, name := range indexOrder {
		if name == "PRIMARY" {
			continue // the source's primary key, or a mismatch reported already
		}
		for _, col := range indexes[name] {
			for i, sc := range src.Columns {
				if strings.EqualFold(sc.Name, col) {
					roles[i] = append(roles[i], "unique index "+quoteIdent(name))
				}
			}
		}
	}
	var out []keyColumn
	for i := range src.Columns {
		if r, ok := roles[i]; ok {
			out = append(out, keyColumn{col: i, roles: strings.Join(r, ", "), pk: slices.Contains(src.Key, i)})
		}
	}
	return out
}

// keyCollationErrors refuses every key column whose target collation may
// hold as equal two values the source keeps distinct, naming the column,
// both collations, how the target's merges values, and the fix.
func keyCollationErrors(src *sluice.Table, display string, byName map[string]*targetColumn, indexes map[string][]string, indexOrder []string, rules keyRules) []error {
	if rules.allowMerge {
		return nil
	}
	var errs []error
	for _, k := range keyColumns(src, indexes, indexOrder) {
		sc := src.Columns[k.col]
		tc := byName[strings.ToLower(sc.Name)]
		if tc == nil || tc.collation == "" {
			// Missing (reported already), or binary or not a string: its
			// values compare by bytes or by value.
			continue
		}
		if sc.Collation != "" && sameCollation(sc.Collation, tc.collation) {
			continue // the same rules on both sides
		}
		merges := collationMerges(tc.collation, strings.EqualFold(tc.dataType, "char"))
		if len(merges) == 0 {
			continue // byte-exact: at least as strict as any source
		}
		consequence := "the upsert of one would silently overwrite the other's row"
		if !k.pk {
			consequence = "writing the second would collide with the first on the index and stop the stream"
		}
		exact := exactCollation(rules.server, tc.charset)
		charset := tc.charset
		if exact == "" {
			// MySQL has a byte-exact collation of utf8mb4 only.
			charset, exact = "utf8mb4", "utf8mb4_0900_bin"
		}
		fix := fmt.Sprintf("ALTER TABLE %s MODIFY %s %s CHARACTER SET %s COLLATE %s", display, quoteIdent(sc.Name), tc.colType, charset, exact)
		if !tc.nullable {
			fix += " NOT NULL"
		}
		var err error
		if sc.Collation == "" {
			err = fmt.Errorf("column %s.%s (%s) would merge rows the source keeps apart: the source compares its values byte-exact, but the target's collation %s is %s, so two source keys that differ only so would be one key on the target and %s; "+
				"make the column byte-exact with %s (keeping its default and other attributes), or, if no two source keys differ only so, accept the merge with %s",
				display, sc.Name, k.roles, tc.collation, joinAnd(merges), consequence, fix, allowMergeFlag)
		} else {
			err = fmt.Errorf("column %s.%s (%s) would merge rows the source keeps apart: the source compares its values under %s but the target under %s, a different collation (%s), so two keys the source's keeps apart can be equal under the target's and %s; "+
				"make the column byte-exact with %s, or give it the source's collation (COLLATE %s), keeping its default and other attributes, or, if no two source keys are equal under %s, accept the merge with %s",
				display, sc.Name, k.roles, sc.Collation, tc.collation, joinAnd(merges), consequence, fix, sc.Collation, tc.collation, allowMergeFlag)
		}
		errs = append(errs, err)
	}
	return errs
}

// collationMerges says how a MySQL-family collation holds as equal strings
// whose bytes differ: nil for a byte-exact collation. char reports a CHAR
// column, whose values lose their trailing spaces whatever the collation
// (the type check requires its source column to be CHAR too, or a type
// without trailing spaces), so PAD SPACE adds no merge there.
//
// The rules follow the collations' names, which say them: _bin compares
// code points (bytes, for valid text), _ci ignores case, _ai or a _ci
// without _as ignores accents, and every collation is PAD SPACE except
// binary, MariaDB's nopad ones and MySQL 8's UCA 9.0.0 (_0900_) ones.
func collationMerges(name string, char bool) []string {
	n := strings.ToLower(name)
	noPad := n == "binary" || strings.Contains(n, "nopad") || strings.Contains(n, "_0900_")
	var merges []string
	switch {
	case n == "binary" || strings.HasSuffix(n, "_bin"):
	case strings.HasSuffix(n, "_ci"):
		merges = append(merges, "case-insensitive ('a' = 'A')")
		if !strings.Contains(n, "_as_") {
			merges = append(merges, "accent-insensitive ('e' = 'é')")
		}
	default:
		// _cs, _as_cs and language-specific collations compare by weights,
		// under which distinct characters can weigh the same.
		merges = append(merges, "linguistic (distinct characters can compare equal)")
	}
	if !noPad && !char {
		merges = append(merges, "PAD SPACE (trailing spaces are ignored: 'a' = 'a ')")
	}
	return merges
}

// sameCollation reports whether two collation names are the same
// collation: names are case-insensitive, and utf8 is utf8mb3.
func sameCollation(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(s)
		if rest, ok := strings.CutPrefix(s, "utf8_"); ok {
			return "utf8mb3_" + rest
		}
		return s
	}
	return norm(a) == norm(b)
}

// exactCollation names the byte-exact (binary, NO PAD) collation of a
// character set on the server, or "" when it has none.
func exactCollation(server, charset string) string {
	switch {
	case charset == "":
		return ""
	case server == "MariaDB":
		return charset + "_nopad_bin"
	case charset == "utf8mb4":
		return "utf8mb4_0900_bin"
	}
	return ""
}

// joinAnd joins phrases as "a, b and c".
func joinAnd(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
