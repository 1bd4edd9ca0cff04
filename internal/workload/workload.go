// Package workload generates randomized, reproducible source workloads for
// sluice's end-to-end tests, in the manner of a model-based property test:
// a seeded generator writes mixed multi-statement transactions against a
// model of the rows it has written, so every statement is valid when run
// in order on a fresh database, and the same seed always gives the same
// workload.
//
// The transactions aim at what appliers get wrong: primary-key changes,
// chains of them inside one transaction (A→B→C, A→B→A) and keys moved onto
// keys deleted or vacated earlier in the same transaction; delete then
// re-insert of a key; large values PostgreSQL stores out of line (TOAST)
// left unchanged by updates of other columns and by key changes; NULL ↔
// value transitions; a NOT NULL UNIQUE column swapped between rows through
// a temporary value and passed along chains of rows; a composite key; and
// edge values of every type the cross-engine type map carries.
//
// The package holds no database of its own: Schema.DDL gives the tables
// for a source or a target of either engine, Generate the transactions and
// Apply runs them on a source (pgx for PostgreSQL, database/sql for
// MariaDB), failing on the first statement the database refuses or that
// does not touch exactly the row the model expects, since either means
// the model is wrong.
package workload

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Config sizes and seeds a workload.
type Config struct {
	// Seed determines the workload: the same Config generates the same
	// transactions.
	Seed uint64
	// Source is the engine the workload is written to; Target the engine
	// of the database it is replicated to. Values are drawn only from what
	// both hold exactly.
	Source, Target Engine
	// Txs is the number of transactions.
	Txs int
	// MaxStmts bounds the statements of a transaction: each has 1 to
	// MaxStmts, and a step of several statements (a key chain, a unique
	// swap) may take it a few past.
	MaxStmts int
	// Corpus adds the table wl_corpus, whose columns are the type pairs
	// of the type-fidelity corpus of Source → Target (see Corpus) and take
	// their values from it: SQL literals of the source's engine, so the
	// workload is then for a source only (not for a mirror of another
	// engine).
	Corpus bool
	// Without names steps to leave out ("uk-swap", "key-chain", …; see
	// StepNames; "fk-renumber-order", … of the foreign-key graph), to tell
	// which kind of change a failure needs.
	Without []string
	// ForeignKeys adds the foreign-key graph (fk.go): tables joined by
	// foreign keys of every action, whose transactions make them act.
	ForeignKeys bool
}

// StepNames lists the generator's steps.
func StepNames() []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.name
	}
	return out
}

// Op is what a statement does.
type Op uint8

const (
	Insert Op = iota + 1
	Update
	Delete
)

func (o Op) String() string {
	switch o {
	case Insert:
		return "insert"
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Stmt is one single-row statement.
type Stmt struct {
	Op    Op
	Table *Table
	// Key is the row's key before the statement (Update, Delete), aligned
	// with Table.Key.
	Key []any
	// Cols are the columns written (Insert: every column but the generated
	// ones; Update: those it sets, key columns included when it moves the
	// row) and Vals their values (see the table in values.go).
	Cols []int
	Vals []any
	// Step names the generator step that wrote the statement, for failure
	// messages ("key-chain", "uk-swap", …).
	Step string
}

// Tx is one source transaction.
type Tx struct {
	Index int
	Stmts []Stmt
}

// Workload is a generated sequence of transactions.
type Workload struct {
	Config Config
	Schema *Schema
	Txs    []Tx
	// Steps counts the generator's steps by name and table
	// ("uk-swap wl_items"), to check that a run covered every case.
	Steps map[string]int
	rows  map[string]int // rows per table after the last transaction
}

// Rows is how many rows table holds after the whole workload.
func (w *Workload) Rows(table string) int { return w.rows[table] }

// Statements counts the statements of every transaction.
func (w *Workload) Statements() int {
	n := 0
	for _, tx := range w.Txs {
		n += len(tx.Stmts)
	}
	return n
}

// String summarises the workload for logs: its seed, size and steps.
func (w *Workload) String() string {
	names := make([]string, 0, len(w.Steps))
	for k := range w.Steps {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %s → %s, %d transactions, %d statements; steps:", w.Config.Seed, w.Config.Source, w.Config.Target, len(w.Txs), w.Statements())
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%d", k, w.Steps[k])
	}
	return b.String()
}

// Generate builds the workload cfg describes.
func Generate(cfg Config) *Workload {
	if cfg.Source == "" {
		cfg.Source = Postgres
	}
	if cfg.Target == "" {
		cfg.Target = cfg.Source
	}
	if cfg.MaxStmts < 1 {
		cfg.MaxStmts = 1
	}
	g := newGen(cfg)
	w := &Workload{Config: cfg, Schema: g.schema, Steps: g.steps, rows: map[string]int{}}
	for i := 0; i < cfg.Txs; i++ {
		w.Txs = append(w.Txs, g.tx(i))
	}
	for _, m := range g.models {
		w.rows[m.t.Name] = len(m.keys)
	}
	if g.fk != nil {
		for _, m := range g.fk.models {
			w.rows[m.t.Name] = len(m.keys)
		}
	}
	return w
}

// Trace lists, for a failure report, what the source did to the row of
// table with key: every statement on each row that held the key at some
// point — the whole history of the row that ends there, through its key
// changes, and of the rows that held the key before it — one line each.
func (w *Workload) Trace(table string, key []int64) []string {
	want := make([]string, len(key))
	for i, k := range key {
		want[i] = strconv.FormatInt(k, 10)
	}
	ks := strings.Join(want, ",")
	// A lineage is one inserted row, followed through its key changes.
	type ref struct{ tx, stmt int }
	at := map[string]int{} // live key → lineage
	of := map[ref]int{}
	held := map[int]bool{}
	lineages := 0
	for _, tx := range w.Txs {
		for i, s := range tx.Stmts {
			if s.Table.Name != table {
				continue
			}
			var before, after string
			var l int
			if s.Op == Insert {
				lineages++
				l = lineages
			} else {
				before = keyString(s.Key)
				l = at[before]
				delete(at, before)
			}
			if s.Op != Delete {
				after = keyString(newKey(s))
				at[after] = l
			}
			of[ref{tx.Index, i}] = l
			if before == ks || after == ks {
				held[l] = true
			}
		}
	}
	var out []string
	for _, tx := range w.Txs {
		for i, s := range tx.Stmts {
			if l, ok := of[ref{tx.Index, i}]; ok && held[l] {
				out = append(out, fmt.Sprintf("tx %d stmt %d (%s): %s", tx.Index, i, s.Step, s.describe()))
			}
		}
	}
	return out
}

// newKey is the key of the row after s (Insert, Update).
func newKey(s Stmt) []any {
	var k []any
	if s.Op == Insert {
		k = make([]any, len(s.Table.Key))
	} else {
		k = append([]any(nil), s.Key...)
	}
	for i, c := range s.Table.Key {
		for j, sc := range s.Cols {
			if sc == c {
				k[i] = s.Vals[j]
			}
		}
	}
	return k
}

// describe renders s as SQL-like text with short values.
func (s Stmt) describe() string {
	q, args := render(Postgres, s)
	return q + " " + formatArgs(args)
}
