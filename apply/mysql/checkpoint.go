package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// setupCheckpoint creates the checkpoint table, or brings one made by an
// earlier sluice to the shape with a row per lane.
func (t *Target) setupCheckpoint(ctx context.Context) error {
	if _, err := t.conn.ExecContext(ctx, checkpointDDL); err != nil {
		return err
	}
	if _, err := t.conn.ExecContext(ctx, fenceDDL); err != nil {
		return err
	}
	var n int
	err := t.read(ctx, func() error { return t.conn.QueryRowContext(ctx, checkpointHasLanes).Scan(&n) })
	if err != nil || n > 0 {
		return err
	}
	t.log.Info("upgrading the checkpoint table to a row per lane", "table", t.database+"."+checkpointTable)
	_, err = t.conn.ExecContext(ctx, checkpointUpgrade)
	return err
}

// ReadCheckpoint returns the checkpoint the stream resumes from (see
// apply.Resume), and false when the target has none.
func (t *Target) ReadCheckpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error) {
	cps, err := t.ReadCheckpoints(ctx, stream)
	if err != nil {
		return sluice.Checkpoint{}, false, err
	}
	cp, ok := apply.Resume(cps)
	return cp, ok, nil
}

// ReadCheckpoints returns the checkpoints the target committed last for
// stream, one per lane that wrote one, in lane order.
func (t *Target) ReadCheckpoints(ctx context.Context, stream string) ([]sluice.Checkpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pre; p != nil && p.haveCPs && p.stream == stream {
		p.haveCPs = false
		return p.checkpoints, nil
	}
	var cps []sluice.Checkpoint
	err := t.reading(ctx, func() (err error) {
		cps, err = t.readCheckpoints(ctx, stream)
		return err
	})
	return cps, err
}

func (t *Target) readCheckpoints(ctx context.Context, stream string) ([]sluice.Checkpoint, error) {
	rows, err := t.conn.QueryContext(ctx, buildCheckpointSelect(stream))
	if err != nil {
		return nil, fmt.Errorf("read checkpoint of stream %q from %s.%s: %w", stream, t.database, checkpointTable, err)
	}
	defer rows.Close()
	return t.scanCheckpoints(rows, stream)
}

// scanCheckpoints reads the rows of buildCheckpointSelect.
func (t *Target) scanCheckpoints(rows *sql.Rows, stream string) ([]sluice.Checkpoint, error) {
	var cps []sluice.Checkpoint
	for rows.Next() {
		cp := sluice.Checkpoint{Stream: stream}
		var pos, last string
		err := rows.Scan(&cp.Lane, &cp.Seq, &pos, &cp.Applied, &cp.Time, &last, &cp.Lanes, &cp.Routing)
		if err != nil {
			return nil, fmt.Errorf("read checkpoint of stream %q from %s.%s: %w", stream, t.database, checkpointTable, err)
		}
		if cp.Position, err = sluice.ParsePosition(pos); err == nil {
			cp.Last, err = sluice.ParsePosition(last)
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoint of stream %q, lane %d: %w", stream, cp.Lane, err)
		}
		cps = append(cps, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read checkpoint of stream %q from %s.%s: %w", stream, t.database, checkpointTable, err)
	}
	return cps, nil
}
