package cutover

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-cdc/sluice/verify"
)

// Report is what a cutover found and did.
type Report struct {
	Stream string `json:"stream"`
	// Ready: the target holds exactly the source's rows, its counters are
	// primed, and the source stayed quiet throughout.
	Ready bool `json:"ready"`
	// Failure says why the target is not ready.
	Failure    string `json:"failure,omitempty"`
	SourceMode string `json:"source_mode,omitempty"`
	// ReadOnly says what --source-read-only did.
	ReadOnly    string        `json:"source_read_only,omitempty"`
	QuietWindow time.Duration `json:"quiet_window_ns,omitempty"`
	// SourcePosition is the last source position the stream was seen to
	// have applied up to, with the stream's checkpoint that covered it
	// and the changes that checkpoint counts.
	SourcePosition string `json:"source_position,omitempty"`
	Checkpoint     string `json:"checkpoint,omitempty"`
	Applied        uint64 `json:"applied,omitempty"`
	// RowsVerified counts the source rows verify compared.
	RowsVerified int64          `json:"rows_verified"`
	Verify       *verify.Report `json:"verify,omitempty"`
	Counters     []Counter      `json:"counters"`
	Reverse      *ReverseReport `json:"reverse,omitempty"`
	Warnings     []string       `json:"warnings,omitempty"`
	Elapsed      time.Duration  `json:"elapsed_ns"`
}

// ReverseReport is the stream set up back from the target to the source.
type ReverseReport struct {
	Stream string `json:"stream"`
	// Start is where it starts on the target (the new source): a position
	// read while the target was quiet, recorded as the stream's
	// checkpoint on the old source.
	Start string `json:"start"`
	// Config is the stream's [[stream]] block for the config file,
	// passwords masked.
	Config   string   `json:"config"`
	Warnings []string `json:"warnings,omitempty"`
}

// WriteJSON prints the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText prints the report for a person.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cutover of stream %s", r.Stream)
	if r.SourceMode != "" {
		fmt.Fprintf(&b, " (%s)", r.SourceMode)
	}
	b.WriteString("\n")
	if r.ReadOnly != "" {
		fmt.Fprintf(&b, "  source read-only: %s\n", r.ReadOnly)
	}
	if r.QuietWindow > 0 {
		fmt.Fprintf(&b, "  quiet: no change to the streamed tables committed on the source for %s\n", r.QuietWindow)
	}
	if r.SourcePosition != "" {
		fmt.Fprintf(&b, "  position: the stream applied everything up to source position %s (its checkpoint %s, %d changes applied)\n",
			r.SourcePosition, r.Checkpoint, r.Applied)
	}
	if r.Verify != nil {
		fmt.Fprintf(&b, "  verify: %d tables, %d source rows compared\n", len(r.Verify.Tables), r.RowsVerified)
		if r.Verify.Differences() > 0 || r.Verify.Unsettled() > 0 {
			var vb strings.Builder
			_ = r.Verify.WriteText(&vb)
			for _, l := range strings.Split(strings.TrimRight(vb.String(), "\n"), "\n") {
				b.WriteString("    " + l + "\n")
			}
		}
	}
	if len(r.Counters) > 0 {
		b.WriteString("  counters:\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    TABLE\tCOLUMN\tSOURCE\tSOURCE NEXT\tTARGET\tWAS\tNOW\t")
		for _, c := range r.Counters {
			now := "unchanged"
			if c.Set {
				now = fmt.Sprint(c.TargetNext)
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Table, c.Column, dash(c.Source), num(c.Source != "", c.SourceNext),
				dash(c.Target), num(c.Target != "", c.TargetWas), now)
		}
		tw.Flush()
	}
	if rr := r.Reverse; rr != nil {
		fmt.Fprintf(&b, "  reverse stream %s: starts at %s on the target; add it to the config file once the forward stream is stopped:\n", rr.Stream, rr.Start)
		for _, l := range strings.Split(strings.TrimRight(rr.Config, "\n"), "\n") {
			b.WriteString("    " + l + "\n")
		}
		for _, wn := range rr.Warnings {
			fmt.Fprintf(&b, "  reverse: WARNING: %s\n", wn)
		}
	}
	for _, wn := range r.Warnings {
		fmt.Fprintf(&b, "  WARNING: %s\n", wn)
	}
	if r.Ready {
		fmt.Fprintf(&b, "READY: the target may take the application's writes (%s)\n", r.Elapsed.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "NOT READY: %s\n", r.Failure)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(ok bool, n int64) string {
	if !ok {
		return "-"
	}
	return fmt.Sprint(n)
}
