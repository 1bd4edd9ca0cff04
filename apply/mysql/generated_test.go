package mysql

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// genDDL is a target table with every kind of generated column: STORED,
// VIRTUAL, an indexed VIRTUAL one over JSON, and a STORED one under a
// unique index.
const genDDL = "CREATE TABLE %s (id int PRIMARY KEY, price decimal(10,2), qty int, " +
	"total decimal(12,2) AS (price * qty) STORED, half decimal(12,3) AS (price / 2) VIRTUAL, doc json, " +
	"j_name varchar(40) AS (json_value(doc, '$.name')) VIRTUAL, code varchar(12) AS (concat('c', id)) STORED, " +
	"KEY (j_name), UNIQUE KEY (code))"

// genSource is the same table as a MariaDB source describes it.
func genSource(name string) *sluice.Table {
	t := table(name, []int{0}, "id int(11)", "price decimal(10,2)", "qty int(11)", "total decimal(12,2)", "half decimal(12,3)",
		"doc longtext", "j_name varchar(40)", "code varchar(12)")
	for i, e := range map[int]string{3: "`price` * `qty`", 4: "`price` / 2", 6: "json_value(`doc`,'$.name')", 7: "concat('c',`id`)"} {
		t.Columns[i].Generated = e
	}
	t.Columns[6].Collation, t.Columns[7].Collation = "utf8mb4_unicode_ci", "utf8mb4_unicode_ci"
	return t
}

// genRow is a row as the binlog carries it, but with the generated
// columns' values wrong: the target must compute its own.
func genRow(id, price, qty, doc string) sluice.Row {
	return row(id, price, qty, "-1", "-1", doc, "wrong", "wrong")
}

// TestGeneratedColumnsWritten applies a copy chunk, a compacted batch
// and an ordered one (inserts, updates, a key move, deletes) to a table
// whose generated columns the rows carry with wrong values, in every
// mode: the target must never write them, and end as the same statements
// run with plain SQL leave a reference table.
func TestGeneratedColumnsWritten(t *testing.T) {
	eachCopy(t, func(t *testing.T, v variant) {
		ctx := context.Background()
		dsn, db := testDB(t, fmt.Sprintf(genDDL, "g"), fmt.Sprintf(genDDL, "ref"),
			`INSERT INTO ref (id, price, qty, doc) VALUES (1, 1.25, 2, '{"name": "a"}'), (2, NULL, 3, NULL), (3, 10.51, -4, '{"x": 1}')`)
		src := genSource("g")
		tg := openTarget(t, dsn, v.mode, v.multi)
		if err := tg.Preflight(ctx, []*sluice.Table{src}); err != nil {
			t.Fatal(err)
		}
		if w := tg.PreflightWarnings(); len(w) > 0 {
			t.Errorf("warnings for the same expressions: %q", w)
		}
		if w := tg.WrittenColumns(src); !slices.Equal(w, []int{0, 1, 2, 5}) {
			t.Errorf("WrittenColumns = %v, want the columns the target does not generate", w)
		}
		if err := tg.WritePlan(ctx, &tablecopy.Plan{Stream: "v", Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		copied := []sluice.Row{genRow("1", "1.25", "2", `{"name": "a"}`), genRow("2", null, "3", null), genRow("3", "10.51", "-4", `{"x": 1}`)}
		if _, err := tg.WriteChunk(ctx, "v", 1, src, tablecopy.Chunk{Table: src.Name}, false, produce(copied, 2, nil)); err != nil {
			t.Fatal(err)
		}
		compacted := apply.Compact([]sluice.Change{
			upd(src, "2", "7.77", "3", "-1", "-1", `{"name": "b"}`, "wrong", "wrong"),
			{Table: src, Op: sluice.OpUpdate, Key: row("3"), Row: genRow("30", "10.51", "5", `{"x": 1}`)},
			ins(src, "4", "0.01", "1", "-1", "-1", `{"name": "ü"}`, "wrong", "wrong"),
			del(src, "1"),
		}, nil)
		if err := tg.Apply(ctx, compacted, sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		ordered := &apply.Batch{Ordered: []sluice.Change{
			ins(src, "5", "2", "2", "-1", "-1", null, "wrong", "wrong"),
			{Table: src, Op: sluice.OpUpdate, Key: row("5"), Row: genRow("50", "3", "2", `{"name": "c"}`)},
			upd(src, "4", "0.02", "1", "-1", "-1", `{"name": "ü"}`, "wrong", "wrong"),
			del(src, "2"),
		}}
		if err := tg.Apply(ctx, ordered, sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`UPDATE ref SET price = 7.77, doc = '{"name": "b"}' WHERE id = 2`,
			"UPDATE ref SET id = 30, qty = 5 WHERE id = 3",
			`INSERT INTO ref (id, price, qty, doc) VALUES (4, 0.01, 1, '{"name": "ü"}')`,
			"DELETE FROM ref WHERE id = 1",
			"INSERT INTO ref (id, price, qty) VALUES (5, 2, 2)",
			`UPDATE ref SET id = 50, price = 3, doc = '{"name": "c"}' WHERE id = 5`,
			"UPDATE ref SET price = 0.02 WHERE id = 4",
			"DELETE FROM ref WHERE id = 2",
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		got, want := dump(t, db, "g"), dump(t, db, "ref")
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("target:\n%s\nwant (plain SQL):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestGeneratedColumnsChecked checks what the preflight says of generated
// columns, from the catalog rows alone.
func TestGeneratedColumnsChecked(t *testing.T) {
	tcols := func(gen map[string]string) []targetColumn {
		var out []targetColumn
		for _, c := range []struct{ name, typ, dt string }{
			{"id", "int(11)", "int"}, {"price", "decimal(10,2)", "decimal"}, {"qty", "int(11)", "int"},
			{"total", "decimal(12,2)", "decimal"}, {"email", "varchar(40)", "varchar"},
		} {
			tc := targetColumn{name: c.name, colType: c.typ, dataType: c.dt, nullable: c.name != "id", generation: gen[c.name], generated: gen[c.name] != ""}
			if c.dt == "varchar" {
				tc.charset, tc.collation = "utf8mb4", "utf8mb4_nopad_bin"
			}
			out = append(out, tc)
		}
		return out
	}
	src := func(gen map[string]string, omitted ...sluice.Column) *sluice.Table {
		t := table("t", []int{0}, "id int(11)", "price decimal(10,2)", "qty int(11)", "total decimal(12,2)", "email varchar(40)")
		t.Columns[4].Collation = "utf8mb4_nopad_bin"
		for i, c := range t.Columns {
			t.Columns[i].Generated = gen[c.Name]
		}
		t.Omitted = omitted
		if len(omitted) > 0 {
			t.Columns = t.Columns[:3]
			t.Columns = append(t.Columns, sluice.Column{Name: "email", Type: "varchar(40)", Nullable: true, Collation: "utf8mb4_nopad_bin"})
		}
		return t
	}
	total := map[string]string{"total": "`price` * `qty`"}
	totalPG := map[string]string{"total": "(price * (qty)::numeric)"}
	omitted := sluice.Column{Name: "total", Type: "numeric(12,2)", Nullable: true, Generated: "(price * (qty)::numeric)"}
	indexes := map[string][]string{"PRIMARY": {"id"}, "email": {"email"}, "total": {"total"}}
	order := []string{"PRIMARY", "email", "total"}
	for _, tc := range []struct {
		name      string
		src       *sluice.Table
		tgt       map[string]string
		errs      []string
		warnings  []string
		generated []int
	}{
		{"same expression", src(total), total, nil, nil, []int{3}},
		{"same expression across engines", src(totalPG), total, nil, nil, []int{3}},
		{"plain on the source", src(nil), total, nil, nil, []int{3}},
		{"different expressions", src(map[string]string{"total": "(price + (qty)::numeric)"}), total, nil,
			[]string{"t.total is generated by different expressions: \"(price + (qty)::numeric)\" on the source, \"`price` * `qty`\" on the target"}, []int{3}},
		{"generated key column", src(nil), map[string]string{"id": "`qty` + 1"}, []string{"column t.id is in the primary key and generated on the target"}, nil, nil},
		{"omitted, generated on the target", src(nil, omitted), total, nil, nil, nil},
		{"omitted, missing on the target", src(nil, omitted), nil, nil, nil, nil},
		{"omitted, plain on the target", src(nil, omitted), nil, []string{"column t.total is generated on the source as \"(price * (qty)::numeric)\"",
			"would never be written", "ALTER TABLE t MODIFY `total` decimal(12,2) AS (<the source's expression>) STORED", "--source-mode trigger"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cols := tcols(tc.tgt)
			if tc.name == "omitted, missing on the target" {
				cols = append(cols[:3], cols[4])
			}
			d, err := check(tc.src, "t", cols, indexes, order, keyRules{server: "MariaDB"})
			if len(tc.errs) > 0 {
				wantErr(t, err, tc.errs...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d.warnings) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %d", d.warnings, len(tc.warnings))
			}
			for i, w := range tc.warnings {
				if !strings.Contains(d.warnings[i], w) {
					t.Errorf("warning %q does not say %q", d.warnings[i], w)
				}
			}
			var generated []int
			for i, g := range d.generated {
				if g {
					generated = append(generated, i)
				}
			}
			if fmt.Sprint(generated) != fmt.Sprint(tc.generated) {
				t.Errorf("generated columns %v, want %v", generated, tc.generated)
			}
			for _, c := range d.release {
				if d.generated[c] {
					t.Errorf("the release sets generated column %s to NULL", d.cols[c].Name)
				}
			}
		})
	}
}

// TestGeneratedColumnsSQL pins the statements of a table with generated
// columns: they are in no column list, no SET and no ON DUPLICATE KEY
// UPDATE clause.
func TestGeneratedColumnsSQL(t *testing.T) {
	src := genSource("g")
	var tcols []targetColumn
	for i, c := range src.Columns {
		tc := targetColumn{name: c.Name, colType: c.Type, dataType: parseType(c.Type).Base, nullable: i > 0, generation: c.Generated, generated: c.Generated != ""}
		if c.Collation != "" {
			tc.charset, tc.collation = "utf8mb4", c.Collation
		}
		tcols = append(tcols, tc)
	}
	d, err := check(src, "g", tcols, map[string][]string{"PRIMARY": {"id"}, "code": {"code"}, "j_name": {"j_name"}}, []string{"PRIMARY", "code", "j_name"},
		keyRules{server: "MariaDB"})
	if err != nil {
		t.Fatal(err)
	}
	d.ident = "`g`"
	stmts, err := d.appendUpserts(nil, []sluice.Row{genRow("1", "1.25", "2", `{"name": "a"}`), genRow("2", null, "3", null)}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	stmts, err = d.appendKeyChange(stmts, row("3"), genRow("30", "10.51", "5", `{"x": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	var sqls []string
	for _, s := range stmts {
		sqls = append(sqls, s.sql)
	}
	golden(t, "generated_columns", strings.Join(sqls, ";\n"))
}
