package mysql

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

// TestUniqueSwapNotNull: two rows swap a NOT NULL unique value through a
// temporary one. Their unique columns cannot be released by setting them
// to NULL, so the compacted batch fails on the guard with a
// ConstraintError naming the table (the stream then retries it in source
// order) and changes nothing; in source order it applies.
func TestUniqueSwapNotNull(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t,
			"CREATE TABLE users (id int PRIMARY KEY, email varchar(50) NOT NULL, UNIQUE KEY email (email))",
			"INSERT INTO users VALUES (1, 'a'), (2, 'b')")
		users := table("users", []int{0}, "id int", "email varchar(50)")
		users.Columns[1].Nullable = false
		users.Columns[1].Collation = "utf8mb4_unicode_ci" // the target's, as from a MySQL source
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		if err := tg.Preflight(ctx, []*sluice.Table{users}); err != nil {
			t.Fatal(err)
		}
		swap := []sluice.Change{upd(users, "1", "tmp"), upd(users, "2", "a"), upd(users, "1", "b")}
		err := tg.Apply(ctx, apply.Compact(swap, nil), sluice.Checkpoint{Stream: "s", Seq: 1})
		var ce *apply.ConstraintError
		if !errors.As(err, &ce) || len(ce.Tables) == 0 || ce.Tables[0] != users.Name {
			t.Fatalf("compacted swap: err = %v, want a ConstraintError on users", err)
		}
		if got := dump(t, db, "users"); fmt.Sprint(got) != "[1|a 2|b]" {
			t.Fatalf("failed batch left %v", got)
		}
		if err := tg.Apply(ctx, apply.Compact(swap, allInOrder), sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if got := dump(t, db, "users"); fmt.Sprint(got) != "[1|b 2|a]" {
			t.Fatalf("got %v", got)
		}
	})
}

// TestKeyChainKeepsUnsentValues: a PostgreSQL source's key changes over
// an unsent TOASTed value, into MySQL: moved in place, first with the
// table's other changes compacted after them, or with all of them in
// source order.
func TestKeyChainKeepsUnsentValues(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("in order %v", inOrder), func(t *testing.T) { testKeyChainKeepsUnsentValues(t, inOrder) })
	}
}

func testKeyChainKeepsUnsentValues(t *testing.T, inOrder bool) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t,
			"CREATE TABLE docs (id int PRIMARY KEY, n int, body mediumtext)",
			"INSERT INTO docs VALUES (1, 0, 'body one'), (2, 0, 'body two')")
		docs := table("docs", []int{0}, "id int", "n int", "body mediumtext")
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		unsent := sluice.Value{Unchanged: true}
		keyChange := func(from, to, n string) sluice.Change {
			return sluice.Change{Table: docs, Op: sluice.OpUpdate, Key: row(from), Row: sluice.Row{sluice.Text(to), sluice.Text(n), unsent}}
		}
		var order func(sluice.TableName) bool
		if inOrder {
			order = func(sluice.TableName) bool { return true }
		}
		b := apply.Compact([]sluice.Change{
			keyChange("1", "1001", "1"), keyChange("1001", "2001", "2"),
			keyChange("2", "4", "1"), keyChange("4", "2", "2"),
			{Table: docs, Op: sluice.OpUpdate, Key: row("2001"), Row: sluice.Row{sluice.Text("2001"), sluice.Text("7"), unsent}},
		}, order)
		if moved := len(b.Ordered) == 0 && len(b.Tables) == 1 && len(b.Tables[0].Moves) == 4; moved == inOrder {
			t.Fatalf("batch = %+v, want the 4 moves first (or, in order, the table's 5 changes in order)", b)
		}
		if err := tg.Apply(ctx, b, sluice.Checkpoint{Stream: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(dump(t, db, "docs")), "[2001|7|body one 2|2|body two]"; got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
		err := tg.Apply(ctx, apply.Compact([]sluice.Change{keyChange("77", "78", "1")}, nil), sluice.Checkpoint{Stream: "s", Seq: 2})
		if err == nil || !strings.Contains(err.Error(), "target differs from the source") || !strings.Contains(err.Error(), "(id=77)") {
			t.Fatalf("key change of a missing row: err = %v", err)
		}
	})
}

// TestForeignKeysOff: the target's foreign keys neither check nor act on
// sluice's writes (every session runs with foreign_key_checks = 0): a
// compacted batch that brings a child before its parent applies as it is,
// and a parent's key change compacted to a delete and an insert leaves
// the children its ON DELETE CASCADE and SET NULL would have taken (the
// source's log carries what happened to them). Before, the checks failed
// the first batch, and the second deleted the children in silence (a
// PostgreSQL trigger source into MariaDB, issue 28).
func TestForeignKeysOff(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t,
			"CREATE TABLE parent (id int PRIMARY KEY) ENGINE=InnoDB",
			"CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL, FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE) ENGINE=InnoDB",
			"CREATE TABLE note (id int PRIMARY KEY, parent_id int, FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE SET NULL) ENGINE=InnoDB",
			"INSERT INTO parent VALUES (1), (2)", "INSERT INTO child VALUES (5, 1), (6, 2)", "INSERT INTO note VALUES (7, 2)")
		parent := table("parent", []int{0}, "id int")
		child := table("child", []int{0}, "id int", "parent_id int")
		child.Columns[1].Nullable = false
		note := table("note", []int{0}, "id int", "parent_id int")
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		if err := tg.Preflight(ctx, []*sluice.Table{parent, child, note}); err != nil {
			t.Fatal(err)
		}
		cs := []sluice.Change{upd(child, "5", "1"), ins(parent, "99"), ins(child, "10", "99"), del(child, "5")}
		if err := tg.Apply(ctx, apply.Compact(cs, nil), sluice.Checkpoint{}); err != nil {
			t.Fatalf("compacted child before parent: %v", err)
		}
		// Parent 2 moves to 20 (its child and note are the source's
		// business: a cascade there would be in the log).
		move := sluice.Change{Table: parent, Op: sluice.OpUpdate, Key: row("2"), Row: row("20")}
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{move}, nil), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ table, want string }{{"parent", "[1 20 99]"}, {"child", "[10|99 6|2]"}, {"note", "[7|2]"}} {
			if got := fmt.Sprint(dump(t, db, c.table)); got != c.want {
				t.Errorf("%s = %s, want %s", c.table, got, c.want)
			}
		}
	})
}

// TestTruncate applies a source TRUNCATE inside the batch's transaction
// (as a DELETE: TRUNCATE would commit it): compacted and in source order.
func TestTruncate(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
		tbl := table("t", []int{0}, "id int")
		tg := openTarget(t, dsn, v.mode, v.multi)
		ctx := context.Background()
		trunc := sluice.Change{Table: tbl, Op: sluice.OpTruncate}
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(tbl, "3"), trunc, ins(tbl, "4")}, nil), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		if got := dump(t, db, "t"); fmt.Sprint(got) != "[4]" {
			t.Fatalf("compacted: %v", got)
		}
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(tbl, "5"), trunc, ins(tbl, "6")}, allInOrder), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		if got := dump(t, db, "t"); fmt.Sprint(got) != "[6]" {
			t.Fatalf("ordered: %v", got)
		}
	})
}

// TestLaneCheckpoints: each lane keeps a row of its own, and a checkpoint
// table from before lanes is upgraded at Open, its row becoming lane 0's.
func TestLaneCheckpoints(t *testing.T) {
	dsn, _ := testDB(t,
		"CREATE TABLE sluice_checkpoint (stream VARCHAR(255) NOT NULL, seq BIGINT UNSIGNED NOT NULL, position TEXT NOT NULL, "+
			"applied BIGINT UNSIGNED NOT NULL, updated_at DATETIME(6) NOT NULL, PRIMARY KEY (stream)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
		"INSERT INTO sluice_checkpoint VALUES ('old', 4, 'binlog:mariadb:0-1-42', 40, UTC_TIMESTAMP(6))")
	tg := openTarget(t, dsn, Pipelined, nil)
	ctx := context.Background()
	cps, err := tg.ReadCheckpoints(ctx, "old")
	if err != nil || len(cps) != 1 || cps[0].Lane != 0 || cps[0].Lanes != 0 || cps[0].Seq != 4 {
		t.Fatalf("after upgrade: %+v, %v", cps, err)
	}
	pos := func(s string) sluice.Position { return sluice.Position{Kind: "test", Token: s} }
	for _, cp := range []sluice.Checkpoint{
		{Stream: "s", Lane: 0, Lanes: 3, Seq: 7, Applied: 100, Position: pos("100"), Last: pos("120"), Routing: "r1"},
		{Stream: "s", Lane: 2, Lanes: 3, Seq: 8, Applied: 90, Position: pos("90"), Last: pos("130"), Routing: "r1"},
		{Stream: "s", Lane: 1, Lanes: 3, Seq: 6, Applied: 95, Position: pos("95"), Routing: "r1"},
	} {
		if err := tg.Apply(ctx, &apply.Batch{}, cp); err != nil {
			t.Fatal(err)
		}
	}
	cps, err = tg.ReadCheckpoints(ctx, "s")
	if err != nil || len(cps) != 3 || cps[2].Last != pos("130") || cps[1].Last != pos("95") || cps[0].Routing != "r1" {
		t.Fatalf("lanes = %+v, %v", cps, err)
	}
	if cp, ok := apply.Resume(cps); !ok || cp.Lane != 0 || cp.Applied != 100 {
		t.Fatalf("resume = %+v", cp)
	}
	openTarget(t, dsn, Pipelined, nil) // a second Open of the new shape changes nothing
}
