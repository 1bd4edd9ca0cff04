package pgtrigger

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/internal/pgcopy/pgcopytest"
)

// TestCopyBoundary: rows copied in the snapshot plus the changes streamed
// from its position give the source's rows, with writers committing
// before, during and after the snapshot: no change is missed or applied
// twice. The first snapshot installs the capture under the writers' load;
// the second (a resumed copy) is taken while a transaction that changed
// rows of both tables is open, and that transaction commits after it: its
// changes are streamed, not copied.
func TestCopyBoundary(t *testing.T) {
	f := newFixture(t, pgcopytest.DDL...)
	cfg := Config{Tables: dbtest.Tables(pgcopytest.Tables...), Stream: "copy", Logger: slog.New(slog.DiscardHandler)}
	src := NewCopySource(f.URL, cfg)
	var prev position
	for i := range 2 {
		start := time.Now()
		w := pgcopytest.New(t, f.URL)
		commit := func() {}
		if i == 1 {
			// Held before the writers start, so that it takes its locks
			// without deadlocking with them.
			commit = w.Hold(t)
		}
		w.Start(t, 2)
		w.Wait(t, 30)
		snap, err := src.Snapshot(context.Background(), 2)
		if err != nil {
			t.Fatalf("Snapshot %d: %v", i, err)
		}
		took := time.Since(start)
		commit()
		w.Wait(t, 30)
		rep := pgcopytest.Copy(t, snap, 40)
		w.Wait(t, 30)
		if err := snap.Close(); err != nil {
			t.Fatal(err)
		}
		w.Stop()
		pos, err := parsePosition(snap.Position)
		if err != nil {
			t.Fatal(err)
		}
		if pos.open || !prev.prev.le(pos.prev) || prev.prev.eq(pos.prev) {
			t.Fatalf("snapshot %d at %s, after %s: want a later point between windows", i, pos.token(), prev.token())
		}
		prev = pos
		var recorded string
		if err := f.PG.QueryRow(context.Background(), `SELECT pos FROM sluice.consumer WHERE stream = 'copy'`).Scan(&recorded); err != nil || recorded != snap.Position.Token {
			t.Fatalf("consumer recorded at %q (%v), want the snapshot's %s", recorded, err, snap.Position.Token)
		}
		r := f.open(t, cfg, snap.Position)
		if !reflect.DeepEqual(r.Tables(), snap.Tables) || snap.Engine != "postgres" || len(snap.Readers) != 2 {
			t.Fatalf("snapshot tables %v engine %s readers %d; reader tables %v", snap.Tables, snap.Engine, len(snap.Readers), r.Tables())
		}
		n := pgcopytest.Stream(t, f.URL, r, rep, -1-i)
		pgcopytest.Check(t, f.URL, snap.Tables, SessionSettings(), rep)
		r.Close()
		t.Logf("copy %d: snapshot at %s in %v, %d transactions committed, %d changes streamed after it", i, pos.token(), took, w.Committed(), n)
	}
}
