package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// fenceLock locks the stream's fence row exclusively: every batch of the
// stream reads it LOCK IN SHARE MODE first, so while it is held no batch
// of the stream is in flight on the target, and none starts.
func fenceLock(stream string) string {
	return "SELECT `generation` FROM `" + fenceTable + "` WHERE `stream` = " + lit(stream) + " FOR UPDATE"
}

// Repair writes the batch read returns in one transaction, through the
// same statements as Apply, without a checkpoint (sluice verify
// --repair); with stream set it first locks the stream's fence row
// exclusively and runs read only then. See the PostgreSQL target's Repair
// for why the stream converges on top of the rows written. tables are
// the source tables the batch may hold, described before the
// transaction begins.
func (t *Target) Repair(ctx context.Context, stream string, tables []*sluice.Table, read func(ctx context.Context) (*apply.Batch, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tbl := range tables {
		if _, err := t.describe(ctx, tbl); err != nil {
			return err
		}
	}
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	conn := t.conn
	err := t.repair(ctx, conn, stream, read)
	if err == nil {
		return nil
	}
	// Nothing of the repair is committed: roll back, or drop a connection
	// in an unknown state.
	if t.conn == conn {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			t.discard()
		}
	}
	return err
}

func (t *Target) repair(ctx context.Context, conn *sql.Conn, stream string, read func(ctx context.Context) (*apply.Batch, error)) error {
	if !t.implicitTx {
		if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return fmt.Errorf("repair: start a transaction on target %s at %s: %w", t.server, t.addr, err)
		}
	}
	if stream != "" {
		var gen int64
		err := conn.QueryRowContext(ctx, fenceLock(stream)).Scan(&gen)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("repair: stream %q has no row in %s.%s on target %s at %s, so its batches cannot be held off while the repair writes: run the stream once with this sluice (it takes the row at start), or repair a pair no stream writes without --stream-id",
				stream, t.database, fenceTable, t.server, t.addr)
		}
		if err != nil {
			return fmt.Errorf("repair: lock stream %q's fence row in %s.%s on target %s at %s: %w", stream, t.database, fenceTable, t.server, t.addr, err)
		}
	}
	b, err := read(ctx)
	if err != nil {
		return err
	}
	// Every table was described before the transaction: plan sends
	// nothing.
	stmts, err := t.plan(ctx, b, false)
	if err != nil {
		return err
	}
	for i, s := range stmts {
		if _, err := conn.ExecContext(ctx, s.sql); err != nil {
			return fmt.Errorf("repair: %w", &stepError{err: err, stmts: stmts, step: i + 1})
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("repair: %w", &stepError{err: err, stmts: stmts, step: len(stmts) + 1})
	}
	return nil
}
