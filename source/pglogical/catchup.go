package pglogical

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Catch-up: a reader that opens behind a backlog reads it through the SQL
// interface of logical decoding (pg_logical_slot_get_binary_changes) before
// it streams. The walsender writes one message per change to its socket, a
// system call each; on a small machine that is most of the source's cost
// and caps the reader well below what the target applies. The SQL function
// decodes the same pgoutput messages, at the same LSNs, into a result set
// that travels in large reads. The reader decodes them with the same code
// as the stream, so positions, resume and schema checks are unchanged.
//
// Each call decodes from the slot's restart point, not from where the last
// call ended, and the restart point moves only at the server's records of
// running transactions (every 15 s of activity, and at checkpoints): a
// backlog written within one such window is decoded again from its start
// by every call, so calls of one size cost the square of the backlog.
// Calls double in size, up to catchUpGrowth times the first: the first
// rows come quickly, and a backlog costs the server about twice its own
// decoding (measured on a 510,000-change backlog: 7 ms of source CPU per
// 1,000 changes with calls of 16,384 rows, 4 with 65,536). They grow only
// while each is read within catchUpAdvanceEvery: the slot moves between
// calls, and a slow target, which holds the reader back, must not hold it
// in one call for minutes. A call that took over twice that halves the
// next, down to the first's size.
//
// It reads from a temporary copy of the slot (pg_copy_logical_replication_
// slot), which the calls consume like a cursor and which the server drops
// with the session. The stream's slot moves only as the target commits,
// exactly as when streaming (pg_replication_slot_advance instead of standby
// status updates). When a call returns less than a full chunk the backlog
// is read: the reader drops the copy and streams from the slot, asking the
// server to start at its resume position, so the transactions it already
// handed out are not sent again.

const (
	defaultCatchUpRows   = 16384
	defaultCatchUpMinWAL = 4 << 20
	// catchUpGrowth bounds the calls' growth: the largest asks for this
	// many times CatchUpRows (262,144 rows by default). The server holds
	// a call's whole result before it sends the first row.
	catchUpGrowth = 16
	// catchUpAdvanceEvery is how often the slot is moved to the flush
	// position during catch-up: each move decodes the WAL since the last.
	catchUpAdvanceEvery = time.Second
)

// catchUp is the SQL session of a catch-up and its slot copy.
type catchUp struct {
	conn     *pgx.Conn
	slot     string // the temporary copy
	advanced pglogrepl.LSN
	lastMove time.Time
	rows     int64
	calls    int
	want     int // rows the next call asks for
	began    time.Time
}

// catchUpSlotName names the temporary copy of slot: it must be unique on
// the server while it lives and fit in 63 bytes.
func catchUpSlotName(slot string) string {
	suffix := fmt.Sprintf("_cu%d", os.Getpid())
	if len(slot)+len(suffix) > 63 {
		slot = slot[:63-len(suffix)]
	}
	return slot + suffix
}

// openCatchUp copies the slot into a temporary one on a session of its own,
// when the WAL behind the slot is at least the configured minimum. It
// returns nil, and logs why, when catch-up is off, not worth it or not
// possible (a server before PostgreSQL 12, no free replication slot): the
// reader then streams from the start.
func (r *Reader) openCatchUp(ctx context.Context, slot slotInfo) *catchUp {
	if r.cfg.CatchUpRows < 0 || slot.active {
		return nil
	}
	unavailable := func(err error) *catchUp {
		r.log.Info("catch-up through the SQL interface unavailable; streaming from the slot", "err", err)
		return nil
	}
	// Measured on the reader's own session: most opens are restarts with
	// little behind, which need no session of their own.
	var behind int64
	err := r.withSQL(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - $1::text::pg_lsn`, slot.confirmed.String()).Scan(&behind)
	})
	if err != nil {
		return unavailable(fmt.Errorf("measure the WAL behind slot %s: %w", r.cfg.Slot, err))
	}
	if behind < r.cfg.CatchUpMinWAL {
		return nil
	}
	c, err := sqlConnConfig(r.connStr)
	if err != nil {
		return nil
	}
	// pgoutput renders values under the decoding session's settings.
	pinDecodingSettings(c.RuntimeParams)
	c.RuntimeParams["statement_timeout"] = "0"
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		return unavailable(connectErr(r.addr, c.User, r.db, err))
	}
	cu := &catchUp{conn: conn, slot: catchUpSlotName(r.cfg.Slot), began: time.Now(), advanced: slot.confirmed}
	if _, err := conn.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2, true)`, r.cfg.Slot, cu.slot); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return unavailable(fmt.Errorf("copy replication slot %s: %w", r.cfg.Slot, err))
	}
	r.log.Info("catching up through the SQL interface", "wal_behind_bytes", behind, "first_call_rows", r.cfg.CatchUpRows)
	return cu
}

// catchUpErr is a failure of the catch-up session itself (not of what it
// decoded): the reader goes on by streaming.
type catchUpErr struct{ err error }

func (e *catchUpErr) Error() string { return e.err.Error() }
func (e *catchUpErr) Unwrap() error { return e.err }

// runCatchUp reads the backlog in calls of CatchUpRows rows and growing
// (nextCatchUpRows), until one returns less than it asked for, then closes
// the session, which drops the copy.
func (r *Reader) runCatchUp(ctx context.Context, cu *catchUp) error {
	defer cu.conn.Close(context.WithoutCancel(ctx))
	cu.want = r.cfg.CatchUpRows
	for {
		began := time.Now()
		n, err := r.catchUpCall(ctx, cu)
		if err != nil {
			return err
		}
		if n < cu.want {
			r.log.Info("caught up through the SQL interface; streaming from the slot", "rows", cu.rows, "calls", cu.calls,
				"seconds", time.Since(cu.began).Seconds(), "resume", r.resume.String())
			return nil
		}
		cu.want = nextCatchUpRows(cu.want, r.cfg.CatchUpRows, time.Since(began))
		r.moveSlot(ctx, cu)
	}
}

// nextCatchUpRows is the size of the call after one of want rows that took
// took, when the first asked for first (see Catch-up).
func nextCatchUpRows(want, first int, took time.Duration) int {
	switch {
	case took < catchUpAdvanceEvery:
		return min(2*want, catchUpGrowth*first)
	case took > 2*catchUpAdvanceEvery:
		return max(want/2, first)
	}
	return want
}

// catchUpCall decodes cu.want rows (the server finishes the transaction
// it is in) and hands their changes out.
func (r *Reader) catchUpCall(ctx context.Context, cu *catchUp) (int, error) {
	// The partition markers come as logical decoding messages, which
	// pgoutput sends on request (from PostgreSQL 14 on).
	messages := ""
	if len(r.parts) > 0 {
		messages = ", 'messages', 'true'"
	}
	rows, err := cu.conn.Query(ctx,
		`SELECT (lsn - '0/0')::int8, data FROM pg_logical_slot_get_binary_changes($1, NULL, $2, 'proto_version', '1', 'publication_names', $3`+messages+`)`,
		cu.slot, cu.want, r.cfg.Publication)
	if err != nil {
		return 0, &catchUpErr{fmt.Errorf("decode slot %s through the SQL interface: %w", cu.slot, err)}
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != 2 || len(raw[0]) != 8 {
			return n, &catchUpErr{fmt.Errorf("decode slot %s through the SQL interface: unexpected row shape", cu.slot)}
		}
		at := pglogrepl.LSN(binary.BigEndian.Uint64(raw[0]))
		r.recvLSN = max(r.recvLSN, at)
		if err := r.walData(ctx, at, raw[1]); err != nil {
			return n, err
		}
		n++
	}
	cu.calls++
	cu.rows += int64(n)
	// The next call decodes for a while before its first row: what this
	// one gave goes to Read now.
	if err := r.sendPage(ctx); err != nil {
		return n, err
	}
	if err := rows.Err(); err != nil {
		return n, &catchUpErr{fmt.Errorf("decode slot %s through the SQL interface: %w", cu.slot, err)}
	}
	return n, nil
}

// moveSlot moves the stream's slot to the flush position (what the target
// has committed) at most once per catchUpAdvanceEvery, so the source frees
// the WAL the target no longer needs while the backlog is read. A failure
// only delays that, and is logged.
func (r *Reader) moveSlot(ctx context.Context, cu *catchUp) {
	flush := r.flushLSN()
	if flush <= cu.advanced || time.Since(cu.lastMove) < catchUpAdvanceEvery {
		return
	}
	cu.lastMove = time.Now()
	err := r.withSQL(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)`, r.cfg.Slot, flush.String())
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			r.log.Debug("move the replication slot during catch-up", "err", err)
		}
		return
	}
	cu.advanced = flush
}

// catchUpThenStream runs the catch-up, then opens the replication session
// at the resume position. It reports false when the reader must stop (its
// context ended or it failed for good).
func (r *Reader) catchUpThenStream(ctx context.Context, cu *catchUp) bool {
	err := r.runCatchUp(ctx, cu)
	if ctx.Err() != nil {
		return false
	}
	var cerr *catchUpErr
	switch {
	case err == nil:
	case errors.As(err, &cerr):
		r.log.Warn("catch-up through the SQL interface failed; streaming from the slot", "err", err, "resume", r.resume.String())
	default:
		r.fail(ctx, err)
		return false
	}
	// The server skips every transaction that commits before the resume
	// boundary: all handed out already.
	r.startAt = resumeBoundary(r.resume)
	return r.reconnect(ctx, 0)
}
