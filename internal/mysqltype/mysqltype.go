// Package mysqltype holds what both the MySQL target and the cross-engine
// type map need to know of MySQL/MariaDB column types: integer widths, the
// capacity of the TEXT and BLOB types, and ENUM/SET member lists.
package mysqltype

import "strings"

// IntBits is the width of an integer type in bits; 0 for other types.
func IntBits(base string) int {
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

// StringBytes is the most bytes a TEXT or BLOB type (or JSON, a LONGTEXT
// on MariaDB) holds; 0 for other types.
func StringBytes(base string) int64 {
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

// IsText reports whether base is one of the TEXT types.
func IsText(base string) bool {
	switch base {
	case "tinytext", "text", "mediumtext", "longtext":
		return true
	}
	return false
}

// IsBlob reports whether base is one of the BLOB types.
func IsBlob(base string) bool {
	switch base {
	case "tinyblob", "blob", "mediumblob", "longblob":
		return true
	}
	return false
}

// Members reads an ENUM or SET member list as the server prints it,
// 'a','b”c', into its members.
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
