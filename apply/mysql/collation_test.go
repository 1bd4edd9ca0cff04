package mysql

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

// keyCase is a source table whose key goes into a target table.
type keyCase struct {
	name   string
	target string          // the target table's column definitions
	src    []sluice.Column // the source's columns; the first is the primary key
	// refused holds what the refusal must say (%DB% stands for the
	// target database); nil: preflight accepts.
	refused []string
	notSaid []string // what the refusal must not say
}

// col describes a source column; coll is its source collation ("" for
// byte-exact).
func col(name, typ, coll string) sluice.Column {
	return sluice.Column{Name: name, Type: typ, Collation: coll}
}

// runKeyCases creates each case's target table in one database and runs
// the preflight of a source table of engine from through the type map, as
// the daemon wraps every MySQL-family target.
func runKeyCases(t *testing.T, from typemap.Engine, cases []keyCase) {
	t.Helper()
	var ddl []string
	for i, c := range cases {
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE c%d (%s)", i, c.target))
	}
	dsn, _ := testDB(t, ddl...)
	db := dsn[strings.LastIndexByte(dsn, '/')+1:]
	tg := openTarget(t, dsn, Pipelined, nil)
	wrapped := typemap.Wrap(tg, from, typemap.MySQL)
	ctx := context.Background()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tbl := &sluice.Table{Name: sluice.TableName{Schema: "src", Name: fmt.Sprintf("c%d", i)}, Columns: c.src, Key: []int{0}}
			err := wrapped.Preflight(ctx, []*sluice.Table{tbl})
			if c.refused == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			want := []string{fmt.Sprintf("column %s.c%d.", db, i)}
			for _, s := range c.refused {
				want = append(want, strings.ReplaceAll(s, "%DB%", db))
			}
			if !slices.ContainsFunc(c.src, func(sc sluice.Column) bool { return sc.Collation != "" }) {
				want = append(want, "byte-exact")
			}
			wantErr(t, err, append(want, "would merge rows the source keeps apart", "--allow-collation-merge")...)
			for _, s := range c.notSaid {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error says %q", s)
				}
			}
		})
	}
}

// TestKeyCollationMySQLToMySQL: a MySQL-family source's key, byte-exact or
// under a collation, into MariaDB key columns of every kind.
func TestKeyCollationMySQLToMySQL(t *testing.T) {
	v16 := func(coll string) []sluice.Column {
		return []sluice.Column{col("k", "varchar(16)", coll), col("v", "int", "")}
	}
	runKeyCases(t, typemap.MySQL, []keyCase{
		{name: "byte-exact into general_ci", target: "k varchar(16) COLLATE utf8mb4_general_ci PRIMARY KEY, v int", src: v16(""),
			refused: []string{"k (primary key)", "utf8mb4_general_ci is case-insensitive ('a' = 'A'), accent-insensitive ('e' = 'é') and PAD SPACE",
				"silently overwrite", "ALTER TABLE %DB%.c0 MODIFY `k` varchar(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL"}},
		{name: "byte-exact into PAD SPACE utf8mb4_bin", target: "k varchar(16) COLLATE utf8mb4_bin PRIMARY KEY, v int", src: v16(""),
			refused: []string{"utf8mb4_bin is PAD SPACE (trailing spaces are ignored: 'a' = 'a ')", "COLLATE utf8mb4_nopad_bin"},
			notSaid: []string{"case-insensitive"}},
		{name: "byte-exact into utf8mb4_nopad_bin", target: "k varchar(16) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v int", src: v16("")},
		{name: "varbinary", target: "k varbinary(16) PRIMARY KEY, v int",
			src: []sluice.Column{col("k", "varbinary(16)", ""), col("v", "int", "")}},
		{name: "not a string", target: "k int PRIMARY KEY, v int", src: []sluice.Column{col("k", "int", ""), col("v", "int", "")}},
		{name: "same collation", target: "k varchar(16) COLLATE utf8mb4_general_ci PRIMARY KEY, v int", src: v16("utf8mb4_general_ci")},
		{name: "same collation, utf8 alias", target: "k varchar(16) CHARACTER SET utf8mb3 COLLATE utf8mb3_general_ci PRIMARY KEY, v int",
			src: v16("utf8_general_ci")},
		{name: "collation into byte-exact", target: "k varchar(16) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v int", src: v16("utf8mb4_general_ci")},
		{name: "collation into another", target: "k varchar(16) COLLATE utf8mb4_unicode_ci PRIMARY KEY, v int", src: v16("utf8mb4_general_ci"),
			refused: []string{"k (primary key)", "under utf8mb4_general_ci but the target under utf8mb4_unicode_ci, a different collation (case-insensitive", "give it the source's collation (COLLATE utf8mb4_general_ci)"}},
		{name: "char under utf8mb4_bin", target: "k char(8) COLLATE utf8mb4_bin PRIMARY KEY, v int",
			src: []sluice.Column{col("k", "char(8)", ""), col("v", "int", "")}},
		{name: "unique index", target: "id int PRIMARY KEY, email varchar(32) COLLATE utf8mb4_general_ci NULL, UNIQUE KEY by_email (email)",
			src:     []sluice.Column{col("id", "int", ""), col("email", "varchar(32)", "")},
			refused: []string{"email (unique index `by_email`)", "collide with the first on the index", "MODIFY `email` varchar(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"},
			notSaid: []string{"NOT NULL"}},
	})
}

// TestKeyCollationPGToMySQL: a PostgreSQL key, byte-exact, into MariaDB.
func TestKeyCollationPGToMySQL(t *testing.T) {
	v16 := []sluice.Column{col("k", "character varying(16)", ""), col("v", "integer", "")}
	runKeyCases(t, typemap.Postgres, []keyCase{
		{name: "into general_ci", target: "k varchar(16) COLLATE utf8mb4_general_ci PRIMARY KEY, v int", src: v16,
			refused: []string{"k (primary key)", "utf8mb4_general_ci is case-insensitive", "COLLATE utf8mb4_nopad_bin NOT NULL"}},
		{name: "into the database default utf8mb4_unicode_ci", target: "k varchar(16) PRIMARY KEY, v int", src: v16,
			refused: []string{"utf8mb4_unicode_ci is case-insensitive"}},
		{name: "into PAD SPACE utf8mb4_bin", target: "k varchar(16) COLLATE utf8mb4_bin PRIMARY KEY, v int", src: v16,
			refused: []string{"utf8mb4_bin is PAD SPACE"}, notSaid: []string{"case-insensitive"}},
		{name: "into utf8mb4_nopad_bin", target: "k varchar(16) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v int", src: v16},
		{name: "integer", target: "k int PRIMARY KEY, v int", src: []sluice.Column{col("k", "integer", ""), col("v", "integer", "")}},
		{name: "unique index", target: "id int PRIMARY KEY, email varchar(32) COLLATE utf8mb4_bin NULL, UNIQUE KEY by_email (email)",
			src:     []sluice.Column{col("id", "integer", ""), col("email", "character varying(32)", "")},
			refused: []string{"email (unique index `by_email`)", "utf8mb4_bin is PAD SPACE"}},
	})
}

// TestKeyCollationMergesRows shows that the pairs preflight refuses do
// merge rows: with the merge accepted, two source rows whose keys differ
// only by case, accents or trailing spaces (or, for a source under another
// collation, by what only the target ignores) are one row on the target,
// the second having overwritten the first. A byte-exact key keeps both.
// Without the setting, Apply refuses the table as Preflight does.
func TestKeyCollationMergesRows(t *testing.T) {
	cases := []struct {
		coll, srcColl string
		a, b          string
		merged        bool
	}{
		{"utf8mb4_general_ci", "", "a", "A", true},
		{"utf8mb4_general_ci", "", "e", "é", true},
		{"utf8mb4_bin", "", "a", "a ", true},
		{"utf8mb4_unicode_ci", "utf8mb4_general_ci", "ss", "ß", true}, // equal under unicode_ci only
		{"utf8mb4_nopad_bin", "", "a", "A", false},
		{"utf8mb4_nopad_bin", "", "e", "é", false},
		{"utf8mb4_nopad_bin", "", "a", "a ", false},
	}
	var ddl []string
	for i, c := range cases {
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE m%d (k varchar(8) COLLATE %s PRIMARY KEY, v int) DEFAULT CHARSET=utf8mb4", i, c.coll))
	}
	dsn, db := testDB(t, ddl...)
	ctx := context.Background()
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s %q %q", c.coll, c.a, c.b), func(t *testing.T) {
			name := fmt.Sprintf("m%d", i)
			tbl := table(name, []int{0}, "k varchar(8)", "v int")
			tbl.Columns[0].Collation = c.srcColl
			batch := apply.Compact([]sluice.Change{ins(tbl, c.a, "1"), ins(tbl, c.b, "2")}, nil)

			if c.merged {
				// The setting is off: Apply, which describes the table
				// itself when Preflight has not, refuses it too.
				err := openTarget(t, dsn, Pipelined, nil).Apply(ctx, batch, sluice.Checkpoint{})
				wantErr(t, err, "would merge rows")
			}
			tg := openTarget(t, dsn, Pipelined, nil)
			if err := tg.preflight(ctx, []*sluice.Table{tbl}, true); err != nil {
				t.Fatalf("preflight with the merge accepted: %v", err)
			}
			if err := tg.Apply(ctx, batch, sluice.Checkpoint{}); err != nil {
				t.Fatal(err)
			}
			got := dump(t, db, name)
			if !c.merged {
				want := []string{c.a + "|1", c.b + "|2"}
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("target rows %q, want %q", got, want)
				}
				return
			}
			// One row is left, holding one key and the other row's value:
			// the upsert of the second row overwrote the first.
			if len(got) != 1 || got[0] != c.a+"|2" && got[0] != c.b+"|1" {
				t.Errorf("target rows %q, want one row: %q or %q", got, c.a+"|2", c.b+"|1")
			}
			t.Logf("source rows %q and %q are target row %q", c.a+"|1", c.b+"|2", got)
		})
	}
}

func TestCollationMerges(t *testing.T) {
	const (
		ci  = "case-insensitive ('a' = 'A')"
		ai  = "accent-insensitive ('e' = 'é')"
		pad = "PAD SPACE (trailing spaces are ignored: 'a' = 'a ')"
		lin = "linguistic (distinct characters can compare equal)"
	)
	tests := []struct {
		name string
		char bool
		want []string
	}{
		{"binary", false, nil},
		{"utf8mb4_nopad_bin", false, nil},
		{"utf8mb4_0900_bin", false, nil}, // MySQL 8: NO PAD
		{"utf8mb4_bin", false, []string{pad}},
		{"utf8mb4_bin", true, nil}, // CHAR drops trailing spaces anyway
		{"latin1_bin", false, []string{pad}},
		{"utf8mb4_general_ci", false, []string{ci, ai, pad}},
		{"utf8mb4_general_ci", true, []string{ci, ai}},
		{"utf8mb4_general_nopad_ci", false, []string{ci, ai}},
		{"utf8mb4_0900_ai_ci", false, []string{ci, ai}},
		{"utf8mb4_0900_as_ci", false, []string{ci}},
		{"utf8mb4_0900_as_cs", false, []string{lin}},
		{"utf8mb4_uca1400_as_ci", false, []string{ci, pad}},
		{"UTF8MB4_UNICODE_CI", false, []string{ci, ai, pad}},
		{"latin1_general_cs", false, []string{lin, pad}},
	}
	for _, tc := range tests {
		if got := collationMerges(tc.name, tc.char); !slices.Equal(got, tc.want) {
			t.Errorf("collationMerges(%q, char=%v) = %q, want %q", tc.name, tc.char, got, tc.want)
		}
	}
	for _, tc := range []struct{ server, charset, want string }{
		{"MariaDB", "utf8mb4", "utf8mb4_nopad_bin"},
		{"MariaDB", "latin1", "latin1_nopad_bin"},
		{"MySQL", "utf8mb4", "utf8mb4_0900_bin"},
		{"MySQL", "latin1", ""},
	} {
		if got := exactCollation(tc.server, tc.charset); got != tc.want {
			t.Errorf("exactCollation(%s, %s) = %q, want %q", tc.server, tc.charset, got, tc.want)
		}
	}
}
