package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/connstr"
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
	// MultiStatements says whether the server accepts multi-statement
	// packets; nil detects it at Open by trying.
	MultiStatements *bool
	// AllowCollationMerge accepts key columns (the source's primary key,
	// the target's unique indexes) whose target collation holds as equal
	// values the source keeps apart: case-, accent- or
	// trailing-space-insensitive MySQL collations (utf8mb4_bin is PAD
	// SPACE), nondeterministic PostgreSQL ones. Otherwise Preflight refuses
	// them: rows whose keys differ only so would be one target row, the
	// second upsert silently overwriting the first. Set it only when the
	// source never holds two such keys.
	AllowCollationMerge bool
	Logger              *slog.Logger
	// Dial, when set, opens the target's network connections instead of
	// the driver's dialer (e.g. to count round trips).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// CheckOnly opens the target for a preflight: the checks run, but the
	// checkpoint table is not created.
	CheckOnly bool
	// Prefetch is read in the setup packet (see apply.Prefetch).
	Prefetch apply.Prefetch
}

// Target writes batches to one MySQL-family database over one connection.
// Its methods may be called from several goroutines; they take turns.
type Target struct {
	cfg Config
	// wire counts the bytes written to the target (see chain.go).
	wire   wireCount
	log    *slog.Logger
	dcfg   *mysql.Config
	addr   string // host:port, for messages
	server string // "MySQL" or "MariaDB", for messages
	multi  bool
	// implicitTx: without multi-statements, the pipelined mode runs the
	// session with autocommit = 0, so that a batch's first statement opens
	// its transaction and START TRANSACTION costs no round trip. Reads end
	// their implicit transaction with ROLLBACK.
	implicitTx bool

	mu        sync.Mutex
	db        *sql.DB
	conn      *sql.Conn // nil after a failure that left it unusable
	connID    int64     // CONNECTION_ID() of conn
	database  string
	maxPacket int // max_allowed_packet
	tables    map[sluice.TableName]*tableDesc
	// known holds the source's description of every table described
	// since the target opened, kept when tables is cleared: a cascade's
	// path describes a table again by it (see pathTable).
	known    map[sluice.TableName]*sluice.Table
	warnings apply.Warnings // of the tables' checks
	// setup asks ensureConn to send the setup packet on the first
	// connection (see setupPacket); pre is what it prefetched, until used.
	setup bool
	pre   *prefetched
	// gen is the generation of genStream this process holds (see Fence);
	// 0: its batches are not checked.
	gen       int64
	genStream string
	// unknown are the checkpoints of the batches whose commit outcome a
	// failure left unknown (see afterFailure), until the next apply asks
	// the target (resolveUnknown).
	unknown []sluice.Checkpoint
}

var _ apply.Target = (*Target)(nil)

// Open connects to the target and makes sure sluice's checkpoint table
// exists in the target database. dsnOrURL is a mysql://user:pass@host:port/db
// URL or a go-sql-driver DSN (user:pass@tcp(host:port)/db?params).
func Open(ctx context.Context, dsnOrURL string, cfg Config) (*Target, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Mode != Pipelined && cfg.Mode != PerRow {
		return nil, fmt.Errorf("open target: unknown apply %v", cfg.Mode)
	}
	dc, err := connstr.ParseMySQL(dsnOrURL)
	if err != nil {
		return nil, fmt.Errorf("target connection string: %w", err)
	}
	if dc.DBName == "" {
		return nil, fmt.Errorf("target connection string names no database: add /dbname (sluice keeps its checkpoint table there)")
	}
	dc.InterpolateParams = false // literals are built here
	dc.ParseTime = true
	dc.Loc = time.UTC
	if dc.Timeout == 0 {
		dc.Timeout = 10 * time.Second
	}
	dc.Collation = "utf8mb4_general_ci"
	if dc.Params == nil {
		dc.Params = map[string]string{}
	}
	dc.Params["time_zone"] = "'+00:00'"
	dc.Params["sql_mode"] = "'" + sqlMode + "'"
	dc.Params["foreign_key_checks"] = "0" // see the package doc
	t := &Target{cfg: cfg, log: cfg.Logger, dcfg: dc, addr: dc.Addr, server: "MySQL",
		tables: map[sluice.TableName]*tableDesc{}, known: map[sluice.TableName]*sluice.Table{}}
	dc.DialFunc = t.wire.dial(cfg.Dial)
	t.multi = cfg.MultiStatements == nil || *cfg.MultiStatements
	// The driver's own packet limit: high, so that it does not ask the
	// server (a round trip); the statements built here keep under the
	// server's, which ensureConn reads.
	dc.MaxAllowedPacket = 1 << 30
	if t.multi {
		// One packet for the session check, the checkpoint table and the
		// stream's first requests; where it fails, the sequential set-up
		// below meets the failure as before.
		t.setup = true
		err := t.openDB(ctx)
		t.setup = false
		if err == nil {
			return t, nil
		}
		if !errors.Is(err, errSetupPacket) {
			return nil, err
		}
		t.log.Debug("setup packet failed; setting up one statement at a time", "err", err)
		t.closeDB()
		t.pre = nil
	}
	if err := t.openDB(ctx); err != nil {
		return nil, err
	}
	if cfg.MultiStatements == nil {
		// Detect: a proxy or server that refuses multi-statement packets
		// answers this with an error.
		if _, err := t.conn.ExecContext(ctx, "DO 1; DO 2"); err != nil {
			var me *mysql.MySQLError
			if !errors.As(err, &me) {
				t.closeDB()
				return nil, fmt.Errorf("cannot reach target %s at %s: %w", t.server, t.addr, err)
			}
			t.log.Info("target refuses multi-statement packets; one round trip per statement", "err", err)
			t.closeDB()
			t.multi = false
			if err := t.openDB(ctx); err != nil {
				return nil, err
			}
		}
	}
	if cfg.CheckOnly {
		return t, nil
	}
	if err := t.setupCheckpoint(ctx); err != nil {
		t.closeDB()
		return nil, fmt.Errorf("target %s at %s: create checkpoint table %s.%s: %w (create it as a privileged user or grant CREATE and ALTER on the database)",
			t.server, t.addr, t.database, checkpointTable, err)
	}
	return t, nil
}

// Close closes the connection.
func (t *Target) Close(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.db == nil {
		return nil
	}
	var err error
	if t.conn != nil {
		err = t.conn.Close()
		t.conn = nil
	}
	if cerr := t.db.Close(); err == nil {
		err = cerr
	}
	t.db = nil
	return err
}

// MeasuredRTT returns, once, the duration of Open's setup packet when it
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
	if err := t.conn.PingContext(ctx); err != nil {
		t.discard()
		return 0, fmt.Errorf("ping target %s at %s: %w", t.server, t.addr, err)
	}
	return time.Since(start), nil
}

// Apply writes b and cp in one transaction: one round trip with
// multi-statement packets (more only when the batch exceeds
// max_allowed_packet), 3 + one per coalesced statement without them, and
// one per row operation plus three in PerRow mode.
func (t *Target) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
	return t.apply(ctx, b, cp, false, 0, nil)
}

// ApplyAfter is Apply for a lane's transaction that may be sent while the
// one before it is in flight on another connection (see
// apply.ErrChainBroken): its first statement after the fence check locks
// the lane's checkpoint row and, when after is not zero, fails unless the
// row holds sequence after. The row must exist: the stream chains only
// after a lane's first commit. written, when not nil, is called once the
// packet holding the lock is written (the server runs a multi-statement
// packet once all of it has arrived).
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
		var me *mysql.MySQLError
		if errors.As(err, &me) || ctx.Err() != nil {
			return err // refused by the server (authentication, ...): not transient
		}
		return &apply.RetryableError{Err: err}
	}
	if err := t.resolveUnknown(ctx); err != nil {
		return err
	}
	// A schema change's statements run first, each committing on its own
	// (MySQL's DDL commits): a replay of the batch runs statements that
	// find their work done (see apply.Batch.DDL).
	for _, q := range b.DDL {
		if _, err := t.conn.ExecContext(ctx, q); err != nil {
			err = fmt.Errorf("schema change of %s on target %s at %s: %s: %w", b.Schema.Table.Name, t.server, t.addr, q, err)
			if connLost(err) {
				t.discard()
				return classify(err, true)
			}
			if re := classify(err, false); re != err {
				return re // killed or timed out: worth retrying
			}
			return &sluice.TableError{Table: b.Schema.Table.Name, Err: err}
		}
		clear(t.tables) // described again, as the statement left it
	}
	if b.Schema != nil {
		// The changes after a schema change use its new definition; so
		// must a later cascade's path through the table.
		t.known[b.Schema.Table.Name] = b.Schema.Table
	}
	stmts, err := t.plan(ctx, b, t.cfg.Mode == PerRow)
	if err != nil {
		if t.conn == nil {
			return classify(err, true)
		}
		return err
	}
	if cp.Stream != "" {
		stmts = append(stmts, statement{sql: buildCheckpointUpsert(cp), what: fmt.Sprintf("checkpoint of stream %q", cp.Stream)})
		if chain {
			what := fmt.Sprintf("check that checkpoint %d of stream %q, lane %d, committed", after, cp.Stream, cp.Lane)
			if after == 0 {
				what = fmt.Sprintf("lock of lane %d's checkpoint row of stream %q", cp.Lane, cp.Stream)
			}
			stmts = append([]statement{{sql: chainCheck(cp.Stream, cp.Lane, after), what: what, chain: true}}, stmts...)
		}
		if t.gen > 0 && cp.Stream == t.genStream {
			stmts = append([]statement{{sql: fenceCheck(cp.Stream, t.gen), what: fmt.Sprintf("fence check of stream %q", cp.Stream), fence: true}}, stmts...)
		}
	}
	start := time.Now()
	if t.multi && t.cfg.Mode == Pipelined {
		err = t.applyMulti(ctx, stmts, written)
	} else {
		err = t.applyEach(ctx, stmts, written)
	}
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1054 || me.Number == 1146) {
			// Unknown column or table: the target changed since it was
			// checked. Check it again next time so the error names the fix.
			clear(t.tables)
		}
		return t.afterFailure(ctx, err, cp, b)
	}
	t.log.Debug("applied batch", "changes", b.Changes, "rows", b.Rows, "statements", len(stmts),
		"mode", t.cfg.Mode, "multi", t.multi, "took", time.Since(start))
	return nil
}

// stepVar is the session variable a multi-statement packet sets before each
// statement, so that after a failure the index of the failing statement can
// be read back: the server stops at the first error and the driver reports
// only that error.
const stepVar = "@sluice_step"

// applyMulti sends START TRANSACTION, the statements and COMMIT as one
// COM_QUERY (several when they exceed max_allowed_packet), each statement
// preceded by SET @sluice_step = i. The driver reads every result of the
// packet and returns the first error; the server executes nothing after it,
// so COMMIT never runs after a failure and the transaction is left open, to
// be rolled back by afterFailure on the same connection.
func (t *Target) applyMulti(ctx context.Context, stmts []statement, written func()) error {
	packets := multiPackets(stmts, t.maxPacket-64)
	for i, p := range packets {
		if i == 0 && written != nil {
			t.wire.notify(len(p), written)
		}
		_, err := t.conn.ExecContext(ctx, p)
		if i == 0 && written != nil {
			t.wire.flush()
		}
		if err != nil {
			return &stepError{err: err, stmts: stmts, step: -1}
		}
	}
	return nil
}

// multiPackets joins the transaction's statements, each after the SET of
// its step (unless it follows the one before), into packets of at most
// limit bytes (one statement longer than that goes alone). Each packet is
// written once into a buffer of its final size: a batch's SQL is megabytes,
// and joining it piece by piece copied it several times over (with the
// statements' own building, about a tenth of sluice's CPU on a MariaDB
// backlog).
func multiPackets(stmts []statement, limit int) []string {
	type piece struct{ step, sql string }
	pieces := make([]piece, 0, len(stmts)+2)
	pieces = append(pieces, piece{"SET " + stepVar + " = 0;\n", "START TRANSACTION"})
	for i, s := range stmts {
		if s.follows {
			pieces = append(pieces, piece{"", s.sql})
			continue
		}
		pieces = append(pieces, piece{"SET " + stepVar + " = " + strconv.Itoa(i+1) + ";\n", s.sql})
	}
	pieces = append(pieces, piece{"SET " + stepVar + " = " + strconv.Itoa(len(stmts)+1) + ";\n", "COMMIT"})
	var packets []string
	first, size := 0, 0
	pack := func(end int) {
		var b strings.Builder
		b.Grow(size)
		for j := first; j < end; j++ {
			if b.Len() > 0 {
				b.WriteString(";\n")
			}
			b.WriteString(pieces[j].step)
			b.WriteString(pieces[j].sql)
		}
		packets = append(packets, b.String())
	}
	for j, p := range pieces {
		n := len(p.step) + len(p.sql)
		if size > 0 && size+n+2 > limit {
			pack(j)
			first, size = j, 0
		}
		if size > 0 {
			size += 2
		}
		size += n
	}
	pack(len(pieces))
	return packets
}

// applyEach runs START TRANSACTION, each statement and COMMIT as separate
// round trips on the applier's connection.
func (t *Target) applyEach(ctx context.Context, stmts []statement, written func()) error {
	if !t.implicitTx {
		if _, err := t.conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return &stepError{err: err, stmts: stmts, step: 0}
		}
	}
	for i, s := range stmts {
		if _, err := t.conn.ExecContext(ctx, s.sql); err != nil {
			return &stepError{err: err, stmts: stmts, step: i + 1}
		}
		if s.chain && written != nil {
			written()
		}
	}
	if _, err := t.conn.ExecContext(ctx, "COMMIT"); err != nil {
		return &stepError{err: err, stmts: stmts, step: len(stmts) + 1}
	}
	return nil
}

// afterFailure leaves the connection usable (rolled back) or drops it, and
// decides what a failed Apply means. When the connection broke after the
// batch was sent, COMMIT may have run; the checkpoint row written in the same
// transaction tells, so the caller never sees an error for a committed batch.
func (t *Target) afterFailure(ctx context.Context, applyErr error, cp sluice.Checkpoint, b *apply.Batch) error {
	var se *stepError
	errors.As(applyErr, &se)
	lost := connLost(applyErr) || ctx.Err() != nil
	if !lost {
		// ROLLBACK on the same connection before it is used again, and ask
		// which statement of the packet failed.
		if _, err := t.conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			lost = true
		} else if se != nil && se.step < 0 {
			var step sql.NullInt64
			if err := t.conn.QueryRowContext(ctx, "SELECT "+stepVar).Scan(&step); err == nil && step.Valid {
				se.step = int(step.Int64)
			}
		}
	}
	if se != nil && se.step < 0 {
		var names []string
		for _, part := range b.Parts() {
			for _, tb := range part.Tables {
				names = append(names, tb.Table.Name.String())
			}
		}
		se.candidates = " to tables " + strings.Join(names, ", ")
	}
	if !lost {
		if fe := t.fencedError(se, applyErr); fe != nil {
			return fe
		}
		if ce := chainError(se, applyErr); ce != nil {
			return ce
		}
		if ce := t.constraintError(se, applyErr); ce != nil {
			return ce
		}
		return classify(applyErr, false)
	}
	oldID := t.connID
	t.discard()
	if ctx.Err() != nil {
		return applyErr
	}
	if errors.Is(applyErr, driver.ErrBadConn) {
		// The driver found the connection dead before writing anything.
		return &apply.RetryableError{Err: applyErr}
	}
	if err := t.ensureConn(ctx); err != nil {
		if cp.Stream != "" {
			t.unknown = append(t.unknown, cp)
		}
		return classify(fmt.Errorf("%w (commit outcome unknown: reconnect failed: %v)", applyErr, err), true)
	}
	killed := t.wasKilled(ctx, oldID)
	if cp.Stream != "" {
		got, err := t.readCheckpoints(ctx, cp.Stream)
		if t.implicitTx {
			t.conn.ExecContext(ctx, "ROLLBACK")
		}
		if err != nil {
			t.discard()
			t.unknown = append(t.unknown, cp)
			return &apply.RetryableError{Err: fmt.Errorf("%w (commit outcome unknown: %v)", applyErr, err), Killed: killed}
		}
		if apply.Committed(got, cp) {
			t.log.Warn("connection lost after commit; the batch is committed", "stream", cp.Stream, "lane", cp.Lane, "seq", cp.Seq, "err", applyErr)
			return nil
		}
	}
	if re, ok := classify(applyErr, true).(*apply.RetryableError); ok {
		re.Killed = re.Killed || killed
		return re
	}
	return &apply.RetryableError{Err: applyErr, Killed: killed}
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
	if t.implicitTx {
		t.conn.ExecContext(ctx, "ROLLBACK")
	}
	if err != nil {
		lost := connLost(err)
		if lost {
			t.discard()
		}
		return classify(fmt.Errorf("read stream %q checkpoint to learn whether its batch of checkpoint seq %d committed (a lost connection left it unknown): %w", u.Stream, u.Seq, err), lost)
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
