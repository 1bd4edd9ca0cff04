package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/apply/typemap"
)

// collationDDL creates nondeterministic ICU collations: nd_ci ignores case,
// nd_ai case and accents.
var collationDDL = []string{
	`CREATE COLLATION nd_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
	`CREATE COLLATION nd_ai (provider = icu, locale = 'und-u-ks-level1', deterministic = false)`,
}

// keyCase is a source table whose key goes into a target table.
type keyCase struct {
	name   string
	target string          // the target table's column definitions
	src    []sluice.Column // the source's columns; the first is the primary key
	// refused holds what the refusal must say; nil: preflight accepts.
	refused []string
	notSaid []string // what the refusal must not say
}

// col describes a source column; coll is its source collation ("" for
// byte-exact).
func col(name, typ, coll string) sluice.Column {
	return sluice.Column{Name: name, Type: typ, Collation: coll}
}

type preflighter interface {
	Preflight(context.Context, []*sluice.Table) error
}

// runKeyCases creates each case's target table in one database and runs
// the preflight of a source table through target, which is the target
// itself or the type map wrapping it, as the daemon opens the pair.
func runKeyCases(t *testing.T, cases []keyCase, target func(*Target) preflighter) {
	t.Helper()
	ddl := slices.Clone(collationDDL)
	for i, c := range cases {
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE c%d (%s)", i, c.target))
	}
	url, _ := testDB(t, ddl...)
	tg := target(openTarget(t, url, Pipelined))
	ctx := context.Background()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: fmt.Sprintf("c%d", i)}, Columns: c.src, Key: []int{0}}
			err := tg.Preflight(ctx, []*sluice.Table{tbl})
			if c.refused == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			want := append([]string{fmt.Sprintf("column public.c%d.", i), "would merge rows the source keeps apart", "--allow-collation-merge"}, c.refused...)
			wantErr(t, err, want...)
			for _, s := range c.notSaid {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error says %q", s)
				}
			}
		})
	}
}

// TestKeyCollationPGToPG: a PostgreSQL source's key, byte-exact or under a
// nondeterministic collation, into PostgreSQL key columns of every kind.
// PostgreSQL to PostgreSQL runs without the type map.
func TestKeyCollationPGToPG(t *testing.T) {
	text := func(coll string) []sluice.Column {
		return []sluice.Column{col("k", "text", coll), col("v", "integer", "")}
	}
	runKeyCases(t, []keyCase{
		{name: "byte-exact into nondeterministic", target: "k text COLLATE nd_ci PRIMARY KEY, v integer", src: text(""),
			refused: []string{"k (primary key)", "compares its values byte-exact", `collation "nd_ci" is nondeterministic`, "here ignoring case ('a' = 'A')",
				"ON CONFLICT DO UPDATE of one would silently overwrite", `ALTER TABLE public.c0 ALTER COLUMN k TYPE text COLLATE "default"`},
			notSaid: []string{"accents"}},
		{name: "byte-exact into case- and accent-insensitive", target: "k varchar(20) COLLATE nd_ai PRIMARY KEY, v integer",
			src:     []sluice.Column{col("k", "character varying(20)", ""), col("v", "integer", "")},
			refused: []string{"ignoring case ('a' = 'A') and accents ('e' = 'é')", `ALTER COLUMN k TYPE character varying(20) COLLATE "default"`}},
		{name: "byte-exact into database default", target: "k text PRIMARY KEY, v integer", src: text("")},
		{name: "byte-exact into C", target: `k text COLLATE "C" PRIMARY KEY, v integer`, src: text("")},
		{name: "byte-exact into deterministic ICU", target: `k text COLLATE "und-x-icu" PRIMARY KEY, v integer`, src: text("")},
		{name: "same nondeterministic collation", target: "k text COLLATE nd_ci PRIMARY KEY, v integer", src: text("nd_ci")},
		{name: "same, schema-qualified", target: "k text COLLATE nd_ci PRIMARY KEY, v integer", src: text("public.nd_ci")},
		{name: "nondeterministic into deterministic", target: "k text PRIMARY KEY, v integer", src: text("nd_ci")},
		{name: "another nondeterministic collation", target: "k text COLLATE nd_ai PRIMARY KEY, v integer", src: text("nd_ci"),
			refused: []string{`under nd_ci but the target under "nd_ai", a different collation, nondeterministic`, `equal under "nd_ai"`}},
		{name: "bytea", target: "k bytea PRIMARY KEY, v integer", src: []sluice.Column{col("k", "bytea", ""), col("v", "integer", "")}},
		{name: "unique index", target: "id integer PRIMARY KEY, email text COLLATE nd_ci UNIQUE",
			src:     []sluice.Column{col("id", "integer", ""), col("email", "text", "")},
			refused: []string{"email (unique index c10_email_key)", "fail on the index and stop the stream"}},
		{name: "INCLUDE column of a unique index", target: "id integer PRIMARY KEY, a integer, e text COLLATE nd_ci, UNIQUE (a) INCLUDE (e)",
			src: []sluice.Column{col("id", "integer", ""), col("a", "integer", ""), col("e", "text", "")}},
	}, func(tg *Target) preflighter {
		return tg
	})
}

// TestKeyCollationMySQLToPG: a MySQL-family source's key, under its
// collation or byte-exact, into PostgreSQL through the type map.
func TestKeyCollationMySQLToPG(t *testing.T) {
	runKeyCases(t, []keyCase{
		{name: "collation into nondeterministic", target: "k varchar(16) COLLATE nd_ci PRIMARY KEY, v integer",
			src:     []sluice.Column{col("k", "varchar(16)", "utf8mb4_general_ci"), col("v", "int", "")},
			refused: []string{"k (primary key)", `under utf8mb4_general_ci but the target under "nd_ci", a different collation, nondeterministic`, `ALTER COLUMN k TYPE character varying(16) COLLATE "default"`}},
		{name: "byte-exact into nondeterministic", target: "k varchar(16) COLLATE nd_ai PRIMARY KEY, v integer",
			src:     []sluice.Column{col("k", "varchar(16)", ""), col("v", "int", "")},
			refused: []string{"byte-exact", `"nd_ai" is nondeterministic`}},
		{name: "collation into deterministic", target: "k varchar(16) PRIMARY KEY, v integer",
			src: []sluice.Column{col("k", "varchar(16)", "utf8mb4_general_ci"), col("v", "int", "")}},
		{name: "varbinary into bytea", target: "k bytea PRIMARY KEY, v integer",
			src: []sluice.Column{col("k", "varbinary(16)", ""), col("v", "int", "")}},
		{name: "char(36) into uuid", target: "k uuid PRIMARY KEY, v integer",
			src: []sluice.Column{col("k", "char(36)", "utf8mb4_general_ci"), col("v", "int", "")}},
		{name: "unique index", target: "id integer PRIMARY KEY, email varchar(32) COLLATE nd_ci UNIQUE",
			src:     []sluice.Column{col("id", "int", ""), col("email", "varchar(32)", "utf8mb4_bin")},
			refused: []string{"email (unique index c5_email_key)", "under utf8mb4_bin"}},
	}, func(tg *Target) preflighter {
		return typemap.Wrap(tg, typemap.MySQL, typemap.Postgres)
	})
}

// TestKeyCollationMergesRows shows that the pairs preflight refuses do
// merge rows: with the merge accepted, two source rows whose keys differ
// only by case or accents are one row on a target whose key collation is
// nondeterministic, the second having overwritten the first. A
// deterministic key keeps both. Without the setting, Apply refuses the
// table as Preflight does.
func TestKeyCollationMergesRows(t *testing.T) {
	cases := []struct {
		coll   string
		a, b   string
		merged bool
	}{
		{"nd_ci", "a", "A", true},
		{"nd_ai", "e", "é", true},
		{"nd_ci", "e", "é", false}, // nd_ci ignores case only
		{`"default"`, "a", "A", false},
		{`"default"`, "e", "é", false},
	}
	ddl := slices.Clone(collationDDL)
	for i, c := range cases {
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE m%d (k text COLLATE %s PRIMARY KEY, v integer)", i, c.coll))
	}
	url, conn := testDB(t, ddl...)
	ctx := context.Background()
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s %q %q", c.coll, c.a, c.b), func(t *testing.T) {
			name := fmt.Sprintf("m%d", i)
			tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: name}, Key: []int{0},
				Columns: []sluice.Column{{Name: "k", Type: "text"}, {Name: "v", Type: "integer", Nullable: true}}}
			// Two transactions, as two source transactions would be: in one
			// statement PostgreSQL refuses to update a row twice.
			batches := []*apply.Batch{apply.Compact([]sluice.Change{ins(tbl, c.a, "1")}, nil), apply.Compact([]sluice.Change{ins(tbl, c.b, "2")}, nil)}

			if c.merged {
				// The setting is off: Apply, which describes the table
				// itself when Preflight has not, refuses it too.
				err := openTarget(t, url, Pipelined).Apply(ctx, batches[0], sluice.Checkpoint{})
				wantErr(t, err, "would merge rows")
			}
			tg := openTarget(t, url, Pipelined)
			if err := tg.preflight(ctx, []*sluice.Table{tbl}, true); err != nil {
				t.Fatalf("preflight with the merge accepted: %v", err)
			}
			for _, b := range batches {
				if err := tg.Apply(ctx, b, sluice.Checkpoint{}); err != nil {
					t.Fatal(err)
				}
			}
			got := dump(t, conn, name)
			if !c.merged {
				want := []string{fmt.Sprintf("(%s,1)", c.a), fmt.Sprintf("(%s,2)", c.b)}
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("target rows %q, want %q", got, want)
				}
				return
			}
			// One row is left, holding the first key and the second row's
			// value: the upsert of the second row overwrote the first.
			if want := fmt.Sprintf("(%s,2)", c.a); !slices.Equal(got, []string{want}) {
				t.Errorf("target rows %q, want the one row %q", got, want)
			}
			t.Logf("source rows (%s,1) and (%s,2) are target rows %q", c.a, c.b, got)
		})
	}
}
