package pgtrigger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
)

// Partitioned tables. The capture trigger on a partitioned table is cloned
// by PostgreSQL to every partition, those created or attached later too,
// and names the table: its rows reach the changelog under the table's
// name, a row moved to another partition as a delete and an insert. A
// TRUNCATE fires only the truncated relation's own statement triggers,
// which are not cloned: each partition has one (see functions), and a
// partition that joins while the reader runs gets one when the reader
// notices it, within partitionCheckEvery (a TRUNCATE of it before then is
// not seen).
//
// A partition detached or dropped, or attached holding rows, changes the
// table's rows without firing a row trigger (see pgcatalog). The reader
// keeps the record of the partitions it follows in its consumer row,
// compares it with the catalog when it opens and every partitionCheckEvery
// while it runs, and writes each such change it finds into the changelog
// as a P row holding the event: the stream stops there, and there again
// after a restart.

// partitionCheckEvery is how often a running reader compares the
// partitions with its record.
const partitionCheckEvery = time.Second

// partitionedTables are the streamed tables that are partitioned.
func (r *Reader) partitionedTables() []pgcatalog.Partitioned {
	var out []pgcatalog.Partitioned
	for _, in := range r.infos {
		if in.partitioned {
			out = append(out, pgcatalog.Partitioned{Name: in.table.Name, OID: in.oid})
		}
	}
	return out
}

// checkPartitions compares the partitions of the streamed tables with the
// stream's record: it gives each partition that joined the table the
// TRUNCATE trigger, writes a P row for each event into the changelog, and
// records the partitions as they are now, in one transaction.
func (r *Reader) checkPartitions(ctx context.Context) error {
	parts := r.partitionedTables()
	if len(parts) == 0 {
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("check the partitions of stream %s's tables: %w", r.stream, err)
	}
	tx, err := r.conn.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit a no-op
	if _, err := tx.Exec(ctx, consumersLock, r.cfg.Schema); err != nil {
		return fail(err)
	}
	// A new partition's trigger waits for the transactions writing to it:
	// rather than make the application queue behind that, try again later.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '1s'`); err != nil {
		return fail(err)
	}
	var text *string
	err = tx.QueryRow(ctx, fmt.Sprintf(`SELECT partitions FROM %s WHERE stream = $1`, ident(r.cfg.Schema, consumerTable)), r.stream).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("stream %s has no consumer record in %s.%s any more (unregistered while it ran?): restart the stream to register it again", r.stream, r.cfg.Schema, consumerTable)
	}
	if err != nil {
		return fail(err)
	}
	was := pgcatalog.Record{}
	if text != nil {
		if was, err = pgcatalog.ParseRecord(*text); err != nil {
			return fail(err)
		}
	}
	next, events, joined, err := pgcatalog.Reconcile(ctx, tx, parts, was)
	if err != nil {
		return err
	}
	// Every partition gets the trigger when the reader opens (one may
	// have been created since the install), then those that join.
	if len(joined) > 0 || r.lastPartCheck.IsZero() {
		for i, in := range r.infos {
			if err := ensurePartitionTriggers(ctx, tx, r.cfg.Schema, r.cfg.Tables[i], in.oid); err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "42501" {
					return &sluice.TableError{Table: in.table.Name, Err: fmt.Errorf("a partition joined source table %s, and sluice's role may not give it the TRUNCATE trigger that tells a TRUNCATE of it: run `sluice source install` as the table's owner: %w", in.table.Name, err)}
				}
				return fail(err)
			}
		}
		for _, p := range joined {
			r.log.Info("following a new partition", "partition", p.Name)
		}
	}
	for _, e := range events {
		i := r.indexOf(e.Table)
		if i < 0 {
			continue
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (tbl, op, key) VALUES ($1, 'P', $2::json)`, ident(r.cfg.Schema, changelogTable)), r.names[i], e.Marshal()); err != nil {
			return fail(err)
		}
		r.log.Warn("wrote a change of partitions into the changelog: the stream stops there", "err", e.Err())
	}
	if text == nil || next.Marshal() != *text {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET partitions = $2 WHERE stream = $1`, ident(r.cfg.Schema, consumerTable)), r.stream, next.Marshal()); err != nil {
			return fail(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	r.lastPartCheck = time.Now()
	return nil
}

// indexOf is the index among the streamed tables of the one named
// (schema.name).
func (r *Reader) indexOf(name string) int {
	for i, t := range r.tables {
		if t.Name.String() == name {
			return i
		}
	}
	return -1
}

// ensurePartitionTriggers gives every partition of table oid sluice's
// TRUNCATE trigger.
func ensurePartitionTriggers(ctx context.Context, tx pgx.Tx, schema string, t sluice.TableName, oid uint32) error {
	parts, err := partitions(ctx, tx, oid)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if err := ensureTrigger(ctx, tx, p.oid, p.name, truncateTriggerName(schema), ident(schema, truncateFunc), truncateArgs(t, true), truncateEvent); err != nil {
			return err
		}
	}
	return nil
}

// watchPartitions runs checkPartitions from Read every
// partitionCheckEvery. A lock that a new partition's trigger waited for in
// vain is tried again the next time; what sluice cannot follow at all (a
// foreign partition, one it may not read or give a trigger) stops the
// stream.
func (r *Reader) watchPartitions(ctx context.Context) error {
	if time.Since(r.lastPartCheck) < partitionCheckEvery {
		return nil
	}
	err := r.checkPartitions(ctx)
	var te *sluice.TableError
	if err == nil || errors.As(err, &te) || ctx.Err() != nil {
		return err
	}
	r.lastPartCheck = time.Now()
	r.log.Warn("check the partitions of the streamed tables; trying again", "err", err)
	return nil
}
