package mytrigger

import (
	"fmt"

	"github.com/sluice-cdc/sluice"
)

// Covers reports whether the change whose Change.Pos is c comes at or
// before position p (covered: a target holding everything up to p holds
// it), and whether every change the reader hands out after c is past p
// (done). Positions are changelog ids handed out in increasing order, so
// done is !covered. Both must be this reader's positions, c a change's.
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
	covered = cp.last <= pp.last
	return covered, !covered, nil
}
