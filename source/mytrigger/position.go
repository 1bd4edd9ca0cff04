package mytrigger

import (
	"fmt"
	"strconv"

	"github.com/sluice-cdc/sluice"
)

// Kind is the Position.Kind of positions written by this reader.
const Kind = "mytrigger"

// position is where the reader stands: every changelog row with an id at
// or below last has been returned, or belongs to a table the reader does
// not stream, or is known never to appear (its transaction rolled back).
// Nothing else is needed to resume: the fence state (which gaps above last
// are known to be empty) is rebuilt by waiting once more, see the package
// documentation.
type position struct {
	last uint64
}

// startPosition reads every row in the changelog: the target is expected to
// hold the source rows as of the install, every change made since is in the
// changelog.
var startPosition = position{}

func (p position) token() string { return strconv.FormatUint(p.last, 10) }

func (p position) sluice() sluice.Position {
	return sluice.Position{Kind: Kind, Token: p.token()}
}

// parsePosition reads a position written by this reader. The zero position
// means startPosition.
func parsePosition(pos sluice.Position) (position, error) {
	if pos.IsZero() {
		return startPosition, nil
	}
	if pos.Kind != Kind {
		return position{}, fmt.Errorf("position %s is not a %s position (kind %q)", pos, Kind, pos.Kind)
	}
	last, err := strconv.ParseUint(pos.Token, 10, 64)
	if err != nil || pos.Token != strconv.FormatUint(last, 10) {
		return position{}, fmt.Errorf("position %s: want the last changelog id, a non-negative integer", pos)
	}
	return position{last: last}, nil
}
