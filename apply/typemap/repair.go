package typemap

import (
	"context"
	"fmt"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// Repairer is an inner target that writes a repair batch (sluice verify
// --repair) in one transaction holding the stream's fence: the
// PostgreSQL and MySQL targets.
type Repairer interface {
	Repair(ctx context.Context, stream string, tables []*sluice.Table, read func(ctx context.Context) (*apply.Batch, error)) error
}

// Repair writes the batch read returns through the inner target's
// Repair, its tables mapped and its values converted as Apply converts
// them.
func (t *Target) Repair(ctx context.Context, stream string, tables []*sluice.Table, read func(ctx context.Context) (*apply.Batch, error)) error {
	r, ok := t.Inner.(Repairer)
	if !ok {
		return fmt.Errorf("repair: the %s target %T cannot write a repair", t.to, t.Inner)
	}
	mapped := make([]*sluice.Table, len(tables))
	for i, tbl := range tables {
		m, err := t.mapTable(ctx, tbl)
		if err != nil {
			return fmt.Errorf("%s source to %s target: %w", t.from, t.to, err)
		}
		mapped[i] = m.out
	}
	return t.sourceNames(r.Repair(ctx, stream, mapped, func(ctx context.Context) (*apply.Batch, error) {
		b, err := read(ctx)
		if err != nil {
			return nil, err
		}
		return t.convert(ctx, b)
	}))
}
