package pglogical

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
)

const (
	// bufferChanges bounds the changes decoded but not yet read, and
	// source.DefaultBufferBytes their bytes: the receiver stops reading the
	// socket when either is reached.
	bufferChanges = 4096
	// pageChanges is the most changes the receiver hands Read at once (a
	// page): bufferChanges/pageChanges pages are buffered.
	pageChanges = 512
	// pageLinger is how long the receiver waits for the server's next
	// message before it hands out a page that is not full, and pageMaxAge
	// how long it keeps adding to one: a page's changes wait no longer
	// for Read than that.
	pageLinger = time.Millisecond
	pageMaxAge = 10 * time.Millisecond
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

type itemKind uint8

const (
	itemChanges itemKind = iota + 1
	// itemIdle says the server has decoded everything up to lsn and sent
	// every change before it: no streamed change commits below lsn that
	// the reader has not buffered.
	itemIdle
	itemErr
)

type item struct {
	kind itemKind
	page page
	size int64 // the page's bytes taken from the budget
	lsn  pglogrepl.LSN
	err  error
}

// page is a run of changes the receiver decoded, handed to Read in one
// channel item. Read hands out its changes as they are, not copied (see
// source.Reader): the receiver never touches a page again once sent.
type page struct {
	changes []sluice.Change
	// starts are the changes that may begin a transaction handed out in
	// part (see Reader.emit), in order.
	starts []txMark
	last   position // the position of the last change
}

// txMark is a change of a page, the i-th, inside the transaction
// committing at commit, where the change before it (prev) is not: it
// begins a transaction handed out in part. The first change of a page
// inside a transaction has one whatever came before it: Read compares it
// with what it handed out last, which may be another page's or a
// progress marker.
type txMark struct {
	i      int
	commit pglogrepl.LSN
	prev   position
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
	// rest is the page Read took last, of which it handed out the
	// changes before restAt.
	rest   page
	restAt int

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
	// held is the newest change of tx (when hasHeld), pushed once its
	// successor or the commit is known.
	held    sluice.Change
	hasHeld bool
	// out is the page being filled (see push), sent when full, before
	// the receiver waits (see stream) and before any other item; outSize
	// is its bytes taken from the budget, outSince when its first change
	// came, lastPage the length of the page sent last.
	out      page
	outSize  int64
	outSince time.Time
	lastPage int
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
		items:   make(chan item, bufferChanges/pageChanges),
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

// Read returns up to max changes, waiting up to the poll interval for the
// first one. It hands out what the receiver decoded without copying it: a
// page (see page), or the part of one that max allows, the rest going out
// next.
func (r *Reader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	r.readMu.Lock()
	defer r.readMu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	if max <= 0 {
		max = 1
	}
	if r.restAt == len(r.rest.changes) {
		timer := time.NewTimer(r.cfg.PollInterval)
		defer timer.Stop()
	wait:
		for {
			var it item
			select {
			case it = <-r.items:
			case <-timer.C:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			switch it.kind {
			case itemChanges:
				r.budget.Give(it.size)
				r.rest, r.restAt = it.page, 0
				break wait
			case itemIdle:
				if c, ok := r.progress(it.lsn); ok {
					return []sluice.Change{c}, nil
				}
			case itemErr:
				r.err = it.err
				return nil, r.err
			}
		}
	}
	return r.emit(max), nil
}

// emit hands out up to max changes of the page Read took last, and
// records them as handed out: the transactions begun and not ended among
// them (mids), and the position after them.
func (r *Reader) emit(max int) []sluice.Change {
	from := r.restAt
	to := min(from+max, len(r.rest.changes))
	out := r.rest.changes[from:to:to]
	r.restAt = to
	last := r.rest.last
	if to < len(r.rest.changes) {
		// Handed out in part (the stream asked for less than a page): the
		// last change's position is only in its token.
		last, _, _ = parsePosition(out[len(out)-1].Pos)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	starts := r.rest.starts
	for len(starts) > 0 && starts[0].i < to {
		m := starts[0]
		starts = starts[1:]
		prev := m.prev
		if m.i == from {
			prev = r.lastEmitted
		}
		if prev.inTx() && prev.lsn == m.commit {
			continue
		}
		// The first change handed out of a transaction that is not
		// handed out whole yet: until it is acked past, the slot may only
		// confirm up to where the transactions before it end.
		before := pglogrepl.LSN(0)
		if !prev.inTx() {
			before = prev.lsn
		}
		r.mids = append(r.mids, txStart{commit: m.commit, before: before})
	}
	r.rest.starts = starts
	r.lastEmitted = last
	if to == len(r.rest.changes) {
		r.rest, r.restAt = page{}, 0
	}
	return out
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

// ErrSlotLost is matched (errors.Is) by the errors of a stream whose
// replication slot was dropped or invalidated: the changes it held are
// gone, and the target needs a fresh copy.
var ErrSlotLost = errors.New("replication slot lost")

// slotLost keeps its error's message and makes it match ErrSlotLost.
type slotLost struct{ error }

func (e slotLost) Unwrap() error        { return e.error }
func (e slotLost) Is(target error) bool { return target == ErrSlotLost }
