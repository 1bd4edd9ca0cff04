package typemap

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// fakeInner is an inner target that only knows its tables' column types.
type fakeInner struct {
	Inner
	types map[string]string
}

func (f *fakeInner) ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error) {
	return f.types, nil
}

func itemsTable(flagType string) *sluice.Table {
	return &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "items"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "k", Type: "integer"},
			{Name: "c", Type: "character varying(120)"}, {Name: "flag", Type: flagType}}}
}

func itemsRow(id int, flag string) sluice.Row {
	return sluice.Row{sluice.Text(strconv.Itoa(id)), sluice.Text(strconv.Itoa(id % 1000)), sluice.Text("c" + strconv.Itoa(id)), sluice.Text(flag)}
}

// TestConvertPart checks that a table whose columns all map as they are
// passes its rows through, and that one with a column to convert gets
// converted rows, the source batch left as it was.
func TestConvertPart(t *testing.T) {
	tests := []struct {
		name     string
		flagType string // the source's type of column flag
		dstType  string // the target's
		flag     string // its value in the source rows
		want     string // its value in the converted rows
		same     bool   // the rows pass through, not copied
	}{
		{"identity", "smallint", "smallint(6)", "1", "1", true},
		{"converted", "boolean", "tinyint(1)", "t", "1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := itemsTable(tc.flagType)
			types := map[string]string{"id": "bigint(20)", "k": "int(11)", "c": "varchar(120)", "flag": tc.dstType}
			tg := Wrap(&fakeInner{types: types}, Postgres, MySQL)
			up := []sluice.Row{itemsRow(1, tc.flag), {sluice.Text("2"), sluice.Null, sluice.Value{Unchanged: true}, sluice.Text(tc.flag)}}
			dels := []sluice.Row{{sluice.Text("3")}}
			mv := sluice.Change{Table: tbl, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text("4")}, Row: itemsRow(5, tc.flag)}
			b := &apply.Batch{Tables: []*apply.TableBatch{{Table: tbl, Upserts: up, Deletes: dels, Moves: []sluice.Change{mv}}},
				Ordered: []sluice.Change{{Table: tbl, Op: sluice.OpInsert, Row: itemsRow(6, tc.flag)}}}
			before := up[0][3]
			out, err := tg.convert(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			ob := out.Tables[0]
			if ob.Table.Name.Schema != "" || ob.Table.Columns[3].Type != tc.dstType {
				t.Errorf("table %v, flag type %q", ob.Table.Name, ob.Table.Columns[3].Type)
			}
			for _, r := range []sluice.Row{ob.Upserts[0], ob.Upserts[1], ob.Moves[0].Row, out.Ordered[0].Row} {
				if r[3].Text != tc.want {
					t.Errorf("flag %q, want %q", r[3].Text, tc.want)
				}
			}
			if !ob.Upserts[1][2].Unchanged || !ob.Upserts[1][1].Null {
				t.Errorf("unchanged or NULL value lost: %v", ob.Upserts[1])
			}
			if ob.Moves[0].Table != ob.Table || out.Ordered[0].Table != ob.Table || ob.Moves[0].Key[0].Text != "4" {
				t.Errorf("move %+v, ordered %+v", ob.Moves[0], out.Ordered[0])
			}
			if !reflect.DeepEqual(ob.Deletes, dels) {
				t.Errorf("deletes %v", ob.Deletes)
			}
			if got := &ob.Upserts[0][0] == &up[0][0]; got != tc.same {
				t.Errorf("row passed through: %v, want %v", got, tc.same)
			}
			if up[0][3] != before {
				t.Errorf("source row changed: %v", up[0])
			}
		})
	}
}

// TestConvertError checks that a value that does not convert names the
// table, the column and the row's key.
func TestConvertError(t *testing.T) {
	tbl := itemsTable("boolean")
	tg := Wrap(&fakeInner{types: map[string]string{"flag": "tinyint(1)"}}, Postgres, MySQL)
	b := &apply.Batch{Tables: []*apply.TableBatch{{Table: tbl, Upserts: []sluice.Row{itemsRow(7, "maybe")}}}}
	_, err := tg.convert(context.Background(), b)
	if err == nil || !strings.Contains(err.Error(), "column flag, row (id=7)") {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkConvert converts a batch of 5,000 upserts and 1,000 deletes of
// a table whose values all keep their text (a varchar column's are
// checked), and of one with a column whose values change.
func BenchmarkConvert(b *testing.B) {
	for _, bc := range []struct{ name, flagType, dstType, flag string }{
		{"unchanged", "smallint", "smallint(6)", "1"}, {"converted", "boolean", "tinyint(1)", "t"}} {
		b.Run(bc.name, func(b *testing.B) {
			tbl := itemsTable(bc.flagType)
			types := map[string]string{"id": "bigint(20)", "k": "int(11)", "c": "varchar(120)", "flag": bc.dstType}
			tb := &apply.TableBatch{Table: tbl}
			for i := range 5000 {
				tb.Upserts = append(tb.Upserts, itemsRow(i, bc.flag))
			}
			for i := range 1000 {
				tb.Deletes = append(tb.Deletes, sluice.Row{sluice.Text(strconv.Itoa(10000 + i))})
			}
			batch := &apply.Batch{Tables: []*apply.TableBatch{tb}}
			tg := Wrap(&fakeInner{types: types}, Postgres, MySQL)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tg.convert(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestConvertRows checks that rows are copied only from the first one
// that changes, and that the rows before it are kept.
func TestConvertRows(t *testing.T) {
	upper := func(r sluice.Row) (sluice.Row, error) {
		if strings.ToUpper(r[0].Text) == r[0].Text {
			return r, nil
		}
		return sluice.Row{sluice.Text(strings.ToUpper(r[0].Text))}, nil
	}
	tests := []struct {
		in   []string
		want []string
		same bool
	}{
		{nil, nil, true},
		{[]string{"A", "B"}, []string{"A", "B"}, true},
		{[]string{"A", "b", "C"}, []string{"A", "B", "C"}, false},
		{[]string{"a"}, []string{"A"}, false},
	}
	for _, tc := range tests {
		var rows []sluice.Row
		for _, s := range tc.in {
			rows = append(rows, sluice.Row{sluice.Text(s)})
		}
		out, err := convertRows(rows, upper)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range out {
			got = append(got, r[0].Text)
		}
		if !reflect.DeepEqual(got, tc.want) || (len(rows) > 0 && (&out[0] == &rows[0]) != tc.same) {
			t.Errorf("%v: got %v (same slice %v), want %v (%v)", tc.in, got, len(rows) > 0 && &out[0] == &rows[0], tc.want, tc.same)
		}
		for i, s := range tc.in {
			if rows[i][0].Text != s {
				t.Errorf("%v: input row %d changed to %v", tc.in, i, rows[i])
			}
		}
	}
}
