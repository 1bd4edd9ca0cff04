package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice/apply"
)

// A lane's transactions chain as on PostgreSQL (see
// apply/postgres/chain.go): each begins by locking the lane's checkpoint
// row, a chained one then checks the sequence the one before it wrote.
// The check is a locking read, so it sees the latest committed row
// whatever the transaction's snapshot.

// chainCheck locks the checkpoint row of stream's lane and, when after is
// not zero, fails with "Subquery returns more than 1 row" (1242) unless
// it holds sequence after; the step marker tells it from the fence check
// and the key checks, which fail the same way.
func chainCheck(stream string, lane int, after uint64) string {
	tbl := "`" + checkpointTable + "`"
	where := "`stream` = " + lit(stream) + " AND `lane` = " + strconv.Itoa(lane)
	if after == 0 {
		return "SELECT 1 FROM " + tbl + " WHERE " + where + " FOR UPDATE"
	}
	same := "g.`stream` = c.`stream` AND g.`lane` = c.`lane`"
	return "SELECT IF(c.`seq` = " + strconv.FormatUint(after, 10) + ", 0, (SELECT 1 FROM " + tbl + " g WHERE " + same +
		" UNION ALL SELECT 2 FROM " + tbl + " g WHERE " + same + ")) FROM " + tbl + " c WHERE c." + where + " FOR UPDATE"
}

// chainError turns a failed chain check into a retryable
// apply.ErrChainBroken; nil for any other failure.
func chainError(se *stepError, err error) error {
	var me *mysql.MySQLError
	if se == nil || se.step < 1 || se.step > len(se.stmts) || !se.stmts[se.step-1].chain || !errors.As(err, &me) || me.Number != 1242 {
		return nil
	}
	return &apply.RetryableError{Err: fmt.Errorf("%w (%s)", apply.ErrChainBroken, se.stmts[se.step-1].what)}
}

// wireCount counts the bytes written on the target's connections, so that
// ApplyAfter can tell when a packet is on its way: the driver has no hook
// between writing a query and reading its results. A chained transaction
// whose packet overtook the one before it only fails its check and is
// sent again, so a count that mixes connections costs time, not
// correctness.
type wireCount struct {
	mu   sync.Mutex
	n    int64
	at   int64
	call func()
}

// dial wraps dial (nil: a plain TCP dial) so that the connections it
// opens count what they write.
func (w *wireCount) dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if sc, ok := c.(syscall.Conn); ok {
			// The driver checks a pooled connection's liveness through
			// it before reusing it.
			return &countingSysConn{countingConn{Conn: c, w: w}, sc}, nil
		}
		return &countingConn{Conn: c, w: w}, nil
	}
}

// notify calls f once size more bytes are written (or at flush).
func (w *wireCount) notify(size int, f func()) {
	w.mu.Lock()
	w.at, w.call = w.n+int64(size), f
	w.mu.Unlock()
}

// flush calls the pending notification, if any.
func (w *wireCount) flush() {
	w.mu.Lock()
	f := w.call
	w.call = nil
	w.mu.Unlock()
	if f != nil {
		f()
	}
}

func (w *wireCount) add(n int) {
	w.mu.Lock()
	w.n += int64(n)
	var f func()
	if w.call != nil && w.n >= w.at {
		f, w.call = w.call, nil
	}
	w.mu.Unlock()
	if f != nil {
		f()
	}
}

type countingConn struct {
	net.Conn
	w *wireCount
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.w.add(n)
	return n, err
}

type countingSysConn struct {
	countingConn
	sc syscall.Conn
}

func (c *countingSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
