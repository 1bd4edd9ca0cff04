package workload

import (
	"strings"
	"testing"
)

// TestRequiredTextLeftUnchanged: TestRandomized's 20 transactions of a
// PostgreSQL source update, whatever the seed, rows whose NOT NULL
// TOASTed text they leave as it is (the log then carries no value for it),
// in place and with key changes, and the column is NOT NULL on both sides.
func TestRequiredTextLeftUnchanged(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		for _, target := range []Engine{Postgres, MySQL} {
			w := Generate(Config{Seed: seed, Source: Postgres, Target: target, Txs: 20, MaxStmts: 8})
			items := w.Schema.Table(ItemsTable)
			col := items.Col(RequiredTextColumn)
			for _, e := range []Engine{Postgres, MySQL} {
				if ddl := strings.Join(w.Schema.DDL(e), "\n"); !strings.Contains(ddl, RequiredTextColumn+" "+w.Schema.SQLType(e, items.Columns[col])+" NOT NULL") {
					t.Fatalf("seed %d: %s DDL lacks %s NOT NULL:\n%s", seed, e, RequiredTextColumn, ddl)
				}
			}
			// The column's value per key, replayed from the statements.
			values := map[string]any{}
			inPlace, moved := 0, 0
			for _, tx := range w.Txs {
				for _, s := range tx.Stmts {
					if s.Table != items {
						continue
					}
					switch s.Op {
					case Insert:
						values[keyString(keyOfStmt(items, s.Cols, s.Vals))] = s.Vals[indexOf(s.Cols, col)]
					case Delete:
						delete(values, keyString(s.Key))
					case Update:
						old := keyString(s.Key)
						v := values[old]
						delete(values, old)
						nk := append([]any(nil), s.Key...)
						keyChange := false
						for i, c := range s.Cols {
							if items.isKey(c) {
								nk[indexOf(items.Key, c)] = s.Vals[i]
								keyChange = true
							}
						}
						if i := indexOf(s.Cols, col); i >= 0 {
							v = s.Vals[i]
						} else if IsToast(v) && keyChange {
							moved++
						} else if IsToast(v) {
							inPlace++
						}
						values[keyString(nk)] = v
					}
				}
			}
			if inPlace == 0 || moved == 0 {
				t.Errorf("seed %d, postgres → %s: %d updates in place and %d key changes leave %s TOASTed and unsent; want some of each",
					seed, target, inPlace, moved, RequiredTextColumn)
			}
		}
	}
}

func indexOf(list []int, v int) int {
	for i, x := range list {
		if x == v {
			return i
		}
	}
	return -1
}

// keyOfStmt is the key of an insert's row.
func keyOfStmt(t *Table, cols []int, vals []any) []any {
	k := make([]any, len(t.Key))
	for i, c := range t.Key {
		k[i] = vals[indexOf(cols, c)]
	}
	return k
}
