package mysql

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// TestUnknownOutcomeNotReplayed is the PostgreSQL target's test of the
// same name: a retry after a batch whose commit outcome was left unknown
// goes ahead when that batch did not commit, and is refused with
// apply.ErrCommittedBefore when it did (applied again, order 24's
// renumbering would move the new order 24's line under order 28).
func TestUnknownOutcomeNotReplayed(t *testing.T) {
	dsn, db := testDB(t,
		"CREATE TABLE orders (id int PRIMARY KEY, note varchar(20))",
		"CREATE TABLE order_lines (order_id int, line_no int, PRIMARY KEY (order_id, line_no), CONSTRAINT l_fk FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE ON UPDATE CASCADE)",
		"INSERT INTO orders VALUES (24, 'old')",
		"INSERT INTO order_lines VALUES (24, 1)",
	)
	orders := table("orders", []int{0}, "id int", "note varchar(20)")
	lines := table("order_lines", []int{0, 1}, "order_id int", "line_no int")
	tables := []*sluice.Table{orders, lines}
	name := func(n string) sluice.TableName { return sluice.TableName{Name: n} }
	cs, err := apply.NewCascades([]sluice.ForeignKey{
		{Name: "l_fk", Table: name("order_lines"), Columns: []string{"order_id"}, RefTable: name("orders"), RefColumns: []string{"id"}, OnDelete: sluice.FKCascade, OnUpdate: sluice.FKCascade},
	}, tables)
	if err != nil {
		t.Fatal(err)
	}
	tg := openTarget(t, dsn, Pipelined, nil)
	ctx := context.Background()
	if err := tg.Preflight(ctx, tables); err != nil {
		t.Fatal(err)
	}
	changes := []sluice.Change{
		{Table: orders, Op: sluice.OpUpdate, Key: row("24"), Row: row("28", "old"), Pos: sluice.Position{Kind: "test", Token: "1"}},
		{Table: orders, Op: sluice.OpInsert, Row: row("24", "new"), Pos: sluice.Position{Kind: "test", Token: "2"}},
		{Table: lines, Op: sluice.OpInsert, Row: row("24", "2"), Pos: sluice.Position{Kind: "test", Token: "3"}},
	}
	batch := func(cs0 []sluice.Change) *apply.Batch {
		comp := apply.NewCompactor(nil)
		comp.Cut = cs.Fires
		comp.Add(cs0)
		b := comp.Batch()
		cs.Attach(b)
		return b
	}
	cp := func(seq uint64, b *apply.Batch) sluice.Checkpoint {
		return sluice.Checkpoint{Stream: "s", Seq: seq, Position: b.Last, Last: b.Last, Lanes: 1}
	}
	check := func(when string) {
		t.Helper()
		for table, w := range map[string]string{"orders": "[24|new 28|old]", "order_lines": "[24|2 28|1]"} {
			if got := fmt.Sprint(dump(t, db, table)); got != w {
				t.Errorf("%s: %s: got %s, want %s", when, table, got, w)
			}
		}
	}

	// Not committed: the retry, half the changes, goes ahead.
	whole, half, rest := batch(changes), batch(changes[:1]), batch(changes[1:])
	tg.KeepUnknown([]sluice.Checkpoint{cp(1, whole)})
	if err := tg.Apply(ctx, half, cp(1, half)); err != nil {
		t.Fatalf("the retry of a batch that did not commit: %v", err)
	}
	if tg.unknown != nil {
		t.Error("the outcome is known once the checkpoint row was read")
	}
	if err := tg.Apply(ctx, rest, cp(2, rest)); err != nil {
		t.Fatal(err)
	}
	check("applied once")

	// Committed (the last batch): its retry is refused, the rows stay.
	tg.KeepUnknown([]sluice.Checkpoint{cp(2, rest)})
	err = tg.Apply(ctx, whole, cp(2, whole))
	if !errors.Is(err, apply.ErrCommittedBefore) {
		t.Errorf("the retry of a batch that committed: err = %v, want apply.ErrCommittedBefore", err)
	}
	if retry, _ := apply.IsRetryable(err); retry {
		t.Errorf("ErrCommittedBefore is retryable: %v", err)
	}
	check("the retry refused")
}
