package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// buildFenceLock locks the stream's fence row exclusively: every batch of
// the stream reads it FOR SHARE first, so while it is held no batch of the
// stream is in flight on the target, and none starts.
func buildFenceLock(schema string) string {
	return "SELECT generation FROM " + fenceTable(schema) + " WHERE stream = $1 FOR UPDATE"
}

// Repair writes the batch read returns in one transaction, through the
// same statements as Apply, without a checkpoint (sluice verify
// --repair). tables are the source tables the batch may hold (described
// before the transaction begins: nothing but the repair runs inside it).
//
// With stream set, the transaction first locks the stream's fence row
// exclusively, and read runs only once that lock is held. No batch of the
// stream is then in flight, so the target holds the stream's changes up
// to some source position P, and a source snapshot that read takes holds
// a position S at or past P. The rows written are the source's at S; once
// the commit releases the lock the stream applies what follows P on top
// of them, each change a full row image or a delete, so that every key
// ends at the source's latest image. The stream's generation is left as
// it is (the running stream goes on) and its checkpoint is not written.
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
	// Left inside the transaction (or unknown): roll back or drop the
	// connection; nothing of the repair is committed.
	if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
		if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}
	if conn.IsClosed() {
		t.conn = nil
	}
	return err
}

func (t *Target) repair(ctx context.Context, conn *pgx.Conn, stream string, read func(ctx context.Context) (*apply.Batch, error)) error {
	if _, err := conn.PgConn().Exec(ctx, strings.Join(t.begin, "; ")).ReadAll(); err != nil {
		return fmt.Errorf("repair: begin on target PostgreSQL at %s: %w", t.addr, err)
	}
	if stream != "" {
		var gen int64
		err := conn.QueryRow(ctx, buildFenceLock(t.cfg.Schema), stream).Scan(&gen)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("repair: stream %q has no row in %s on target PostgreSQL at %s, so its batches cannot be held off while the repair writes: run the stream once with this sluice (it takes the row at start), or repair a pair no stream writes without --stream-id",
				stream, fenceTable(t.cfg.Schema), t.addr)
		}
		if err != nil {
			return fmt.Errorf("repair: lock stream %q's fence row in %s on target PostgreSQL at %s: %w", stream, fenceTable(t.cfg.Schema), t.addr, err)
		}
	}
	b, err := read(ctx)
	if err != nil {
		return err
	}
	// Every table was described before BEGIN: plan sends nothing.
	stmts, err := t.plan(ctx, b, false)
	if err != nil {
		return err
	}
	// The rows' arrays go in binary, as in Apply: through the same
	// protocol-level pipeline, after the BEGIN and lock already sent.
	return t.pipeline(ctx, nil, stmts, nil)
}
