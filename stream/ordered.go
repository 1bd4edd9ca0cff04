package stream

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// A compacted batch keeps each row's final image and loses the order in
// which the source made them: two rows swapping a unique value through a
// temporary one, or a child inserted before its parent, break a constraint
// on the target that every step on the source kept. The target says so
// with an *apply.ConstraintError, and the stream applies the tables the
// constraint concerns in source order (apply.Compact's inOrder) — at once
// for the failed batch, and for orderedFor afterwards, so that a workload
// that keeps doing it does not pay a failed transaction per batch. Still
// one transaction in one round trip: only the statements are per change.
//
// Source order applied to a target that holds exactly the source's rows
// (which checkpoints inside the target's transactions and the lanes'
// recovery keep true) cannot break a constraint the source kept. So a
// batch that breaks one in source order is a target that differs from the
// source, and the stream stops saying so, rather than retrying or
// shrinking batches until it crawls.

// orderedFor is how long a table stays applied in source order after its
// compacted changes broke a constraint.
const orderedFor = 5 * time.Minute

// orderedTables is the set of tables applied in source order, each until a
// time.
type orderedTables struct {
	mu    sync.Mutex
	until map[sluice.TableName]time.Time
	// gen counts the calls to add: a batch compacted ahead (prepare) under
	// an older generation may compact a table that must now go in order.
	gen uint64
}

// generation is the count of adds so far.
func (o *orderedTables) generation() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gen
}

// has reports whether t's changes are applied in source order now.
func (o *orderedTables) has(t sluice.TableName) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	u, ok := o.until[t]
	if ok && time.Now().After(u) {
		delete(o.until, t)
		return false
	}
	return ok
}

func (o *orderedTables) add(ts []sluice.TableName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.until == nil {
		o.until = map[sluice.TableName]time.Time{}
	}
	o.gen++
	for _, t := range ts {
		o.until[t] = time.Now().Add(orderedFor)
	}
}

// errReorder says a batch failed on a constraint its compaction broke: it is
// retried at once with the tables concerned in source order, and the
// attempt does not count as a failure.
var errReorder = errors.New("retry the batch in source order")

// reorder looks at a failed Apply of b. When the error is a constraint that
// compaction may have broken (it concerns a table of b that was compacted),
// it marks the tables to be applied in source order, logs it and returns
// errReorder. When the tables were already in source order, it returns the
// error that stops the stream. Any other error comes back as it is.
func (s *Stream) reorder(b *apply.Batch, err error) error {
	var ce *apply.ConstraintError
	if !errors.As(err, &ce) {
		return err
	}
	tables := ce.Tables
	var batchTables []*apply.TableBatch
	for _, part := range b.Parts() {
		batchTables = append(batchTables, part.Tables...)
	}
	if len(tables) == 0 {
		// A deferred constraint fails at COMMIT, naming no statement:
		// every table of the batch may be concerned.
		for _, tb := range batchTables {
			tables = append(tables, tb.Table.Name)
		}
	}
	var compacted []sluice.TableName
	for _, tb := range batchTables {
		if slices.Contains(tables, tb.Table.Name) && !slices.Contains(compacted, tb.Table.Name) {
			compacted = append(compacted, tb.Table.Name)
		}
	}
	what := describeConstraint(ce)
	if len(compacted) == 0 {
		return fmt.Errorf("stream %s: the batch breaks %s even applied in the source's order of its changes, so the target differs from the source "+
			"(it holds a row the source does not have, or enforces a constraint the source does not): make the target's rows match the source's, then restart: %w",
			s.cfg.ID, what, err)
	}
	// The tables the constraint concerns and any of the batch's that were
	// compacted together: a foreign key's other side may not be named.
	s.ordered.add(tables)
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.String()
	}
	s.log.Warn("a compacted batch broke a constraint that the source's order of the same changes keeps; applying the tables' changes in source order",
		"tables", strings.Join(names, ","), "constraint", what, "for", orderedFor.String(), "changes", b.Changes)
	return errReorder
}

func describeConstraint(ce *apply.ConstraintError) string {
	var b strings.Builder
	if ce.Constraint != "" {
		fmt.Fprintf(&b, "constraint %s", ce.Constraint)
	} else {
		b.WriteString("a constraint")
	}
	if len(ce.Tables) > 0 {
		fmt.Fprintf(&b, " of %s", ce.Tables[0])
	}
	if ce.Detail != "" {
		fmt.Fprintf(&b, " (%s)", ce.Detail)
	}
	return b.String()
}
