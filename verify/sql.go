package verify

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

// spec is one side's SQL for one table: every query verify sends is built
// from it, so that the two sides hash the same canonical text.
type spec struct {
	dialect Dialect
	// table is the quoted table name; name is how errors name it.
	table string
	name  sluice.TableName
	// cols are the source's columns in source order (names and the
	// source's types), canon each one's canonical text on this side.
	cols  []sluice.Column
	canon []string
	// keyIdents are the key columns, quoted, in key order; key the indexes
	// in cols.
	keyIdents []string
	key       []int
	// intKey: the first key column is an integer type, split by value.
	intKey bool
}

func quoteIdent(d Dialect, name string) string {
	if d == PostgreSQL {
		return pgx.Identifier{name}.Sanitize()
	}
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

func quoteTable(d Dialect, n sluice.TableName) string {
	if n.Schema == "" {
		return quoteIdent(d, n.Name)
	}
	return quoteIdent(d, n.Schema) + "." + quoteIdent(d, n.Name)
}

func (s *spec) lit(v string) string {
	if s.dialect == PostgreSQL {
		return keyrange.PGLiteral(v)
	}
	return keyrange.MyLiteral(v)
}

// where selects r.
func (s *spec) where(r tablecopy.Range) string {
	if s.dialect == PostgreSQL {
		return keyrange.PG(s.keyIdents, r)
	}
	return keyrange.My(s.keyIdents, r)
}

// encode is the text of a list of canonical expressions that tells every
// list of values apart: each value as <length>:<text>, NULL as N (a
// length starts with a digit, so N is no prefix of one).
func (s *spec) encode(exprs []string) string {
	parts := make([]string, len(exprs))
	for i, e := range exprs {
		if s.dialect == PostgreSQL {
			parts[i] = "coalesce(length(" + e + ")::text || ':' || " + e + ", 'N')"
		} else {
			parts[i] = "COALESCE(CONCAT(CHAR_LENGTH(" + e + "), ':', " + e + "), 'N')"
		}
	}
	if s.dialect == PostgreSQL {
		return "(" + strings.Join(parts, " || ") + ")"
	}
	return "CONCAT(" + strings.Join(parts, ", ") + ")"
}

func (s *spec) rowText() string { return s.encode(s.canon) }

func (s *spec) keyText() string {
	ks := make([]string, len(s.key))
	for i, k := range s.key {
		ks[i] = s.canon[k]
	}
	return s.encode(ks)
}

func (s *spec) md5(e string) string {
	if s.dialect == PostgreSQL {
		return "md5(" + e + ")"
	}
	return "MD5(" + e + ")"
}

// digestQuery returns one query giving, for each range in order, a row
// (its index, the row count, the sum of the first 60 bits of each row's
// md5): one statement, so one round trip, however many ranges.
func (s *spec) digestQuery(rs []tablecopy.Range) string {
	h := s.md5(s.rowText())
	parts := make([]string, len(rs))
	for i, r := range rs {
		if s.dialect == PostgreSQL {
			parts[i] = fmt.Sprintf("SELECT %d, count(*)::text, coalesce(sum(('x' || left(%s, 15))::bit(60)::bigint), 0)::text FROM %s WHERE %s",
				i, h, s.table, s.where(r))
		} else {
			parts[i] = fmt.Sprintf("SELECT %d, COUNT(*), COALESCE(SUM(CAST(CONV(LEFT(%s, 15), 16, 10) AS UNSIGNED)), 0) FROM %s WHERE %s",
				i, h, s.table, s.where(r))
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "(" + strings.Join(parts, ")\nUNION ALL (") + ")"
}

// rawKeys selects the key columns as this side's own text (what a range
// bound or a key literal holds).
func (s *spec) rawKeys() []string {
	out := make([]string, len(s.keyIdents))
	for i, k := range s.keyIdents {
		if s.dialect == PostgreSQL {
			out[i] = k + "::text"
		} else {
			out[i] = k
		}
	}
	return out
}

// rowHashQuery selects, in key order, each row's key (raw text), its
// canonical key text and the md5 of its canonical row text.
func (s *spec) rowHashQuery(where string) string {
	return "SELECT " + strings.Join(s.rawKeys(), ", ") + ", " + s.keyText() + ", " + s.md5(s.rowText()) +
		" FROM " + s.table + " WHERE " + where + " ORDER BY " + strings.Join(s.keyIdents, ", ")
}

// columnHashQuery selects, for the rows of where, the canonical key text
// and the md5 of each column's canonical text (NULL for NULL).
func (s *spec) columnHashQuery(where string) string {
	sel := []string{s.keyText()}
	for _, c := range s.canon {
		sel = append(sel, s.md5(c))
	}
	return "SELECT " + strings.Join(sel, ", ") + " FROM " + s.table + " WHERE " + where
}

// keysWhere selects the rows whose keys are keys (raw text, of either
// side: both spell integer and string keys alike).
func (s *spec) keysWhere(keys []sluice.Row) string {
	if len(keys) == 0 {
		return "FALSE"
	}
	tuples := make([]string, len(keys))
	for i, k := range keys {
		lits := make([]string, len(k))
		for j, v := range k {
			lits[j] = s.lit(v.Text)
		}
		if len(lits) == 1 {
			tuples[i] = lits[0]
		} else {
			tuples[i] = "(" + strings.Join(lits, ", ") + ")"
		}
	}
	if len(s.keyIdents) == 1 {
		return s.keyIdents[0] + " IN (" + strings.Join(tuples, ", ") + ")"
	}
	return "(" + strings.Join(s.keyIdents, ", ") + ") IN (" + strings.Join(tuples, ", ") + ")"
}

// boundsQuery selects every every-th key of r in key order (after the
// first), which cut r into ranges of about every rows.
func (s *spec) boundsQuery(r tablecopy.Range, every int64) string {
	alias := make([]string, len(s.keyIdents))
	sel := make([]string, len(s.keyIdents))
	for i := range s.keyIdents {
		alias[i] = fmt.Sprintf("k%d", i+1)
		if s.dialect == PostgreSQL {
			sel[i] = alias[i] + "::text"
		} else {
			sel[i] = alias[i]
		}
	}
	order := strings.Join(s.keyIdents, ", ")
	inner := make([]string, len(s.keyIdents))
	for i, k := range s.keyIdents {
		inner[i] = k + " AS " + alias[i]
	}
	return fmt.Sprintf("SELECT %s FROM (SELECT %s, row_number() OVER (ORDER BY %s) AS n FROM %s WHERE %s) s WHERE n %% %d = 1 AND n > 1 ORDER BY %s",
		strings.Join(sel, ", "), strings.Join(inner, ", "), order, s.table, s.where(r), every, "s."+strings.Join(alias, ", s."))
}

// extentQuery selects min and max of the first key column and the row
// count, to cut an integer key by value.
func (s *spec) extentQuery() string {
	k := s.keyIdents[0]
	if s.dialect == PostgreSQL {
		return "SELECT min(" + k + ")::text, max(" + k + ")::text, count(*)::text FROM " + s.table
	}
	return "SELECT MIN(" + k + "), MAX(" + k + "), COUNT(*) FROM " + s.table
}
