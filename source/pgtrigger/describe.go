package pgtrigger

import (
	"context"
	"fmt"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
)

// tableInfo is a source table as the catalog describes it.
type tableInfo struct {
	oid   uint32
	table *sluice.Table
	// json marks the columns whose type is json or jsonb (or a domain over
	// either): their text is taken from the changelog row verbatim (see
	// jsonFields), and row_to_json writes both SQL NULL and the JSON value
	// null in them as null, which the capture trigger tells apart for the
	// nullable ones (see jsonNullable).
	json []bool
	// array marks the columns whose type is an array (or a domain over
	// one): row_to_json writes an array as a JSON array, which starts at 1
	// in every dimension, so the capture trigger records the bounds of
	// those whose lower bounds are not all 1 (see arrayColumns).
	array []bool
	// parts are a partitioned table's partitions, at every level: a
	// TRUNCATE of one fires only its own triggers.
	parts []partition
	// partitioned says the table is partitioned (it may have no
	// partitions yet).
	partitioned bool
}

// partition is one partition of a partitioned table.
type partition struct {
	oid  uint32
	name string // qualified and quoted, as regclass prints it
}

// partitions lists the partitions of table oid at every level, but
// foreign ones (which cannot have TRUNCATE triggers); none for a table
// that is not partitioned.
func partitions(ctx context.Context, q queryer, oid uint32) ([]partition, error) {
	rows, err := q.Query(ctx, `SELECT p.relid::oid, p.relid::regclass::text FROM pg_partition_tree($1) p JOIN pg_class c ON c.oid = p.relid
		WHERE p.level > 0 AND c.relkind IN ('r', 'p') ORDER BY p.level, p.relid::regclass::text`, oid)
	if err != nil {
		return nil, fmt.Errorf("list partitions of %d: %w", oid, err)
	}
	var out []partition
	for rows.Next() {
		var p partition
		if err := rows.Scan(&p.oid, &p.name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list partitions of %d: %w", oid, err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func (t *tableInfo) keyNames() []string { return t.table.KeyNames() }

// jsonNullable names the json and jsonb columns that may hold SQL NULL, in
// column order: the capture trigger records, for each of them that the row
// image shows as null, whether it is SQL NULL or the JSON value null. A NOT
// NULL column (every key column is one) can only hold the JSON value.
func (t *tableInfo) jsonNullable() []string {
	var out []string
	for i, c := range t.table.Columns {
		if t.json[i] && c.Nullable {
			out = append(out, c.Name)
		}
	}
	return out
}

// arrayColumns names the array columns, in column order: the capture
// trigger records the bounds of each of them whose lower bounds are not
// all 1.
func (t *tableInfo) arrayColumns() []string {
	var out []string
	for i, c := range t.table.Columns {
		if t.array[i] {
			out = append(out, c.Name)
		}
	}
	return out
}

// lookupTable describes a source table: its columns in attnum order, with
// the type as format_type spells it, and its primary key in key order. It
// fails with a message naming the table and the fix when the table is
// missing or has no primary key.
func lookupTable(ctx context.Context, q queryer, db string, name sluice.TableName) (*tableInfo, error) {
	oid, _, err := pgcatalog.Table(ctx, q, db, name)
	if err != nil {
		return nil, err
	}
	// A domain has its base type's output function, however deep the
	// domains over domains, and row_to_json looks through domains too.
	// So does typcategory, which a domain copies from its base type; the
	// vector types of the catalogs (int2vector, oidvector) are 'A' too but
	// print as no array does, and are left out.
	rows, err := q.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
			t.typoutput IN ('json_out'::regproc, 'jsonb_out'::regproc),
			t.typcategory = 'A' AND t.typoutput = 'array_out'::regproc
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("describe source table %s: %w", name, err)
	}
	info := &tableInfo{oid: oid, table: &sluice.Table{Name: name}}
	for rows.Next() {
		var c sluice.Column
		var isJSON, isArray bool
		if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &isJSON, &isArray); err != nil {
			rows.Close()
			return nil, fmt.Errorf("describe source table %s: %w", name, err)
		}
		info.table.Columns = append(info.table.Columns, c)
		info.json = append(info.json, isJSON)
		info.array = append(info.array, isArray)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe source table %s: %w", name, err)
	}
	colls, err := pgcatalog.Collations(ctx, q, name, oid)
	if err != nil {
		return nil, err
	}
	enums, err := pgcatalog.EnumLabels(ctx, q, name, oid)
	if err != nil {
		return nil, err
	}
	for i, c := range info.table.Columns {
		info.table.Columns[i].Collation = colls[c.Name]
		info.table.Columns[i].Enum = enums[c.Name]
	}
	// A generated column is captured like any other: row_to_json of an
	// AFTER trigger's row holds its computed value.
	gen, err := pgcatalog.GeneratedColumns(ctx, q, name, oid)
	if err != nil {
		return nil, err
	}
	for _, g := range gen {
		if i := info.table.ColumnIndex(g.Name); i >= 0 {
			info.table.Columns[i].Generated = g.Generated
		}
	}
	if info.parts, err = partitions(ctx, q, oid); err != nil {
		return nil, fmt.Errorf("describe source table %s: %w", name, err)
	}
	// Leaves refuses a foreign partition, whose rows change on another
	// server.
	leaves, err := pgcatalog.Leaves(ctx, q, name, oid)
	if err != nil {
		return nil, err
	}
	info.partitioned = leaves != nil
	keys, err := pgcatalog.PrimaryKey(ctx, q, name, oid)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("table %s has no primary key; sluice needs one to apply changes idempotently: add one", name)
	}
	for _, k := range keys {
		i := info.table.ColumnIndex(k)
		if i < 0 {
			return nil, fmt.Errorf("source table %s: primary key column %s not among its columns", name, k)
		}
		info.table.Key = append(info.table.Key, i)
	}
	return info, nil
}
