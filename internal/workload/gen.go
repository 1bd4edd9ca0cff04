package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// tableModel is the generator's picture of one table: the rows it holds,
// which values its unique columns hold, and which keys are free to use
// again.
type tableModel struct {
	t    *Table
	keys [][]any        // live keys; the order is part of the seeded state
	pos  map[string]int // key string → index in keys
	rows map[string][]any
	// unique maps a unique column to its values' owners (value → key).
	unique map[int]map[string]string
	// freed holds keys deleted or moved away from in the current
	// transaction, graveyard those of earlier ones: both are not live and
	// may be taken again.
	freed, graveyard [][]any
	nextID           int64
}

func keyString(k []any) string {
	parts := make([]string, len(k))
	for i, v := range k {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ",")
}

func (m *tableModel) keyOf(row []any) []any {
	k := make([]any, len(m.t.Key))
	for i, c := range m.t.Key {
		k[i] = row[c]
	}
	return k
}

func (m *tableModel) live(k []any) bool {
	_, ok := m.pos[keyString(k)]
	return ok
}

func uniqueString(v any) string { return fmt.Sprint(v) }

// add records a new row; its key and unique values must be free.
func (m *tableModel) add(row []any) {
	k := m.keyOf(row)
	ks := keyString(k)
	if _, dup := m.pos[ks]; dup {
		panic(fmt.Sprintf("workload: model bug: key %s of %s is live", ks, m.t.Name))
	}
	m.claim(k)
	m.pos[ks] = len(m.keys)
	m.keys = append(m.keys, k)
	m.rows[ks] = row
	for c, owners := range m.unique {
		if row[c] == nil {
			continue
		}
		u := uniqueString(row[c])
		if _, dup := owners[u]; dup {
			panic(fmt.Sprintf("workload: model bug: %s.%s value %q is taken", m.t.Name, m.t.Columns[c].Name, u))
		}
		owners[u] = ks
	}
}

// remove drops the row with key k and returns it; k goes to freed.
func (m *tableModel) remove(k []any) []any {
	ks := keyString(k)
	i, ok := m.pos[ks]
	if !ok {
		panic(fmt.Sprintf("workload: model bug: key %s of %s is not live", ks, m.t.Name))
	}
	last := len(m.keys) - 1
	m.keys[i] = m.keys[last]
	m.pos[keyString(m.keys[i])] = i
	m.keys = m.keys[:last]
	delete(m.pos, ks)
	row := m.rows[ks]
	delete(m.rows, ks)
	for c, owners := range m.unique {
		if row[c] != nil {
			delete(owners, uniqueString(row[c]))
		}
	}
	m.freed = append(m.freed, k)
	return row
}

// claim takes k out of the free lists, if it is there.
func (m *tableModel) claim(k []any) {
	ks := keyString(k)
	for _, list := range []*[][]any{&m.freed, &m.graveyard} {
		for i, f := range *list {
			if keyString(f) == ks {
				*list = append((*list)[:i], (*list)[i+1:]...)
				break
			}
		}
	}
}

// set writes vals to the columns cols of the row with key k and returns
// the row's key afterwards.
func (m *tableModel) set(k []any, cols []int, vals []any) []any {
	old := m.rows[keyString(k)]
	row := append([]any(nil), old...)
	for i, c := range cols {
		row[c] = vals[i]
	}
	m.remove(k)
	m.add(row)
	return m.keyOf(row)
}

func (m *tableModel) row(k []any) []any { return m.rows[keyString(k)] }

// gen is the generator's state: the seeded source of every choice and the
// model of every table.
type gen struct {
	cfg    Config
	r      *rand.Rand
	d      domain
	schema *Schema
	models []*tableModel
	byName map[string]*tableModel
	steps  map[string]int
	uniq   int // numbers unique values, so that they never repeat
	agenda []agendaItem
	// fk is the foreign-key graph's model (Config.ForeignKeys), or nil.
	fk *fkGraph
}

type agendaItem struct {
	step  *step
	table *tableModel
}

func newGen(cfg Config) *gen {
	g := &gen{
		cfg:    cfg,
		r:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		d:      newDomain(cfg),
		schema: newSchema(cfg.Source),
		byName: map[string]*tableModel{},
		steps:  map[string]int{},
	}
	addGenerated(cfg.Seed, g.schema)
	addRequiredText(g.schema)
	if cfg.Corpus {
		g.schema.Tables = append(g.schema.Tables, corpusTable(cfg.Source, cfg.Target))
	}
	partitionSome(g.schema, cfg.Seed)
	for _, t := range g.schema.Tables {
		m := &tableModel{t: t, pos: map[string]int{}, rows: map[string][]any{}, unique: map[int]map[string]string{}}
		for i, c := range t.Columns {
			if c.Unique {
				m.unique[i] = map[string]string{}
			}
		}
		g.models = append(g.models, m)
		g.byName[t.Name] = m
	}
	if cfg.ForeignKeys {
		g.fk = newFKGraph(g)
	}
	// The agenda makes even a small workload take every step on every
	// table it applies to: steps are tried in a seeded order until each
	// has run once, then chosen at random.
	for i := range steps {
		s := &steps[i]
		if g.skipped(s) {
			continue
		}
		for _, m := range g.models {
			if s.applies(m.t) {
				g.agenda = append(g.agenda, agendaItem{s, m})
			}
		}
	}
	g.r.Shuffle(len(g.agenda), func(i, j int) { g.agenda[i], g.agenda[j] = g.agenda[j], g.agenda[i] })
	return g
}

func (g *gen) skipped(s *step) bool {
	return s.name != "insert" && slices.Contains(g.cfg.Without, s.name)
}

func (g *gen) tx(index int) Tx {
	tx := Tx{Index: index}
	n := 1 + g.r.IntN(g.cfg.MaxStmts)
	for len(tx.Stmts) < n {
		tx.Stmts = append(tx.Stmts, g.next()...)
	}
	for _, m := range g.models {
		m.graveyard = append(m.graveyard, m.freed...)
		m.freed = nil
	}
	if g.fk != nil {
		tx.Stmts = append(tx.Stmts, g.fk.tx(g)...)
		g.fk.endTx()
	}
	return tx
}

// next runs one step: the first runnable one of the agenda, else a random
// one.
func (g *gen) next() []Stmt {
	for i, a := range g.agenda {
		if out := a.step.run(g, a.table); out != nil {
			g.agenda = append(g.agenda[:i], g.agenda[i+1:]...)
			g.count(a.step, a.table)
			return out
		}
	}
	if len(g.agenda) > 0 {
		// Every step left on the agenda needs more rows than its table
		// has: give it some.
		m := g.agenda[0].table
		out := g.insert(m)
		g.count(&steps[0], m)
		return out
	}
	for {
		m := g.pickTable()
		s := g.pickStep(m)
		if out := s.run(g, m); out != nil {
			g.count(s, m)
			return out
		}
	}
}

func (g *gen) count(s *step, m *tableModel) { g.steps[s.name+" "+m.t.Name]++ }

func (g *gen) pickTable() *tableModel {
	switch x := g.r.IntN(10); {
	case x < 5:
		return g.byName[ItemsTable]
	case x < 8:
		if c := g.byName[CorpusTable]; c != nil && x == 7 {
			return c
		}
		return g.byName[TypedTable]
	default:
		return g.byName[LinesTable]
	}
}

func (g *gen) pickStep(m *tableModel) *step {
	// A small table fills first; a large one stops growing.
	if len(m.keys) < 4 {
		return &steps[0]
	}
	total := 0
	for i := range steps {
		if steps[i].applies(m.t) && !g.skipped(&steps[i]) {
			total += g.weight(&steps[i], m)
		}
	}
	x := g.r.IntN(total)
	for i := range steps {
		if !steps[i].applies(m.t) || g.skipped(&steps[i]) {
			continue
		}
		if x -= g.weight(&steps[i], m); x < 0 {
			return &steps[i]
		}
	}
	panic("unreachable")
}

func (g *gen) weight(s *step, m *tableModel) int {
	if s.name == "insert" && len(m.keys) > 200 {
		return 4 // about the rate rows are deleted
	}
	return s.weight
}

// step is one kind of change the generator makes; run returns its
// statements, or nil when the table's state does not allow it (too few
// rows), leaving the model untouched.
type step struct {
	name   string
	weight int
	items  bool // only the table with the unique column and TOASTed text
	run    func(g *gen, m *tableModel) []Stmt
}

func (s *step) applies(t *Table) bool {
	if t.fkGraph {
		return false // only the graph's own steps write it (fk.go)
	}
	if t.Name == CorpusTable {
		// The corpus table is for values, which inserts and updates
		// carry; the other steps have their tables, and a small workload
		// (TestRandomized's 20 transactions) must still reach each step on
		// each table.
		return slices.Contains(corpusSteps, s.name)
	}
	return !s.items || t.Name == ItemsTable
}

var corpusSteps = []string{"insert", "update"}

// steps lists the generator's steps; the first is insert, which is always
// runnable.
var steps = []step{
	{name: "insert", weight: 20, run: (*gen).insert},
	{name: "update", weight: 16, run: (*gen).update},
	{name: "null-flip", weight: 6, run: (*gen).nullFlip},
	{name: "delete", weight: 8, run: (*gen).delete},
	{name: "key-change", weight: 6, run: (*gen).keyChange},
	{name: "key-chain", weight: 3, run: (*gen).keyChain},
	{name: "key-cycle", weight: 3, run: (*gen).keyCycle},
	{name: "key-onto-deleted", weight: 3, run: (*gen).keyOntoDeleted},
	{name: "delete-reinsert", weight: 3, run: (*gen).deleteReinsert},
	{name: "keep-toast", weight: 8, items: true, run: (*gen).keepToast},
	{name: "toast-key-change", weight: 3, items: true, run: (*gen).toastKeyChange},
	{name: "uk-swap", weight: 3, items: true, run: (*gen).ukSwap},
	{name: "uk-chain", weight: 2, items: true, run: (*gen).ukChain},
	{name: "uk-take-deleted", weight: 2, items: true, run: (*gen).ukTakeDeleted},
}

// freshKey returns a key never used in the table. Single-column keys count
// up, now and then from the ends of bigint's range; the composite key is
// random in a small space so that keys are often reused.
func (g *gen) freshKey(m *tableModel) []any {
	if len(m.t.Key) == 1 {
		m.nextID++
		switch g.r.IntN(12) {
		case 0:
			return []any{int64(math.MaxInt64) - m.nextID}
		case 1:
			return []any{int64(math.MinInt64) + m.nextID}
		}
		return []any{m.nextID}
	}
	for try := 0; try < 20; try++ {
		k := []any{int64(1 + g.r.IntN(30)), int64(1 + g.r.IntN(20))}
		if oneIn(g.r, 10) {
			k[1] = pick(g.r, []int64{math.MaxInt16, math.MinInt16, 0})
		}
		if !m.live(k) {
			return k
		}
	}
	m.nextID++
	return []any{int64(1000) + m.nextID, int64(1)}
}

// newKey returns a key that is not live: one freed earlier in this
// transaction (a key moved onto a key just deleted or vacated), one of an
// earlier transaction's deleted rows, or a fresh one.
func (g *gen) newKey(m *tableModel) []any {
	if len(m.freed) > 0 && oneIn(g.r, 3) {
		return m.freed[g.r.IntN(len(m.freed))]
	}
	if len(m.graveyard) > 0 && oneIn(g.r, 4) {
		return m.graveyard[g.r.IntN(len(m.graveyard))]
	}
	return g.freshKey(m)
}

// freshUnique returns a value for a unique column that no row holds or
// ever held.
func (g *gen) freshUnique(prefix string) string {
	g.uniq++
	return fmt.Sprintf("%s%08x-%d", prefix, g.r.Uint32(), g.uniq)
}

// newRow is a full row with key k.
func (g *gen) newRow(m *tableModel, k []any) []any {
	row := make([]any, len(m.t.Columns))
	for i, c := range m.t.Columns {
		if c.Gen == nil { // the database computes a generated one
			row[i] = g.d.value(g.r, m.t, c)
		}
	}
	for i, c := range m.t.Key {
		row[c] = k[i]
	}
	for c := range m.unique {
		row[c] = g.freshUnique("u")
	}
	return row
}

func (g *gen) randomKey(m *tableModel) []any { return m.keys[g.r.IntN(len(m.keys))] }

// distinctKeys returns n different live keys, or nil.
func (g *gen) distinctKeys(m *tableModel, n int) [][]any {
	if len(m.keys) < n {
		return nil
	}
	idx := g.r.Perm(len(m.keys))[:n]
	out := make([][]any, n)
	for i, j := range idx {
		out[i] = m.keys[j]
	}
	return out
}

func (g *gen) insertStmt(m *tableModel, row []any, name string) Stmt {
	m.add(row)
	cols := written(m.t)
	vals := make([]any, len(cols))
	for i, c := range cols {
		vals[i] = row[c]
	}
	return Stmt{Op: Insert, Table: m.t, Cols: cols, Vals: vals, Step: name}
}

func (g *gen) updateStmt(m *tableModel, k []any, cols []int, vals []any, name string) (Stmt, []any) {
	nk := m.set(k, cols, vals)
	return Stmt{Op: Update, Table: m.t, Key: k, Cols: cols, Vals: vals, Step: name}, nk
}

func (g *gen) deleteStmt(m *tableModel, k []any, name string) Stmt {
	m.remove(k)
	return Stmt{Op: Delete, Table: m.t, Key: k, Step: name}
}

// moveStmt changes the row's key from k to nk, and with other set, some of
// its other columns too (never the TOASTed text, which must ride along
// unchanged).
func (g *gen) moveStmt(m *tableModel, k, nk []any, other bool, name string) Stmt {
	var cols []int
	var vals []any
	for i, c := range m.t.Key {
		cols = append(cols, c)
		vals = append(vals, nk[i])
	}
	if other {
		for _, c := range g.otherCols(m, 1) {
			if m.t.Columns[c].Type == LongText {
				continue
			}
			cols = append(cols, c)
			vals = append(vals, g.columnValue(m, c))
		}
	}
	s, _ := g.updateStmt(m, k, cols, vals, name)
	return s
}

// otherCols picks up to n distinct non-key columns the workload writes.
func (g *gen) otherCols(m *tableModel, n int) []int {
	var cand []int
	for i, c := range m.t.Columns {
		if !m.t.isKey(i) && c.Gen == nil {
			cand = append(cand, i)
		}
	}
	g.r.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
	return cand[:min(n, len(cand))]
}

// columnValue is a new value for column c (a fresh one for a unique
// column).
func (g *gen) columnValue(m *tableModel, c int) any {
	if _, ok := m.unique[c]; ok {
		return g.freshUnique("u")
	}
	return g.d.value(g.r, m.t, m.t.Columns[c])
}

func (g *gen) insert(m *tableModel) []Stmt {
	k := g.newKey(m)
	return []Stmt{g.insertStmt(m, g.newRow(m, k), "insert")}
}

func (g *gen) update(m *tableModel) []Stmt {
	if len(m.keys) == 0 {
		return nil
	}
	k := g.randomKey(m)
	cols := g.otherCols(m, 1+g.r.IntN(3))
	vals := make([]any, len(cols))
	for i, c := range cols {
		vals[i] = g.columnValue(m, c)
	}
	s, _ := g.updateStmt(m, k, cols, vals, "update")
	return []Stmt{s}
}

// nullFlip turns a nullable column's NULL into a value or its value into
// NULL.
func (g *gen) nullFlip(m *tableModel) []Stmt {
	if len(m.keys) == 0 {
		return nil
	}
	var nullable []int
	for i, c := range m.t.Columns {
		if !c.NotNull && c.Gen == nil {
			nullable = append(nullable, i)
		}
	}
	k := g.randomKey(m)
	c := pick(g.r, nullable)
	var v any
	if m.row(k)[c] == nil {
		v = g.d.nonNull(g.r, m.t, m.t.Columns[c])
	}
	s, _ := g.updateStmt(m, k, []int{c}, []any{v}, "null-flip")
	return []Stmt{s}
}

func (g *gen) delete(m *tableModel) []Stmt {
	if len(m.keys) == 0 {
		return nil
	}
	return []Stmt{g.deleteStmt(m, g.randomKey(m), "delete")}
}

func (g *gen) keyChange(m *tableModel) []Stmt {
	if len(m.keys) == 0 {
		return nil
	}
	k := g.randomKey(m)
	return []Stmt{g.moveStmt(m, k, g.newKey(m), oneIn(g.r, 2), "key-change")}
}

// keyChain moves a row A → B → C in one transaction.
func (g *gen) keyChain(m *tableModel) []Stmt {
	if len(m.keys) == 0 {
		return nil
	}
	a := g.randomKey(m)
	b := g.newKey(m)
	s1 := g.moveStmt(m, a, b, oneIn(g.r, 2), "key-chain")
	c := g.newKey(m)
	for keyString(c) == keyString(a) { // A → B → A is keyCycle's
		c = g.freshKey(m)
	}
	s2 := g.moveStmt(m, b, c, oneIn(g.r, 2), "key-chain")
	return []Stmt{s1, s2}
}

// keyCycle moves a row A → B → A in one transaction.
func (g *gen) keyCycle(m *tableModel) []Stmt {
	if len(m.keys) == 0 {
		return nil
	}
	a := g.randomKey(m)
	b := g.newKey(m)
	s1 := g.moveStmt(m, a, b, oneIn(g.r, 2), "key-cycle")
	s2 := g.moveStmt(m, b, a, oneIn(g.r, 2), "key-cycle")
	return []Stmt{s1, s2}
}

// keyOntoDeleted deletes row B, then moves row A onto B's key.
func (g *gen) keyOntoDeleted(m *tableModel) []Stmt {
	ks := g.distinctKeys(m, 2)
	if ks == nil {
		return nil
	}
	a, b := ks[0], ks[1]
	s1 := g.deleteStmt(m, b, "key-onto-deleted")
	s2 := g.moveStmt(m, a, b, oneIn(g.r, 2), "key-onto-deleted")
	return []Stmt{s1, s2}
}

// deleteReinsert deletes a row and inserts another with the same key (and,
// half the time, the same unique value).
func (g *gen) deleteReinsert(m *tableModel) []Stmt {
	if len(m.keys) == 0 {
		return nil
	}
	k := g.randomKey(m)
	old := m.row(k)
	s1 := g.deleteStmt(m, k, "delete-reinsert")
	row := g.newRow(m, k)
	if oneIn(g.r, 2) {
		for c := range m.unique {
			row[c] = old[c]
		}
	}
	return []Stmt{s1, g.insertStmt(m, row, "delete-reinsert")}
}

// toastKey returns a key whose row holds an out-of-line text, or nil.
func (g *gen) toastKey(m *tableModel) []any {
	body := m.t.Col("body")
	for try := 0; try < 8 && len(m.keys) > 0; try++ {
		if k := g.randomKey(m); IsToast(m.row(k)[body]) {
			return k
		}
	}
	for _, k := range m.keys {
		if IsToast(m.row(k)[body]) {
			return k
		}
	}
	return nil
}

// keepToast updates the counter and/or the note of a row whose TOASTed
// body stays as it is: PostgreSQL's log then carries no value for it.
func (g *gen) keepToast(m *tableModel) []Stmt {
	k := g.toastKey(m)
	if k == nil {
		return nil
	}
	cols := []int{m.t.Col("n")}
	if oneIn(g.r, 2) {
		cols = append(cols, m.t.Col("note"))
	}
	vals := make([]any, len(cols))
	for i, c := range cols {
		vals[i] = g.columnValue(m, c)
	}
	s, _ := g.updateStmt(m, k, cols, vals, "keep-toast")
	return []Stmt{s}
}

// toastKeyChange moves a row with a TOASTed body to a new key, body
// unchanged, sometimes twice in a row.
func (g *gen) toastKeyChange(m *tableModel) []Stmt {
	k := g.toastKey(m)
	if k == nil {
		return nil
	}
	nk := g.newKey(m)
	out := []Stmt{g.moveStmt(m, k, nk, oneIn(g.r, 2), "toast-key-change")}
	if oneIn(g.r, 3) {
		out = append(out, g.moveStmt(m, nk, g.freshKey(m), false, "toast-key-change"))
	}
	return out
}

func (g *gen) setUnique(m *tableModel, k []any, v string, name string) Stmt {
	s, _ := g.updateStmt(m, k, []int{m.t.Col("uk")}, []any{v}, name)
	return s
}

// ukSwap swaps two rows' unique values the way applications do, through a
// temporary value: A → tmp, B → A's, A → B's.
func (g *gen) ukSwap(m *tableModel) []Stmt {
	ks := g.distinctKeys(m, 2)
	if ks == nil {
		return nil
	}
	uk := m.t.Col("uk")
	a, b := ks[0], ks[1]
	va, vb := m.row(a)[uk].(string), m.row(b)[uk].(string)
	return []Stmt{
		g.setUnique(m, a, g.freshUnique("tmp-"), "uk-swap"),
		g.setUnique(m, b, va, "uk-swap"),
		g.setUnique(m, a, vb, "uk-swap"),
	}
}

// ukChain passes unique values along a chain of rows: A takes a new
// value, B takes A's old one, C takes B's, and so on.
func (g *gen) ukChain(m *tableModel) []Stmt {
	n := 3 + g.r.IntN(2)
	ks := g.distinctKeys(m, n)
	if ks == nil {
		return nil
	}
	uk := m.t.Col("uk")
	prev := m.row(ks[0])[uk].(string)
	out := []Stmt{g.setUnique(m, ks[0], g.freshUnique("u"), "uk-chain")}
	for _, k := range ks[1:] {
		cur := m.row(k)[uk].(string)
		out = append(out, g.setUnique(m, k, prev, "uk-chain"))
		prev = cur
	}
	return out
}

// ukTakeDeleted deletes a row and gives its unique value to another.
func (g *gen) ukTakeDeleted(m *tableModel) []Stmt {
	ks := g.distinctKeys(m, 2)
	if ks == nil {
		return nil
	}
	uk := m.t.Col("uk")
	v := m.row(ks[0])[uk].(string)
	return []Stmt{
		g.deleteStmt(m, ks[0], "uk-take-deleted"),
		g.setUnique(m, ks[1], v, "uk-take-deleted"),
	}
}
