package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

// A stream's fence: its generation on the target, one row per stream in
// sluice.fence. Each process that starts the stream takes the next
// generation (Fence), and every batch it applies first reads the row FOR
// SHARE and fails unless the generation is still its own. A process killed
// with a batch in flight — its bytes held in a dead link, delivered to its
// still-open server session after a new process started — can then no
// longer commit over the new process's writes: if the batch runs after the
// new generation was taken, its check fails and nothing commits; if it
// runs before, the new process's Fence waits for it (the row lock) and
// reads the checkpoints after it. A batch stuck half-sent holds the lock
// until its session ends: Fence ends it after fenceWait.

const fenceWait = 2 * time.Second

func fenceTable(schema string) string { return pgx.Identifier{schema, "fence"}.Sanitize() }

func buildFenceDDL(schema string) string {
	return "CREATE TABLE IF NOT EXISTS " + fenceTable(schema) + " (stream text PRIMARY KEY, generation bigint NOT NULL)"
}

func buildFenceBump(schema string) string {
	return "INSERT INTO " + fenceTable(schema) + " AS f (stream, generation) VALUES ($1, 1) " +
		"ON CONFLICT (stream) DO UPDATE SET generation = f.generation + 1 RETURNING generation"
}

// fenceMark starts the text of a failed fence check (an integer cast of
// it fails with it in the message).
const fenceMark = "sluice fence: "

func buildFenceCheck(schema string) string { return buildFenceCheckOf(schema, "$1", "$2") }

// buildFenceCheckOf is the fence check of the stream and generation the
// SQL expressions stream and gen give (parameters, or literals in a
// simple query).
func buildFenceCheckOf(schema, stream, gen string) string {
	return "SELECT CASE WHEN generation = " + gen + "::bigint THEN 0 ELSE ('" + fenceMark +
		"stream ' || " + stream + " || ' is at generation ' || generation || ' on the target, this process at ' || " + gen + ")::int END FROM " +
		fenceTable(schema) + " WHERE stream = " + stream + " FOR SHARE"
}

// copyFenced reports whether the initial copy's writes for stream are
// checked against this process's generation: the copy runs after the
// stream's process took it, and a killed process's late chunk must not
// commit over the new one's copy.
func (t *Target) copyFenced(stream string) bool { return t.gen > 0 && t.genStream == stream }

// copyFenceLiteral is the fence check of stream for a simple query.
func (t *Target) copyFenceLiteral(stream string) string {
	return buildFenceCheckOf(t.cfg.Schema, keyrange.PGLiteral(stream), strconv.FormatInt(t.gen, 10))
}

// Fence takes the stream's next generation on the target and returns it;
// the target's batches for stream are checked against it from now on. It
// costs no round trip when Open took it already (apply.Prefetch.Fence). An
// earlier process's transaction holding the fence longer than fenceWait
// is ended (pg_terminate_backend), with a warning.
func (t *Target) Fence(ctx context.Context, stream string) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen > 0 && t.genStream == stream {
		return t.gen, nil
	}
	if err := t.ensureConn(ctx); err != nil {
		return 0, err
	}
	var pid uint32
	if err := t.conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return 0, fmt.Errorf("fence stream %q on target PostgreSQL at %s: %w", stream, t.addr, err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t.endFenceHolders(watchCtx, pid, stream)
	}()
	var gen int64
	err := t.conn.QueryRow(ctx, buildFenceBump(t.cfg.Schema), stream).Scan(&gen)
	stopWatch()
	<-watched
	if err != nil {
		return 0, fmt.Errorf("fence stream %q on target PostgreSQL at %s (%s): %w", stream, t.addr, fenceTable(t.cfg.Schema), err)
	}
	t.gen, t.genStream = gen, stream
	return gen, nil
}

// endFenceHolders waits while the backend pid, taking the fence, is
// blocked; past fenceWait it ends the sessions that block it: earlier
// sluice processes' batches (only they lock the fence row).
func (t *Target) endFenceHolders(ctx context.Context, pid uint32, stream string) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(fenceWait):
	}
	conn, err := pgx.ConnectConfig(ctx, t.connConfig)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, err := conn.Query(ctx, `SELECT b, pg_terminate_backend(b) FROM unnest(pg_blocking_pids($1)) AS b`, int32(pid))
		if err == nil {
			for rows.Next() {
				var b int32
				var ok bool
				if rows.Scan(&b, &ok) == nil {
					t.log.Warn("ended a session that held the stream's fence on the target: an earlier sluice's batch, left in flight when it stopped, which must not commit now",
						"stream", stream, "target", t.addr, "pid", b, "ended", ok)
				}
			}
			rows.Close()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// SetGeneration makes the target check stream's batches against gen, the
// generation its process took with Fence on another connection (a lane).
func (t *Target) SetGeneration(stream string, gen int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen, t.genStream = gen, stream
}

// fenceStatement checks, first in a batch, that stream is still at this
// process's generation.
func (t *Target) fenceStatement(stream string) statement {
	return statement{sql: buildFenceCheck(t.cfg.Schema), args: []any{stream, t.gen},
		what: fmt.Sprintf("fence check of stream %q", stream)}
}

// fenced turns a failed fence check into apply.ErrFenced.
func fenced(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, fenceMark) {
		msg := pgErr.Message[strings.Index(pgErr.Message, fenceMark)+len(fenceMark):]
		return fmt.Errorf("%w: %s: this process stops (only one sluice may run a stream; its batches would commit over the newer one's)", apply.ErrFenced, strings.TrimSuffix(msg, `"`))
	}
	return nil
}
