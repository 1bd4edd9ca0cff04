package mytrigger

import (
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestJSONNulls checks that a JSON column holding the JSON value null and
// one holding SQL NULL each arrive as what they are, on insert and update,
// with values that look alike around them. The trigger captures a JSON
// column as CAST(col AS CHAR), a JSON string in the image, so SQL NULL is
// the image's null and the JSON value null the string "null": the two
// cannot be confused (row_to_json on PostgreSQL writes both as null).
func TestJSONNulls(t *testing.T) {
	f := newFixture(t, "CREATE TABLE j (id int PRIMARY KEY, v varchar(10), j json, jn json NOT NULL)")
	r := f.open(t, Config{Tables: dbtest.Tables("j"), Install: true}, sluice.Position{})
	vals := []struct {
		sql  string
		want sluice.Value
	}{
		{`NULL`, sluice.Null},
		{`'null'`, sluice.Text("null")},
		{`'"null"'`, sluice.Text(`"null"`)},
		{`'{}'`, sluice.Text("{}")},
		{`'{"a": [null, {"b": null}], "c": "null"}'`, sluice.Text(`{"a": [null, {"b": null}], "c": "null"}`)},
		{`' null '`, sluice.Text(" null ")},
		{`'[null]'`, sluice.Text("[null]")},
	}
	n := len(vals)
	// image is the row id holding value i; the NOT NULL column holds the
	// JSON null in place of SQL NULL.
	image := func(id, i int) (set string, row sluice.Row) {
		jn, jnWant := vals[i].sql, vals[i].want
		if vals[i].want.Null {
			jn, jnWant = "'null'", sluice.Text("null")
		}
		return fmt.Sprintf("v = 'v%d', j = %s, jn = %s", i, vals[i].sql, jn),
			sluice.Row{sluice.Text(fmt.Sprint(id)), sluice.Text(fmt.Sprintf("v%d", i)), vals[i].want, jnWant}
	}
	type change struct {
		op  sluice.Op
		row sluice.Row
	}
	var want []change
	for i := range vals {
		set, row := image(i+1, i)
		f.Exec(t, fmt.Sprintf("INSERT INTO j SET id = %d, %s", i+1, set))
		want = append(want, change{sluice.OpInsert, row})
	}
	// Every value becomes the next one, the last one SQL NULL.
	for i := range vals {
		set, row := image(i+1, (i+1)%n)
		f.Exec(t, fmt.Sprintf("UPDATE j SET %s WHERE id = %d", set, i+1))
		want = append(want, change{sluice.OpUpdate, row})
	}
	f.Exec(t, "DELETE FROM j")
	for range vals {
		want = append(want, change{sluice.OpDelete, nil})
	}
	got := collect(t, r, len(want), 1000)
	for i, w := range want {
		c := got[i]
		if c.Op != w.op {
			t.Fatalf("change %d is %s, want %s: %s", i, c.Op, w.op, dbtest.DescribeChanges(got))
		}
		if c.Op != sluice.OpInsert {
			if wk := sluice.Text(fmt.Sprint(i%n + 1)); len(c.Key) != 1 || c.Key[0] != wk {
				t.Errorf("change %d (%s) key = %v, want %v", i, c.Op, c.Key, wk)
			}
		}
		if len(c.Row) != len(w.row) {
			t.Errorf("change %d (%s) row = %v, want %v", i, c.Op, c.Row, w.row)
			continue
		}
		for j := range w.row {
			if c.Row[j] != w.row[j] {
				t.Errorf("change %d (%s) column %s = %#v, want %#v", i, c.Op, c.Table.Columns[j].Name, c.Row[j], w.row[j])
			}
		}
	}
}
