package workload

import (
	"context"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testTxs and testStmts size the tests' workloads: small enough to run in
// seconds, large enough that the agenda reaches every step.
// SLUICE_RANDOMIZED_N, which lengthens TestRandomized, lengthens them too.
var testTxs = func() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_RANDOMIZED_N")); err == nil && n >= 40 {
		return n
	}
	return 40
}()

const testStmts = 8

var pairs = []struct{ source, target Engine }{
	{Postgres, Postgres}, {Postgres, MySQL}, {MySQL, MySQL}, {MySQL, Postgres},
}

func pairName(s, t Engine) string { return string(s) + "_to_" + string(t) }

func TestGenerateDeterministic(t *testing.T) {
	seed := Seed(t, 0)
	for _, p := range pairs {
		t.Run(pairName(p.source, p.target), func(t *testing.T) {
			cfg := Config{Seed: seed, Source: p.source, Target: p.target, Txs: testTxs, MaxStmts: testStmts}
			a, b := Generate(cfg), Generate(cfg)
			if !reflect.DeepEqual(a.Txs, b.Txs) {
				t.Fatal("the same config generated different transactions")
			}
			if !reflect.DeepEqual(a.Steps, b.Steps) {
				t.Fatal("the same config counted different steps")
			}
			cfg.Seed++
			if c := Generate(cfg); reflect.DeepEqual(a.Txs, c.Txs) {
				t.Fatal("seeds s and s+1 generated the same transactions")
			}
		})
	}
}

// TestGenerateCovers checks that a small workload already takes every step
// on every table it applies to, and holds the edge values the package
// promises, within the pair's domain.
func TestGenerateCovers(t *testing.T) {
	seed := Seed(t, 0)
	for _, p := range pairs {
		t.Run(pairName(p.source, p.target), func(t *testing.T) {
			w := Generate(Config{Seed: seed, Source: p.source, Target: p.target, Txs: testTxs, MaxStmts: testStmts})
			t.Log(w)
			for _, s := range steps {
				for _, tbl := range w.Schema.Tables {
					if s.applies(tbl) && w.Steps[s.name+" "+tbl.Name] == 0 {
						t.Errorf("step %s never ran on %s", s.name, tbl.Name)
					}
				}
			}
			if len(w.Txs) != testTxs {
				t.Errorf("%d transactions, want %d", len(w.Txs), testTxs)
			}
			multi, toast, negZero := 0, 0, 0
			for _, tx := range w.Txs {
				if len(tx.Stmts) > 1 {
					multi++
				}
				if len(tx.Stmts) > testStmts+4 {
					t.Errorf("transaction %d has %d statements, want at most %d and a step's few", tx.Index, len(tx.Stmts), testStmts)
				}
				for _, s := range tx.Stmts {
					for i, c := range s.Cols {
						v := s.Vals[i]
						if IsToast(v) {
							toast++
						}
						if f, ok := v.(float64); ok && f == 0 && math.Signbit(f) {
							negZero++
						}
						if tm, ok := v.(time.Time); ok && s.Table.Columns[c].Type == TimestampTZ && p.source == MySQL &&
							(tm.Before(minMariaTS) || tm.After(maxMariaTS)) {
							t.Errorf("%s.%s = %v: outside MariaDB TIMESTAMP's range", s.Table.Name, s.Table.Columns[c].Name, tm)
						}
					}
				}
			}
			if multi == 0 || toast == 0 {
				t.Errorf("%d multi-statement transactions, %d TOAST values; want some of each", multi, toast)
			}
			if keeps := p.source == Postgres && p.target == Postgres; !keeps && negZero > 0 {
				t.Errorf("%d -0.0 values for a pair that does not keep the sign", negZero)
			}
		})
	}
}

// TestGenerateCoversSmallRuns: TestRandomized's 20 transactions take
// every step on every table, the corpus table's too, whatever the seed.
func TestGenerateCoversSmallRuns(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		for _, p := range pairs {
			w := Generate(Config{Seed: seed, Source: p.source, Target: p.target, Txs: 20, MaxStmts: 8, Corpus: true})
			for _, s := range steps {
				for _, tbl := range w.Schema.Tables {
					if s.applies(tbl) && w.Steps[s.name+" "+tbl.Name] == 0 {
						t.Errorf("seed %d, %s: step %s never ran on %s", seed, pairName(p.source, p.target), s.name, tbl.Name)
					}
				}
			}
		}
	}
}

// TestTrace: the trace of a row's final key holds its whole history,
// through the key changes that brought it there.
func TestTrace(t *testing.T) {
	w := Generate(Config{Seed: Seed(t, 0), Txs: testTxs, MaxStmts: testStmts})
	checked := 0
	for _, tx := range w.Txs {
		for i := 0; i+1 < len(tx.Stmts); i++ {
			s, next := tx.Stmts[i], tx.Stmts[i+1]
			if s.Step != "key-chain" || s.Table.Name != ItemsTable || next.Step != "key-chain" ||
				keyString(next.Key) != keyString(newKey(s)) {
				continue
			}
			// A → B (stmt i), B → C (stmt i+1): C's trace has both.
			c := newKey(tx.Stmts[i+1])[0].(int64)
			trace := strings.Join(w.Trace(ItemsTable, []int64{c}), "\n")
			for _, j := range []int{i, i + 1} {
				if want := fmt.Sprintf("tx %d stmt %d ", tx.Index, j); !strings.Contains(trace, want) {
					t.Errorf("trace of id=%d lacks %q:\n%s", c, want, trace)
				}
			}
			if !strings.Contains(trace, "(insert)") && !strings.Contains(trace, "(delete-reinsert)") {
				t.Errorf("trace of id=%d lacks the row's insert:\n%s", c, trace)
			}
			checked++
			i++
		}
	}
	if checked == 0 {
		t.Fatal("no key chain on wl_items to trace")
	}
}

func TestGenerateWithout(t *testing.T) {
	without := []string{"uk-swap", "uk-chain", "key-chain", "insert"}
	w := Generate(Config{Seed: Seed(t, 0), Txs: testTxs, MaxStmts: testStmts, Without: without})
	for k, n := range w.Steps {
		name, _, _ := strings.Cut(k, " ")
		if name != "insert" && slices.Contains(without, name) {
			t.Errorf("step %s ran %d times although left out", k, n)
		}
	}
	if w.Steps["insert "+ItemsTable] == 0 {
		t.Error("insert cannot be left out: every other step needs rows")
	}
}

// source is a fresh database on the harness's server of engine e, opened
// the way sluice's tests open it.
func source(t *testing.T, e Engine) (DB, dbtest.DB) {
	t.Helper()
	if e == Postgres {
		pool, err := pgxpool.New(context.Background(), dbtest.PG(t).URL(dbtest.PGDatabase(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return DB{PG: pool}, dbtest.DB{PG: pool}
	}
	d := dbtest.MariaEngine.Database(t)
	return DB{My: d.My}, d.Side()
}

func createTables(t *testing.T, ctx context.Context, w *Workload, e Engine, db DB) {
	t.Helper()
	for _, ddl := range w.Schema.DDL(e) {
		var err error
		if db.PG != nil {
			_, err = db.PG.(*pgxpool.Pool).Exec(ctx, ddl)
		} else {
			_, err = db.My.ExecContext(ctx, ddl)
		}
		if err != nil {
			t.Fatalf("%s: %v", ddl, err)
		}
	}
}

func countRows(ctx context.Context, db DB, table string) (int, error) {
	var n int
	var err error
	if db.PG != nil {
		err = db.PG.(*pgxpool.Pool).QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	} else {
		err = db.My.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	}
	return n, err
}

// TestApplyToSource runs a workload, with the corpus table, on a
// PostgreSQL and on a MariaDB source, nothing else involved: every
// statement must succeed and touch
// its one row, and each table must end with the rows the model holds —
// the model stays in step with the database.
func TestApplyToSource(t *testing.T) {
	seed := Seed(t, 0)
	for _, e := range []Engine{Postgres, MySQL} {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			other := map[Engine]Engine{Postgres: MySQL, MySQL: Postgres}[e]
			w := Generate(Config{Seed: seed, Source: e, Target: other, Txs: testTxs, MaxStmts: testStmts, Corpus: true})
			db, _ := source(t, e)
			createTables(t, ctx, w, e, db)
			start := time.Now()
			if err := w.ApplyAll(ctx, db); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d transactions, %d statements in %v", len(w.Txs), w.Statements(), time.Since(start).Round(time.Millisecond))
			for _, tbl := range w.Schema.TableNames() {
				n, err := countRows(ctx, db, tbl)
				if err != nil {
					t.Fatal(err)
				}
				if n != w.Rows(tbl) {
					t.Errorf("%s has %d rows, the model %d", tbl, n, w.Rows(tbl))
				}
			}
		})
	}
}

// TestApplyFailsLoudly: a statement the model did not expect — here a row
// deleted behind the workload's back — stops the run with an error naming
// the transaction, the step and the seed.
func TestApplyFailsLoudly(t *testing.T) {
	for _, e := range []Engine{Postgres, MySQL} {
		t.Run(string(e), func(t *testing.T) {
			ctx := context.Background()
			w := Generate(Config{Seed: 7, Source: e, Txs: 30, MaxStmts: testStmts})
			db, _ := source(t, e)
			createTables(t, ctx, w, e, db)
			if err := w.Apply(ctx, db, w.Txs[:10]); err != nil {
				t.Fatal(err)
			}
			for _, tbl := range w.Schema.TableNames() {
				var err error
				if db.PG != nil {
					_, err = db.PG.(*pgxpool.Pool).Exec(ctx, "DELETE FROM "+tbl)
				} else {
					_, err = db.My.ExecContext(ctx, "DELETE FROM "+tbl)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			err := w.Apply(ctx, db, w.Txs[10:])
			if err == nil {
				t.Fatal("the workload ran on although its rows were gone")
			}
			for _, want := range []string{"seed 7", "transaction ", "step "} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestMirror applies the same seeded workload to a source, to a second
// database of the same engine and to one of the other engine (with the
// DDL for that pair), and compares them with dbtest's binary comparison:
// equal tables prove the generator deterministic and the comparison's
// canonical forms in agreement across engines, for every type pair the
// workload uses.
func TestMirror(t *testing.T) {
	seed := Seed(t, 0)
	for _, p := range pairs {
		t.Run(pairName(p.source, p.target), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			w := Generate(Config{Seed: seed, Source: p.source, Target: p.target, Txs: testTxs, MaxStmts: testStmts})
			type replica struct {
				name string
				e    Engine
				db   DB
				cmp  dbtest.DB
			}
			var dbs []replica
			for _, r := range []struct {
				name string
				e    Engine
			}{{"source", p.source}, {"same engine", p.source}, {"target", p.target}} {
				if r.name == "target" && p.target == p.source {
					continue
				}
				db, cmp := source(t, r.e)
				createTables(t, ctx, w, r.e, db)
				if err := w.ApplyAll(ctx, db); err != nil {
					t.Fatalf("%s (%s): %v", r.name, r.e, err)
				}
				dbs = append(dbs, replica{r.name, r.e, db, cmp})
			}
			for _, r := range dbs[1:] {
				diffs, err := dbtest.CompareTables(ctx, dbs[0].cmp, r.cmp, w.Schema.TableNames()...)
				if err != nil {
					t.Fatal(err)
				}
				if !diffs.Equal() {
					t.Errorf("%s (%s) differs from the source (%s):\n%s", r.name, r.e, p.source, diffs)
				}
				if p.source == MySQL && r.e == MySQL {
					if err := dbtest.CompareChecksumTable(ctx, dbs[0].db.My, r.db.My, w.Schema.TableNames()...); err != nil {
						t.Errorf("%s: %v", r.name, err)
					}
				}
			}
			// And the comparison is not vacuous: a replica three
			// transactions behind differs.
			db, cmp := source(t, p.target)
			createTables(t, ctx, w, p.target, db)
			if err := w.Apply(ctx, db, w.Txs[:len(w.Txs)-3]); err != nil {
				t.Fatal(err)
			}
			diffs, err := dbtest.CompareTables(ctx, dbs[0].cmp, cmp, w.Schema.TableNames()...)
			if err != nil {
				t.Fatal(err)
			}
			if diffs.Equal() {
				t.Error("a replica without the last three transactions compared equal")
			}
			if t.Failed() {
				t.Log(w)
			}
		})
	}
}

// TestSchemaDDL pins the type of every column per pair to what sluice's
// type map accepts (docs/architecture.md, "Cross-engine type map").
func TestSchemaDDL(t *testing.T) {
	want := map[string]map[Engine]string{
		// column: engine of the database → type, for a PostgreSQL source
		// and for a MariaDB source.
		"u64 pg-source":  {Postgres: "numeric(20,0)", MySQL: "decimal(20,0)"},
		"u64 my-source":  {Postgres: "numeric(20,0)", MySQL: "bigint unsigned"},
		"tstz pg-source": {Postgres: "timestamptz(6)", MySQL: "datetime(6)"},
		"tstz my-source": {Postgres: "timestamptz(6)", MySQL: "timestamp(6) NULL DEFAULT NULL"},
	}
	for name, byEngine := range want {
		col, src, _ := strings.Cut(name, " ")
		s := newSchema(map[string]Engine{"pg-source": Postgres, "my-source": MySQL}[src])
		c := s.Table(TypedTable).Columns[s.Table(TypedTable).Col(col)]
		for e, typ := range byEngine {
			if got := s.SQLType(e, c); got != typ {
				t.Errorf("%s on %s: %s, want %s", name, e, got, typ)
			}
		}
	}
	for _, e := range []Engine{Postgres, MySQL} {
		ddl := newSchema(e).DDL(e)
		if len(ddl) != 3 || !strings.Contains(ddl[2], "PRIMARY KEY (order_id, line_no)") {
			t.Errorf("DDL for %s: %q", e, ddl)
		}
	}
}
