package workload

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Partitioning makes a PostgreSQL source table partitioned, so that the
// workload's key changes move rows across partitions and the readers meet
// the partitions' relations: chosen from the seed (see partitionSome),
// from a stream of its own, so the transactions of a seed stay the same.
type Partitioning struct {
	// By is the PARTITION BY clause.
	By string
	// Parts are the partitions' FOR VALUES clauses (or DEFAULT), in
	// order; a part with Sub is itself partitioned so, with SubParts.
	Parts []string
	// Sub and SubParts partition the part at SubOf.
	Sub      string
	SubParts []string
	SubOf    int
	// Reordered is a part attached from a table whose columns are in
	// reverse order, so that its rows reach a logical reader in another
	// column order than the table's; -1 for none.
	Reordered int
}

// partitionSome makes one of the PostgreSQL source's tables without a
// unique column partitioned (a unique constraint on a partitioned table
// must hold the partition key), for three seeds in four.
func partitionSome(s *Schema, seed uint64) {
	if s.Source != Postgres {
		return
	}
	// The stream's constant gives each of TestRandomized's PostgreSQL
	// pairs (their default seeds) a partitioned table: the typed table by
	// range and by hash, the lines table by range with a hashed part.
	r := rand.New(rand.NewPCG(seed, 0x706172748d))
	switch r.IntN(4) {
	case 1:
		// Ranges of the counting keys, the ends of bigint's range in the
		// first and the default partitions.
		s.Table(TypedTable).Partitioning = &Partitioning{By: "RANGE (id)", Parts: []string{
			"FROM (MINVALUE) TO (0)", "FROM (0) TO (40)", "FROM (40) TO (1000)", "DEFAULT"}, Reordered: 1 + r.IntN(2), SubOf: -1}
	case 2:
		s.Table(TypedTable).Partitioning = &Partitioning{By: "HASH (id)", Parts: []string{
			"WITH (MODULUS 3, REMAINDER 0)", "WITH (MODULUS 3, REMAINDER 1)", "WITH (MODULUS 3, REMAINDER 2)"}, Reordered: r.IntN(3), SubOf: -1}
	case 3:
		s.Table(LinesTable).Partitioning = &Partitioning{By: "RANGE (order_id)", Parts: []string{
			"FROM (MINVALUE) TO (10)", "FROM (10) TO (20)", "DEFAULT"},
			SubOf: 1, Sub: "HASH (line_no)", SubParts: []string{"WITH (MODULUS 2, REMAINDER 0)", "WITH (MODULUS 2, REMAINDER 1)"}, Reordered: -1}
	}
}

// tableDDL is the statements that create table t, whose CREATE TABLE
// statement is create, in a database of engine e: create alone, or for a
// partitioned source table create with its PARTITION BY and its
// partitions.
func (s *Schema) tableDDL(e Engine, t *Table, create string) []string {
	p := t.Partitioning
	if p == nil || e != Postgres || s.Source != Postgres {
		return []string{create}
	}
	out := []string{create + " PARTITION BY " + p.By}
	for i, bound := range p.Parts {
		name := fmt.Sprintf("%s_p%d", t.Name, i)
		forValues := "FOR VALUES " + bound
		if bound == "DEFAULT" {
			forValues = bound
		}
		switch {
		case i == p.Reordered:
			cols := slices.Clone(t.Columns)
			slices.Reverse(cols)
			defs := make([]string, len(cols))
			for j, c := range cols {
				defs[j] = c.Name + " " + s.SQLType(e, c)
				if c.Gen != nil {
					// A partition's generated column must be one too.
					defs[j] += c.Gen.clause(e)
				}
				if c.NotNull {
					defs[j] += " NOT NULL"
				}
			}
			out = append(out, fmt.Sprintf("CREATE TABLE %s (%s)", name, strings.Join(defs, ", ")),
				fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s %s", t.Name, name, forValues))
		case i == p.SubOf:
			out = append(out, fmt.Sprintf("CREATE TABLE %s PARTITION OF %s %s PARTITION BY %s", name, t.Name, forValues, p.Sub))
			for j, sub := range p.SubParts {
				out = append(out, fmt.Sprintf("CREATE TABLE %s_%d PARTITION OF %s FOR VALUES %s", name, j, name, sub))
			}
		default:
			out = append(out, fmt.Sprintf("CREATE TABLE %s PARTITION OF %s %s", name, t.Name, forValues))
		}
	}
	return out
}
