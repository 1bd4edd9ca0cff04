package mysql

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// joinPackets is multiPackets as first written, piece by piece: the
// reference the sized version must match byte for byte.
func joinPackets(stmts []statement, limit int) []string {
	var packets []string
	var cur strings.Builder
	add := func(s string) {
		if cur.Len() > 0 && cur.Len()+len(s)+2 > limit {
			packets = append(packets, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteString(";\n")
		}
		cur.WriteString(s)
	}
	add("SET " + stepVar + " = 0;\nSTART TRANSACTION")
	for i, s := range stmts {
		if s.follows {
			add(s.sql)
			continue
		}
		add("SET " + stepVar + " = " + strconv.Itoa(i+1) + ";\n" + s.sql)
	}
	add("SET " + stepVar + " = " + strconv.Itoa(len(stmts)+1) + ";\nCOMMIT")
	return append(packets, cur.String())
}

func checkPackets(t *testing.T, stmts []statement, limit int, what string) {
	t.Helper()
	got, want := multiPackets(stmts, limit), joinPackets(stmts, limit)
	if len(got) != len(want) {
		t.Fatalf("%s: %d packets, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: packet %d differs:\n got %.200q\nwant %.200q", what, i, got[i], want[i])
		}
	}
}

// TestMultiPackets: generated transactions (statement lengths from empty to
// over the limit, some following the one before) split at limits from
// smaller than one statement to larger than all.
func TestMultiPackets(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	for run := range 500 {
		n := rng.IntN(12)
		stmts := make([]statement, n)
		for i := range stmts {
			stmts[i] = statement{sql: strings.Repeat(string(rune('a'+i)), rng.IntN(300)), follows: i > 0 && rng.IntN(4) == 0}
		}
		limit := 1 + rng.IntN(1500)
		checkPackets(t, stmts, limit, "seed "+strconv.FormatUint(seed, 10)+", run "+strconv.Itoa(run)+", limit "+strconv.Itoa(limit))
	}
}

func FuzzMultiPackets(f *testing.F) {
	f.Add([]byte{10, 200, 3, 0, 50}, uint16(64))
	f.Add([]byte{}, uint16(1))
	f.Fuzz(func(t *testing.T, lens []byte, limit uint16) {
		stmts := make([]statement, len(lens))
		for i, l := range lens {
			stmts[i] = statement{sql: strings.Repeat("x", int(l&0x7f)*3), follows: i > 0 && l&0x80 != 0}
		}
		checkPackets(t, stmts, int(limit), "fuzz")
	})
}

// BenchmarkMultiPackets joins a batch the size --max-batch-bytes allows (16
// MiB of statements in 4 MiB packets), sized against piece by piece.
func BenchmarkMultiPackets(b *testing.B) {
	stmts := make([]statement, 64)
	for i := range stmts {
		stmts[i] = statement{sql: strings.Repeat("(1,'x'),", 32<<10)}
	}
	for _, c := range []struct {
		name string
		join func([]statement, int) []string
	}{{"sized", multiPackets}, {"piecewise", joinPackets}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.join(stmts, 4<<20)
			}
		})
	}
}
