package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

func allInOrder(sluice.TableName) bool { return true }

// TestUniqueSwapNeedsSourceOrder: two rows swap a unique value through a
// temporary one, as applications do. Compacted to final images the batch
// breaks the unique key (the target reports it as a ConstraintError naming
// the table, so the stream can retry); in source order it applies.
func TestUniqueSwapNeedsSourceOrder(t *testing.T) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn := testDB(t,
			"CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL UNIQUE)",
			"INSERT INTO users VALUES (1, 'a'), (2, 'b')")
		users := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "users"}, Key: []int{0},
			Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "email", Type: "text"}}}
		tg := openTarget(t, url, mode)
		ctx := context.Background()
		swap := []sluice.Change{upd(users, "1", "tmp"), upd(users, "2", "a"), upd(users, "1", "b")}
		err := tg.Apply(ctx, apply.Compact(swap, nil), sluice.Checkpoint{Stream: "s", Seq: 1})
		var ce *apply.ConstraintError
		if !errors.As(err, &ce) || len(ce.Tables) == 0 || ce.Tables[0] != users.Name || ce.Constraint != "users_email_key" {
			t.Fatalf("compacted swap: err = %v (%+v), want a ConstraintError on public.users, users_email_key", err, ce)
		}
		if !strings.Contains(err.Error(), "already exists") {
			t.Errorf("error %q does not say which key value collided", err)
		}
		if got := dump(t, conn, "users"); fmt.Sprint(got) != "[(1,a) (2,b)]" {
			t.Fatalf("failed batch left %v", got)
		}
		if err := tg.Apply(ctx, apply.Compact(swap, allInOrder), sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if got := dump(t, conn, "users"); fmt.Sprint(got) != "[(1,b) (2,a)]" {
			t.Fatalf("got %v", got)
		}
	})
}

// TestKeyChainKeepsUnsentValues: a key changed twice (and another row's
// back and forth) with the big value unsent, as PostgreSQL sends TOASTed
// columns: the rows move in place and keep their bodies, moved first with
// the table's other changes compacted after them, or with all of them in
// source order.
func TestKeyChainKeepsUnsentValues(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("in order %v", inOrder), func(t *testing.T) { testKeyChainKeepsUnsentValues(t, inOrder) })
	}
}

func testKeyChainKeepsUnsentValues(t *testing.T, inOrder bool) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn := testDB(t,
			"CREATE TABLE docs (id int PRIMARY KEY, n int, body text)",
			"INSERT INTO docs VALUES (1, 0, 'body one'), (2, 0, 'body two'), (3, 0, 'body three')")
		docs := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "docs"}, Key: []int{0},
			Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "n", Type: "integer"}, {Name: "body", Type: "text"}}}
		tg := openTarget(t, url, mode)
		ctx := context.Background()
		unsent := sluice.Value{Unchanged: true}
		keyChange := func(from, to, n string) sluice.Change {
			return sluice.Change{Table: docs, Op: sluice.OpUpdate, Key: row(from), Row: sluice.Row{sluice.Text(to), sluice.Text(n), unsent}}
		}
		var order func(sluice.TableName) bool
		if inOrder {
			order = allInOrder
		}
		b := apply.Compact([]sluice.Change{
			keyChange("1", "1001", "1"), keyChange("1001", "2001", "2"), // A→B→C
			keyChange("2", "4", "1"), keyChange("4", "2", "2"), // A→B→A
			{Table: docs, Op: sluice.OpUpdate, Key: row("3"), Row: sluice.Row{sluice.Text("3"), sluice.Text("9"), unsent}},
			{Table: docs, Op: sluice.OpUpdate, Key: row("2001"), Row: sluice.Row{sluice.Text("2001"), sluice.Text("7"), unsent}},
		}, order)
		if moved := len(b.Ordered) == 0 && len(b.Tables) == 1 && len(b.Tables[0].Moves) == 4; moved == inOrder {
			t.Fatalf("batch = %+v, want the 4 moves first (or, in order, the table's 6 changes in order)", b)
		}
		if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		want := `[(2,2,"body two") (2001,7,"body one") (3,9,"body three")]` // text order
		if got := dump(t, conn, "docs"); fmt.Sprint(got) != want {
			t.Fatalf("got %v, want %v", got, want)
		}
		// A key change of a row the target does not have is a target that
		// differs from the source: loud, never a silent no-op.
		err := tg.Apply(ctx, apply.Compact([]sluice.Change{keyChange("77", "78", "1")}, nil), sluice.Checkpoint{Stream: "s", Seq: 2})
		if err == nil || !strings.Contains(err.Error(), "target differs from the source") || !strings.Contains(err.Error(), "(id=77)") {
			t.Fatalf("key change of a missing row: err = %v", err)
		}
	})
}

// TestForeignKeyOrder: without session_replication_role = replica, a
// compacted batch that brings a child before its parent breaks the
// foreign key; the error names both tables, and source order applies.
// With it (the default for a user who may set it) the compacted batch
// applies as PostgreSQL's own logical replication would.
func TestForeignKeyOrder(t *testing.T) {
	url, conn := testDB(t,
		"CREATE TABLE parent (id int PRIMARY KEY)",
		"CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES parent)",
		"INSERT INTO parent VALUES (1)", "INSERT INTO child VALUES (5, 1)")
	parent := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "parent"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "integer"}}}
	child := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "child"}, Key: []int{0},
		Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "parent_id", Type: "integer"}}}
	ctx := context.Background()
	// The child's table is seen first (compaction keeps first-seen table
	// order), then a parent and a child of it are inserted.
	cs := []sluice.Change{upd(child, "5", "1"), ins(parent, "99"), ins(child, "10", "99"), del(child, "5")}

	strict, err := Open(ctx, url, Config{NoReplicaRole: true})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close(ctx)
	if err := strict.Preflight(ctx, []*sluice.Table{parent, child}); err != nil {
		t.Fatal(err)
	}
	err = strict.Apply(ctx, apply.Compact(cs, nil), sluice.Checkpoint{})
	var ce *apply.ConstraintError
	if !errors.As(err, &ce) || !containsTable(ce.Tables, child.Name) {
		t.Fatalf("compacted child before parent: err = %v, want a ConstraintError naming public.child", err)
	}
	if err := strict.Apply(ctx, apply.Compact(cs, allInOrder), sluice.Checkpoint{}); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, conn, "child"); fmt.Sprint(got) != "[(10,99)]" {
		t.Fatalf("child = %v", got)
	}

	// The harness runs as a superuser, who may set the role.
	relaxed := openTarget(t, url, Pipelined)
	if !relaxed.ReplicaRole() {
		t.Fatal("a superuser's batches do not run with session_replication_role = replica")
	}
	cs2 := []sluice.Change{upd(child, "10", "99"), ins(parent, "98"), ins(child, "12", "98")}
	if err := relaxed.Apply(ctx, apply.Compact(cs2, nil), sluice.Checkpoint{}); err != nil {
		t.Fatal(err)
	}
}

func containsTable(ts []sluice.TableName, n sluice.TableName) bool {
	for _, t := range ts {
		if t == n {
			return true
		}
	}
	return false
}

// TestTruncate applies a source TRUNCATE in order: compacted (the table's
// later rows survive it) and in source order.
func TestTruncate(t *testing.T) {
	url, conn := testDB(t, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
	tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "t"}, Key: []int{0}, Columns: []sluice.Column{{Name: "id", Type: "integer"}}}
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	trunc := sluice.Change{Table: tbl, Op: sluice.OpTruncate}
	if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(tbl, "3"), trunc, ins(tbl, "4")}, nil), sluice.Checkpoint{}); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, conn, "t"); fmt.Sprint(got) != "[(4)]" {
		t.Fatalf("compacted: %v", got)
	}
	if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(tbl, "5"), trunc, ins(tbl, "6")}, allInOrder), sluice.Checkpoint{}); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, conn, "t"); fmt.Sprint(got) != "[(6)]" {
		t.Fatalf("ordered: %v", got)
	}
}

// TestLaneCheckpoints: each lane keeps a row of its own; the stream resumes
// from the highest watermark, and each row keeps its lane's last position
// and routing.
func TestLaneCheckpoints(t *testing.T) {
	url, _ := testDB(t)
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	pos := func(s string) sluice.Position { return sluice.Position{Kind: "test", Token: s} }
	for _, cp := range []sluice.Checkpoint{
		{Stream: "s", Lane: 0, Lanes: 3, Seq: 7, Applied: 100, Position: pos("100"), Last: pos("120"), Routing: "r1"},
		{Stream: "s", Lane: 2, Lanes: 3, Seq: 8, Applied: 90, Position: pos("90"), Last: pos("130"), Routing: "r1"},
		{Stream: "s", Lane: 1, Lanes: 3, Seq: 6, Applied: 95, Position: pos("95"), Routing: "r1"},
		{Stream: "other", Lane: 0, Lanes: 1, Seq: 1, Applied: 5, Position: pos("5")},
	} {
		if err := tg.Apply(ctx, &apply.Batch{}, cp); err != nil {
			t.Fatal(err)
		}
	}
	cps, err := tg.ReadCheckpoints(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 3 || cps[2].Last != pos("130") || cps[1].Last != pos("95") || cps[0].Lanes != 3 || cps[0].Routing != "r1" {
		t.Fatalf("lanes = %+v", cps)
	}
	if cp, ok := apply.Resume(cps); !ok || cp.Lane != 0 || cp.Applied != 100 {
		t.Fatalf("resume = %+v", cp)
	}
}

// TestCheckpointTableUpgrade: a checkpoint table made by a sluice before
// lanes kept rows of their own is brought to the new shape at Open; its
// row becomes lane 0's, marked as written before lanes (Lanes 0).
func TestCheckpointTableUpgrade(t *testing.T) {
	url, conn := testDB(t,
		"CREATE SCHEMA sluice",
		"CREATE TABLE sluice.checkpoint (stream text PRIMARY KEY, seq bigint NOT NULL, position text NOT NULL, applied bigint NOT NULL, updated_at timestamptz NOT NULL)",
		"INSERT INTO sluice.checkpoint VALUES ('s', 4, 'pglogical:0/16B3748/0', 40, now())")
	_ = conn
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	cps, err := tg.ReadCheckpoints(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 1 || cps[0].Lane != 0 || cps[0].Lanes != 0 || cps[0].Seq != 4 || cps[0].Position.Token != "0/16B3748/0" {
		t.Fatalf("after upgrade: %+v", cps)
	}
	// And it takes lane rows now; a second Open changes nothing.
	if err := tg.Apply(ctx, &apply.Batch{}, sluice.Checkpoint{Stream: "s", Lane: 1, Lanes: 2, Seq: 5, Applied: 41}); err != nil {
		t.Fatal(err)
	}
	tg2 := openTarget(t, url, Pipelined)
	if cps, err := tg2.ReadCheckpoints(ctx, "s"); err != nil || len(cps) != 2 {
		t.Fatalf("after reopen: %+v, %v", cps, err)
	}
}
