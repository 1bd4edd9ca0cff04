// Package postgres is the PostgreSQL apply target. In its default,
// pipelined mode a batch costs one network round trip whatever its size:
// BEGIN, one multi-row statement per table and operation, the checkpoint
// upsert and COMMIT go to the server in one write with a single Sync, and
// their results come back in one read.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// Mode chooses how a batch is sent (see apply.Mode).
type Mode = apply.Mode

const (
	Pipelined = apply.Pipelined
	PerRow    = apply.PerRow
)

// Config configures a Target.
type Config struct {
	Mode Mode
	// Schema is sluice's own schema on the target, holding the checkpoint
	// table. Default "sluice".
	Schema string
	Logger *slog.Logger
	// Dial, when set, opens the target's network connections instead of
	// the default dialer (e.g. to count round trips).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// NoReplicaRole keeps the target's triggers and foreign-key checks
	// running for sluice's writes. By default, where the user may set it
	// (a superuser, or GRANT SET ON PARAMETER session_replication_role),
	// each batch runs with session_replication_role = replica, as
	// PostgreSQL's own logical replication applies changes: ordinary
	// triggers and the foreign-key triggers do not fire, because the
	// source already ran them and their effects are among the changes.
	NoReplicaRole bool
	// AllowCollationMerge accepts key columns (the source's primary key,
	// the target's unique indexes) whose target collation holds as equal
	// values the source keeps apart: case-, accent- or
	// trailing-space-insensitive MySQL collations (utf8mb4_bin is PAD
	// SPACE), nondeterministic PostgreSQL ones. Otherwise Preflight refuses
	// them: rows whose keys differ only so would be one target row, the
	// second upsert silently overwriting the first. Set it only when the
	// source never holds two such keys.
	AllowCollationMerge bool
	// CheckOnly opens the target for a preflight: the checks run, but
	// sluice's schema and checkpoint table are not created.
	CheckOnly bool
	// Prefetch is read in the setup round trip (see apply.Prefetch).
	Prefetch apply.Prefetch
}

// Target writes batches to one PostgreSQL database over one connection. Its
// methods may be called from several goroutines; they take turns.
type Target struct {
	cfg        Config
	log        *slog.Logger
	connConfig *pgx.ConnConfig
	addr       string // host:port, for messages

	mu       sync.Mutex
	conn     *pgx.Conn // nil after a failure that left it unusable
	database string
	tables   map[sluice.TableName]*tableDesc
	// known holds the source's description of every table described
	// since the target opened, kept when tables is cleared: a cascade's
	// path describes a table again by it (see pathTable).
	known    map[sluice.TableName]*sluice.Table
	warnings apply.Warnings // of the tables' checks
	cpSQL    string
	// begin opens a batch's transaction: BEGIN, and where the user may
	// set it, session_replication_role = replica for the transaction.
	begin []string
	// replicaRole is set when batches run with session_replication_role
	// = replica (see Config.NoReplicaRole).
	replicaRole bool
	// pre is what setup prefetched, until used.
	pre *prefetched
	// pooled is set when a connection pooler stands between sluice and
	// the server (see setup).
	pooled bool
	// unknown are the checkpoints of the batches whose commit outcome a
	// failure left unknown (see afterFailure), until the next apply asks
	// the target (resolveUnknown).
	unknown []sluice.Checkpoint
	// gen is the generation of genStream this process holds (see Fence);
	// 0: its batches are not checked.
	gen       int64
	genStream string
}

var _ apply.Target = (*Target)(nil)

// tableDesc is a target table checked against one source description, with
// the SQL built for it so far.
type tableDesc struct {
	src *sluice.Table
	// merge is the allowMerge the description was checked with.
	merge   bool
	display string      // schema.table as resolved on the target
	ident   string      // quoted, qualified name used in SQL
	cols    []sqlColumn // aligned with src.Columns
	// generated marks the columns (aligned with src.Columns) the target
	// generates: never written, the target computes them from the
	// others. written holds the indexes of the others, in column order.
	generated []bool
	written   []int
	// warnings are what the check found that does not stop the stream.
	warnings []string
	// deletes and upserts are the statements built so far, by parameter
	// kinds (see kindsKey): deletes by the key columns' kinds, upserts by
	// the present columns' mask with their kinds.
	deletes map[string]string
	upserts map[string]string
}

// Open connects to the target and makes sure sluice's checkpoint table
// exists.
func Open(ctx context.Context, connString string, cfg Config) (*Target, error) {
	if cfg.Schema == "" {
		cfg.Schema = "sluice"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Mode != Pipelined && cfg.Mode != PerRow {
		return nil, fmt.Errorf("open target: unknown apply %v", cfg.Mode)
	}
	pc, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("target connection string: %w", err)
	}
	// Exec mode sends each statement as Parse/Bind/Execute of an unnamed
	// statement: no prepare round trips and no statement cache growing with
	// every (table, column set) shape. Parameters go as text, which is what
	// we have.
	pc.DefaultQueryExecMode = pgx.QueryExecModeExec
	pc.StatementCacheCapacity = 0
	pc.DescriptionCacheCapacity = 0
	if cfg.Dial != nil {
		pc.DialFunc = cfg.Dial
	}
	// The settings values are written under (TimeZone: the source sends
	// timestamptz text with an explicit offset, which is exact in any zone,
	// but a value without one would follow the server's zone; DateStyle
	// ISO reads dates as the source prints them by default without an
	// MDY/DMY guess; IntervalStyle postgres matches the source's default
	// interval output) are set with SET LOCAL inside each transaction (see
	// setup), not in the startup packet or the session: a pooler in
	// transaction mode (PgBouncer) refuses startup parameters it does not
	// track, and hands each transaction whatever server connection is free.
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = "sluice"
	}
	t := &Target{
		cfg:        cfg,
		log:        cfg.Logger,
		connConfig: pc,
		addr:       net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))),
		tables:     map[sluice.TableName]*tableDesc{},
		known:      map[sluice.TableName]*sluice.Table{},
		cpSQL:      buildCheckpointUpsert(cfg.Schema),
	}
	if err := t.connect(ctx); err != nil {
		return nil, err
	}
	if err := t.setup(ctx); err != nil {
		t.conn.Close(ctx)
		return nil, err
	}
	return t, nil
}

// connect opens the connection, turning the failures a user can fix into
// messages that say how.
func (t *Target) connect(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, t.connConfig)
	if err == nil {
		t.conn = conn
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01": // invalid_password
			return fmt.Errorf("target PostgreSQL at %s: authentication failed for user %q: check the user and password in the connection string: %w",
				t.addr, t.connConfig.User, err)
		case "28000": // invalid_authorization_specification: pg_hba.conf
			return fmt.Errorf("target PostgreSQL at %s rejected user %q: allow the user in pg_hba.conf or fix the connection string: %w",
				t.addr, t.connConfig.User, err)
		case "3D000": // invalid_catalog_name
			return fmt.Errorf("target PostgreSQL at %s: database %q does not exist: create it or fix the connection string: %w",
				t.addr, t.connConfig.Database, err)
		}
	}
	if strings.Contains(err.Error(), "server refused TLS connection") {
		return fmt.Errorf("target PostgreSQL at %s does not accept TLS, which the connection string's sslmode requires: enable ssl on the server, or use sslmode=prefer (or disable) if the link may go unencrypted: %w",
			t.addr, err)
	}
	return fmt.Errorf("cannot reach target PostgreSQL at %s: %w", t.addr, err)
}

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

// Pooled reports whether the target is reached through a connection
// pooler (PgBouncer or alike).
func (t *Target) Pooled() bool { return t.pooled }

// ReplicaRole reports whether batches run with session_replication_role =
// replica (target triggers and foreign-key checks do not fire).
func (t *Target) ReplicaRole() bool { return t.replicaRole }

// ensureConn reconnects after a failure closed the connection.
func (t *Target) ensureConn(ctx context.Context) error {
	if t.conn != nil && !t.conn.IsClosed() {
		return nil
	}
	t.conn = nil
	return t.connect(ctx)
}

// reading runs f, which only reads, and when the connection turns out to
// have died (a restart of the server, an idle link dropped by a NAT) runs it
// once more on a fresh connection.
func (t *Target) reading(ctx context.Context, f func() error) error {
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	err := f()
	if err == nil || !t.conn.IsClosed() || ctx.Err() != nil {
		return err
	}
	t.conn = nil
	if cerr := t.connect(ctx); cerr != nil {
		return fmt.Errorf("%w (reconnect: %v)", err, cerr)
	}
	return f()
}

// Close closes the connection.
func (t *Target) Close(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == nil {
		return nil
	}
	err := t.conn.Close(ctx)
	t.conn = nil
	return err
}

// MeasuredRTT returns, once, the duration of Open's setup round trip when it
// was moments ago: the link's round trip, measured without another one.
func (t *Target) MeasuredRTT() (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pre
	if p == nil || p.rtt <= 0 {
		return 0, false
	}
	rtt := p.rtt
	p.rtt = 0
	return rtt, time.Since(p.at) < 10*time.Second
}

// Ping measures one round trip to the target.
func (t *Target) Ping(ctx context.Context) (time.Duration, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := t.conn.Ping(ctx); err != nil {
		return 0, fmt.Errorf("ping target PostgreSQL at %s: %w", t.addr, err)
	}
	return time.Since(start), nil
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

// statement is one data statement of a batch and what it does, for errors.
type statement struct {
	table *sluice.Table // nil for the checkpoint
	sql   string
	args  []any
	what  string // e.g. "upsert of 500 rows to public.orders"
	// keyChange marks an ordered key change, which fails when the row it
	// moves is missing.
	keyChange bool
	// inPlace marks an update of rows with values the source did not
	// send, which fails when one of them is missing (see buildUpdate).
	inPlace bool
	// chain marks the lock of a chained transaction (see ApplyAfter).
	chain bool
}

// stepError names the table of a batch's failing statement stmts[i] (none
// for begin, i < 0, and commit, i == len(stmts)) for the log's table field,
// and turns a violated unique, exclusion or foreign-key constraint into an
// *apply.ConstraintError: compacting a batch can break one that the
// source's order kept.
func (t *Target) stepError(stmts []statement, i int, err error) error {
	var st *statement
	if i >= 0 && i < len(stmts) && stmts[i].table != nil {
		st = &stmts[i]
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "23503" || pgErr.Code == "23P01") {
		ce := &apply.ConstraintError{Constraint: pgErr.ConstraintName, Detail: pgErr.Detail, Err: err}
		if pgErr.Detail != "" {
			ce.Err = fmt.Errorf("%w: %s", err, pgErr.Detail)
		}
		if st != nil {
			ce.Tables = append(ce.Tables, st.table.Name)
		}
		// The constraint's own table, when it is another of the stream's
		// (a foreign key's other side).
		for _, d := range t.tables {
			if d.display == pgErr.SchemaName+"."+pgErr.TableName && (st == nil || d.src.Name != st.table.Name) {
				ce.Tables = append(ce.Tables, d.src.Name)
			}
		}
		return ce
	}
	if st != nil && st.keyChange && errors.As(err, &pgErr) && pgErr.Code == "22012" {
		err = fmt.Errorf("%s: no row has the old key on the target, so the target differs from the source (a row the source had is missing): %w", st.what, err)
	}
	if st != nil && st.inPlace && errors.As(err, &pgErr) && pgErr.Code == "22012" {
		err = fmt.Errorf("apply %s: %w (the check's error: %w)", st.what, apply.ErrRowMissing, pgErr)
	}
	if st != nil {
		return &sluice.TableError{Table: st.table.Name, Err: err}
	}
	return err
}

// Apply writes b and cp in one transaction. In Pipelined mode that is one
// round trip; in PerRow mode it is one per row operation plus three.
func (t *Target) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	return t.apply(ctx, b, cp, false, 0, nil)
}

// ApplyAfter is Apply for a lane's transaction that may be sent while the
// one before it is in flight on another connection (see
// apply.ErrChainBroken): its first statement locks the lane's checkpoint
// row and, when after is not zero, checks that the row holds sequence
// after.
//
// written, when not nil, is called once the transaction's first statements
// are on their way to the target (a transaction chained after this one
// must reach the target after them).
func (t *Target) ApplyAfter(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint, after uint64, written func()) error {
	if cp.Stream == "" {
		return fmt.Errorf("apply after checkpoint %d: the batch has no checkpoint to chain on", after)
	}
	return t.apply(ctx, b, cp, true, after, written)
}

func (t *Target) apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint, chain bool, after uint64, written func()) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) || ctx.Err() != nil {
			return err // refused by the server (authentication, ...): not transient
		}
		// Unreachable for now (a restart, a network outage): worth retrying.
		return &apply.RetryableError{Err: err}
	}
	if err := t.resolveUnknown(ctx); err != nil {
		return err
	}
	if b.Schema != nil {
		// The changes after a schema change use its new definition; so
		// must a later cascade's path through the table.
		t.known[b.Schema.Table.Name] = b.Schema.Table
	}
	stmts, err := t.plan(ctx, b, t.cfg.Mode == PerRow)
	if err != nil {
		if t.conn == nil || t.conn.IsClosed() {
			t.conn = nil
			return classify(err, true)
		}
		return err
	}
	// A schema change's statements, in the transaction: they commit with
	// the checkpoint past the change, or not at all.
	if len(b.DDL) > 0 {
		ddl := make([]statement, len(b.DDL))
		for i, q := range b.DDL {
			ddl[i] = statement{table: b.Schema.Table, sql: q, what: "schema change of " + b.Schema.Table.Name.String() + ": " + q}
		}
		stmts = append(ddl, stmts...)
		clear(t.tables) // described again, as the statements leave them
	}
	if cp.Stream != "" {
		stmts = append(stmts, t.checkpointStatement(cp))
		if chain {
			stmts = append([]statement{t.chainStatement(cp, after)}, stmts...)
		}
		if t.gen > 0 && cp.Stream == t.genStream {
			stmts = append([]statement{t.fenceStatement(cp.Stream)}, stmts...)
		}
	}
	start := time.Now()
	if t.cfg.Mode == PerRow {
		err = t.applyPerRow(ctx, stmts, written)
	} else {
		err = t.pipeline(ctx, t.begin, stmts, written)
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "42") {
			// Syntax error or access rule violation: most likely the target
			// table changed since it was checked. Check it again next time
			// so that the error names the column and the fix.
			clear(t.tables)
		}
		return t.afterFailure(ctx, err, cp)
	}
	t.log.Debug("applied batch", "changes", b.Changes, "rows", b.Rows, "statements", len(stmts),
		"mode", t.cfg.Mode, "took", time.Since(start))
	return nil
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

// Pipelined mode queues BEGIN, the statements and COMMIT in one batch of
// the extended protocol: each query is Parse/Bind/Describe/Execute of the
// unnamed statement, one Sync follows the lot, and all of it goes in a
// single Write; the results are read back in order until ReadyForQuery.
// When a statement fails the server skips everything up to the Sync, so
// COMMIT never runs and the transaction is left aborted, to be rolled back
// by afterFailure. The batch is built at the protocol level, not through
// pgx.Batch, so that the rows' arrays go in binary (see paramKind).
//
// pipeline sends begin (none when the transaction is already open), stmts
// and COMMIT so. written, when not nil, is called once the batch is
// written.
func (t *Target) pipeline(ctx context.Context, begin []string, stmts []statement, written func()) error {
	pb := &pgconn.Batch{}
	for _, q := range begin {
		pb.ExecParams(q, nil, nil, nil, nil)
	}
	for i, s := range stmts {
		values, oids, formats, err := wireParams(s.args)
		if err != nil {
			return fmt.Errorf("apply %s: %w", pipelineStep(stmts, i), err)
		}
		pb.ExecParams(s.sql, values, oids, formats, nil)
	}
	pb.ExecParams("COMMIT", nil, nil, nil, nil)
	n := len(begin) + len(stmts) + 1
	mrr := t.conn.PgConn().ExecBatch(ctx, pb)
	if written != nil {
		written()
	}
	var failed error
	for i := range n {
		j := i - len(begin) // the statement's index in stmts
		if !mrr.NextResult() {
			err := mrr.Close()
			if err == nil {
				err = fmt.Errorf("%d results for %d queries", i, n)
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				failed = t.stepError(stmts, j, fmt.Errorf("apply %s: %w", pipelineStep(stmts, j), err))
			} else {
				failed = fmt.Errorf("apply batch of %d statements to target PostgreSQL at %s: %w", len(stmts), t.addr, err)
			}
			break
		}
		tag, err := mrr.ResultReader().Close()
		switch {
		case err != nil:
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				failed = t.stepError(stmts, j, fmt.Errorf("apply %s: %w", pipelineStep(stmts, j), err))
			} else {
				failed = fmt.Errorf("apply batch of %d statements to target PostgreSQL at %s: %w", len(stmts), t.addr, err)
			}
		case i == n-1 && tag.String() != "COMMIT":
			// A COMMIT of an aborted transaction reports ROLLBACK.
			failed = fmt.Errorf("apply: commit reported %q", tag.String())
		}
		if failed != nil {
			break
		}
	}
	if err := mrr.Close(); err != nil && failed == nil {
		failed = fmt.Errorf("apply: read pipeline results: %w", err)
	}
	return failed
}

// pipelineStep names stmts[i], or begin (i < 0) or commit.
func pipelineStep(stmts []statement, i int) string {
	switch {
	case i < 0:
		return "begin"
	case i >= len(stmts):
		return "commit"
	}
	return stmts[i].what
}

// applyPerRow runs each statement as its own round trip inside one
// transaction.
func (t *Target) applyPerRow(ctx context.Context, stmts []statement, written func()) error {
	// BEGIN and the transaction's settings in one simple query: per-row
	// apply pays a round trip per statement of the batch, not per setting.
	if _, err := t.conn.PgConn().Exec(ctx, strings.Join(t.begin, "; ")).ReadAll(); err != nil {
		return fmt.Errorf("apply begin: %w", err)
	}
	for i, s := range stmts {
		values, oids, formats, err := wireParams(s.args)
		if err != nil {
			return fmt.Errorf("apply %s: %w", s.what, err)
		}
		if _, err := t.conn.PgConn().ExecParams(ctx, s.sql, values, oids, formats, nil).Close(); err != nil {
			return t.stepError(stmts, i, fmt.Errorf("apply %s: %w", s.what, err))
		}
		if s.chain && written != nil {
			written()
		}
	}
	tag, err := t.conn.Exec(ctx, "COMMIT")
	if err != nil {
		return t.stepError(stmts, len(stmts), fmt.Errorf("apply commit: %w", err))
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("apply: commit reported %q", tag.String())
	}
	return nil
}

// afterFailure leaves the connection usable (rolled back) or drops it, and
// decides what a failed Apply means. When the connection broke after the
// batch was sent, COMMIT may have run; the checkpoint row written in the same
// transaction tells, so the caller never sees an error for a committed batch.
// Failures after which the same batch may simply be tried again (a killed
// transaction, a lost connection, a deadlock) come back as
// *apply.RetryableError: nothing of the batch is committed, and writes are
// idempotent should a lost COMMIT have run after all.
func (t *Target) afterFailure(ctx context.Context, applyErr error, cp sluice.Checkpoint) error {
	if t.conn != nil && !t.conn.IsClosed() {
		if t.conn.PgConn().TxStatus() == 'I' {
			return classify(applyErr, false)
		}
		if _, err := t.conn.Exec(ctx, "ROLLBACK"); err == nil {
			return classify(applyErr, false)
		}
		t.conn.Close(context.WithoutCancel(ctx))
	}
	t.conn = nil
	if ctx.Err() != nil {
		// Cancelled: the caller is stopping; the next Open reads the
		// checkpoint back.
		return applyErr
	}
	if pgconn.SafeToRetry(applyErr) || cp.Stream == "" {
		// Nothing was sent, or there is no checkpoint to ask.
		return classify(applyErr, true)
	}
	if err := t.connect(ctx); err != nil {
		t.unknown = append(t.unknown, cp)
		return classify(fmt.Errorf("%w (commit outcome unknown: reconnect failed: %v)", applyErr, err), true)
	}
	got, err := t.readCheckpoints(ctx, cp.Stream)
	if err != nil {
		t.unknown = append(t.unknown, cp)
		return classify(fmt.Errorf("%w (commit outcome unknown: %v)", applyErr, err), true)
	}
	if apply.Committed(got, cp) {
		t.log.Warn("connection lost after commit; the batch is committed", "stream", cp.Stream, "lane", cp.Lane, "seq", cp.Seq, "err", applyErr)
		return nil
	}
	return classify(applyErr, true)
}

// resolveUnknown asks the target, before a batch is applied after one
// whose commit outcome was left unknown, whether that one committed: if
// it did, the batch (its changes retried) is refused with
// apply.ErrCommittedBefore, since they must not be applied twice. An
// error reading the checkpoints is retryable, the outcome still unknown.
// The caller holds t.mu, with a connection.
func (t *Target) resolveUnknown(ctx context.Context) error {
	if len(t.unknown) == 0 {
		return nil
	}
	u := t.unknown[0]
	got, err := t.readCheckpoints(ctx, u.Stream)
	if err != nil {
		if t.conn.IsClosed() {
			t.conn = nil
		}
		return classify(fmt.Errorf("read stream %q checkpoint to learn whether its batch of checkpoint seq %d committed (a lost connection left it unknown): %w", u.Stream, u.Seq, err), true)
	}
	unknown := t.unknown
	t.unknown = nil
	for _, u := range unknown {
		// Exactly u: a lane's row past it means a transaction chained
		// after u committed, which proved u committed to the stream
		// already (it retries nothing then): the record of u is stale.
		if u.Stream == unknown[0].Stream && apply.Committed(got, u) {
			return fmt.Errorf("stream %q lane %d: %w (checkpoint seq %d, position %s): its changes are not applied again; the stream resumes from the target's checkpoint",
				u.Stream, u.Lane, apply.ErrCommittedBefore, u.Seq, u.Position)
		}
	}
	return nil
}

// TakeUnknown returns, and forgets, the checkpoints of the batches sent
// on this connection whose commit outcome a failure left unknown: the
// stream retries their changes on another connection (a lane's second
// one failed), which must ask the target first (KeepUnknown).
func (t *Target) TakeUnknown() []sluice.Checkpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.unknown
	t.unknown = nil
	return u
}

// KeepUnknown adds cps to the batches whose commit outcome is unknown,
// which the next apply asks the target about first (see TakeUnknown).
func (t *Target) KeepUnknown(cps []sluice.Checkpoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unknown = append(t.unknown, cps...)
}

// classify marks the errors after which the batch may be retried as is.
func classify(err error, connLost bool) error {
	if f := fenced(err); f != nil {
		return f
	}
	if c := chainBroken(err); c != nil {
		return c
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", // admin_shutdown: pg_terminate_backend, a transaction killer
			"57014", // query_canceled: statement_timeout, pg_cancel_backend
			"25P03", // idle_in_transaction_session_timeout
			"25P04": // transaction_timeout
			return &apply.RetryableError{Err: err, Killed: true}
		case "40001", "40P01", // serialization failure, deadlock
			"57P02", "57P03", // crash shutdown, cannot connect now
			"55P03": // lock_not_available (lock_timeout)
			return &apply.RetryableError{Err: err}
		}
		if strings.HasPrefix(pgErr.Code, "08") { // connection exception
			return &apply.RetryableError{Err: err}
		}
		if pgErr.Code == "42501" { // insufficient_privilege
			return fmt.Errorf("%w: the target user lacks a privilege sluice needs: GRANT SELECT, INSERT, UPDATE, DELETE (and TRUNCATE, if the source truncates) ON the stream's tables TO the user sluice connects as", err)
		}
	}
	if connLost {
		return &apply.RetryableError{Err: err}
	}
	return err
}

// plan turns a batch into statements: per compacted table its truncate,
// its moves in place (one statement each), its deletes, then its upserts
// grouped by the set of columns present; then the ordered changes, one
// statement each, in source order, each after the foreign-key actions it
// fired on the source (cascade.go); part after part (apply.Batch.Next).
func (t *Target) plan(ctx context.Context, b *apply.Batch, perRow bool) ([]statement, error) {
	return apply.AppendParts(nil, b, func(stmts []statement, part *apply.Batch) ([]statement, error) {
		return t.planPart(ctx, stmts, part, perRow)
	})
}

// planPart appends the statements of one part of a batch (see plan).
func (t *Target) planPart(ctx context.Context, stmts []statement, b *apply.Batch, perRow bool) ([]statement, error) {
	for _, tb := range b.Tables {
		d, err := t.describe(ctx, tb.Table)
		if err != nil {
			return nil, err
		}
		if tb.Truncate {
			stmts = append(stmts, d.truncateStatement())
		}
		for _, mv := range tb.Moves {
			st, err := d.keyChangeStatement(mv.Key, mv.Row)
			if err != nil {
				return nil, err
			}
			stmts = append(stmts, st)
		}
		stmts, err = d.appendDeletes(stmts, tb.Deletes, perRow)
		if err != nil {
			return nil, err
		}
		stmts, err = d.appendUpserts(stmts, tb.Upserts, perRow)
		if err != nil {
			return nil, err
		}
	}
	for i := range b.Ordered {
		c := &b.Ordered[i]
		d, err := t.describe(ctx, c.Table)
		if err != nil {
			return nil, err
		}
		fired := i < len(b.Cascades) && len(b.Cascades[i]) > 0
		if fired {
			if stmts, err = t.appendCascades(ctx, stmts, d, c, b.Cascades[i]); err != nil {
				return nil, err
			}
		}
		switch c.Op {
		case sluice.OpInsert:
			stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, true)
		case sluice.OpUpdate:
			switch {
			case c.Key != nil && !apply.KeysEqual(c.Key, c.Table.KeyOf(c.Row)) && fired && !apply.HasUnchanged(c.Row):
				// A key change whose actions sluice carried out just
				// before: a delete and an insert, as compaction writes
				// it, which a batch applied again survives (its actions
				// too find their rows by the old key's values).
				if stmts, err = d.appendDeletes(stmts, []sluice.Row{c.Key}, true); err == nil {
					stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, true)
				}
			case c.Key != nil && !apply.KeysEqual(c.Key, c.Table.KeyOf(c.Row)):
				var st statement
				st, err = d.keyChangeStatement(c.Key, c.Row)
				stmts = append(stmts, st)
			default:
				stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, true)
			}
		case sluice.OpDelete:
			stmts, err = d.appendDeletes(stmts, []sluice.Row{c.Key}, true)
		case sluice.OpTruncate:
			stmts = append(stmts, d.truncateStatement())
		}
		if err != nil {
			return nil, err
		}
	}
	return stmts, nil
}

func (d *tableDesc) truncateStatement() statement {
	return statement{table: d.src, sql: buildTruncate(d.ident), what: "truncate of " + d.display}
}

// keyChangeStatement updates the row at old in place to img, primary key
// included, leaving the columns img does not carry as they are.
func (d *tableDesc) keyChangeStatement(old, img sluice.Row) (statement, error) {
	if len(img) != len(d.cols) || len(old) != len(d.src.Key) {
		return statement{}, fmt.Errorf("apply key change in %s: row has %d values and key %d, want %d and %d",
			d.display, len(img), len(old), len(d.cols), len(d.src.Key))
	}
	var cols []sqlColumn
	var args []any
	for _, i := range d.written {
		if img[i].Unchanged {
			continue
		}
		cols = append(cols, d.cols[i])
		args = append(args, textArg(img[i]))
	}
	key := make([]sqlColumn, len(d.src.Key))
	for i, k := range d.src.Key {
		if old[i].Null || old[i].Unchanged || img[k].Null || img[k].Unchanged {
			return statement{}, fmt.Errorf("apply key change in %s: key %s has a NULL or missing value", d.display, d.src.FormatKey(old))
		}
		key[i] = d.cols[k]
		args = append(args, old[i].Text)
	}
	return statement{table: d.src, sql: buildKeyChange(d.ident, cols, key), args: args, keyChange: true,
		what: fmt.Sprintf("key change %s → %s in %s", d.src.FormatKey(old), d.src.FormatKey(d.src.KeyOf(img)), d.display)}, nil
}

// textArg is a value as a text parameter: nil for NULL.
func textArg(v sluice.Value) any {
	if v.Null {
		return nil
	}
	return v.Text
}

func (d *tableDesc) appendDeletes(stmts []statement, keys []sluice.Row, perRow bool) ([]statement, error) {
	if len(keys) == 0 {
		return stmts, nil
	}
	key := make([]sqlColumn, len(d.src.Key))
	for i, k := range d.src.Key {
		key[i] = d.cols[k]
	}
	for i, k := range keys {
		if len(k) != len(d.src.Key) {
			return nil, fmt.Errorf("apply delete to %s: key has %d values, want %d", d.display, len(k), len(d.src.Key))
		}
		for _, v := range k {
			if v.Null || v.Unchanged {
				return nil, fmt.Errorf("apply delete to %s: key %s has a NULL or missing value", d.display, d.src.FormatKey(k))
			}
		}
		if perRow {
			sql, args := d.deleteStatement(key, keys[i:i+1])
			stmts = append(stmts, statement{table: d.src, sql: sql, args: args,
				what: fmt.Sprintf("delete of %s from %s", d.src.FormatKey(k), d.display)})
		}
	}
	if !perRow {
		sql, args := d.deleteStatement(key, keys)
		stmts = append(stmts, statement{table: d.src, sql: sql, args: args,
			what: fmt.Sprintf("delete of %s from %s", rowCount(len(keys)), d.display)})
	}
	return stmts, nil
}

// deleteStatement is the statement deleting keys (of the key columns key)
// and its parameters; the statement is built once per set of parameter
// kinds.
func (d *tableDesc) deleteStatement(key []sqlColumn, keys []sluice.Row) (string, []any) {
	args, kinds := columnParams(keys, nil, key)
	cacheKey := kindsKey(nil, kinds)
	sql, ok := d.deletes[cacheKey]
	if !ok {
		for i := range key {
			key[i].Param = kinds[i]
		}
		sql = buildDelete(d.ident, key)
		d.deletes[cacheKey] = sql
	}
	return sql, args
}

// kindsKey is a statement cache key: the presence mask (nil: every column)
// with each present column's parameter kind in place of its '1'.
func kindsKey(mask []byte, kinds []paramKind) string {
	if mask == nil {
		b := make([]byte, len(kinds))
		for i, k := range kinds {
			b[i] = k.code()
		}
		return string(b)
	}
	b := []byte(string(mask))
	j := 0
	for i := range b {
		if b[i] == '1' {
			b[i] = kinds[j].code()
			j++
		}
	}
	return string(b)
}

func (d *tableDesc) appendUpserts(stmts []statement, rows []sluice.Row, perRow bool) ([]statement, error) {
	if len(rows) == 0 {
		return stmts, nil
	}
	// Group rows by the set of columns they carry, in first-seen order, so
	// that a row with unchanged columns SETs only the ones it has. Such a
	// row is updated in place (partial): it cannot be inserted.
	type group struct {
		mask    string
		present []int
		partial bool
		rows    []sluice.Row
	}
	var groups []*group
	byMask := map[string]*group{}
	mask := make([]byte, len(d.cols))
	for _, r := range rows {
		if len(r) != len(d.cols) {
			return nil, fmt.Errorf("apply upsert to %s: row has %d values, want %d", d.display, len(r), len(d.cols))
		}
		for i, v := range r {
			mask[i] = '1'
			if v.Unchanged || d.generated[i] {
				mask[i] = '0'
			}
		}
		for _, k := range d.src.Key {
			if r[k].Unchanged || r[k].Null {
				return nil, fmt.Errorf("apply upsert to %s: primary key column %s is NULL or missing", d.display, d.cols[k].Name)
			}
		}
		g := byMask[string(mask)]
		if g == nil {
			g = &group{mask: string(mask)}
			for i := range mask {
				if mask[i] == '1' {
					g.present = append(g.present, i)
				} else if !d.generated[i] {
					g.partial = true
				}
			}
			byMask[g.mask] = g
			groups = append(groups, g)
		}
		g.rows = append(g.rows, r)
	}
	for _, g := range groups {
		op := "upsert of %s to %s"
		if g.partial {
			op = "update of %s in %s, keeping the values the source did not send"
		}
		if perRow {
			for i := range g.rows {
				sql, args := d.upsertStatement(g.mask, g.present, g.partial, g.rows[i:i+1])
				stmts = append(stmts, statement{table: d.src, sql: sql, args: args, inPlace: g.partial,
					what: fmt.Sprintf(op, d.src.FormatKey(d.src.KeyOf(g.rows[i])), d.display)})
			}
			continue
		}
		which := rowCount(len(g.rows))
		if len(g.rows) == 1 {
			which = d.src.FormatKey(d.src.KeyOf(g.rows[0]))
		}
		sql, args := d.upsertStatement(g.mask, g.present, g.partial, g.rows)
		stmts = append(stmts, statement{table: d.src, sql: sql, args: args, inPlace: g.partial,
			what: fmt.Sprintf(op, which, d.display)})
	}
	return stmts, nil
}

// upsertStatement is the statement upserting rows, which carry the columns
// at the indexes in present (mask: '1' for those, '0' for the others), or
// with partial (some of the others are unsent values, not generated
// columns) updating them in place, and its parameters; the statement is
// built once per mask and set of parameter kinds (the mask tells partial).
func (d *tableDesc) upsertStatement(mask string, present []int, partial bool, rows []sluice.Row) (string, []any) {
	args, kinds := columnParams(rows, present, d.cols)
	cacheKey := kindsKey([]byte(mask), kinds)
	sql, ok := d.upserts[cacheKey]
	if !ok {
		cols := make([]sqlColumn, len(present))
		pos := make(map[int]int, len(present))
		for i, c := range present {
			cols[i] = d.cols[c]
			cols[i].Param = kinds[i]
			pos[c] = i
		}
		key := make([]int, len(d.src.Key))
		for i, k := range d.src.Key {
			key[i] = pos[k]
		}
		if partial {
			sql = buildUpdate(d.ident, cols, key)
		} else {
			sql = buildUpsert(d.ident, cols, key)
		}
		d.upserts[cacheKey] = sql
	}
	return sql, args
}

func rowCount(n int) string {
	if n == 1 {
		return "1 row"
	}
	return strconv.Itoa(n) + " rows"
}
