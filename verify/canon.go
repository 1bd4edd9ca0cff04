// Package verify owns `sluice verify`: proving that a target holds exactly
// the source's rows, while a stream runs, with only hashes crossing the
// link. Each table is split into primary-key ranges; each range is hashed
// inside both databases (a count and an order-independent sum of per-row
// hashes of a canonical form of each row); a range that differs is split
// again down to a few keys, whose rows are then compared key by key.
package verify

import (
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
)

// Dialect is the SQL dialect of one side of a comparison.
type Dialect int

const (
	PostgreSQL Dialect = iota + 1
	MySQL              // MySQL and MariaDB
)

func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("dialect(%d)", int(d))
}

// CanonColumn is what CanonExpr needs to know of one column on one side.
type CanonColumn struct {
	// Dialect is this side's.
	Dialect Dialect
	// Ident is the column's quoted name in Dialect.
	Ident string
	// Type is this side's column type as its catalog spells it
	// (PostgreSQL's format_type, MySQL's information_schema COLUMN_TYPE).
	Type string
	// Source is the source's column (Type in SourceDialect's spelling). On
	// the source side it is the column itself.
	Source        sluice.Column
	SourceDialect Dialect
}

// CanonExpr returns an SQL expression in c.Dialect whose value is the
// column's canonical text: NULL for NULL, otherwise a text that is equal on
// both sides exactly when sluice, writing the source's value to the target,
// would have written it faithfully. Values are compared at the precision
// the source stores (a FLOAT at float32, a timestamp at its declared
// fraction, in UTC), JSON by value and bytes exactly.
//
// PostgreSQL expressions assume the session settings of
// keyrange.PGSettings; MySQL ones keyrange.MySession.
func CanonExpr(c CanonColumn) (string, error) {
	// Same-engine forms; the cross-engine canonical forms replace this.
	switch c.Dialect {
	case PostgreSQL:
		return "(" + c.Ident + ")::text", nil
	case MySQL:
		t := strings.ToLower(c.Type)
		if strings.Contains(t, "binary") || strings.Contains(t, "blob") {
			return "HEX(" + c.Ident + ")", nil
		}
		return "CAST(" + c.Ident + " AS CHAR)", nil
	}
	return "", fmt.Errorf("column %s: no canonical form for dialect %v", c.Ident, c.Dialect)
}
