package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// OldestTransaction describes the oldest open InnoDB transaction of a
// session using the target database, other than the applier's own, for a stall's diagnosis: a session
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
		// Sessions using the target database: another database's
		// transactions do not hold its rows.
		err := t.conn.QueryRowContext(ctx, `SELECT x.trx_mysql_thread_id, TIMESTAMPDIFF(SECOND, x.trx_started, NOW()), x.trx_state,
				LEFT(REPLACE(REPLACE(x.trx_query, CHAR(10), ' '), CHAR(13), ' '), 120), x.trx_rows_locked
			FROM information_schema.INNODB_TRX x JOIN information_schema.PROCESSLIST p ON p.ID = x.trx_mysql_thread_id
			WHERE x.trx_mysql_thread_id <> CONNECTION_ID() AND p.DB = DATABASE()
			ORDER BY x.trx_started LIMIT 1`).Scan(&thread, &age, &state, &query, &lockedRows)
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
