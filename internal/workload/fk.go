package workload

import (
	"fmt"
	"strings"
)

// The foreign-key graph (Config.ForeignKeys): an application's schema
// with foreign keys of every action, the same on the source and the
// target, as a user makes them:
//
//	fk_customers ← fk_orders ← fk_lines ← fk_notes
//	     ↑              (composite key)   (composite reference)
//	     └──────────── fk_tree ↺ (self-reference)
//	fk_products ← fk_lines
//
//   - fk_orders.customer_id: ON DELETE CASCADE ON UPDATE CASCADE;
//   - fk_lines.order_id (part of the key (order_id, line_no)): ON DELETE
//     CASCADE ON UPDATE CASCADE; fk_lines.product_id: ON DELETE RESTRICT
//     ON UPDATE NO ACTION;
//   - fk_notes (order_id, line_no) → fk_lines: ON DELETE SET NULL ON
//     UPDATE CASCADE;
//   - fk_tree.parent_id → fk_tree: ON DELETE CASCADE ON UPDATE RESTRICT;
//     fk_tree.customer_id: ON DELETE SET NULL ON UPDATE SET NULL.
//
// Its transactions delete and renumber parents, so that the actions fire
// on the source (three levels deep from a customer; down a branch of the
// tree), move children between parents, delete a parent and insert its
// key again, and leave alone what RESTRICT protects. The generator models
// every action, so each statement still touches exactly the one row it
// names, and the tables end with the rows the model holds.

// FK tables.
const (
	FKCustomers = "fk_customers"
	FKProducts  = "fk_products"
	FKOrders    = "fk_orders"
	FKLines     = "fk_lines"
	FKNotes     = "fk_notes"
	FKTree      = "fk_tree"
)

// ForeignKey is a foreign key of a workload table: Cols of the table
// reference RefCols of Ref. OnDelete and OnUpdate are SQL's words.
type ForeignKey struct {
	Name               string
	Cols               []int
	Ref                *Table
	RefCols            []int
	OnDelete, OnUpdate string
}

// fkDDL is the constraint clause of f on table t.
func fkDDL(t *Table, f ForeignKey) string {
	names := func(t *Table, cols []int) string {
		out := make([]string, len(cols))
		for i, c := range cols {
			out[i] = t.Columns[c].Name
		}
		return strings.Join(out, ", ")
	}
	return fmt.Sprintf("CONSTRAINT %s FOREIGN KEY (%s) REFERENCES %s (%s) ON DELETE %s ON UPDATE %s",
		f.Name, names(t, f.Cols), f.Ref.Name, names(f.Ref, f.RefCols), f.OnDelete, f.OnUpdate)
}

// Column positions of the graph's tables.
const (
	cID, cName                 = 0, 1
	pID, pLabel                = 0, 1
	oID, oCustomer, oNote      = 0, 1, 2
	lOrder, lNo, lProduct, lQt = 0, 1, 2, 3
	nID, nOrder, nLine, nBody  = 0, 1, 2, 3
	tID, tParent, tCust, tName = 0, 1, 2, 3
)

// fkMaxDepth bounds the tree's depth, far inside InnoDB's 15 levels of
// cascade.
const fkMaxDepth = 5

// fkMaxRows stops a table's inserts, so that a long workload's graph
// stays small enough to model (and its deletes keep cascading).
const fkMaxRows = 120

// fkTables returns the graph's tables, parents first.
func fkTables() []*Table {
	id := func(n string) Column { return Column{Name: n, Type: Int64, NotNull: true} }
	text := func(n string) Column { return Column{Name: n, Type: Varchar, Len: 40} }
	customers := &Table{Name: FKCustomers, Columns: []Column{id("id"), text("name")}, Key: []int{cID}}
	products := &Table{Name: FKProducts, Columns: []Column{id("id"), text("label")}, Key: []int{pID}}
	orders := &Table{Name: FKOrders, Columns: []Column{id("id"), id("customer_id"), text("note")}, Key: []int{oID}}
	orders.ForeignKeys = []ForeignKey{{Name: "fk_orders_customer", Cols: []int{oCustomer}, Ref: customers, RefCols: []int{cID}, OnDelete: "CASCADE", OnUpdate: "CASCADE"}}
	lines := &Table{Name: FKLines, Columns: []Column{id("order_id"), {Name: "line_no", Type: Int32, NotNull: true},
		{Name: "product_id", Type: Int64}, {Name: "qty", Type: Int32}}, Key: []int{lOrder, lNo}}
	lines.ForeignKeys = []ForeignKey{
		{Name: "fk_lines_order", Cols: []int{lOrder}, Ref: orders, RefCols: []int{oID}, OnDelete: "CASCADE", OnUpdate: "CASCADE"},
		{Name: "fk_lines_product", Cols: []int{lProduct}, Ref: products, RefCols: []int{pID}, OnDelete: "RESTRICT", OnUpdate: "NO ACTION"},
	}
	notes := &Table{Name: FKNotes, Columns: []Column{id("id"), {Name: "order_id", Type: Int64}, {Name: "line_no", Type: Int32}, text("body")}, Key: []int{nID}}
	notes.ForeignKeys = []ForeignKey{{Name: "fk_notes_line", Cols: []int{nOrder, nLine}, Ref: lines, RefCols: []int{lOrder, lNo}, OnDelete: "SET NULL", OnUpdate: "CASCADE"}}
	tree := &Table{Name: FKTree, Columns: []Column{id("id"), {Name: "parent_id", Type: Int64}, {Name: "customer_id", Type: Int64}, text("name")}, Key: []int{tID}}
	tree.ForeignKeys = []ForeignKey{
		{Name: "fk_tree_parent", Cols: []int{tParent}, Ref: tree, RefCols: []int{tID}, OnDelete: "CASCADE", OnUpdate: "RESTRICT"},
		{Name: "fk_tree_customer", Cols: []int{tCust}, Ref: customers, RefCols: []int{cID}, OnDelete: "SET NULL", OnUpdate: "SET NULL"},
	}
	for _, t := range []*Table{customers, products, orders, lines, notes, tree} {
		t.fkGraph = true
	}
	return []*Table{customers, products, orders, lines, notes, tree}
}

// fkGraph is the generator's model of the graph's tables.
type fkGraph struct {
	c, p, o, l, n, t *tableModel
	models           []*tableModel
	agenda           []*fkStep
	populated        bool
}

type fkStep struct {
	name   string
	table  string // the table whose row the step changes first, for Steps
	weight int
	run    func(f *fkGraph, g *gen) []Stmt
}

func newFKGraph(g *gen) *fkGraph {
	f := &fkGraph{}
	for _, t := range fkTables() {
		m := &tableModel{t: t, pos: map[string]int{}, rows: map[string][]any{}, unique: map[int]map[string]string{}}
		f.models = append(f.models, m)
		g.schema.Tables = append(g.schema.Tables, t)
	}
	f.c, f.p, f.o, f.l, f.n, f.t = f.models[0], f.models[1], f.models[2], f.models[3], f.models[4], f.models[5]
	for i := range fkSteps {
		if !g.skipped(&step{name: fkSteps[i].name}) {
			f.agenda = append(f.agenda, &fkSteps[i])
		}
	}
	g.r.Shuffle(len(f.agenda), func(i, j int) { f.agenda[i], f.agenda[j] = f.agenda[j], f.agenda[i] })
	return f
}

// tx returns the graph's statements of one transaction: a population of
// every table in the first, then one or two steps, each step of the
// agenda once before any is chosen at random.
func (f *fkGraph) tx(g *gen) []Stmt {
	if !f.populated {
		f.populated = true
		return f.populate(g)
	}
	var out []Stmt
	for range 1 + g.r.IntN(2) {
		out = append(out, f.next(g)...)
	}
	return out
}

func (f *fkGraph) next(g *gen) []Stmt {
	for i, s := range f.agenda {
		if out := s.run(f, g); out != nil {
			f.agenda = append(f.agenda[:i], f.agenda[i+1:]...)
			g.steps[s.name+" "+s.table]++
			return out
		}
	}
	total := 0
	for _, s := range fkSteps {
		total += s.weight
	}
	for range 20 {
		x := g.r.IntN(total)
		for i := range fkSteps {
			s := &fkSteps[i]
			if x -= s.weight; x >= 0 {
				continue
			}
			if g.skipped(&step{name: s.name}) {
				break
			}
			if out := s.run(f, g); out != nil {
				g.steps[s.name+" "+s.table]++
				return out
			}
			break
		}
	}
	return f.insertCustomer(g)
}

// endTx moves the keys freed in a transaction to the graveyard, which
// keeps the latest fkGraveyard: a key is claimed by a scan of it.
func (f *fkGraph) endTx() {
	for _, m := range f.models {
		m.graveyard = append(m.graveyard, m.freed...)
		if n := len(m.graveyard); n > fkGraveyard {
			m.graveyard = append(m.graveyard[:0], m.graveyard[n-fkGraveyard:]...)
		}
		m.freed = nil
	}
}

// fkGraveyard is how many deleted keys a table of the graph keeps for
// reuse.
const fkGraveyard = 32

// fkSteps are the graph's steps; their names are what Config.Without may
// list.
var fkSteps = []fkStep{
	{"fk-insert-customer", FKCustomers, 3, (*fkGraph).insertCustomer},
	{"fk-insert-order", FKOrders, 6, (*fkGraph).insertOrder},
	{"fk-insert-line", FKLines, 12, (*fkGraph).insertLine},
	{"fk-insert-note", FKNotes, 4, (*fkGraph).insertNote},
	{"fk-insert-tree", FKTree, 4, (*fkGraph).insertTree},
	{"fk-update", FKLines, 6, (*fkGraph).update},
	{"fk-delete-customer", FKCustomers, 2, (*fkGraph).deleteCustomer},
	{"fk-renumber-customer", FKCustomers, 3, (*fkGraph).renumberCustomer},
	{"fk-delete-order", FKOrders, 3, (*fkGraph).deleteOrder},
	{"fk-renumber-order", FKOrders, 4, (*fkGraph).renumberOrder},
	{"fk-move-order", FKOrders, 2, (*fkGraph).moveOrder},
	{"fk-delete-line", FKLines, 3, (*fkGraph).deleteLine},
	{"fk-renumber-line", FKLines, 3, (*fkGraph).renumberLine},
	{"fk-delete-product", FKProducts, 2, (*fkGraph).deleteProduct},
	{"fk-renumber-product", FKProducts, 2, (*fkGraph).renumberProduct},
	{"fk-delete-branch", FKTree, 3, (*fkGraph).deleteBranch},
	{"fk-move-branch", FKTree, 2, (*fkGraph).moveBranch},
	{"fk-renumber-leaf", FKTree, 2, (*fkGraph).renumberLeaf},
	{"fk-customer-again", FKCustomers, 2, (*fkGraph).customerAgain},
}

// where returns the keys of m's rows that pred holds for, in m's order.
func where(m *tableModel, pred func(row []any) bool) [][]any {
	var out [][]any
	for _, k := range m.keys {
		if pred(m.row(k)) {
			out = append(out, k)
		}
	}
	return out
}

func eq(a, b any) bool { return a != nil && b != nil && a == b }

// The actions on the model, as the source's database runs them.

func (f *fkGraph) cascadeDeleteCustomer(c []any) {
	for _, o := range where(f.o, func(r []any) bool { return eq(r[oCustomer], c[0]) }) {
		f.cascadeDeleteOrder(o)
	}
	for _, t := range where(f.t, func(r []any) bool { return eq(r[tCust], c[0]) }) {
		f.t.set(t, []int{tCust}, []any{nil})
	}
	f.c.remove(c)
}

func (f *fkGraph) cascadeDeleteOrder(o []any) {
	for _, l := range where(f.l, func(r []any) bool { return eq(r[lOrder], o[0]) }) {
		f.cascadeDeleteLine(l)
	}
	f.o.remove(o)
}

func (f *fkGraph) cascadeDeleteLine(l []any) {
	for _, n := range where(f.n, func(r []any) bool { return eq(r[nOrder], l[0]) && eq(r[nLine], l[1]) }) {
		f.n.set(n, []int{nOrder, nLine}, []any{nil, nil})
	}
	f.l.remove(l)
}

func (f *fkGraph) cascadeDeleteTree(t []any) {
	for _, ch := range where(f.t, func(r []any) bool { return eq(r[tParent], t[0]) }) {
		f.cascadeDeleteTree(ch)
	}
	f.t.remove(t)
}

func (f *fkGraph) cascadeRenumberCustomer(c, nc []any) {
	for _, o := range where(f.o, func(r []any) bool { return eq(r[oCustomer], c[0]) }) {
		f.o.set(o, []int{oCustomer}, []any{nc[0]})
	}
	for _, t := range where(f.t, func(r []any) bool { return eq(r[tCust], c[0]) }) {
		f.t.set(t, []int{tCust}, []any{nil})
	}
	f.c.set(c, []int{cID}, nc)
}

func (f *fkGraph) cascadeRenumberOrder(o, no []any) {
	for _, l := range where(f.l, func(r []any) bool { return eq(r[lOrder], o[0]) }) {
		f.cascadeRenumberLine(l, []any{no[0], l[1]})
	}
	f.o.set(o, []int{oID}, no)
}

func (f *fkGraph) cascadeRenumberLine(l, nl []any) {
	for _, n := range where(f.n, func(r []any) bool { return eq(r[nOrder], l[0]) && eq(r[nLine], l[1]) }) {
		f.n.set(n, []int{nOrder, nLine}, nl)
	}
	f.l.set(l, []int{lOrder, lNo}, nl)
}

// Statements.

// full reports whether m holds enough rows that its inserts stop.
func (f *fkGraph) full(m *tableModel) bool { return f.populated && len(m.keys) >= fkMaxRows }

func (f *fkGraph) insert(g *gen, m *tableModel, row []any, name string) Stmt {
	m.add(row)
	return Stmt{Op: Insert, Table: m.t, Cols: written(m.t), Vals: row, Step: name}
}

// text is a value for a text column.
func (f *fkGraph) text(g *gen, m *tableModel, c int) any { return g.d.value(g.r, m.t, m.t.Columns[c]) }

// freshID is a key for a one-column table: fresh, or one deleted earlier.
func (f *fkGraph) freshID(g *gen, m *tableModel) []any {
	if len(m.graveyard) > 0 && oneIn(g.r, 4) {
		return m.graveyard[g.r.IntN(len(m.graveyard))]
	}
	m.nextID++
	return []any{m.nextID}
}

func (f *fkGraph) randomKey(g *gen, m *tableModel) []any {
	if len(m.keys) == 0 {
		return nil
	}
	return m.keys[g.r.IntN(len(m.keys))]
}

// populate fills every table: customers with orders, lines and notes,
// products, and a tree.
func (f *fkGraph) populate(g *gen) []Stmt {
	const name = "fk-populate"
	var out []Stmt
	for range 3 {
		out = append(out, f.insert(g, f.p, []any{f.freshID(g, f.p)[0], f.text(g, f.p, pLabel)}, name))
	}
	for range 4 {
		out = append(out, f.insertCustomer(g)...)
	}
	for range 6 {
		out = append(out, f.insertOrder(g)...)
	}
	for range 10 {
		out = append(out, f.insertLine(g)...)
	}
	for range 4 {
		out = append(out, f.insertNote(g)...)
	}
	for range 6 {
		out = append(out, f.insertTree(g)...)
	}
	for i := range out {
		out[i].Step = name
	}
	g.steps[name+" "+FKCustomers]++
	return out
}

func (f *fkGraph) insertCustomer(g *gen) []Stmt {
	if f.full(f.c) {
		return nil
	}
	return []Stmt{f.insert(g, f.c, []any{f.freshID(g, f.c)[0], f.text(g, f.c, cName)}, "fk-insert-customer")}
}

func (f *fkGraph) insertOrder(g *gen) []Stmt {
	c := f.randomKey(g, f.c)
	if c == nil || f.full(f.o) {
		return nil
	}
	return []Stmt{f.insert(g, f.o, []any{f.freshID(g, f.o)[0], c[0], f.text(g, f.o, oNote)}, "fk-insert-order")}
}

// lineNo is a line number that order o does not use.
func (f *fkGraph) lineNo(g *gen, o any) any {
	for {
		n := int64(1 + g.r.IntN(40))
		if !f.l.live([]any{o, n}) {
			return n
		}
	}
}

func (f *fkGraph) insertLine(g *gen) []Stmt {
	o := f.randomKey(g, f.o)
	if o == nil || f.full(f.l) {
		return nil
	}
	var product any
	if p := f.randomKey(g, f.p); p != nil && !oneIn(g.r, 4) {
		product = p[0]
	}
	row := []any{o[0], f.lineNo(g, o[0]), product, g.d.value(g.r, f.l.t, f.l.t.Columns[lQt])}
	return []Stmt{f.insert(g, f.l, row, "fk-insert-line")}
}

func (f *fkGraph) insertNote(g *gen) []Stmt {
	if f.full(f.n) {
		return nil
	}
	row := []any{f.freshID(g, f.n)[0], nil, nil, f.text(g, f.n, nBody)}
	if l := f.randomKey(g, f.l); l != nil && !oneIn(g.r, 5) {
		row[nOrder], row[nLine] = l[0], l[1]
	}
	return []Stmt{f.insert(g, f.n, row, "fk-insert-note")}
}

// depth is how deep node t sits (a root is 1).
func (f *fkGraph) depth(t []any) int {
	d := 1
	for p := f.t.row(t)[tParent]; p != nil; p = f.t.row([]any{p})[tParent] {
		d++
	}
	return d
}

// height is how many levels the branch under t holds (a leaf is 1).
func (f *fkGraph) height(t []any) int {
	h := 0
	for _, ch := range where(f.t, func(r []any) bool { return eq(r[tParent], t[0]) }) {
		h = max(h, f.height(ch))
	}
	return h + 1
}

func (f *fkGraph) insertTree(g *gen) []Stmt {
	if f.full(f.t) {
		return nil
	}
	row := []any{f.freshID(g, f.t)[0], nil, nil, f.text(g, f.t, tName)}
	if p := f.randomKey(g, f.t); p != nil && f.depth(p) < fkMaxDepth && !oneIn(g.r, 4) {
		row[tParent] = p[0]
	}
	if c := f.randomKey(g, f.c); c != nil && oneIn(g.r, 2) {
		row[tCust] = c[0]
	}
	return []Stmt{f.insert(g, f.t, row, "fk-insert-tree")}
}

// update changes a column no foreign key involves.
func (f *fkGraph) update(g *gen) []Stmt {
	choices := []struct {
		m   *tableModel
		col int
	}{{f.c, cName}, {f.o, oNote}, {f.l, lQt}, {f.n, nBody}, {f.t, tName}}
	ch := pick(g.r, choices)
	k := f.randomKey(g, ch.m)
	if k == nil {
		return nil
	}
	v := g.d.value(g.r, ch.m.t, ch.m.t.Columns[ch.col])
	s, _ := g.updateStmt(ch.m, k, []int{ch.col}, []any{v}, "fk-update")
	return []Stmt{s}
}

func (f *fkGraph) deleteCustomer(g *gen) []Stmt {
	c := f.randomKey(g, f.c)
	if c == nil || len(f.c.keys) < 3 {
		return nil
	}
	f.cascadeDeleteCustomer(c)
	return []Stmt{{Op: Delete, Table: f.c.t, Key: c, Step: "fk-delete-customer"}}
}

// newID returns a key for a one-column table that is not live.
func (f *fkGraph) newID(g *gen, m *tableModel) []any {
	for {
		if k := f.freshID(g, m); !m.live(k) {
			return k
		}
	}
}

func (f *fkGraph) renumberCustomer(g *gen) []Stmt {
	c := f.randomKey(g, f.c)
	if c == nil {
		return nil
	}
	nc := f.newID(g, f.c)
	f.cascadeRenumberCustomer(c, nc)
	return []Stmt{{Op: Update, Table: f.c.t, Key: c, Cols: []int{cID}, Vals: nc, Step: "fk-renumber-customer"}}
}

func (f *fkGraph) deleteOrder(g *gen) []Stmt {
	o := f.randomKey(g, f.o)
	if o == nil || len(f.o.keys) < 3 {
		return nil
	}
	f.cascadeDeleteOrder(o)
	return []Stmt{{Op: Delete, Table: f.o.t, Key: o, Step: "fk-delete-order"}}
}

func (f *fkGraph) renumberOrder(g *gen) []Stmt {
	o := f.randomKey(g, f.o)
	if o == nil {
		return nil
	}
	no := f.newID(g, f.o)
	f.cascadeRenumberOrder(o, no)
	return []Stmt{{Op: Update, Table: f.o.t, Key: o, Cols: []int{oID}, Vals: no, Step: "fk-renumber-order"}}
}

func (f *fkGraph) moveOrder(g *gen) []Stmt {
	o, c := f.randomKey(g, f.o), f.randomKey(g, f.c)
	if o == nil || c == nil {
		return nil
	}
	s, _ := g.updateStmt(f.o, o, []int{oCustomer}, []any{c[0]}, "fk-move-order")
	return []Stmt{s}
}

func (f *fkGraph) deleteLine(g *gen) []Stmt {
	l := f.randomKey(g, f.l)
	if l == nil {
		return nil
	}
	f.cascadeDeleteLine(l)
	return []Stmt{{Op: Delete, Table: f.l.t, Key: l, Step: "fk-delete-line"}}
}

func (f *fkGraph) renumberLine(g *gen) []Stmt {
	l := f.randomKey(g, f.l)
	if l == nil {
		return nil
	}
	nl := []any{l[0], f.lineNo(g, l[0])}
	f.cascadeRenumberLine(l, nl)
	return []Stmt{{Op: Update, Table: f.l.t, Key: l, Cols: []int{lNo}, Vals: nl[1:], Step: "fk-renumber-line"}}
}

// unusedProduct is a product no line references (RESTRICT would refuse
// its delete, NO ACTION its renumbering), or nil.
func (f *fkGraph) unusedProduct(g *gen) []any {
	var free [][]any
	for _, p := range f.p.keys {
		if len(where(f.l, func(r []any) bool { return eq(r[lProduct], p[0]) })) == 0 {
			free = append(free, p)
		}
	}
	if len(free) == 0 {
		return nil
	}
	return free[g.r.IntN(len(free))]
}

func (f *fkGraph) deleteProduct(g *gen) []Stmt {
	p := f.unusedProduct(g)
	if p == nil {
		// Free one: its lines take another product or none.
		p = f.randomKey(g, f.p)
		if p == nil {
			return nil
		}
		var out []Stmt
		for _, l := range where(f.l, func(r []any) bool { return eq(r[lProduct], p[0]) }) {
			s, _ := g.updateStmt(f.l, l, []int{lProduct}, []any{nil}, "fk-delete-product")
			out = append(out, s)
		}
		f.p.remove(p)
		return append(out, Stmt{Op: Delete, Table: f.p.t, Key: p, Step: "fk-delete-product"})
	}
	f.p.remove(p)
	return []Stmt{{Op: Delete, Table: f.p.t, Key: p, Step: "fk-delete-product"}, f.insert(g, f.p, []any{f.newID(g, f.p)[0], f.text(g, f.p, pLabel)}, "fk-delete-product")}
}

// renumberProduct changes the key of a product no line references, a new
// one when every product is referenced (NO ACTION refuses the others).
func (f *fkGraph) renumberProduct(g *gen) []Stmt {
	const name = "fk-renumber-product"
	var out []Stmt
	p := f.unusedProduct(g)
	if p == nil {
		ins := f.insert(g, f.p, []any{f.newID(g, f.p)[0], f.text(g, f.p, pLabel)}, name)
		out, p = append(out, ins), ins.Vals[:1]
	}
	s, _ := g.updateStmt(f.p, p, []int{pID}, f.newID(g, f.p), name)
	return append(out, s)
}

func (f *fkGraph) deleteBranch(g *gen) []Stmt {
	// A node with children, when there is one.
	if len(f.t.keys) < 4 {
		return nil
	}
	var t []any
	for _, k := range f.t.keys {
		if f.height(k) > 1 {
			t = k
			break
		}
	}
	if t == nil {
		return nil
	}
	f.cascadeDeleteTree(t)
	return []Stmt{{Op: Delete, Table: f.t.t, Key: t, Step: "fk-delete-branch"}}
}

// moveBranch gives a node another parent (outside its branch, the tree
// staying within fkMaxDepth) or none.
func (f *fkGraph) moveBranch(g *gen) []Stmt {
	// An emptied tree gets a node to move, so that the step runs whatever
	// the earlier deletes left (TestFKGenerateCovers).
	var out []Stmt
	t := f.randomKey(g, f.t)
	if t == nil {
		if out = f.insertTree(g); out == nil {
			return nil
		}
		t = out[0].Vals[:1]
	}
	// inBranch reports whether t is k or one of k's ancestors.
	inBranch := func(k []any) bool {
		for p := k; p != nil; {
			if eq(p[0], t[0]) {
				return true
			}
			pp := f.t.row(p)[tParent]
			if pp == nil {
				return false
			}
			p = []any{pp}
		}
		return false
	}
	h := f.height(t)
	cands := where(f.t, func(r []any) bool { k := []any{r[tID]}; return !inBranch(k) && f.depth(k)+h <= fkMaxDepth })
	var parent any
	if len(cands) > 0 && !oneIn(g.r, 4) {
		parent = cands[g.r.IntN(len(cands))][0]
	}
	s, _ := g.updateStmt(f.t, t, []int{tParent}, []any{parent}, "fk-move-branch")
	return append(out, s)
}

// renumberLeaf changes the key of a node without children (ON UPDATE
// RESTRICT refuses it for one with children).
func (f *fkGraph) renumberLeaf(g *gen) []Stmt {
	var out []Stmt
	leaves := where(f.t, func(r []any) bool { return f.height([]any{r[tID]}) == 1 })
	if len(leaves) == 0 {
		out = f.insertTree(g)
		leaves = [][]any{out[0].Vals[:1]}
	}
	t := leaves[g.r.IntN(len(leaves))]
	s, _ := g.updateStmt(f.t, t, []int{tID}, f.newID(g, f.t), "fk-renumber-leaf")
	return append(out, s)
}

// customerAgain deletes a customer with orders (the delete cascades) and
// inserts its key again, with an order under it, in one transaction.
func (f *fkGraph) customerAgain(g *gen) []Stmt {
	var c []any
	for _, k := range f.c.keys {
		if len(where(f.o, func(r []any) bool { return eq(r[oCustomer], k[0]) })) > 0 {
			c = k
			break
		}
	}
	if c == nil {
		return nil
	}
	const name = "fk-customer-again"
	f.cascadeDeleteCustomer(c)
	out := []Stmt{{Op: Delete, Table: f.c.t, Key: c, Step: name}, f.insert(g, f.c, []any{c[0], f.text(g, f.c, cName)}, name)}
	o := f.insert(g, f.o, []any{f.newID(g, f.o)[0], c[0], f.text(g, f.o, oNote)}, name)
	return append(out, o, f.insert(g, f.l, []any{o.Vals[oID], int64(1), nil, int64(1)}, name))
}

// GraphTableNames lists the foreign-key graph's tables (none without
// Config.ForeignKeys), parents first.
func (s *Schema) GraphTableNames() []string {
	var out []string
	for _, t := range s.Tables {
		if t.fkGraph {
			out = append(out, t.Name)
		}
	}
	return out
}
