package typemap

import (
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

func TestColumn(t *testing.T) {
	tests := []struct {
		from, to Engine
		src, dst string
		enum     string            // the source's enum labels (sluice.Column.Enum)
		refused  string            // substring of the refusal, "" = accepted
		values   map[string]string // source text → target text ("!" prefix: want a value error)
	}{
		// PostgreSQL → MySQL
		{Postgres, MySQL, "integer", "int(11)", "", "", map[string]string{"-7": "-7"}},
		{Postgres, MySQL, "bigint", "int(11)", "", "do not all fit", nil},
		{Postgres, MySQL, "integer", "int(10) unsigned", "", "do not all fit", nil},
		{Postgres, MySQL, "numeric(12,2)", "decimal(12,2)", "", "", map[string]string{"1.50": "1.50", "NaN": "!"}},
		{Postgres, MySQL, "numeric(12,2)", "decimal(10,2)", "", "do not fit", nil},
		{Postgres, MySQL, "numeric", "decimal(65,30)", "", "without precision", nil},
		{Postgres, MySQL, "double precision", "double", "", "", map[string]string{"0.1": "0.1", "Infinity": "!"}},
		{Postgres, MySQL, "boolean", "tinyint(1)", "", "", map[string]string{"t": "1", "f": "0"}},
		{Postgres, MySQL, "character varying(40)", "varchar(40)", "", "", nil},
		{Postgres, MySQL, "character varying(40)", "varchar(20)", "", "do not fit", nil},
		{Postgres, MySQL, "text", "text", "", "can exceed", nil},
		{Postgres, MySQL, "text", "longtext", "", "", nil},
		{Postgres, MySQL, "bytea", "longblob", "", "", map[string]string{`\x00ff41`: "\x00\xffA"}},
		{Postgres, MySQL, "bytea", "blob", "", "can exceed", nil},
		{Postgres, MySQL, "uuid", "char(36)", "", "", nil},
		{Postgres, MySQL, "timestamp with time zone", "datetime(6)", "", "", map[string]string{
			"2024-01-02 03:04:05.123+00": "2024-01-02 03:04:05.123", "infinity": "!", "2024-01-02 03:04:05+05:30": "!"}},
		{Postgres, MySQL, "timestamp(6) without time zone", "datetime(3)", "", "needs a DATETIME(6)", nil},
		{Postgres, MySQL, "date", "date", "", "", map[string]string{"2024-02-29": "2024-02-29", "0044-03-15 BC": "!"}},
		// MariaDB's JSON column is a longtext: the text as it is. MySQL's
		// JSON type keeps the value: no duplicate key, numbers it holds.
		{Postgres, MySQL, "json", "longtext", "", "", map[string]string{`{"a":1,"a":2}`: `{"a":1,"a":2}`, `1e400`: `1e400`}},
		{Postgres, MySQL, "jsonb", "json", "", "", map[string]string{
			`{"a": [1, 2.50, 0.1, -0.5e-3, 9223372036854775807, 18446744073709551615, 1e300]}`: `{"a": [1, 2.50, 0.1, -0.5e-3, 9223372036854775807, 18446744073709551615, 1e300]}`,
			`{"n": 12345678901234567890.5}`: "!", `1e400`: "!", `{"a":1,"a":2}`: "!", `"\u0000"`: `"\u0000"`}},
		{Postgres, MySQL, "text[]", "longtext", "", "", nil},
		{Postgres, MySQL, "integer[]", "json", "", "not JSON", nil},
		{Postgres, MySQL, "interval", "time", "", "no interval type", nil},
		// Issue 37: inet as PostgreSQL prints it (the readers give ::text,
		// which always shows the netmask); cidr as it is.
		{Postgres, MySQL, "inet", "longtext", "", "", map[string]string{
			"::1/128": "::1", "10.0.0.1/32": "10.0.0.1", "10.0.0.1/8": "10.0.0.1/8", "::ffff:1.2.3.4/128": "::ffff:1.2.3.4",
			"2001:db8::1/64": "2001:db8::1/64", "::1": "::1", "10.0.0.0/32": "10.0.0.0", "1.2.3.4/128": "1.2.3.4/128"}},
		{Postgres, MySQL, "cidr", "longtext", "", "", map[string]string{"10.0.0.1/32": "10.0.0.1/32", "::1/128": "::1/128"}},
		{Postgres, MySQL, "inet", "varchar(50)", "", "no exact MySQL mapping", nil},
		{Postgres, MySQL, "inet[]", "longtext", "", "", map[string]string{"{::1,10.0.0.1/8}": "{::1,10.0.0.1/8}"}},
		{Postgres, MySQL, "uuid", "uuid", "", "", map[string]string{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}},
		{Postgres, MySQL, "uuid", "binary(16)", "", "", map[string]string{
			"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11": "\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11", "a0": "!"}},
		{Postgres, MySQL, "uuid", "binary(15)", "", "UUID (MariaDB 10.7 or later), BINARY(16) or CHAR(36)", nil},
		{Postgres, MySQL, "uuid", "char(32)", "", "UUID (MariaDB 10.7 or later), BINARY(16) or CHAR(36)", nil},
		{Postgres, MySQL, "mood", "enum('sad','ok','happy')", "'sad','ok','happy'", "", map[string]string{"ok": "ok", "OK": "!", "new": "!"}},
		{Postgres, MySQL, "mood", "enum('sad','meh','ok','happy','new')", "'sad','ok','happy'", "", map[string]string{"happy": "happy", "new": "new"}},
		{Postgres, MySQL, "mood", "enum('sad','happy','ok')", "'sad','ok','happy'", "another order", nil},
		{Postgres, MySQL, "mood", "enum('sad','ok')", "'sad','ok','happy'", `lacks the label "happy"`, nil},
		{Postgres, MySQL, "mood", "enum('Sad','ok','happy')", "'sad','ok','happy'", `lacks the label "sad"`, nil},
		{Postgres, MySQL, "mood", "enum('Ünï ''q''','trailing')", "'Ünï ''q''','trailing '", `lacks the label "trailing "`, nil},
		{Postgres, MySQL, "mood", "varchar(5)", "'sad','ok','happy'", "", map[string]string{"happy": "happy", "happier": "!"}},
		{Postgres, MySQL, "mood", "varchar(4)", "'sad','ok','happy'", "enum('sad','ok','happy')", nil},
		{Postgres, MySQL, "mood", "longtext", "'sad','ok','happy'", "", map[string]string{"ok": "ok"}},
		{Postgres, MySQL, "real", "float", "", "", map[string]string{"-0": "!", "0": "0", "1e-45": "1e-45"}},
		{Postgres, MySQL, "numeric(5,2)", "decimal(5,2)", "", "", map[string]string{"-0": "-0", "-Infinity": "!"}},
		{Postgres, MySQL, "timestamp with time zone", "timestamp(6)", "", "", map[string]string{
			"1970-01-01 00:00:01+00": "1970-01-01 00:00:01", "1970-01-01 00:00:00.5+00": "!", "1970-01-01 00:00:00+00": "!",
			"2038-01-19 03:14:07.999999+00": "2038-01-19 03:14:07.999999", "2038-01-19 03:14:08+00": "!", "1969-12-31 23:59:59+00": "!"}},
		// MySQL → PostgreSQL
		{MySQL, Postgres, "tinyint(1)", "boolean", "", "", map[string]string{"1": "t", "0": "f", "2": "!"}},
		{MySQL, Postgres, "int(10) unsigned", "integer", "", "do not all fit", nil},
		{MySQL, Postgres, "int(10) unsigned", "bigint", "", "", nil},
		{MySQL, Postgres, "bigint(20) unsigned", "numeric(20,0)", "", "", nil},
		{MySQL, Postgres, "decimal(12,2)", "numeric(12,2)", "", "", nil},
		{MySQL, Postgres, "varchar(64)", "character varying(64)", "", "", map[string]string{"ok": "ok", "a\x00b": "!", "\xff": "!"}},
		{MySQL, Postgres, "char(36)", "uuid", "", "", nil},
		{MySQL, Postgres, "blob", "bytea", "", "", map[string]string{"\x00\xff": `\x00ff`}},
		{MySQL, Postgres, "blob", "text", "", "bytea", nil},
		{MySQL, Postgres, "date", "date", "", "", map[string]string{"2024-01-01": "2024-01-01", "0000-00-00": "!"}},
		{MySQL, Postgres, "datetime(6)", "timestamp(6) without time zone", "", "", nil},
		{MySQL, Postgres, "timestamp(3)", "timestamp(3) with time zone", "", "", map[string]string{"2024-01-01 10:00:00.500": "2024-01-01 10:00:00.500+00"}},
		{MySQL, Postgres, "time", "time without time zone", "", "", map[string]string{"12:00:00": "12:00:00", "838:59:59": "!", "-01:00:00": "!",
			"24:00:00": "24:00:00", "24:00:00.000000": "24:00:00.000000", "24:00:00.000001": "!", "24:00:01": "!", "23:59:59.999999": "23:59:59.999999"}},
		{MySQL, Postgres, "time", "interval", "", "", nil},
		{MySQL, Postgres, "enum('small','large')", "text", "", "", nil},
		{MySQL, Postgres, "enum('small','large')", "character varying(3)", "", "labels", nil},
		{MySQL, Postgres, "json", "jsonb", "", "", nil},
		{MySQL, Postgres, "longtext", "jsonb", "", "", map[string]string{
			`{"a":1,"b":{"a":2}}`: `{"a":1,"b":{"a":2}}`, `{"a":1,"a":2}`: "!", `[{"k":1},{"k":{"x":1,"x":2}}]`: "!",
			`"\u0000"`: "!", `{"\u0000":1}`: "!", `"\u00e9"`: `"\u00e9"`, `1e400`: `1e400`, `{`: "!"}},
		{MySQL, Postgres, "json", "jsonb", "", "", map[string]string{`{"a":1,"a":2}`: "!", `[]`: `[]`}},
		{MySQL, Postgres, "json", "json", "", "", map[string]string{`{"a":1,"a":2}`: `{"a":1,"a":2}`}},
		{MySQL, Postgres, "bit(4)", "bit(4)", "", "", map[string]string{"\x05": "0101"}},
		{MySQL, Postgres, "year(4)", "smallint", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.from)+":"+tt.src+"→"+tt.dst, func(t *testing.T) {
			conv, err := Column(tt.from, tt.to, sluice.Column{Type: tt.src, Enum: tt.enum}, tt.dst)
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
			_, _ = Column(e, map[Engine]Engine{Postgres: MySQL, MySQL: Postgres}[e], sluice.Column{Type: s, Enum: s}, s)
		}
	})
}
