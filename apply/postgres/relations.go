package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

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
	ident := tableIdent(name)
	if p := t.pre; p != nil {
		if fks, ok := p.fks[ident]; ok {
			delete(p.fks, ident)
			return fks, nil
		}
	}
	var out []sluice.TableName
	err := t.reading(ctx, func() error {
		rows, err := t.conn.Query(ctx, foreignKeysSQL, ident)
		if err != nil {
			return err
		}
		out, err = scanTableNames(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read foreign keys of target table %s: %w", name, err)
	}
	return out, nil
}

// foreignKeysSQL lists the tables a foreign key joins to a table, either
// way.
const foreignKeysSQL = `SELECT n.nspname, c.relname FROM pg_constraint f
	JOIN pg_class c ON c.oid = CASE WHEN f.conrelid = to_regclass($1) THEN f.confrelid ELSE f.conrelid END
	JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE f.contype = 'f' AND (f.conrelid = to_regclass($1) OR f.confrelid = to_regclass($1))`

// scanTableNames reads rows of (schema, name).
func scanTableNames(rows pgx.Rows) ([]sluice.TableName, error) {
	defer rows.Close()
	var out []sluice.TableName
	for rows.Next() {
		var n sluice.TableName
		if err := rows.Scan(&n.Schema, &n.Name); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
