// Package pglogical reads row changes from PostgreSQL logical replication:
// a replication slot decoded by the built-in pgoutput plugin (protocol
// version 1, text values) for a publication of the streamed tables.
//
// Setup creates the publication and the slot; Open starts streaming from
// the slot. A goroutine owns the replication connection: it decodes the
// stream into a bounded buffer that Read drains, answers keepalives, and
// sends standby status updates on an interval and after every Ack, so the
// slot's confirmed_flush_lsn follows what the target has committed.
//
// Positions (see position) name a transaction by the LSN of its commit
// record and a change inside it by its ordinal, so a reader resumes exactly
// after any change it handed out, even in the middle of a transaction: the
// slot resends whole transactions from its confirmed_flush_lsn and the
// reader skips what the position says is applied.
//
// Values are the text that the types' output functions give under
// pgtrigger.SessionSettings (the replication session runs with them), so
// both PostgreSQL readers produce the same text. Unchanged TOASTed columns
// arrive as Value{Unchanged: true}.
//
// Schema changes: pgoutput carries no DDL, but sends a table's relation
// message again before its first change after one; the reader compares it
// (and the catalog) with the table's shape before and hands out an
// OpSchema change saying what changed (schema.go). A renamed table stops
// the stream with an error naming it and the position.
//
// A partitioned table is streamed under its own name: pgoutput names the
// leaf partition of each change, and the reader maps it to the table
// (partitions.go), follows partitions created while it runs, and stops at
// a TRUNCATE of part of the table and where a partition left it or joined
// it holding rows.
package pglogical

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
)

const (
	// bufferChanges bounds the changes decoded but not yet read, and
	// source.DefaultBufferBytes their bytes: the receiver stops reading the
	// socket when either is reached.
	bufferChanges = 4096
	minBackoff    = 100 * time.Millisecond
	maxBackoff    = 5 * time.Second
)

type itemKind uint8

const (
	itemChange itemKind = iota + 1
	// itemIdle says the server has decoded everything up to lsn and sent
	// every change before it: no streamed change commits below lsn that
	// the reader has not buffered.
	itemIdle
	itemErr
)

type item struct {
	kind   itemKind
	change sluice.Change
	size   int64 // the change's bytes taken from the budget
	lsn    pglogrepl.LSN
	err    error
}

// relState is what the receiver knows of one streamed table.
type relState struct {
	info  *tableInfo
	table *sluice.Table // the shape changes are emitted with
	typ   []colType
	seen  bool // a relation message past the resume position arrived since Open
	// pending is the newest relation message that arrived while the
	// receiver skipped changes already applied.
	pending *pglogrepl.RelationMessage
	// attnums are table's columns' numbers, by name; indexes the
	// secondary indexes as the catalog last had them (nil until the first
	// relation message read them), for following the table's DDL
	// (schema.go).
	attnums map[string]int16
	indexes []sluice.Index
}

// Reader streams changes from a logical replication slot.
type Reader struct {
	cfg     Config
	log     *slog.Logger
	connStr string
	replCfg *pgconn.Config
	addr    string
	db      string
	tables  []*sluice.Table
	items   chan item
	budget  *source.Budget
	wake    chan struct{} // an Ack moved the flush LSN: send a status update

	cancel context.CancelFunc
	done   sync.WaitGroup

	readMu sync.Mutex // serialises Read
	err    error      // sticky error returned by every later Read

	mu          sync.Mutex // guards the fields below
	lastEmitted position   // position after the last change handed out
	acked       position   // the last position acknowledged
	mids        []txStart  // transactions handed out in part, not yet acked past
	// lastProgress is when Read last handed out a progress marker.
	lastProgress time.Time
	// start is where the reader started (Start).
	start    position
	flush    pglogrepl.LSN
	recvWake context.CancelFunc // interrupts the receiver's wait for a message

	sqlMu   sync.Mutex
	sqlConn *pgx.Conn

	// parts are the streamed tables that are partitioned (see
	// partitions.go), record the partitions the reader follows: the
	// partition watch writes it, the receiver reads it.
	parts  []pgcatalog.Partitioned
	partMu sync.Mutex
	record pgcatalog.Record

	// receiver state, owned by the receiver goroutine
	// oldBuf and newBuf hold the tuples of the row message being handled
	// (see decodeRowMessage).
	oldBuf, newBuf tupleBuf
	conn           *pgconn.PgConn
	rels           map[uint32]*relState
	leaves         map[uint32]*leafRel // leaf partitions of the partitioned tables in rels
	ignored        map[uint32]bool
	resume         position // position after the last change pushed
	tx             txState
	held           *sluice.Change // the newest change of tx, pushed once its successor or the commit is known
	// deferred are schema edits read from the catalog that may be ahead
	// of the stream (schema.go), held until it passes their LSN.
	deferred []deferredEdits
	heldPos  position // held's position while it is not the transaction's last
	// recvLSN is the server's WAL position as last reported to the
	// receiver; sentFlush the flush position last sent on this connection.
	recvLSN   pglogrepl.LSN
	sentFlush pglogrepl.LSN
	// startAt is the LSN the replication session asks to start at: zero
	// (the slot's confirmed position) until a catch-up read past it.
	startAt pglogrepl.LSN
}

// txStart records where a transaction began in the sequence handed out:
// before is the boundary LSN of the transactions applied before it.
type txStart struct {
	commit pglogrepl.LSN
	before pglogrepl.LSN
}

type txState struct {
	open   bool
	xid    uint32
	commit pglogrepl.LSN
	time   time.Time
	n      int64 // changes of streamed tables seen so far
	// at is the WAL position of the last change seen, idx its index among
	// that record's changes.
	at  pglogrepl.LSN
	idx int64
	// skipAll: the resume position is past the whole transaction; skipN:
	// it names its first skipN changes (an old ordinal token); skipTo: it
	// names a change of it by WAL position.
	skipAll bool
	skipN   int64
	skipTo  *position
}

// next returns the index the change of the WAL record at at has: records
// give their changes one after another.
func (tx *txState) next(at pglogrepl.LSN) int64 {
	if at == tx.at {
		return tx.idx + 1
	}
	return 0
}

var _ source.Reader = (*Reader)(nil)

// Open checks the source, creates the publication and slot if they are
// missing and starts streaming. With from set it resumes right after the
// change that returned it; without, it streams what the slot holds (every
// change since the slot was created), or, with cfg.FromNow, moves the slot
// to the current WAL position first and streams what commits from now on.
func Open(ctx context.Context, connString string, cfg Config, from sluice.Position) (*Reader, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	start, hasPos, err := parsePosition(from)
	if err != nil {
		return nil, err
	}
	replCfg, err := replConnConfig(connString)
	if err != nil {
		return nil, err
	}
	r := &Reader{
		cfg:     cfg,
		connStr: connString,
		replCfg: replCfg,
		addr:    addrOf(replCfg.Host, replCfg.Port),
		db:      replCfg.Database,
		items:   make(chan item, bufferChanges),
		budget:  source.NewBudget(cfg.BufferBytes),
		wake:    make(chan struct{}, 1),
		rels:    map[uint32]*relState{},
		leaves:  map[uint32]*leafRel{},
		ignored: map[uint32]bool{},
	}
	r.log = cfg.Logger.With("source", Kind, "database", r.db, "slot", cfg.Slot)
	conn, err := connectSQL(ctx, connString)
	if err != nil {
		return nil, err
	}
	r.sqlConn = conn
	fail := func(err error) (*Reader, error) {
		r.sqlConn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	infos, err := setup(ctx, conn, cfg)
	if err != nil {
		return fail(err)
	}
	for _, info := range infos {
		r.tables = append(r.tables, info.table)
		r.rels[info.oid] = &relState{info: info, table: info.table, typ: info.typ, attnums: info.attnums}
	}
	// A partition that changed while no reader ran is marked before the
	// stream reaches where it changed.
	if r.parts = partitionedTables(infos); len(r.parts) > 0 {
		if err := r.checkPartitions(ctx); err != nil {
			return fail(err)
		}
	}
	if !hasPos && cfg.FromNow {
		var lsn string
		err := conn.QueryRow(ctx, `SELECT end_lsn::text FROM pg_replication_slot_advance($1, pg_current_wal_lsn())`, cfg.Slot).Scan(&lsn)
		if err != nil {
			return fail(fmt.Errorf("move replication slot %s to the current WAL position: %w", cfg.Slot, err))
		}
	}
	slot, err := lookupSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return fail(err)
	}
	if !slot.exists {
		return fail(fmt.Errorf("replication slot %s disappeared while the reader opened it", cfg.Slot))
	}
	if !hasPos {
		start = position{lsn: slot.confirmed}
	}
	if hasPos && slot.confirmed > resumeBoundary(start) {
		// The slot resends transactions from its confirmed position on:
		// those between the stream's position and it are gone from the
		// slot. sluice confirms only what the target's checkpoint holds,
		// so this is a target that lost commits (a restore) or a slot
		// moved by hand, except after an earlier sluice that moved an
		// idle slot past its checkpoint.
		if !cfg.AcceptSlotAhead {
			return fail(slotLost{fmt.Errorf("replication slot %s on %s has confirmed WAL up to %s, past the stream's position %s: "+
				"the transactions committed between them are gone from the slot and cannot be streamed (was the slot dropped and made again, the target restored from a backup, or the slot advanced by hand?); "+
				"the target needs a fresh copy of the tables",
				cfg.Slot, r.addr, slot.confirmed, start)})
		}
		r.log.Warn("replication slot is past the stream's checkpoint, which an earlier sluice wrote without following an idle slot; assuming nothing of the streamed tables committed in between",
			"confirmed_flush", slot.confirmed.String(), "position", start.String())
	}
	r.start = start
	r.lastProgress = time.Now()
	r.flush = slot.confirmed
	r.resume, r.lastEmitted, r.acked = start, start, start
	cu := r.openCatchUp(ctx, slot)
	if cu == nil {
		if err := r.startReplication(ctx); err != nil {
			return fail(err)
		}
	} else if err := r.checkReplicationLogin(ctx); err != nil {
		// Streaming starts only after the backlog, which may take hours:
		// a server that refuses the replication session says so now.
		cu.conn.Close(context.WithoutCancel(ctx))
		return fail(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done.Add(2)
	go r.receive(runCtx, cu)
	go r.watchSlot(runCtx)
	if len(r.parts) > 0 {
		r.done.Add(1)
		go r.watchPartitions(runCtx)
	}
	r.log.Info("pglogical reader open", "tables", len(r.tables), "publication", cfg.Publication, "from", start.sluice().String(), "confirmed_flush", slot.confirmed.String())
	return r, nil
}

// Tables describes the streamed tables as the catalog had them at Open.
func (r *Reader) Tables() []*sluice.Table { return slices.Clone(r.tables) }

// Start is the position the reader started from: the one it was opened
// at, or the slot's confirmed position (with FromNow, the WAL position when
// it opened).
func (r *Reader) Start() sluice.Position { return r.start.sluice() }

// resumeBoundary is the transaction boundary a resume from p needs the slot
// to hold: p itself, or for a position inside a transaction the
// transaction's commit, which must be resent.
func resumeBoundary(p position) pglogrepl.LSN { return p.lsn }

// startReplication opens the replication session and starts streaming from
// the slot's confirmed position (the server never sends transactions that
// committed before it); resume tells what to skip of what it resends.
func (r *Reader) startReplication(ctx context.Context) error {
	// A walsender of the previous session (this process's after a
	// reconnect, or a sluice that just stopped or was killed) can hold the
	// slot for a moment after its connection closed: wait for it a little
	// before calling the slot taken.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := r.startReplicationOnce(ctx)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkReplicationLogin opens a replication session and closes it: the
// server accepts one for this user and database (pg_hba.conf, the
// REPLICATION attribute, a free WAL sender).
func (r *Reader) checkReplicationLogin(ctx context.Context) error {
	conn, err := r.connectReplication(ctx)
	if err != nil {
		return err
	}
	return conn.Close(context.WithoutCancel(ctx))
}

// connectReplication opens a replication session (replConnConfig).
func (r *Reader) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	conn, err := pgconn.ConnectConfig(ctx, r.replCfg.Copy())
	if err != nil {
		return nil, connectErr(r.addr, r.replCfg.User, r.db, err)
	}
	return conn, nil
}

func (r *Reader) startReplicationOnce(ctx context.Context) error {
	conn, err := r.connectReplication(ctx)
	if err != nil {
		return err
	}
	args := []string{"proto_version '1'", "publication_names " + quoteLiteral(r.cfg.Publication)}
	if len(r.parts) > 0 {
		args = append(args, "messages 'true'") // the partition markers
	}
	err = pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, r.startAt, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: args,
	})
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch pgErr.Code {
			case "55006":
				return fmt.Errorf("start replication from slot %s on %s: the slot is in use by another process (another sluice running this stream?): stop it first: %w", r.cfg.Slot, r.addr, err)
			case "42704":
				return slotLost{fmt.Errorf("start replication from slot %s on %s: the slot does not exist: run `sluice source install` to create it (a lost slot means changes were lost: the target needs a fresh copy): %w", r.cfg.Slot, r.addr, err)}
			case "42501":
				return fmt.Errorf("start replication from slot %s on %s: permission denied: the role needs the REPLICATION attribute (ALTER ROLE … REPLICATION): %w", r.cfg.Slot, r.addr, err)
			}
		}
		return fmt.Errorf("start replication from slot %s on %s: %w", r.cfg.Slot, r.addr, err)
	}
	r.conn = conn
	r.sentFlush = 0
	r.tx = txState{}
	r.held = nil
	return nil
}

// Read returns up to max changes, waiting up to the poll interval for the
// first one.
func (r *Reader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	r.readMu.Lock()
	defer r.readMu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	if max <= 0 {
		max = 1
	}
	var out []sluice.Change
	timer := time.NewTimer(r.cfg.PollInterval)
	defer timer.Stop()
	for len(out) < max {
		var it item
		if len(out) == 0 {
			select {
			case it = <-r.items:
			case <-timer.C:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		} else {
			select {
			case it = <-r.items:
			default:
				return out, nil
			}
		}
		switch it.kind {
		case itemChange:
			r.budget.Give(it.size)
			out = append(out, it.change)
			r.emitted(it.change.Pos)
		case itemIdle:
			if c, ok := r.progress(it.lsn); ok {
				out = append(out, c)
			}
		case itemErr:
			r.err = it.err
			if len(out) > 0 {
				return out, nil
			}
			return nil, r.err
		}
	}
	return out, nil
}

// emitted records that the change ending at tok was handed out.
func (r *Reader) emitted(tok sluice.Position) {
	p, _, _ := parsePosition(tok)
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.inTx() && !(r.lastEmitted.inTx() && r.lastEmitted.lsn == p.lsn) {
		// The first change handed out of a transaction that is not
		// handed out whole yet: until it is acked past, the slot may only
		// confirm up to where the transactions before it end.
		before := pglogrepl.LSN(0)
		if !r.lastEmitted.inTx() {
			before = r.lastEmitted.lsn
		}
		r.mids = append(r.mids, txStart{commit: p.lsn, before: before})
	}
	r.lastEmitted = p
}

// progress returns a progress marker at lsn, which the server says it has
// decoded and sent every change before, when the reader is between
// transactions, nothing newer was handed out and no marker went out for
// ProgressInterval. The stream checkpoints it on the target, then acks it,
// and only then does the slot move there: WAL written for other tables
// and databases is not retained while the streamed tables are quiet, and
// the slot never moves past what the target's checkpoint holds.
func (r *Reader) progress(lsn pglogrepl.LSN) (sluice.Change, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastEmitted.inTx() || lsn <= r.lastEmitted.lsn || time.Since(r.lastProgress) < r.cfg.ProgressInterval {
		return sluice.Change{}, false
	}
	r.lastProgress = time.Now()
	p := position{lsn: lsn}
	r.lastEmitted = p
	return sluice.Change{Op: sluice.OpProgress, Pos: p.sluice()}, true
}

// setFlush moves the flush LSN forward (never back) and wakes the receiver
// to report it. Call with r.mu held.
func (r *Reader) setFlush(lsn pglogrepl.LSN) {
	if lsn <= r.flush {
		return
	}
	r.flush = lsn
	if r.recvWake != nil {
		r.recvWake()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Ack confirms to the server every transaction that pos says is applied in
// full: the slot's confirmed_flush_lsn moves to the end of the newest such
// transaction (for a position inside a transaction, the end of the one
// before it), never to a transaction that is only received or partly
// applied.
func (r *Reader) Ack(ctx context.Context, pos sluice.Position) error {
	p, ok, err := parsePosition(pos)
	if err != nil || !ok {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	target := pglogrepl.LSN(0)
	if !p.inTx() {
		target = p.lsn
	} else {
		for _, m := range r.mids {
			if m.commit == p.lsn {
				target = m.before
				break
			}
		}
	}
	i := 0
	for i < len(r.mids) && r.mids[i].commit < p.lsn {
		i++
	}
	r.mids = r.mids[i:]
	r.acked = p
	r.setFlush(target)
	return nil
}

func (r *Reader) flushLSN() pglogrepl.LSN {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flush
}

// SlotHealth returns the WAL the slot retains: pg_current_wal_lsn() minus
// the slot's restart_lsn, in bytes.
func (r *Reader) SlotHealth(ctx context.Context) (retainedBytes int64, err error) {
	var status *string
	err = r.withSQL(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT coalesce((pg_current_wal_lsn() - restart_lsn)::bigint, 0), wal_status FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot).
			Scan(&retainedBytes, &status)
	})
	if err == nil && status != nil && *status == "lost" {
		return 0, slotLost{fmt.Errorf("replication slot %s on %s was invalidated (it retained more than max_slot_wal_keep_size): changes are lost; the target needs a fresh copy and the slot a reinstall", r.cfg.Slot, r.addr)}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("replication slot %s does not exist on %s", r.cfg.Slot, r.addr)
	}
	if err != nil {
		return 0, fmt.Errorf("read retained WAL of replication slot %s: %w", r.cfg.Slot, err)
	}
	return retainedBytes, nil
}

// withSQL runs f on the reader's catalog session, reconnecting it if it
// broke.
func (r *Reader) withSQL(ctx context.Context, f func(*pgx.Conn) error) error {
	r.sqlMu.Lock()
	defer r.sqlMu.Unlock()
	if r.sqlConn == nil || r.sqlConn.IsClosed() {
		conn, err := connectSQL(ctx, r.connStr)
		if err != nil {
			return err
		}
		r.sqlConn = conn
	}
	err := f(r.sqlConn)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && r.sqlConn.PgConn().IsBusy() {
		r.sqlConn.Close(context.WithoutCancel(ctx))
		r.sqlConn = nil
	}
	return err
}

// watchSlot warns when the slot retains more WAL than configured.
func (r *Reader) watchSlot(ctx context.Context) {
	defer r.done.Done()
	t := time.NewTicker(r.cfg.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, r.cfg.StatusInterval)
		n, err := r.SlotHealth(qctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Debug("slot health check failed", "err", err)
			}
			continue
		}
		if n > r.cfg.MaxRetainedWAL {
			r.log.Warn("replication slot retains more WAL than configured: the target is behind or the stream is stopped; the source's disk fills if this goes on",
				"retained_bytes", n, "max_retained_wal", r.cfg.MaxRetainedWAL, "confirmed_flush", r.flushLSN().String())
		}
	}
}

// Close stops streaming (reporting the flush position one last time) and
// closes the reader's sessions.
func (r *Reader) Close() error {
	if r.cancel != nil {
		r.cancel()
	}
	r.done.Wait()
	r.sqlMu.Lock()
	defer r.sqlMu.Unlock()
	if r.sqlConn != nil {
		err := r.sqlConn.Close(context.Background())
		r.sqlConn = nil
		return err
	}
	return nil
}

// receive owns the replication connection for the reader's lifetime,
// after reading the backlog through cu when Open started a catch-up.
func (r *Reader) receive(ctx context.Context, cu *catchUp) {
	defer r.done.Done()
	if cu != nil && !r.catchUpThenStream(ctx, cu) {
		return
	}
	for {
		err := r.stream(ctx)
		if r.conn != nil {
			if ctx.Err() != nil {
				// Best effort: report the final flush position.
				r.sendStatus(false)
			}
			r.conn.Close(context.Background())
			r.conn = nil
		}
		if ctx.Err() != nil {
			return
		}
		var fatal *fatalError
		if errors.As(err, &fatal) || !retryable(err) {
			r.fail(ctx, err)
			return
		}
		r.log.Warn("replication connection lost; reconnecting", "err", err, "backoff", minBackoff, "resume", r.resume.String())
		if !r.reconnect(ctx, minBackoff) {
			return
		}
		r.log.Info("replication connection re-established", "resume", r.resume.String())
	}
}

// reconnect opens the replication session, waiting first (backoff,
// doubling up to maxBackoff) and again after each retryable failure. It
// reports false when the reader must stop: its context ended, or the
// failure is for good (then Read returns it).
func (r *Reader) reconnect(ctx context.Context, backoff time.Duration) bool {
	for {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(backoff):
			}
		}
		err := r.startReplication(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !retryable(err) {
			r.fail(ctx, err)
			return false
		}
		backoff = min(max(backoff*2, minBackoff), maxBackoff)
		r.log.Warn("reconnect to the source failed; retrying", "err", err, "backoff", backoff)
	}
}

// fatalError stops the stream for good.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func (r *Reader) fail(ctx context.Context, err error) {
	select {
	case r.items <- item{kind: itemErr, err: err}:
	case <-ctx.Done():
	}
}

// retryable reports whether err is a lost connection or a server restart,
// after which streaming can resume.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300", "55006", "53000", "58000", "XX000":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	return true
}

// stream receives messages until the connection fails or ctx ends.
func (r *Reader) stream(ctx context.Context) error {
	nextStatus := time.Now()
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !time.Now().Before(nextStatus) {
			// Asking for a reply makes the server answer with a keepalive
			// carrying its WAL position, which lets an idle reader move
			// the slot (see itemIdle).
			if err := r.sendStatus(true); err != nil {
				return err
			}
			nextStatus = time.Now().Add(r.cfg.StatusInterval)
		}
		select {
		case <-r.wake:
			if err := r.sendStatus(false); err != nil {
				return err
			}
		default:
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		r.mu.Lock()
		r.recvWake = cancel
		r.mu.Unlock()
		msg, err := r.conn.ReceiveMessage(rctx)
		r.mu.Lock()
		r.recvWake = nil
		r.mu.Unlock()
		cancel()
		if err != nil {
			// A deadline (status due) or an Ack's wake-up interrupts the
			// wait without breaking the connection.
			if (pgconn.Timeout(err) || errors.Is(err, context.Canceled)) && ctx.Err() == nil && !r.conn.IsClosed() {
				continue
			}
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := r.copyData(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream")
		default:
			// Notices and parameter status changes need nothing.
		}
	}
}

// sendStatus sends a standby status update. The flush position is what the
// slot's confirmed_flush_lsn moves to; it is sent whenever it moved since the
// last update on this connection. Other updates carry an invalid (zero)
// flush position, which leaves the slot alone, and the received position as
// the write position: a walsender shutting down waits until the client
// reports the flush position, or the write position when the flush one is
// invalid, equal to everything it sent, so a server restart does not wait
// out wal_sender_timeout for changes the target has not committed yet.
func (r *Reader) sendStatus(reply bool) error {
	if r.conn == nil {
		// Catching up: the slot moves by moveSlot, and the session's first
		// update reports the flush position.
		return nil
	}
	flush := r.flushLSN()
	write := max(r.recvLSN, flush)
	if flush <= r.sentFlush {
		flush = 0
	}
	buf := make([]byte, 0, 39)
	buf = append(buf, 'd', 0, 0, 0, 38, pglogrepl.StandbyStatusUpdateByteID)
	buf = binary.BigEndian.AppendUint64(buf, uint64(write))
	buf = binary.BigEndian.AppendUint64(buf, uint64(flush))
	buf = binary.BigEndian.AppendUint64(buf, uint64(flush))
	buf = binary.BigEndian.AppendUint64(buf, uint64(time.Now().UnixMicro()-pgEpochMicros))
	if reply {
		buf = append(buf, 1)
	} else {
		buf = append(buf, 0)
	}
	if err := r.conn.Frontend().SendUnbufferedEncodedCopyData(buf); err != nil {
		return fmt.Errorf("send standby status to %s: %w", r.addr, err)
	}
	if flush != 0 {
		r.sentFlush = flush
	}
	return nil
}

// pgEpochMicros is 2000-01-01 UTC, PostgreSQL's epoch, in Unix microseconds.
const pgEpochMicros = 946684800 * 1000000

func (r *Reader) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return &fatalError{fmt.Errorf("parse keepalive from %s: %w", r.addr, err)}
		}
		r.recvLSN = max(r.recvLSN, pkm.ServerWALEnd)
		if pkm.ReplyRequested {
			if err := r.sendStatus(false); err != nil {
				return err
			}
		}
		if !r.tx.open && pkm.ServerWALEnd > 0 {
			select {
			case r.items <- item{kind: itemIdle, lsn: pkm.ServerWALEnd}:
			default: // the buffer is full; a later keepalive will do
			}
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return &fatalError{fmt.Errorf("parse WAL data from %s: %w", r.addr, err)}
		}
		r.recvLSN = max(r.recvLSN, xld.ServerWALEnd)
		return r.walData(ctx, xld.WALStart, xld.WALData)
	}
	return nil
}

// walData handles one pgoutput message, decoded from the WAL record at
// at, from the stream or from a catch-up call.
func (r *Reader) walData(ctx context.Context, at pglogrepl.LSN, data []byte) error {
	if len(data) == 0 {
		return &fatalError{fmt.Errorf("empty pgoutput message at LSN %s", at)}
	}
	rm, ok, err := decodeRowMessage(data, &r.oldBuf, &r.newBuf)
	if err != nil {
		return &fatalError{fmt.Errorf("decode pgoutput message at LSN %s: %w", at, err)}
	}
	if ok {
		switch data[0] {
		case 'I':
			return r.change(ctx, at, rm.rel, sluice.OpInsert, nil, rm.new)
		case 'U':
			return r.change(ctx, at, rm.rel, sluice.OpUpdate, rm.old, rm.new)
		default:
			return r.change(ctx, at, rm.rel, sluice.OpDelete, rm.old, nil)
		}
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return &fatalError{fmt.Errorf("decode pgoutput message at LSN %s: %w", at, err)}
	}
	return r.message(ctx, m, at)
}

// message handles one decoded pgoutput message.
func (r *Reader) message(ctx context.Context, m pglogrepl.Message, at pglogrepl.LSN) error {
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		r.tx = txState{open: true, xid: m.Xid, commit: m.FinalLSN, time: m.CommitTime}
		switch {
		case r.resume.skipTx(m.FinalLSN):
			r.tx.skipAll = true
		case m.FinalLSN == r.resume.lsn && r.resume.at > 0:
			p := r.resume
			r.tx.skipTo = &p
		case m.FinalLSN == r.resume.lsn:
			r.tx.skipN = r.resume.k
		}
	case *pglogrepl.CommitMessage:
		if r.held != nil {
			p := position{lsn: m.TransactionEndLSN}
			if err := r.push(ctx, p); err != nil {
				return err
			}
		}
		r.tx = txState{}
	case *pglogrepl.RelationMessage:
		return r.relation(ctx, m, at)
	case *pglogrepl.InsertMessage:
		return r.change(ctx, at, m.RelationID, sluice.OpInsert, nil, m.Tuple)
	case *pglogrepl.UpdateMessage:
		return r.change(ctx, at, m.RelationID, sluice.OpUpdate, m.OldTuple, m.NewTuple)
	case *pglogrepl.DeleteMessage:
		return r.change(ctx, at, m.RelationID, sluice.OpDelete, m.OldTuple, nil)
	case *pglogrepl.LogicalDecodingMessage:
		return r.marker(ctx, m, at)
	case *pglogrepl.TruncateMessage:
		truncated, err := r.truncateTables(ctx, m.RelationIDs)
		var te *sluice.TableError
		if errors.As(err, &te) {
			if r.skipping(at) {
				return nil
			}
			return r.stop(ctx, fmt.Errorf("%w (stream stopped at %s, nothing after it applied)", err, r.errPos()))
		}
		if err != nil {
			return err
		}
		if len(truncated) == 0 {
			return nil
		}
		if !r.tx.open {
			return &fatalError{fmt.Errorf("TRUNCATE outside a transaction in the replication stream at LSN %s", at)}
		}
		if r.cfg.Truncate != "apply" {
			if r.skipping(at) {
				return nil
			}
			names := make([]string, len(truncated))
			for i, rs := range truncated {
				names[i] = rs.table.Name.String()
			}
			return r.stop(ctx, fmt.Errorf("TRUNCATE of %s at LSN %s: the truncate setting is \"refuse\": truncate the target table(s) yourself; the stream stops at %s, before the transaction's remaining changes",
				strings.Join(names, ", "), r.tx.commit, r.errPos()))
		}
		// One change per table, in the message's order, each the next of
		// the truncate record's changes.
		for _, rs := range truncated {
			if !r.take(at) {
				continue
			}
			if err := r.hold(ctx, sluice.Change{Table: rs.table, Op: sluice.OpTruncate, Time: r.tx.time}); err != nil {
				return err
			}
		}
	}
	return nil
}

// skipping reports whether the next change of the open transaction, from
// the WAL record at at, is one the resume position says is applied.
func (r *Reader) skipping(at pglogrepl.LSN) bool {
	switch {
	case r.tx.skipAll:
		return true
	case r.tx.skipTo != nil:
		return r.tx.skipTo.skipChange(at, r.tx.next(at))
	}
	return r.tx.n < r.tx.skipN
}

// take counts the next change of the open transaction, from the WAL
// record at at, and reports whether to hand it out: whether the resume
// position has not applied it.
func (r *Reader) take(at pglogrepl.LSN) bool {
	skip := r.skipping(at)
	r.tx.idx = r.tx.next(at)
	r.tx.at = at
	r.tx.n++
	return !skip
}

// hold keeps c, the change just taken, until the next change or the commit
// gives its position, and pushes the one held before it.
func (r *Reader) hold(ctx context.Context, c sluice.Change) error {
	if r.held != nil {
		if err := r.push(ctx, r.heldPos); err != nil {
			return err
		}
	}
	r.held, r.heldPos = &c, position{lsn: r.tx.commit, at: r.tx.at, i: r.tx.idx}
	return nil
}

// errPos is the position a stream stopped by an error resumes from: right
// after the last change pushed (the held one, if any, is pushed first).
func (r *Reader) errPos() string {
	if r.held != nil {
		return r.heldPos.sluice().String()
	}
	return r.resume.sluice().String()
}

// stop pushes the change held back, then err, and ends streaming.
func (r *Reader) stop(ctx context.Context, err error) error {
	if r.held != nil {
		if perr := r.push(ctx, r.heldPos); perr != nil {
			return perr
		}
	}
	return &fatalError{err}
}

// push hands the held change to the buffer with position p, blocking while
// the buffer is full but still reporting status to the server.
func (r *Reader) push(ctx context.Context, p position) error {
	c := *r.held
	r.held = nil
	c.Pos = p.sluice()
	it := item{kind: itemChange, change: c, size: int64(c.Size())}
	if r.budget.TryTake(it.size) {
		select {
		case r.items <- it:
			r.resume = p
			return nil
		default:
		}
	} else {
		it.size = -1 // not taken yet
	}
	t := time.NewTicker(max(r.cfg.StatusInterval/2, 100*time.Millisecond))
	defer t.Stop()
	for {
		var send chan item
		if it.size < 0 {
			if n := int64(c.Size()); r.budget.TryTake(n) {
				it.size = n
			}
		}
		if it.size >= 0 {
			send = r.items
		}
		select {
		case send <- it:
			r.resume = p
			return nil
		case <-r.budget.Freed():
		case <-ctx.Done():
			if it.size > 0 {
				r.budget.Give(it.size)
			}
			return ctx.Err()
		case <-t.C:
			if err := r.sendStatus(false); err != nil {
				return err
			}
		case <-r.wake:
			if err := r.sendStatus(false); err != nil {
				return err
			}
		}
	}
}

// change turns an insert, update or delete, from the WAL record at at,
// into a Change, holding it back until the next one (or the commit) gives
// its position.
func (r *Reader) change(ctx context.Context, at pglogrepl.LSN, rel uint32, op sluice.Op, old, new *pglogrepl.TupleData) error {
	rs := r.rels[rel]
	var leaf *leafRel
	if rs == nil {
		if leaf = r.leaves[rel]; leaf != nil {
			rs = leaf.root
		}
	}
	if rs == nil {
		if !r.ignored[rel] {
			r.ignored[rel] = true
			r.log.Warn("publication streams a table sluice was not configured for; ignoring its changes", "relation_oid", rel, "publication", r.cfg.Publication)
		}
		return nil
	}
	if !r.tx.open {
		return &fatalError{fmt.Errorf("change to %s outside a transaction in the replication stream", rs.table.Name)}
	}
	if err := r.emitDeferred(ctx); err != nil {
		return err
	}
	if !r.take(at) {
		return nil
	}
	pending := &rs.pending
	if leaf != nil {
		pending = &leaf.pending
	}
	if *pending != nil {
		if err := r.relation(ctx, *pending, at); err != nil {
			return err
		}
	}
	var perm []int
	if leaf != nil {
		perm = leaf.perm
	}
	t := rs.table
	c := sluice.Change{Table: t, Op: op, Time: r.tx.time}
	var err error
	if new != nil {
		if c.Row, err = r.tuple(rs, new, perm); err != nil {
			return err
		}
	}
	if old != nil {
		oldRow, err := r.tuple(rs, old, perm)
		if err != nil {
			return err
		}
		c.Key = t.KeyOf(oldRow)
	} else if op == sluice.OpUpdate {
		c.Key = t.KeyOf(c.Row)
	} else if op == sluice.OpDelete {
		return &fatalError{fmt.Errorf("delete from %s at LSN %s without the old key: check the table's REPLICA IDENTITY (want DEFAULT with a primary key)", t.Name, r.tx.commit)}
	}
	for i, v := range c.Key {
		if v.Null || v.Unchanged {
			return &fatalError{fmt.Errorf("%s on %s at LSN %s: key column %s not sent (REPLICA IDENTITY changed?): set REPLICA IDENTITY DEFAULT",
				op, t.Name, r.tx.commit, t.Columns[t.Key[i]].Name)}
		}
	}
	return r.hold(ctx, c)
}

// tuple turns a row of the relation into one of rs's table: a leaf
// partition's columns go to the table's columns perm names.
func (r *Reader) tuple(rs *relState, td *pglogrepl.TupleData, perm []int) (sluice.Row, error) {
	t := rs.table
	if len(td.Columns) != len(t.Columns) {
		return nil, &fatalError{fmt.Errorf("row of %s at LSN %s has %d columns, the table %d", t.Name, r.tx.commit, len(td.Columns), len(t.Columns))}
	}
	row := make(sluice.Row, len(td.Columns))
	// The text values of the row are copied into one string, which the
	// columns' values are slices of: one allocation per row, not one per
	// column.
	n := 0
	for _, c := range td.Columns {
		if c.DataType == pglogrepl.TupleDataTypeText {
			n += len(c.Data)
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, c := range td.Columns {
		if c.DataType == pglogrepl.TupleDataTypeText {
			b.Write(c.Data)
		}
	}
	text := b.String()
	off := 0
	for i, c := range td.Columns {
		if perm != nil {
			i = perm[i]
		}
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			row[i] = sluice.Null
		case pglogrepl.TupleDataTypeToast:
			row[i] = sluice.Value{Unchanged: true}
		case pglogrepl.TupleDataTypeText:
			v := text[off : off+len(c.Data)]
			off += len(c.Data)
			row[i] = sluice.Text(castText(rs.typ[i].base, v))
		default:
			return nil, &fatalError{fmt.Errorf("column %s of %s at LSN %s: unexpected tuple data type %q", t.Columns[i].Name, t.Name, r.tx.commit, c.DataType)}
		}
	}
	return row, nil
}

func (r *Reader) formatType(ctx context.Context, oid uint32, typmod int32) (string, uint32, error) {
	var s string
	var base uint32
	err := r.withSQL(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT format_type($1, $2), coalesce(nullif(typbasetype, 0), oid) FROM pg_type WHERE oid = $1`, oid, typmod).Scan(&s, &base)
	})
	if err != nil {
		return fmt.Sprintf("type %d", oid), oid, fmt.Errorf("look up type %d: %w", oid, err)
	}
	return s, base, nil
}

// castText turns a value's output-function text, which pgoutput sends, into
// the text of value::text, which the other PostgreSQL reader gives: they
// differ for the types with a cast to text of their own.
func castText(base uint32, s string) string {
	switch base {
	case 16: // boolean: 't' → true
		switch s {
		case "t":
			return "true"
		case "f":
			return "false"
		}
	case 1042: // character(n): the cast drops the padding
		return strings.TrimRight(s, " ")
	case 869: // inet: the cast always shows the netmask
		if !strings.Contains(s, "/") {
			if strings.Contains(s, ":") {
				return s + "/128"
			}
			return s + "/32"
		}
	}
	return s
}

func (r *Reader) aliveColumns(ctx context.Context, rel uint32, cols []sluice.Column) (bool, error) {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	var n int
	err := r.withSQL(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = $1 AND attname = ANY($2) AND NOT attisdropped AND attnum > 0`, rel, names).Scan(&n)
	})
	if err != nil {
		return false, fmt.Errorf("look up columns of relation %d: %w", rel, err)
	}
	return n == len(names), nil
}

// ErrSlotLost is matched (errors.Is) by the errors of a stream whose
// replication slot was dropped or invalidated: the changes it held are
// gone, and the target needs a fresh copy.
var ErrSlotLost = errors.New("replication slot lost")

// slotLost keeps its error's message and makes it match ErrSlotLost.
type slotLost struct{ error }

func (e slotLost) Unwrap() error        { return e.error }
func (e slotLost) Is(target error) bool { return target == ErrSlotLost }
