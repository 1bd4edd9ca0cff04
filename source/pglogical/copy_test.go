package pglogical

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/pgcopy/pgcopytest"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// TestCopyBoundary: rows copied in the snapshot plus the changes streamed
// from its position give the source's rows, with writers committing
// before, during and after the snapshot: no change is missed or applied
// twice. A second snapshot of the same stream (a resumed copy) drops the
// slot the first made and gives a later position, as exact.
func TestCopyBoundary(t *testing.T) {
	f := newFixture(t, pgcopytest.Tables, pgcopytest.DDL...)
	// Setup makes the slot the old way; the copy must replace it.
	if err := Setup(context.Background(), f.URL, f.cfg); err != nil {
		t.Fatal(err)
	}
	src := NewCopySource(f.URL, f.cfg)
	var prev position
	for i := range 2 {
		start := time.Now()
		w := pgcopytest.Start(t, f.URL, 2)
		w.Wait(t, 30)
		snap, err := src.Snapshot(context.Background(), 2)
		if err != nil {
			t.Fatalf("Snapshot %d: %v", i, err)
		}
		took := time.Since(start)
		w.Wait(t, 30)
		rep := pgcopytest.Copy(t, snap, 40)
		w.Wait(t, 30)
		if err := snap.Close(); err != nil {
			t.Fatal(err)
		}
		w.Stop()
		pos := lsnOf(t, snap.Position)
		if pos.inTx() || pos.lsn <= prev.lsn {
			t.Fatalf("snapshot %d at %s, after %s: want a later boundary", i, pos, prev)
		}
		prev = pos
		r := f.open(t, f.cfg, snap.Position)
		if !reflect.DeepEqual(r.Tables(), snap.Tables) || snap.Engine != "postgres" || len(snap.Readers) != 2 {
			t.Fatalf("snapshot tables %v engine %s readers %d; reader tables %v", snap.Tables, snap.Engine, len(snap.Readers), r.Tables())
		}
		n := pgcopytest.Stream(t, f.URL, r, rep, -1-i)
		pgcopytest.Check(t, f.URL, snap.Tables, pgtrigger.SessionSettings(), rep)
		r.Close()
		t.Logf("copy %d: snapshot at %s in %v, %d transactions committed, %d changes streamed after it", i, pos, took, w.Committed(), n)
	}
}

// TestCopyRefusesActiveSlot: a reader streaming from the slot means the
// stream is running, and its slot is not the copy's to drop.
func TestCopyRefusesActiveSlot(t *testing.T) {
	f := newFixture(t, []string{"a"}, `CREATE TABLE a (id int PRIMARY KEY)`)
	f.open(t, f.cfg, sluice.Position{})
	src := NewCopySource(f.URL, f.cfg)
	src.releaseWait = 300 * time.Millisecond
	_, err := src.Snapshot(context.Background(), 1)
	if err == nil || !strings.Contains(err.Error(), "in use by a running reader") {
		t.Fatalf("Snapshot with the slot in use: %v, want an error saying so", err)
	}
}
