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
	Read(ctx context.Context, max int) ([]sluice.Change, error)
	// Ack tells the reader that every change at or before pos is committed
	// on the target and checkpointed, so the source may release it (prune a
	// changelog, confirm a slot's flush LSN).
	Ack(ctx context.Context, pos sluice.Position) error
	Close() error
}
