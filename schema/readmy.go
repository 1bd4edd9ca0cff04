package schema

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"

	"github.com/sluice-cdc/sluice"
)

// MyQuerier is a MySQL connection or pool.
type MyQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ReadMySQL reads a table's definition from a MySQL or MariaDB server's
// information_schema; nil when the table does not exist. A name without a
// schema is in database db.
func ReadMySQL(ctx context.Context, q MyQuerier, f Flavor, db string, name sluice.TableName) (*Table, error) {
	schema := name.Schema
	if schema == "" {
		schema = db
	}
	t := &Table{Name: name}
	found := false
	err := queryRows(ctx, q, `SELECT TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND TABLE_TYPE = 'BASE TABLE'`,
		[]any{schema, name.Name}, func(rows *sql.Rows) error {
			var coll sql.NullString
			found = true
			if err := rows.Scan(&coll); err != nil {
				return err
			}
			t.Collation = coll.String
			t.Charset, _, _ = strings.Cut(coll.String, "_")
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read the catalog of table %s: %w", name, err)
	}
	if !found {
		return nil, nil
	}
	if err := readMyColumns(ctx, q, f, schema, t); err != nil {
		return nil, fmt.Errorf("read the columns of table %s: %w", name, err)
	}
	if err := readMyIndexes(ctx, q, schema, t); err != nil {
		return nil, fmt.Errorf("read the indexes of table %s: %w", name, err)
	}
	if err := readMyForeignKeys(ctx, q, schema, t); err != nil {
		return nil, fmt.Errorf("read the foreign keys of table %s: %w", name, err)
	}
	return t, nil
}

func queryRows(ctx context.Context, q MyQuerier, query string, args []any, each func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func readMyColumns(ctx context.Context, q MyQuerier, f Flavor, schema string, t *Table) error {
	err := queryRows(ctx, q, `SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE = 'YES', COLUMN_DEFAULT, EXTRA,
			COALESCE(CHARACTER_SET_NAME, ''), COALESCE(COLLATION_NAME, ''), COALESCE(GENERATION_EXPRESSION, '')
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`,
		[]any{schema, t.Name.Name}, func(rows *sql.Rows) error {
			var c Column
			var def sql.NullString
			var extra string
			if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &def, &extra, &c.Charset, &c.Collation, &c.Generated); err != nil {
				return err
			}
			x := strings.ToUpper(extra)
			c.AutoIncrement = strings.Contains(x, "AUTO_INCREMENT")
			if c.Generated != "" || strings.Contains(x, "GENERATED") && !strings.Contains(x, "DEFAULT_GENERATED") {
				c.Stored = strings.Contains(x, "STORED") || strings.Contains(x, "PERSISTENT")
			} else if def.Valid {
				c.Default, c.DefaultExpr = myDefault(f, def.String, strings.Contains(x, "DEFAULT_GENERATED"))
			}
			t.Columns = append(t.Columns, c)
			return nil
		})
	if err != nil || f != FlavorMariaDB {
		return err
	}
	// MariaDB's JSON is LONGTEXT with a json_valid check.
	return queryRows(ctx, q, `SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?`,
		[]any{schema, t.Name.Name}, func(rows *sql.Rows) error {
			var clause string
			if err := rows.Scan(&clause); err != nil {
				return err
			}
			if m := jsonValidRe.FindStringSubmatch(clause); m != nil {
				if c := t.Column(m[1]); c != nil && strings.EqualFold(c.Type, "longtext") {
					c.JSON = true
				}
			}
			return nil
		})
}

var (
	jsonValidRe = regexp.MustCompile("^json_valid\\(`((?:[^`]|``)+)`\\)$")
	myNumberRe  = regexp.MustCompile(`^-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$`)
)

// myDefault reads information_schema's COLUMN_DEFAULT: a constant's text,
// or an expression. MariaDB (since 10.2.7) quotes literals ('abc'), writes
// a NULL default as NULL and expressions bare (current_timestamp());
// MySQL 8 writes literals bare and marks expressions DEFAULT_GENERATED.
func myDefault(f Flavor, def string, generated bool) (*string, string) {
	if f != FlavorMariaDB {
		if generated {
			return nil, def
		}
		if strings.EqualFold(def, "CURRENT_TIMESTAMP") || strings.HasPrefix(strings.ToUpper(def), "CURRENT_TIMESTAMP(") {
			return nil, def
		}
		return &def, ""
	}
	switch {
	case def == "NULL":
		return nil, ""
	case len(def) >= 2 && def[0] == '\'' && def[len(def)-1] == '\'':
		v := unquoteMy(def[1 : len(def)-1])
		return &v, ""
	case myNumberRe.MatchString(def):
		return &def, ""
	}
	return nil, def
}

// unquoteMy undoes MariaDB's quoting of a literal inside its quotes (a
// doubled quote for a quote, and backslash escapes).
func unquoteMy(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' && i+1 < len(s) && s[i+1] == '\'':
			b.WriteByte('\'')
			i++
		case c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			case 'Z':
				b.WriteByte(26)
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func readMyIndexes(ctx context.Context, q MyQuerier, schema string, t *Table) error {
	return queryRows(ctx, q, `SELECT INDEX_NAME, NON_UNIQUE = 0, COLUMN_NAME, COALESCE(SUB_PART, 0), INDEX_TYPE
		FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX`,
		[]any{schema, t.Name.Name}, func(rows *sql.Rows) error {
			var name, method string
			var col sql.NullString
			var unique bool
			var sub int
			if err := rows.Scan(&name, &unique, &col, &sub, &method); err != nil {
				return err
			}
			if name == "PRIMARY" {
				t.PrimaryKey = append(t.PrimaryKey, col.String)
				return nil
			}
			ix := t.Index(name)
			if ix == nil {
				t.Indexes = append(t.Indexes, Index{Name: name, Unique: unique, Method: method})
				ix = &t.Indexes[len(t.Indexes)-1]
			}
			if !col.Valid {
				ix.Partial = true // a functional key part (MySQL 8)
				return nil
			}
			ix.Columns = append(ix.Columns, col.String)
			if sub > 0 && ix.Prefix == nil {
				ix.Prefix = make([]int, len(ix.Columns)-1, len(ix.Columns))
			}
			if ix.Prefix != nil {
				ix.Prefix = append(ix.Prefix, sub)
			}
			return nil
		})
}

func readMyForeignKeys(ctx context.Context, q MyQuerier, schema string, t *Table) error {
	return queryRows(ctx, q, `SELECT k.CONSTRAINT_NAME, k.COLUMN_NAME, k.REFERENCED_TABLE_SCHEMA, k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME,
			r.DELETE_RULE, r.UPDATE_RULE
		FROM information_schema.KEY_COLUMN_USAGE k
		JOIN information_schema.REFERENTIAL_CONSTRAINTS r
			ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME AND r.TABLE_NAME = k.TABLE_NAME
		WHERE k.TABLE_SCHEMA = ? AND k.TABLE_NAME = ? AND k.REFERENCED_TABLE_NAME IS NOT NULL
		ORDER BY k.CONSTRAINT_NAME, k.ORDINAL_POSITION`,
		[]any{schema, t.Name.Name}, func(rows *sql.Rows) error {
			var name, col, refSchema, refTable, refCol, del, upd string
			if err := rows.Scan(&name, &col, &refSchema, &refTable, &refCol, &del, &upd); err != nil {
				return err
			}
			n := len(t.ForeignKeys)
			if n == 0 || t.ForeignKeys[n-1].Name != name {
				ref := sluice.TableName{Schema: refSchema, Name: refTable}
				if refSchema == schema && t.Name.Schema == "" {
					ref.Schema = ""
				}
				t.ForeignKeys = append(t.ForeignKeys, ForeignKey{Name: name, RefTable: ref, OnDelete: del, OnUpdate: upd})
				n++
			}
			fk := &t.ForeignKeys[n-1]
			fk.Columns = append(fk.Columns, col)
			fk.RefColumns = append(fk.RefColumns, refCol)
			return nil
		})
}
