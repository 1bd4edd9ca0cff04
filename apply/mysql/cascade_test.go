package mysql

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/apply/typemap"
)

func TestGoldenCascadeSQL(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec cascadeSpec
	}{
		// A customer's delete reaches its orders by their customer_id.
		{"cascade_delete_direct", cascadeSpec{
			tables: []string{"`shop`.`orders`"},
			delete: true, where: []sqlColumn{{"customer_id", kindNumber}}, is: row("7"),
		}},
		// ... and their lines through them.
		{"cascade_delete_chain", cascadeSpec{
			tables: []string{"`shop`.`order_lines`", "`shop`.`orders`"},
			joins:  []cascadeJoin{{[]string{"order_id"}, []string{"id"}}},
			delete: true, where: []sqlColumn{{"customer_id", kindNumber}}, is: row("7"),
		}},
		{"cascade_update_composite", cascadeSpec{
			tables: []string{"`line_notes`", "`order_lines`"},
			joins:  []cascadeJoin{{[]string{"order_id", "line_no"}, []string{"order_id", "line_no"}}},
			set:    []sqlColumn{{"order_id", kindNumber}}, vals: []sluice.Value{sluice.Text("5031")},
			where: []sqlColumn{{"order_id", kindNumber}}, is: row("31"),
		}},
		// A referenced unique key: the changed row is joined by its old
		// primary key, and its values compared.
		{"cascade_set_null_if_changed", cascadeSpec{
			tables: []string{"`uses`", "`codes`"},
			joins:  []cascadeJoin{{[]string{"code"}, []string{"code"}}},
			set:    []sqlColumn{{"code", kindString}}, vals: []sluice.Value{sluice.Null},
			where: []sqlColumn{{"id", kindNumber}, {"region", kindString}}, is: row("1", "eu"),
			ifChanged: []sqlColumn{{"code", kindString}}, news: []sluice.Value{sluice.Text("O'Neil")},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { golden(t, tc.name, buildCascade(tc.spec)) })
	}
}

// FuzzCascadeSQL checks that a cascade statement keeps its shape whatever
// the identifiers and values: each reads back as itself.
func FuzzCascadeSQL(f *testing.F) {
	f.Add("orders", "id", "customer_id", "hello", []byte("\x00\xff"))
	f.Add("x`y", "``", "'", `it's \' \\' ''`, []byte("'\\"))
	f.Fuzz(func(t *testing.T, table, key, col, text string, bin []byte) {
		spec := func(table, key, col, text, bin string) cascadeSpec {
			return cascadeSpec{
				tables: []string{quoteIdent(table), quoteIdent(table)},
				joins:  []cascadeJoin{{[]string{col}, []string{key}}},
				set:    []sqlColumn{{col, kindString}}, vals: []sluice.Value{sluice.Text(text)},
				where: []sqlColumn{{key, kindBinary}}, is: sluice.Row{sluice.Text(bin)},
				ifChanged: []sqlColumn{{col, kindString}}, news: []sluice.Value{sluice.Text(text)},
			}
		}
		skel, idents, values := lexSQL(t, buildCascade(spec(table, key, col, text, string(bin))))
		wantSkel, _, _ := lexSQL(t, buildCascade(spec("T", "K", "C", "v", "w")))
		if skel != wantSkel {
			t.Fatalf("skeleton differs:\n%s\nwant\n%s", skel, wantSkel)
		}
		want := []string{table, "x0", table, "x1", "x0", col, "x1", key, "x0", col, "x1", key, "x1", col}
		if fmt.Sprintf("%q", idents) != fmt.Sprintf("%q", want) {
			t.Fatalf("identifiers read back as %q, want %q", idents, want)
		}
		if len(values) != 3 || values[0] != text || values[1] != string(bin) || values[2] != text {
			t.Fatalf("values read back as %q", values)
		}
	})
}

// TestCascadesOnTarget applies batches with the statements of a MySQL
// source's foreign-key actions to MariaDB tables that hold the same
// foreign keys (which the session's foreign_key_checks = 0 keeps from
// running a second time): a customer's delete takes its orders, their
// lines and nulls their notes; an order's renumbering moves its lines and
// their notes (a composite key) and its notes; a self-referencing tree
// loses a whole branch; a referenced unique value's change nulls the rows
// using it, and a change of another column does not. The same batch
// applied a second time leaves the same rows.
func TestCascadesOnTarget(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t,
			"CREATE TABLE customers (id int PRIMARY KEY, name varchar(20))",
			"CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, CONSTRAINT o_fk FOREIGN KEY (customer_id) REFERENCES customers (id) ON DELETE CASCADE ON UPDATE CASCADE)",
			"CREATE TABLE order_lines (order_id int, line_no int, PRIMARY KEY (order_id, line_no), CONSTRAINT l_fk FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE ON UPDATE CASCADE)",
			"CREATE TABLE line_notes (id int PRIMARY KEY, order_id int, line_no int, CONSTRAINT ln_fk FOREIGN KEY (order_id, line_no) REFERENCES order_lines (order_id, line_no) ON UPDATE CASCADE)",
			"CREATE TABLE order_notes (id int PRIMARY KEY, order_id int, CONSTRAINT n_fk FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE SET NULL ON UPDATE CASCADE)",
			"CREATE TABLE tree (id int PRIMARY KEY, parent_id int, CONSTRAINT t_fk FOREIGN KEY (parent_id) REFERENCES tree (id) ON DELETE CASCADE)",
			"CREATE TABLE codes (id int PRIMARY KEY, code varchar(10) NOT NULL, n int, UNIQUE KEY (code))",
			"CREATE TABLE uses (id int PRIMARY KEY, code varchar(10), CONSTRAINT u_fk FOREIGN KEY (code) REFERENCES codes (code) ON UPDATE SET NULL)",
			"INSERT INTO customers VALUES (1, 'a'), (2, 'b')",
			"INSERT INTO orders VALUES (10, 1), (11, 1), (20, 2), (31, 2)",
			"INSERT INTO order_lines VALUES (10, 1), (10, 2), (11, 1), (20, 1), (31, 1), (31, 2)",
			"INSERT INTO line_notes VALUES (1, 31, 2), (2, 20, 1)",
			"INSERT INTO order_notes VALUES (1, 10), (2, 31), (3, NULL)",
			"INSERT INTO tree VALUES (1, NULL), (2, 1), (3, 2), (4, 3), (5, 1), (6, NULL), (7, 6)",
			"INSERT INTO codes VALUES (1, 'x', 0), (2, 'y', 0)",
			"INSERT INTO uses VALUES (1, 'x'), (2, 'x'), (3, 'y')",
		)
		customers := table("customers", []int{0}, "id int", "name varchar(20)")
		orders := table("orders", []int{0}, "id int", "customer_id int")
		lines := table("order_lines", []int{0, 1}, "order_id int", "line_no int")
		lineNotes := table("line_notes", []int{0}, "id int", "order_id int", "line_no int")
		notes := table("order_notes", []int{0}, "id int", "order_id int")
		tree := table("tree", []int{0}, "id int", "parent_id int")
		codes := table("codes", []int{0}, "id int", "code varchar(10)", "n int")
		uses := table("uses", []int{0}, "id int", "code varchar(10)")
		orders.Columns[1].Nullable, codes.Columns[1].Nullable = false, false
		codes.Columns[1].Collation = "utf8mb4_unicode_ci" // the target's, as from a MySQL source
		tables := []*sluice.Table{customers, orders, lines, lineNotes, notes, tree, codes, uses}
		name := func(n string) sluice.TableName { return sluice.TableName{Name: n} }
		fk := func(n, tbl, cols, ref, refCols string, del, upd sluice.FKAction) sluice.ForeignKey {
			return sluice.ForeignKey{Name: n, Table: name(tbl), Columns: strings.Split(cols, ","), RefTable: name(ref), RefColumns: strings.Split(refCols, ","), OnDelete: del, OnUpdate: upd}
		}
		cs, err := apply.NewCascades([]sluice.ForeignKey{
			fk("o_fk", "orders", "customer_id", "customers", "id", sluice.FKCascade, sluice.FKCascade),
			fk("l_fk", "order_lines", "order_id", "orders", "id", sluice.FKCascade, sluice.FKCascade),
			fk("ln_fk", "line_notes", "order_id,line_no", "order_lines", "order_id,line_no", sluice.FKNoAction, sluice.FKCascade),
			fk("n_fk", "order_notes", "order_id", "orders", "id", sluice.FKSetNull, sluice.FKCascade),
			fk("t_fk", "tree", "parent_id", "tree", "id", sluice.FKCascade, sluice.FKNoAction),
			fk("u_fk", "uses", "code", "codes", "code", sluice.FKNoAction, sluice.FKSetNull),
		}, tables)
		if err != nil {
			t.Fatal(err)
		}
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		if err := tg.Preflight(ctx, tables); err != nil {
			t.Fatal(err)
		}
		comp := apply.NewCompactor(nil)
		comp.Cut = cs.Fires
		comp.Add([]sluice.Change{
			ins(orders, "99", "1"), ins(lines, "99", "1"),
			{Table: orders, Op: sluice.OpUpdate, Key: row("31"), Row: row("5031", "2")},
			del(customers, "1"),
			del(tree, "1"),
			{Table: codes, Op: sluice.OpUpdate, Key: row("1"), Row: row("1", "z", "0")},
			{Table: codes, Op: sluice.OpUpdate, Key: row("2"), Row: row("2", "y", "5")},
		})
		b := comp.Batch()
		cs.Attach(b)
		if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		// Applied again (an unknown commit outcome retried, a lane's
		// changes replayed): its first part puts order 99 back under
		// customer 1, gone by then, whose delete must take it again.
		if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: 2}); err != nil {
			t.Fatalf("the batch applied again: %v", err)
		}
		for _, tc := range []struct{ table, want string }{
			{"customers", "[2|b]"},
			{"orders", "[20|2 5031|2]"},
			{"order_lines", "[20|1 5031|1 5031|2]"},
			{"line_notes", "[1|5031|2 2|20|1]"},
			{"order_notes", "[1|NULL 2|5031 3|NULL]"},
			{"tree", "[6|NULL 7|6]"},
			{"codes", "[1|z|0 2|y|5]"},
			{"uses", "[1|NULL 2|NULL 3|y]"},
		} {
			if got := fmt.Sprint(dump(t, db, tc.table)); got != tc.want {
				t.Errorf("%s: got %s, want %s", tc.table, got, tc.want)
			}
		}
	})
}

// TestCascadesAfterTablesForgotten: the target describes tables again
// after a schema change's batch, a statement refused for an unknown table
// or column, or ForgetTables, and then knows only those a batch names. A
// cascade into a table no batch has named since must still run, with the
// table as the last schema change left it, also through the cross-engine
// wrapper, where the change's batch names the table as the source does.
// Seen before the fixes: "table orders is not among the stream's tables on
// the target", then "column orders.extra is missing on the target"
// (TestSchemaCreateCopyStream/mysql_to_mysql), and the stream stopped.
func TestCascadesAfterTablesForgotten(t *testing.T) {
	for _, wrapped := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "wrapped"}[wrapped], func(t *testing.T) {
			dsn, db := testDB(t,
				"CREATE TABLE customers (id int PRIMARY KEY, name varchar(20))",
				"CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, extra int, CONSTRAINT o_fk FOREIGN KEY (customer_id) REFERENCES customers (id) ON DELETE CASCADE ON UPDATE CASCADE)",
				"CREATE TABLE order_lines (order_id int, line_no int, PRIMARY KEY (order_id, line_no), CONSTRAINT l_fk FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE ON UPDATE CASCADE)",
				"INSERT INTO customers VALUES (1, 'a'), (2, 'b')",
				"INSERT INTO orders VALUES (10, 1, NULL), (20, 2, NULL)",
				"INSERT INTO order_lines VALUES (10, 1), (10, 2), (20, 1)",
			)
			// Through the wrapper the source's names carry its database,
			// which the target's do not.
			schema := map[bool]string{true: "source_db"}[wrapped]
			named := func(tb *sluice.Table) *sluice.Table { tb.Name.Schema = schema; return tb }
			customers := named(table("customers", []int{0}, "id int", "name varchar(20)"))
			before := named(table("orders", []int{0}, "id int", "customer_id int", "extra int"))
			orders := named(table("orders", []int{0}, "id int", "customer_id int"))
			lines := named(table("order_lines", []int{0, 1}, "order_id int", "line_no int"))
			before.Columns[1].Nullable, orders.Columns[1].Nullable = false, false
			tables := []*sluice.Table{customers, before, lines}
			name := func(n string) sluice.TableName { return sluice.TableName{Schema: schema, Name: n} }
			cs, err := apply.NewCascades([]sluice.ForeignKey{
				{Name: "o_fk", Table: name("orders"), Columns: []string{"customer_id"}, RefTable: name("customers"), RefColumns: []string{"id"}, OnDelete: sluice.FKCascade, OnUpdate: sluice.FKCascade},
				{Name: "l_fk", Table: name("order_lines"), Columns: []string{"order_id"}, RefTable: name("orders"), RefColumns: []string{"id"}, OnDelete: sluice.FKCascade, OnUpdate: sluice.FKCascade},
			}, tables)
			if err != nil {
				t.Fatal(err)
			}
			inner := openTarget(t, dsn, Pipelined, nil)
			var tg interface {
				Preflight(context.Context, []*sluice.Table) error
				Apply(context.Context, *apply.Batch, sluice.Checkpoint) error
			} = inner
			if wrapped {
				tg = typemap.Wrap(inner, typemap.MySQL, typemap.MySQL)
			}
			ctx := context.Background()
			if err := tg.Preflight(ctx, tables); err != nil {
				t.Fatal(err)
			}
			// The source dropped orders.extra: the cascades' paths must
			// describe orders as it is now.
			ddl := &apply.Batch{Schema: &sluice.Change{Op: sluice.OpSchema, Table: orders, Schema: &sluice.SchemaChange{Before: before}},
				DDL: []string{"ALTER TABLE orders DROP COLUMN extra"}}
			if err := tg.Apply(ctx, ddl, sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
				t.Fatal(err)
			}
			for i, tc := range []struct {
				name   string
				change sluice.Change
			}{
				{"delete", del(customers, "1")},
				{"renumbering", sluice.Change{Table: customers, Op: sluice.OpUpdate, Key: row("2"), Row: row("200", "b")}},
			} {
				if i > 0 {
					inner.ForgetTables()
				}
				comp := apply.NewCompactor(nil)
				comp.Cut = cs.Fires
				comp.Add([]sluice.Change{tc.change})
				b := comp.Batch()
				cs.Attach(b)
				if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: uint64(i + 2)}); err != nil {
					t.Fatalf("%s after the tables were forgotten: %v", tc.name, err)
				}
			}
			for _, tc := range []struct{ table, want string }{
				{"customers", "[200|b]"},
				{"orders", "[20|200]"},
				{"order_lines", "[20|1]"},
			} {
				if got := fmt.Sprint(dump(t, db, tc.table)); got != tc.want {
					t.Errorf("%s: got %s, want %s", tc.table, got, tc.want)
				}
			}
		})
	}
}
