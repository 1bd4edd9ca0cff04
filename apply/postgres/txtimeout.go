package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TxTimeout returns the shortest limit the target puts on the applier's
// transactions, and what sets it: transaction_timeout (PostgreSQL 17+),
// statement_timeout or idle_in_transaction_session_timeout, as the
// applier's own session sees them (a role's or database's setting
// included). Zero when none is set.
func (t *Target) TxTimeout(ctx context.Context) (time.Duration, string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return 0, "", err
	}
	if p := t.pre; p != nil && p.txTimeout != nil {
		l := *p.txTimeout
		p.txTimeout = nil
		return l.d, l.what, nil
	}
	var best time.Duration
	var what string
	err := t.reading(ctx, func() error {
		rows, err := t.conn.Query(ctx, txTimeoutSQL)
		if err != nil {
			return err
		}
		best, what, err = scanTxTimeout(rows)
		return err
	})
	if err != nil {
		return 0, "", fmt.Errorf("read the transaction time limits of target PostgreSQL at %s: %w", t.addr, err)
	}
	return best, what, nil
}

// txTimeoutSQL reads the settings that limit a transaction's time.
// pg_settings gives each in its unit (ms for all three); a setting the
// server lacks (transaction_timeout before 17) has no row.
const txTimeoutSQL = `SELECT name, setting::bigint, coalesce(unit, '') FROM pg_settings
	WHERE name IN ('transaction_timeout', 'statement_timeout', 'idle_in_transaction_session_timeout') ORDER BY name`

// scanTxTimeout reads txTimeoutSQL's rows: the shortest limit set, and
// what sets it.
func scanTxTimeout(rows pgx.Rows) (time.Duration, string, error) {
	defer rows.Close()
	var best time.Duration
	var what string
	for rows.Next() {
		var name, unit string
		var v int64
		if err := rows.Scan(&name, &v, &unit); err != nil {
			return 0, "", err
		}
		d, ok := settingDuration(v, unit)
		if !ok || d <= 0 {
			continue
		}
		if best == 0 || d < best {
			best, what = d, fmt.Sprintf("target PostgreSQL %s = %s", name, d)
		}
	}
	return best, what, rows.Err()
}

// settingDuration converts a pg_settings value in its unit.
func settingDuration(v int64, unit string) (time.Duration, bool) {
	switch unit {
	case "ms":
		return time.Duration(v) * time.Millisecond, true
	case "s":
		return time.Duration(v) * time.Second, true
	case "min":
		return time.Duration(v) * time.Minute, true
	}
	return 0, false
}
