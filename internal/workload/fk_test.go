package workload

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestFKGenerateCovers: TestRandomized's 20 transactions take every step
// of the foreign-key graph, whatever the seed, and its DDL holds every
// action.
func TestFKGenerateCovers(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		for _, p := range pairs {
			w := Generate(Config{Seed: seed, Source: p.source, Target: p.target, Txs: 20, MaxStmts: 8, ForeignKeys: true})
			for _, s := range fkSteps {
				if w.Steps[s.name+" "+s.table] == 0 {
					t.Errorf("seed %d, %s: step %s never ran", seed, pairName(p.source, p.target), s.name)
				}
			}
			for _, s := range steps {
				for _, tbl := range w.Schema.Tables {
					if tbl.fkGraph && (s.applies(tbl) || w.Steps[s.name+" "+tbl.Name] > 0) {
						t.Errorf("generic step %s applies to the graph's %s", s.name, tbl.Name)
					}
				}
			}
		}
	}
	ddl := strings.Join(newSchemaFK(t).DDL(MySQL), "\n")
	for _, want := range []string{"ON DELETE CASCADE ON UPDATE CASCADE", "ON DELETE RESTRICT ON UPDATE NO ACTION",
		"ON DELETE SET NULL ON UPDATE CASCADE", "ON DELETE CASCADE ON UPDATE RESTRICT", "ON DELETE SET NULL ON UPDATE SET NULL",
		"FOREIGN KEY (order_id, line_no) REFERENCES fk_lines (order_id, line_no)", "REFERENCES fk_tree (id)"} {
		if !strings.Contains(ddl, want) {
			t.Errorf("the graph's DDL lacks %q:\n%s", want, ddl)
		}
	}
}

// newSchemaFK is the schema of a workload with the foreign-key graph.
func newSchemaFK(t *testing.T) *Schema {
	t.Helper()
	return Generate(Config{Seed: 1, Source: MySQL, Txs: 1, ForeignKeys: true}).Schema
}

// TestFKMirror applies a workload with the foreign-key graph to a
// PostgreSQL and a MariaDB database, where each database's own foreign
// keys carry out the actions: every statement touches its one row, every
// table ends with the rows the model holds, and the two databases compare
// equal: the model's actions are both engines'.
func TestFKMirror(t *testing.T) {
	seed := Seed(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := Generate(Config{Seed: seed, Source: Postgres, Target: MySQL, Txs: testTxs, MaxStmts: testStmts, ForeignKeys: true})
	var cmps []dbtest.DB
	for _, e := range []Engine{Postgres, MySQL} {
		db, cmp := source(t, e)
		createTables(t, ctx, w, e, db)
		if err := w.ApplyAll(ctx, db); err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		for _, tbl := range w.Schema.TableNames() {
			n, err := countRows(ctx, db, tbl)
			if err != nil {
				t.Fatal(err)
			}
			if n != w.Rows(tbl) {
				t.Errorf("%s: %s has %d rows, the model %d", e, tbl, n, w.Rows(tbl))
			}
		}
		cmps = append(cmps, cmp)
	}
	graph := w.Schema.GraphTableNames()
	for _, tbl := range graph {
		if w.Rows(tbl) == 0 {
			t.Errorf("%s ends empty: the graph's steps should leave rows", tbl)
		}
	}
	diffs, err := dbtest.CompareTables(ctx, cmps[0], cmps[1], graph...)
	if err != nil {
		t.Fatal(err)
	}
	if !diffs.Equal() {
		t.Errorf("MariaDB's actions differ from PostgreSQL's:\n%s", diffs)
	}
	if t.Failed() {
		t.Log(w)
	}
}
