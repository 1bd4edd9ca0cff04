package binlog

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/sluice-cdc/sluice"
)

// ddlCheck looks at a statement logged as a QUERY event (DDL) and returns
// an error when it changes a replicated table in a way the stream cannot
// follow: dropping, renaming or re-creating the table, dropping or
// renaming a column, or changing rows without row events (partition and
// tablespace operations). A TRUNCATE is followed (truncateOf). Added
// columns are followed through the next table map, and a
// changed column type is caught there (schemaChange); this check exists so
// that the stream stops at the DDL itself, not at the next row of the
// table. isRepl reports whether schema.table is replicated; defaultDB is
// the QUERY event's current database.
func ddlCheck(query, defaultDB string, isRepl func(schema, table string) bool) error {
	return ddlCheckCols(query, defaultDB, isRepl, nil)
}

// ddlCheckCols is ddlCheck that ignores the drop or rename of a column that
// hasColumn (when set) says the stream's current description of the table
// no longer has: the statement is replayed after a restart that described
// the table as it is now (the operator made the target match and restarted
// at the statement), so the stream already follows the new shape.
func ddlCheckCols(query, defaultDB string, isRepl func(schema, table string) bool, hasColumn func(schema, table, column string) bool) error {
	toks := tokenize(query)
	if len(toks) < 2 {
		return nil
	}
	kw := func(i int) string {
		if i < len(toks) && !toks[i].quoted {
			return strings.ToUpper(toks[i].s)
		}
		return ""
	}
	// tableAt reads a possibly qualified name at toks[i]; it returns the
	// schema, the table and the index after it.
	tableAt := func(i int) (string, string, int) {
		if i >= len(toks) {
			return "", "", i
		}
		name := toks[i].s
		if i+2 < len(toks) && toks[i+1].s == "." && !toks[i+1].quoted {
			return name, toks[i+2].s, i + 3
		}
		return defaultDB, name, i + 1
	}
	i := 0
	switch kw(0) {
	case "ALTER":
		i = 1
		for kw(i) == "ONLINE" || kw(i) == "IGNORE" {
			i++
		}
		if kw(i) != "TABLE" {
			return nil
		}
		i++
		if kw(i) == "IF" && kw(i+1) == "EXISTS" {
			i += 2
		}
		schema, table, j := tableAt(i)
		if !isRepl(schema, table) {
			return nil
		}
		for _, clause := range splitTop(toks[j:]) {
			has := func(col string) bool { return hasColumn == nil || hasColumn(schema, table, col) }
			if err := alterClause(clause, schema+"."+table, has); err != nil {
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

func alterClause(c []token, table string, has func(column string) bool) error {
	kw := func(i int) string {
		if i < len(c) && !c[i].quoted {
			return strings.ToUpper(c[i].s)
		}
		return ""
	}
	name := func(i int) string {
		if i < len(c) {
			return c[i].s
		}
		return ""
	}
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
		i := 1
		switch kw(i) {
		case "PARTITION":
			return noRowEvents("partitions were dropped with their rows")
		case "INDEX", "KEY", "PRIMARY", "FOREIGN", "CONSTRAINT", "CHECK", "SYSTEM":
			if kw(i) == "PRIMARY" {
				return fmt.Errorf("table %s: the primary key was dropped on the source: the stream cannot follow it", table)
			}
			return nil
		case "COLUMN":
			i++
		}
		if kw(i) == "IF" && kw(i+1) == "EXISTS" {
			i += 2
		}
		if !has(name(i)) {
			return nil
		}
		return fmt.Errorf("table %s: column %s was dropped on the source: the stream cannot follow it; "+
			"make the target match, then restart the stream", table, name(i))
	case "CHANGE":
		i := 1
		if kw(i) == "COLUMN" {
			i++
		}
		if kw(i) == "IF" && kw(i+1) == "EXISTS" {
			i += 2
		}
		if !strings.EqualFold(name(i), name(i+1)) && has(name(i)) {
			return fmt.Errorf("table %s: column %s was renamed to %s on the source: the stream cannot follow it; "+
				"make the target match, then restart the stream", table, name(i), name(i+1))
		}
	case "RENAME":
		switch kw(1) {
		case "COLUMN":
			if !has(name(2)) {
				return nil
			}
			return fmt.Errorf("table %s: column %s was renamed to %s on the source: the stream cannot follow it; "+
				"make the target match, then restart the stream", table, name(2), name(4))
		case "INDEX", "KEY":
			return nil
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
