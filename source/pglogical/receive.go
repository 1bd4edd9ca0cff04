package pglogical

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sluice-cdc/sluice"
)

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
	// The held change is sent again (it was not pushed: resume is before
	// it); the page being filled is not, and goes to Read as it is.
	r.held, r.hasHeld = sluice.Change{}, false
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
	// The changes decoded before the error go out first.
	if r.sendPage(ctx) != nil {
		return
	}
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
		deadline := nextStatus
		if len(r.out.changes) > 0 {
			// A page that is not full goes to Read once the server pauses,
			// or once it is pageMaxAge old.
			now := time.Now()
			if now.Sub(r.outSince) >= pageMaxAge {
				if err := r.sendPage(ctx); err != nil {
					return err
				}
				continue
			}
			deadline = minTime(deadline, now.Add(pageLinger), r.outSince.Add(pageMaxAge))
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
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
				if err := r.sendPage(ctx); err != nil {
					return err
				}
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

// minTime is the earliest of ts.
func minTime(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.Before(t) {
			t = u
		}
	}
	return t
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
		if !r.tx.open && pkm.ServerWALEnd > 0 && r.trySendPage() {
			// After the changes decoded before it, or not at all.
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
	if tm, ok, err := decodeTxMessage(data); ok {
		if err != nil {
			return &fatalError{fmt.Errorf("decode pgoutput message at LSN %s: %w", at, err)}
		}
		if tm.kind == 'B' {
			r.begin(tm.final, tm.xid, tm.time)
			return nil
		}
		return r.commit(ctx, tm.end)
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return &fatalError{fmt.Errorf("decode pgoutput message at LSN %s: %w", at, err)}
	}
	return r.message(ctx, m, at)
}
