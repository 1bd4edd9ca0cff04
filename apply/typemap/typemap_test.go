package typemap

import (
	"strings"
	"testing"
)

func TestColumn(t *testing.T) {
	tests := []struct {
		from, to Engine
		src, dst string
		refused  string            // substring of the refusal, "" = accepted
		values   map[string]string // source text → target text ("!" prefix: want a value error)
	}{
		// PostgreSQL → MySQL
		{Postgres, MySQL, "integer", "int(11)", "", map[string]string{"-7": "-7"}},
		{Postgres, MySQL, "bigint", "int(11)", "do not all fit", nil},
		{Postgres, MySQL, "integer", "int(10) unsigned", "do not all fit", nil},
		{Postgres, MySQL, "numeric(12,2)", "decimal(12,2)", "", map[string]string{"1.50": "1.50", "NaN": "!"}},
		{Postgres, MySQL, "numeric(12,2)", "decimal(10,2)", "do not fit", nil},
		{Postgres, MySQL, "numeric", "decimal(65,30)", "without precision", nil},
		{Postgres, MySQL, "double precision", "double", "", map[string]string{"0.1": "0.1", "Infinity": "!"}},
		{Postgres, MySQL, "boolean", "tinyint(1)", "", map[string]string{"t": "1", "f": "0"}},
		{Postgres, MySQL, "character varying(40)", "varchar(40)", "", nil},
		{Postgres, MySQL, "character varying(40)", "varchar(20)", "do not fit", nil},
		{Postgres, MySQL, "text", "text", "can exceed", nil},
		{Postgres, MySQL, "text", "longtext", "", nil},
		{Postgres, MySQL, "bytea", "longblob", "", map[string]string{`\x00ff41`: "\x00\xffA"}},
		{Postgres, MySQL, "bytea", "blob", "can exceed", nil},
		{Postgres, MySQL, "uuid", "char(36)", "", nil},
		{Postgres, MySQL, "timestamp with time zone", "datetime(6)", "", map[string]string{
			"2024-01-02 03:04:05.123+00": "2024-01-02 03:04:05.123", "infinity": "!", "2024-01-02 03:04:05+05:30": "!"}},
		{Postgres, MySQL, "timestamp(6) without time zone", "datetime(3)", "needs a DATETIME(6)", nil},
		{Postgres, MySQL, "date", "date", "", map[string]string{"2024-02-29": "2024-02-29", "0044-03-15 BC": "!"}},
		{Postgres, MySQL, "jsonb", "json", "", nil},
		{Postgres, MySQL, "text[]", "longtext", "", nil},
		{Postgres, MySQL, "integer[]", "json", "not JSON", nil},
		{Postgres, MySQL, "interval", "time", "no interval type", nil},
		// MySQL → PostgreSQL
		{MySQL, Postgres, "tinyint(1)", "boolean", "", map[string]string{"1": "t", "0": "f", "2": "!"}},
		{MySQL, Postgres, "int(10) unsigned", "integer", "do not all fit", nil},
		{MySQL, Postgres, "int(10) unsigned", "bigint", "", nil},
		{MySQL, Postgres, "bigint(20) unsigned", "numeric(20,0)", "", nil},
		{MySQL, Postgres, "decimal(12,2)", "numeric(12,2)", "", nil},
		{MySQL, Postgres, "varchar(64)", "character varying(64)", "", map[string]string{"ok": "ok", "a\x00b": "!", "\xff": "!"}},
		{MySQL, Postgres, "char(36)", "uuid", "", nil},
		{MySQL, Postgres, "blob", "bytea", "", map[string]string{"\x00\xff": `\x00ff`}},
		{MySQL, Postgres, "blob", "text", "bytea", nil},
		{MySQL, Postgres, "date", "date", "", map[string]string{"2024-01-01": "2024-01-01", "0000-00-00": "!"}},
		{MySQL, Postgres, "datetime(6)", "timestamp(6) without time zone", "", nil},
		{MySQL, Postgres, "timestamp(3)", "timestamp(3) with time zone", "", map[string]string{"2024-01-01 10:00:00.500": "2024-01-01 10:00:00.500+00"}},
		{MySQL, Postgres, "time", "time without time zone", "", map[string]string{"12:00:00": "12:00:00", "838:59:59": "!", "-01:00:00": "!"}},
		{MySQL, Postgres, "time", "interval", "", nil},
		{MySQL, Postgres, "enum('small','large')", "text", "", nil},
		{MySQL, Postgres, "enum('small','large')", "character varying(3)", "labels", nil},
		{MySQL, Postgres, "json", "jsonb", "", nil},
		{MySQL, Postgres, "longtext", "jsonb", "", nil},
		{MySQL, Postgres, "bit(4)", "bit(4)", "", map[string]string{"\x05": "0101"}},
		{MySQL, Postgres, "year(4)", "smallint", "", nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.from)+":"+tt.src+"→"+tt.dst, func(t *testing.T) {
			conv, err := Column(tt.from, tt.to, tt.src, tt.dst)
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("err = %v, want a refusal containing %q", err, tt.refused)
				}
				if !strings.Contains(err.Error(), "make the target column") && !strings.Contains(err.Error(), "declare the source") {
					t.Errorf("refusal %q does not say how to fix it", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			for in, want := range tt.values {
				got := in
				var verr error
				if conv != nil {
					got, verr = conv(in)
				}
				if strings.HasPrefix(want, "!") {
					if verr == nil {
						t.Errorf("%q → %q, want a value error", in, got)
					}
					continue
				}
				if verr != nil || got != want {
					t.Errorf("%q → %q, %v; want %q", in, got, verr, want)
				}
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"int(10) unsigned", "enum('a','b''c')", "numeric(12,2)", "character varying(40)[]", "(", "enum('"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, e := range []Engine{Postgres, MySQL} {
			_ = parse(e, s)
			_, _ = Column(e, map[Engine]Engine{Postgres: MySQL, MySQL: Postgres}[e], s, s)
		}
	})
}
