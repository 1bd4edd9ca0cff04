// Package source defines what sluice needs from a change reader; the readers
// themselves live in subpackages, one per kind of source.
package source

import (
	"context"

	"github.com/sluice-cdc/sluice"
)

// Reader streams a source's row changes in an order that keeps every row's
// changes in the order the source committed them.
type Reader interface {
	// Tables describes the tables the reader streams, as the source has them.
	Tables() []*sluice.Table
	// Read returns up to max changes that follow the last change returned (or
	// the start position). It waits up to the reader's poll interval for
	// changes to arrive and returns an empty slice, not an error, when none
	// did, so the caller can flush what it holds.
	//
	// The returned slice is the caller's: the reader never reads or
	// writes it (nor its backing array within its capacity) again, so
	// the caller may keep it, write into it and clear it without copying
	// it. A reader that hands out part of a larger array caps it (a full
	// slice expression, s[i:j:j]) and never hands out that part again.
	// The rows and values the changes point to are shared and read-only.
	Read(ctx context.Context, max int) ([]sluice.Change, error)
	// Ack tells the reader that every change at or before pos is committed
	// on the target and checkpointed, so the source may release it (prune a
	// changelog, confirm a slot's flush LSN).
	Ack(ctx context.Context, pos sluice.Position) error
	Close() error
}
