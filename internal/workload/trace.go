package workload

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/internal/dbtest"
)

var keyPart = regexp.MustCompile(`[a-z_0-9]+=(-?[0-9]+)`)

// TraceDiffs lists, for the first 8 rows that differ, the source
// statements the workload ran on them (Trace), 30 at most each: what a
// failing test or chaos run prints beside the differences. Rows of tables
// the workload does not know get an empty list.
func (w *Workload) TraceDiffs(diffs dbtest.Diffs) string {
	var b strings.Builder
	shown := 0
	for _, td := range diffs {
		for _, r := range td.Rows {
			if shown == 8 {
				return b.String()
			}
			var key []int64
			for _, m := range keyPart.FindAllStringSubmatch(r.Key, -1) {
				v, _ := strconv.ParseInt(m[1], 10, 64)
				key = append(key, v)
			}
			table := td.Table
			if i := strings.LastIndexByte(table, '.'); i >= 0 {
				table = table[i+1:]
			}
			fmt.Fprintf(&b, "\nsource statements on %s %s:", td.Table, r.Key)
			lines := w.Trace(table, key)
			for i, line := range lines {
				if i == 30 {
					fmt.Fprintf(&b, "\n    … and %d more", len(lines)-i)
					break
				}
				b.WriteString("\n    " + line)
			}
			shown++
		}
	}
	return b.String()
}
