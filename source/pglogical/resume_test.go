package pglogical

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestResumeWithOtherTables: a checkpoint inside a transaction that
// touched several tables, resumed with fewer (or more) tables streamed,
// as a restart with another --tables list or a reload does. Positions name
// changes by their WAL record, so the next change read is exactly the one
// after the checkpoint. (They used to count the streamed tables' changes:
// with a table fewer, the count skipped changes of the tables left.)
func TestResumeWithOtherTables(t *testing.T) {
	f := newFixture(t, []string{"a", "b"}, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t, `BEGIN`,
		`INSERT INTO a VALUES (1)`, `INSERT INTO b VALUES (1)`, `INSERT INTO a VALUES (2)`, `INSERT INTO b VALUES (2)`,
		`INSERT INTO b VALUES (3)`, `INSERT INTO a VALUES (3)`, `COMMIT`,
		`INSERT INTO a VALUES (4)`)
	all := collect(t, r, 7, 100)
	r.Close()
	onlyA := f.cfg
	onlyA.Tables = dbtest.Tables("a")
	for i := range all[:6] {
		var want []string
		for _, c := range all[i+1:] {
			if c.Table.Name.Name == "a" {
				want = append(want, fmt.Sprintf("insert a [%s]", c.Row[0].Text))
			}
		}
		r := f.open(t, onlyA, all[i].Pos)
		got := collect(t, r, len(want), 100)
		r.Close()
		dbtest.ExpectChanges(t, got, want...)
	}
}

// TestSlotAheadOfCheckpoint: a reader opened at a position the slot has
// confirmed past (a target restored from a backup) refuses, naming both,
// rather than streaming from the slot's position and skipping what lies
// between. An old checkpoint, from a sluice that moved an idle slot
// without checkpointing, is accepted with a warning.
func TestSlotAheadOfCheckpoint(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY)`)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO t VALUES (1)`, `INSERT INTO t VALUES (2)`, `INSERT INTO t VALUES (3)`)
	got := collect(t, r, 3, 10)
	if err := r.Ack(context.Background(), got[2].Pos); err != nil {
		t.Fatal(err)
	}
	f.waitFlush(t, "the last insert", func(l pglogrepl.LSN) bool { return l == lsnOf(t, got[2].Pos).lsn })
	r.Close()
	_, err := Open(context.Background(), f.URL, f.cfg, got[0].Pos)
	if err == nil || !strings.Contains(err.Error(), "past the stream's position") || !strings.Contains(err.Error(), got[0].Pos.Token) {
		t.Fatalf("Open at a position the slot passed: err = %v", err)
	}
	old := f.cfg
	old.AcceptSlotAhead = true
	r2 := f.open(t, old, got[0].Pos)
	f.Exec(t, `INSERT INTO t VALUES (4)`)
	dbtest.ExpectChanges(t, collect(t, r2, 1, 10), `insert t [4]`)
}

// TestTruncateIsAChange: TRUNCATE is handed out in order, one change per
// streamed table it names, and a resume inside it goes on exactly.
func TestTruncateIsAChange(t *testing.T) {
	f := newFixture(t, []string{"a", "b"}, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`, `CREATE TABLE c (id int PRIMARY KEY)`)
	r := f.open(t, f.cfg, sluice.Position{})
	f.Exec(t, `INSERT INTO a VALUES (1)`, `BEGIN`, `INSERT INTO b VALUES (1)`, `TRUNCATE a, b, c`, `INSERT INTO a VALUES (2)`, `COMMIT`)
	got := collect(t, r, 5, 10)
	dbtest.ExpectChanges(t, got, `insert a [1]`, `insert b [1]`, `truncate a`, `truncate b`, `insert a [2]`)
	r.Close()
	r2 := f.open(t, f.cfg, got[2].Pos)
	dbtest.ExpectChanges(t, collect(t, r2, 2, 10), `truncate b`, `insert a [2]`)
}

// TestStartIsRecordable: Start is a position the reader resumes from, also
// for a reader opened from now.
func TestStartIsRecordable(t *testing.T) {
	f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY)`)
	cfg := f.cfg
	cfg.FromNow = true
	f.Exec(t, `SELECT 1`)
	r := f.open(t, cfg, sluice.Position{})
	start := r.Start()
	if start.Kind != Kind || lsnOf(t, start).inTx() {
		t.Fatalf("Start = %v, want a boundary", start)
	}
	f.Exec(t, `INSERT INTO t VALUES (1)`)
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), `insert t [1]`)
	r.Close()
	r2 := f.open(t, f.cfg, start)
	if r2.Start() != start {
		t.Fatalf("Start of a reader opened at %v = %v", start, r2.Start())
	}
	dbtest.ExpectChanges(t, collect(t, r2, 1, 10), `insert t [1]`)
}
