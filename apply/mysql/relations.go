package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
)

// ForeignKeys returns the tables a foreign key joins to the target table
// name, either way (the tables it references and those referencing it), as
// the target names them. Lanes keep tables joined by a foreign key in one
// lane, in source order, so that a parent and its child are not applied
// out of order by different connections.
func (t *Target) ForeignKeys(ctx context.Context, name sluice.TableName) ([]sluice.TableName, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return nil, err
	}
	if pt := t.prefetchedTableOf(name); pt != nil && !pt.takenByFKs {
		pt.takenByFKs = true
		return pt.fks, nil
	}
	schema := name.Schema
	if schema == "" {
		schema = t.database
	}
	var sb, nb strings.Builder
	quoteString(&sb, schema)
	quoteString(&nb, name.Name)
	var out []sluice.TableName
	err := t.reading(ctx, func() error {
		rows, err := t.conn.QueryContext(ctx, foreignKeysSQL(sb.String(), nb.String()))
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = t.scanTableNames(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read foreign keys of target table %s: %w", name, err)
	}
	return out, nil
}

// foreignKeysSQL lists the tables a foreign key joins to a table, either
// way; schema and name are SQL expressions.
func foreignKeysSQL(schema, name string) string {
	return "SELECT DISTINCT REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = " + schema +
		" AND TABLE_NAME = " + name + " AND REFERENCED_TABLE_NAME IS NOT NULL" +
		" UNION SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE REFERENCED_TABLE_SCHEMA = " + schema +
		" AND REFERENCED_TABLE_NAME = " + name
}

// scanTableNames reads rows of (schema, name); the connection's database
// is left out.
func (t *Target) scanTableNames(rows *sql.Rows) ([]sluice.TableName, error) {
	var out []sluice.TableName
	for rows.Next() {
		var n sluice.TableName
		if err := rows.Scan(&n.Schema, &n.Name); err != nil {
			return nil, err
		}
		if n.Schema == t.database {
			n.Schema = ""
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
