package postgres

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".sql")
	if *update {
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got+"\n" != string(want) {
		t.Errorf("%s changed (run go test -update if intended):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// pgcat is a column of a built-in type, its values sent as the target
// sends them when they all parse (see kindFor).
func pgcat(name, typ string) sqlColumn {
	c := sqlColumn{Name: name, TypeSchema: "pg_catalog", TypeName: typ}
	c.Param = kindFor(c)
	return c
}

func TestGoldenSQL(t *testing.T) {
	orders := pgx.Identifier{"public", "orders"}.Sanitize()
	cols := []sqlColumn{pgcat("id", "int8"), pgcat("customer", "varchar"), pgcat("total", "numeric"),
		pgcat("tags", "_text"), pgcat("placed_at", "timestamptz")}
	lines := []sqlColumn{pgcat("order_id", "int8"), pgcat("line", "int4"), pgcat("sku", "text")}
	cases := []struct {
		name string
		sql  string
	}{
		{"upsert_single_key", buildUpsert(orders, cols, []int{0})},
		// An image whose customer and tags were unchanged TOAST: only the
		// present columns are inserted and SET.
		{"upsert_unchanged_columns", buildUpsert(orders, []sqlColumn{cols[0], cols[2], cols[4]}, []int{0})},
		// The same rows, which cannot be inserted: updated in place.
		{"update_unsent_columns", buildUpdate(orders, []sqlColumn{cols[0], cols[2], cols[4]}, []int{0})},
		{"update_key_only", buildUpdate(`"public"."order_lines"`, lines[:2], []int{0, 1})},
		{"upsert_composite_key", buildUpsert(`"public"."order_lines"`, lines, []int{0, 1})},
		{"upsert_key_only", buildUpsert(`"public"."tags"`, lines[:2], []int{1, 0})},
		{"delete_single_key", buildDelete(orders, cols[:1])},
		{"delete_composite_key", buildDelete(`"public"."order_lines"`, lines[:2])},
		// An integer key whose values did not all parse as integers goes
		// as text, cast by the server.
		{"delete_key_as_text", buildDelete(orders, []sqlColumn{{Name: "id", TypeSchema: "pg_catalog", TypeName: "int8"}})},
		{"upsert_smallint_key", buildUpsert(`"public"."small"`, []sqlColumn{pgcat("id", "int2"), pgcat("note", "text")}, []int{0})},
		{"upsert_odd_names", buildUpsert(pgx.Identifier{`My "Schema"`, "Tä ble"}.Sanitize(),
			[]sqlColumn{{Name: `a"b`, TypeSchema: "public", TypeName: `my "type"`}, {Name: "ü c", TypeSchema: "pg_catalog", TypeName: "bpchar"}}, []int{0})},
		{"checkpoint_upsert", buildCheckpointUpsert("sluice")},
		{"checkpoint_ddl", strings.Join(buildCheckpointDDL("sluice"), ";\n")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { golden(t, c.name, c.sql) })
	}
}

func TestTextArray(t *testing.T) {
	var b strings.Builder
	textArray(&b, []string{"a", "", "NULL", `q"x\y`, `{a,"b c"}`, "x"}, []bool{false, false, false, false, false, true})
	want := `{"a","","NULL","q\"x\\y","{a,\"b c\"}",NULL}`
	if b.String() != want {
		t.Fatalf("got %s, want %s", b.String(), want)
	}
}

// FuzzBuildUpsert checks that whatever the names, every identifier in the
// generated SQL is a correctly quoted identifier: stripping the quoted
// identifiers leaves only the fixed SQL text of the statement, so no name can
// break out of its quotes.
func FuzzBuildUpsert(f *testing.F) {
	f.Add("public", "orders", "id", "int8", "note", "text", `a"b`, "pg_catalog")
	f.Add(`s"; DROP TABLE x; --`, "tä ble", `"`, `""`, "$1", "u.c", "ü", `my"type`)
	f.Fuzz(func(t *testing.T, schema, table, c1, t1, c2, t2, c3, ts string) {
		for _, s := range []string{schema, table, c1, t1, c2, t2, c3, ts} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Skip("PostgreSQL identifiers are valid UTF-8 without NUL")
			}
		}
		if c1 == c2 || c1 == c3 || c2 == c3 {
			t.Skip("column names are distinct")
		}
		tbl := pgx.Identifier{schema, table}.Sanitize()
		cols := []sqlColumn{{c1, ts, t1, int8Param}, {c2, ts, t2, textParam}, {c3, "pg_catalog", "text", textParam}}
		up := buildUpsert(tbl, cols, []int{0})
		del := buildDelete(tbl, cols[:2])
		wantUp := buildUpsert(`"T"`, []sqlColumn{{"A", "S", "X", int8Param}, {"B", "S", "Y", textParam}, {"C", "pg_catalog", "text", textParam}}, []int{0})
		wantDel := buildDelete(`"T"`, []sqlColumn{{"A", "S", "X", int8Param}, {"B", "S", "Y", textParam}})
		norm := func(sql string) string { return stripIdents(t, sql) }
		if got, want := norm(up), norm(wantUp); got != want {
			t.Fatalf("upsert skeleton differs:\n%s\nwant\n%s\nsql:\n%s", got, want, up)
		}
		if got, want := norm(del), norm(wantDel); got != want {
			t.Fatalf("delete skeleton differs:\n%s\nwant\n%s\nsql:\n%s", got, want, del)
		}
	})
}

// stripIdents replaces every quoted identifier (and dotted chain of them)
// with I, scanning as the server's lexer does: inside double quotes, "" is a
// quote and any other " ends the identifier.
func stripIdents(t *testing.T, sql string) string {
	var b strings.Builder
	for i := 0; i < len(sql); i++ {
		if sql[i] != '"' {
			b.WriteByte(sql[i])
			continue
		}
		j := i + 1
		for {
			if j >= len(sql) {
				t.Fatalf("unterminated quoted identifier in %q", sql)
			}
			if sql[j] == '"' {
				if j+1 < len(sql) && sql[j+1] == '"' {
					j += 2
					continue
				}
				break
			}
			j++
		}
		b.WriteByte('I')
		i = j
	}
	// Qualified names collapse to one I so that "s"."t" and "t" compare equal.
	return strings.ReplaceAll(b.String(), "I.I", "I")
}
