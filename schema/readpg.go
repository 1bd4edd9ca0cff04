package schema

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
)

// PGQuerier is a PostgreSQL connection, pool or transaction.
type PGQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pgIdent quotes a table name for PostgreSQL; an empty schema resolves
// through the search_path.
func pgIdent(n sluice.TableName) string {
	if n.Schema == "" {
		return pgx.Identifier{n.Name}.Sanitize()
	}
	return pgx.Identifier{n.Schema, n.Name}.Sanitize()
}

// ReadPostgres reads a table's definition from a PostgreSQL catalog; nil
// when the table does not exist.
func ReadPostgres(ctx context.Context, q PGQuerier, name sluice.TableName) (*Table, error) {
	var oid uint32
	var schema, rel string
	err := q.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')`, pgIdent(name)).Scan(&oid, &schema, &rel)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the catalog of table %s: %w", name, err)
	}
	t := &Table{Name: sluice.TableName{Schema: schema, Name: rel}}
	if name.Schema == "" {
		t.Name.Schema = ""
	}
	if err := readPGColumns(ctx, q, oid, t); err != nil {
		return nil, fmt.Errorf("read the columns of table %s: %w", name, err)
	}
	if err := readPGKeys(ctx, q, oid, t); err != nil {
		return nil, fmt.Errorf("read the keys and indexes of table %s: %w", name, err)
	}
	if err := readPGForeignKeys(ctx, q, oid, t); err != nil {
		return nil, fmt.Errorf("read the foreign keys of table %s: %w", name, err)
	}
	return t, nil
}

// pgColumnsSQL describes a table's columns: the type (and, for an array,
// its element type) where it is not built in, its enum labels or domain.
const pgColumnsSQL = `SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
	coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attgenerated::text, a.attidentity::text,
	CASE WHEN a.attcollation <> 0 AND a.attcollation <> et.typcollation AND a.attcollation <> t.typcollation THEN
		CASE WHEN cn.nspname = 'pg_catalog' THEN quote_ident(co.collname) ELSE quote_ident(cn.nspname) || '.' || quote_ident(co.collname) END
	ELSE '' END,
	et.typtype::text,
	CASE WHEN etn.nspname IN ('pg_catalog', 'information_schema') THEN '' ELSE quote_ident(etn.nspname) || '.' || quote_ident(et.typname) END,
	ARRAY(SELECT e.enumlabel::text FROM pg_enum e WHERE e.enumtypid = et.oid ORDER BY e.enumsortorder),
	CASE WHEN et.typtype = 'd' THEN format_type(et.typbasetype, et.typtypmod) ELSE '' END,
	et.typnotnull,
	ARRAY(SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c WHERE c.contypid = et.oid AND c.contype = 'c' ORDER BY c.conname)
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type et ON et.oid = CASE WHEN t.typcategory = 'A' AND t.typelem <> 0 THEN t.typelem ELSE t.oid END
JOIN pg_namespace etn ON etn.oid = et.typnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

func readPGColumns(ctx context.Context, q PGQuerier, oid uint32, t *Table) error {
	rows, err := q.Query(ctx, pgColumnsSQL, oid)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c Column
		var def, generated, identity, kind, domainBase string
		var domainNotNull bool
		var checks []string
		if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &def, &generated, &identity, &c.Collation,
			&kind, &c.UserType, &c.Labels, &domainBase, &domainNotNull, &checks); err != nil {
			return err
		}
		if c.UserType != "" {
			c.Kind = kind
		}
		if kind == "d" {
			c.Domain = &Domain{Base: domainBase, NotNull: domainNotNull, Constraints: checks}
		}
		if len(c.Labels) == 0 {
			c.Labels = nil
		}
		switch {
		case generated == "s":
			c.Generated, c.Stored = def, true
		case identity != "":
			c.AutoIncrement = true
		case def != "":
			if v, ok := pgConstant(def); ok {
				c.Default = &v
			} else if !isNullDefault(def) {
				c.DefaultExpr = def
			}
		}
		t.Columns = append(t.Columns, c)
	}
	return rows.Err()
}

var (
	pgLiteralRe = regexp.MustCompile(`^'((?:[^']|'')*)'(?:::[a-z_ ."\[\]()0-9,]+)?$`)
	pgNumberRe  = regexp.MustCompile(`^\(?(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)\)?(?:::[a-z_ ."\[\]()0-9,]+)?$`)
	pgNullRe    = regexp.MustCompile(`^NULL(?:::[a-z_ ."\[\]()0-9,]+)?$`)
)

// pgConstant reads a default expression that is a constant, as
// pg_get_expr prints it ('abc'::text, 42, (-1), true, '2024-01-01'::date),
// into the value's text; ok is false for any other expression.
func pgConstant(expr string) (string, bool) {
	expr = strings.TrimSpace(expr)
	if m := pgLiteralRe.FindStringSubmatch(expr); m != nil {
		return strings.ReplaceAll(m[1], "''", "'"), true
	}
	if m := pgNumberRe.FindStringSubmatch(expr); m != nil {
		return m[1], true
	}
	switch expr {
	case "true", "false":
		return expr, true
	}
	return "", false
}

func isNullDefault(expr string) bool { return pgNullRe.MatchString(strings.TrimSpace(expr)) }

const pgIndexesSQL = `SELECT ic.relname, i.indisprimary, i.indisunique,
	EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid AND c.contype = 'u'),
	am.amname,
	i.indexprs IS NOT NULL OR i.indpred IS NOT NULL OR i.indnkeyatts <> i.indnatts OR 0 = ANY (i.indkey::int2[]),
	ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(n, o)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
		WHERE k.o <= i.indnkeyatts ORDER BY k.o),
	pg_get_indexdef(i.indexrelid)
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_am am ON am.oid = ic.relam
WHERE i.indrelid = $1 AND i.indisvalid
ORDER BY ic.relname`

func readPGKeys(ctx context.Context, q PGQuerier, oid uint32, t *Table) error {
	rows, err := q.Query(ctx, pgIndexesSQL, oid)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ix Index
		var primary bool
		if err := rows.Scan(&ix.Name, &primary, &ix.Unique, &ix.Constraint, &ix.Method, &ix.Partial, &ix.Columns, &ix.Definition); err != nil {
			return err
		}
		if primary {
			t.PrimaryKey = ix.Columns
			continue
		}
		t.Indexes = append(t.Indexes, ix)
	}
	return rows.Err()
}

const pgForeignKeysSQL = `SELECT c.conname,
	ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, o) JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.o),
	rn.nspname, r.relname,
	ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY k(n, o) JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.o),
	c.confdeltype::text, c.confupdtype::text
FROM pg_constraint c
JOIN pg_class r ON r.oid = c.confrelid
JOIN pg_namespace rn ON rn.oid = r.relnamespace
WHERE c.conrelid = $1 AND c.contype = 'f'
ORDER BY c.conname`

// pgActions are pg_constraint's action codes.
var pgActions = map[string]string{"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}

func readPGForeignKeys(ctx context.Context, q PGQuerier, oid uint32, t *Table) error {
	rows, err := q.Query(ctx, pgForeignKeysSQL, oid)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var fk ForeignKey
		var del, upd string
		if err := rows.Scan(&fk.Name, &fk.Columns, &fk.RefTable.Schema, &fk.RefTable.Name, &fk.RefColumns, &del, &upd); err != nil {
			return err
		}
		fk.OnDelete, fk.OnUpdate = pgActions[del], pgActions[upd]
		t.ForeignKeys = append(t.ForeignKeys, fk)
	}
	return rows.Err()
}
