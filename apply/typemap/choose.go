package typemap

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/coltype"
)

// TypeOptions is what TargetType needs to know of a source column besides
// its type.
type TypeOptions struct {
	// Labels are the labels of a PostgreSQL enum type, in order (the
	// column's type names the enum type).
	Labels []string
	// JSON marks a MariaDB LONGTEXT column that holds JSON (MariaDB's JSON
	// is an alias of LONGTEXT with a json_valid check).
	JSON bool
	// Indexed marks a column of the primary key or of an index the target
	// gets: a MySQL index key holds at most 3072 bytes, so an unbounded
	// string cannot be one.
	Indexed bool
}

// mysqlKeyBytes is the longest InnoDB index key, in bytes (utf8mb4: 4 a
// character).
const mysqlKeyBytes = 3072

// TargetType chooses the type of the column a target gets when sluice
// creates it for a source column of type srcType: between engines, the
// first of the type's candidates whose every value is the source's exactly
// (Column accepts the pair), so that no value is narrowed or altered on
// the way; within one engine, the source's own type. A source type no
// target type holds exactly is refused, with the reason and the choices
// left to the user.
func TargetType(from, to Engine, srcType string, opt TypeOptions) (string, error) {
	if from == to {
		return srcType, nil
	}
	s := parse(from, srcType)
	var cands []string
	var why error
	switch {
	case from == Postgres && to == MySQL:
		cands, why = pgToMyCandidates(s, opt)
	case from == MySQL && to == Postgres:
		cands, why = myToPgCandidates(s, opt)
	default:
		return "", fmt.Errorf("no type map from %s to %s", from, to)
	}
	if why != nil {
		return "", why
	}
	src := SourceColumn(srcType, opt.Labels)
	var errs []error
	for _, c := range cands {
		if _, err := Column(from, to, src, c); err == nil {
			return c, nil
		} else {
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
		}
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("no %s type holds every %s value exactly", to, srcType)
	}
	return "", fmt.Errorf("no %s type holds every %s value exactly (%w)", to, srcType, errors.Join(errs...))
}

// SourceColumn is a source column of type typ, for Column, where only
// its type is known, and for a PostgreSQL enum type its labels, in order.
func SourceColumn(typ string, labels []string) sluice.Column {
	c := sluice.Column{Type: typ}
	if len(labels) > 0 {
		quoted := make([]string, len(labels))
		for i, l := range labels {
			quoted[i] = "'" + strings.ReplaceAll(l, "'", "''") + "'"
		}
		c.Enum = strings.Join(quoted, ",") // as sluice.Column.Enum spells them
	}
	return c
}

// pgToMyCandidates lists the MySQL types a PostgreSQL type may become, best
// first.
func pgToMyCandidates(s colType, opt TypeOptions) ([]string, error) {
	unbounded := func(what string) error {
		if opt.Indexed {
			return refuse("a %s key column has no length limit, and a MySQL index key holds at most %d bytes", fmt.Sprintf("declare the source column varchar(n) with n ≤ %d, or create the target table yourself (sluice schema plan prints the rest of its DDL)", mysqlKeyBytes/4), what, mysqlKeyBytes)
		}
		return nil
	}
	if s.array {
		if err := unbounded("array"); err != nil {
			return nil, err
		}
		return []string{"longtext"}, nil
	}
	if len(opt.Labels) > 0 {
		q := make([]string, len(opt.Labels))
		for i, l := range opt.Labels {
			q[i] = "'" + strings.ReplaceAll(l, "'", "''") + "'"
		}
		// An ENUM where the type map accepts one, else the labels' text.
		return []string{"enum(" + strings.Join(q, ",") + ")", "longtext"}, unbounded("enum")
	}
	switch s.base {
	case "smallint":
		return []string{"smallint"}, nil
	case "integer":
		return []string{"int"}, nil
	case "bigint":
		return []string{"bigint"}, nil
	case "numeric":
		if s.mods == nil {
			return nil, refuse("numeric without precision and scale holds values no MySQL DECIMAL can (DECIMAL has at most 65 digits, 30 after the point)",
				"declare the source column numeric(p,s) with p ≤ 65 and s ≤ 30, or create the target table yourself with the column as longtext, which keeps each value's text exactly (sluice schema plan prints the rest of its DDL)")
		}
		p, sc := s.mod(0, 0), s.mod(1, 0)
		if p > 65 || sc > 30 || sc < 0 || sc > p {
			return nil, refuse("numeric(%d,%d) holds values no MySQL DECIMAL can (at most 65 digits, 30 after the point)",
				"declare the source column within decimal(65,30), or create the target table yourself with the column as longtext, which keeps each value's text exactly", p, sc)
		}
		return []string{fmt.Sprintf("decimal(%d,%d)", p, sc)}, nil
	case "real":
		return []string{"float"}, nil
	case "double precision":
		return []string{"double"}, nil
	case "boolean":
		return []string{"tinyint(1)"}, nil
	case "varchar", "char":
		n := s.mod(0, -1)
		if n < 0 {
			if err := unbounded(s.base); err != nil {
				return nil, err
			}
			return []string{"longtext"}, nil
		}
		if opt.Indexed && 4*n > mysqlKeyBytes {
			return nil, refuse("a %s(%d) key column can hold %d bytes, more than a MySQL index key (%d bytes)",
				fmt.Sprintf("declare the source column %s(n) with n ≤ %d, or create the target table yourself (sluice schema plan prints the rest of its DDL)", s.base, mysqlKeyBytes/4), s.base, n, 4*n, mysqlKeyBytes)
		}
		switch {
		case s.base == "char" && n <= 255:
			return []string{fmt.Sprintf("char(%d)", n)}, nil
		case n <= 255 || opt.Indexed:
			return []string{fmt.Sprintf("varchar(%d)", n)}, nil
		case int64(4*n) <= coltype.MySQLStringBytes("text"):
			// Long strings go off the row: MySQL limits a row's VARCHARs
			// to 65,535 bytes together.
			return []string{"text"}, nil
		}
		return []string{"mediumtext", "longtext"}, nil
	case "text":
		if err := unbounded("text"); err != nil {
			return nil, err
		}
		return []string{"longtext"}, nil
	case "bytea":
		if err := unbounded("bytea"); err != nil {
			return nil, err
		}
		return []string{"longblob"}, nil
	case "uuid":
		return []string{"char(36)"}, nil
	case "date":
		return []string{"date"}, nil
	case "timestamp", "timestamptz":
		return []string{fmt.Sprintf("datetime(%d)", s.mod(0, 6))}, nil
	case "time":
		return []string{fmt.Sprintf("time(%d)", s.mod(0, 6))}, nil
	case "json", "jsonb":
		if err := unbounded(s.base); err != nil {
			return nil, err
		}
		return []string{"json"}, nil
	}
	// Every other type (interval, timetz, inet, money, bit, xml, …) is
	// kept as its PostgreSQL text form.
	if err := unbounded(s.base); err != nil {
		return nil, err
	}
	return []string{"longtext"}, nil
}

// myToPgCandidates lists the PostgreSQL types a MySQL type may become, best
// first.
func myToPgCandidates(s colType, opt TypeOptions) ([]string, error) {
	if bits := coltype.MySQLIntBits(s.base); bits > 0 {
		if s.unsigned {
			bits++
		}
		switch {
		case bits <= 16:
			return []string{"smallint"}, nil // tinyint(1) too: boolean would refuse 2
		case bits <= 32:
			return []string{"integer"}, nil
		case bits <= 64:
			return []string{"bigint"}, nil
		}
		return []string{"numeric(20,0)"}, nil
	}
	switch s.base {
	case "decimal":
		return []string{fmt.Sprintf("numeric(%d,%d)", s.mod(0, 10), s.mod(1, 0))}, nil
	case "float":
		return []string{"real"}, nil
	case "double":
		return []string{"double precision"}, nil
	case "char", "varchar":
		return []string{fmt.Sprintf("varchar(%d)", s.mod(0, 1))}, nil
	case "tinytext", "text", "mediumtext", "longtext":
		if opt.JSON {
			return []string{"json", "text"}, nil
		}
		return []string{"text"}, nil
	case "json":
		return []string{"json"}, nil
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		return []string{"bytea"}, nil
	case "bit":
		return []string{fmt.Sprintf("bit(%d)", s.mod(0, 1))}, nil
	case "date":
		return []string{"date"}, nil
	case "datetime":
		return []string{fmt.Sprintf("timestamp(%d) without time zone", s.mod(0, 0))}, nil
	case "timestamp":
		return []string{fmt.Sprintf("timestamp(%d) with time zone", s.mod(0, 0))}, nil
	case "time":
		// MySQL TIME spans ±838 hours: an interval holds them all.
		return []string{"interval"}, nil
	case "year":
		return []string{"smallint"}, nil
	case "enum", "set":
		return []string{"text"}, nil
	case "uuid":
		return []string{"uuid", "text"}, nil
	case "inet4", "inet6":
		return []string{"text"}, nil
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection":
		return nil, refuse("%s values (MySQL's internal geometry form) have no exact PostgreSQL type in sluice's type map",
			"create the target table yourself with a column for them, or leave the table out of --tables (sluice schema plan prints the rest of its DDL)", s.base)
	}
	return []string{"text"}, nil
}
