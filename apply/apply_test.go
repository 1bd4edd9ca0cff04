package apply

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

func table(schema, name string, key []int, cols ...string) *sluice.Table {
	t := &sluice.Table{Name: sluice.TableName{Schema: schema, Name: name}, Key: key}
	for _, c := range cols {
		t.Columns = append(t.Columns, sluice.Column{Name: c, Type: "text"})
	}
	return t
}

func row(vals ...string) sluice.Row {
	r := make(sluice.Row, len(vals))
	for i, v := range vals {
		switch v {
		case "NULL":
			r[i] = sluice.Null
		case "?":
			r[i] = sluice.Value{Unchanged: true}
		default:
			r[i] = sluice.Text(v)
		}
	}
	return r
}

func ins(t *sluice.Table, v ...string) sluice.Change {
	return sluice.Change{Table: t, Op: sluice.OpInsert, Row: row(v...)}
}

func upd(t *sluice.Table, oldKey []string, v ...string) sluice.Change {
	c := sluice.Change{Table: t, Op: sluice.OpUpdate, Row: row(v...)}
	if oldKey != nil {
		c.Key = row(oldKey...)
	}
	return c
}

func del(t *sluice.Table, k ...string) sluice.Change {
	return sluice.Change{Table: t, Op: sluice.OpDelete, Key: row(k...)}
}

// render prints a batch as "table: -key ... +row ..." lines, for comparison.
func render(b *Batch) string {
	var lines []string
	for _, tb := range b.Tables {
		var parts []string
		for _, k := range tb.Deletes {
			parts = append(parts, "-"+fmt.Sprint(k))
		}
		for _, r := range tb.Upserts {
			parts = append(parts, "+"+fmt.Sprint(r))
		}
		lines = append(lines, tb.Table.Name.String()+": "+strings.Join(parts, " "))
	}
	return strings.Join(lines, "\n")
}

func TestCompact(t *testing.T) {
	a := table("public", "a", []int{0}, "id", "v", "w")
	c := table("public", "c", []int{0, 1}, "k1", "k2", "v")
	cases := []struct {
		name    string
		changes []sluice.Change
		want    string
		rows    int
	}{
		{"empty", nil, "", 0},
		{"insert", []sluice.Change{ins(a, "1", "x", "y")}, "public.a: +[1 x y]", 1},
		{"last image wins", []sluice.Change{ins(a, "1", "x", "y"), upd(a, nil, "1", "x2", "y2"), upd(a, nil, "1", "x3", "y3")},
			"public.a: +[1 x3 y3]", 1},
		// The insert may have been committed by an earlier batch of a
		// replay: the key must still be deleted.
		{"insert then delete deletes", []sluice.Change{ins(a, "1", "x", "y"), del(a, "1")}, "public.a: -[1]", 1},
		{"delete then insert upserts", []sluice.Change{del(a, "1"), ins(a, "1", "x", "y")}, "public.a: +[1 x y]", 1},
		{"update then delete", []sluice.Change{upd(a, nil, "1", "x", "y"), del(a, "1")}, "public.a: -[1]", 1},
		{"primary key change", []sluice.Change{upd(a, []string{"1"}, "2", "x", "y")}, "public.a: -[1] +[2 x y]", 2},
		{"primary key change and back", []sluice.Change{upd(a, []string{"1"}, "2", "x", "y"), upd(a, []string{"2"}, "1", "x", "z")},
			"public.a: -[2] +[1 x z]", 2},
		{"unchanged filled from earlier image", []sluice.Change{ins(a, "1", "x", "big"), upd(a, nil, "1", "x2", "?")},
			"public.a: +[1 x2 big]", 1},
		{"unchanged kept without earlier image", []sluice.Change{upd(a, nil, "1", "x2", "?")},
			"public.a: +[1 x2 (unchanged)]", 1},
		{"unchanged filled across key change", []sluice.Change{ins(a, "1", "x", "big"), upd(a, []string{"1"}, "2", "x", "?")},
			"public.a: -[1] +[2 x big]", 2},
		{"composite keys", []sluice.Change{ins(c, "1", "1", "a"), ins(c, "1", "2", "b"), del(c, "1", "1"), upd(c, nil, "1", "2", "b2")},
			"public.c: -[1 1] +[1 2 b2]", 2},
		{"tables keep first-seen order", []sluice.Change{ins(c, "1", "1", "a"), ins(a, "1", "x", "y"), del(c, "2", "2")},
			"public.c: -[2 2] +[1 1 a]\npublic.a: +[1 x y]", 3},
		{"NULL and empty keys differ", []sluice.Change{ins(c, "", "NULL", "a"), ins(c, "NULL", "", "b")},
			"public.c: +[ NULL a] +[NULL  b]", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.changes {
				tc.changes[i].Pos = sluice.Position{Kind: "test", Token: fmt.Sprint(i)}
			}
			b := Compact(tc.changes)
			if got := render(b); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if b.Rows != tc.rows || b.Changes != len(tc.changes) {
				t.Errorf("Rows, Changes = %d, %d; want %d, %d", b.Rows, b.Changes, tc.rows, len(tc.changes))
			}
			if len(tc.changes) > 0 && b.Last != tc.changes[len(tc.changes)-1].Pos {
				t.Errorf("Last = %v", b.Last)
			}
		})
	}
}

// TestCompactTableNames checks that keys of tables whose names print alike
// do not merge.
func TestCompactTableNames(t *testing.T) {
	x := table("a", "b.c", []int{0}, "id")
	y := table("a.b", "c", []int{0}, "id")
	b := Compact([]sluice.Change{ins(x, "1"), del(y, "1")})
	if b.Rows != 2 || len(b.Tables) != 2 {
		t.Fatalf("got %s", render(b))
	}
}

// TestCompactRedefinedTable checks that when a reader hands out a new *Table
// for a table mid-batch (its definition changed), each key's final image is
// grouped with the Table it is aligned with.
func TestCompactRedefinedTable(t *testing.T) {
	v1 := table("public", "t", []int{0}, "id", "v")
	v2 := table("public", "t", []int{0}, "id", "v", "added")
	b := Compact([]sluice.Change{ins(v1, "1", "a"), ins(v1, "2", "b"), upd(v2, nil, "1", "a2", "n")})
	for _, tb := range b.Tables {
		for _, r := range tb.Upserts {
			if len(r) != len(tb.Table.Columns) {
				t.Errorf("row %v grouped with a table of %d columns", r, len(tb.Table.Columns))
			}
		}
	}
	if b.Rows != 2 {
		t.Errorf("Rows = %d, want 2", b.Rows)
	}
}

func TestCompactMovesKeyChangeWithUnchangedValues(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "docs"}, Columns: []sluice.Column{{Name: "id"}, {Name: "n"}, {Name: "body"}}, Key: []int{0}}
	unchanged := sluice.Value{Unchanged: true}
	cs := []sluice.Change{
		// The key changes and the big body was not sent: only the target
		// has it, so the row must be moved in place.
		{Table: tbl, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text("1")}, Row: sluice.Row{sluice.Text("101"), sluice.Text("5"), unchanged}},
		{Table: tbl, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text("101")}, Row: sluice.Row{sluice.Text("101"), sluice.Text("6"), unchanged}},
		// Here an earlier image in the batch has the body: no move needed.
		{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{sluice.Text("2"), sluice.Text("1"), sluice.Text("big")}},
		{Table: tbl, Op: sluice.OpUpdate, Key: sluice.Row{sluice.Text("2")}, Row: sluice.Row{sluice.Text("202"), sluice.Text("1"), unchanged}},
	}
	b := Compact(cs)
	if len(b.Tables) != 1 {
		t.Fatalf("tables = %d", len(b.Tables))
	}
	tb := b.Tables[0]
	if len(tb.Moves) != 1 || tb.Moves[0].From[0].Text != "1" || tb.Moves[0].To[0].Text != "101" {
		t.Fatalf("moves = %+v, want one move 1 → 101", tb.Moves)
	}
	var got101, got202 sluice.Row
	for _, r := range tb.Upserts {
		switch r[0].Text {
		case "101":
			got101 = r
		case "202":
			got202 = r
		}
	}
	if got101 == nil || got101[1].Text != "6" || !got101[2].Unchanged {
		t.Fatalf("upsert of 101 = %v, want n=6 with body unchanged", got101)
	}
	if got202 == nil || got202[2].Text != "big" {
		t.Fatalf("upsert of 202 = %v, want the body filled from the insert", got202)
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"": Pipelined, "pipelined": Pipelined, "per-row": PerRow, " Per-Row ": PerRow} {
		got, err := ParseMode(s)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", s, got, err, want)
		}
		if m, _ := ParseMode(want.String()); m != want {
			t.Errorf("ParseMode(%v.String()) = %v", want, m)
		}
	}
	if _, err := ParseMode("batched"); err == nil || !strings.Contains(err.Error(), "pipelined or per-row") {
		t.Errorf("ParseMode(batched) error = %v", err)
	}
}
