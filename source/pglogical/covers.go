package pglogical

import (
	"fmt"

	"github.com/sluice-cdc/sluice"
)

// Covers reports whether the change whose position is c comes at or before
// position p in the slot's order, so that a target holding everything up to
// p holds it (covered), and whether every change the reader hands out after
// c comes after p too (done): positions increase in the order the reader
// hands them out, so done is !covered. Old ordinal tokens inside a
// transaction cannot be compared with change names exactly, and are
// refused.
func Covers(p, c sluice.Position) (covered, done bool, err error) {
	pp, ok, err := parsePosition(p)
	if err != nil || !ok {
		return false, false, fmt.Errorf("compare positions: %v", coalesce(err, "empty position"))
	}
	cp, ok, err := parsePosition(c)
	if err != nil || !ok {
		return false, false, fmt.Errorf("compare positions: %v", coalesce(err, "empty position"))
	}
	if pp.k > 0 || cp.k > 0 {
		return false, false, fmt.Errorf("compare positions %s and %s: a position written by an earlier sluice names a change by its ordinal, which cannot be compared exactly", p, c)
	}
	covered = cp.before(pp) || cp == pp
	return covered, !covered, nil
}

// before reports whether p comes before q. A boundary at L comes after every
// transaction committing before L and before every change of one committing
// at or after it.
func (p position) before(q position) bool {
	switch {
	case !p.inTx() && !q.inTx():
		return p.lsn < q.lsn
	case !p.inTx():
		return p.lsn <= q.lsn
	case !q.inTx():
		return p.lsn < q.lsn
	case p.lsn != q.lsn:
		return p.lsn < q.lsn
	case p.at != q.at:
		return p.at < q.at
	}
	return p.i < q.i
}

func coalesce(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}
