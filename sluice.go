// Package sluice holds the value types every part of sluice shares: a
// Change to one row of a Table, the Position a reader can resume from, and the
// row Values carried between a source and a target. It imports nothing of
// sluice's own so that readers, targets, the controller and the checkpoint
// store can all depend on it without depending on each other.
package sluice

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"
)

// Op is what a change does to its row.
type Op uint8

const (
	// OpInsert adds a row; Change.Row is the full new image.
	OpInsert Op = iota + 1
	// OpUpdate changes a row; Change.Row is the new image and Change.Key the
	// key the row had before (it differs from the new key when the update
	// changed the primary key).
	OpUpdate
	// OpDelete removes the row whose key is Change.Key.
	OpDelete
	// OpProgress changes no row: the reader has moved past source log that
	// holds no change of the streamed tables (other tables' changes, an
	// idle source) and Change.Pos says where. Table, Key and Row are nil.
	// The stream checkpoints it like a change, so that a quiet stream's
	// position keeps up with the source and the source may release its
	// log: a reader acknowledges nothing the target does not hold.
	OpProgress
	// OpTruncate removes every row of Table (a TRUNCATE on the source);
	// Key and Row are nil. The target applies it in order with the
	// stream's other changes.
	OpTruncate
	// OpSchema changes no row: the source changed Table's definition (a
	// DDL). Table is the new definition, which the changes after it use;
	// Schema says what changed. The stream applies it alone, every lane
	// drained on either side, and the target follows it (or the stream
	// stops there, when it cannot be followed). Key and Row are nil.
	OpSchema
)

func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpProgress:
		return "progress"
	case OpTruncate:
		return "truncate"
	case OpSchema:
		return "schema change"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// TableName names a table. Schema is the PostgreSQL schema or, for
// MySQL-family servers, the database; it may be empty where the connection's
// default applies.
type TableName struct {
	Schema string
	Name   string
}

func (t TableName) String() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// ParseTableName reads "schema.table" or "table".
func ParseTableName(s string) (TableName, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return TableName{}, fmt.Errorf("empty table name")
	}
	schema, name, ok := strings.Cut(s, ".")
	if !ok {
		return TableName{Name: s}, nil
	}
	if schema == "" || name == "" || strings.Contains(name, ".") {
		return TableName{}, fmt.Errorf("table name %q: want table or schema.table", s)
	}
	return TableName{Schema: schema, Name: name}, nil
}

// Column describes one column of a source table.
type Column struct {
	Name string
	// Type is the source's own spelling of the column type, e.g.
	// "numeric(12,2)", "timestamp with time zone", "varchar(64)".
	Type string
	// Nullable reports whether the source allows NULL.
	Nullable bool
	// Collation says when two values of a string column are equal on the
	// source. Empty: only when their bytes are (binary and non-string
	// columns, a deterministic PostgreSQL collation). Otherwise the
	// collation's name, e.g. "utf8mb4_general_ci": the source may treat
	// distinct bytes as equal, and a key column must keep distinct on the
	// target whatever the source keeps distinct.
	Collation string
	// Generated is a generated column's expression as the source's
	// catalog prints it (GENERATION_EXPRESSION, pg_get_expr), "" for a
	// plain column. The source computes the column's values; a target
	// whose own column is generated never writes them, and compares the
	// two expressions to warn when they differ.
	Generated string
	// Enum is, for a column of a PostgreSQL enum type (or of a domain over
	// one), the type's labels in their order, spelled as a MySQL ENUM's
	// member list ('sad','ok'); empty for any other type. The cross-engine
	// type map accepts a MySQL ENUM target only with the same labels. A
	// string, not a slice, so that a Column stays comparable.
	Enum string
}

// Table describes a replicated table as the source sees it. Readers create
// one Table per table and share the pointer among the Changes they emit, so
// a Change's Row can be read against Table.Columns.
type Table struct {
	Name    TableName
	Columns []Column
	// Key holds the indexes in Columns of the primary key, in key order.
	Key []int
	// Omitted are the source's generated columns that its rows leave out
	// (PostgreSQL's logical replication sends none; Generated says how
	// the source computes each). A target can hold them only as columns
	// it generates itself: a plain target column would never be written.
	Omitted []Column
}

// KeyNames returns the primary key column names in key order.
func (t *Table) KeyNames() []string {
	names := make([]string, len(t.Key))
	for i, k := range t.Key {
		names[i] = t.Columns[k].Name
	}
	return names
}

// ColumnIndex returns the index of the named column, or -1.
func (t *Table) ColumnIndex(name string) int {
	for i, c := range t.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// Value is one column's value, carried in the source's canonical text form
// (PostgreSQL's output function for the column type; MySQL's text protocol).
// Text form keeps every type exact between servers of the same engine and
// lets the target cast it with the server's own input function.
type Value struct {
	Text string
	Null bool
	// Unchanged marks a value the source did not send (PostgreSQL's unchanged
	// TOAST columns): the target must keep what it has, never overwrite it.
	Unchanged bool
}

// Null is the SQL NULL value.
var Null = Value{Null: true}

// Text returns a non-NULL value.
func Text(s string) Value { return Value{Text: s} }

func (v Value) String() string {
	switch {
	case v.Unchanged:
		return "(unchanged)"
	case v.Null:
		return "NULL"
	}
	return v.Text
}

// Row is a row image aligned with Table.Columns, or a key aligned with
// Table.Key.
type Row []Value

// KeyOf extracts the primary key values of a full row image.
func (t *Table) KeyOf(r Row) Row {
	k := make(Row, len(t.Key))
	for i, c := range t.Key {
		k[i] = r[c]
	}
	return k
}

// String renders a key for error messages, e.g. (id=7, region=eu).
func (t *Table) FormatKey(k Row) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, c := range t.Key {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t.Columns[c].Name)
		b.WriteByte('=')
		if i < len(k) {
			b.WriteString(k[i].String())
		}
	}
	b.WriteByte(')')
	return b.String()
}

// FKAction is what a foreign key does to the rows that reference a row
// when that row is deleted or its referenced columns change.
type FKAction uint8

const (
	// FKNoAction is NO ACTION or RESTRICT: the source refuses the change
	// while rows reference the row, so it changes no other row.
	FKNoAction FKAction = iota
	// FKCascade deletes the referencing rows (ON DELETE) or gives them
	// the referenced columns' new values (ON UPDATE).
	FKCascade
	// FKSetNull sets the referencing columns to NULL.
	FKSetNull
	// FKSetDefault sets the referencing columns to their defaults.
	FKSetDefault
)

func (a FKAction) String() string {
	switch a {
	case FKNoAction:
		return "NO ACTION"
	case FKCascade:
		return "CASCADE"
	case FKSetNull:
		return "SET NULL"
	case FKSetDefault:
		return "SET DEFAULT"
	}
	return fmt.Sprintf("fkaction(%d)", uint8(a))
}

// ForeignKey is a foreign key as the source's catalog defines it: Columns
// of Table reference RefColumns of RefTable (its primary key or a unique
// key), in that order.
type ForeignKey struct {
	// Name is the constraint's name.
	Name               string
	Table              TableName
	Columns            []string
	RefTable           TableName
	RefColumns         []string
	OnDelete, OnUpdate FKAction
}

// Acts reports whether the foreign key changes other rows when a
// referenced row is deleted or its referenced columns change.
func (f ForeignKey) Acts() bool { return f.OnDelete != FKNoAction || f.OnUpdate != FKNoAction }

// String names the constraint for messages, e.g. "foreign key
// orders_customer_fk of shop.orders (customer_id) → shop.customers (id)".
func (f ForeignKey) String() string {
	return fmt.Sprintf("foreign key %s of %s (%s) → %s (%s)", f.Name, f.Table, strings.Join(f.Columns, ", "), f.RefTable, strings.Join(f.RefColumns, ", "))
}

// Change is one row change read from a source.
type Change struct {
	Table *Table
	Op    Op
	// FKChecksOff marks a change a source session made with its foreign
	// key checks off (MySQL's foreign_key_checks = 0, which the binlog
	// records with each rows event): it fired no foreign-key action.
	// (Beside Op, so that the two share one word: every change is copied
	// into a lane's queue.)
	FKChecksOff bool
	// Key is the primary key the row had before the change (update, delete),
	// aligned with Table.Key. Nil for inserts.
	Key Row
	// Row is the full new image (insert, update), aligned with
	// Table.Columns. Nil for deletes.
	Row Row
	// Time is when the source committed (or captured) the change; zero when
	// the source does not say. It measures apply lag.
	Time time.Time
	// Pos is where a reader resumes to read the changes after this one:
	// once Pos is checkpointed, this change and every earlier one are applied.
	Pos Position
	// Schema says what an OpSchema change did to the table's definition.
	Schema *SchemaChange
}

// SchemaChange is a change of a table's definition on the source, as a
// reader saw it in the source's log.
type SchemaChange struct {
	// Before is the definition the changes before it used.
	Before *Table
	Edits  []SchemaEdit
	// Statement is the source's DDL as its log carries it (binlog); empty
	// where the log carries none (PostgreSQL's logical replication).
	Statement string
}

// EditKind is what a SchemaEdit does.
type EditKind uint8

const (
	// AddColumn adds Column (in the new definition), holding Fill in the
	// rows that existed before the change.
	AddColumn EditKind = iota + 1
	// DropColumn drops Column (of the definition before).
	DropColumn
	// AlterColumnType changes Column's type from its type before to its
	// type in the new definition.
	AlterColumnType
	// SetNotNull and DropNotNull change whether Column may hold NULL.
	SetNotNull
	DropNotNull
	// CreateIndex and DropIndex create and drop a secondary index.
	CreateIndex
	DropIndex
	// RenameColumn renames Column to To: whether the target's column is
	// the source's renamed or another is not for sluice to guess, so the
	// stream stops there.
	RenameColumn
	// Unfollowable is a change sluice does not follow: Reason says what
	// and why; the stream stops there.
	Unfollowable
)

// SchemaEdit is one part of a SchemaChange.
type SchemaEdit struct {
	Kind   EditKind
	Column string
	// To is a renamed column's new name.
	To string
	// Fill is the value an added column holds in the rows that existed
	// before the change: its default when that is a constant, else NULL.
	// Volatile says the source gave those rows values of their own (a
	// default such as now(), random(), CURRENT_TIMESTAMP, computed per
	// row or at the DDL's time) that no row event carries.
	Fill     Value
	Volatile bool
	// Index is the index a CreateIndex or DropIndex concerns.
	Index *Index
	// Reason says why an Unfollowable change is not followed.
	Reason string
}

// Index is a secondary index of a table, as a SchemaEdit names it.
type Index struct {
	Name    string
	Columns []string
	Unique  bool
	// Definition is the source engine's own definition of an index with
	// expressions or a predicate (PostgreSQL's pg_get_indexdef), which a
	// target of the same engine takes as it is; empty for a plain one.
	Definition string
}

// NewKey returns the key the row has after the change: the old key for a
// delete, the new image's key for an insert or update, nil for a change of
// no single row (a truncate, a schema change, a progress marker).
func (c *Change) NewKey() Row {
	switch c.Op {
	case OpDelete:
		return c.Key
	case OpInsert, OpUpdate:
		return c.Table.KeyOf(c.Row)
	}
	return nil
}

// Size estimates the bytes a change holds in memory, for queue accounting:
// the Change itself, its rows' Value arrays and each string as the
// allocator rounds it (to 16 bytes: Go's size classes waste up to an
// eighth). An estimate that undercounts lets the queue hold more than
// --max-queue-bytes says; the counts here were checked against heap
// profiles of streams through large transactions.
func (c *Change) Size() int {
	n := changeBytes + allocBytes(len(c.Pos.Token))
	for _, v := range c.Row {
		n += valueBytes + allocBytes(len(v.Text))
	}
	for _, v := range c.Key {
		n += valueBytes + allocBytes(len(v.Text))
	}
	return n
}

const (
	changeBytes = int(unsafe.Sizeof(Change{}))
	valueBytes  = int(unsafe.Sizeof(Value{}))
)

// allocBytes is what the allocator takes for an n-byte string.
func allocBytes(n int) int {
	if n == 0 {
		return 0
	}
	return (n + 15) &^ 15
}

// Position is where a source reader can resume. Kind names the reader that
// wrote it ("pgtrigger", "pglogical", "binlog", …); Token is that reader's own
// encoding (a changelog snapshot window and id, an LSN, a GTID set or a
// file:offset), opaque to everything but the reader.
type Position struct {
	Kind  string
	Token string
}

// IsZero reports whether p is the empty position (start from now or from
// the beginning, as the reader defines).
func (p Position) IsZero() bool { return p.Kind == "" && p.Token == "" }

func (p Position) String() string {
	if p.IsZero() {
		return "(none)"
	}
	return p.Kind + ":" + p.Token
}

// ParsePosition reads the String form of a Position.
func ParsePosition(s string) (Position, error) {
	if s == "" || s == "(none)" {
		return Position{}, nil
	}
	kind, token, ok := strings.Cut(s, ":")
	if !ok || kind == "" {
		return Position{}, fmt.Errorf("position %q: want kind:token", s)
	}
	return Position{Kind: kind, Token: token}, nil
}

// Checkpoint is a stream's durable progress: every change at or before
// Position is committed on the target. Seq counts the stream's target
// commits; it orders the copy kept in the state file against the copy the
// target keeps inside its own transactions.
//
// With lanes, each lane's transactions write a checkpoint of their own
// (Lane, of Lanes): Position is the watermark that lane's commit makes
// true, and Last the position of the last change it applied, which may be
// past the watermark. After a crash the lanes' Last positions tell which
// of the changes past the watermark are on the target already, so that
// none is applied twice.
type Checkpoint struct {
	Stream   string
	Seq      uint64
	Position Position
	// Applied counts the source changes committed on the target so far.
	Applied uint64
	Time    time.Time
	// Lane is the lane that wrote the checkpoint, Lanes how many lanes
	// the stream ran (1 without lanes; 0 in a checkpoint from a sluice
	// before lanes kept their own).
	Lane, Lanes int
	// Last is the position of the last change the lane's transaction
	// applied; zero means Position.
	Last Position
	// Routing fingerprints how the stream routed changes to its lanes
	// when the lane wrote the checkpoint: after a crash, a lane's Last
	// says which changes it committed only under the same routing.
	Routing string
}

// TableError is an error about one table: log lines carry the table as a
// field of their own (see ErrTable). Its text is Err's, which names the
// table already.
type TableError struct {
	Table TableName
	Err   error
}

func (e *TableError) Error() string { return e.Err.Error() }
func (e *TableError) Unwrap() error { return e.Err }

// TableOf names the table, for errors.As through ErrTable.
func (e *TableError) TableOf() (TableName, bool) { return e.Table, true }

// ErrTable returns the table an error concerns: the first error in its
// chain with a TableOf method that names one (a *TableError, or a target's
// own error type).
func ErrTable(err error) (TableName, bool) {
	var te interface{ TableOf() (TableName, bool) }
	if errors.As(err, &te) {
		return te.TableOf()
	}
	return TableName{}, false
}
