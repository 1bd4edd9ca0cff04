package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// copyResult is what the statements of a copyIn query answered, in order.
type copyResult struct {
	tags []pgconn.CommandTag
	rows [][]string // the text of the rows the statements returned (one column set)
}

// copyIn runs a chunk's transaction in one round trip: copySQL, a simple
// query ending in COPY ... FROM STDIN (the chunk's BEGIN before it), then
// r as the COPY's data, then the query next returns (the done record and
// COMMIT, or ROLLBACK), all sent without waiting for an answer: the
// server reads them in order. next is called once the data is sent (with
// the error that ended r early, if any), so it can record what was sent.
// pgconn's CopyFrom waits for the COPY's answer before anything else can
// be sent, and keeps only the last command tag.
//
// A failure of r ends the data with CopyFail, so the server aborts the
// COPY; after a server error the rest of the data is dropped and the next
// query fails in the aborted transaction, so nothing is committed. The
// first error is returned: r's, or the server's.
func copyIn(ctx context.Context, pc *pgconn.PgConn, r io.Reader, copySQL string, next func(readErr error) string) (res copyResult, err error) {
	// Writes do not watch ctx: a write deadline in the past unblocks one
	// stuck on a dead link, and the connection is then closed.
	stop := context.AfterFunc(ctx, func() { _ = pc.Conn().SetWriteDeadline(time.Now()) })
	defer func() {
		if !stop() {
			closeConn(pc)
			err = errors.Join(err, ctx.Err())
		}
	}()
	fe := pc.Frontend()
	fe.Send(&pgproto3.Query{String: copySQL})
	readErr := sendCopyData(fe, r)
	if errors.Is(readErr, errSendFailed) {
		closeConn(pc)
		return copyResult{}, readErr
	}
	if readErr == nil {
		fe.Send(&pgproto3.CopyDone{})
	} else {
		fe.Send(&pgproto3.CopyFail{Message: readErr.Error()})
	}
	fe.Send(&pgproto3.Query{String: next(readErr)})
	if err := fe.Flush(); err != nil {
		closeConn(pc)
		return copyResult{}, fmt.Errorf("%w: %w", errSendFailed, err)
	}
	var pgErr error
	for ready := 0; ready < 2; {
		msg, err := pc.ReceiveMessage(ctx)
		if err != nil {
			closeConn(pc)
			return copyResult{}, err
		}
		switch msg := msg.(type) {
		case *pgproto3.CommandComplete:
			res.tags = append(res.tags, pgconn.NewCommandTag(string(msg.CommandTag)))
		case *pgproto3.DataRow:
			row := make([]string, len(msg.Values))
			for i, v := range msg.Values {
				row[i] = string(v)
			}
			res.rows = append(res.rows, row)
		case *pgproto3.ErrorResponse:
			if pgErr == nil {
				pgErr = pgconn.ErrorResponseToPgError(msg)
			}
		case *pgproto3.ReadyForQuery:
			ready++
		}
	}
	if readErr != nil {
		// The server's error is only the CopyFail it caused.
		return res, readErr
	}
	return res, pgErr
}

// closeConn closes a connection whose protocol state is unknown.
func closeConn(pc *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = pc.Close(ctx)
}

// errSendFailed marks a failure to write CopyData to the server.
var errSendFailed = errors.New("send COPY data")

// sendCopyData sends r as CopyData messages of up to 64 KiB; nil at r's
// end.
func sendCopyData(fe *pgproto3.Frontend, r io.Reader) error {
	buf := make([]byte, 5+64<<10)
	buf[0] = 'd'
	for {
		n, err := r.Read(buf[5:])
		if n > 0 {
			msg := buf[:5+n]
			msg[1], msg[2], msg[3], msg[4] = byte((n+4)>>24), byte((n+4)>>16), byte((n+4)>>8), byte(n+4)
			if werr := fe.SendUnbufferedEncodedCopyData(msg); werr != nil {
				return fmt.Errorf("%w: %w", errSendFailed, werr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
