// Package schema owns what sluice knows of a table's definition beyond the
// rows it streams: it reads a table's catalog from PostgreSQL or
// MySQL/MariaDB (columns with their types, nullability, constant defaults,
// collations, generated expressions; the primary key, unique keys,
// secondary indexes and foreign keys with their actions), generates the
// DDL that creates it on a target of either engine (types through the
// cross-engine type map, chosen so that every source value round-trips
// exactly), compares a source table with a target table (Diff), and turns a
// change of a source table's definition that a stream met into the
// statements that make the target follow it (Follower).
//
// Creating a target is split in two, as pgcopydb does: the tables with
// their primary keys before the initial copy, the unique keys, secondary
// indexes and foreign keys after it, so that the copy writes into tables
// with one index each. The steps are recorded on the target first
// (Journal), so that a run killed between the copy and the index build
// finishes the build when it starts again.
package schema

import (
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply/typemap"
)

// Engine is a database engine family (typemap's: "postgres", "mysql").
type Engine = typemap.Engine

const (
	Postgres = typemap.Postgres
	MySQL    = typemap.MySQL
)

// Table is a table's definition as sluice needs it.
type Table struct {
	Name    sluice.TableName `json:"name"`
	Columns []Column         `json:"columns"`
	// PrimaryKey names the primary key's columns in key order.
	PrimaryKey []string `json:"primary_key"`
	// Indexes are the secondary indexes, unique ones (and PostgreSQL
	// UNIQUE constraints) included, by name.
	Indexes     []Index      `json:"indexes,omitempty"`
	ForeignKeys []ForeignKey `json:"foreign_keys,omitempty"`
	// Charset and Collation are a MySQL table's defaults.
	Charset   string `json:"charset,omitempty"`
	Collation string `json:"collation,omitempty"`
}

// Column is one column of a Table.
type Column struct {
	Name string `json:"name"`
	// Type is the engine's own spelling: format_type on PostgreSQL,
	// information_schema's COLUMN_TYPE on MySQL.
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
	// Default is the column's default when it is a constant, in the
	// engine's text form of the value; nil when the column has none or it
	// is not a constant (DefaultExpr holds it then).
	Default *string `json:"default,omitempty"`
	// DefaultExpr is a default that is not a constant (now(),
	// CURRENT_TIMESTAMP, nextval(…)), as the engine prints it.
	DefaultExpr string `json:"default_expr,omitempty"`
	// Collation is the column's collation where it has one other than its
	// type's default (PostgreSQL: schema-qualified when not in
	// pg_catalog), or, on MySQL, every string column's COLLATION_NAME.
	Collation string `json:"collation,omitempty"`
	// Charset is a MySQL string column's character set.
	Charset string `json:"charset,omitempty"`
	// Generated is a generated column's expression ("" for others);
	// Stored whether its values are stored.
	Generated string `json:"generated,omitempty"`
	Stored    bool   `json:"stored,omitempty"`
	// Labels are the labels of a PostgreSQL enum type the column has (the
	// element type's, for an array of one).
	Labels []string `json:"labels,omitempty"`
	// UserType names a PostgreSQL type of the column that is not built in
	// (an enum, a domain, an extension's type), schema-qualified; Kind is
	// its pg_type.typtype ("e" enum, "d" domain, …) and Domain a domain's
	// definition (base type and constraints).
	UserType string  `json:"user_type,omitempty"`
	Kind     string  `json:"user_type_kind,omitempty"`
	Domain   *Domain `json:"domain,omitempty"`
	// JSON marks a MariaDB LONGTEXT column with a json_valid check (how
	// MariaDB declares a JSON column).
	JSON bool `json:"json,omitempty"`
	// AutoIncrement marks MySQL AUTO_INCREMENT and PostgreSQL identity
	// columns.
	AutoIncrement bool `json:"auto_increment,omitempty"`
}

// Domain is a PostgreSQL domain's definition.
type Domain struct {
	Base        string   `json:"base"` // format_type of the base type with the domain's modifier
	NotNull     bool     `json:"not_null,omitempty"`
	Constraints []string `json:"constraints,omitempty"` // pg_get_constraintdef of each CHECK
	Collation   string   `json:"collation,omitempty"`
}

// Index is a secondary index.
type Index struct {
	Name string `json:"name"`
	// Columns are the key columns in order; empty when the index has an
	// expression (Expression holds its definition then).
	Columns []string `json:"columns"`
	// Prefix holds, per column, a MySQL index's prefix length in
	// characters (0: the whole value); nil when none has one.
	Prefix []int `json:"prefix,omitempty"`
	Unique bool  `json:"unique,omitempty"`
	// Constraint marks a PostgreSQL UNIQUE constraint (which a foreign key
	// may reference) rather than a bare unique index.
	Constraint bool `json:"constraint,omitempty"`
	// Method is the access method: btree, hash, gin, gist (PostgreSQL);
	// BTREE, HASH, FULLTEXT, SPATIAL (MySQL).
	Method string `json:"method,omitempty"`
	// Definition is the engine's own definition (pg_get_indexdef), for a
	// PostgreSQL target of a PostgreSQL source.
	Definition string `json:"definition,omitempty"`
	// Partial marks an index with expressions, a predicate (WHERE) or
	// INCLUDE columns: it is created between PostgreSQL servers only.
	Partial bool `json:"partial,omitempty"`
}

// ForeignKey is a foreign key of a table.
type ForeignKey struct {
	Name       string           `json:"name"`
	Columns    []string         `json:"columns"`
	RefTable   sluice.TableName `json:"references"`
	RefColumns []string         `json:"ref_columns"`
	// OnDelete and OnUpdate are the actions: CASCADE, SET NULL, SET
	// DEFAULT, RESTRICT or NO ACTION.
	OnDelete string `json:"on_delete"`
	OnUpdate string `json:"on_update"`
}

// Column returns the named column, or nil.
func (t *Table) Column(name string) *Column {
	for i := range t.Columns {
		if t.Columns[i].Name == name {
			return &t.Columns[i]
		}
	}
	return nil
}

// Index returns the named index, or nil.
func (t *Table) Index(name string) *Index {
	for i := range t.Indexes {
		if t.Indexes[i].Name == name {
			return &t.Indexes[i]
		}
	}
	return nil
}

// keyColumn reports whether a column is in the primary key or a unique
// index: where equal values must be equal bytes.
func (t *Table) keyColumn(col string) bool {
	for _, k := range t.PrimaryKey {
		if k == col {
			return true
		}
	}
	for _, ix := range t.Indexes {
		if !ix.Unique {
			continue
		}
		for _, c := range ix.Columns {
			if c == col {
				return true
			}
		}
	}
	return false
}

// TargetName is how a target names a source table: a MySQL target keeps
// tables in the database its connection names, and a PostgreSQL target fed
// from MySQL (whose "schema" is the source database) in its search_path,
// so only PostgreSQL to PostgreSQL keeps the schema (as the type map's
// target does).
func TargetName(from, to Engine, n sluice.TableName) sluice.TableName {
	if from == Postgres && to == Postgres {
		return n
	}
	return sluice.TableName{Name: n.Name}
}

// Flavor is a target server's dialect within its engine: "PostgreSQL",
// "MariaDB" or "MySQL".
type Flavor string

const (
	FlavorPostgres Flavor = "PostgreSQL"
	FlavorMariaDB  Flavor = "MariaDB"
	FlavorMySQL    Flavor = "MySQL"
)

// FlavorOf tells the flavor from an engine and the server's version
// string (SELECT VERSION()).
func FlavorOf(e Engine, version string) Flavor {
	switch {
	case e == Postgres:
		return FlavorPostgres
	case strings.Contains(strings.ToLower(version), "mariadb"):
		return FlavorMariaDB
	}
	return FlavorMySQL
}

// exactCollation is the byte-exact (binary, NO PAD) utf8mb4 collation of a
// MySQL-family target: keys equal on the target only when their bytes are,
// as on a PostgreSQL source (whose collations are deterministic).
func exactCollation(f Flavor) string {
	if f == FlavorMySQL {
		return "utf8mb4_0900_bin"
	}
	return "utf8mb4_nopad_bin"
}

// Error is a refusal to create or follow a table, naming the object, the
// cause and the fix; several are joined.
type Error struct {
	Table  sluice.TableName
	Column string // "" when the refusal concerns the table
	Err    error
}

func (e *Error) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("column %s.%s: %v", e.Table, e.Column, e.Err)
	}
	return fmt.Sprintf("table %s: %v", e.Table, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// TableOf names the table, for sluice.ErrTable.
func (e *Error) TableOf() (sluice.TableName, bool) { return e.Table, true }
