package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// setup creates sluice's schema and checkpoint table if needed, in one round
// trip that also learns the database name for messages.
func (t *Target) setup(ctx context.Context) error {
	b := &pgx.Batch{}
	for _, s := range buildCheckpointDDL(t.cfg.Schema) {
		if !t.cfg.CheckOnly {
			b.Queue(s)
		}
	}
	if !t.cfg.CheckOnly {
		b.Queue(buildFenceDDL(t.cfg.Schema))
	}
	// The statements of one pipeline run in one implicit transaction, so
	// the DO block's transaction-local setting is still there for the
	// SELECT. has_parameter_privilege exists from PostgreSQL 15 on, hence
	// the EXECUTE.
	b.Queue(`DO $$
DECLARE ok boolean;
BEGIN
	SELECT rolsuper INTO ok FROM pg_roles WHERE rolname = current_user;
	IF NOT coalesce(ok, false) AND current_setting('server_version_num')::int >= 150000 THEN
		EXECUTE 'SELECT has_parameter_privilege(''session_replication_role'', ''SET'')' INTO ok;
	END IF;
	PERFORM set_config('sluice.may_set_replica_role', coalesce(ok, false)::text, true);
END $$`)
	var mayReplica string
	var backendPID uint32
	b.Queue("SELECT current_database(), current_setting('sluice.may_set_replica_role'), pg_backend_pid()").QueryRow(func(r pgx.Row) error {
		return r.Scan(&t.database, &mayReplica, &backendPID)
	})
	n := b.Len()
	pre := &prefetched{}
	t.queuePrefetch(b, pre)
	start := time.Now()
	err := t.conn.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07") {
		// Two sluice processes racing through CREATE ... IF NOT EXISTS: one
		// of them loses on the catalog's unique index. The table exists now.
		pre = &prefetched{}
		start = time.Now()
		err = t.conn.SendBatch(ctx, b).Close()
	}
	if err != nil && b.Len() > n {
		// A prefetch query failed: set up without them, so that the error
		// surfaces from the request that needs it, with its own message.
		pre = nil
		b.QueuedQueries = b.QueuedQueries[:n]
		err = t.conn.SendBatch(ctx, b).Close()
	}
	if pre != nil {
		if pre.gen > 0 {
			t.gen, t.genStream = pre.gen, pre.stream
		}
		pre.havePlan = pre.stream != ""
		pre.rtt, pre.at = time.Since(start), time.Now()
		t.pre = pre
	}
	if err != nil {
		return fmt.Errorf("target PostgreSQL at %s: create checkpoint table %s.checkpoint: %w (create it as a privileged user or grant CREATE on the database)",
			t.addr, t.cfg.Schema, err)
	}
	if pid := t.conn.PgConn().PID(); pid != backendPID {
		// The backend key the connection got at startup is not the
		// backend's: something between sluice and the server answered the
		// startup itself.
		t.pooled = true
		t.log.Info("the target PostgreSQL is reached through a connection pooler (PgBouncer or alike): sluice keeps no session state across transactions, so transaction pooling is fine",
			"target", t.addr, "database", t.database, "startup_pid", pid, "backend_pid", backendPID)
	}
	t.begin = []string{"BEGIN", "SET LOCAL TimeZone = 'UTC'", "SET LOCAL DateStyle = 'ISO, MDY'", "SET LOCAL IntervalStyle = 'postgres'"}
	t.replicaRole = mayReplica == "true" && !t.cfg.NoReplicaRole
	if t.replicaRole {
		t.begin = append(t.begin, "SET LOCAL session_replication_role = replica")
	}
	return nil
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
// stream, one per lane that wrote one, in lane order (none when it has
// none).
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
	rows, err := t.conn.Query(ctx, buildCheckpointSelect(t.cfg.Schema), stream)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint of stream %q from %s.checkpoint: %w", stream, t.cfg.Schema, err)
	}
	return t.scanCheckpoints(rows, stream)
}

// scanCheckpoints reads the rows of buildCheckpointSelect.
func (t *Target) scanCheckpoints(rows pgx.Rows, stream string) ([]sluice.Checkpoint, error) {
	var cps []sluice.Checkpoint
	for rows.Next() {
		cp := sluice.Checkpoint{Stream: stream}
		var seq, applied int64
		var pos, last string
		err := rows.Scan(&cp.Lane, &seq, &pos, &applied, &cp.Time, &last, &cp.Lanes, &cp.Routing)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("read checkpoint of stream %q from %s.checkpoint: %w", stream, t.cfg.Schema, err)
		}
		if cp.Position, err = sluice.ParsePosition(pos); err == nil {
			cp.Last, err = sluice.ParsePosition(last)
		}
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("read checkpoint of stream %q, lane %d: %w", stream, cp.Lane, err)
		}
		cp.Seq, cp.Applied = uint64(seq), uint64(applied)
		cps = append(cps, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read checkpoint of stream %q from %s.checkpoint: %w", stream, t.cfg.Schema, err)
	}
	return cps, nil
}

// checkpointStatement records cp in its lane's row.
func (t *Target) checkpointStatement(cp sluice.Checkpoint) statement {
	var ts any
	if !cp.Time.IsZero() {
		ts = cp.Time.UTC().Format("2006-01-02 15:04:05.999999Z07:00")
	}
	last := cp.Last
	if last.IsZero() {
		last = cp.Position
	}
	var routing any
	if cp.Routing != "" {
		routing = cp.Routing
	}
	return statement{
		sql: t.cpSQL,
		args: []any{cp.Stream, strconv.Itoa(cp.Lane), strconv.FormatUint(cp.Seq, 10), cp.Position.String(),
			strconv.FormatUint(cp.Applied, 10), ts, last.String(), strconv.Itoa(max(cp.Lanes, 1)), routing},
		what: fmt.Sprintf("checkpoint of stream %q", cp.Stream),
	}
}
