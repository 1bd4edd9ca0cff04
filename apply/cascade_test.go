package apply

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// fkTable is a streamed table of the cascade tests, in schema shop.
func fkTable(name string, key []int, cols ...string) *sluice.Table {
	t := &sluice.Table{Name: sluice.TableName{Schema: "shop", Name: name}, Key: key}
	for _, c := range cols {
		t.Columns = append(t.Columns, sluice.Column{Name: c})
	}
	return t
}

func fk(name, table, cols, ref, refCols string, onDelete, onUpdate sluice.FKAction) sluice.ForeignKey {
	return sluice.ForeignKey{Name: name, Table: sluice.TableName{Schema: "shop", Name: table}, Columns: strings.Split(cols, ","),
		RefTable: sluice.TableName{Schema: "shop", Name: ref}, RefColumns: strings.Split(refCols, ","), OnDelete: onDelete, OnUpdate: onUpdate}
}

// describeCascade renders a statement as "delete lines<orders<customers"
// or "set notes.order_id=NULL<orders if(code)".
func describeCascade(c Cascade) string {
	var b strings.Builder
	if c.Delete {
		b.WriteString("delete ")
	} else {
		b.WriteString("set ")
	}
	for i, l := range c.Path {
		if i > 0 {
			b.WriteByte('<')
		}
		b.WriteString(l.Table.Name)
		if i == 0 && !c.Delete {
			for j, s := range c.Set {
				from := s.From
				if from == "" {
					from = "NULL"
				}
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, ".%s=%s", s.Column, from)
			}
		}
	}
	fmt.Fprintf(&b, "<%s", c.Path[len(c.Path)-1].RefTable.Name)
	if len(c.IfChanged) > 0 {
		fmt.Fprintf(&b, " if(%s)", strings.Join(c.IfChanged, ","))
	}
	return b.String()
}

const (
	noAction = sluice.FKNoAction
	cascade  = sluice.FKCascade
	setNull  = sluice.FKSetNull
)

func TestCascadesPlan(t *testing.T) {
	customers := fkTable("customers", []int{0}, "id", "name")
	orders := fkTable("orders", []int{0}, "id", "customer_id")
	lines := fkTable("order_lines", []int{0, 1}, "order_id", "line_no", "qty")
	notes := fkTable("order_notes", []int{0}, "id", "order_id")
	lineNotes := fkTable("line_notes", []int{0}, "id", "order_id", "line_no")
	tree := fkTable("tree", []int{0}, "id", "parent_id")
	codes := fkTable("codes", []int{0}, "id", "code")
	uses := fkTable("uses", []int{0}, "id", "code")
	shop := []sluice.ForeignKey{
		fk("orders_customer_fk", "orders", "customer_id", "customers", "id", cascade, cascade),
		fk("lines_order_fk", "order_lines", "order_id", "orders", "id", cascade, cascade),
		fk("notes_order_fk", "order_notes", "order_id", "orders", "id", setNull, cascade),
		fk("line_notes_fk", "line_notes", "order_id,line_no", "order_lines", "order_id,line_no", noAction, cascade),
	}
	shopTables := []*sluice.Table{customers, orders, lines, notes, lineNotes}
	chain := func(n int) []string {
		var out []string
		for d := n; d >= 1; d-- {
			out = append(out, "delete "+strings.Repeat("tree<", d)+"tree")
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		fks    []sluice.ForeignKey
		tables []*sluice.Table
		change sluice.Change
		want   []string
	}{
		{"customer deleted", shop, shopTables, sluice.Change{Table: customers, Op: sluice.OpDelete, Key: row("2")},
			[]string{"delete order_lines<orders<customers", "set order_notes.order_id=NULL<orders<customers", "delete orders<customers"}},
		{"customer renumbered", shop, shopTables, sluice.Change{Table: customers, Op: sluice.OpUpdate, Key: row("4"), Row: row("400", "x")},
			[]string{"set orders.customer_id=id<customers"}},
		{"customer renamed", shop, shopTables, sluice.Change{Table: customers, Op: sluice.OpUpdate, Key: row("4"), Row: row("4", "y")}, nil},
		{"customer deleted by a session with foreign key checks off", shop, shopTables,
			sluice.Change{Table: customers, Op: sluice.OpDelete, Key: row("2"), FKChecksOff: true}, nil},
		{"customer inserted", shop, shopTables, sluice.Change{Table: customers, Op: sluice.OpInsert, Row: row("9", "z")}, nil},
		{"order renumbered: lines, their notes by composite key, order notes", shop, shopTables,
			sluice.Change{Table: orders, Op: sluice.OpUpdate, Key: row("31"), Row: row("5031", "3")},
			[]string{"set line_notes.order_id=id<order_lines<orders", "set order_lines.order_id=id<orders", "set order_notes.order_id=id<orders"}},
		{"line deleted: its notes restrict", shop, shopTables, sluice.Change{Table: lines, Op: sluice.OpDelete, Key: row("31", "1")}, nil},
		{"child without children", shop, shopTables, sluice.Change{Table: notes, Op: sluice.OpDelete, Key: row("1")}, nil},
		{"self-reference: deletes down to InnoDB's depth, deepest first",
			[]sluice.ForeignKey{fk("tree_fk", "tree", "parent_id", "tree", "id", cascade, cascade)}, []*sluice.Table{tree},
			sluice.Change{Table: tree, Op: sluice.OpDelete, Key: row("1")}, chain(maxCascadeDepth)},
		{"self-reference: ON UPDATE CASCADE refused by InnoDB when it has children",
			[]sluice.ForeignKey{fk("tree_fk", "tree", "parent_id", "tree", "id", cascade, cascade)}, []*sluice.Table{tree},
			sluice.Change{Table: tree, Op: sluice.OpUpdate, Key: row("1"), Row: row("100", "")}, nil},
		{"self-reference: ON DELETE SET NULL",
			[]sluice.ForeignKey{fk("tree_fk", "tree", "parent_id", "tree", "id", setNull, setNull)}, []*sluice.Table{tree},
			sluice.Change{Table: tree, Op: sluice.OpDelete, Key: row("1")}, []string{"set tree.parent_id=NULL<tree"}},
		{"unique key referenced: only the target's row tells whether it changed",
			[]sluice.ForeignKey{fk("uses_code_fk", "uses", "code", "codes", "code", noAction, setNull)}, []*sluice.Table{codes, uses},
			sluice.Change{Table: codes, Op: sluice.OpUpdate, Key: row("1"), Row: row("1", "b")}, []string{"set uses.code=NULL<codes if(code)"}},
		{"restrict on both", []sluice.ForeignKey{fk("r", "orders", "customer_id", "customers", "id", noAction, noAction)},
			[]*sluice.Table{customers, orders}, sluice.Change{Table: customers, Op: sluice.OpDelete, Key: row("1")}, nil},
		{"parent not streamed, no action", []sluice.ForeignKey{fk("r", "orders", "customer_id", "customers", "id", noAction, noAction)},
			[]*sluice.Table{orders}, sluice.Change{Table: orders, Op: sluice.OpDelete, Key: row("1")}, nil},
		{"child not streamed", shop[:1], []*sluice.Table{customers}, sluice.Change{Table: customers, Op: sluice.OpDelete, Key: row("1")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := NewCascades(tc.fks, tc.tables)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cs.For(&tc.change) {
				got = append(got, describeCascade(c))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tc.want, "\n\t"))
			}
		})
	}
}

func TestCascadesFiresAndJoined(t *testing.T) {
	customers := fkTable("customers", []int{0}, "id")
	orders := fkTable("orders", []int{0}, "id", "customer_id")
	audit := fkTable("audit", []int{0}, "id", "order_id")
	other := fkTable("other", []int{0}, "id")
	cs, err := NewCascades([]sluice.ForeignKey{
		fk("o", "orders", "customer_id", "customers", "id", cascade, noAction),
		fk("a", "audit", "order_id", "orders", "id", noAction, noAction),
	}, []*sluice.Table{customers, orders, audit, other})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    sluice.Change
		want bool
	}{
		{sluice.Change{Table: customers, Op: sluice.OpDelete, Key: row("1")}, true},
		{sluice.Change{Table: customers, Op: sluice.OpUpdate, Key: row("1"), Row: row("2")}, false}, // ON UPDATE NO ACTION
		{sluice.Change{Table: customers, Op: sluice.OpInsert, Row: row("1")}, false},
		{sluice.Change{Table: orders, Op: sluice.OpDelete, Key: row("1")}, false}, // audit restricts
		{sluice.Change{Table: other, Op: sluice.OpDelete, Key: row("1")}, false},
	} {
		if got := cs.Fires(&tc.c); got != tc.want {
			t.Errorf("Fires(%s of %s) = %v, want %v", tc.c.Op, tc.c.Table.Name, got, tc.want)
		}
	}
	if got := fmt.Sprint(cs.Joined()); got != "[[shop.orders shop.customers] [shop.audit shop.orders]]" {
		t.Errorf("Joined() = %s", got)
	}
	var nilCS *Cascades
	if !nilCS.Empty() || nilCS.For(&sluice.Change{Table: customers, Op: sluice.OpDelete}) != nil || nilCS.Joined() != nil {
		t.Error("a nil Cascades plans nothing")
	}
}

func TestCascadesRefused(t *testing.T) {
	orders := fkTable("orders", []int{0}, "id", "customer_id")
	tree := fkTable("tree", []int{0}, "id", "a", "b")
	for _, tc := range []struct {
		name   string
		fks    []sluice.ForeignKey
		tables []*sluice.Table
		want   []string
	}{
		{"parent not streamed", []sluice.ForeignKey{fk("orders_customer_fk", "orders", "customer_id", "customers", "id", cascade, noAction)},
			[]*sluice.Table{orders}, []string{"orders_customer_fk", "does not carry shop.customers", "add shop.customers to the stream's tables"}},
		{"parent not streamed, SET NULL on update", []sluice.ForeignKey{fk("orders_customer_fk", "orders", "customer_id", "customers", "id", noAction, setNull)},
			[]*sluice.Table{orders}, []string{"ON UPDATE SET NULL", "add shop.customers"}},
		{"SET DEFAULT", []sluice.ForeignKey{fk("d", "orders", "customer_id", "orders", "id", sluice.FKSetDefault, noAction)},
			[]*sluice.Table{orders}, []string{"SET DEFAULT", "change it on the source"}},
		{"two self-references", []sluice.ForeignKey{fk("ta", "tree", "a", "tree", "id", cascade, noAction), fk("tb", "tree", "b", "tree", "id", cascade, noAction)},
			[]*sluice.Table{tree}, []string{"more than 128 paths", "drop the action"}},
		{"unknown column", []sluice.ForeignKey{fk("x", "orders", "nope", "orders", "id", cascade, noAction)},
			[]*sluice.Table{orders}, []string{"column nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCascades(tc.fks, tc.tables)
			var ce *CascadeError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a CascadeError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestCascadesAttach: a batch is cut after each change that fires an
// action, which goes last in its part's Ordered with its statements; the
// changes before and after it are compacted in their parts.
func TestCascadesAttach(t *testing.T) {
	customers := fkTable("customers", []int{0}, "id")
	orders := fkTable("orders", []int{0}, "id", "customer_id")
	cs, err := NewCascades([]sluice.ForeignKey{fk("o", "orders", "customer_id", "customers", "id", cascade, cascade)}, []*sluice.Table{customers, orders})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCompactor(nil)
	c.Cut = cs.Fires
	c.Add([]sluice.Change{
		{Table: orders, Op: sluice.OpInsert, Row: row("1", "5")},
		{Table: orders, Op: sluice.OpUpdate, Key: row("1"), Row: row("1", "6")},
		{Table: customers, Op: sluice.OpDelete, Key: row("5")},
		{Table: orders, Op: sluice.OpInsert, Row: row("2", "5")},
		{Table: customers, Op: sluice.OpInsert, Row: row("5")},
	})
	b := c.Batch()
	cs.Attach(b)
	parts := b.Parts()
	if len(parts) != 2 || b.Changes != 5 || b.Rows != 4 {
		t.Fatalf("%d parts, %d changes, %d rows; want 2, 5, 4", len(parts), b.Changes, b.Rows)
	}
	first, second := parts[0], parts[1]
	if len(first.Tables) != 1 || fmt.Sprint(first.Tables[0].Upserts) != "[[1 6]]" || len(first.Ordered) != 1 ||
		first.Ordered[0].Op != sluice.OpDelete || len(first.Cascades) != 1 || len(first.Cascades[0]) != 1 {
		t.Fatalf("first part: tables %v, ordered %v, cascades %v", first.Tables, first.Ordered, first.Cascades)
	}
	if len(second.Tables) != 2 || len(second.Ordered) != 0 || second.Cascades != nil {
		t.Fatalf("second part: tables %v, ordered %v, cascades %v", second.Tables, second.Ordered, second.Cascades)
	}
	mapped := first.Cascades[0][0].Map(func(n sluice.TableName) sluice.TableName { n.Schema = ""; return n })
	if got := mapped.Path[0].Table.String() + "<" + mapped.Path[0].RefTable.String(); got != "orders<customers" {
		t.Errorf("mapped path %s", got)
	}
	if first.Cascades[0][0].Path[0].Table.Schema != "shop" {
		t.Error("Map changed the original")
	}
	if got := first.Cascades[0][0].String(); got != "ON DELETE CASCADE of foreign key o (shop.orders → shop.customers)" {
		t.Errorf("String() = %q", got)
	}
}
