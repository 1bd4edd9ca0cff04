package pgtrigger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
)

// Several streams may read one changelog, each its own tables (PgQ's
// model): each registers as a consumer in the consumer table when its
// reader opens, records there the position it has acknowledged, and a
// prune deletes only the rows every registered consumer's position covers.
// Registrations and prunes take one advisory lock, so a prune that starts
// after a registration sees the new consumer.
//
// Every consumer's recorded position covers every row ever pruned: a
// consumer registers at a position that covers them (checked against the
// pruned table, which bounds the transactions of every row deleted), and
// its position then only moves forward. So a reader may open at a
// position when it covers the stream's recorded one, or the pruned table
// shows nothing past it was deleted; otherwise changes after it are gone.

// DefaultStream is the consumer of a reader whose Config.Stream is empty,
// the daemon's default stream id.
const DefaultStream = "default"

// ErrPositionLost is the cause of an Open that fails because the changelog
// no longer holds changes after the stream's position.
var ErrPositionLost = errors.New("the source's changelog no longer holds every change after the stream's position")

// ErrPartialTruncate is the cause of a stream that stops because one
// partition of a streamed table was truncated: the target has no such
// partition to truncate.
var ErrPartialTruncate = errors.New("a partition of a source table was truncated")

// defaultPinWarnAfter is how long another consumer may hold changelog rows
// back before the reader says so.
const defaultPinWarnAfter = 30 * time.Minute

const consumersLock = `SELECT pg_advisory_xact_lock(hashtext('sluice pgtrigger consumers ' || $1))`

// lostFix is what every lost-position error tells the operator.
func lostFix(stream string) string {
	return fmt.Sprintf("reload the target from a fresh copy of the source, then run `sluice source uninstall --stream-id %s` and start the stream from the copy's position", stream)
}

// register records the stream as a consumer of the changelog at the
// reader's start position, after checking that the changelog still holds
// every change after it.
func (r *Reader) register(ctx context.Context) error {
	fail := func(err error) error {
		return fmt.Errorf("register stream %s as a consumer of changelog %s.%s: %w", r.stream, r.cfg.Schema, changelogTable, err)
	}
	tx, err := r.conn.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, consumersLock, r.cfg.Schema); err != nil {
		return fail(err)
	}
	var recorded, lost *string
	err = tx.QueryRow(ctx, fmt.Sprintf(`SELECT pos, lost FROM %s WHERE stream = $1 FOR UPDATE`, ident(r.cfg.Schema, consumerTable)), r.stream).Scan(&recorded, &lost)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fail(err)
	}
	var prunedText *string
	err = tx.QueryRow(ctx, fmt.Sprintf(`SELECT xid::text FROM %s`, ident(r.cfg.Schema, prunedTable))).Scan(&prunedText)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fail(err)
	}
	at := r.start.sluice()
	if lost != nil {
		return fmt.Errorf("stream %s cannot resume at %s: %s, so changes after the position are gone: %s: %w", r.stream, at, *lost, lostFix(r.stream), ErrPositionLost)
	}
	// Every pruned row's transaction is at most prunedXid, and committed:
	// below the position's xmin they are all visible in its prev.
	var prunedXid uint64
	if prunedText != nil {
		if prunedXid, err = strconv.ParseUint(*prunedText, 10, 64); err != nil {
			return fail(fmt.Errorf("pruned xid %q: %w", *prunedText, err))
		}
	}
	servable := prunedText == nil || prunedXid < r.start.prev.xmin
	if recorded != nil {
		acked, err := parsePosition(sluice.Position{Kind: Kind, Token: *recorded})
		if err != nil {
			return fail(fmt.Errorf("recorded position: %w", err))
		}
		if !servable && !r.start.includes(acked) {
			return fmt.Errorf("stream %s cannot resume at %s: it had acknowledged %s:%s, past that position (the target once held more than the position says: restored from a backup?), "+
				"and changelog %s.%s has been pruned since up to transaction %d, so changes after the position are gone: %s: %w",
				r.stream, at, Kind, *recorded, r.cfg.Schema, changelogTable, prunedXid, lostFix(r.stream), ErrPositionLost)
		}
	} else if !servable {
		return fmt.Errorf("stream %s cannot resume at %s: changelog %s.%s was pruned up to transaction %d for other streams before this one registered, past the position, so changes after it are gone: %s: %w",
			r.stream, at, r.cfg.Schema, changelogTable, prunedXid, lostFix(r.stream), ErrPositionLost)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (stream, pos) VALUES ($1, $2) ON CONFLICT (stream) DO UPDATE SET pos = excluded.pos`,
		ident(r.cfg.Schema, consumerTable)), r.stream, at.Token); err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return nil
}

// consumer is a consumer row as a prune reads it.
type consumer struct {
	stream string
	pos    position
	idle   time.Duration // since it last acknowledged (or registered)
}

// prune records that the stream has acknowledged p, when p is past its
// recorded position, and deletes the changelog rows every consumer's
// position covers. It returns how many rows it deleted and the other
// consumers that hold back rows this stream has passed.
func (r *Reader) prune(ctx context.Context, p position) (int64, []consumer, error) {
	tx, err := r.ackConn.Begin(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, consumersLock, r.cfg.Schema); err != nil {
		return 0, nil, err
	}
	table := ident(r.cfg.Schema, consumerTable)
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT stream, pos, extract(epoch FROM now() - coalesce(acked_at, registered_at))::float8 FROM %s ORDER BY stream`, table))
	if err != nil {
		return 0, nil, err
	}
	var all []consumer
	own := -1
	for rows.Next() {
		var c consumer
		var token string
		var idle float64
		if err := rows.Scan(&c.stream, &token, &idle); err != nil {
			rows.Close()
			return 0, nil, err
		}
		// A position that cannot be read cannot be honoured: prune nothing.
		if c.pos, err = parsePosition(sluice.Position{Kind: Kind, Token: token}); err != nil {
			rows.Close()
			return 0, nil, fmt.Errorf("consumer %s in %s: %w", c.stream, table, err)
		}
		c.idle = time.Duration(idle * float64(time.Second))
		if c.stream == r.stream {
			own = len(all)
		}
		all = append(all, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if own < 0 {
		return 0, nil, fmt.Errorf("stream %s has no consumer record in %s any more (unregistered while it ran?): nothing pruned; restart the stream to register it again", r.stream, table)
	}
	// A recorded position only moves forward, so that it keeps covering
	// everything pruned (see register).
	if p.includes(all[own].pos) {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET pos = $2, acked_at = now() WHERE stream = $1`, table), r.stream, p.token()); err != nil {
			return 0, nil, err
		}
		all[own].pos = p
	} else {
		r.log.Warn("acknowledged position is not provably past the stream's recorded one; keeping the recorded one", "position", p.sluice().String(), "recorded", all[own].pos.sluice().String())
	}
	args := []any{nil}
	bound := all[0].pos.outer().xmax
	for _, c := range all {
		bound = min(bound, c.pos.outer().xmax)
		var cur *string
		if c.pos.open {
			s := c.pos.cur.String()
			cur = &s
		}
		args = append(args, c.pos.prev.String(), cur, c.pos.last)
	}
	args[0] = strconv.FormatUint(bound, 10)
	var n int64
	if err := tx.QueryRow(ctx, pruneSQL(r.cfg.Schema, len(all)), args...).Scan(&n); err != nil {
		return 0, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, nil, err
	}
	var behind []consumer
	for i, c := range all {
		if i != own && !c.pos.includes(all[own].pos) {
			behind = append(behind, c)
		}
	}
	return n, behind, nil
}

// pruneSQL deletes the changelog rows that n consumers' positions all
// cover — a row is covered when its transaction is visible in the
// position's prev snapshot (its windows have been read), or in its cur
// with an id up to its last — and raises the pruned table's xid to the
// newest transaction deleted. $1 bounds the xids for the index, then each
// consumer has prev, cur (NULL outside a window) and last.
func pruneSQL(schema string, n int) string {
	conds := make([]string, n)
	for i := range n {
		b := 2 + 3*i
		conds[i] = fmt.Sprintf(`(pg_visible_in_snapshot(xid, $%d::pg_snapshot)
		OR ($%d::pg_snapshot IS NOT NULL AND pg_visible_in_snapshot(xid, $%d::pg_snapshot) AND id <= $%d))`, b, b+1, b+1, b+2)
	}
	return fmt.Sprintf(`WITH gone AS (
	DELETE FROM %s WHERE xid < $1::text::xid8
		AND %s
	RETURNING xid
), top AS (
	SELECT xid FROM gone ORDER BY xid DESC LIMIT 1
), recorded AS (
	INSERT INTO %s AS p (one, xid, at) SELECT true, xid, now() FROM top
	ON CONFLICT (one) DO UPDATE SET xid = greatest(p.xid, excluded.xid), at = excluded.at
)
SELECT count(*) FROM gone`, ident(schema, changelogTable), strings.Join(conds, "\n\tAND "), ident(schema, prunedTable))
}

// warnPinned says which other consumers hold changelog rows back and have
// not acknowledged anything for PinWarnAfter, once per PinWarnAfter each.
func (r *Reader) warnPinned(behind []consumer) {
	for _, c := range behind {
		if c.idle < r.cfg.PinWarnAfter || time.Since(r.warned[c.stream]) < r.cfg.PinWarnAfter {
			continue
		}
		r.warned[c.stream] = time.Now()
		r.log.Warn("another stream's consumer pins the changelog: its rows are kept until it acknowledges them",
			"consumer", c.stream, "acknowledged", c.pos.sluice().String(), "idle", c.idle.Round(time.Second).String(),
			"fix", fmt.Sprintf("start stream %s, or if it is gone run `sluice source uninstall --stream-id %s`", c.stream, c.stream))
	}
}

// Unregister removes stream's consumer record from the changelog in
// schema, so that the changelog is no longer kept for it (for `sluice
// source uninstall --stream-id`). The stream's next reader registers anew,
// and opens only if nothing after its position was pruned meanwhile. It is
// a no-op when the stream or the consumer table does not exist.
func Unregister(ctx context.Context, conn *pgx.Conn, schema, stream string) error {
	if schema == "" {
		schema = DefaultSchema
	}
	if stream == "" {
		stream = DefaultStream
	}
	oid, err := regclass(ctx, conn, ident(schema, consumerTable))
	if err != nil || oid == 0 {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("unregister stream %s: %w", stream, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, consumersLock, schema); err != nil {
		return fmt.Errorf("unregister stream %s: %w", stream, err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE stream = $1`, ident(schema, consumerTable)), stream); err != nil {
		return fmt.Errorf("unregister stream %s from changelog %s.%s: %w", stream, schema, changelogTable, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("unregister stream %s: commit: %w", stream, err)
	}
	return nil
}
