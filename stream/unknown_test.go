package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// keeperTarget keeps batches of unknown commit outcome, as the database
// targets do.
type keeperTarget struct{ unknown []sluice.Checkpoint }

func (k *keeperTarget) Apply(context.Context, *apply.Batch, sluice.Checkpoint) error { return nil }
func (k *keeperTarget) Ping(context.Context) (time.Duration, error)                  { return 0, nil }
func (k *keeperTarget) TakeUnknown() []sluice.Checkpoint {
	u := k.unknown
	k.unknown = nil
	return u
}
func (k *keeperTarget) KeepUnknown(cps []sluice.Checkpoint) { k.unknown = append(k.unknown, cps...) }

// plainTarget keeps nothing.
type plainTarget struct{}

func (plainTarget) Apply(context.Context, *apply.Batch, sluice.Checkpoint) error { return nil }
func (plainTarget) Ping(context.Context) (time.Duration, error)                  { return 0, nil }

// TestMoveUnknown: a lane retries, on its own connection, the changes of
// a transaction that failed on its second one; when that transaction's
// commit outcome is unknown, the own connection must ask the target about
// it before it applies them (apply.ErrCommittedBefore), so the record
// moves with the changes.
func TestMoveUnknown(t *testing.T) {
	cp := func(seq uint64) sluice.Checkpoint { return sluice.Checkpoint{Stream: "s", Lane: 1, Seq: seq} }
	for _, tc := range []struct {
		name             string
		from, to         Target
		wantFrom, wantTo string
	}{
		{"to the lane's connection", &keeperTarget{unknown: []sluice.Checkpoint{cp(7)}}, &keeperTarget{}, "[]", "[7]"},
		{"added to its own", &keeperTarget{unknown: []sluice.Checkpoint{cp(7)}}, &keeperTarget{unknown: []sluice.Checkpoint{cp(5)}}, "[]", "[5 7]"},
		{"none", &keeperTarget{}, &keeperTarget{}, "[]", "[]"},
		{"a target that keeps none", &keeperTarget{unknown: []sluice.Checkpoint{cp(7)}}, plainTarget{}, "[7]", "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moveUnknown(tc.from, tc.to)
			seqs := func(tg Target) string {
				k, ok := tg.(*keeperTarget)
				if !ok {
					return "-"
				}
				var out []uint64
				for _, c := range k.unknown {
					out = append(out, c.Seq)
				}
				return fmt.Sprint(out)
			}
			if got := seqs(tc.from); got != tc.wantFrom {
				t.Errorf("from: %s, want %s", got, tc.wantFrom)
			}
			if got := seqs(tc.to); got != tc.wantTo {
				t.Errorf("to: %s, want %s", got, tc.wantTo)
			}
		})
	}
}
