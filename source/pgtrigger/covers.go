package pgtrigger

import (
	"fmt"

	"github.com/sluice-cdc/sluice"
)

// Covers reports whether the change whose Change.Pos is c comes at or
// before position p in the source's commit order, i.e. a target holding
// everything up to p holds it (covered), and whether every change the
// reader hands out after c, in the same read, is not covered by p (done).
//
// Positions of two reads cannot be compared by their windows alone: a
// window read again after a restart may span what were several windows
// the first time, with its changes in another order. So a change's
// position carries its transaction: the change is covered when p's prev
// snapshot shows that transaction committed, or when p's cur does and the
// change's id is at most p's last. Done holds once c's window starts
// after everything p's cur snapshot saw (or c is at or past p in p's own
// window). A position that is not a change's (an OpProgress, a start) is a
// point between windows, covered when p has seen everything it has.
//
// It returns an error, never a guess, when the tokens do not say:
// positions of another reader, or a position without a transaction (from
// an older sluice) whose window overlaps p's.
func Covers(p, c sluice.Position) (covered, done bool, err error) {
	pp, err := parsePosition(p)
	if err != nil {
		return false, false, fmt.Errorf("compare positions: %w", err)
	}
	if c.IsZero() {
		return false, false, fmt.Errorf("compare positions: %s is not the position of a change", c)
	}
	cp, err := parsePosition(c)
	if err != nil {
		return false, false, fmt.Errorf("compare positions: %w", err)
	}
	outer := pp.outer()
	sameWindow := pp.open && cp.open && pp.prev.eq(cp.prev) && pp.cur.eq(cp.cur)
	done = outer.le(cp.prev) || (sameWindow && cp.last >= pp.last)
	switch {
	case cp.open && cp.xid != 0:
		covered = pp.prev.visible(cp.xid) || (pp.open && pp.cur.visible(cp.xid) && cp.last <= pp.last)
		return covered, done, nil
	case cp.open && cp.last > 0:
		// A change without its transaction: its window must lie wholly
		// inside what p covers, be p's own, or start after it.
		switch {
		case cp.cur.le(pp.prev):
			return true, done, nil
		case sameWindow:
			return cp.last <= pp.last, done, nil
		case done:
			return false, true, nil
		}
		return false, false, fmt.Errorf("compare positions: change position %s has no transaction id (written by an older sluice) and its window overlaps that of %s: "+
			"whether %s covers it cannot be told", c, p, p)
	}
	// A point between windows: everything visible in cp.prev, and nothing
	// more.
	point := cp.prev
	switch {
	case point.le(pp.prev):
		return true, done, nil
	case !pp.open || !point.le(pp.cur):
		// point sees a transaction that p has not seen at all.
		return false, done, nil
	}
	return false, false, fmt.Errorf("compare positions: %s lies inside the window of %s, whose end the position does not record: "+
		"whether %s covers it cannot be told", c, p, p)
}
