package pgtrigger

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
)

// TestPartitionedTable captures a partitioned table under its own name:
// rows of every partition in the table's column order, a row moved to
// another partition (a delete and an insert), a partition created while
// the reader runs (which gets the TRUNCATE trigger, so a TRUNCATE of it
// alone stops the stream).
func TestPartitionedTable(t *testing.T) {
	f := newFixture(t, dbtest.PartitionedDDL...)
	cfg := Config{Tables: dbtest.Tables("ev"), Install: true}
	r := f.open(t, cfg, sluice.Position{})
	f.Exec(t,
		`INSERT INTO ev VALUES (1, '2026-01-05', 'a', 'p1'), (2, '2026-02-05', 'b', 'p2'), (3, '2026-03-05', 'c', 'p3'), (4, '2026-03-06', 'd', 'p4'), (5, '2027-01-01', 'e', 'p5')`,
		`UPDATE ev SET payload = 'q2' WHERE id = 2`,
		`UPDATE ev SET day = '2026-01-20' WHERE id = 2`,
		`DELETE FROM ev WHERE id = 5`)
	dbtest.ExpectChanges(t, collect(t, r, 9, 100),
		"insert ev [1 2026-01-05 a p1]", "insert ev [2 2026-02-05 b p2]", "insert ev [3 2026-03-05 c p3]", "insert ev [4 2026-03-06 d p4]", "insert ev [5 2027-01-01 e p5]",
		"update ev(id=2, day=2026-02-05) [2 2026-02-05 b q2]",
		"delete ev(id=2, day=2026-02-05)", "insert ev [2 2026-01-20 b q2]",
		"delete ev(id=5, day=2027-01-01)")

	f.Exec(t, `CREATE TABLE ev_04 PARTITION OF ev FOR VALUES FROM ('2026-04-01') TO ('2026-05-01')`,
		`INSERT INTO ev VALUES (6, '2026-04-05', 'f', 'p6')`)
	dbtest.ExpectChanges(t, collect(t, r, 1, 100), "insert ev [6 2026-04-05 f p6]")
	deadline := time.Now().Add(10 * time.Second)
	for f.QueryInt(t, `SELECT count(*) FROM pg_trigger WHERE tgname = 'sluice_truncate' AND tgrelid = 'ev_04'::regclass`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the new partition has no TRUNCATE trigger 10 s after it was created")
		}
		if _, err := r.Read(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
	}
	f.Exec(t, `TRUNCATE ev_04`)
	if _, err := dbtest.ReadUntilErr(t, r, 20*time.Second); !errors.Is(err, ErrPartialTruncate) || !strings.Contains(err.Error(), "partition public.ev_04 of source table public.ev") {
		t.Fatalf("Read after a TRUNCATE of the new partition: %v, want ErrPartialTruncate naming it", err)
	}
}

// TestPartitionsChanged: a partition detached, dropped, or attached
// holding rows stops the stream at a changelog row naming it, and there
// again after a restart; whether it happens while the reader runs or while
// none does. A partition attached empty is followed, and a TRUNCATE of a
// detached one is not the table's.
func TestPartitionsChanged(t *testing.T) {
	for _, tt := range dbtest.PartitionChanges {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, dbtest.PartitionedDDL...)
			cfg := Config{Tables: dbtest.Tables("ev"), Install: true}
			r := f.open(t, cfg, sluice.Position{})
			f.Exec(t, `INSERT INTO ev VALUES (1, '2026-01-05', 'a', 'p1')`)
			got := collect(t, r, 1, 100)
			at := got[0].Pos
			if !tt.Running {
				r.Close()
			}
			f.Exec(t, tt.Stmts...)
			f.Exec(t, `CREATE TABLE ev_06 (LIKE ev)`, `ALTER TABLE ev ATTACH PARTITION ev_06 FOR VALUES FROM ('2026-06-01') TO ('2026-07-01')`,
				`INSERT INTO ev VALUES (60, '2026-06-05', 'z', 'z')`)
			if !tt.Running {
				r = f.open(t, cfg, at)
			}
			_, err := dbtest.ReadUntilErr(t, r, 20*time.Second)
			if !errors.Is(err, pgcatalog.ErrPartitionsChanged) || !strings.Contains(err.Error(), tt.Want) {
				t.Fatalf("Read: %v, want the partitions' change: %s", err, tt.Want)
			}
			if tn, ok := sluice.ErrTable(err); !ok || tn.String() != "public.ev" {
				t.Errorf("error names table %v, %v; want public.ev", tn, ok)
			}
			r.Close()
			r = f.open(t, cfg, at)
			if _, err := dbtest.ReadUntilErr(t, r, 20*time.Second); !errors.Is(err, pgcatalog.ErrPartitionsChanged) {
				t.Fatalf("Read after reopening: %v, want the stop again", err)
			}
		})
	}
}

// TestPartitionAttachedEmpty: a table attached empty is followed.
func TestPartitionAttachedEmpty(t *testing.T) {
	f := newFixture(t, dbtest.PartitionedDDL...)
	r := f.open(t, Config{Tables: dbtest.Tables("ev"), Install: true}, sluice.Position{})
	f.Exec(t, `CREATE TABLE ev_05 (kind text, payload text, id bigint NOT NULL, day date NOT NULL)`,
		`ALTER TABLE ev ATTACH PARTITION ev_05 FOR VALUES FROM ('2026-05-01') TO ('2026-06-01')`,
		`INSERT INTO ev VALUES (50, '2026-05-05', 'x', 'y')`)
	dbtest.ExpectChanges(t, collect(t, r, 1, 100), "insert ev [50 2026-05-05 x y]")
	// A check of the partitions finds nothing to stop at.
	r.mu.Lock()
	err := r.checkPartitions(context.Background())
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `UPDATE ev SET payload = 'yy' WHERE id = 50`)
	dbtest.ExpectChanges(t, collect(t, r, 1, 100), "update ev(id=50, day=2026-05-05) [50 2026-05-05 x yy]")
}

// TestPartitionNamedDirectly: a leaf partition named in the table list is
// an ordinary table, in its own column order, emptied by a TRUNCATE of its
// partitioned table too; naming it with that table is refused.
func TestPartitionNamedDirectly(t *testing.T) {
	f := newFixture(t, dbtest.PartitionedDDL...)
	r := f.open(t, Config{Tables: dbtest.Tables("ev_02"), Install: true}, sluice.Position{})
	f.Exec(t, `INSERT INTO ev VALUES (1, '2026-01-05', 'a', 'p1'), (2, '2026-02-05', 'b', 'p2')`, `TRUNCATE ev`)
	dbtest.ExpectChanges(t, collect(t, r, 2, 100), "insert ev_02 [p2 b 2026-02-05 2]", "truncate ev_02")
	if _, err := Open(context.Background(), f.URL, Config{Tables: dbtest.Tables("ev", "ev_03a"), Install: true}, sluice.Position{}); err == nil ||
		!strings.Contains(err.Error(), "table public.ev_03a is a partition of public.ev, which the table list also names") {
		t.Fatalf("Open with a partition and its table: %v", err)
	}
}

// TestPartitionCreatedWhileStopped: a partition created since the install,
// while no reader ran, gets its TRUNCATE trigger when a reader opens, with
// install off too (a partition may be created at any moment: such an open
// once failed for lack of it).
func TestPartitionCreatedWhileStopped(t *testing.T) {
	f := newFixture(t, dbtest.PartitionedDDL...)
	cfg := Config{Tables: dbtest.Tables("ev"), Install: true}
	r := f.open(t, cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO ev VALUES (1, '2026-01-05', 'a', 'p1')`)
	at := collect(t, r, 1, 100)[0].Pos
	r.Close()
	f.Exec(t, `CREATE TABLE ev_04 PARTITION OF ev FOR VALUES FROM ('2026-04-01') TO ('2026-05-01')`)
	cfg.Install = false
	r = f.open(t, cfg, at)
	if n := f.QueryInt(t, `SELECT count(*) FROM pg_trigger WHERE tgname = 'sluice_truncate' AND tgrelid = 'ev_04'::regclass`); n != 1 {
		t.Fatalf("the partition created while no reader ran has %d TRUNCATE triggers once one opened, want 1", n)
	}
	f.Exec(t, `INSERT INTO ev VALUES (4, '2026-04-05', 'd', 'p4')`, `TRUNCATE ev_04`)
	if _, err := dbtest.ReadUntilErr(t, r, 20*time.Second); !errors.Is(err, ErrPartialTruncate) || !strings.Contains(err.Error(), "public.ev_04") {
		t.Fatalf("Read after a TRUNCATE of the new partition: %v, want ErrPartialTruncate naming it", err)
	}
}
