package coltype

import "strings"

// ParsePostgres reads a PostgreSQL type as the source spells it or as
// format_type prints it. Array suffixes ([] or ARRAY, repeated) set
// Array; an interval's field restriction goes to Fields; a pg_catalog.
// prefix is dropped, and a user type compares by its own name (the source
// may qualify it, and format_type leaves out a schema on the search_path).
func ParsePostgres(s string) Type {
	s = strings.ToLower(strings.TrimSpace(s))
	t := Type{Spelled: s}
	for {
		switch {
		case strings.HasSuffix(s, "[]"):
			s = strings.TrimSpace(strings.TrimSuffix(s, "[]"))
			t.Array = true
			continue
		case strings.HasSuffix(s, " array"):
			s = strings.TrimSpace(strings.TrimSuffix(s, " array"))
			t.Array = true
			continue
		}
		break
	}
	if open := strings.IndexByte(s, '('); open >= 0 {
		if end := strings.IndexByte(s[open:], ')'); end >= 0 {
			t.Mods = mods(s[open+1 : open+end])
			s = s[:open] + " " + s[open+end+1:]
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	if rest, ok := strings.CutPrefix(s, "interval"); ok && (rest == "" || rest[0] == ' ') {
		t.Base = "interval"
		t.Fields = strings.TrimSpace(rest)
		return t
	}
	s = strings.TrimPrefix(s, "pg_catalog.")
	if s == `"char"` {
		// PostgreSQL's one-byte internal type, which format_type quotes to
		// tell it from char(1): unquoted it would read as character(1).
		t.Base = s
		return t
	}
	s = strings.Trim(s, `"`)
	s = PostgresBase(s)
	if i := strings.LastIndexByte(s, '.'); i >= 0 && !strings.Contains(s, " ") {
		s = strings.Trim(s[i+1:], `"`)
	}
	t.Base = s
	return t
}

// PostgresBase maps the spellings PostgreSQL accepts (and format_type
// prints) of a type name, without modifiers, to one name per type; other
// names are returned as they are.
func PostgresBase(s string) string {
	switch s {
	case "int2", "smallint", "smallserial", "serial2":
		return "smallint"
	case "int4", "int", "integer", "serial", "serial4":
		return "integer"
	case "int8", "bigint", "bigserial", "serial8":
		return "bigint"
	case "float4", "real":
		return "real"
	case "float8", "double precision", "float":
		return "double precision"
	case "numeric", "decimal":
		return "numeric"
	case "bool", "boolean":
		return "boolean"
	case "varchar", "character varying":
		return "varchar"
	case "bpchar", "char", "character":
		return "char"
	case "timestamp", "timestamp without time zone":
		return "timestamp"
	case "timestamptz", "timestamp with time zone":
		return "timestamptz"
	case "time", "time without time zone":
		return "time"
	case "timetz", "time with time zone":
		return "timetz"
	case "varbit", "bit varying":
		return "varbit"
	}
	return s
}
