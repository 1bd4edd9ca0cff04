package genexpr

import "testing"

// The expressions on each side are what the catalogs print for the same
// column definition: MariaDB 10.11's GENERATION_EXPRESSION, MySQL 8's, and
// PostgreSQL 15's pg_get_expr (taken from the servers).
func TestSame(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"`price` * `qty`", "(price * (qty)::numeric)", true},
		{"`price` * `qty`", "(`price` * `qty`)", true},
		{"`price` / 2", "(price / (2)::numeric)", true},
		{"`n` * 2", "((n)::bigint * 2)", true},
		{"`n` * -1", "(n * '-1'::integer)", true},
		{"char_length(`note`)", "char_length((note)::text)", true},
		{"lcase(`note`)", "lower((note)::text)", true},
		{"substr(`a`,1,3)", "SUBSTRING(a FROM 1 FOR 3)", true},
		{"extract(year from `d`)", "EXTRACT(year FROM d)", true},
		{"(`price` + 1) * 2", "((price + (1)::numeric) * (2)::numeric)", true},
		{"`a` like 'x%'", "(a ~~ 'x%'::text)", true},
		{"case when `n` > 0 then 'pos' when `n` is null then NULL else 'neg' end",
			"CASE\n    WHEN (n > 0) THEN 'pos'::text\n    WHEN (n IS NULL) THEN NULL::text\n    ELSE 'neg'::text\nEND", true},
		{"json_unquote(json_extract(`doc`,_utf8mb4'$.name'))", "json_unquote(json_extract(`doc`,'$.name'))", true},
		{"concat(`a`,'it\\'s')", "concat(a, 'it''s'::text)", true},
		{"`A` + `b`", `("a" + B)`, true},
		{"`a` - `b` - `c`", "((a - b) - c)", true},
		{"`a` and `b` or `c`", "((a AND b) OR c)", true},
		{"not `a` = 1", "(NOT (a = 1))", true},

		{"json_value(`doc`,'$.name')", "(doc ->> 'name'::text)", false},
		{"`price` * `qty`", "`price` + `qty`", false},
		{"`a` * (`b` + `c`)", "`a` * `b` + `c`", false},
		{"`a` - (`b` - `c`)", "((a - b) - c)", false},
		{"`a` and (`b` or `c`)", "((a AND b) OR c)", false},
		{"'a'", "'b'", false},
		{"`price` / 2", "`price` / 2.0", false},
		// Unparsed (ARRAY[…]) on one side: compared token by token.
		{"(n = ANY (ARRAY[1, 2, 3]))", "(n = ANY (ARRAY[1, 2, 3]))", true},
		{"(n = ANY (ARRAY[1, 2, 3]))", "(n = ANY (ARRAY[1, 2, 4]))", false},
	} {
		if got := Same(tc.a, tc.b); got != tc.same {
			t.Errorf("Same(%q, %q) = %v, want %v (canonical %q and %q)", tc.a, tc.b, got, tc.same, Canonical(tc.a), Canonical(tc.b))
		}
	}
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"`price` * `qty`", "(price * qty)"},
		{"(doc ->> 'name'::text)", "(doc ->> 'name')"},
		{"`n` between 1 and 5", "(n between 1 and 5)"},
		{"`n` is not null", "(n is not null)"},
		{"`n` in (1,2,3)", "(n in (1,2,3))"},
		{"cast(`n` as char charset utf8mb3) or 'x'", "(n or 'x')"},
		{"-`n`", "(- n)"},
		{"(`a`).`b`", "a"}, // not SQL: "(a).b" does not parse, falls back below
	} {
		if tc.in == "(`a`).`b`" {
			if got := Canonical(tc.in); got != "( a ) . b" {
				t.Errorf("Canonical(%q) = %q, want the token form", tc.in, got)
			}
			continue
		}
		if got := Canonical(tc.in); got != tc.want {
			t.Errorf("Canonical(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzCanonical: any text is compared without a panic, equals itself,
// and the canonical form of an expression that parses is a fixed point.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		"`price` * `qty`", "(price * (qty)::numeric)", "CASE WHEN (n > 0) THEN 'pos'::text ELSE NULL::text END",
		"json_value(`doc`,'$.name')", "SUBSTRING(a FROM 1 FOR 3)", "(n = ANY (ARRAY[1, 2, 3]))", "'unterminated",
		"`n` between 1 and 5 and `a` like 'x%'", "x::character varying(10)[]", "extract(year from `d`)", "group_concat(distinct `a` separator ',')", "E'a\\'b'", "cast(x as char)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := Canonical(s)
		if !Same(s, s) {
			t.Fatalf("Same(%q, itself) is false", s)
		}
		p := &parser{toks: tokenize(s)}
		if _, err := p.parse(); err == nil {
			if again := Canonical(c); again != c {
				t.Fatalf("Canonical(%q) = %q, but Canonical of that = %q", s, c, again)
			}
		}
	})
}
