package apply

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"strconv"
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
	d := table("public", "d", []int{0}, "id", "v")
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
		{"same key in two tables", []sluice.Change{ins(a, "1", "x", "y"), ins(d, "1", "v"), del(a, "1"), upd(d, nil, "1", "v2")},
			"public.a: -[1]\npublic.d: +[1 v2]", 2},
		{"truncate drops only its table's keys", []sluice.Change{ins(a, "1", "x", "y"), ins(d, "1", "v"),
			{Table: a, Op: sluice.OpTruncate}, ins(a, "2", "x", "y"), upd(d, nil, "1", "v2")},
			"public.a: +[2 x y]\npublic.d: +[1 v2]", 3},
		{"single NULL key and empty key differ", []sluice.Change{ins(d, "NULL", "a"), ins(d, "", "b"), upd(d, nil, "", "b2")},
			"public.d: +[NULL a] +[ b2]", 2},
		{"single and composite keys with the same text", []sluice.Change{ins(c, "1", "1", "a"), ins(d, "1", "v"), del(c, "1", "1")},
			"public.c: -[1 1]\npublic.d: +[1 v]", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.changes {
				tc.changes[i].Pos = sluice.Position{Kind: "test", Token: fmt.Sprint(i)}
			}
			b := Compact(tc.changes, nil)
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
	b := Compact([]sluice.Change{ins(x, "1"), del(y, "1")}, nil)
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
	b := Compact([]sluice.Change{ins(v1, "1", "a"), ins(v1, "2", "b"), upd(v2, nil, "1", "a2", "n")}, nil)
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

// renderOrdered prints a batch's ordered changes as "op table key/row" items.
func renderOrdered(b *Batch) string {
	var parts []string
	for _, c := range b.Ordered {
		switch c.Op {
		case sluice.OpDelete:
			parts = append(parts, "-"+c.Table.Name.Name+fmt.Sprint(c.Key))
		case sluice.OpInsert:
			parts = append(parts, "+"+c.Table.Name.Name+fmt.Sprint(c.Row))
		case sluice.OpUpdate:
			key := c.Key
			if key == nil {
				key = c.Table.KeyOf(c.Row)
			}
			parts = append(parts, "~"+c.Table.Name.Name+fmt.Sprint(key)+fmt.Sprint(c.Row))
		case sluice.OpTruncate:
			parts = append(parts, "!"+c.Table.Name.Name)
		}
	}
	return strings.Join(parts, " ")
}

// TestCompactKeyChangesOverUnsentValues covers the chains that once wrote
// NULL over TOASTed values: a key changed twice (A→B→C), and back (A→B→A),
// with the big value unsent. Only the row on the target has it, so the
// rows are moved in place: first, when no other change of the batch
// touched their keys before, else with the table's changes in source
// order; a batch where an earlier image supplies the value stays
// compacted.
func TestCompactKeyChangesOverUnsentValues(t *testing.T) {
	docs := table("public", "docs", []int{0}, "id", "n", "body")
	other := table("public", "other", []int{0}, "id", "v")
	cases := []struct {
		name          string
		changes       []sluice.Change
		ordered, rest string
	}{
		// Moves in place, first: only moves touched their keys before.
		{"A→B→C", []sluice.Change{upd(docs, []string{"1"}, "1001", "2", "?"), upd(docs, []string{"1001"}, "2001", "2", "?")},
			"", "public.docs: ~[1][1001 2 (unchanged)] ~[1001][2001 2 (unchanged)]"},
		{"A→B→A", []sluice.Change{upd(docs, []string{"1"}, "2", "5", "?"), upd(docs, []string{"2"}, "1", "6", "?")},
			"", "public.docs: ~[1][2 5 (unchanged)] ~[2][1 6 (unchanged)]"},
		{"the issue's writer", []sluice.Change{
			upd(docs, []string{"7"}, "1007", "3", "?"),
			upd(docs, []string{"1007"}, "2007", "3", "?"),
			upd(docs, nil, "2", "9", "?"),
			ins(other, "1", "x"),
		}, "", "public.docs: ~[7][1007 3 (unchanged)] ~[1007][2007 3 (unchanged)] +[2 9 (unchanged)]\npublic.other: +[1 x]"},
		{"changes after a move: compacted after it", []sluice.Change{
			upd(docs, []string{"1"}, "5", "2", "?"), upd(docs, nil, "5", "3", "?"), ins(docs, "1", "4", "new"), del(docs, "9"),
		}, "", "public.docs: ~[1][5 2 (unchanged)] -[9] +[5 3 (unchanged)] +[1 4 new]"},
		// A move of a key the batch changed before: the table in order.
		{"move of a key changed before", []sluice.Change{upd(docs, nil, "1", "2", "?"), upd(docs, []string{"1"}, "5", "3", "?"), ins(other, "1", "x")},
			"~docs[1][1 2 (unchanged)] ~docs[1][5 3 (unchanged)]", "public.other: +[1 x]"},
		{"move into a key deleted before", []sluice.Change{del(docs, "5"), upd(docs, []string{"1"}, "5", "3", "?")},
			"-docs[5] ~docs[1][5 3 (unchanged)]", ""},
		{"truncate drops the moves before it", []sluice.Change{upd(docs, []string{"1"}, "5", "3", "?"), {Table: docs, Op: sluice.OpTruncate}, ins(docs, "2", "1", "b")},
			"", "public.docs: ! +[2 1 b]"},
		{"filled from the batch: compacted", []sluice.Change{ins(docs, "1", "1", "big"), upd(docs, []string{"1"}, "2", "1", "?"), upd(docs, []string{"2"}, "3", "2", "?")},
			"", "public.docs: -[1] -[2] +[3 2 big]"},
		{"same key unsent: compacted", []sluice.Change{upd(docs, nil, "1", "2", "?"), upd(docs, nil, "1", "3", "?")},
			"", "public.docs: +[1 3 (unchanged)]"},
		{"truncate drops what came before", []sluice.Change{ins(other, "1", "x"), {Table: other, Op: sluice.OpTruncate}, ins(other, "2", "y")},
			"", "public.other: ! +[2 y]"},
		{"progress markers are not changes", []sluice.Change{{Op: sluice.OpProgress}, ins(other, "1", "x"), {Op: sluice.OpProgress}},
			"", "public.other: +[1 x]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := Compact(tc.changes, nil)
			if got := renderOrdered(b); got != tc.ordered {
				t.Errorf("ordered:\n got %s\nwant %s", got, tc.ordered)
			}
			if got := renderTruncates(b); got != tc.rest {
				t.Errorf("compacted:\n got %s\nwant %s", got, tc.rest)
			}
		})
	}
}

func renderTruncates(b *Batch) string {
	var lines []string
	for _, tb := range b.Tables {
		var parts []string
		if tb.Truncate {
			parts = append(parts, "!")
		}
		for _, c := range tb.Moves {
			parts = append(parts, "~"+fmt.Sprint(c.Key)+fmt.Sprint(c.Row))
		}
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

// TestCompactInOrder checks that a table the caller names goes to Ordered
// whole, in source order and interleaved with the other ordered tables,
// while the rest stays compacted.
func TestCompactInOrder(t *testing.T) {
	u := table("public", "users", []int{0}, "id", "email")
	p := table("public", "parents", []int{0}, "id")
	o := table("public", "other", []int{0}, "id", "v")
	cs := []sluice.Change{
		upd(u, nil, "1", "tmp"), ins(p, "9"), upd(u, nil, "2", "a"), ins(o, "1", "x"), upd(u, nil, "1", "b"), upd(o, nil, "1", "y"),
	}
	b := Compact(cs, func(n sluice.TableName) bool { return n.Name != "other" })
	if got, want := renderOrdered(b), "~users[1][1 tmp] +parents[9] ~users[2][2 a] ~users[1][1 b]"; got != want {
		t.Errorf("ordered:\n got %s\nwant %s", got, want)
	}
	if got, want := render(b), "public.other: +[1 y]"; got != want {
		t.Errorf("compacted: got %s, want %s", got, want)
	}
	if b.Changes != 6 || b.Rows != 5 {
		t.Errorf("Changes, Rows = %d, %d; want 6, 5", b.Changes, b.Rows)
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

// TestCompactModel checks Compact against a model: random change sequences
// over a table with a value the source leaves unsent when it does not
// change (like PostgreSQL's TOAST), cut into batches at random points.
// Each batch, applied the way a target applies it (Tables, then Ordered)
// to the source's state at the batch's start, must leave exactly the
// source's state at its end. A loss shows as a value the target never
// got.
func TestCompactModel(t *testing.T) {
	docs := table("public", "docs", []int{0}, "id", "n", "body")
	for seed := uint64(1); seed <= 2000; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		src := map[string][2]string{} // id → n, body
		var changes []sluice.Change
		var states []map[string][2]string // source state after each change
		for len(changes) < 40 {
			id := strconv.Itoa(r.IntN(8))
			cur, exists := src[id]
			switch {
			case !exists && r.IntN(3) > 0:
				v := [2]string{strconv.Itoa(r.IntN(100)), "body" + strconv.Itoa(r.IntN(1000))}
				src[id] = v
				changes = append(changes, ins(docs, id, v[0], v[1]))
			case exists && r.IntN(10) == 0:
				delete(src, id)
				changes = append(changes, del(docs, id))
			case exists:
				newID := id
				if r.IntN(2) == 0 {
					newID = strconv.Itoa(r.IntN(8))
					if _, taken := src[newID]; taken && newID != id {
						continue
					}
				}
				n := strconv.Itoa(r.IntN(100))
				body, sent := cur[1], "?"
				if r.IntN(4) == 0 {
					body = "body" + strconv.Itoa(r.IntN(1000))
					sent = body
				}
				delete(src, id)
				src[newID] = [2]string{n, body}
				changes = append(changes, upd(docs, []string{id}, newID, n, sent))
			case r.IntN(15) == 0:
				clear(src)
				changes = append(changes, sluice.Change{Table: docs, Op: sluice.OpTruncate})
			default:
				continue
			}
			states = append(states, maps.Clone(src))
		}
		start := map[string][2]string{}
		for from := 0; from < len(changes); {
			to := min(len(changes), from+1+r.IntN(12))
			var inOrder func(sluice.TableName) bool
			if r.IntN(4) == 0 {
				inOrder = func(sluice.TableName) bool { return true }
			}
			// Now and then the batch is cut after some changes (as after
			// one that fires a foreign-key action): each part is
			// compacted apart, and applied in turn.
			var cut func(*sluice.Change) bool
			if r.IntN(3) == 0 {
				cuts := map[*sluice.Change]bool{}
				for i := from; i < to; i++ {
					if r.IntN(4) == 0 {
						cuts[&changes[i]] = true
					}
				}
				cut = func(c *sluice.Change) bool { return cuts[c] }
			}
			whole := NewCompactor(inOrder)
			whole.Cut = cut
			whole.Add(changes[from:to])
			b := whole.Batch()
			if r.IntN(2) == 0 {
				// The same batch compacted a run at a time, as the stream
				// compacts the batch after the one in flight, must be the
				// same batch.
				c := NewCompactor(inOrder)
				c.Cut = cut
				for at := from; at < to; {
					end := min(to, at+r.IntN(4))
					c.Add(changes[at:end])
					at = end
				}
				if c.Len() != to-from {
					t.Fatalf("seed %d, batch [%d,%d): Compactor.Len %d", seed, from, to, c.Len())
				}
				inRuns := c.Batch()
				if !reflect.DeepEqual(inRuns, b) {
					t.Fatalf("seed %d, batch [%d,%d): compacted in runs:\n%+v\nat once:\n%+v", seed, from, to, inRuns, b)
				}
				b = inRuns
			}
			got, err := applyModel(maps.Clone(start), b)
			if err != nil {
				t.Fatalf("seed %d, batch [%d,%d): %v\nchanges: %v", seed, from, to, err, changes[from:to])
			}
			if want := states[to-1]; !maps.Equal(got, want) {
				t.Fatalf("seed %d, batch [%d,%d): target %v, source %v\nchanges: %v", seed, from, to, got, want, changes[from:to])
			}
			start, from = states[to-1], to
		}
	}
}

// applyModel applies a batch to an in-memory table the way a target does:
// an image with unsent values updates its row in place, keeping them, and
// fails when the row is missing (it cannot be written), as does a key
// change of a missing row.
func applyModel(rows map[string][2]string, b *Batch) (map[string][2]string, error) {
	for _, part := range b.Parts() {
		var err error
		if rows, err = applyPartModel(rows, part); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

func applyPartModel(rows map[string][2]string, b *Batch) (map[string][2]string, error) {
	set := func(dst *[2]string, img sluice.Row) {
		if !img[1].Unchanged {
			dst[0] = img[1].Text
		}
		if !img[2].Unchanged {
			dst[1] = img[2].Text
		}
	}
	move := func(c sluice.Change) error {
		v, ok := rows[c.Key[0].Text]
		if !ok {
			return fmt.Errorf("update of missing row %v", c.Key)
		}
		if _, taken := rows[c.Row[0].Text]; taken && c.Row[0].Text != c.Key[0].Text {
			return fmt.Errorf("key change onto an existing row %v", c.Row)
		}
		delete(rows, c.Key[0].Text)
		set(&v, c.Row)
		rows[c.Row[0].Text] = v
		return nil
	}
	for _, tb := range b.Tables {
		if tb.Truncate {
			clear(rows)
		}
		for _, c := range tb.Moves {
			if err := move(c); err != nil {
				return nil, err
			}
		}
		for _, k := range tb.Deletes {
			delete(rows, k[0].Text)
		}
		for _, img := range tb.Upserts {
			v, ok := rows[img[0].Text]
			if !ok && (img[1].Unchanged || img[2].Unchanged) {
				return nil, fmt.Errorf("update of missing row %v with unsent values", img)
			}
			set(&v, img)
			rows[img[0].Text] = v
		}
	}
	for _, c := range b.Ordered {
		switch c.Op {
		case sluice.OpTruncate:
			clear(rows)
		case sluice.OpDelete:
			delete(rows, c.Key[0].Text)
		case sluice.OpInsert:
			v := [2]string{"NULL", "NULL"}
			set(&v, c.Row)
			rows[c.Row[0].Text] = v
		case sluice.OpUpdate:
			if err := move(c); err != nil {
				return nil, err
			}
		}
	}
	return rows, nil
}
