package workload

import (
	"fmt"
	"strings"
)

// Engine is a database engine family. The values match daemon.Engine's, so
// a test converts one into the other with a plain conversion.
type Engine string

const (
	Postgres Engine = "postgres"
	// MySQL is the MySQL family; the harness runs MariaDB 10.11.
	MySQL Engine = "mysql"
)

// Type is a column's logical type. Each maps to one SQL type per engine,
// chosen so that every source → target pair is one sluice's type map
// accepts (docs/architecture.md, "Cross-engine type map").
type Type int

const (
	Int16       Type = iota + 1 // smallint
	Int32                       // integer / int
	Int64                       // bigint
	Uint64                      // numeric(20,0) / bigint unsigned (MariaDB sources), decimal(20,0)
	Float32                     // real / float
	Float64                     // double precision / double
	Decimal                     // numeric(p,s) / decimal(p,s)
	Timestamp                   // timestamp(6) / datetime(6)
	TimestampTZ                 // timestamptz(6) / timestamp(6) (MariaDB sources), datetime(6)
	Date                        // date
	Bytes                       // bytea / longblob
	Varchar                     // varchar(n)
	LongText                    // text / longtext
	Bool                        // boolean / tinyint(1)
	UUID                        // uuid / char(36)
	JSON                        // jsonb / json
	CorpusType                  // a type pair of the type-fidelity corpus (Column.Corpus)
)

// Column is one column of a workload table.
type Column struct {
	Name        string
	Type        Type
	Len         int // Varchar's length in characters
	Prec, Scale int // Decimal's precision and scale
	NotNull     bool
	Unique      bool
	Gen         *Generated // nil for a plain column (see generated.go)
	// Corpus is a Corpus column's type pair, whose values it takes.
	Corpus *CorpusPair
}

// Table is a workload table. Every key column is an integer: keys are
// chosen by the generator, never by the database.
type Table struct {
	Name    string
	Columns []Column
	Key     []int // indexes in Columns, in key order
	// Partitioning, when set, makes the table partitioned on a
	// PostgreSQL source (partition.go).
	Partitioning *Partitioning
	// ForeignKeys are the table's foreign keys (fk.go); fkGraph marks the
	// tables of the foreign-key graph, which only its steps write.
	ForeignKeys []ForeignKey
	fkGraph     bool
}

// Col returns the index of the named column, or -1.
func (t *Table) Col(name string) int {
	for i, c := range t.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

func (t *Table) isKey(i int) bool {
	for _, k := range t.Key {
		if k == i {
			return true
		}
	}
	return false
}

// Schema is the workload's tables. Source is the engine whose database the
// workload is written for; the SQL types of the other engine's tables depend
// on it (a MariaDB source's bigint unsigned is a PostgreSQL numeric(20,0),
// while a PostgreSQL source's numeric(20,0) is a MariaDB decimal(20,0)).
type Schema struct {
	Source Engine
	Tables []*Table
}

// The workload's tables:
//
//   - wl_items: a bigint key, a NOT NULL UNIQUE varchar the generator swaps
//     between rows, a counter, a large text PostgreSQL stores out of line
//     (TOAST) and a short text with awkward characters;
//   - wl_typed: a bigint key and one nullable column of every other type,
//     for edge values and NULL transitions;
//   - wl_lines: a composite (integer, smallint) key.
const (
	ItemsTable = "wl_items"
	TypedTable = "wl_typed"
	LinesTable = "wl_lines"
)

func newSchema(source Engine) *Schema {
	items := &Table{
		Name: ItemsTable,
		Columns: []Column{
			{Name: "id", Type: Int64, NotNull: true},
			{Name: "uk", Type: Varchar, Len: 40, NotNull: true, Unique: true},
			{Name: "n", Type: Int32},
			{Name: "body", Type: LongText},
			{Name: "note", Type: Varchar, Len: 64},
		},
		Key: []int{0},
	}
	typed := &Table{
		Name: TypedTable,
		Columns: []Column{
			{Name: "id", Type: Int64, NotNull: true},
			{Name: "i16", Type: Int16},
			{Name: "i32", Type: Int32},
			{Name: "i64", Type: Int64},
			{Name: "u64", Type: Uint64},
			{Name: "f32", Type: Float32},
			{Name: "f64", Type: Float64},
			{Name: "dec_wide", Type: Decimal, Prec: 65, Scale: 30},
			{Name: "dec_money", Type: Decimal, Prec: 7, Scale: 2},
			{Name: "ts", Type: Timestamp},
			{Name: "tstz", Type: TimestampTZ},
			{Name: "day", Type: Date},
			{Name: "bin", Type: Bytes},
			{Name: "txt", Type: Varchar, Len: 100},
			{Name: "flag", Type: Bool},
			{Name: "uid", Type: UUID},
			{Name: "doc", Type: JSON},
		},
		Key: []int{0},
	}
	lines := &Table{
		Name: LinesTable,
		Columns: []Column{
			{Name: "order_id", Type: Int32, NotNull: true},
			{Name: "line_no", Type: Int16, NotNull: true},
			{Name: "sku", Type: Varchar, Len: 32, NotNull: true},
			{Name: "qty", Type: Int32},
		},
		Key: []int{0, 1},
	}
	return &Schema{Source: source, Tables: []*Table{items, typed, lines}}
}

// Table returns the named table, or nil.
func (s *Schema) Table(name string) *Table {
	for _, t := range s.Tables {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// TableNames lists the tables' names, for sluice's --tables.
func (s *Schema) TableNames() []string {
	names := make([]string, len(s.Tables))
	for i, t := range s.Tables {
		names[i] = t.Name
	}
	return names
}

// DDL returns the statements that create the schema's tables in a
// database of engine e: the source's DDL when e is the source's engine
// (partitions included), else the target's for the pair source → e.
func (s *Schema) DDL(e Engine) []string {
	var out []string
	if s.Table(CorpusTable) != nil {
		out = CorpusSetup(s.Source, e)
	}
	for _, t := range s.Tables {
		var defs []string
		for _, c := range t.Columns {
			def := c.Name + " " + s.SQLType(e, c)
			if c.Gen != nil {
				def += c.Gen.clause(e)
			}
			if c.NotNull {
				def += " NOT NULL"
			}
			if c.Unique {
				def += " UNIQUE"
			}
			defs = append(defs, def)
		}
		keys := make([]string, len(t.Key))
		for j, k := range t.Key {
			keys[j] = t.Columns[k].Name
		}
		defs = append(defs, "PRIMARY KEY ("+strings.Join(keys, ", ")+")")
		for _, f := range t.ForeignKeys {
			defs = append(defs, fkDDL(t, f))
		}
		out = append(out, s.tableDDL(e, t, fmt.Sprintf("CREATE TABLE %s (%s)", t.Name, strings.Join(defs, ", ")))...)
	}
	for _, t := range s.Tables {
		out = append(out, generatedIndexes(e, t)...)
	}
	return out
}

// SQLType is column c's type in a database of engine e.
func (s *Schema) SQLType(e Engine, c Column) string {
	if c.Type == CorpusType {
		if e == s.Source {
			return c.Corpus.Source
		}
		return c.Corpus.Target
	}
	if e == Postgres {
		switch c.Type {
		case Int16:
			return "smallint"
		case Int32:
			return "integer"
		case Int64:
			return "bigint"
		case Uint64:
			return "numeric(20,0)"
		case Float32:
			return "real"
		case Float64:
			return "double precision"
		case Decimal:
			return fmt.Sprintf("numeric(%d,%d)", c.Prec, c.Scale)
		case Timestamp:
			return "timestamp(6)"
		case TimestampTZ:
			return "timestamptz(6)"
		case Date:
			return "date"
		case Bytes:
			return "bytea"
		case Varchar:
			return fmt.Sprintf("varchar(%d)", c.Len)
		case LongText:
			return "text"
		case Bool:
			return "boolean"
		case UUID:
			return "uuid"
		case JSON:
			return "jsonb"
		}
		panic(fmt.Sprintf("workload: no PostgreSQL type for %v", c.Type))
	}
	switch c.Type {
	case Int16:
		return "smallint"
	case Int32:
		return "int"
	case Int64:
		return "bigint"
	case Uint64:
		// bigint unsigned has no PostgreSQL equivalent but numeric(20,0),
		// which in turn is a decimal(20,0) on MariaDB.
		if s.Source == MySQL {
			return "bigint unsigned"
		}
		return "decimal(20,0)"
	case Float32:
		return "float"
	case Float64:
		return "double"
	case Decimal:
		return fmt.Sprintf("decimal(%d,%d)", c.Prec, c.Scale)
	case Timestamp:
		return "datetime(6)"
	case TimestampTZ:
		// A MariaDB source's TIMESTAMP; a PostgreSQL timestamptz lands in
		// datetime(6) (stored as UTC), whose range is not TIMESTAMP's
		// 1970–2038.
		if s.Source == MySQL {
			return "timestamp(6) NULL DEFAULT NULL"
		}
		return "datetime(6)"
	case Date:
		return "date"
	case Bytes:
		return "longblob"
	case Varchar:
		if c.Unique && s.Source == Postgres {
			// PostgreSQL's C collation keeps apart values MariaDB's
			// default collation merges ('a' = 'A' = 'a '); sluice refuses
			// such a unique key on the target unless it is byte-exact.
			return fmt.Sprintf("varchar(%d) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin", c.Len)
		}
		return fmt.Sprintf("varchar(%d)", c.Len)
	case LongText:
		return "longtext"
	case Bool:
		return "tinyint(1)"
	case UUID:
		return "char(36)"
	case JSON:
		return "json"
	}
	panic(fmt.Sprintf("workload: no MySQL type for %v", c.Type))
}
