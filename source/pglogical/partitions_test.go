package pglogical

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// TestPartitionedTable streams a partitioned table under its own name:
// rows of every partition, in the table's column order whatever the
// partition's, a row moved to another partition (a delete and an insert),
// a partition created while streaming, a column added to the table, and a
// TRUNCATE of the whole table.
func TestPartitionedTable(t *testing.T) {
	f := newFixture(t, []string{"ev"}, dbtest.PartitionedDDL...)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t,
		`INSERT INTO ev VALUES (1, '2026-01-05', 'a', 'p1'), (2, '2026-02-05', 'b', 'p2'), (3, '2026-03-05', 'c', 'p3'), (4, '2026-03-06', 'd', 'p4'), (5, '2027-01-01', 'e', 'p5')`,
		`UPDATE ev SET payload = 'q2' WHERE id = 2`,
		`UPDATE ev SET day = '2026-01-20' WHERE id = 2`,
		`DELETE FROM ev WHERE id = 5`)
	got := collect(t, r, 9, 100)
	for _, c := range got {
		if c.Table.Name.String() != "public.ev" {
			t.Fatalf("change of %s, want every change under public.ev: %s", c.Table.Name, dbtest.DescribeChanges(got))
		}
	}
	dbtest.ExpectChanges(t, got,
		"insert ev [1 2026-01-05 a p1]", "insert ev [2 2026-02-05 b p2]", "insert ev [3 2026-03-05 c p3]", "insert ev [4 2026-03-06 d p4]", "insert ev [5 2027-01-01 e p5]",
		"update ev(id=2, day=2026-02-05) [2 2026-02-05 b q2]",
		"delete ev(id=2, day=2026-02-05)", "insert ev [2 2026-01-20 b q2]",
		"delete ev(id=5, day=2027-01-01)")

	f.Exec(t, `CREATE TABLE ev_04 PARTITION OF ev FOR VALUES FROM ('2026-04-01') TO ('2026-05-01')`,
		`INSERT INTO ev VALUES (6, '2026-04-05', 'f', 'p6')`,
		`ALTER TABLE ev ADD COLUMN note text`,
		`INSERT INTO ev VALUES (7, '2026-02-07', 'g', 'p7', 'n7')`)
	// The ADD COLUMN is a schema change of the table, whichever
	// partition's relation message shows it first.
	got = collect(t, r, 3, 100)
	dbtest.ExpectChanges(t, got, "insert ev [6 2026-04-05 f p6]", "schema change ev [add note=NULL]", "insert ev [7 2026-02-07 g p7 n7]")

	f.Exec(t, `TRUNCATE ev`)
	got = collect(t, r, 1, 100)
	dbtest.ExpectChanges(t, got, "truncate ev")
}

// TestPartitionedTruncateOfOnePartition: a TRUNCATE of one partition (or
// of a sub-partitioned one) stops the stream naming it; the changes before
// it are handed out, and a reader opened again stops there again.
func TestPartitionedTruncateOfOnePartition(t *testing.T) {
	for _, tt := range []struct{ stmt, names string }{
		{`TRUNCATE ev_01`, "public.ev_02"},
		{`TRUNCATE ev_03`, "public.ev_01"},
	} {
		t.Run(tt.stmt, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, []string{"ev"}, dbtest.PartitionedDDL...)
			r := f.open(t, f.cfg, sluice.Position{})
			f.Exec(t, `INSERT INTO ev VALUES (1, '2026-01-05', 'a', 'p1')`, tt.stmt, `INSERT INTO ev VALUES (2, '2026-02-05', 'b', 'p2')`)
			got, err := readErr(t, r)
			dbtest.ExpectChanges(t, dbtest.WithoutProgress(got), "insert ev [1 2026-01-05 a p1]")
			if !errors.Is(err, pgtrigger.ErrPartialTruncate) || !strings.Contains(err.Error(), tt.names) || !strings.Contains(err.Error(), "public.ev") {
				t.Fatalf("Read: %v, want a partial TRUNCATE naming public.ev and %s", err, tt.names)
			}
			r.Close()
			r = f.open(t, f.cfg, got[len(got)-1].Pos)
			if _, err := readErr(t, r); !errors.Is(err, pgtrigger.ErrPartialTruncate) {
				t.Fatalf("Read after reopening: %v, want the partial TRUNCATE again", err)
			}
		})
	}
}

// TestPartitionsChanged: a partition detached, dropped, or attached
// holding rows stops the stream at a marker naming it, and there again
// after a restart; whether it happens while the reader runs or while none
// does. A partition attached empty is followed.
func TestPartitionsChanged(t *testing.T) {
	for _, tt := range dbtest.PartitionChanges {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, []string{"ev"}, dbtest.PartitionedDDL...)
			r := f.open(t, f.cfg, sluice.Position{})
			f.Exec(t, `INSERT INTO ev VALUES (1, '2026-01-05', 'a', 'p1')`)
			got := collect(t, r, 1, 100)
			at := got[0].Pos
			if !tt.Running {
				r.Close()
			}
			f.Exec(t, tt.Stmts...)
			// An attach of an empty table, and rows after everything, are
			// before or after the marker: the stream stops at it either way.
			f.Exec(t, `CREATE TABLE ev_06 (LIKE ev)`, `ALTER TABLE ev ATTACH PARTITION ev_06 FOR VALUES FROM ('2026-06-01') TO ('2026-07-01')`,
				`INSERT INTO ev VALUES (60, '2026-06-05', 'z', 'z')`)
			if !tt.Running {
				r = f.open(t, f.cfg, at)
			}
			_, err := readErr(t, r)
			if !errors.Is(err, pgcatalog.ErrPartitionsChanged) || !strings.Contains(err.Error(), tt.Want) {
				t.Fatalf("Read: %v, want the partitions' change: %s", err, tt.Want)
			}
			var te *sluice.TableError
			if !errors.As(err, &te) || te.Table.String() != "public.ev" {
				t.Errorf("error %v does not name the table as a TableError", err)
			}
			r.Close()
			r = f.open(t, f.cfg, at)
			if _, err := readErr(t, r); !errors.Is(err, pgcatalog.ErrPartitionsChanged) {
				t.Fatalf("Read after reopening: %v, want the stop again", err)
			}
		})
	}
}

// TestPartitionAttachedEmpty: a table attached empty is followed, its rows
// under the table's name.
func TestPartitionAttachedEmpty(t *testing.T) {
	f := newFixture(t, []string{"ev"}, dbtest.PartitionedDDL...)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t, `CREATE TABLE ev_05 (kind text, payload text, id bigint NOT NULL, day date NOT NULL)`,
		`ALTER TABLE ev ATTACH PARTITION ev_05 FOR VALUES FROM ('2026-05-01') TO ('2026-06-01')`,
		`INSERT INTO ev VALUES (50, '2026-05-05', 'x', 'y')`)
	// A check of the partitions passes in between: no marker.
	dbtest.ExpectChanges(t, collect(t, r, 1, 100), "insert ev [50 2026-05-05 x y]")
	if err := r.checkPartitions(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `UPDATE ev SET payload = 'yy' WHERE id = 50`)
	dbtest.ExpectChanges(t, collect(t, r, 1, 100), "update ev(id=50, day=2026-05-05) [50 2026-05-05 x yy]")
}

// TestPartitionNamedDirectly: a leaf partition named in the table list is
// an ordinary table; naming it with its partitioned table is refused, as
// is a publication that publishes through the partitioned table.
func TestPartitionNamedDirectly(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, []string{"ev_02"}, dbtest.PartitionedDDL...)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO ev VALUES (1, '2026-01-05', 'a', 'p1'), (2, '2026-02-05', 'b', 'p2')`, `TRUNCATE ev_02`)
	dbtest.ExpectChanges(t, collect(t, r, 2, 100), "insert ev_02 [p2 b 2026-02-05 2]", "truncate ev_02")
	r.Close()

	both := f.cfg
	both.Tables = dbtest.Tables("ev", "ev_03a")
	if _, err := Open(ctx, f.URL, both, sluice.Position{}); err == nil || !strings.Contains(err.Error(), "table public.ev_03a is a partition of public.ev, which the table list also names") {
		t.Fatalf("Open with a partition and its table: %v", err)
	}
	f.Exec(t, `ALTER PUBLICATION `+ident(f.cfg.Publication)+` SET (publish_via_partition_root = true)`)
	via := f.cfg
	via.Tables = dbtest.Tables("ev")
	if _, err := Open(ctx, f.URL, via, sluice.Position{}); err == nil || !strings.Contains(err.Error(), "publish_via_partition_root = false") {
		t.Fatalf("Open through a publication with publish_via_partition_root: %v", err)
	}
}

// TestLeafShape: a leaf's relation message in its own column order, with a
// column the table does not know yet, becomes the table's order.
func TestLeafShape(t *testing.T) {
	table := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "ev"},
		Columns: []sluice.Column{{Name: "id"}, {Name: "day"}, {Name: "v"}}}
	m := &pglogrepl.RelationMessage{RelationID: 7, Namespace: "public", RelationName: "ev_1", Columns: []*pglogrepl.RelationMessageColumn{
		{Name: "v"}, {Name: "new"}, {Name: "id"}, {Name: "day"}}}
	got, perm := leafShape(m, table)
	var names []string
	for _, c := range got.Columns {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "id,day,v,new" || got.RelationName != "ev" || got.RelationID != 7 {
		t.Errorf("shape %s %v", got.RelationName, names)
	}
	if want := []int{2, 3, 0, 1}; !slices.Equal(perm, want) {
		t.Errorf("perm %v, want %v", perm, want)
	}
	same := &pglogrepl.RelationMessage{Columns: []*pglogrepl.RelationMessageColumn{{Name: "id"}, {Name: "day"}, {Name: "v"}}}
	if _, perm := leafShape(same, table); perm != nil {
		t.Errorf("perm %v for the table's own order, want nil", perm)
	}
}
