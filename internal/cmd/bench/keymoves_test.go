package main

import (
	"strings"
	"testing"
)

// TestKeyMovesBacklog: the moves backlog moves 5% of its updates' rows to
// new keys, half of them rows with a large body, and holds as many changes
// and statements as the plain one, which moves none.
func TestKeyMovesBacklog(t *testing.T) {
	for _, pg := range []bool{true, false} {
		shape := shapeFor(1)
		moves := kmBacklog{shape: shape, moves: true, tags: !pg}
		plain := kmBacklog{shape: shape, tags: !pg}
		ms, ps := moves.statements(pg), plain.statements(pg)
		if len(ms) != len(ps) || moves.changes() != plain.changes() {
			t.Fatalf("pg %v: %d and %d statements, %d and %d changes: want the same", pg, len(ms), len(ps), moves.changes(), plain.changes())
		}
		moved, big, swaps := 0, 0, 0
		for j := 0; j*nativeTxSize < shape.updates; j++ {
			lo := j*nativeTxSize + 1
			if x := kmMoved(j, lo, lo+nativeTxSize-1); x > 0 {
				moved++
				if x%kmBigEvery == 0 {
					big++
				}
			}
		}
		for _, st := range ms {
			if strings.Contains(st, "CONCAT('swap-', id)") {
				swaps++
			}
			if strings.Contains(st, "SET id = id +") != strings.Contains(st, "UPDATE items SET id") {
				t.Fatalf("pg %v: %s", pg, st)
			}
		}
		if moved != shape.updates/20 || big != moved/2 {
			t.Errorf("pg %v: %d moves (%d of rows with a large body), want 5%% of %d updates, half with one", pg, moved, big, shape.updates)
		}
		if n := strings.Count(strings.Join(ms, "\n"), "SET id = id +"); n != moved {
			t.Errorf("pg %v: %d statements move a key, want %d", pg, n, moved)
		}
		if n := strings.Count(strings.Join(ps, "\n"), "SET id = id +"); n != 0 {
			t.Errorf("pg %v: the plain backlog moves %d keys", pg, n)
		}
		if wantSwaps := map[bool]int{true: 0, false: shape.updates / nativeTxSize / 4}[pg]; swaps != wantSwaps {
			t.Errorf("pg %v: %d unique swaps, want %d", pg, swaps, wantSwaps)
		}
	}
}
