package pglogical

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/pgcopy"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// CopySource takes the initial copy's snapshot of a logical replication
// stream: it creates the stream's slot with an exported snapshot, so that
// the copy reads exactly the transactions that commit before the slot's
// consistent point and the slot streams exactly those that commit after.
type CopySource struct {
	connString string
	cfg        Config
	// releaseWait is how long Snapshot waits for the walsender of a
	// stopped reader to let the stream's slot go.
	releaseWait time.Duration
}

var _ tablecopy.Source = (*CopySource)(nil)

// NewCopySource returns the copy source of the stream cfg configures, as
// Open would read it. The configuration is checked by Snapshot.
func NewCopySource(connString string, cfg Config) *CopySource {
	return &CopySource{connString: connString, cfg: cfg, releaseWait: 5 * time.Second}
}

// Snapshot checks the source and the tables and ensures the publication,
// as Setup does, then creates the stream's replication slot anew with
// CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT and opens workers readers in
// the exported snapshot. An existing slot of the stream is dropped first:
// the stream has no checkpoint yet, so nothing was streamed from it (it
// is the slot of an earlier, interrupted copy, or of a Setup). The
// position is the boundary at the slot's consistent point, from which Open
// streams exactly the transactions the snapshot does not hold.
func (s *CopySource) Snapshot(ctx context.Context, workers int) (*tablecopy.Snapshot, error) {
	cfg, err := s.cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	conn, err := connectSQL(ctx, s.connString)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	db := conn.Config().Database
	log := cfg.Logger.With("source", Kind, "database", db, "slot", cfg.Slot)
	if err := dropIdleSlot(ctx, conn, cfg, s.releaseWait, log); err != nil {
		return nil, err
	}
	if err := preflight(ctx, conn, cfg, true); err != nil {
		return nil, err
	}
	infos, err := describeAll(ctx, conn, db, cfg.Tables)
	if err != nil {
		return nil, err
	}
	tables := make([]*sluice.Table, len(infos))
	for i, in := range infos {
		tables[i] = in.table
	}
	// The publication must exist before the slot: pgoutput looks it up
	// as of each decoded transaction, and one created after the slot's
	// consistent point is missing for the transactions before it. The
	// record of the partitions the stream follows is the copy's too.
	if err := ensurePublication(ctx, conn, cfg, infos); err != nil {
		return nil, err
	}
	if err := initRecord(ctx, conn, cfg, infos, true); err != nil {
		return nil, err
	}
	replCfg, err := replConnConfig(s.connString)
	if err != nil {
		return nil, err
	}
	addr := addrOf(replCfg.Host, replCfg.Port)
	repl, err := pgconn.ConnectConfig(ctx, replCfg)
	if err != nil {
		return nil, connectErr(addr, replCfg.User, db, err)
	}
	// The exported snapshot lives until the replication connection runs
	// another command or closes: the readers import it first.
	defer repl.Close(context.WithoutCancel(ctx))
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, cfg.Slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		SnapshotAction: "EXPORT_SNAPSHOT",
		Mode:           pglogrepl.LogicalReplication,
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch pgErr.Code {
			case "53400":
				return nil, fmt.Errorf("create replication slot %s on %s: all replication slots are in use: drop an unused slot or raise max_replication_slots and restart the server: %w", cfg.Slot, addr, err)
			case "42710":
				return nil, fmt.Errorf("create replication slot %s on %s: it was created again while the copy took its snapshot (another sluice running this stream?): stop it first: %w", cfg.Slot, addr, err)
			}
		}
		return nil, fmt.Errorf("create replication slot %s on %s with an exported snapshot: %w", cfg.Slot, addr, err)
	}
	cp, err := parseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, fmt.Errorf("replication slot %s: consistent point: %w", cfg.Slot, err)
	}
	log.Info("created replication slot with the copy's snapshot", "consistent_point", cp.String(), "snapshot", res.SnapshotName)
	readCfg, err := sqlConnConfig(s.connString)
	if err != nil {
		return nil, err
	}
	readers, err := pgcopy.OpenN(ctx, readCfg, res.SnapshotName, workers)
	if err != nil {
		return nil, fmt.Errorf("copy of stream %s: %w", cfg.Slot, err)
	}
	return &tablecopy.Snapshot{
		Position: position{lsn: cp}.sluice(),
		Tables:   tables,
		Readers:  readers,
		Engine:   "postgres",
	}, nil
}

// dropIdleSlot drops the stream's slot when it exists, after waiting a
// little for a stopped reader's walsender to release it. A slot of
// another database or plugin is not the stream's: it is left alone.
func dropIdleSlot(ctx context.Context, conn *pgx.Conn, cfg Config, wait time.Duration, log *slog.Logger) error {
	db := conn.Config().Database
	deadline := time.Now().Add(wait)
	for {
		slot, err := lookupSlot(ctx, conn, cfg.Slot)
		if err != nil || !slot.exists {
			return err
		}
		if slot.plugin != "pgoutput" || slot.database != db {
			return fmt.Errorf("replication slot %s exists but belongs to database %q with plugin %q, not database %q with pgoutput: choose another slot name or drop it (SELECT pg_drop_replication_slot('%s'))",
				cfg.Slot, slot.database, slot.plugin, db, cfg.Slot)
		}
		if !slot.active {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, cfg.Slot)
			var pgErr *pgconn.PgError
			switch {
			case err == nil:
				log.Info("dropped the stream's replication slot to take the copy's snapshot: the stream has no checkpoint, so nothing was streamed from it",
					"confirmed_flush", slot.confirmed.String())
				return nil
			case errors.As(err, &pgErr) && pgErr.Code == "42704":
				return nil // dropped concurrently
			case !errors.As(err, &pgErr) || pgErr.Code != "55006":
				return fmt.Errorf("drop replication slot %s to take the copy's snapshot: %w", cfg.Slot, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replication slot %s is in use by a running reader, so the copy cannot take its snapshot: stop the other sluice streaming it first", cfg.Slot)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
