package cutover

import (
	"context"
	"fmt"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/verify"
)

// Counter is what the cutover did with one counter of a streamed table:
// a target sequence or AUTO_INCREMENT raised to at least the source's next
// value (and past the column's largest value on the target), so that the
// application's first insert that leaves the column out does not collide
// with a copied row.
type Counter struct {
	// Table is the source's name of the table; Column the column.
	Table  string `json:"table"`
	Column string `json:"column"`
	// Source is the source's counter (a sequence, AUTO_INCREMENT; empty
	// when the source column has none) and SourceNext the value its next
	// insert would get.
	Source     string `json:"source,omitempty"`
	SourceNext int64  `json:"source_next,omitempty"`
	// Target is the target's counter; TargetWas the value its next insert
	// would have got, TargetNext the value it gets now.
	Target     string `json:"target,omitempty"`
	TargetWas  int64  `json:"target_was,omitempty"`
	TargetNext int64  `json:"target_next,omitempty"`
	// Set says the cutover raised the target's counter.
	Set bool `json:"set"`
	// Note says why a counter was left as it was, or what to look at.
	Note string `json:"note,omitempty"`
}

// primeCounters raises every counter of the streamed tables' target
// columns to at least the source's next value plus the margin, and past
// the largest value the column holds on the target. A counter is never
// lowered.
func (c *cutover) primeCounters(ctx context.Context) error {
	c.cfg.Progress(Progress{Step: "counters"})
	sd, td := c.vsrc.Dialect(), c.vtgt.Dialect()
	for _, t := range c.cfg.Tables {
		tname := verify.TargetName(t, sd, td)
		srcs, err := c.src.counters(ctx, t)
		if err != nil {
			return err
		}
		tgts, err := c.tgt.counters(ctx, tname)
		if err != nil {
			return err
		}
		primed := map[string]bool{}
		for _, tc := range tgts {
			primed[tc.column] = true
			ct, err := c.prime(ctx, t, tname, tc, srcs)
			if ct != nil {
				c.rep.Counters = append(c.rep.Counters, *ct)
			}
			if err != nil {
				return &NotReadyError{fmt.Sprintf("counter %s of %s.%s could not be primed: %v", tc.name, tname, tc.column, err)}
			}
		}
		for _, sc := range srcs {
			if primed[sc.column] {
				continue
			}
			primed[sc.column] = true
			note := fmt.Sprintf("the target column %s.%s has no sequence, identity or AUTO_INCREMENT, so an insert that leaves it out fails or takes its default there: give it one if the application relies on it", tname, sc.column)
			c.rep.Counters = append(c.rep.Counters, Counter{Table: t.String(), Column: sc.column, Source: sc.name, SourceNext: sc.next, Note: note})
			c.rep.Warnings = append(c.rep.Warnings, note)
		}
	}
	return nil
}

// prime raises one target counter: to the source's next value of the
// column (the largest, should several counters feed it) plus the margin,
// and past the largest value the target column holds.
func (c *cutover) prime(ctx context.Context, t, tname sluice.TableName, tc counter, srcs []counter) (*Counter, error) {
	ct := &Counter{Table: t.String(), Column: tc.column, Target: tc.name, TargetWas: tc.next, TargetNext: tc.next}
	want := int64(0)
	for _, sc := range srcs {
		if sc.column == tc.column && sc.next+c.cfg.SequenceMargin > want {
			ct.Source, ct.SourceNext = sc.name, sc.next
			want = sc.next + c.cfg.SequenceMargin
		}
	}
	if ct.Source == "" {
		ct.Note = "the source column has no counter: the target's is set past the largest value the column holds"
	}
	top, rows, err := c.tgt.columnMax(ctx, tname, tc.column)
	if err != nil {
		return ct, err
	}
	if rows && top+1 > want {
		if ct.Source != "" {
			ct.Note = fmt.Sprintf("the target column holds %d, past the source's next value: set past it", top)
		}
		want = top + 1
	}
	if want <= tc.next {
		return ct, nil
	}
	if err := c.tgt.raise(ctx, tname, tc, want); err != nil {
		return ct, err
	}
	ct.TargetNext, ct.Set = want, true
	c.cfg.Logger.Info("counter primed", "stream", c.cfg.Stream, "table", tname.String(), "column", tc.column, "counter", tc.name, "was", tc.next, "now", want)
	return ct, nil
}
