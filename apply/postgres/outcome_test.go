package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// TestUnknownOutcomeNotReplayed: a batch whose connection broke after it
// was sent, with no way to ask the target then (the server restarting),
// has an unknown commit outcome; the stream retries its changes. A
// foreign-key action applied again onto the rows the batch left is not
// idempotent: order 24 renumbered to 28 and a new order 24 with a line,
// applied again, moves the new line under order 28 (a row the source
// never had). So before the retry the target asks its checkpoint row:
// when the batch committed after all, the retry is refused with
// apply.ErrCommittedBefore (the stream resumes from the target's
// checkpoint), and when it did not, the retry goes ahead.
func TestUnknownOutcomeNotReplayed(t *testing.T) {
	url, conn := testDB(t,
		"CREATE TABLE orders (id int PRIMARY KEY, note text)",
		"CREATE TABLE order_lines (order_id int REFERENCES orders ON DELETE CASCADE ON UPDATE CASCADE, line_no int, PRIMARY KEY (order_id, line_no))",
		"INSERT INTO orders VALUES (24, 'old')",
		"INSERT INTO order_lines VALUES (24, 1)",
	)
	orders := pgTable("orders", "id integer*", "note text")
	lines := pgTable("order_lines", "order_id integer*", "line_no integer*")
	tables := []*sluice.Table{orders, lines}
	name := func(n string) sluice.TableName { return sluice.TableName{Schema: "public", Name: n} }
	cs, err := apply.NewCascades([]sluice.ForeignKey{
		{Name: "l_fk", Table: name("order_lines"), Columns: []string{"order_id"}, RefTable: name("orders"), RefColumns: []string{"id"}, OnDelete: sluice.FKCascade, OnUpdate: sluice.FKCascade},
	}, tables)
	if err != nil {
		t.Fatal(err)
	}
	tg := openTarget(t, url, Pipelined)
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
	cp := func(b *apply.Batch) sluice.Checkpoint {
		return sluice.Checkpoint{Stream: "s", Seq: 1, Position: b.Last, Last: b.Last, Lanes: 1}
	}
	want := map[string]string{"orders": "[(24,new) (28,old)]", "order_lines": "[(24,2) (28,1)]"}
	check := func(when string) {
		t.Helper()
		for table, w := range want {
			if got := fmt.Sprint(dump(t, conn, table)); got != w {
				t.Errorf("%s: %s: got %s, want %s", when, table, got, w)
			}
		}
	}

	// Not committed: the retry, half the changes, goes ahead.
	whole := batch(changes)
	tg.KeepUnknown([]sluice.Checkpoint{{Stream: "s", Seq: 1, Position: whole.Last, Last: whole.Last, Lanes: 1}})
	half := batch(changes[:1])
	if err := tg.Apply(ctx, half, cp(half)); err != nil {
		t.Fatalf("the retry of a batch that did not commit: %v", err)
	}
	if tg.unknown != nil {
		t.Error("the outcome is known once the checkpoint row was read")
	}
	rest := batch(changes[1:])
	if err := tg.Apply(ctx, rest, sluice.Checkpoint{Stream: "s", Seq: 2, Position: rest.Last, Last: rest.Last, Lanes: 1}); err != nil {
		t.Fatal(err)
	}
	check("applied once")

	// Committed (the last batch): its retry is refused, the rows stay.
	tg.KeepUnknown([]sluice.Checkpoint{{Stream: "s", Seq: 2, Position: rest.Last, Last: rest.Last, Lanes: 1}})
	err = tg.Apply(ctx, whole, sluice.Checkpoint{Stream: "s", Seq: 2, Position: whole.Last, Last: whole.Last, Lanes: 1})
	if !errors.Is(err, apply.ErrCommittedBefore) {
		t.Errorf("the retry of a batch that committed: err = %v, want apply.ErrCommittedBefore", err)
	}
	if retry, _ := apply.IsRetryable(err); retry {
		t.Errorf("ErrCommittedBefore is retryable: %v", err)
	}
	check("the retry refused")
}
