package apply

import (
	"fmt"

	"github.com/sluice-cdc/sluice"
)

// UpsertGroup is the rows of a table's upserts that carry the same
// columns: both targets write one statement (or one run of statements)
// per group.
type UpsertGroup struct {
	// Mask has a '1' for each column the rows carry and a '0' for each
	// they do not: unchanged (a TOAST value the source did not send) or
	// generated on the target.
	Mask string
	// Present are the indexes of the columns the rows carry.
	Present []int
	// Partial says a column the target writes is missing: the rows are
	// updated in place, keeping its value, and never inserted.
	Partial bool
	Rows    []sluice.Row
}

// GroupUpserts groups rows (aligned with t.Columns) by the columns they
// carry, in first-seen order, so that a row with unchanged columns sets
// only the ones it has. generated marks the columns the target generates
// (aligned with t.Columns); display names the table and column(i) its
// columns in errors: a row of the wrong length, or a key column NULL or
// missing. When every row carries the same columns the one group's Rows
// is rows itself, not a copy.
func GroupUpserts(t *sluice.Table, rows []sluice.Row, generated []bool, display string, column func(i int) string) ([]*UpsertGroup, error) {
	var groups []*UpsertGroup
	var byMask map[string]*UpsertGroup
	var last *UpsertGroup // the group of the row before: rows mostly carry the same columns
	mask := make([]byte, len(generated))
	for at, r := range rows {
		if len(r) != len(generated) {
			return nil, fmt.Errorf("apply upsert to %s: row has %d values, want %d", display, len(r), len(generated))
		}
		for i, v := range r {
			mask[i] = '1'
			if v.Unchanged || generated[i] {
				mask[i] = '0'
			}
		}
		for _, k := range t.Key {
			if r[k].Unchanged || r[k].Null {
				return nil, fmt.Errorf("apply upsert to %s: primary key column %s is NULL or missing", display, column(k))
			}
		}
		g := last
		if g == nil || g.Mask != string(mask) {
			g = byMask[string(mask)]
		}
		if g == nil {
			g = &UpsertGroup{Mask: string(mask)}
			for i := range mask {
				if mask[i] == '1' {
					g.Present = append(g.Present, i)
				} else if !generated[i] {
					g.Partial = true
				}
			}
			if byMask == nil {
				byMask = map[string]*UpsertGroup{}
			}
			byMask[g.Mask] = g
			groups = append(groups, g)
			if len(groups) == 2 {
				// Every row before this one is the first group's: until
				// now it was rows itself, not a copy.
				groups[0].Rows = rows[:at:at]
			}
		}
		last = g
		if len(groups) > 1 {
			g.Rows = append(g.Rows, r)
		}
	}
	if len(groups) == 1 {
		groups[0].Rows = rows
	}
	return groups, nil
}
