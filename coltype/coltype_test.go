package coltype

import "testing"

func TestParsePostgres(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"integer", "integer"},
		{"int4", "integer"},
		{"serial", "integer"},
		{"float", "double precision"},
		{"character varying(40)", "varchar(40)"},
		{"timestamp(3) with time zone", "timestamptz(3)"},
		{"numeric(12, 4)[]", "numeric(12,4)[]"},
		{"integer ARRAY", "integer[]"},
		{"text[][]", "text[]"},
		{"interval year to month", "interval year to month"},
		{"interval day to second(3)", "interval day to second(3)"},
		{"pg_catalog.int8", "bigint"},
		{`public."Mood"`, "mood"},
		{`"char"`, `"char"`},
		{"char", "char"},
		{"bit varying(8)", "varbit(8)"},
	} {
		if got := ParsePostgres(c.in).String(); got != c.want {
			t.Errorf("ParsePostgres(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestParseMySQL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"int(11) unsigned zerofill", "int(11) unsigned"},
		{"INTEGER", "int"},
		{"bool", "tinyint(1)"},
		{"serial", "bigint unsigned"},
		{"decimal(12,4)", "decimal(12,4)"},
		{"numeric", "decimal"},
		{"double precision", "double"},
		{"float(30)", "double"},
		{"float(10,2)", "float(10,2)"},
		{"enum('A','b''c',')')", "enum('A','b''c',')')"},
		{"set('x')", "set('x')"},
		{"datetime(6)", "datetime(6)"},
		{"timestamp null default null", "timestamp"},
		{"char(10) character set latin1", "char(10)"},
		{"char(10) binary", "char(10)"},
		{"national varchar(5)", "varchar(5)"},
		{"long varbinary", "mediumblob"},
		{"binary varying(4)", "varbinary(4)"},
		{"(", ""},
		{"enum('", "enum"},
	} {
		if got := ParseMySQL(c.in).String(); got != c.want {
			t.Errorf("ParseMySQL(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"int(10) unsigned", "enum('a','b''c')", "numeric(12,2)", "character varying(40)[]", "(", "enum('", "x)("} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = ParsePostgres(s).String()
		_ = ParseMySQL(s).String()
	})
}
