// Package typemap carries values between engines: it decides, for a source
// column of one engine and a target column of another, whether every value
// the source can hold is represented exactly on the target, and how its
// text form changes on the way (PostgreSQL's 't' is MySQL's 1, bytea's
// '\x00ff' is a BLOB's raw bytes, a MySQL TIMESTAMP is a timestamptz in UTC).
// Pairs that could lose or alter values are refused before any data moves,
// naming the column and the reason; single values that a type pair cannot
// carry (a zero date, 'infinity', NaN, a NUL byte in text) are refused when
// they arrive, naming the row's key. Key columns whose target collation
// would hold equal two keys the source keeps apart are refused by the inner
// target's own preflight, which sees each source column's Collation as the
// mapped tables carry it unchanged.
package typemap

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/internal/mysqltype"
)

// Engine names a database engine family.
type Engine string

const (
	Postgres Engine = "postgres"
	MySQL    Engine = "mysql"
)

// colType is a column type reduced to what the mapping needs.
type colType struct {
	base     string // canonical lower-case name
	mods     []int  // (n) or (p,s); nil when absent
	unsigned bool
	array    bool
	labels   []string // enum/set labels
	enum     bool     // a PostgreSQL enum (labels from sluice.Column.Enum)
}

func (t colType) mod(i, def int) int {
	if i < len(t.mods) {
		return t.mods[i]
	}
	return def
}

// parse reads a type as the engine spells it: PostgreSQL's format_type
// ("character varying(40)", "timestamp(3) with time zone", "integer[]"),
// MySQL's COLUMN_TYPE ("int(10) unsigned", "enum('a','b')", "datetime(6)").
func parse(e Engine, s string) colType {
	spelled := strings.TrimSpace(s)
	s = strings.ToLower(spelled)
	var t colType
	if strings.HasSuffix(s, "[]") {
		t.array = true
		s = strings.TrimSuffix(s, "[]")
	}
	for _, suf := range []string{" unsigned", " zerofill"} {
		if strings.Contains(s, suf) {
			t.unsigned = t.unsigned || suf == " unsigned"
			s = strings.ReplaceAll(s, suf, "")
		}
	}
	name := s
	if open := strings.IndexByte(s, '('); open >= 0 {
		end := strings.LastIndexByte(s, ')')
		if end > open {
			inner := s[open+1 : end]
			name = strings.TrimSpace(s[:open]) + s[end+1:]
			if strings.HasPrefix(strings.TrimSpace(s[:open]), "enum") || strings.HasPrefix(strings.TrimSpace(s[:open]), "set") {
				// From the type as spelled: labels keep their case.
				o, e := strings.IndexByte(spelled, '('), strings.LastIndexByte(spelled, ')')
				if o >= 0 && e > o {
					t.labels = mysqltype.Members(spelled[o+1 : e])
				}
			} else {
				for _, m := range strings.Split(inner, ",") {
					if n, err := strconv.Atoi(strings.TrimSpace(m)); err == nil {
						t.mods = append(t.mods, n)
					}
				}
			}
		}
	}
	name = strings.Join(strings.Fields(name), " ")
	if e == Postgres {
		t.base = PGBaseName(name)
	} else {
		t.base = name
		if name == "bool" || name == "boolean" {
			t.base, t.mods = "tinyint", []int{1}
		}
		if name == "integer" {
			t.base = "int"
		}
		if name == "dec" || name == "numeric" || name == "fixed" {
			t.base = "decimal"
		}
		if name == "real" {
			t.base = "double"
		}
	}
	return t
}

// PGBaseName is the one name of a PostgreSQL type among its spellings
// ("int4", "int" and "integer" are "integer"), its modifiers removed.
func PGBaseName(s string) string {
	switch s {
	case "int2", "smallint":
		return "smallint"
	case "int4", "int", "integer":
		return "integer"
	case "int8", "bigint":
		return "bigint"
	case "float4", "real":
		return "real"
	case "float8", "double precision":
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
	case "bit varying", "varbit":
		return "varbit"
	}
	return s
}

func pgIntBits(base string) int {
	switch base {
	case "smallint":
		return 16
	case "integer":
		return 32
	case "bigint":
		return 64
	}
	return 0
}

// refusal is why a column pair is refused.
type refusal struct{ why, fix string }

func (r *refusal) Error() string { return r.why + ": " + r.fix }

func refuse(why, fix string, args ...any) *refusal {
	return &refusal{why: fmt.Sprintf(why, args...), fix: fix}
}
