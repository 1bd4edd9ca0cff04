package binlog

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/sluice-cdc/sluice"
)

// ddlCheck looks at a statement logged as a QUERY event (DDL) and returns
// an error when it changes a replicated table in a way the stream cannot
// follow: dropping, renaming or re-creating the table, dropping the
// primary key, or changing rows without row events (partition and
// tablespace operations). A TRUNCATE is followed (truncateOf), and so are
// the changes of columns and indexes (schemaChangeOf, follow.go); this
// check exists so that the stream stops at the DDL itself, not at the
// next row of the table. isRepl reports whether schema.table is
// replicated; defaultDB is the QUERY event's current database.
func ddlCheck(query, defaultDB string, isRepl func(schema, table string) bool) error {
	toks := words(tokenize(query))
	if len(toks) < 2 {
		return nil
	}
	kw := toks.kw
	tableAt := func(i int) (string, string, int) { return toks.tableAt(i, defaultDB) }
	i := 0
	switch kw(0) {
	case "ALTER":
		schema, table, clauses, ok := toks.alterTable(defaultDB)
		if !ok || !isRepl(schema, table) {
			return nil
		}
		for _, clause := range clauses {
			if err := alterClause(clause, schema+"."+table); err != nil {
				return err
			}
		}
	case "CREATE":
		// MariaDB's CREATE OR REPLACE TABLE drops the table it replaces.
		if kw(1) != "OR" || kw(2) != "REPLACE" || kw(3) != "TABLE" {
			return nil
		}
		schema, table, _ := tableAt(4)
		if isRepl(schema, table) {
			return &sluice.TableError{Table: sluice.TableName{Schema: schema, Name: table}, Err: fmt.Errorf("table %s.%s was dropped and created again on the source (%s): the stream cannot follow it; "+
				"make the target match, then resume after this statement or restart from a new position", schema, table, clip(query))}
		}
	case "DROP", "RENAME":
		verb := kw(0)
		i = 1
		if verb == "DROP" && kw(i) == "TEMPORARY" {
			return nil
		}
		if kw(i) != "TABLE" && kw(i) != "TABLES" {
			return nil
		}
		i++
		if kw(i) == "IF" && kw(i+1) == "EXISTS" {
			i += 2
		}
		for i < len(toks) {
			schema, table, j := tableAt(i)
			if isRepl(schema, table) {
				what := map[string]string{"DROP": "dropped", "RENAME": "renamed"}[verb]
				return &sluice.TableError{Table: sluice.TableName{Schema: schema, Name: table}, Err: fmt.Errorf("table %s.%s was %s on the source (%s): the stream cannot follow it; "+
					"make the target match, then resume after this statement or restart from a new position", schema, table, what, clip(query))}
			}
			// skip to the next name in the list ("a TO b, c TO d" or "a, b")
			i = j
			for i < len(toks) && !(toks[i].s == "," && !toks[i].quoted) {
				i++
			}
			i++
		}
	}
	return nil
}

func alterClause(c []token, table string) error {
	kw := words(c).kw
	noRowEvents := func(what string) error {
		return fmt.Errorf("table %s: %s on the source (ALTER TABLE … %s): the binlog holds no row changes for it, so the stream cannot follow it; "+
			"make the target match, then resume after this statement or restart from a new position", table, what, clip(joinTokens(c)))
	}
	switch kw(0) {
	case "TRUNCATE":
		if kw(1) == "PARTITION" {
			return noRowEvents("partitions were truncated")
		}
	case "EXCHANGE":
		if kw(1) == "PARTITION" {
			return noRowEvents("a partition was exchanged with another table")
		}
	case "CONVERT":
		// CONVERT TO CHARACTER SET re-encodes text, which rows carry as
		// text either way; CONVERT PARTITION/TABLE moves rows out or in.
		if kw(1) == "PARTITION" || kw(1) == "TABLE" {
			return noRowEvents("rows were moved between the table and another one")
		}
	case "DISCARD", "IMPORT":
		if kw(1) == "TABLESPACE" || kw(1) == "PARTITION" {
			return noRowEvents("the table's data file was " + map[string]string{"DISCARD": "discarded", "IMPORT": "replaced"}[kw(0)])
		}
	case "DROP":
		switch kw(1) {
		case "PARTITION":
			return noRowEvents("partitions were dropped with their rows")
		case "PRIMARY":
			return fmt.Errorf("table %s: the primary key was dropped on the source: the stream cannot follow it", table)
		}
	case "RENAME":
		switch kw(1) {
		case "COLUMN", "INDEX", "KEY":
			return nil // followed, or refused by the schema change (follow.go)
		}
		return fmt.Errorf("table %s was renamed on the source: the stream cannot follow it", table)
	}
	return nil
}

// truncateOf reads TRUNCATE [TABLE] [schema.]table and returns the table.
func truncateOf(query, defaultDB string) (schema, table string, ok bool) {
	toks := tokenize(query)
	if len(toks) < 2 || toks[0].quoted || !strings.EqualFold(toks[0].s, "TRUNCATE") {
		return "", "", false
	}
	i := 1
	if !toks[i].quoted && strings.EqualFold(toks[i].s, "TABLE") {
		i++
	}
	if i >= len(toks) {
		return "", "", false
	}
	if i+2 < len(toks) && toks[i+1].s == "." && !toks[i+1].quoted {
		return toks[i].s, toks[i+2].s, true
	}
	return defaultDB, toks[i].s, true
}

func joinTokens(toks []token) string {
	s := make([]string, len(toks))
	for i, t := range toks {
		s[i] = t.s
	}
	return strings.Join(s, " ")
}

type token struct {
	s      string
	quoted bool
}

// words are a statement's tokens, read by position.
type words []token

// kw is the keyword at i, upper-cased; "" for a quoted token or past the
// end.
func (w words) kw(i int) string {
	if i < len(w) && !w[i].quoted {
		return strings.ToUpper(w[i].s)
	}
	return ""
}

// alterTable reads ALTER [ONLINE|IGNORE] TABLE [IF EXISTS] name: the
// table's schema and name and the statement's clauses; ok is false for
// another statement.
func (w words) alterTable(defaultDB string) (schema, table string, clauses [][]token, ok bool) {
	if w.kw(0) != "ALTER" {
		return "", "", nil, false
	}
	i := 1
	for w.kw(i) == "ONLINE" || w.kw(i) == "IGNORE" {
		i++
	}
	if w.kw(i) != "TABLE" {
		return "", "", nil, false
	}
	i++
	if w.kw(i) == "IF" && w.kw(i+1) == "EXISTS" {
		i += 2
	}
	schema, table, j := w.tableAt(i, defaultDB)
	return schema, table, splitTop(w[j:]), true
}

// tableAt reads a possibly qualified table name at i; it returns the
// schema (defaultDB when unqualified), the table and the index after it.
func (w words) tableAt(i int, defaultDB string) (string, string, int) {
	if i >= len(w) {
		return "", "", i
	}
	if i+2 < len(w) && w[i+1].s == "." && !w[i+1].quoted {
		return w[i].s, w[i+2].s, i + 3
	}
	return defaultDB, w[i].s, i + 1
}

// tokenize splits SQL into words, quoted identifiers/strings and single
// punctuation characters, dropping comments. Good enough for DDL heads.
func tokenize(q string) []token {
	var out []token
	r := []rune(q)
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#' || (c == '-' && i+2 < len(r) && r[i+1] == '-' && unicode.IsSpace(r[i+2])):
			for i < len(r) && r[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(r) && r[i+1] == '*':
			j := i + 2
			for j+1 < len(r) && !(r[j] == '*' && r[j+1] == '/') {
				j++
			}
			i = j + 2
		case c == '`' || c == '"' || c == '\'':
			var b strings.Builder
			j := i + 1
			for j < len(r) {
				if r[j] == c {
					if j+1 < len(r) && r[j+1] == c {
						b.WriteRune(c)
						j += 2
						continue
					}
					break
				}
				if r[j] == '\\' && c != '`' && j+1 < len(r) {
					j++
				}
				b.WriteRune(r[j])
				j++
			}
			out = append(out, token{s: b.String(), quoted: true})
			i = j + 1
		case unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_' || c == '$':
			j := i
			for j < len(r) && (unicode.IsLetter(r[j]) || unicode.IsDigit(r[j]) || r[j] == '_' || r[j] == '$') {
				j++
			}
			out = append(out, token{s: string(r[i:j])})
			i = j
		default:
			out = append(out, token{s: string(c)})
			i++
		}
	}
	return out
}

// splitTop splits tokens at commas outside parentheses.
func splitTop(toks []token) [][]token {
	var out [][]token
	depth, start := 0, 0
	for i, t := range toks {
		if t.quoted {
			continue
		}
		switch t.s {
		case "(":
			depth++
		case ")":
			depth--
		case ",":
			if depth == 0 {
				out = append(out, toks[start:i])
				start = i + 1
			}
		}
	}
	return append(out, toks[start:])
}

func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}
