package typemap

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// copyTarget is an inner target that can write an initial copy.
type copyTarget interface {
	ReadPlan(ctx context.Context, stream string) (*tablecopy.Plan, error)
	WritePlan(ctx context.Context, p *tablecopy.Plan) error
	RowCounts(ctx context.Context, tables []sluice.TableName) ([]int64, error)
	WriteChunk(ctx context.Context, stream string, epoch int, t *sluice.Table, c tablecopy.Chunk, replace bool, rows tablecopy.Rows) (tablecopy.ChunkState, error)
	ResetTable(ctx context.Context, stream string, t *sluice.Table) error
	Digest(ctx context.Context, t *sluice.Table, r tablecopy.Range) (tablecopy.Digest, error)
	FinishCopy(ctx context.Context, stream string, pos sluice.Position) error
}

var _ tablecopy.Target = (*Target)(nil)

func (t *Target) copier() (copyTarget, error) {
	c, ok := t.Inner.(copyTarget)
	if !ok {
		return nil, fmt.Errorf("the %s target cannot write an initial copy", t.to)
	}
	return c, nil
}

// ReadPlan reads the inner target's plan: chunks keep the source's table
// names and key text, as the copy wrote them.
func (t *Target) ReadPlan(ctx context.Context, stream string) (*tablecopy.Plan, error) {
	c, err := t.copier()
	if err != nil {
		return nil, err
	}
	return c.ReadPlan(ctx, stream)
}

// WritePlan records the plan on the inner target, under the source's names.
func (t *Target) WritePlan(ctx context.Context, p *tablecopy.Plan) error {
	c, err := t.copier()
	if err != nil {
		return err
	}
	return c.WritePlan(ctx, p)
}

// RowCounts asks the inner target about the tables as they are named
// there.
func (t *Target) RowCounts(ctx context.Context, names []sluice.TableName) ([]int64, error) {
	c, err := t.copier()
	if err != nil {
		return nil, err
	}
	if !t.keepSchema {
		names = slices.Clone(names)
		for i := range names {
			names[i].Schema = ""
		}
	}
	return c.RowCounts(ctx, names)
}

// WriteChunk converts the chunk's rows as Apply converts a batch's and
// writes them to the table as the target has it. The chunk keeps the
// source's name (its record is the plan's); its range is converted to the
// target's key text for the delete of a replace.
func (t *Target) WriteChunk(ctx context.Context, stream string, epoch int, tbl *sluice.Table, ch tablecopy.Chunk, replace bool, rows tablecopy.Rows) (tablecopy.ChunkState, error) {
	c, err := t.copier()
	if err != nil {
		return tablecopy.ChunkState{}, err
	}
	m, err := t.mapTable(ctx, tbl)
	if err != nil {
		return tablecopy.ChunkState{}, err
	}
	out := ch
	if out.Range, err = m.keyRange(ch.Range); err != nil {
		return tablecopy.ChunkState{}, err
	}
	var buf []sluice.Row
	st, err := c.WriteChunk(ctx, stream, epoch, m.out, out, replace, func(emit func([]sluice.Row) error) error {
		return rows(func(batch []sluice.Row) error {
			buf = buf[:0]
			for _, r := range batch {
				cr, err := m.row(r)
				if err != nil {
					return err
				}
				buf = append(buf, cr)
			}
			return emit(buf)
		})
	})
	st.Chunk = ch
	return st, err
}

// keyRange converts a range's bounds, prefixes of the source key, to the
// target's text.
func (m *tableMap) keyRange(r tablecopy.Range) (tablecopy.Range, error) {
	conv := func(k sluice.Row) (sluice.Row, error) {
		if k == nil {
			return nil, nil
		}
		return convertRow(k, m.keyConvs[:len(k)], m.src, func() sluice.Row { return k },
			func(i int) string { return m.src.Columns[m.src.Key[i]].Name })
	}
	from, err := conv(r.From)
	if err != nil {
		return r, err
	}
	to, err := conv(r.To)
	if err != nil {
		return r, err
	}
	return tablecopy.Range{From: from, To: to}, nil
}

// ResetTable empties the table as the target has it; the plan's chunks
// keep the source's name.
func (t *Target) ResetTable(ctx context.Context, stream string, tbl *sluice.Table) error {
	c, err := t.copier()
	if err != nil {
		return err
	}
	m, err := t.mapTable(ctx, tbl)
	if err != nil {
		return err
	}
	// The inner target marks the chunks of the name it is given, the
	// target's, not the plan's source name where the two differ. That is
	// safe: a resume resets every string-keyed table that has a done chunk
	// and then writes all of its chunks again, each marking its own record.
	return c.ResetTable(ctx, stream, m.out)
}

// ColumnTypes asks the inner target about the table as it is named
// there, so that a resumed copy can compare the target's key types with
// the source's.
func (t *Target) ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error) {
	if !t.keepSchema {
		name.Schema = ""
	}
	return t.Inner.ColumnTypes(ctx, name)
}

// Digest compares only within one engine: across engines the canonical
// text of a value differs, so the copy writes such ranges again.
func (t *Target) Digest(ctx context.Context, tbl *sluice.Table, r tablecopy.Range) (tablecopy.Digest, error) {
	if t.from != t.to {
		return tablecopy.Digest{}, tablecopy.ErrNoDigest
	}
	c, err := t.copier()
	if err != nil {
		return tablecopy.Digest{}, err
	}
	m, err := t.mapTable(ctx, tbl)
	if err != nil {
		return tablecopy.Digest{}, err
	}
	return c.Digest(ctx, m.out, r)
}

// FinishCopy marks the inner target's plan handed off.
func (t *Target) FinishCopy(ctx context.Context, stream string, pos sluice.Position) error {
	c, err := t.copier()
	if err != nil {
		return err
	}
	return c.FinishCopy(ctx, stream, pos)
}
