package binlog

import (
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
)

func batchOf(first, n int) batch {
	cs := make([]sluice.Change, n, n+8) // spare capacity, as the state's buffers have
	for i := range cs {
		cs[i] = sluice.Change{Op: sluice.OpInsert, Pos: sluice.Position{Kind: Kind, Token: string(rune('a' + first + i))}}
	}
	return batch{changes: cs}
}

func newReadTestReader(batches int, poll time.Duration) *Reader {
	return &Reader{cfg: Config{PollInterval: poll}, out: make(chan batch, batches), budget: source.NewBudget(1 << 30)}
}

// TestReadHandsOutSlices: Read returns the changes in order, without
// copying, and a caller's append to one result does not write into the
// changes a later Read returns.
func TestReadHandsOutSlices(t *testing.T) {
	r := newReadTestReader(2, 50*time.Millisecond)
	r.out <- batchOf(0, 5)
	r.out <- batchOf(5, 3)
	var got []string
	for len(got) < 8 {
		cs, err := r.Read(t.Context(), 3)
		if err != nil {
			t.Fatal(err)
		}
		if cap(cs) != len(cs) {
			t.Fatalf("Read returned capacity %d for %d changes", cap(cs), len(cs))
		}
		_ = append(cs, sluice.Change{Pos: sluice.Position{Token: "appended"}})
		for _, c := range cs {
			got = append(got, c.Pos.Token)
		}
	}
	if want := []string{"a", "b", "c", "d", "e", "f", "g", "h"}; !equalStrings(got, want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	if cs, err := r.Read(t.Context(), 3); err != nil || len(cs) != 0 {
		t.Fatalf("read %v, %v after the end", cs, err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkRead: Read of 64 changes out of batches of 256.
func BenchmarkRead(b *testing.B) {
	r := newReadTestReader(1, time.Minute)
	full := batchOf(0, 256)
	b.ReportAllocs()
	for b.Loop() {
		if len(r.pending) == 0 {
			r.out <- batch{changes: full.changes[:256:256]}
		}
		if cs, err := r.Read(b.Context(), 64); err != nil || len(cs) != 64 {
			b.Fatal(len(cs), err)
		}
	}
}

// BenchmarkReadPages: a catch-up's Read finds several decoded pages
// waiting and asks for more changes than one holds.
func BenchmarkReadPages(b *testing.B) {
	r := newReadTestReader(8, time.Minute)
	pages := make([]batch, 8)
	for i := range pages {
		pages[i] = batchOf(i*256, 256)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range pages {
			r.out <- batch{changes: p.changes[:256:256]}
		}
		for n := 0; n < 8*256; {
			cs, err := r.Read(b.Context(), 4096)
			if err != nil || len(cs) == 0 {
				b.Fatal(len(cs), err)
			}
			n += len(cs)
		}
	}
}
