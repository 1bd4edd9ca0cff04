package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText prints the report for a person: per table its counts and a
// table of differing keys, then a summary line.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	differ := 0
	for _, t := range r.Tables {
		verdict := "equal"
		switch {
		case len(t.Diffs) > 0 || t.NoKey:
			verdict = "DIFFERENT"
			differ++
		case len(t.Unsettled) > 0:
			verdict = "UNSETTLED"
		}
		name := t.Source
		if t.Target != t.Source {
			name += " → " + t.Target
		}
		fmt.Fprintf(&b, "%s: %s (%d source rows, %d target rows, %d ranges, %d bisected, %s)\n",
			name, verdict, t.SourceRows, t.TargetRows, t.Ranges, t.Bisected, t.Elapsed.Round(time.Millisecond))
		if len(t.Diffs) > 0 {
			tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  KEY\tKIND\tCOLUMNS")
			for _, d := range t.Diffs {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", d.Key, d.Kind, strings.Join(d.Columns, ", "))
			}
			tw.Flush()
		}
		if t.Truncated {
			fmt.Fprintf(&b, "  … more differences not listed (only the first %d are kept)\n", len(t.Diffs))
		}
		if t.NoKey {
			b.WriteString("  the table has no primary key: its rows differ but cannot be named\n")
		}
		for _, c := range t.Skipped {
			fmt.Fprintf(&b, "  not compared: %s\n", c)
		}
		for _, u := range t.Unsettled {
			fmt.Fprintf(&b, "  %s kept changing on the source through every round: neither proven equal nor different; run verify again\n", u)
		}
	}
	mode := "a still pair"
	if r.Live {
		mode = "live, against the stream's checkpoint"
	}
	rows := r.Differences()
	switch {
	case rows > 0:
		fmt.Fprintf(&b, "summary: %d of %d tables differ, %d rows differ (%s, %s)\n", differ, len(r.Tables), rows, mode, r.Elapsed.Round(time.Millisecond))
	case r.Unsettled() > 0:
		fmt.Fprintf(&b, "summary: no difference found, but %d keys are unsettled (%s, %s)\n", r.Unsettled(), mode, r.Elapsed.Round(time.Millisecond))
	default:
		fmt.Fprintf(&b, "summary: %d tables equal (%s, %s)\n", len(r.Tables), mode, r.Elapsed.Round(time.Millisecond))
	}
	if r.Repair != nil {
		r.Repair.writeText(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeText prints what the repair wrote, then what comparing those keys
// again found.
func (r *RepairReport) writeText(b *strings.Builder) {
	written, deleted := 0, 0
	for _, t := range r.Tables {
		written += len(t.Written)
		deleted += len(t.Deleted)
	}
	fmt.Fprintf(b, "repair: wrote the source's rows of %d keys and deleted %d keys on the target, in one transaction\n", written, deleted)
	for _, t := range r.Tables {
		if len(t.Written) > 0 {
			fmt.Fprintf(b, "  %s: written %s\n", t.Source, strings.Join(t.Written, ", "))
		}
		if len(t.Deleted) > 0 {
			fmt.Fprintf(b, "  %s: deleted %s\n", t.Source, strings.Join(t.Deleted, ", "))
		}
	}
	for _, t := range r.More {
		fmt.Fprintf(b, "  %s has more differences than verify keeps: only those listed were repaired; run verify --repair again\n", t)
	}
	if r.After == nil {
		return
	}
	if r.Equal {
		fmt.Fprintf(b, "after repair: the %d repaired keys are equal (%s)\n", r.Keys(), r.After.Elapsed.Round(time.Millisecond))
		return
	}
	b.WriteString("after repair: the repaired keys still differ:\n")
	var after strings.Builder
	if err := r.After.WriteText(&after); err == nil {
		for _, l := range strings.Split(strings.TrimRight(after.String(), "\n"), "\n") {
			b.WriteString("  " + l + "\n")
		}
	}
}

// WriteJSON prints the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	out := struct {
		*Report
		Equal       bool `json:"equal"`
		Differences int  `json:"differences"`
		Unsettled   int  `json:"unsettled"`
	}{r, r.Differences() == 0 && r.Unsettled() == 0, r.Differences(), r.Unsettled()}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
