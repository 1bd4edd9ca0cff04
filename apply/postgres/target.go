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

	mu   sync.Mutex
	conn *pgx.Conn // nil after a failure that left it unusable
	// params holds the arrays of the batch being planned and sent (see
	// paramArena).
	params   paramArena
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

// Pooled reports whether the target is reached through a connection
// pooler (PgBouncer or alike).
func (t *Target) Pooled() bool { return t.pooled }

// ReplicaRole reports whether batches run with session_replication_role =
// replica (target triggers and foreign-key checks do not fire).
func (t *Target) ReplicaRole() bool { return t.replicaRole }

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
