package binlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
	"github.com/sluice-cdc/sluice"
)

// state is the decoding goroutine's own state; nothing else touches it.
type state struct {
	r   *Reader
	pos *position // base: where the current (or next) transaction starts

	curFile string
	inTxn   bool
	txn     string // GTID of the current transaction
	mgtid   *mysql.MariadbGTID
	sid     uuid.UUID
	tag     mysql.Tag
	gno     int64
	xa      string // the XID when the current transaction is an XA one
	lastRow *rowID // the last row of the current transaction handled

	// Resume inside a transaction: skip every row up to skipTo (of any
	// table), then, for a token of an earlier version, skipK changes of
	// the streamed tables; expectTxn is the transaction they are in.
	skipTo    *rowID
	skipK     int
	expectTxn string

	sub uint32 // numbers the event being handled inside a compressed payload

	stmtWarned map[string]bool // databases warned about statement-logged writes

	// Progress markers: dirty when the position moved to a boundary that
	// no change or marker handed out since names.
	dirty      bool
	lastMarker time.Time

	byID   map[uint64]*tableMap
	byName map[string]*sluice.Table // newest description per "schema.table"
	defs   map[string][]colDef      // newest table-map columns per "schema.table"
	// live holds the tables with a change emitted since Open (not only
	// skipped as below the resume position).
	live map[string]bool

	first *replication.BinlogEvent // event read while connecting
	// buf is the page being gathered for Read, bufBytes its changes'
	// sizes (Change.Size).
	buf      []sluice.Change
	bufBytes int64

	dec     rowsDecoder // the current rows event's images, reused
	scratch sluice.Row  // a before image, for its key
}

// retryable MySQL errors: the server is going away or killed us.
func retryable(err error) bool {
	var me *mysql.MyError
	if errors.As(err, &me) {
		switch me.Code {
		case 1053, 1077, 1078, 1317, 1927, 2006, 2013: // shutdown, killed, lost connection
			return true
		}
		return false
	}
	return true // network errors, EOF, timeouts
}

// connect starts a dump at the state's position.
func (s *state) connect(ctx context.Context) (*replication.BinlogStreamer, error) {
	r := s.r
	sy := r.newSyncer()
	r.mu.Lock()
	if r.syncr != nil {
		r.syncr.Close()
	}
	r.syncr = sy
	r.mu.Unlock()
	var st *replication.BinlogStreamer
	var err error
	if s.pos.mode == modeFile {
		st, err = sy.StartSync(mysql.Position{Name: s.pos.file, Pos: s.pos.off})
	} else {
		st, err = sy.StartSyncGTID(s.pos.gset.Clone())
	}
	if err != nil {
		return nil, s.dumpErr(err)
	}
	// The first event (a fake ROTATE) arrives at once, or the server's
	// refusal does: read it here so that Open reports a refusal.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev, err := st.GetEvent(fctx)
	if err != nil && fctx.Err() == nil {
		return nil, s.dumpErr(err)
	}
	s.first = ev
	return st, nil
}

func (s *state) dumpErr(err error) error {
	msg := err.Error()
	hint := ""
	switch {
	case strings.Contains(msg, "REPLICATION SLAVE") || strings.Contains(msg, "1227") || strings.Contains(msg, "Access denied"):
		hint = fmt.Sprintf(": GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s", s.r.conn.user)
	case strings.Contains(msg, "1236") || strings.Contains(strings.ToLower(msg), "purged") || strings.Contains(msg, "Could not find"):
		hint = ": the binlog at this position is no longer on the source (purged?); start over from a fresh copy with a new position"
	}
	return &cleanErr{msg: fmt.Sprintf("binlog: start reading the binary log of %s:%d at %s: %s%s",
		s.r.conn.host, s.r.conn.port, s.pos.base(), firstLine(err), hint), err: err}
}

// cleanErr keeps go-mysql's error for errors.As but not its stack trace
// in the message.
type cleanErr struct {
	msg string
	err error
}

func (e *cleanErr) Error() string { return e.msg }
func (e *cleanErr) Unwrap() error { return e.err }

// run reads events until ctx ends or a fatal error, reconnecting after
// connection losses from the exact position.
func (s *state) run(ctx context.Context, st *replication.BinlogStreamer) {
	defer close(s.r.out)
	for {
		err := s.stream(ctx, st)
		if ctx.Err() != nil {
			return
		}
		if !retryable(err) {
			s.send(ctx, nil, 0, &cleanErr{msg: "binlog: " + firstLine(err), err: err})
			return
		}
		s.r.reconnects.Add(1)
		s.r.log.Warn("binlog connection lost; reconnecting", "err", firstLine(err), "position", s.resumeToken())
		// Resume: restart at the base and skip the rows of the current
		// transaction handled already. (While a resume position given to
		// Open is not reached yet, it still applies: it is further.)
		if s.inTxn && s.lastRow != nil && s.skipTo == nil {
			r := *s.lastRow
			s.skipTo, s.expectTxn = &r, s.txn
		}
		s.inTxn, s.txn, s.xa, s.lastRow = false, "", "", nil
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			st, err = s.connect(ctx)
			if err == nil {
				s.r.log.Info("binlog reconnected", "position", s.pos.base())
				break
			}
			if !retryable(err) {
				s.send(ctx, nil, 0, err)
				return
			}
			s.r.log.Warn("binlog reconnect failed; retrying", "err", firstLine(err))
		}
	}
}

func (s *state) resumeToken() string {
	p := *s.pos
	p.txn, p.at, p.oldK = s.txn, s.lastRow, 0
	if !s.inTxn {
		p.txn, p.at = "", nil
	}
	return p.token()
}

// send hands decoded changes of size bytes to Read, waiting while the
// bytes decoded ahead are over the budget or the channel is full.
func (s *state) send(ctx context.Context, cs []sluice.Change, size int64, err error) {
	for !s.r.budget.TryTake(size) {
		select {
		case <-s.r.budget.Freed():
		case <-ctx.Done():
			return
		}
	}
	select {
	case s.r.out <- batch{changes: cs, size: size, err: err}:
	case <-ctx.Done():
		s.r.budget.Give(size)
	}
}

func (s *state) flush(ctx context.Context) {
	if len(s.buf) > 0 {
		s.send(ctx, s.buf, s.bufBytes, nil)
		s.buf, s.bufBytes = nil, 0
	}
}

// flushAt and flushBytes bound the page of changes the reader gathers
// before it hands them to Read. A page per rows event (ten changes in a
// typical transaction) cost a channel send, a budget take and an append
// in Read for every one of them; the stream flushes what it holds before
// it waits for the source, so a quiet source's changes never wait for a
// page to fill. The byte bound keeps a page of large rows a small part of
// the read-ahead budget (Config.BufferBytes), which is taken a page at a
// time: a page over what is left of it waits until Read frees room.
const (
	flushAt    = 256
	flushBytes = 64 << 10
)

// flushFull hands the changes gathered to Read once they fill a page.
func (s *state) flushFull(ctx context.Context) {
	if len(s.buf) >= flushAt || s.bufBytes >= flushBytes {
		s.flush(ctx)
	}
}

// emit queues a change for Read. Any change is also progress.
func (s *state) emit(c sluice.Change) {
	s.buf = append(s.buf, c)
	s.bufBytes += int64(c.Size())
	s.dirty = false
}

// boundary is the position after the last finished transaction.
func (s *state) boundary() sluice.Position {
	return sluice.Position{Kind: Kind, Token: s.pos.base()}
}

// progress hands out a progress marker when the position moved to a
// boundary no change names (past log that gave no change, or the end of
// a transaction that did) and the last marker is at least the configured
// interval old. Only between transactions: the marker's
// position is the last boundary, which must not go behind a change of
// the current transaction already handed out.
func (s *state) progress(ctx context.Context, now time.Time) {
	if !s.dirty || s.inTxn || now.Sub(s.lastMarker) < s.r.cfg.ProgressInterval {
		return
	}
	// Time stays zero: no source commit happens at a marker, and a lag
	// measured from the last one would grow while the stream keeps up.
	s.emit(sluice.Change{Op: sluice.OpProgress, Pos: s.boundary()})
	s.lastMarker = now
	s.flush(ctx)
}

// progressDue says when a pending progress marker is due.
func (s *state) progressDue() (time.Time, bool) {
	if !s.dirty || s.inTxn {
		return time.Time{}, false
	}
	return s.lastMarker.Add(s.r.cfg.ProgressInterval), true
}

// stream handles events until an error.
func (s *state) stream(ctx context.Context, st *replication.BinlogStreamer) error {
	s.byID = map[uint64]*tableMap{}
	// ready are events the syncer had already received, taken from its
	// buffer at once (DumpEvents): a catch-up finds it full, and waiting
	// for each event with a deadline of its own cost a context and a
	// timer per event. Only an empty buffer is waited on.
	var ready []*replication.BinlogEvent
	for {
		ev := s.first
		s.first = nil
		if ev == nil {
			if len(ready) == 0 {
				ready = st.DumpEvents()
			}
			if len(ready) > 0 {
				ev, ready[0], ready = ready[0], nil, ready[1:]
			} else {
				// About to wait for the source: what was gathered goes
				// out now.
				s.flush(ctx)
			}
		}
		// A live source sends an event (at least a heartbeat) every
		// heartbeat period; silence for three means the connection is
		// dead. The clock runs only while we wait for the source, never
		// while our consumer is slow (backpressure), so a slow target
		// does not cause reconnects.
		waitStart := time.Now()
		for ev == nil {
			dead := waitStart.Add(3 * s.r.cfg.HeartbeatPeriod)
			wake := dead
			due, pending := s.progressDue()
			if pending && due.Before(wake) {
				wake = due
			}
			ectx, cancel := context.WithDeadline(ctx, wake)
			var err error
			ev, err = st.GetEvent(ectx)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			if now := time.Now(); now.Before(dead) {
				// Woken for a progress marker, not by silence.
				s.progress(ctx, now)
				waitStart = waitStart.Add(time.Since(now)) // time spent handing it over
				continue
			}
			return fmt.Errorf("no event or heartbeat from the source for %s", time.Since(waitStart).Round(time.Millisecond))
		}
		if err := s.handle(ctx, ev); err != nil {
			s.flush(ctx)
			if ctx.Err() == nil {
				s.send(ctx, nil, 0, err)
			}
			<-ctx.Done() // a fatal error: wait for Close
			return ctx.Err()
		}
		s.flushFull(ctx)
		s.progress(ctx, time.Now())
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (s *state) handle(ctx context.Context, ev *replication.BinlogEvent) error {
	h := ev.Header
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		s.curFile = string(e.NextLogName)
		if s.pos.mode == modeFile && !s.inTxn && (h.Timestamp != 0 || h.LogPos != 0) {
			// A real rotation (not the dump's fake first event): the next
			// transaction starts in the new file. Checkpointing the new
			// file's position lets the source purge the old one.
			if s.pos.file != s.curFile || s.pos.off != uint32(e.Position) {
				s.pos.file, s.pos.off = s.curFile, uint32(e.Position)
				s.pos.baseStr = ""
				s.dirty = true
			}
		}
	case *replication.MariadbGTIDEvent:
		s.begin()
		g := e.GTID
		s.mgtid = &g
		s.txn = g.String()
		if e.Flags&mariaFlPreparedXA != 0 {
			// MariaDB logs XA START in the GTID event itself.
			s.xa = mariaXID(ev.RawData, e.Flags)
		}
		return s.checkExpected()
	case *replication.GTIDEvent:
		s.begin()
		if u, err := uuid.FromBytes(e.SID); err == nil && u != uuid.Nil && h.EventType != replication.ANONYMOUS_GTID_EVENT {
			s.sid, s.gno = u, e.GNO
			s.txn = fmt.Sprintf("%s:%d", u, e.GNO)
		}
		return s.checkExpected()
	case *replication.GtidTaggedLogEvent:
		// MySQL 8.4's tagged GTIDs (uuid:tag:gno).
		s.begin()
		if u, err := uuid.FromBytes(e.SID); err == nil && u != uuid.Nil {
			s.sid, s.tag, s.gno = u, e.Tag, e.GNO
			s.txn = fmt.Sprintf("%s:%d", u, e.GNO)
			if e.Tag != (mysql.Tag{}) {
				s.txn = fmt.Sprintf("%s:%s:%d", u, e.Tag, e.GNO)
			}
		}
		return s.checkExpected()
	case *replication.QueryEvent:
		q := strings.TrimSpace(string(e.Query))
		u := strings.ToUpper(q)
		switch u {
		case "BEGIN", "START TRANSACTION":
			s.inTxn = true
			return nil
		case "COMMIT", "ROLLBACK":
			s.flush(ctx)
			return s.commit(h)
		}
		if xid, ok := xaStart(q); ok {
			// MySQL: the XA transaction's rows follow, up to XA END and
			// the XA_PREPARE event that ends the group.
			s.inTxn, s.xa = true, xid
			return nil
		}
		if strings.HasPrefix(u, "XA END") {
			return nil
		}
		if schema, table, ok := truncateOf(q, string(e.Schema)); ok {
			return s.truncate(ctx, h, schema, table)
		}
		if dml, err := s.statement(h, string(e.Schema), q); err != nil {
			return err
		} else if dml && s.inTxn {
			return nil // a write to other tables, part of its transaction
		}
		if err := ddlCheck(q, string(e.Schema), func(schema, table string) bool {
			return s.r.repl[schema+"."+table] != nil
		}); err != nil {
			return fmt.Errorf("binlog: %w", err)
		}
		if c := s.schemaChangeOf(q, string(e.Schema)); c != nil {
			return s.schemaChange(ctx, h, c)
		}
		if s.inTxnExplicit(q) {
			return nil // SAVEPOINT and the like inside a transaction
		}
		s.flush(ctx)
		return s.commit(h)
	case *replication.XIDEvent:
		s.flushFull(ctx)
		return s.commit(h)
	case *replication.GenericEvent:
		if h.EventType == replication.XA_PREPARE_LOG_EVENT {
			// XA PREPARE ends the event group of an XA transaction (one
			// that wrote a streamed table stopped the stream before).
			s.flush(ctx)
			return s.commit(h)
		}
	case *replication.TransactionPayloadEvent:
		// MySQL's binlog_transaction_compression: the transaction's events
		// come decompressed inside. Their own LogPos is not a file offset:
		// they are named by the payload's end and their number in it, and
		// the commit position is the payload event's.
		defer func() { s.sub = 0 }()
		for i, inner := range e.Events {
			s.sub = uint32(i + 1)
			if _, ok := inner.Event.(*replication.XIDEvent); ok {
				s.flush(ctx)
				if err := s.commit(h); err != nil {
					return err
				}
				continue
			}
			ih := *inner.Header
			ih.LogPos = h.LogPos
			if err := s.handle(ctx, &replication.BinlogEvent{RawData: inner.RawData, Header: &ih, Event: inner.Event}); err != nil {
				return err
			}
		}
	case *replication.ExecuteLoadQueryEvent:
		// LOAD DATA logged as a statement (its file came before, in
		// BEGIN_LOAD_QUERY events), inside its transaction.
		db, q, ok := loadQuery(ev.RawData)
		if !ok {
			return fmt.Errorf("binlog: cannot read the LOAD DATA statement logged ending at %s", s.at(h))
		}
		if _, err := s.statement(h, db, q); err != nil {
			return err
		}
	case *replication.TableMapEvent:
		return s.tableMap(e)
	case *replication.RowsEvent:
		return s.rows(ctx, h, e)
	}
	return nil
}

// truncate ends the TRUNCATE statement's transaction and, for a streamed
// table, hands out the truncation at the position after it.
func (s *state) truncate(ctx context.Context, h *replication.EventHeader, schema, table string) error {
	s.flush(ctx)
	if err := s.commit(h); err != nil {
		return err
	}
	name := schema + "." + table
	if s.r.repl[name] == nil {
		return nil
	}
	t := s.byName[name]
	s.emit(sluice.Change{Op: sluice.OpTruncate, Table: t, Time: time.Unix(int64(h.Timestamp), 0).UTC(), Pos: s.boundary()})
	s.flush(ctx)
	return nil
}

// inTxnExplicit reports whether a non-DDL statement inside BEGIN…COMMIT
// (SAVEPOINT, ROLLBACK TO) leaves the transaction open.
func (s *state) inTxnExplicit(q string) bool {
	u := strings.ToUpper(q)
	return s.inTxn && (strings.HasPrefix(u, "SAVEPOINT") || strings.HasPrefix(u, "ROLLBACK TO") || strings.HasPrefix(u, "RELEASE SAVEPOINT"))
}

func (s *state) begin() {
	s.inTxn = true
	s.txn, s.mgtid, s.sid, s.tag, s.gno = "", nil, uuid.Nil, mysql.Tag{}, 0
	s.xa, s.lastRow = "", nil
}

func (s *state) checkExpected() error {
	if s.expectTxn != "" && s.txn != "" && s.txn != s.expectTxn {
		return fmt.Errorf("binlog: the position is inside transaction %s but the source sent %s first: "+
			"the binlog at %s is not the one the position was taken from", s.expectTxn, s.txn, s.pos.base())
	}
	return nil
}

// commit ends the current transaction: the base moves past it.
func (s *state) commit(h *replication.EventHeader) error {
	if s.skipTo != nil {
		return fmt.Errorf("binlog: the position is after row %d of the rows event ending at %d of transaction %s, but the transaction has no such event: "+
			"the binlog at %s is not the one the position was taken from", s.skipTo.row, s.skipTo.ev.pos, orAnon(s.expectTxn), s.pos.base())
	}
	if s.skipK > 0 {
		return fmt.Errorf("binlog: the position is %d changes further into transaction %s than it has changes of the streamed tables: "+
			"the binlog is not the one the position was taken from, or the table list changed since the position was written "+
			"(positions of that form, from sluice before positions named binlog events, resume only with the table list that wrote them)", s.skipK, orAnon(s.expectTxn))
	}
	switch s.pos.mode {
	case modeMariaDB:
		if s.mgtid != nil {
			set := s.pos.gset.(*mysql.MariadbGTIDSet)
			if prev, ok := set.Sets[s.mgtid.DomainID]; ok && s.mgtid.SequenceNumber <= prev.SequenceNumber {
				// Covers and the purge check order MariaDB transactions
				// by sequence number within a domain; a binlog that
				// breaks that order would make them wrong, silently.
				return fmt.Errorf("binlog: GTID %s follows %s in replication domain %d with a sequence number that is not higher "+
					"(two servers writing one domain without gtid_strict_mode?): sluice orders MariaDB positions by sequence number within a domain and cannot follow this binlog; "+
					"give each primary its own gtid_domain_id and set gtid_strict_mode=ON, then start the stream again from a fresh copy", s.mgtid, prev, s.mgtid.DomainID)
			}
			if err := set.AddSet(s.mgtid); err != nil {
				return fmt.Errorf("binlog: track GTID %s: %w", s.txn, err)
			}
		}
	case modeMySQL:
		if s.sid != uuid.Nil {
			s.pos.gset.(*mysql.MysqlGTIDSet).AddGTIDWithTag(s.sid, s.tag, s.gno)
		}
	case modeFile:
		if h.LogPos > 0 && s.curFile != "" {
			s.pos.file, s.pos.off = s.curFile, h.LogPos
		}
	}
	// The boundary after the transaction is a position no change names,
	// whether or not the transaction gave changes: a checkpoint at its
	// last change does not cover the boundary, and on a quiet source
	// nothing else would move it there (cutover waits for the source's
	// position, which is that boundary).
	s.dirty = true
	s.pos.baseStr = ""
	s.inTxn, s.txn, s.mgtid, s.sid, s.tag, s.gno = false, "", nil, uuid.Nil, mysql.Tag{}, 0
	s.xa, s.lastRow = "", nil
	s.expectTxn = ""
	return nil
}

// firstLine drops the stack traces go-mysql's errors carry.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}
