package workload

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestGeneratedSometimes: over many seeds the schema gets no generated
// column, one or both, STORED and VIRTUAL, indexed or not; no statement
// writes one.
func TestGeneratedSometimes(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(1); seed <= 200; seed++ {
		w := Generate(Config{Seed: seed, Source: MySQL, Target: Postgres, Txs: 20, MaxStmts: 4})
		n := 0
		for _, tb := range w.Schema.Tables {
			for _, c := range tb.Columns {
				if c.Gen == nil {
					continue
				}
				n++
				seen[c.Name]++
				seen[map[bool]string{true: "stored", false: "virtual"}[c.Gen.Stored]]++
				if c.Gen.Indexed {
					seen["indexed"]++
				}
			}
		}
		seen[map[bool]string{true: "some", false: "none"}[n > 0]]++
		for _, tx := range w.Txs {
			for _, s := range tx.Stmts {
				for _, c := range s.Cols {
					if s.Table.Columns[c].Gen != nil {
						t.Fatalf("seed %d: %s %s writes generated column %s", seed, s.Op, s.Table.Name, s.Table.Columns[c].Name)
					}
				}
			}
		}
	}
	for _, k := range []string{"none", "some", "n_twice", "txt_len", "stored", "virtual", "indexed"} {
		if seen[k] < 10 {
			t.Errorf("over 200 seeds, %s only %d times: %v", k, seen[k], seen)
		}
	}
}

// TestGeneratedApplied: a workload with both generated columns applies
// on either engine, and the engines compute the columns alike: the two
// databases compare equal, generated values included.
func TestGeneratedApplied(t *testing.T) {
	seed := uint64(0)
	for s := uint64(1); seed == 0; s++ {
		w := Generate(Config{Seed: s, Source: Postgres, Target: MySQL, Txs: 1, MaxStmts: 1})
		if strings.Contains(strings.Join(w.Schema.DDL(MySQL), ";"), "n_twice") && strings.Contains(strings.Join(w.Schema.DDL(MySQL), ";"), "txt_len") {
			seed = s
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := Generate(Config{Seed: seed, Source: Postgres, Target: MySQL, Txs: testTxs, MaxStmts: testStmts})
	var cmp []dbtest.DB
	for _, e := range []Engine{Postgres, MySQL} {
		db, c := source(t, e)
		createTables(t, ctx, w, e, db)
		if err := w.ApplyAll(ctx, db); err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		cmp = append(cmp, c)
	}
	diffs, err := dbtest.CompareTables(ctx, cmp[0], cmp[1], w.Schema.TableNames()...)
	if err != nil {
		t.Fatal(err)
	}
	if !diffs.Equal() {
		t.Errorf("seed %d: the engines computed the generated columns differently:\n%s", seed, diffs)
	}
}
