package mysql

import "testing"

func TestFits(t *testing.T) {
	cases := []struct {
		src, dst string
		ok       bool
	}{
		{"int", "int(11)", true},
		{"integer", "int", true},
		{"int", "bigint(20)", true},
		{"bigint", "int(11)", false},
		{"tinyint", "smallint", true},
		{"mediumint", "smallint", false},
		{"int unsigned", "int(10) unsigned", true},
		{"int unsigned", "int", false},
		{"int unsigned", "bigint", true},
		{"int", "bigint unsigned", false},
		{"tinyint unsigned", "smallint", true},
		{"bigint unsigned", "bigint", false},
		{"int zerofill", "int unsigned zerofill", false},
		{"tinyint(1)", "tinyint(4)", true},
		{"boolean", "tinyint(1)", true},
		{"decimal(12,4)", "decimal(12,4)", true},
		{"decimal(12,4)", "decimal(14,4)", true},
		{"decimal(12,4)", "decimal(10,2)", false},
		{"decimal(12,4)", "decimal(12,2)", false},
		{"decimal", "decimal(10,0)", true},
		{"numeric(5)", "decimal(5,0)", true},
		{"decimal(5,2) unsigned", "decimal(5,2)", true},
		{"decimal(5,2)", "decimal(5,2) unsigned", false},
		{"float", "double", true},
		{"double", "float", false},
		{"real", "double", true},
		{"varchar(100)", "varchar(100)", true},
		{"varchar(100)", "varchar(200)", true},
		{"varchar(100)", "varchar(10)", false},
		{"varchar(100)", "text", true},
		{"varchar(20000)", "text", false},
		{"varchar(20000)", "mediumtext", true},
		{"char(3)", "char(3)", true},
		{"char(3)", "char(4)", true},
		{"char(4)", "char(3)", false},
		{"char(3)", "varchar(3)", true},
		{"varchar(3)", "char(3)", false},
		{"text", "varchar(10)", false},
		{"tinytext", "varchar(255)", true},
		{"text", "mediumtext", true},
		{"longtext", "text", false},
		{"json", "json", true},
		{"json", "longtext", true},
		{"longtext", "json", false},
		{"binary(4)", "binary(4)", true},
		{"binary(4)", "binary(8)", false},
		{"varbinary(10)", "varbinary(20)", true},
		{"varbinary(30)", "varbinary(20)", false},
		{"varbinary(300)", "blob", true},
		{"blob", "tinyblob", false},
		{"blob", "longblob", true},
		{"blob", "text", false},
		{"date", "date", true},
		{"date", "datetime", false},
		{"datetime", "datetime(6)", true},
		{"datetime(6)", "datetime", false},
		{"datetime(3)", "datetime(6)", true},
		{"timestamp(6)", "timestamp(6)", true},
		{"timestamp(6)", "datetime(6)", true},
		{"datetime(6)", "timestamp(6)", false},
		{"time(6)", "time", false},
		{"time", "time(3)", true},
		{"year", "year(4)", true},
		{"enum('a','b')", "enum('a','b','c')", true},
		{"enum('a','b')", "enum('a')", false},
		{"enum('it''s','x)')", "enum('x)','it''s')", true},
		{"set('x','y')", "set('x','y')", true},
		{"set('x','y')", "set('y','x')", false},
		{"bit(8)", "bit(8)", true},
		{"bit(8)", "bit(4)", false},
		{"bit", "bit(1)", true},
		{"int", "varchar(20)", false},
		{"geometry", "geometry", true},
	}
	for _, c := range cases {
		ok, why := fits(parseType(c.src), parseType(c.dst))
		if ok != c.ok {
			t.Errorf("fits(%s → %s) = %v (%s), want %v [parsed %v → %v]", c.src, c.dst, ok, why, c.ok, parseType(c.src), parseType(c.dst))
		}
	}
}

func TestParseTypeString(t *testing.T) {
	for in, want := range map[string]string{
		"int(10) unsigned zerofill": "int(10) unsigned",
		"DECIMAL(12, 4)":            "decimal(12,4)",
		"enum('a','it''s')":         "enum('a','it''s')",
		"numeric":                   "decimal(10,0)",
		"character varying(5)":      "varchar(5)",
		"float(53)":                 "double",
	} {
		if got := parseType(in).String(); got != want {
			t.Errorf("parseType(%q) = %s, want %s", in, got, want)
		}
	}
}
