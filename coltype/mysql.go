package coltype

import "strings"

// ParseMySQL reads a MySQL or MariaDB column type as the source spells it
// or as information_schema.COLUMNS.COLUMN_TYPE prints it, e.g. "int(11)
// unsigned zerofill", "decimal(12,4)", "enum('a','b')", "datetime(6)",
// and MariaDB's TIMESTAMP with its NULL/DEFAULT clauses after it. Synonyms
// get one name (integer is int, numeric is decimal, bool is tinyint(1),
// serial is bigint unsigned, float(p) with p > 24 is double); modifiers
// are kept as written, none filled in.
func ParseMySQL(s string) Type {
	s = strings.TrimSpace(s)
	t := Type{Spelled: strings.ToLower(s)}
	if strings.HasSuffix(s, "[]") {
		t.Array = true
		s = strings.TrimSuffix(s, "[]")
	}
	rest := s
	if open := strings.IndexByte(s, '('); open >= 0 {
		end := closingParen(s, open)
		if strings.EqualFold(strings.TrimSpace(s[:open]), "enum") || strings.EqualFold(strings.TrimSpace(s[:open]), "set") {
			t.Members = Members(s[open+1 : end]) // their case kept
		} else {
			t.Mods = mods(s[open+1 : end])
		}
		rest = s[:open] + " " + s[min(end+1, len(s)):]
	}
	var base []string
	words := strings.Fields(strings.ToLower(rest))
words:
	for i, w := range words {
		switch w {
		case "unsigned":
			t.Unsigned = true
		case "signed", "zerofill":
		case "null", "not", "default", "collate", "charset", "comment", "auto_increment", "on", "generated", "as", "primary", "unique", "key", "check", "invisible":
			// A column attribute: the type has ended.
			break words
		case "binary":
			if i > 0 {
				break words // char(10) binary: a collation, not the type
			}
			base = append(base, w)
		case "character", "char":
			if i > 0 && i+1 < len(words) && words[i+1] == "set" {
				break words // char character set latin1
			}
			base = append(base, w)
		default:
			base = append(base, w)
		}
	}
	t.Base = mysqlBase(strings.Join(base, " "), &t)
	return t
}

// closingParen finds the parenthesis closing the one at open, skipping
// quoted ENUM members; len(s) when there is none.
func closingParen(s string, open int) int {
	inQuote := false
	for i := open + 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' && inQuote && i+1 < len(s) && s[i+1] == '\'':
			i++
		case c == '\'':
			inQuote = !inQuote
		case c == ')' && !inQuote:
			return i
		}
	}
	return len(s)
}

// mysqlBase maps MySQL's synonyms of a type name to one name; bool and
// serial set what they imply (tinyint(1), unsigned), and float(p) with
// p > 24 is a double, as the server reads them.
func mysqlBase(s string, t *Type) string {
	switch s {
	case "bool", "boolean":
		t.Mods = []int{1}
		return "tinyint"
	case "integer", "int4":
		return "int"
	case "middleint", "int3":
		return "mediumint"
	case "int1":
		return "tinyint"
	case "int2":
		return "smallint"
	case "int8":
		return "bigint"
	case "serial":
		t.Unsigned = true
		return "bigint"
	case "dec", "numeric", "fixed":
		return "decimal"
	case "real", "double precision", "float8":
		return "double"
	case "float4":
		return "float"
	case "float":
		if len(t.Mods) == 1 && t.Mods[0] > 24 {
			t.Mods = nil
			return "double"
		}
	case "character", "nchar", "national char", "national character":
		return "char"
	case "character varying", "nvarchar", "national varchar", "char varying":
		return "varchar"
	case "binary varying":
		return "varbinary"
	case "long varchar", "long":
		return "mediumtext"
	case "long varbinary":
		return "mediumblob"
	}
	return s
}

// MySQLIntBits is the width in bits of a MySQL integer type (its Base);
// 0 for other types.
func MySQLIntBits(base string) int {
	switch base {
	case "tinyint":
		return 8
	case "smallint":
		return 16
	case "mediumint":
		return 24
	case "int":
		return 32
	case "bigint":
		return 64
	}
	return 0
}

// MySQLStringBytes is the most bytes a MySQL TEXT or BLOB type (or JSON,
// a LONGTEXT on MariaDB) holds; 0 for other types.
func MySQLStringBytes(base string) int64 {
	switch base {
	case "tinytext", "tinyblob":
		return 1<<8 - 1
	case "text", "blob":
		return 1<<16 - 1
	case "mediumtext", "mediumblob":
		return 1<<24 - 1
	case "longtext", "longblob", "json":
		return 1<<32 - 1
	}
	return 0
}

// IsMySQLText reports whether base is one of MySQL's TEXT types.
func IsMySQLText(base string) bool {
	switch base {
	case "tinytext", "text", "mediumtext", "longtext":
		return true
	}
	return false
}

// IsMySQLBlob reports whether base is one of MySQL's BLOB types.
func IsMySQLBlob(base string) bool {
	switch base {
	case "tinyblob", "blob", "mediumblob", "longblob":
		return true
	}
	return false
}

// Members reads an ENUM or SET member list as the server prints it,
// 'a','b”c' (or a PostgreSQL enum's labels in that form), into its
// members.
func Members(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' && inQuote && i+1 < len(s) && s[i+1] == '\'':
			cur.WriteByte('\'')
			i++
		case c == '\'':
			if inQuote {
				out = append(out, cur.String())
				cur.Reset()
			}
			inQuote = !inQuote
		case inQuote:
			cur.WriteByte(c)
		}
	}
	return out
}
