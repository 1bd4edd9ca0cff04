package typemap

import (
	"strings"
	"testing"
)

// TestTargetType: the type a created target column gets, and the
// refusals, each naming the cause and the choices. Every type chosen is
// one Column accepts, so the stream writes every source value exactly.
func TestTargetType(t *testing.T) {
	for _, tc := range []struct {
		from, to Engine
		src      string
		opt      TypeOptions
		want     string // "" = refused
		refusal  string
	}{
		{Postgres, MySQL, "integer", TypeOptions{}, "int", ""},
		{Postgres, MySQL, "numeric(12,2)", TypeOptions{}, "decimal(12,2)", ""},
		{Postgres, MySQL, "numeric", TypeOptions{}, "", "declare the source column numeric(p,s)"},
		{Postgres, MySQL, "text", TypeOptions{}, "longtext", ""},
		{Postgres, MySQL, "text", TypeOptions{Indexed: true}, "", "varchar(n) with n ≤ 768"},
		{Postgres, MySQL, "character varying(40)", TypeOptions{}, "varchar(40)", ""},
		{Postgres, MySQL, "character varying(600)", TypeOptions{Indexed: true}, "varchar(600)", ""},
		{Postgres, MySQL, "character varying(600)", TypeOptions{}, "text", ""},
		{Postgres, MySQL, "character varying(20000)", TypeOptions{}, "mediumtext", ""},
		{Postgres, MySQL, "timestamp with time zone", TypeOptions{}, "datetime(6)", ""},
		{Postgres, MySQL, "timestamp(3) without time zone", TypeOptions{}, "datetime(3)", ""},
		{Postgres, MySQL, "boolean", TypeOptions{}, "tinyint(1)", ""},
		{Postgres, MySQL, "bytea", TypeOptions{}, "longblob", ""},
		{Postgres, MySQL, "mood", TypeOptions{Labels: []string{"a", "b"}}, "enum('a','b')", ""},
		{Postgres, MySQL, "interval", TypeOptions{}, "longtext", ""},
		{Postgres, MySQL, "integer[]", TypeOptions{}, "longtext", ""},
		{MySQL, Postgres, "tinyint(1)", TypeOptions{}, "smallint", ""},
		{MySQL, Postgres, "int(10) unsigned", TypeOptions{}, "bigint", ""},
		{MySQL, Postgres, "bigint(20) unsigned", TypeOptions{}, "numeric(20,0)", ""},
		{MySQL, Postgres, "longtext", TypeOptions{JSON: true}, "json", ""},
		{MySQL, Postgres, "time(2)", TypeOptions{}, "interval", ""},
		{MySQL, Postgres, "timestamp(3)", TypeOptions{}, "timestamp(3) with time zone", ""},
		{MySQL, Postgres, "enum('a','b')", TypeOptions{}, "text", ""},
		{MySQL, Postgres, "geometry", TypeOptions{}, "", "create the target table yourself"},
		{Postgres, Postgres, "numeric", TypeOptions{}, "numeric", ""},
	} {
		got, err := TargetType(tc.from, tc.to, tc.src, tc.opt)
		if tc.want == "" {
			if err == nil || !strings.Contains(err.Error(), tc.refusal) {
				t.Errorf("%s %s → %s: got %q, %v; want a refusal containing %q", tc.from, tc.src, tc.to, got, err, tc.refusal)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %s → %s = %q, %v; want %q", tc.from, tc.src, tc.to, got, err, tc.want)
			continue
		}
		if tc.from != tc.to {
			if _, err := Column(tc.from, tc.to, SourceColumn(tc.src, tc.opt.Labels), got); err != nil {
				t.Errorf("%s %s → %s: the type map refuses its own choice: %v", tc.from, tc.src, got, err)
			}
		}
	}
}
