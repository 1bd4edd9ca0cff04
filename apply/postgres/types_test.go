package postgres

import (
	"testing"

	"github.com/sluice-cdc/sluice/coltype"
)

func TestFits(t *testing.T) {
	cases := []struct {
		src, dst string
		ok       bool
	}{
		{"bigint", "bigint", true},
		{"int8", "bigint", true},
		{"integer", "bigint", true},
		{"smallint", "integer", true},
		{"bigint", "integer", false},
		{"integer", "smallint", false},
		{"real", "double precision", true},
		{"double precision", "real", false},
		{"varchar(100)", "character varying(100)", true},
		{`"char"`, "character(1)", false}, // one byte, not char(1)
		{`"char"`, `"char"`, true},
		{"varchar(100)", "character varying(200)", true},
		{"varchar(100)", "character varying", true},
		{"varchar(100)", "text", true},
		{"varchar(100)", "character varying(10)", false},
		{"character varying", "character varying(10)", false},
		{"text", "character varying(10)", false},
		{"text", "character varying", true},
		{"text", "text", true},
		{"char(3)", "character(3)", true},
		{"char(3)", "character(4)", false},
		{"character(3)", "bpchar", true},
		{"numeric(12,4)", "numeric(12,4)", true},
		{"numeric(12,4)", "numeric(14,4)", true},
		{"numeric(12,4)", "numeric", true},
		{"numeric(12,4)", "numeric(10,2)", false},
		{"numeric(12,4)", "numeric(12,2)", false},
		{"numeric", "numeric(12,2)", false},
		{"decimal(5)", "numeric(5,0)", true},
		{"timestamptz", "timestamp with time zone", true},
		{"timestamp with time zone", "timestamp without time zone", false},
		{"timestamp(3) with time zone", "timestamp with time zone", true},
		{"timestamp with time zone", "timestamp(3) with time zone", false},
		{"timestamp(3)", "timestamp(6) without time zone", true},
		{"time", "time without time zone", true},
		{"interval", "interval", true},
		{"interval", "interval year to month", false},
		{"date", "date", true},
		{"date", "timestamp without time zone", false},
		{"json", "jsonb", false},
		{"jsonb", "jsonb", true},
		{"uuid", "uuid", true},
		{"bytea", "bytea", true},
		{"boolean", "bool", true},
		{"text[]", "text[]", true},
		{"integer[]", "integer[]", true},
		{"int4[]", "bigint[]", true},
		{"bigint[]", "integer[]", false},
		{"integer[]", "integer", false},
		{"public.mood", "mood", true},
		{"mood", "other_enum", false},
	}
	for _, c := range cases {
		ok, why := fits(coltype.ParsePostgres(c.src), coltype.ParsePostgres(c.dst))
		if ok != c.ok {
			t.Errorf("fits(%s → %s) = %v (%s), want %v [parsed %v → %v]", c.src, c.dst, ok, why, c.ok, coltype.ParsePostgres(c.src), coltype.ParsePostgres(c.dst))
		}
	}
}
