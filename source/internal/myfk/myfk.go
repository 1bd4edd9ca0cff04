// Package myfk reads a MySQL or MariaDB source's foreign keys from its
// catalog, for the readers of both MySQL source modes: InnoDB logs no row
// its foreign-key actions change (in the binlog or to triggers), so sluice
// carries the actions out on the target from these definitions.
package myfk

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice"
)

// Querier is what Read needs of a connection or pool.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// foreignKeysSQL lists the foreign keys of the schemas in its IN list
// (%s), and those referencing them, a row per column in column order.
// REFERENTIAL_CONSTRAINTS has the rules, KEY_COLUMN_USAGE the columns.
const foreignKeysSQL = `SELECT rc.CONSTRAINT_SCHEMA, rc.CONSTRAINT_NAME, rc.TABLE_NAME, rc.DELETE_RULE, rc.UPDATE_RULE,
	k.COLUMN_NAME, k.REFERENCED_TABLE_SCHEMA, k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME
FROM information_schema.REFERENTIAL_CONSTRAINTS rc
JOIN information_schema.KEY_COLUMN_USAGE k ON k.CONSTRAINT_SCHEMA = rc.CONSTRAINT_SCHEMA
	AND k.CONSTRAINT_NAME = rc.CONSTRAINT_NAME AND k.TABLE_NAME = rc.TABLE_NAME
WHERE k.REFERENCED_TABLE_NAME IS NOT NULL AND (rc.CONSTRAINT_SCHEMA IN (%[1]s) OR k.REFERENCED_TABLE_SCHEMA IN (%[1]s))
ORDER BY rc.CONSTRAINT_SCHEMA, rc.TABLE_NAME, rc.CONSTRAINT_NAME, k.ORDINAL_POSITION`

// Read returns the foreign keys whose table or referenced table is one of
// tables (schema-qualified), as the catalog defines them.
func Read(ctx context.Context, q Querier, tables []sluice.TableName) ([]sluice.ForeignKey, error) {
	var schemas []string
	for _, t := range tables {
		if !slices.Contains(schemas, t.Schema) {
			schemas = append(schemas, t.Schema)
		}
	}
	if len(schemas) == 0 {
		return nil, nil
	}
	args := make([]any, len(schemas))
	marks := make([]string, len(schemas))
	for i, s := range schemas {
		args[i], marks[i] = s, "?"
	}
	rows, err := q.QueryContext(ctx, fmt.Sprintf(foreignKeysSQL, strings.Join(marks, ", ")), append(args, args...)...)
	if err != nil {
		return nil, fmt.Errorf("read the source's foreign keys from information_schema: %w", err)
	}
	defer rows.Close()
	var out []sluice.ForeignKey
	for rows.Next() {
		var schema, name, table, del, upd, col, refSchema, refTable, refCol string
		if err := rows.Scan(&schema, &name, &table, &del, &upd, &col, &refSchema, &refTable, &refCol); err != nil {
			return nil, fmt.Errorf("read the source's foreign keys: %w", err)
		}
		t := sluice.TableName{Schema: schema, Name: table}
		if n := len(out); n > 0 && out[n-1].Name == name && out[n-1].Table == t {
			out[n-1].Columns = append(out[n-1].Columns, col)
			out[n-1].RefColumns = append(out[n-1].RefColumns, refCol)
			continue
		}
		f := sluice.ForeignKey{Name: name, Table: t, Columns: []string{col},
			RefTable: sluice.TableName{Schema: refSchema, Name: refTable}, RefColumns: []string{refCol}}
		if f.OnDelete, err = action(del); err == nil {
			f.OnUpdate, err = action(upd)
		}
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", f, err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the source's foreign keys: %w", err)
	}
	out = slices.DeleteFunc(out, func(f sluice.ForeignKey) bool {
		return !slices.Contains(tables, f.Table) && !slices.Contains(tables, f.RefTable)
	})
	// In an order of Go's, whatever the catalog's collation sorts by.
	slices.SortFunc(out, func(a, b sluice.ForeignKey) int {
		return cmp.Or(strings.Compare(a.Table.Schema, b.Table.Schema), strings.Compare(a.Table.Name, b.Table.Name), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// action reads a rule of REFERENTIAL_CONSTRAINTS.
func action(rule string) (sluice.FKAction, error) {
	switch strings.ToUpper(rule) {
	case "RESTRICT", "NO ACTION":
		return sluice.FKNoAction, nil
	case "CASCADE":
		return sluice.FKCascade, nil
	case "SET NULL":
		return sluice.FKSetNull, nil
	case "SET DEFAULT":
		return sluice.FKSetDefault, nil
	}
	return 0, fmt.Errorf("unknown foreign key rule %q", rule)
}
