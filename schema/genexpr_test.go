package schema

import (
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply/genexpr"
)

// genTable is a table whose columns the expressions below refer to, as
// each engine types them.
func genTable(e Engine) *Table {
	t := &Table{Name: sluice.TableName{Name: "g"}, PrimaryKey: []string{"id"}}
	if e == Postgres {
		t.Columns = []Column{
			{Name: "id", Type: "bigint"}, {Name: "n", Type: "integer"}, {Name: "s", Type: "smallint"},
			{Name: "price", Type: "numeric(10,2)"}, {Name: "txt", Type: "text"}, {Name: "vc", Type: "character varying(20)"},
			{Name: "r", Type: "real"}, {Name: "b", Type: "bytea"}, {Name: "Mixed", Type: "integer"},
			{Name: "gen", Type: "integer", Generated: "(n * 2)", Stored: true},
		}
		return t
	}
	t.Columns = []Column{
		{Name: "id", Type: "bigint(20)"}, {Name: "n", Type: "int(11)"}, {Name: "s", Type: "smallint(6)"},
		{Name: "price", Type: "decimal(10,2)"}, {Name: "txt", Type: "text"}, {Name: "vc", Type: "varchar(20)"},
		{Name: "r", Type: "double"}, {Name: "b", Type: "varbinary(20)"}, {Name: "u", Type: "int(10) unsigned"},
		{Name: "flag", Type: "tinyint(1)"}, {Name: "Mixed", Type: "int(11)"},
		{Name: "gen", Type: "int(11)", Generated: "`n` * 2"},
	}
	return t
}

// TestTranslateGenerated: the expressions both engines compute alike are
// translated (with a bigint cast on PostgreSQL where MySQL computes in 64
// bits), every other one is refused with the reason.
func TestTranslateGenerated(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to Engine
		expr     string
		want     string // "" when refused
		why      string // a part of the refusal
	}{
		// PostgreSQL to MySQL, as pg_get_expr prints.
		{"pg double", Postgres, MySQL, "(n * 2)", "`n` * 2", ""},
		{"pg bigint cast", Postgres, MySQL, "((n)::bigint * 2)", "CAST(`n` AS SIGNED) * 2", ""},
		{"pg char_length", Postgres, MySQL, "char_length(txt)", "char_length(`txt`)", ""},
		{"pg char_length varchar", Postgres, MySQL, "char_length((vc)::text)", "char_length(`vc`)", ""},
		{"pg character_length varchar", Postgres, MySQL, "character_length((vc)::character varying)", "char_length(`vc`)", ""},
		{"pg text cast of a number", Postgres, MySQL, "char_length((n)::text)", "", "non-string"},
		{"pg text cast to arithmetic", Postgres, MySQL, "((vc)::text * 2)", "", "over a string"},
		{"pg decimal", Postgres, MySQL, "((price * (n)::numeric) + 1.50)", "(`price` * `n`) + 1.50", ""},
		{"pg decimal implicit", Postgres, MySQL, "((price * (3)::numeric) - (s)::numeric)", "(`price` * 3) - `s`", ""},
		{"pg numeric typmod", Postgres, MySQL, "((n)::numeric(5,1) * 2)", "", "a cast to numeric"},
		{"pg numeric of text", Postgres, MySQL, "((vc)::numeric * 2)", "", "a cast of a string"},
		{"pg decimal plain", Postgres, MySQL, "((price * 2) + 1.50)", "(`price` * 2) + 1.50", ""},
		{"pg nested", Postgres, MySQL, "((n - (s - 1)) * abs(id))", "(`n` - (`s` - 1)) * abs(`id`)", ""},
		{"pg unary minus", Postgres, MySQL, "(- n)", "-`n`", ""},
		{"pg quoted name", Postgres, MySQL, `("Mixed" + 1)`, "`Mixed` + 1", ""},
		{"pg bare name folds", Postgres, MySQL, "(mixed + 1)", "", "not a column"},
		{"pg division", Postgres, MySQL, "(n / 2)", "", `operator "/"`},
		{"pg modulo", Postgres, MySQL, "(n % 2)", "", `operator "%"`},
		{"pg string", Postgres, MySQL, "(txt || 'x'::text)", "", `operator "|"`},
		{"pg length", Postgres, MySQL, "length(txt)", "", "function length"},
		{"pg float", Postgres, MySQL, "(r * (2)::double precision)", "", "type real"},
		{"pg bytea", Postgres, MySQL, "char_length(b)", "", "type bytea"},
		{"pg text arithmetic", Postgres, MySQL, "(txt + 1)", "", "over a string"},
		{"pg generated ref", Postgres, MySQL, "(gen + 1)", "", "generated column"},
		{"pg exponent", Postgres, MySQL, "(n * 1e3)", "", "number"},
		{"pg huge literal", Postgres, MySQL, "(n * 99999999999999999999)", "", "64 bits"},
		// MySQL to PostgreSQL, as information_schema prints.
		{"my double", MySQL, Postgres, "`n` * 2", `("n")::bigint * 2`, ""},
		{"my bigint", MySQL, Postgres, "`id` * 2", `"id" * 2`, ""},
		{"my wide literal", MySQL, Postgres, "`n` * 3000000000", `"n" * 3000000000`, ""},
		{"my char_length", MySQL, Postgres, "char_length(`txt`)", `char_length("txt")`, ""},
		{"my char_length times", MySQL, Postgres, "char_length(`vc`) * 2", `(char_length("vc"))::bigint * 2`, ""},
		{"my decimal", MySQL, Postgres, "`price` * `n`", `"price" * "n"`, ""},
		{"my nested", MySQL, Postgres, "(`n` + `s`) * 2", `(("n")::bigint + "s") * 2`, ""},
		{"my minus", MySQL, Postgres, "-`n`", `-("n")::bigint`, ""},
		{"my abs", MySQL, Postgres, "abs(`n`)", `abs(("n")::bigint)`, ""},
		{"my cast", MySQL, Postgres, "cast(`n` as signed)", `("n")::bigint`, ""},
		{"my cast integer", MySQL, Postgres, "CAST(`n` AS SIGNED INTEGER) * 2", `("n")::bigint * 2`, ""},
		{"my case-insensitive", MySQL, Postgres, "`mixed` + 1", `("Mixed")::bigint + 1`, ""},
		{"my unsigned", MySQL, Postgres, "`u` - 1", "", "unsigned"},
		{"my tinyint(1)", MySQL, Postgres, "`flag` + 1", "", "tinyint(1)"},
		{"my double col", MySQL, Postgres, "`r` * 2", "", "type double"},
		{"my div", MySQL, Postgres, "`n` DIV 2", "", `unexpected "DIV"`},
		{"my division", MySQL, Postgres, "`n` / 2", "", `operator "/"`},
		{"my json", MySQL, Postgres, "json_value(`txt`,'$.a')", "", "string literal"},
		{"my length", MySQL, Postgres, "length(`txt`)", "", "function length"},
		{"my concat", MySQL, Postgres, "concat(`txt`,`vc`)", "", "function concat"},
		{"my pg cast syntax", MySQL, Postgres, "`n`::bigint", "", `operator ":"`},
		{"my comment", MySQL, Postgres, "`n` --1", "", "comment"},
		{"my unknown column", MySQL, Postgres, "`nope` + 1", "", "not a column"},
		{"my unbalanced", MySQL, Postgres, "(`n` + 1", "", "expected )"},
		{"my trailing", MySQL, Postgres, "`n` + 1)", "", `unexpected ")"`},
		{"my empty", MySQL, Postgres, "", "", "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := translateGenerated(tc.from, tc.to, tc.expr, genTable(tc.from))
			switch {
			case tc.want != "" && err != nil:
				t.Fatalf("%s: refused: %v, want %s", tc.expr, err, tc.want)
			case tc.want != "" && got != tc.want:
				t.Fatalf("%s: got %s, want %s", tc.expr, got, tc.want)
			case tc.want == "" && err == nil:
				t.Fatalf("%s: translated to %s, want a refusal naming %q", tc.expr, got, tc.why)
			case tc.want == "" && !strings.Contains(err.Error(), tc.why):
				t.Fatalf("%s: refused with %q, want it to name %q", tc.expr, err, tc.why)
			case tc.want != "" && !genexpr.Same(tc.expr, got):
				// The preflight would warn that the target computes the
				// column differently.
				t.Errorf("%s: the preflight's comparison finds %s different: %s vs %s", tc.expr, got, genexpr.Canonical(tc.expr), genexpr.Canonical(got))
			}
		})
	}
}

// FuzzTranslateGenerated: whatever the expression, the translator returns
// (no panic, no runaway recursion), and what it translates it translates
// again, from the target's dialect back, to a stable form: the output is
// within the subset it reads.
func FuzzTranslateGenerated(f *testing.F) {
	for _, s := range []string{"(n * 2)", "((n)::bigint * 2)", "char_length(txt)", "`n` * 2", "-(-(`n`))", "CAST(`n` AS SIGNED)",
		"((price * 2) + 1.50)", "abs(`s` - `id`)", "\"Mixed\" + 1", "((((((n))))))", "n - - - 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		for _, from := range []Engine{Postgres, MySQL} {
			to := MySQL
			if from == MySQL {
				to = Postgres
			}
			out, err := translateGenerated(from, to, expr, genTable(from))
			if err != nil {
				continue
			}
			// The column names are the same on both sides; the types
			// differ only where the target's type map widens them.
			back, err := translateGenerated(to, from, out, genTable(to))
			if err != nil {
				// A PostgreSQL bigint cast reads back as a cast of a
				// non-integer only if the translator typed it wrong.
				t.Fatalf("%s → %s: %q became %q, which does not read back: %v", from, to, expr, out, err)
			}
			again, err := translateGenerated(from, to, back, genTable(from))
			if err != nil {
				t.Fatalf("%s → %s: %q → %q → %q does not translate again: %v", from, to, expr, out, back, err)
			}
			if again2, _ := translateGenerated(to, from, again, genTable(to)); again2 != back {
				t.Fatalf("%s → %s: not stable: %q → %q → %q → %q → %q", from, to, expr, out, back, again, again2)
			}
		}
	})
}

// TestPlanGeneratedIndex: a generated column that the target cannot
// compute and the stream does not carry is not created, and neither is an
// index on it (the plan once created the index, and the target refused
// it: "Key column doesn't exist"); one that it can compute is created as
// generated, with its index.
func TestPlanGeneratedIndex(t *testing.T) {
	for _, tc := range []struct {
		name      string
		expr      string
		wantCol   string // a part of the column's definition; "" when omitted
		wantIndex bool
	}{
		{"translatable", "char_length((txt)::text)", "`txt_len` int AS (char_length(`txt`)) STORED", true},
		{"untranslatable", "length(txt)", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := &Table{
				Name: sluice.TableName{Schema: "public", Name: "wl_typed"},
				Columns: []Column{{Name: "id", Type: "bigint"}, {Name: "txt", Type: "character varying(100)", Nullable: true},
					{Name: "txt_len", Type: "integer", Nullable: true, Generated: tc.expr, Stored: true}},
				PrimaryKey: []string{"id"},
				Indexes: []Index{{Name: "wl_typed_txt_len", Columns: []string{"txt_len"}, Method: "btree",
					Definition: "CREATE INDEX wl_typed_txt_len ON public.wl_typed USING btree (txt_len)"}},
			}
			p, err := BuildPlan([]*Table{tbl}, PlanOptions{From: Postgres, To: MySQL, Flavor: FlavorMariaDB, OmitsGenerated: true})
			if err != nil {
				t.Fatal(err)
			}
			create, indexes := p.Tables[0].Create[0].SQL, p.Steps(PhaseIndexes)
			if tc.wantCol == "" && strings.Contains(create, "txt_len") || tc.wantCol != "" && !strings.Contains(create, tc.wantCol) {
				t.Errorf("create: want %q in\n%s", tc.wantCol, create)
			}
			if got := len(indexes) == 1 && strings.Contains(indexes[0].SQL, "txt_len"); got != tc.wantIndex {
				t.Errorf("index on txt_len created: %v, want %v; notes: %q", got, tc.wantIndex, p.Tables[0].Notes)
			}
			if !tc.wantIndex && !strings.Contains(strings.Join(p.Tables[0].Notes, "\n"), "index wl_typed_txt_len is not created") {
				t.Errorf("no note says the index is left out: %q", p.Tables[0].Notes)
			}
		})
	}
}
