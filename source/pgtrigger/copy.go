package pgtrigger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
	"github.com/sluice-cdc/sluice/source/internal/pgcopy"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// CopySource takes the initial copy's snapshot of a trigger-captured
// stream.
//
// The boundary is exact. A capture trigger writes a change's changelog row
// in the transaction that makes the change, so a snapshot sees a change's
// rows in the tables exactly when it sees its changelog row. The copy's
// snapshot S is exported by a REPEATABLE READ transaction, and the
// stream's position is {prev: S} (what PositionAt gives): the reader's
// windows then hold exactly the changelog rows of the transactions S does
// not see, those that committed after it and those still running when it
// was taken (S lists them as in progress), whenever they commit.
//
// The same transaction records the stream's consumer at that position, so
// that a prune of the changelog keeps every row the stream has still to
// read; the consumers' advisory lock is held from before S is taken until
// that record commits, so no prune runs in between with the stream
// unregistered (or registered at an older position).
type CopySource struct {
	connString string
	cfg        Config
}

var _ tablecopy.Source = (*CopySource)(nil)

// NewCopySource returns the copy source of the stream cfg configures, as
// Open would read it. Snapshot installs whatever capture is missing, as
// Open does with cfg.Install.
func NewCopySource(connString string, cfg Config) *CopySource {
	return &CopySource{connString: connString, cfg: cfg}
}

// Snapshot installs the capture, then in one REPEATABLE READ transaction
// exports its snapshot and sets the stream's consumer to the matching
// position, and keeps that transaction open until workers readers have
// imported the snapshot.
func (s *CopySource) Snapshot(ctx context.Context, workers int) (*tablecopy.Snapshot, error) {
	cfg := s.cfg
	cfg.Install = true
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.Tables) == 0 {
		return nil, errors.New("pgtrigger source: no tables configured")
	}
	cfg.Tables = normalize(cfg.Tables)
	for i, t := range cfg.Tables {
		if slices.Contains(cfg.Tables[:i], t) {
			return nil, fmt.Errorf("pgtrigger source: table %s is listed twice", t)
		}
	}
	connCfg, err := readerConnConfig(s.connString)
	if err != nil {
		return nil, err
	}
	// A Reader that is never opened: check installs and describes the
	// tables exactly as Open does.
	r := &Reader{
		cfg:     cfg,
		log:     cfg.Logger.With("source", "pgtrigger", "database", connCfg.Database, "stream", cfg.Stream),
		connCfg: connCfg,
		addr:    net.JoinHostPort(connCfg.Host, fmt.Sprint(connCfg.Port)),
		stream:  cfg.Stream,
	}
	if r.conn, err = r.connect(ctx); err != nil {
		return nil, err
	}
	defer r.conn.Close(context.WithoutCancel(ctx))
	if err := r.check(ctx); err != nil {
		return nil, err
	}
	readers, pos, err := r.exportSnapshot(ctx, workers)
	if err != nil {
		return nil, err
	}
	r.log.Info("copy snapshot taken; the stream's consumer is set to it", "position", pos.sluice().String())
	return &tablecopy.Snapshot{
		Position: pos.sluice(),
		Tables:   slices.Clone(r.tables),
		Readers:  readers,
		Engine:   "postgres",
	}, nil
}

// exportSnapshot is the boundary transaction (see CopySource).
func (r *Reader) exportSnapshot(ctx context.Context, workers int) (_ []tablecopy.Reader, _ position, err error) {
	fail := func(err error) ([]tablecopy.Reader, position, error) {
		return nil, position{}, fmt.Errorf("take the copy's snapshot for stream %s: %w", r.stream, err)
	}
	// The session lock conflicts with the transaction lock every prune and
	// registration takes. It is taken before the transaction, whose
	// snapshot its first statement fixes.
	if _, err := r.conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('sluice pgtrigger consumers ' || $1))`, r.cfg.Schema); err != nil {
		return fail(err)
	}
	defer func() {
		_, uerr := r.conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('sluice pgtrigger consumers ' || $1))`, r.cfg.Schema)
		if err == nil && uerr != nil {
			r.log.Warn("release the consumers' lock (it goes with the session)", "error", uerr)
		}
	}()
	tx, err := r.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit a no-op
	// One statement: the exported snapshot and pg_current_snapshot() are
	// both the transaction's snapshot, which this first query takes.
	var name, snapText string
	if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot(), pg_current_snapshot()::text`).Scan(&name, &snapText); err != nil {
		return fail(err)
	}
	snap, err := parseSnapshot(snapText)
	if err != nil {
		return fail(err)
	}
	pos := position{prev: snap}
	table := ident(r.cfg.Schema, consumerTable)
	var old *string
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT pos FROM %s WHERE stream = $1)`, table), r.stream).Scan(&old); err != nil {
		return fail(err)
	}
	// The stream has no checkpoint: a recorded position (and a note that
	// it was lost) is that of an earlier, interrupted copy, and the new
	// copy replaces it, with the record of the partitions it copies.
	parts, _, _, err := pgcatalog.Reconcile(ctx, tx, r.partitionedTables(), pgcatalog.Record{})
	if err != nil {
		return fail(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (stream, pos, partitions) VALUES ($1, $2, $3)
		ON CONFLICT (stream) DO UPDATE SET pos = excluded.pos, registered_at = now(), acked_at = NULL, lost = NULL, partitions = excluded.partitions`, table),
		r.stream, pos.token(), parts.Marshal()); err != nil {
		return fail(err)
	}
	if old != nil {
		r.log.Info("replacing the stream's consumer position with the copy's: the stream has no checkpoint, so nothing was streamed from it", "was", Kind+":"+*old)
	}
	readers, err := pgcopy.OpenN(ctx, r.connCfg, name, workers)
	if err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		for _, rd := range readers {
			rd.Close()
		}
		return fail(err)
	}
	return readers, pos, nil
}
