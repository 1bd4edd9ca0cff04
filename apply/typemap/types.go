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

	"github.com/sluice-cdc/sluice/coltype"
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

// parse reads a type as the engine spells it, with coltype's parser of
// that engine: PostgreSQL's format_type ("character varying(40)",
// "timestamp(3) with time zone", "integer[]"), MySQL's COLUMN_TYPE
// ("int(10) unsigned", "enum('a','b')", "datetime(6)"). An interval with a
// field restriction keeps it in its base name: "interval year to month"
// holds no TIME value, so the map must not take it for an interval.
func parse(e Engine, s string) colType {
	read := coltype.ParseMySQL
	if e == Postgres {
		read = coltype.ParsePostgres
	}
	c := read(s)
	return colType{base: c.Name(), mods: c.Mods, unsigned: c.Unsigned, array: c.Array, labels: c.Members}
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
