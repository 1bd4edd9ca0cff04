// Package mysql is the MySQL-family apply target: MySQL 8, MariaDB and
// Vitess (PlanetScale). Tested against MariaDB 10.11; it uses only SQL that
// MySQL 8, MariaDB 10.11 and vtgate all accept.
//
// # Round trips
//
// In the default, pipelined mode a batch is turned into a handful of
// multi-row statements per table — DELETE … WHERE pk IN (…) for the rows
// that end absent, INSERT … VALUES (…),(…) ON DUPLICATE KEY UPDATE with the
// full row image for the rows that end present, and a multi-row UPDATE in
// place for those whose image lacks values the source did not send (see
// buildUpdates) — followed by the checkpoint upsert. Where the server
// accepts multi-statement packets
// (CLIENT_MULTI_STATEMENTS, detected at Open by trying, or configured),
// START TRANSACTION, the statements, the checkpoint and COMMIT go as one
// COM_QUERY: one round trip per batch, whatever its size. Statements are
// split to stay under max_allowed_packet (read from the server); a batch
// larger than one packet becomes several packets of the same transaction,
// never several transactions. Without multi-statements each statement is
// its own round trip: 3 + the number of statements, independent of the
// number of rows. REPLACE is never used: it deletes and re-inserts, firing
// delete triggers and ON DELETE actions of foreign keys.
//
// Values are written as SQL literals built here, not as parameters: strings
// quoted for a session pinned to NO_BACKSLASH_ESCAPES (the only escape is a
// doubled quote; the mode is checked on every new connection), binary
// columns (BINARY, VARBINARY, BLOBs, BIT) as hex literals, numbers bare so
// that comparisons with integer keys are exact.
//
// # Session
//
// Every connection runs with time_zone '+00:00', sql_mode
// STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,NO_ENGINE_SUBSTITUTION,
// NO_AUTO_VALUE_ON_ZERO (strict: a value that does not fit is an error, never
// a truncation; zero dates are accepted as the source had them; an explicit
// 0 in an AUTO_INCREMENT column stays 0), and utf8mb4.
//
// # Foreign keys and triggers on the target
//
// Every session runs with foreign_key_checks = 0 (a session variable: no
// privilege needed), so the target's foreign keys neither check sluice's
// writes nor run their ON DELETE/ON UPDATE actions. A compacted batch
// applies its tables one after another, a child before its parent or a
// key change as a delete and an insert, which checks or actions would
// turn into errors or into deletes of rows the batch does not touch; and
// the actions are carried out otherwise: a PostgreSQL source's log holds
// the rows its actions changed, and for a MySQL source, whose log does
// not, the batch carries the statements that do what the source's InnoDB
// did (apply.Cascades), which plan writes right before the change that
// fired them (cascade.go). Triggers on the target fire for sluice's
// writes: an upsert fires the INSERT triggers, or on a duplicate key the
// UPDATE triggers; a delete fires the DELETE triggers. Tables with
// nullable unique secondary keys may see an extra UPDATE per changed row
// (see below).
//
// # Unique secondary keys
//
// INSERT … ON DUPLICATE KEY UPDATE reacts to a duplicate on any unique
// index, and MySQL checks unique indexes row by row, so two changes of one
// batch that share a unique value (row A gives email x up, row B takes it;
// or A and B swap values) would fail or, worse, update the wrong row. A
// compacted batch no longer holds the old values, so sluice cannot order
// such rows; instead, for a table with unique secondary indexes whose
// columns are all nullable, it first sets those columns to NULL in the
// batch's rows whose unique values change (one multi-row UPDATE in the same
// transaction and packet; NULLs never collide), then upserts the final
// images. Every upsert into a table with unique secondary indexes also
// carries a guard: when an inserted row collides with an existing row on a
// unique index but not on the primary key, the statement fails (naming the
// table) instead of updating the other row. A collision on a unique index
// with a NOT NULL column cannot be released this way: such a batch fails
// with that error, naming the table, rather than applying a wrong state.
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
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

// sqlMode is the session's sql_mode.
const sqlMode = "STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO"

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

// setupCheckpoint creates the checkpoint table, or brings one made by an
// earlier sluice to the shape with a row per lane.
func (t *Target) setupCheckpoint(ctx context.Context) error {
	if _, err := t.conn.ExecContext(ctx, checkpointDDL); err != nil {
		return err
	}
	if _, err := t.conn.ExecContext(ctx, fenceDDL); err != nil {
		return err
	}
	var n int
	err := t.read(ctx, func() error { return t.conn.QueryRowContext(ctx, checkpointHasLanes).Scan(&n) })
	if err != nil || n > 0 {
		return err
	}
	t.log.Info("upgrading the checkpoint table to a row per lane", "table", t.database+"."+checkpointTable)
	_, err = t.conn.ExecContext(ctx, checkpointUpgrade)
	return err
}

func (t *Target) openDB(ctx context.Context) error {
	t.dcfg.MultiStatements = t.multi
	t.implicitTx = !t.multi && t.cfg.Mode == Pipelined
	if t.implicitTx {
		t.dcfg.Params["autocommit"] = "0"
	} else {
		delete(t.dcfg.Params, "autocommit")
	}
	conn, err := mysql.NewConnector(t.dcfg)
	if err != nil {
		return fmt.Errorf("target connection string: %w", err)
	}
	t.db = sql.OpenDB(conn)
	t.db.SetMaxOpenConns(2)
	t.db.SetMaxIdleConns(1)
	if err := t.ensureConn(ctx); err != nil {
		t.closeDB()
		return err
	}
	return nil
}

func (t *Target) closeDB() {
	if t.conn != nil {
		t.conn.Close()
		t.conn = nil
	}
	if t.db != nil {
		t.db.Close()
		t.db = nil
	}
}

// sessionSQL reads what ensureConn checks of a new connection's session.
const sessionSQL = "SELECT @@SESSION.sql_mode, @@SESSION.max_allowed_packet, DATABASE(), VERSION(), CONNECTION_ID()"

// ensureConn takes a connection when the last one was lost or discarded,
// checks its session settings and learns the packet limit.
func (t *Target) ensureConn(ctx context.Context) error {
	if t.conn != nil {
		return nil
	}
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return t.connectError(err)
	}
	var mode, version string
	var maxPacket int
	if t.setup {
		mode, maxPacket, version, err = t.setupPacket(ctx, conn)
		if err != nil {
			conn.Close()
			return err
		}
	} else {
		err = conn.QueryRowContext(ctx, sessionSQL).Scan(&mode, &maxPacket, &t.database, &version, &t.connID)
		if err != nil {
			conn.Close()
			return t.connectError(err)
		}
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		t.server = "MariaDB"
	}
	if !strings.Contains(mode, "NO_BACKSLASH_ESCAPES") || !strings.Contains(mode, "STRICT_ALL_TABLES") {
		conn.Close()
		return fmt.Errorf("target %s at %s ignored SET sql_mode (it is %q): sluice needs STRICT_ALL_TABLES and NO_BACKSLASH_ESCAPES in the session; check the proxy in between", t.server, t.addr, mode)
	}
	t.conn, t.maxPacket = conn, maxPacket
	return nil
}

// connectError turns the failures a user can fix into messages that say how.
func (t *Target) connectError(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045: // ER_ACCESS_DENIED_ERROR
			return fmt.Errorf("target %s at %s: authentication failed for user %q: check the user and password in the connection string: %w",
				t.server, t.addr, t.dcfg.User, err)
		case 1044: // ER_DBACCESS_DENIED_ERROR
			return fmt.Errorf("target %s at %s: user %q may not use database %q: GRANT it the privileges or fix the connection string: %w",
				t.server, t.addr, t.dcfg.User, t.dcfg.DBName, err)
		case 1049: // ER_BAD_DB_ERROR
			return fmt.Errorf("target %s at %s: database %q does not exist: create it or fix the connection string: %w",
				t.server, t.addr, t.dcfg.DBName, err)
		}
		return fmt.Errorf("target %s at %s: %w", t.server, t.addr, err)
	}
	return fmt.Errorf("cannot reach target %s at %s: %w", t.server, t.addr, err)
}

// discard drops the current connection: it is broken, or its state (an
// open transaction) is unknown.
func (t *Target) discard() {
	if t.conn == nil {
		return
	}
	_ = t.conn.Raw(func(any) error { return driver.ErrBadConn })
	t.conn.Close()
	t.conn = nil
}

// reading runs f, which only reads, and when the connection turns out to
// have died runs it once more on a fresh connection.
func (t *Target) reading(ctx context.Context, f func() error) error {
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	err := t.read(ctx, f)
	if err == nil || !connLost(err) || ctx.Err() != nil {
		return err
	}
	t.discard()
	if cerr := t.ensureConn(ctx); cerr != nil {
		return fmt.Errorf("%w (reconnect: %v)", err, cerr)
	}
	return t.read(ctx, f)
}

// read runs f and, with implicit transactions, ends the one it opened.
func (t *Target) read(ctx context.Context, f func() error) error {
	err := f()
	if t.implicitTx && t.conn != nil {
		if _, rerr := t.conn.ExecContext(ctx, "ROLLBACK"); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
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
// stream, one per lane that wrote one, in lane order.
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
	rows, err := t.conn.QueryContext(ctx, buildCheckpointSelect(stream))
	if err != nil {
		return nil, fmt.Errorf("read checkpoint of stream %q from %s.%s: %w", stream, t.database, checkpointTable, err)
	}
	defer rows.Close()
	return t.scanCheckpoints(rows, stream)
}

// scanCheckpoints reads the rows of buildCheckpointSelect.
func (t *Target) scanCheckpoints(rows *sql.Rows, stream string) ([]sluice.Checkpoint, error) {
	var cps []sluice.Checkpoint
	for rows.Next() {
		cp := sluice.Checkpoint{Stream: stream}
		var pos, last string
		err := rows.Scan(&cp.Lane, &cp.Seq, &pos, &cp.Applied, &cp.Time, &last, &cp.Lanes, &cp.Routing)
		if err != nil {
			return nil, fmt.Errorf("read checkpoint of stream %q from %s.%s: %w", stream, t.database, checkpointTable, err)
		}
		if cp.Position, err = sluice.ParsePosition(pos); err == nil {
			cp.Last, err = sluice.ParsePosition(last)
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoint of stream %q, lane %d: %w", stream, cp.Lane, err)
		}
		cps = append(cps, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read checkpoint of stream %q from %s.%s: %w", stream, t.database, checkpointTable, err)
	}
	return cps, nil
}

// statement is one statement of a batch and what it does, for errors.
type statement struct {
	table *sluice.Table // nil for the checkpoint
	sql   string
	what  string // e.g. "upsert of 500 rows to db.orders"
	// guard: an upsert carrying the unique-key guard, whose failure sets a
	// primary key column to NULL.
	guard bool
	// keyCheck marks an ordered key change and the check after it, which
	// fails when the change found no row to move.
	keyCheck bool
	// rowCheck marks the check after an update of rows with values the
	// source did not send, which fails when one of them is missing (see
	// buildUpdates).
	rowCheck bool
	// fence marks the fence check (see Fence).
	fence bool
	// chain marks the chain check (see ApplyAfter).
	chain bool
	// follows: the statement must run right after the one before it (it
	// reads ROW_COUNT()), with no step marker in between; a failure of it
	// is reported as the one before it.
	follows bool
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

// stepError is a failed statement of a batch; step is 0 for START
// TRANSACTION, i for stmts[i-1], len(stmts)+1 for COMMIT and -1 while
// unknown.
type stepError struct {
	err   error
	stmts []statement
	step  int
	// candidates names the batch's tables when the step is unknown.
	candidates string
}

// Table names the table of the failing statement, for the log's table
// field.
func (e *stepError) TableOf() (sluice.TableName, bool) {
	if e.step > 0 && e.step <= len(e.stmts) && e.stmts[e.step-1].table != nil {
		return e.stmts[e.step-1].table.Name, true
	}
	return sluice.TableName{}, false
}

func (e *stepError) Error() string {
	switch {
	case e.step == 0:
		return "apply: start transaction: " + e.err.Error()
	case e.step > 0 && e.step <= len(e.stmts):
		s := e.stmts[e.step-1]
		var me *mysql.MySQLError
		if s.keyCheck && errors.As(e.err, &me) && me.Number == 1242 {
			// keyChangeCheck raises 1242 itself: a statement of a
			// multi-statement packet has no other way to fail.
			return "apply " + s.what + ": no row has the old key on the target, so the target differs from the source (a row the source had is missing, " +
				"or something on the target, such as a trigger, moved it): the check after the key change found no row moved and failed on purpose with " + e.err.Error()
		}
		if e.rowMissing() {
			return "apply " + s.what + ": " + apply.ErrRowMissing.Error() + " (the check's error: " + e.err.Error() + ")"
		}
		if s.guard && errors.As(e.err, &me) && me.Number == 1048 {
			return "apply " + s.what + ": a row collides on a unique key with a row of the table that this batch does not touch " +
				"(the target differs from the source, or the changes that free the value are in another batch): " + e.err.Error()
		}
		return "apply " + s.what + ": " + e.err.Error()
	case e.step == len(e.stmts)+1:
		return "apply: commit: " + e.err.Error()
	}
	return "apply batch of " + strconv.Itoa(len(e.stmts)) + " statements" + e.candidates + ": " + e.err.Error()
}

func (e *stepError) Unwrap() error { return e.err }

// Is makes a failed row check apply.ErrRowMissing.
func (e *stepError) Is(target error) bool { return target == apply.ErrRowMissing && e.rowMissing() }

// rowMissing reports whether the failed statement is the check that the
// rows an update with unsent values updated were all there.
func (e *stepError) rowMissing() bool {
	var me *mysql.MySQLError
	return e.step > 0 && e.step <= len(e.stmts) && e.stmts[e.step-1].rowCheck && errors.As(e.err, &me) && me.Number == 1242
}

// connLost reports whether err means the connection is gone.
func connLost(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1927, // ER_CONNECTION_KILLED (MariaDB)
			1053, // ER_SERVER_SHUTDOWN
			2006, // CR_SERVER_GONE_ERROR
			2013: // CR_SERVER_LOST
			return true
		}
	}
	return false
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

// constraintError turns a failed statement that broke a unique key (or the
// upsert guard that stands for one) or a foreign key into an
// *apply.ConstraintError, which the stream answers by applying the tables'
// changes in source order; nil for any other failure.
func (t *Target) constraintError(se *stepError, err error) error {
	var me *mysql.MySQLError
	if se == nil || !errors.As(err, &me) {
		return nil
	}
	var st *statement
	if se.step > 0 && se.step <= len(se.stmts) {
		st = &se.stmts[se.step-1]
	}
	switch {
	case me.Number == 1062, // ER_DUP_ENTRY
		me.Number == 1451, me.Number == 1452, // ER_ROW_IS_REFERENCED_2, ER_NO_REFERENCED_ROW_2
		me.Number == 1048 && st != nil && st.guard: // the upsert guard
	default:
		return nil
	}
	ce := &apply.ConstraintError{Err: err}
	if me.Number != 1048 {
		ce.Detail = me.Message
	}
	if _, rest, ok := strings.Cut(me.Message, "CONSTRAINT `"); ok {
		ce.Constraint, _, _ = strings.Cut(rest, "`")
	}
	if st != nil && st.table != nil {
		ce.Tables = append(ce.Tables, st.table.Name)
		// A foreign key's other side, when it is another of the stream's
		// tables: the message names the child as `db`.`table` and the
		// parent as REFERENCES `table`.
		for _, d := range t.tables {
			if d.src.Name != st.table.Name && (me.Number == 1451 || me.Number == 1452) &&
				(strings.Contains(me.Message, "`"+t.database+"`.`"+d.src.Name.Name+"`") || strings.Contains(me.Message, "REFERENCES `"+d.src.Name.Name+"`")) {
				ce.Tables = append(ce.Tables, d.src.Name)
			}
		}
	}
	return ce
}

// wasKilled tells, after the connection with id old was lost in the middle
// of a batch, whether the server killed it (KILL, a transaction killer): a
// killed session is gone or shows as Killed while it rolls back, whereas
// after a network failure the server's session is still busy with the
// batch, waiting on a lock or for the client. Such an orphan is killed here,
// so that it releases its locks at once.
func (t *Target) wasKilled(ctx context.Context, old int64) bool {
	if old == 0 {
		return false
	}
	// The client can see its connection close a moment before the killed
	// session leaves the process list, so a session still listed as busy
	// is watched for a second before it is taken for an orphan.
	deadline := time.Now().Add(time.Second)
	for {
		var command, state string
		err := t.conn.QueryRowContext(ctx, "SELECT COMMAND, COALESCE(STATE, '') FROM information_schema.PROCESSLIST WHERE ID = "+strconv.FormatInt(old, 10)).Scan(&command, &state)
		if t.implicitTx {
			t.conn.ExecContext(ctx, "ROLLBACK")
		}
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return true
		case err != nil:
			return false
		case strings.EqualFold(command, "Killed") || strings.Contains(strings.ToLower(state), "kill"):
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := t.conn.ExecContext(ctx, "KILL "+strconv.FormatInt(old, 10)); err != nil {
		t.log.Debug("kill orphaned session", "id", old, "err", err)
	}
	return false
}

// classify marks the errors after which the batch may be retried as is.
// Killed is set when the transaction was killed or timed out.
func classify(err error, lost bool) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1205, // ER_LOCK_WAIT_TIMEOUT
			1317, // ER_QUERY_INTERRUPTED (KILL QUERY)
			1927, // ER_CONNECTION_KILLED (MariaDB KILL)
			3024, // ER_QUERY_TIMEOUT (MySQL max_execution_time)
			1969: // ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
			return &apply.RetryableError{Err: err, Killed: true}
		case 1213, // ER_LOCK_DEADLOCK
			1053, 2006, 2013:
			return &apply.RetryableError{Err: err}
		}
		// Vitess's transaction killer: "… tx killer rollback …", and later
		// statements of the killed transaction "… exceeded timeout: 20s".
		msg := strings.ToLower(me.Message)
		if strings.Contains(msg, "tx killer rollback") || strings.Contains(msg, "exceeded timeout") ||
			strings.Contains(msg, "transaction was killed") {
			return &apply.RetryableError{Err: err, Killed: true}
		}
	}
	if lost {
		return &apply.RetryableError{Err: err}
	}
	return err
}

// plan turns a batch into statements: per compacted table its truncate,
// its moves in place (with their checks), its deletes, then (for a table
// with nullable unique secondary keys) the
// release of the unique values that change, then its upserts grouped by
// the set of columns present; then the ordered changes, one statement each,
// in source order, each after the foreign-key actions it fired on the
// source (cascade.go); part after part (apply.Batch.Next).
func (t *Target) plan(ctx context.Context, b *apply.Batch, perRow bool) ([]statement, error) {
	return apply.AppendParts(nil, b, func(stmts []statement, part *apply.Batch) ([]statement, error) {
		return t.planPart(ctx, stmts, part, perRow)
	})
}

// planPart appends the statements of one part of a batch (see plan).
func (t *Target) planPart(ctx context.Context, stmts []statement, b *apply.Batch, perRow bool) ([]statement, error) {
	limit := t.maxPacket - 256
	if perRow {
		limit = 0 // one row per statement
	}
	for _, tb := range b.Tables {
		d, err := t.describe(ctx, tb.Table)
		if err != nil {
			return nil, err
		}
		if tb.Truncate {
			stmts = append(stmts, statement{table: d.src, sql: buildTruncate(d.ident), what: "truncate of " + d.display})
		}
		for _, mv := range tb.Moves {
			if stmts, err = d.appendKeyChange(stmts, mv.Key, mv.Row); err != nil {
				return nil, err
			}
		}
		stmts, err = d.appendDeletes(stmts, tb.Deletes, limit)
		if err != nil {
			return nil, err
		}
		stmts, err = d.appendRelease(stmts, tb.Upserts, limit)
		if err != nil {
			return nil, err
		}
		stmts, err = d.appendUpserts(stmts, tb.Upserts, limit)
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
			stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, 0)
		case sluice.OpUpdate:
			switch {
			case c.Key != nil && !apply.KeysEqual(c.Key, c.Table.KeyOf(c.Row)) && fired && !apply.HasUnchanged(c.Row):
				// A key change whose actions sluice carried out just
				// before: a delete and an insert, as compaction writes
				// it, which a batch applied again survives (its actions
				// too find their rows by the old key's values).
				if stmts, err = d.appendDeletes(stmts, []sluice.Row{c.Key}, 0); err == nil {
					stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, 0)
				}
			case c.Key != nil && !apply.KeysEqual(c.Key, c.Table.KeyOf(c.Row)):
				stmts, err = d.appendKeyChange(stmts, c.Key, c.Row)
			default:
				stmts, err = d.appendUpserts(stmts, []sluice.Row{c.Row}, 0)
			}
		case sluice.OpDelete:
			stmts, err = d.appendDeletes(stmts, []sluice.Row{c.Key}, 0)
		case sluice.OpTruncate:
			stmts = append(stmts, statement{table: d.src, sql: buildTruncate(d.ident), what: "truncate of " + d.display})
		}
		if err != nil {
			return nil, err
		}
	}
	return stmts, nil
}

// appendKeyChange adds the update that moves the row at old to img's key
// in place, leaving the columns img does not carry as they are, and the
// check that it found the row.
func (d *tableDesc) appendKeyChange(stmts []statement, old, img sluice.Row) ([]statement, error) {
	if len(img) != len(d.cols) || len(old) != len(d.src.Key) {
		return nil, fmt.Errorf("apply key change in %s: row has %d values and key %d, want %d and %d",
			d.display, len(img), len(old), len(d.cols), len(d.src.Key))
	}
	for i, k := range d.src.Key {
		if old[i].Null || old[i].Unchanged || img[k].Null || img[k].Unchanged {
			return nil, fmt.Errorf("apply key change in %s: key %s has a NULL or missing value", d.display, d.src.FormatKey(old))
		}
	}
	var cols []sqlColumn
	var present []int
	for _, i := range d.written {
		if !img[i].Unchanged {
			cols = append(cols, d.cols[i])
			present = append(present, i)
		}
	}
	update, check := buildKeyChange(d.ident, d.key, cols, present, old, img)
	what := fmt.Sprintf("key change %s → %s in %s", d.src.FormatKey(old), d.src.FormatKey(d.src.KeyOf(img)), d.display)
	return append(stmts, statement{table: d.src, sql: update, what: what, keyCheck: true},
		statement{table: d.src, sql: check, what: what, keyCheck: true, follows: true}), nil
}

// rowsFor names what a statement covers: the key of its one row, or a count.
func (d *tableDesc) rowsFor(n int, first sluice.Row, isKey bool) string {
	if n == 1 && first != nil {
		if !isKey {
			first = d.src.KeyOf(first)
		}
		return d.src.FormatKey(first)
	}
	return rowCount(n)
}

func (d *tableDesc) appendDeletes(stmts []statement, keys []sluice.Row, limit int) ([]statement, error) {
	if len(keys) == 0 {
		return stmts, nil
	}
	for _, k := range keys {
		if len(k) != len(d.src.Key) {
			return nil, fmt.Errorf("apply delete to %s: key has %d values, want %d", d.display, len(k), len(d.src.Key))
		}
		for _, v := range k {
			if v.Null || v.Unchanged {
				return nil, fmt.Errorf("apply delete to %s: key %s has a NULL or missing value", d.display, d.src.FormatKey(k))
			}
		}
	}
	sqls, counts, err := buildDeletes(d.ident, d.key, keys, limit)
	if err != nil {
		return nil, fmt.Errorf("apply delete to %s: %w", d.display, err)
	}
	off := 0
	for i, s := range sqls {
		stmts = append(stmts, statement{table: d.src, sql: s, what: "delete of " + d.rowsFor(counts[i], keys[off], true) + " from " + d.display})
		off += counts[i]
	}
	return stmts, nil
}

// appendRelease adds the statements that set the nullable unique columns of
// the batch's rows whose unique values change to NULL (see the package doc).
// A table with a single upsert cannot collide with itself in the batch.
func (d *tableDesc) appendRelease(stmts []statement, rows []sluice.Row, limit int) ([]statement, error) {
	if len(d.release) == 0 || len(rows) < 2 {
		return stmts, nil
	}
	cols := make([]sqlColumn, len(d.release))
	for i, c := range d.release {
		cols[i] = d.cols[c]
	}
	var keys, vals []sluice.Row
rows:
	for _, r := range rows {
		if len(r) != len(d.cols) {
			return nil, fmt.Errorf("apply upsert to %s: row has %d values, want %d", d.display, len(r), len(d.cols))
		}
		v := make(sluice.Row, len(d.release))
		for i, c := range d.release {
			if r[c].Unchanged {
				continue rows // keeps its value: nothing to release
			}
			v[i] = r[c]
		}
		keys = append(keys, d.src.KeyOf(r))
		vals = append(vals, v)
	}
	if len(keys) == 0 {
		return stmts, nil
	}
	sqls, counts, err := buildRelease(d.ident, d.key, cols, keys, vals, limit)
	if err != nil {
		return nil, fmt.Errorf("apply unique-key release to %s: %w", d.display, err)
	}
	off := 0
	for i, s := range sqls {
		stmts = append(stmts, statement{table: d.src, sql: s,
			what: "release of the unique values of " + d.rowsFor(counts[i], keys[off], true) + " in " + d.display})
		off += counts[i]
	}
	return stmts, nil
}

func (d *tableDesc) appendUpserts(stmts []statement, rows []sluice.Row, limit int) ([]statement, error) {
	if len(rows) == 0 {
		return stmts, nil
	}
	// Group rows by the set of columns they carry, in first-seen order, so
	// that a row with unchanged columns SETs only the ones it has. Such a
	// row is updated in place (partial): it cannot be inserted.
	type group struct {
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
			g = &group{}
			for i := range mask {
				if mask[i] == '1' {
					g.present = append(g.present, i)
				} else if !d.generated[i] {
					g.partial = true
				}
			}
			byMask[string(mask)] = g
			groups = append(groups, g)
		}
		g.rows = append(g.rows, r)
	}
	for _, g := range groups {
		if g.partial {
			var err error
			if stmts, err = d.appendUpdates(stmts, g.present, g.rows, limit); err != nil {
				return nil, err
			}
			continue
		}
		u := &upsertSpec{table: d.ident, guard: len(d.uniques) > 0}
		pos := make(map[int]int, len(g.present))
		for i, c := range g.present {
			u.cols = append(u.cols, d.cols[c])
			pos[c] = i
		}
		for _, k := range d.src.Key {
			u.key = append(u.key, pos[k])
		}
		sqls, counts, err := buildUpserts(u, g.present, g.rows, limit)
		if err != nil {
			return nil, fmt.Errorf("apply upsert to %s: %w", d.display, err)
		}
		off := 0
		for i, s := range sqls {
			stmts = append(stmts, statement{table: d.src, sql: s, guard: u.guard,
				what: "upsert of " + d.rowsFor(counts[i], g.rows[off], false) + " to " + d.display})
			off += counts[i]
		}
	}
	return stmts, nil
}

// appendUpdates adds the statements that update rows, which carry only the
// columns at the indexes in present, in place, each with its check that
// every row was there (see buildUpdates).
func (d *tableDesc) appendUpdates(stmts []statement, present []int, rows []sluice.Row, limit int) ([]statement, error) {
	u := &updateSpec{table: d.ident, keyCharsets: d.keyCharsets}
	pos := make(map[int]int, len(present))
	for i, c := range present {
		u.cols = append(u.cols, d.cols[c])
		pos[c] = i
	}
	for _, k := range d.src.Key {
		u.key = append(u.key, pos[k])
	}
	updates, checks, counts, err := buildUpdates(u, present, rows, limit)
	if err != nil {
		return nil, fmt.Errorf("apply update to %s: %w", d.display, err)
	}
	off := 0
	for i := range updates {
		what := "update of " + d.rowsFor(counts[i], rows[off], false) + " in " + d.display + ", keeping the values the source did not send"
		stmts = append(stmts, statement{table: d.src, sql: updates[i], what: what},
			statement{table: d.src, sql: checks[i], what: what, rowCheck: true})
		off += counts[i]
	}
	return stmts, nil
}

func rowCount(n int) string {
	if n == 1 {
		return "1 row"
	}
	return strconv.Itoa(n) + " rows"
}
