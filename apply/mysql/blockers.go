package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// OldestTransaction describes the oldest open InnoDB transaction on the
// target other than the applier's own, for a stall's diagnosis: a session
// that holds locks the applier waits for. Empty when there is none.
func (t *Target) OldestTransaction(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return "", err
	}
	var (
		thread     int64
		age        int64
		state      string
		query      sql.NullString
		lockedRows int64
	)
	found := true
	err := t.reading(ctx, func() error {
		err := t.conn.QueryRowContext(ctx, `SELECT trx_mysql_thread_id, TIMESTAMPDIFF(SECOND, trx_started, NOW()), trx_state,
				LEFT(REPLACE(REPLACE(trx_query, CHAR(10), ' '), CHAR(13), ' '), 120), trx_rows_locked
			FROM information_schema.INNODB_TRX
			WHERE trx_mysql_thread_id <> CONNECTION_ID()
			ORDER BY trx_started LIMIT 1`).Scan(&thread, &age, &state, &query, &lockedRows)
		if errors.Is(err, sql.ErrNoRows) {
			found = false
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read the oldest transaction on target %s at %s: %w", t.server, t.addr, err)
	}
	if !found {
		return "", nil
	}
	q := "none running"
	if query.Valid {
		q = fmt.Sprintf("%q", query.String)
	}
	return fmt.Sprintf("thread %d, open %d s, %s, %d rows locked, query %s (KILL %d ends it)", thread, age, state, lockedRows, q, thread), nil
}
