package chaos

import (
	"fmt"
	"strings"
	"time"
)

// Row is one scenario's line of the report.
type Row struct {
	pair     string
	scenario string
	faults   string
	changes  int64 // source changes committed during the scenario
	diffs    int   // rows (or CHECKSUM TABLE tables) that differ after the catch-up
	ack      string
	recover  time.Duration
	stalled  bool
	skipped  bool
	err      string
	notes    []string
}

func (r Row) Failed() bool {
	return r.diffs > 0 || r.stalled || r.err != "" || r.skipped || strings.HasPrefix(r.ack, "VIOLATED")
}

func RenderTable(rows []Row) string {
	var b strings.Builder
	b.WriteString("| pair | scenario | faults injected | source changes | differences | ack ≤ target | time to recover | notes |\n")
	b.WriteString("|---|---|---|---:|---:|---|---:|---|\n")
	for _, r := range rows {
		rec := r.recover.Round(100 * time.Millisecond).String()
		switch {
		case r.skipped:
			rec = "skipped"
		case r.stalled:
			rec = "STALLED (> " + rec + ")"
		}
		notes := strings.Join(r.notes, "; ")
		if r.err != "" {
			notes = strings.TrimPrefix(notes+"; ERROR: "+r.err, "; ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s | %s | %s |\n",
			r.pair, r.scenario, r.faults, r.changes, r.diffs, r.ack, rec, strings.ReplaceAll(notes, "|", "/"))
	}
	return b.String()
}
