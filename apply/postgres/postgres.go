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
	cpSQL    string
}

var _ apply.Target = (*Target)(nil)

// tableDesc is a target table checked against one source description, with
// the SQL built for it so far.
type tableDesc struct {
	src     *sluice.Table
	display string      // schema.table as resolved on the target
	ident   string      // quoted, qualified name used in SQL
	cols    []sqlColumn // aligned with src.Columns
	delete  string
	upserts map[string]string // present-column mask → statement
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
	// Session settings travel in the startup packet (no round trip) so that
	// nothing depends on the server's defaults. TimeZone: the source sends
	// timestamptz text with an explicit offset, which is exact in any zone,
	// but a value without one, now() for the checkpoint and the text we
	// read back for comparison would otherwise follow the server's zone.
	// DateStyle ISO reads dates as the source prints them by default without
	// an MDY/DMY guess, and IntervalStyle postgres matches the source's
	// default interval output.
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	pc.RuntimeParams["timezone"] = "UTC"
	pc.RuntimeParams["datestyle"] = "ISO, MDY"
	pc.RuntimeParams["intervalstyle"] = "postgres"
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = "sluice"
	}
	t := &Target{
		cfg:        cfg,
		log:        cfg.Logger,
		connConfig: pc,
		addr:       net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))),
		tables:     map[sluice.TableName]*tableDesc{},
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
	return fmt.Errorf("cannot reach target PostgreSQL at %s: %w", t.addr, err)
}

// setup creates sluice's schema and checkpoint table if needed, in one round
// trip that also learns the database name for messages.
func (t *Target) setup(ctx context.Context) error {
	b := &pgx.Batch{}
	for _, s := range buildCheckpointDDL(t.cfg.Schema) {
		b.Queue(s)
	}
	b.Queue("SELECT current_database()").QueryRow(func(r pgx.Row) error { return r.Scan(&t.database) })
	err := t.conn.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07") {
		// Two sluice processes racing through CREATE ... IF NOT EXISTS: one
		// of them loses on the catalog's unique index. The table exists now.
		err = t.conn.SendBatch(ctx, b).Close()
	}
	if err != nil {
		return fmt.Errorf("target PostgreSQL at %s: create checkpoint table %s.checkpoint: %w (create it as a privileged user or grant CREATE on the database)",
			t.addr, t.cfg.Schema, err)
	}
	return nil
}

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

// ReadCheckpoint returns the checkpoint the target committed last for
// stream, and false when it has none.
func (t *Target) ReadCheckpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var cp sluice.Checkpoint
	var ok bool
	err := t.reading(ctx, func() (err error) {
		cp, ok, err = t.readCheckpoint(ctx, stream)
		return err
	})
	return cp, ok, err
}

func (t *Target) readCheckpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error) {
	cp := sluice.Checkpoint{Stream: stream}
	var seq, applied int64
	var pos string
	err := t.conn.QueryRow(ctx, buildCheckpointSelect(t.cfg.Schema), stream).Scan(&seq, &pos, &applied, &cp.Time)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, false, nil
	}
	if err != nil {
		return cp, false, fmt.Errorf("read checkpoint of stream %q from %s.checkpoint: %w", stream, t.cfg.Schema, err)
	}
	p, err := sluice.ParsePosition(pos)
	if err != nil {
		return cp, false, fmt.Errorf("read checkpoint of stream %q: %w", stream, err)
	}
	cp.Seq, cp.Applied, cp.Position = uint64(seq), uint64(applied), p
	return cp, true, nil
}

// statement is one data statement of a batch and what it does, for errors.
type statement struct {
	table *sluice.Table // nil for the checkpoint
	sql   string
	args  []any
	what  string // e.g. "upsert of 500 rows to public.orders"
}

// stepError names the table of a batch's failing step (begin, data
// statement i-1, commit) for the log's table field.
func stepError(stmts []statement, i int, err error) error {
	if i >= 1 && i <= len(stmts) && stmts[i-1].table != nil {
		return &sluice.TableError{Table: stmts[i-1].table.Name, Err: err}
	}
	return err
}

// Apply writes b and cp in one transaction. In Pipelined mode that is one
// round trip; in PerRow mode it is one per row operation plus three.
func (t *Target) Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error {
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
	stmts, err := t.plan(ctx, b, t.cfg.Mode == PerRow)
	if err != nil {
		if t.conn == nil || t.conn.IsClosed() {
			t.conn = nil
			return classify(err, true)
		}
		return err
	}
	if cp.Stream != "" {
		var ts any
		if !cp.Time.IsZero() {
			ts = cp.Time.UTC().Format("2006-01-02 15:04:05.999999Z07:00")
		}
		stmts = append(stmts, statement{
			sql: t.cpSQL,
			args: []any{cp.Stream, strconv.FormatUint(cp.Seq, 10), cp.Position.String(),
				strconv.FormatUint(cp.Applied, 10), ts},
			what: fmt.Sprintf("checkpoint of stream %q", cp.Stream),
		})
	}
	start := time.Now()
	if t.cfg.Mode == PerRow {
		err = t.applyPerRow(ctx, stmts)
	} else {
		err = t.applyPipelined(ctx, stmts)
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

// applyPipelined queues BEGIN, the statements and COMMIT in one pgx batch.
// In exec mode pgx encodes every query as Parse/Bind/Describe/Execute,
// appends one Sync and writes the lot with a single Write; the results are
// read back in order until ReadyForQuery. When a statement fails the server
// skips everything up to the Sync, so COMMIT never runs and the transaction
// is left aborted, to be rolled back by afterFailure.
func (t *Target) applyPipelined(ctx context.Context, stmts []statement) error {
	pb := &pgx.Batch{}
	pb.Queue("BEGIN")
	for _, s := range stmts {
		pb.Queue(s.sql, s.args...)
	}
	pb.Queue("COMMIT")
	br := t.conn.SendBatch(ctx, pb)
	var failed error
	for i := range pb.Len() {
		tag, err := br.Exec()
		switch {
		case err != nil:
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				failed = stepError(stmts, i, fmt.Errorf("apply %s: %w", pipelineStep(stmts, i), err))
			} else {
				failed = fmt.Errorf("apply batch of %d statements to target PostgreSQL at %s: %w", len(stmts), t.addr, err)
			}
		case i == pb.Len()-1 && tag.String() != "COMMIT":
			// A COMMIT of an aborted transaction reports ROLLBACK.
			failed = fmt.Errorf("apply: commit reported %q", tag.String())
		}
		if failed != nil {
			break
		}
	}
	if err := br.Close(); err != nil && failed == nil {
		failed = fmt.Errorf("apply: read pipeline results: %w", err)
	}
	return failed
}

func pipelineStep(stmts []statement, i int) string {
	switch {
	case i == 0:
		return "begin"
	case i == len(stmts)+1:
		return "commit"
	}
	return stmts[i-1].what
}

// applyPerRow runs each statement as its own round trip inside one
// transaction.
func (t *Target) applyPerRow(ctx context.Context, stmts []statement) error {
	if _, err := t.conn.Exec(ctx, "BEGIN"); err != nil {
		return fmt.Errorf("apply begin: %w", err)
	}
	for i, s := range stmts {
		if _, err := t.conn.Exec(ctx, s.sql, s.args...); err != nil {
			return stepError(stmts, i+1, fmt.Errorf("apply %s: %w", s.what, err))
		}
	}
	tag, err := t.conn.Exec(ctx, "COMMIT")
	if err != nil {
		return fmt.Errorf("apply commit: %w", err)
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
		return classify(fmt.Errorf("%w (commit outcome unknown: reconnect failed: %v)", applyErr, err), true)
	}
	got, ok, err := t.readCheckpoint(ctx, cp.Stream)
	if err != nil {
		return classify(fmt.Errorf("%w (commit outcome unknown: %v)", applyErr, err), true)
	}
	if ok && got.Seq == cp.Seq && got.Position == cp.Position {
		t.log.Warn("connection lost after commit; the batch is committed", "stream", cp.Stream, "seq", cp.Seq, "err", applyErr)
		return nil
	}
	return classify(applyErr, true)
}

// classify marks the errors after which the batch may be retried as is.
func classify(err error, connLost bool) error {
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
	}
	if connLost {
		return &apply.RetryableError{Err: err}
	}
	return err
}

// plan turns a batch into statements: per table, its deletes, then its
// upserts grouped by the set of columns present.
func (t *Target) plan(ctx context.Context, b *apply.Batch, perRow bool) ([]statement, error) {
	var stmts []statement
	for _, tb := range b.Tables {
		d, err := t.describe(ctx, tb.Table)
		if err != nil {
			return nil, err
		}
		for _, mv := range tb.Moves {
			if stmts, err = d.appendDeletes(stmts, []sluice.Row{mv.To}, true); err != nil {
				return nil, err
			}
			stmts = append(stmts, d.moveStatement(mv))
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
	return stmts, nil
}

func (d *tableDesc) appendDeletes(stmts []statement, keys []sluice.Row, perRow bool) ([]statement, error) {
	if len(keys) == 0 {
		return stmts, nil
	}
	if d.delete == "" {
		key := make([]sqlColumn, len(d.src.Key))
		for i, k := range d.src.Key {
			key[i] = d.cols[k]
		}
		d.delete = buildDelete(d.ident, key)
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
			stmts = append(stmts, statement{table: d.src, sql: d.delete, args: columnArgs(keys[i:i+1], nil),
				what: fmt.Sprintf("delete of %s from %s", d.src.FormatKey(k), d.display)})
		}
	}
	if !perRow {
		stmts = append(stmts, statement{table: d.src, sql: d.delete, args: columnArgs(keys, nil),
			what: fmt.Sprintf("delete of %s from %s", rowCount(len(keys)), d.display)})
	}
	return stmts, nil
}

func (d *tableDesc) appendUpserts(stmts []statement, rows []sluice.Row, perRow bool) ([]statement, error) {
	if len(rows) == 0 {
		return stmts, nil
	}
	// Group rows by the set of columns they carry, in first-seen order, so
	// that a row with unchanged columns SETs only the ones it has.
	type group struct {
		mask    string
		present []int
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
			if v.Unchanged {
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
				}
			}
			byMask[g.mask] = g
			groups = append(groups, g)
		}
		g.rows = append(g.rows, r)
	}
	for _, g := range groups {
		sql, ok := d.upserts[g.mask]
		if !ok {
			cols := make([]sqlColumn, len(g.present))
			pos := make(map[int]int, len(g.present))
			for i, c := range g.present {
				cols[i] = d.cols[c]
				pos[c] = i
			}
			key := make([]int, len(d.src.Key))
			for i, k := range d.src.Key {
				key[i] = pos[k]
			}
			sql = buildUpsert(d.ident, cols, key)
			d.upserts[g.mask] = sql
		}
		if perRow {
			for i := range g.rows {
				stmts = append(stmts, statement{table: d.src, sql: sql, args: columnArgs(g.rows[i:i+1], g.present),
					what: fmt.Sprintf("upsert of %s to %s", d.src.FormatKey(d.src.KeyOf(g.rows[i])), d.display)})
			}
			continue
		}
		stmts = append(stmts, statement{table: d.src, sql: sql, args: columnArgs(g.rows, g.present),
			what: fmt.Sprintf("upsert of %s to %s", rowCount(len(g.rows)), d.display)})
	}
	return stmts, nil
}

// columnArgs turns rows into one text[] literal per column: the columns at
// the indexes in present, or every column when present is nil.
func columnArgs(rows []sluice.Row, present []int) []any {
	if present == nil {
		present = make([]int, len(rows[0]))
		for i := range present {
			present[i] = i
		}
	}
	args := make([]any, len(present))
	vals := make([]string, len(rows))
	nulls := make([]bool, len(rows))
	var b strings.Builder
	for i, c := range present {
		n := 2
		for j, r := range rows {
			vals[j], nulls[j] = r[c].Text, r[c].Null
			n += len(r[c].Text) + 3
		}
		b.Reset()
		b.Grow(n)
		textArray(&b, vals, nulls)
		args[i] = b.String()
	}
	return args
}

func rowCount(n int) string {
	if n == 1 {
		return "1 row"
	}
	return strconv.Itoa(n) + " rows"
}

// moveStatement changes the primary key of the row at mv.From to mv.To in
// place, keeping the values the source did not send.
func (d *tableDesc) moveStatement(mv apply.Move) statement {
	var b strings.Builder
	b.WriteString("UPDATE ")
	b.WriteString(d.ident)
	b.WriteString(" SET ")
	n := len(d.src.Key)
	args := make([]any, 0, 2*n)
	for i, k := range d.src.Key {
		c := d.cols[k]
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s = $%d::text::%s", ident(c.Name), i+1, c.cast())
		args = append(args, mv.To[i].Text)
	}
	b.WriteString(" WHERE ")
	for i, k := range d.src.Key {
		c := d.cols[k]
		if i > 0 {
			b.WriteString(" AND ")
		}
		fmt.Fprintf(&b, "%s = $%d::text::%s", ident(c.Name), n+i+1, c.cast())
		args = append(args, mv.From[i].Text)
	}
	return statement{table: d.src, sql: b.String(), args: args,
		what: fmt.Sprintf("key change %s → %s in %s", d.src.FormatKey(mv.From), d.src.FormatKey(mv.To), d.display)}
}
