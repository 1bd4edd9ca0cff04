package pglogical

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice"
)

// tupleBuf decodes a pgoutput TupleData into memory reused from one message
// to the next. pglogrepl's decoder allocates a message, a tuple and every
// column and copies each value byte by byte; on a backlog that was a
// visible part of the reader's CPU. The columns' Data slices point into
// the message, so they are valid only until the next message is read: the
// reader copies them into strings (see Reader.tuple) before that.
type tupleBuf struct {
	td   pglogrepl.TupleData
	cols []pglogrepl.TupleDataColumn
	ptrs []*pglogrepl.TupleDataColumn
}

// decode reads a TupleData from the start of src and returns its length.
// Unlike pglogrepl's decoder, it checks every length against src.
func (b *tupleBuf) decode(src []byte) (int, error) {
	if len(src) < 2 {
		return 0, fmt.Errorf("tuple data: %d bytes, want at least 2", len(src))
	}
	n := int(binary.BigEndian.Uint16(src))
	off := 2
	if cap(b.cols) < n {
		b.cols = make([]pglogrepl.TupleDataColumn, n)
		b.ptrs = make([]*pglogrepl.TupleDataColumn, n)
	}
	b.cols, b.ptrs = b.cols[:n], b.ptrs[:n]
	for i := range n {
		if off >= len(src) {
			return 0, fmt.Errorf("tuple data: column %d of %d: the message ends", i+1, n)
		}
		c := &b.cols[i]
		*c = pglogrepl.TupleDataColumn{DataType: src[off]}
		off++
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(src)-off < 4 {
				return 0, fmt.Errorf("tuple data: column %d of %d: the message ends in its length", i+1, n)
			}
			l := binary.BigEndian.Uint32(src[off:])
			off += 4
			if uint64(len(src)-off) < uint64(l) {
				return 0, fmt.Errorf("tuple data: column %d of %d: %d bytes announced, %d left", i+1, n, l, len(src)-off)
			}
			c.Length, c.Data = l, src[off:off+int(l)]
			off += int(l)
		default:
			return 0, fmt.Errorf("tuple data: column %d of %d: unknown kind %q", i+1, n, c.DataType)
		}
		b.ptrs[i] = c
	}
	b.td.ColumnNum, b.td.Columns = uint16(n), b.ptrs
	return off, nil
}

// rowMessage is an insert, update or delete message of pgoutput's protocol
// version 1, decoded into the reader's reused buffers.
type rowMessage struct {
	rel      uint32
	old, new *pglogrepl.TupleData // nil when the message has none
}

// decodeRowMessage decodes data when it is an insert ('I'), update ('U')
// or delete ('D') message; ok is false for every other message.
func decodeRowMessage(data []byte, oldBuf, newBuf *tupleBuf) (m rowMessage, ok bool, err error) {
	if len(data) == 0 {
		return m, false, nil
	}
	kind := data[0]
	if kind != 'I' && kind != 'U' && kind != 'D' {
		return m, false, nil
	}
	if len(data) < 6 {
		return m, true, fmt.Errorf("message %c: %d bytes, want at least 6", kind, len(data))
	}
	name := "insert"
	switch kind {
	case 'U':
		name = "update"
	case 'D':
		name = "delete"
	}
	m.rel = binary.BigEndian.Uint32(data[1:])
	off := 5
	if kind != 'I' && (data[off] == 'K' || data[off] == 'O') {
		n, err := oldBuf.decode(data[off+1:])
		if err != nil {
			return m, true, fmt.Errorf("%s message, old tuple: %w", name, err)
		}
		m.old = &oldBuf.td
		off += 1 + n
	}
	if kind == 'D' {
		if m.old == nil {
			return m, true, fmt.Errorf("delete message: tuple kind %q, want K or O", data[off])
		}
		return m, true, nil
	}
	if off >= len(data) || data[off] != 'N' {
		return m, true, fmt.Errorf("%s message: no new tuple (N)", name)
	}
	if _, err := newBuf.decode(data[off+1:]); err != nil {
		return m, true, fmt.Errorf("%s message, new tuple: %w", name, err)
	}
	m.new = &newBuf.td
	return m, true, nil
}

// txMessage is a begin ('B') or commit ('C') message of pgoutput's
// protocol version 1. They come once per transaction each: in a backlog of
// one-row transactions pglogrepl's decoder, which allocates a message per
// call, cost two allocations per change.
type txMessage struct {
	kind byte
	// Begin: final is the commit's LSN, xid the transaction's id.
	final pglogrepl.LSN
	xid   uint32
	// Commit: end is the LSN past the commit record.
	end  pglogrepl.LSN
	time time.Time
}

// decodeTxMessage decodes data when it is a begin or commit message; ok
// is false for every other message. It reads them as pglogrepl does.
func decodeTxMessage(data []byte) (m txMessage, ok bool, err error) {
	if len(data) == 0 {
		return m, false, nil
	}
	m.kind = data[0]
	switch m.kind {
	case 'B':
		if len(data) < 21 {
			return m, true, fmt.Errorf("begin message: %d bytes, want 21", len(data))
		}
		m.final = pglogrepl.LSN(binary.BigEndian.Uint64(data[1:]))
		m.time = pgTime(int64(binary.BigEndian.Uint64(data[9:])))
		m.xid = binary.BigEndian.Uint32(data[17:])
		return m, true, nil
	case 'C':
		if len(data) < 26 {
			return m, true, fmt.Errorf("commit message: %d bytes, want 26", len(data))
		}
		m.end = pglogrepl.LSN(binary.BigEndian.Uint64(data[10:]))
		m.time = pgTime(int64(binary.BigEndian.Uint64(data[18:])))
		return m, true, nil
	}
	return m, false, nil
}

// pgTime is a timestamp of the protocol, microseconds since 2000-01-01
// UTC, as pglogrepl reads it.
func pgTime(us int64) time.Time {
	return time.Unix(0, (pgEpochMicros+us)*1000)
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

// message handles one decoded pgoutput message.
func (r *Reader) message(ctx context.Context, m pglogrepl.Message, at pglogrepl.LSN) error {
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		r.begin(m.FinalLSN, m.Xid, m.CommitTime)
	case *pglogrepl.CommitMessage:
		return r.commit(ctx, m.TransactionEndLSN)
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

// begin opens the transaction committing at final.
func (r *Reader) begin(final pglogrepl.LSN, xid uint32, at time.Time) {
	r.tx = txState{open: true, xid: xid, commit: final, time: at}
	switch {
	case r.resume.skipTx(final):
		r.tx.skipAll = true
	case final == r.resume.lsn && r.resume.at > 0:
		p := r.resume
		r.tx.skipTo = &p
	case final == r.resume.lsn:
		r.tx.skipN = r.resume.k
	}
}

// commit ends the open transaction, whose commit record ends at end: the
// change held back is its last.
func (r *Reader) commit(ctx context.Context, end pglogrepl.LSN) error {
	if r.hasHeld {
		if err := r.push(ctx, position{lsn: end}); err != nil {
			return err
		}
	}
	r.tx = txState{}
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
	if r.hasHeld {
		if err := r.push(ctx, r.heldPos); err != nil {
			return err
		}
	}
	r.held, r.hasHeld, r.heldPos = c, true, position{lsn: r.tx.commit, at: r.tx.at, i: r.tx.idx}
	return nil
}

// errPos is the position a stream stopped by an error resumes from: right
// after the last change pushed (the held one, if any, is pushed first).
func (r *Reader) errPos() string {
	if r.hasHeld {
		return r.heldPos.sluice().String()
	}
	return r.resume.sluice().String()
}

// stop pushes the change held back, then err, and ends streaming.
func (r *Reader) stop(ctx context.Context, err error) error {
	if r.hasHeld {
		if perr := r.push(ctx, r.heldPos); perr != nil {
			return perr
		}
	}
	return &fatalError{err}
}

// push adds the held change, with position p, to the page being filled,
// and sends the page when it is full. It takes the change's bytes from the
// budget first, sending the page and waiting while the budget is spent,
// still reporting status to the server.
func (r *Reader) push(ctx context.Context, p position) error {
	c := r.held
	r.held, r.hasHeld = sluice.Change{}, false
	c.Pos = p.sluice()
	n := int64(c.Size())
	if !r.budget.TryTake(n) {
		// Read gives bytes back as it takes pages: the page filled so
		// far goes first.
		if err := r.sendPage(ctx); err != nil {
			return err
		}
		if err := r.takeBudget(ctx, n); err != nil {
			return err
		}
	}
	if len(r.out.changes) == 0 {
		// Sized like the last page: a catch-up's pages are full, a
		// trickle's hold a transaction or so.
		r.out.changes = make([]sluice.Change, 0, min(max(2*r.lastPage, 16), pageChanges))
		r.outSince = time.Now()
	}
	if p.inTx() && (len(r.out.changes) == 0 || !(r.resume.inTx() && r.resume.lsn == p.lsn)) {
		r.out.starts = append(r.out.starts, txMark{i: len(r.out.changes), commit: p.lsn, prev: r.resume})
	}
	r.out.changes = append(r.out.changes, c)
	r.out.last = p
	r.outSize += n
	r.resume = p
	if len(r.out.changes) >= pageChanges {
		return r.sendPage(ctx)
	}
	return nil
}

// takeBudget waits until n bytes can be taken from the budget, still
// reporting status to the server.
func (r *Reader) takeBudget(ctx context.Context, n int64) error {
	t := time.NewTicker(max(r.cfg.StatusInterval/2, 100*time.Millisecond))
	defer t.Stop()
	for !r.budget.TryTake(n) {
		select {
		case <-r.budget.Freed():
		case <-ctx.Done():
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
	return nil
}

// sendPage sends the page being filled, if it holds changes, to Read,
// blocking while the buffer is full but still reporting status to the
// server. The page is Read's from then on.
func (r *Reader) sendPage(ctx context.Context) error {
	if len(r.out.changes) == 0 {
		return nil
	}
	it := item{kind: itemChanges, page: r.out, size: r.outSize}
	select {
	case r.items <- it:
		r.sent()
		return nil
	default:
	}
	t := time.NewTicker(max(r.cfg.StatusInterval/2, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case r.items <- it:
			r.sent()
			return nil
		case <-ctx.Done():
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

// trySendPage is sendPage that does not wait: it reports whether the page (if
// any) was sent.
func (r *Reader) trySendPage() bool {
	if len(r.out.changes) == 0 {
		return true
	}
	select {
	case r.items <- item{kind: itemChanges, page: r.out, size: r.outSize}:
		r.sent()
		return true
	default:
		return false
	}
}

// sent starts a new page after the one just sent.
func (r *Reader) sent() {
	r.lastPage = len(r.out.changes)
	r.out, r.outSize = page{}, 0
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
		// An update without its old key keeps its key: the key goes in
		// the row's allocation, after it.
		keyRoom := 0
		if old == nil && op == sluice.OpUpdate {
			keyRoom = len(t.Key)
		}
		if c.Row, err = r.tuple(rs, new, perm, keyRoom); err != nil {
			return err
		}
		if keyRoom > 0 {
			n := len(c.Row)
			c.Key = c.Row[n : n+keyRoom]
			c.Row = c.Row[:n:n]
			for i, col := range t.Key {
				c.Key[i] = c.Row[col]
			}
		}
	}
	if old != nil {
		if c.Key, err = r.key(rs, old, perm); err != nil {
			return err
		}
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
// partition's columns go to the table's columns perm names. The row has
// room for keyRoom more values past its length (its capacity).
func (r *Reader) tuple(rs *relState, td *pglogrepl.TupleData, perm []int, keyRoom int) (sluice.Row, error) {
	if err := r.checkTuple(rs, td, perm); err != nil {
		return nil, err
	}
	row := make(sluice.Row, len(td.Columns), len(td.Columns)+keyRoom)
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
		}
	}
	return row, nil
}

// key is the key (aligned with the table's Key) of an old row of the
// relation, as t.KeyOf of its tuple would give it, without the row: a
// delete's old tuple holds the key, or the whole old row.
func (r *Reader) key(rs *relState, td *pglogrepl.TupleData, perm []int) (sluice.Row, error) {
	t := rs.table
	if err := r.checkTuple(rs, td, perm); err != nil {
		return nil, err
	}
	key := make(sluice.Row, len(t.Key))
	// Which column of the tuple each key value is.
	var at [4]int
	cols := at[:0]
	for _, kc := range t.Key {
		j := kc
		if perm != nil {
			j = slices.Index(perm, kc)
		}
		cols = append(cols, j)
	}
	n := 0
	for _, j := range cols {
		if c := td.Columns[j]; c.DataType == pglogrepl.TupleDataTypeText {
			n += len(c.Data)
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, j := range cols {
		if c := td.Columns[j]; c.DataType == pglogrepl.TupleDataTypeText {
			b.Write(c.Data)
		}
	}
	text := b.String()
	off := 0
	for k, j := range cols {
		switch c := td.Columns[j]; c.DataType {
		case pglogrepl.TupleDataTypeNull:
			key[k] = sluice.Null
		case pglogrepl.TupleDataTypeToast:
			key[k] = sluice.Value{Unchanged: true}
		case pglogrepl.TupleDataTypeText:
			v := text[off : off+len(c.Data)]
			off += len(c.Data)
			key[k] = sluice.Text(castText(rs.typ[t.Key[k]].base, v))
		}
	}
	return key, nil
}

// checkTuple checks that a row of the relation has the table's columns,
// each of a kind the reader knows.
func (r *Reader) checkTuple(rs *relState, td *pglogrepl.TupleData, perm []int) error {
	t := rs.table
	if len(td.Columns) != len(t.Columns) {
		return &fatalError{fmt.Errorf("row of %s at LSN %s has %d columns, the table %d", t.Name, r.tx.commit, len(td.Columns), len(t.Columns))}
	}
	for i, c := range td.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast, pglogrepl.TupleDataTypeText:
		default:
			if perm != nil {
				i = perm[i]
			}
			return &fatalError{fmt.Errorf("column %s of %s at LSN %s: unexpected tuple data type %q", t.Columns[i].Name, t.Name, r.tx.commit, c.DataType)}
		}
	}
	return nil
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
