package pgtrigger

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice"
)

// Kind is the Position.Kind of positions written by this reader.
const Kind = "pgtrigger"

// snapshot is a pg_snapshot: every transaction below xmin has finished,
// none at or above xmax had started, and xip lists those in between that
// were still running. Its text form is PostgreSQL's: "xmin:xmax:x1,x2".
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// emptySnapshot sees no transaction at all (every real xid is at or above
// its xmax), so a window that starts from it holds every changelog row.
var emptySnapshot = snapshot{xmin: 1, xmax: 1}

func (s snapshot) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(s.xmin, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(s.xmax, 10))
	b.WriteByte(':')
	for i, x := range s.xip {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	return b.String()
}

// visible mirrors pg_visible_in_snapshot, for tests and sanity checks.
func (s snapshot) visible(xid uint64) bool {
	if xid < s.xmin {
		return true
	}
	if xid >= s.xmax {
		return false
	}
	for _, x := range s.xip {
		if x == xid {
			return false
		}
	}
	return true
}

// le reports whether every transaction visible in s is visible in t: s
// was taken no later than t (snapshots of one server only ever see more).
// It is exact over every possible xid, not only those that wrote rows.
func (s snapshot) le(t snapshot) bool {
	// An xid below s.xmin (visible in s) at or above t.xmax (not in t).
	if s.xmin > t.xmax {
		return false
	}
	// An xid t saw running that s saw finished.
	for _, x := range t.xip {
		if s.visible(x) {
			return false
		}
	}
	// Every xid of [max(s.xmin, t.xmax), s.xmax) that s sees is beyond t:
	// there must be none, i.e. s lists them all as running.
	lo := max(s.xmin, t.xmax)
	if s.xmax > lo {
		n := uint64(0)
		for _, x := range s.xip {
			if x >= lo {
				n++
			}
		}
		return n == s.xmax-lo
	}
	return true
}

// eq reports whether s and t see the same transactions.
func (s snapshot) eq(t snapshot) bool { return s.le(t) && t.le(s) }

// parseSnapshot reads PostgreSQL's pg_snapshot text form and checks it is
// sane the way pg_snapshot_in does, so a corrupt token fails here with a
// clear message rather than in a query.
func parseSnapshot(s string) (snapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return snapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip-list", s)
	}
	xmin, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: xmin: %w", s, err)
	}
	xmax, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: xmax: %w", s, err)
	}
	if xmin == 0 || xmax < xmin {
		return snapshot{}, fmt.Errorf("snapshot %q: want 0 < xmin <= xmax", s)
	}
	snap := snapshot{xmin: xmin, xmax: xmax}
	if parts[2] != "" {
		prev := uint64(0)
		for _, f := range strings.Split(parts[2], ",") {
			x, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("snapshot %q: xip: %w", s, err)
			}
			if x < xmin || x >= xmax || x <= prev {
				return snapshot{}, fmt.Errorf("snapshot %q: xip %d not ascending within [xmin, xmax)", s, x)
			}
			snap.xip = append(snap.xip, x)
			prev = x
		}
	}
	return snap, nil
}

// position is where the reader stands. The changelog is read in snapshot
// windows: window (prev, cur) holds the rows written by transactions that
// are visible in cur but not in prev, i.e. that committed between the two
// snapshots. A window is read in changelog id order, in pages; last is the
// id of the last row of the window already returned. When open is false
// no window is being read: the next one starts at prev.
//
// A position covers (a target holding everything up to it holds) every
// row whose transaction is visible in prev, and the rows of its window
// with an id up to last. xid is the transaction of the row at last, in
// the positions of changes (0 otherwise, and in positions written before
// sluice recorded it): a window read again after a restart may be cut
// differently (see Covers), and only the row's transaction then says
// whether another position covers it.
type position struct {
	prev snapshot
	cur  snapshot
	open bool
	last int64
	xid  uint64
}

// startPosition reads every row in the changelog: the target is expected
// to hold the source rows as of the install, and every change made since is
// in the changelog.
var startPosition = position{prev: emptySnapshot}

// token renders the position as "prev/cur/last/xid", e.g.
// "740:745:742/750:750:/42/747", "prev/cur/last" without an xid, or
// "prev//0" when no window is open.
func (p position) token() string {
	if !p.open {
		return p.prev.String() + "//0"
	}
	t := p.prev.String() + "/" + p.cur.String() + "/" + strconv.FormatInt(p.last, 10)
	if p.xid != 0 {
		t += "/" + strconv.FormatUint(p.xid, 10)
	}
	return t
}

// outer is the newest snapshot the position has seen: it covers nothing
// that outer does not show committed.
func (p position) outer() snapshot {
	if p.open {
		return p.cur
	}
	return p.prev
}

// includes reports whether p provably covers everything q covers, from
// the two positions alone. False means it may not.
func (p position) includes(q position) bool {
	if q.outer().le(p.prev) {
		return true
	}
	// A window read up to id 0 has covered none of its rows.
	if q.open && q.last == 0 && q.prev.le(p.prev) {
		return true
	}
	return q.open && p.open && q.prev.eq(p.prev) && q.cur.eq(p.cur) && q.last <= p.last
}

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
	parts := strings.Split(pos.Token, "/")
	if len(parts) != 3 && len(parts) != 4 {
		return position{}, fmt.Errorf("position %s: want prev-snapshot/cur-snapshot/last-id[/xid]", pos)
	}
	var p position
	var err error
	if p.prev, err = parseSnapshot(parts[0]); err != nil {
		return position{}, fmt.Errorf("position %s: %w", pos, err)
	}
	last, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || last < 0 {
		return position{}, fmt.Errorf("position %s: last id %q is not a non-negative integer", pos, parts[2])
	}
	if parts[1] == "" {
		if last != 0 || len(parts) == 4 {
			return position{}, fmt.Errorf("position %s: last id or xid without an open window", pos)
		}
		return p, nil
	}
	if p.cur, err = parseSnapshot(parts[1]); err != nil {
		return position{}, fmt.Errorf("position %s: %w", pos, err)
	}
	// Snapshots only move forward: whatever finished before prev was taken
	// finished before cur was.
	if p.cur.xmin < p.prev.xmin || p.cur.xmax < p.prev.xmax {
		return position{}, fmt.Errorf("position %s: window ends before it starts", pos)
	}
	p.open = true
	p.last = last
	if len(parts) == 4 {
		xid, err := strconv.ParseUint(parts[3], 10, 64)
		if err != nil || parts[3] != strconv.FormatUint(xid, 10) {
			return position{}, fmt.Errorf("position %s: xid %q is not a transaction id", pos, parts[3])
		}
		// The change at last belongs to the window.
		if last == 0 || !p.cur.visible(xid) || p.prev.visible(xid) {
			return position{}, fmt.Errorf("position %s: transaction %d of change %d is not one of the window's", pos, xid, last)
		}
		p.xid = xid
	}
	return p, nil
}
