package verify

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

var update = flag.Bool("update", false, "rewrite testdata/canon.golden from CanonExpr's output")

// canonCase is one column pair: the source's type and the target's, each
// in its engine's catalog spelling.
type canonCase struct {
	from     Dialect
	src      string
	to       Dialect
	dst      string
	wantForm string // the form both sides must compute
}

var canonCases = []canonCase{
	// PostgreSQL to PostgreSQL: the text form, exact under PGSettings, but
	// for the forms that compare by value.
	{PostgreSQL, "integer", PostgreSQL, "integer", "pg-text"},
	{PostgreSQL, "numeric(12,2)", PostgreSQL, "numeric(14,4)", "decimal"},
	{PostgreSQL, "real", PostgreSQL, "real", "pg-text"},
	{PostgreSQL, "double precision", PostgreSQL, "double precision", "pg-text"},
	{PostgreSQL, "json", PostgreSQL, "jsonb", "jsonb"},
	{PostgreSQL, "timestamp(3) with time zone", PostgreSQL, "timestamp(3) with time zone", "pg-text"},
	{PostgreSQL, "integer[]", PostgreSQL, "integer[]", "pg-text"},
	{PostgreSQL, "smallint", PostgreSQL, "bigint", "int"},
	{PostgreSQL, "real", PostgreSQL, "double precision", "float32"},
	// MySQL to MySQL.
	{MySQL, "float", MySQL, "float", "float32"},
	{MySQL, "double", MySQL, "double", "float64"},
	{MySQL, "decimal(12,2)", MySQL, "decimal(12,2)", "decimal"},
	{MySQL, "binary(4)", MySQL, "binary(4)", "hex"},
	{MySQL, "bit(5)", MySQL, "bit(5)", "bits"},
	{MySQL, "int(11)", MySQL, "bigint(20)", "int"},
	{MySQL, "year(4)", MySQL, "year(4)", "int"},
	{MySQL, "longtext", MySQL, "longtext", "my-text"},
	{MySQL, "datetime(6)", MySQL, "datetime(6)", "my-text"},
	{MySQL, "enum('a','b')", MySQL, "enum('a','b')", "my-text"},
	// PostgreSQL to MySQL.
	{PostgreSQL, "bigint", MySQL, "bigint(20)", "int"},
	{PostgreSQL, "integer", MySQL, "decimal(20,0)", "decimal"},
	{PostgreSQL, "numeric(12,2)", MySQL, "decimal(14,4)", "decimal"},
	{PostgreSQL, "real", MySQL, "float", "float32"},
	{PostgreSQL, "real", MySQL, "double", "float32"},
	{PostgreSQL, "double precision", MySQL, "double", "float64"},
	{PostgreSQL, "boolean", MySQL, "tinyint(1)", "bool"},
	{PostgreSQL, "boolean", MySQL, "bit(1)", "bool"},
	{PostgreSQL, "boolean", MySQL, "longtext", "bool"},
	{PostgreSQL, "character varying(20)", MySQL, "varchar(20)", "pg-text"},
	{PostgreSQL, "character(6)", MySQL, "char(6)", "char"},
	{PostgreSQL, "character(6)", MySQL, "varchar(6)", "char"},
	{PostgreSQL, "text", MySQL, "longtext", "pg-output"},
	{PostgreSQL, "bytea", MySQL, "longblob", "hex"},
	{PostgreSQL, "uuid", MySQL, "char(36)", "uuid"},
	{PostgreSQL, "date", MySQL, "date", "date"},
	{PostgreSQL, "date", MySQL, "datetime", "timestamp"},
	{PostgreSQL, "timestamp(6) without time zone", MySQL, "datetime(6)", "timestamp"},
	{PostgreSQL, "timestamp(3) with time zone", MySQL, "datetime(6)", "timestamp"},
	{PostgreSQL, "time(6) without time zone", MySQL, "time(6)", "time"},
	{PostgreSQL, "jsonb", MySQL, "longtext", "pg-output"},
	{PostgreSQL, "json", MySQL, "json", "pg-text"},
	{PostgreSQL, "integer[]", MySQL, "longtext", "pg-text"},
	{PostgreSQL, "interval", MySQL, "longtext", "pg-output"},
	// Issue 37: the PostgreSQL side computes the text PostgreSQL prints,
	// not the apply path's conversion of value::text.
	{PostgreSQL, "inet", MySQL, "longtext", "pg-output"},
	{PostgreSQL, "inet[]", MySQL, "longtext", "pg-text"},
	{PostgreSQL, "character(6)", MySQL, "longtext", "pg-text"},
	{PostgreSQL, "uuid", MySQL, "uuid", "uuid"},
	{PostgreSQL, "uuid", MySQL, "binary(16)", "uuid-bytes"},
	{PostgreSQL, "mood", MySQL, "enum('sad','ok','happy')", "pg-output"},
	{PostgreSQL, "mood", MySQL, "varchar(5)", "pg-output"},
	{PostgreSQL, "mood", MySQL, "longtext", "pg-output"},
	// MySQL to PostgreSQL.
	{MySQL, "tinyint(4)", PostgreSQL, "smallint", "int"},
	{MySQL, "mediumint(9)", PostgreSQL, "integer", "int"},
	{MySQL, "bigint(20) unsigned", PostgreSQL, "numeric(20,0)", "decimal"},
	{MySQL, "decimal(12,2)", PostgreSQL, "numeric(14,4)", "decimal"},
	{MySQL, "float", PostgreSQL, "real", "float32"},
	{MySQL, "float", PostgreSQL, "double precision", "float32"},
	{MySQL, "double", PostgreSQL, "double precision", "float64"},
	{MySQL, "tinyint(1)", PostgreSQL, "boolean", "bool"},
	{MySQL, "varchar(20)", PostgreSQL, "character varying(20)", "my-text"},
	{MySQL, "char(6)", PostgreSQL, "character(6)", "char"},
	{MySQL, "char(36)", PostgreSQL, "uuid", "uuid"},
	{MySQL, "text", PostgreSQL, "text", "my-text"},
	{MySQL, "int(11)", PostgreSQL, "text", "int"},
	{MySQL, "longtext", PostgreSQL, "jsonb", "json-normalize"},
	{MySQL, "longtext", PostgreSQL, "json", "my-text"},
	{MySQL, "binary(4)", PostgreSQL, "bytea", "hex"},
	{MySQL, "blob", PostgreSQL, "bytea", "hex"},
	{MySQL, "bit(5)", PostgreSQL, "bit(5)", "bits"},
	{MySQL, "bit(5)", PostgreSQL, "bytea", "bit-bytes"},
	{MySQL, "date", PostgreSQL, "date", "date"},
	{MySQL, "datetime(6)", PostgreSQL, "timestamp(6) without time zone", "timestamp"},
	{MySQL, "timestamp(6)", PostgreSQL, "timestamp(6) with time zone", "timestamp"},
	{MySQL, "time(6)", PostgreSQL, "time(6) without time zone", "time"},
	{MySQL, "time(6)", PostgreSQL, "interval", "time"},
	{MySQL, "year(4)", PostgreSQL, "smallint", "int"},
	{MySQL, "enum('a','b')", PostgreSQL, "character varying(5)", "my-text"},
	{MySQL, "set('x','y')", PostgreSQL, "character varying(5)", "my-text"},
}

func ident(d Dialect, name string) string {
	if d == PostgreSQL {
		return `"` + name + `"`
	}
	return "`" + name + "`"
}

func sides(c canonCase) (src, dst CanonColumn) {
	srcCol := sluice.Column{Name: "c", Type: c.src}
	if c.src == "mood" { // a PostgreSQL enum
		srcCol.Enum = "'sad','ok','happy'"
	}
	src = CanonColumn{Dialect: c.from, Ident: ident(c.from, "c"), Type: c.src, Source: srcCol, SourceDialect: c.from, TargetType: c.dst, TargetDialect: c.to}
	dst = CanonColumn{Dialect: c.to, Ident: ident(c.to, "c"), Type: c.dst, Source: srcCol, SourceDialect: c.from, TargetType: c.dst, TargetDialect: c.to}
	return src, dst
}

// TestCanonForms checks which form each type pair compares in, on both
// sides, and the SQL each side computes it with against
// testdata/canon.golden (go test -run TestCanonForms -update rewrites it;
// review the diff: each change there changes what verify hashes).
func TestCanonForms(t *testing.T) {
	var golden strings.Builder
	for _, c := range canonCases {
		src, dst := sides(c)
		name := fmt.Sprintf("%s %s -> %s %s", c.from, c.src, c.to, c.dst)
		p := pair{src: parseType(c.from, c.src), srcDialect: c.from, dst: parseType(c.to, c.dst), dstDialect: c.to, srcEnum: src.Source.Enum != ""}
		f, err := p.form()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if f.name != c.wantForm {
			t.Errorf("%s: form %s, want %s", name, f.name, c.wantForm)
		}
		fmt.Fprintf(&golden, "== %s (%s)\n", name, f.name)
		for _, side := range []CanonColumn{src, dst} {
			e, err := CanonExpr(side)
			if err != nil {
				t.Errorf("%s, %s side: %v", name, side.Dialect, err)
				continue
			}
			fmt.Fprintf(&golden, "%s: %s\n", side.Dialect, e)
		}
	}
	path := filepath.Join("testdata", "canon.golden")
	if *update {
		if err := os.WriteFile(path, []byte(golden.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestCanonForms -update writes it)", err)
	}
	if got := golden.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs from CanonExpr's output at line %d:\n got: %s\nwant: %s\n(go test -run TestCanonForms -update rewrites it)", path, i+1, g, w)
			}
		}
	}
}

// TestCanonDefaults: without the target's type a column is taken to be
// compared with one of its own type on its own engine.
func TestCanonDefaults(t *testing.T) {
	for _, tc := range []struct {
		c    CanonColumn
		want string
	}{
		{CanonColumn{Dialect: PostgreSQL, Ident: `"n"`, Type: "numeric(5,2)"}, `trim_scale("n")::text`},
		{CanonColumn{Dialect: PostgreSQL, Ident: `"t"`, Type: "text", Source: sluice.Column{Type: "text"}, SourceDialect: PostgreSQL}, `("t")::text`},
		{CanonColumn{Dialect: MySQL, Ident: "`b`", Type: "varbinary(8)"}, "CONVERT(LOWER(HEX(`b`)) USING utf8mb4)"},
		// The target side of a cross-engine pair knows its own type.
		{CanonColumn{Dialect: MySQL, Ident: "`u`", Type: "char(36)", Source: sluice.Column{Type: "uuid"}, SourceDialect: PostgreSQL}, "LOWER(CONVERT(`u` USING utf8mb4))"},
	} {
		got, err := CanonExpr(tc.c)
		if err != nil || got != tc.want {
			t.Errorf("CanonExpr(%+v) = %q, %v; want %q", tc.c, got, err, tc.want)
		}
	}
}

// TestCanonRefusals: a pair with no canonical form is refused naming the
// column and both types.
func TestCanonRefusals(t *testing.T) {
	for _, c := range []canonCase{
		{from: PostgreSQL, src: "bytea", to: MySQL, dst: "longtext"},
		{from: PostgreSQL, src: "point", to: MySQL, dst: "varchar(40)"},
		{from: MySQL, src: "geometry", to: PostgreSQL, dst: "bytea"},
		{from: MySQL, src: "double", to: PostgreSQL, dst: "text"},
		{from: PostgreSQL, src: "integer[]", to: MySQL, dst: "json"},
		{from: MySQL, src: "float", to: MySQL, dst: "varchar(10)"},
		{from: PostgreSQL, src: "integer", to: 9, dst: "integer"},
	} {
		src, _ := sides(c)
		_, err := CanonExpr(src)
		if err == nil {
			t.Errorf("%s %s -> %s %s: no error", c.from, c.src, c.to, c.dst)
			continue
		}
		if !strings.Contains(err.Error(), src.Ident) || !strings.Contains(err.Error(), c.src) {
			t.Errorf("%s %s -> %s %s: error %q does not name the column and its type", c.from, c.src, c.to, c.dst, err)
		}
	}
	if _, err := CanonExpr(CanonColumn{Dialect: 7, Ident: "x", Type: "int"}); err == nil {
		t.Error("dialect 7: no error")
	}
}
