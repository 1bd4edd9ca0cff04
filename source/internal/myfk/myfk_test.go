package myfk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/internal/myfk"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestRead reads MariaDB's foreign keys of a schema: composite, a unique
// key referenced, a self-reference, every rule, and one from a table of
// another database into the schema; a foreign key between tables of no
// interest is left out.
func TestRead(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MariaDB")
	}
	d := dbtest.MariaEngine.DatabaseWith(t, nil,
		"CREATE TABLE customers (id int PRIMARY KEY, code varchar(10) NOT NULL, UNIQUE KEY (code))",
		"CREATE TABLE orders (id int PRIMARY KEY, customer_id int, customer_code varchar(10), "+
			"CONSTRAINT o_cust FOREIGN KEY (customer_id) REFERENCES customers (id) ON DELETE CASCADE ON UPDATE SET NULL, "+
			"CONSTRAINT o_code FOREIGN KEY (customer_code) REFERENCES customers (code))",
		"CREATE TABLE order_lines (order_id int, line_no int, PRIMARY KEY (order_id, line_no), "+
			"CONSTRAINT l_order FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE ON UPDATE CASCADE)",
		"CREATE TABLE line_notes (id int PRIMARY KEY, order_id int, line_no int, "+
			"CONSTRAINT n_line FOREIGN KEY (order_id, line_no) REFERENCES order_lines (order_id, line_no) ON DELETE NO ACTION ON UPDATE RESTRICT)",
		"CREATE TABLE tree (id int PRIMARY KEY, parent_id int, CONSTRAINT t_parent FOREIGN KEY (parent_id) REFERENCES tree (id) ON DELETE CASCADE)",
		"CREATE TABLE other_p (id int PRIMARY KEY)",
		"CREATE TABLE other_c (id int PRIMARY KEY, p int, CONSTRAINT other_fk FOREIGN KEY (p) REFERENCES other_p (id) ON DELETE CASCADE)",
	)
	ctx := context.Background()
	side := d.Name + "_side"
	for _, q := range []string{"CREATE DATABASE " + side,
		"CREATE TABLE " + side + ".audit (id int PRIMARY KEY, order_id int, CONSTRAINT a_order FOREIGN KEY (order_id) REFERENCES " + d.Name + ".orders (id) ON DELETE CASCADE)"} {
		if _, err := d.My.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { d.My.ExecContext(context.Background(), "DROP DATABASE "+side) })
	var tables []sluice.TableName
	for _, n := range []string{"customers", "orders", "order_lines", "line_notes", "tree"} {
		tables = append(tables, sluice.TableName{Schema: d.Name, Name: n})
	}
	fks, err := myfk.Read(ctx, d.My, tables)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fks {
		got = append(got, fmt.Sprintf("%s %s(%s) → %s(%s) delete %s update %s", f.Name, f.Table.Name, strings.Join(f.Columns, ","),
			f.RefTable.Name, strings.Join(f.RefColumns, ","), f.OnDelete, f.OnUpdate))
	}
	want := []string{
		"n_line line_notes(order_id,line_no) → order_lines(order_id,line_no) delete NO ACTION update NO ACTION",
		"l_order order_lines(order_id) → orders(id) delete CASCADE update CASCADE",
		"o_code orders(customer_code) → customers(code) delete NO ACTION update NO ACTION",
		"o_cust orders(customer_id) → customers(id) delete CASCADE update SET NULL",
		"t_parent tree(parent_id) → tree(id) delete CASCADE update NO ACTION",
		"a_order audit(order_id) → orders(id) delete CASCADE update NO ACTION",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	if fks[5].Table.Schema != side || fks[5].RefTable.Schema != d.Name {
		t.Errorf("cross-database foreign key read as %s", fks[5])
	}
}
