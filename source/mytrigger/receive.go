package mytrigger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sluice-cdc/sluice"
)

type logRow struct {
	id      uint64
	tbl, op string
	k, d    sql.NullString
	at      sql.NullString
}

// page reads the changelog after the position and returns the changes up
// to the first gap that may still fill. again reports that reading at
// once may give more (a full page of skipped rows, or a gap just found
// empty).
func (r *Reader) page(ctx context.Context, max int) (changes []sluice.Change, again bool, err error) {
	rows, err := r.db.QueryContext(ctx, r.query, r.pos.last, max)
	if err != nil {
		return nil, false, r.readErr(err)
	}
	var page []logRow
	for rows.Next() {
		var lr logRow
		if err := rows.Scan(&lr.id, &lr.tbl, &lr.op, &lr.k, &lr.d, &lr.at); err != nil {
			rows.Close()
			return nil, false, r.readErr(err)
		}
		page = append(page, lr)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, r.readErr(err)
	}
	next := r.pos
	gap := false
	for _, lr := range page {
		if lr.id != next.last+1 && lr.id-1 > r.fence.safe {
			gap = true
			break
		}
		next.last = lr.id
		info, ok := r.infos[lr.tbl]
		if !ok {
			continue // a table this reader does not stream
		}
		c, err := r.change(info, lr)
		if err != nil {
			return nil, false, err
		}
		c.Pos = next.sluice()
		changes = append(changes, c)
	}
	r.pos = next
	if !gap {
		return changes, len(page) == max && len(changes) == 0, nil
	}
	// A gap: start waiting for the transactions running now, or see
	// whether those of the current wait have ended.
	running, err := r.running(ctx)
	if err != nil {
		return changes, false, err
	}
	f := &r.fence
	if !f.waiting {
		f.waiting = true
		f.horizon = page[len(page)-1].id
		f.trx = running
		r.log.Debug("changelog gap: waiting for running transactions", "after", r.pos.last, "horizon", f.horizon, "transactions", len(running))
	} else {
		f.trx = slices.DeleteFunc(f.trx, func(k trxKey) bool { return !slices.Contains(running, k) })
	}
	if len(f.trx) == 0 {
		f.waiting = false
		if f.horizon > f.safe {
			f.safe = f.horizon
		}
		return changes, true, nil
	}
	return changes, false, nil
}

// running lists the InnoDB transactions running now, other than the
// reader's own, from a list proven fresh (see the package documentation).
func (r *Reader) running(ctx context.Context) ([]trxKey, error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return nil, r.readErr(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	wait := trxCacheIdle
	for {
		r.nonce++
		list, fresh, err := trxList(ctx, conn, r.nonce)
		if err != nil {
			var me *mysql.MySQLError
			if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1044 || me.Number == 1142) {
				return nil, fmt.Errorf("MySQL source %s: user %s cannot read information_schema.innodb_trx, which the changelog reader needs to wait for open transactions: GRANT PROCESS ON *.* TO the user: %w", r.addr, r.user, err)
			}
			return nil, fmt.Errorf("list running transactions on %s: %w", r.addr, err)
		}
		if fresh {
			return list, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("list running transactions on %s: information_schema.innodb_trx stayed stale for 10 s (it refreshes only when nobody has read it for 0.1 s: is something polling it continuously?)", r.addr)
		}
		// The server refreshes the cache only when nobody has read it for
		// 0.1 s, and our own read just counted. Other readers of the same
		// server (another stream's, a monitor) may keep reading it: waits
		// that grow, at random, leave the cache a quiet 0.1 s sooner or
		// later, where readers polling in step would starve each other.
		t := time.NewTimer(wait + rand.N(wait))
		wait = min(2*wait, time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// trxCacheIdle is a little more than the 0.1 s for which InnoDB serves
// information_schema.innodb_trx from its cache after any read of it.
const trxCacheIdle = 120 * time.Millisecond

// trxList reads innodb_trx inside a transaction of its own, and reports
// whether the list is fresh: it shows that transaction running this very
// statement (trx_query holds the statement's nonce), so the server filled
// the cache after the statement began, after every earlier changelog read.
func trxList(ctx context.Context, conn *sql.Conn, nonce uint64) (list []trxKey, fresh bool, err error) {
	if _, err := conn.ExecContext(ctx, `START TRANSACTION WITH CONSISTENT SNAPSHOT`); err != nil {
		return nil, false, err
	}
	defer conn.ExecContext(context.Background(), `COMMIT`) //nolint:errcheck
	mark := fmt.Sprintf("sluice fence %d.%d", time.Now().UnixNano(), nonce)
	rows, err := conn.QueryContext(ctx, `SELECT /* `+mark+` */ trx_id, COALESCE(trx_mysql_thread_id, 0),
		CAST(trx_started AS CHAR), COALESCE(trx_query, ''), CONNECTION_ID() FROM information_schema.innodb_trx`)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var k trxKey
		var idText, query string
		var self uint64
		if err := rows.Scan(&idText, &k.thread, &k.started, &query, &self); err != nil {
			return nil, false, err
		}
		if k.thread == self {
			fresh = fresh || strings.Contains(query, mark)
			continue
		}
		// MySQL lists read-only transactions under large made-up ids,
		// MariaDB under 0; the transaction that took a missing id has
		// written, so it has a real id either way.
		if k.id, err = strconv.ParseUint(idText, 10, 64); err != nil || k.id == 0 {
			continue
		}
		list = append(list, k)
	}
	return list, fresh, rows.Err()
}

func (r *Reader) readErr(err error) error {
	return fmt.Errorf("read changelog %s.%s on %s: %w", r.logDB, ChangelogTable, r.addr, err)
}
