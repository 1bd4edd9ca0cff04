package workload

import (
	"fmt"
	"math/rand/v2"
)

// Generated makes a column generated: the database computes it from
// another column of the row, and the workload never writes it. Its
// expression is one both engines compute alike, since a target computes
// it again (sluice never writes a column the target generates, and a
// PostgreSQL source's logical replication does not even send it).
type Generated struct {
	Of string // the column it is computed from
	Fn GenFn
	// Stored: MariaDB stores the values (STORED), else computes them when
	// read (VIRTUAL). PostgreSQL 15 stores every generated column.
	Stored bool
	// Indexed: a secondary index covers the column.
	Indexed bool
}

// GenFn is what a generated column computes.
type GenFn uint8

const (
	// GenDouble is twice an integer column, as a bigint.
	GenDouble GenFn = iota + 1
	// GenLength is the length in characters of a text column.
	GenLength
)

// expr is the expression in engine e's SQL.
func (g *Generated) expr(e Engine) string {
	switch {
	case g.Fn == GenDouble && e == Postgres:
		return g.Of + "::bigint * 2"
	case g.Fn == GenDouble:
		return g.Of + " * 2"
	case g.Fn == GenLength:
		return "char_length(" + g.Of + ")"
	}
	panic(fmt.Sprintf("workload: no expression for %v", g.Fn))
}

// clause is the column definition's generation clause on engine e.
func (g *Generated) clause(e Engine) string {
	if e == Postgres {
		return " GENERATED ALWAYS AS (" + g.expr(e) + ") STORED"
	}
	kind := " VIRTUAL"
	if g.Stored {
		kind = " STORED"
	}
	return " AS (" + g.expr(e) + ")" + kind
}

// generatedIndexes are the statements that create the indexes over t's
// generated columns on engine e, after the table.
func generatedIndexes(e Engine, t *Table) []string {
	var out []string
	for _, c := range t.Columns {
		if c.Gen != nil && c.Gen.Indexed {
			out = append(out, fmt.Sprintf("CREATE INDEX %s_%s ON %s (%s)", t.Name, c.Name, t.Name, c.Name))
		}
	}
	return out
}

// candidates are the generated columns a schema may get: one over an
// integer column of the table with the unique key and the TOASTed text,
// one over a text column of the table of every type.
var candidates = []struct {
	table string
	col   Column
}{
	{ItemsTable, Column{Name: "n_twice", Type: Int64, Gen: &Generated{Of: "n", Fn: GenDouble}}},
	{TypedTable, Column{Name: "txt_len", Type: Int32, Gen: &Generated{Of: "txt", Fn: GenLength}}},
}

// genSalt seeds the draws of addGenerated. Any value gives generated
// columns to three seeds in four; this one gives them, with go test's
// fixed seeds, to the trigger sources, to MariaDB → MariaDB (a VIRTUAL
// column, an indexed one) and to the copy of a PostgreSQL trigger source,
// and leaves one randomized pair without.
const genSalt = 0x6a09e667f3bcc92f

// addGenerated gives the schema generated columns, three seeds in four:
// each candidate half the time (the first when the draw picked none),
// STORED or VIRTUAL, indexed or not. The draws come from a source of
// their own, so that the rest of the workload is the seed's either way.
func addGenerated(seed uint64, s *Schema) {
	r := rand.New(rand.NewPCG(seed, seed^genSalt))
	if r.IntN(4) == 0 {
		return
	}
	var picked []int
	for i := range candidates {
		if r.IntN(2) == 0 {
			picked = append(picked, i)
		}
	}
	if len(picked) == 0 {
		picked = []int{0}
	}
	for _, i := range picked {
		c := candidates[i].col
		g := *c.Gen
		g.Stored, g.Indexed = r.IntN(2) == 0, r.IntN(2) == 0
		c.Gen = &g
		t := s.Table(candidates[i].table)
		t.Columns = append(t.Columns, c)
	}
}

// written lists the columns of t the workload writes: all but the
// generated ones.
func written(t *Table) []int {
	var out []int
	for i, c := range t.Columns {
		if c.Gen == nil {
			out = append(out, i)
		}
	}
	return out
}
