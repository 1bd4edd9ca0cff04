package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// vitessTxTimeout is Vitess's default transaction killer
// (queryserver-config-transaction-timeout), which PlanetScale also uses.
const vitessTxTimeout = 20 * time.Second

// TxTimeout returns the shortest limit the target puts on the applier's
// transactions, and what sets it: Vitess/PlanetScale (detected from the
// server version; vtgate does not expose its tablets' limit, so the
// default 20 s is assumed), MariaDB's max_statement_time and
// idle_transaction_timeout. Zero when none is set.
func (t *Target) TxTimeout(ctx context.Context) (time.Duration, string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return 0, "", err
	}
	if p := t.pre; p != nil && p.haveTx {
		p.haveTx = false
		return txTimeoutOf(p.version, p.comment, p.vars)
	}
	var version, comment string
	var vars map[string]string
	err := t.reading(ctx, func() error {
		if err := t.conn.QueryRowContext(ctx, versionSQL).Scan(&version, &comment); err != nil {
			return err
		}
		rows, err := t.conn.QueryContext(ctx, txVarsSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		vars, err = scanTxVars(rows)
		return err
	})
	if err != nil {
		return 0, "", fmt.Errorf("read the transaction time limits of target %s at %s: %w", t.server, t.addr, err)
	}
	return txTimeoutOf(version, comment, vars)
}

const versionSQL = "SELECT VERSION(), @@version_comment"

// txVarsSQL reads the MariaDB variables that limit a transaction's time.
// SHOW VARIABLES, not @@names: MySQL lacks the MariaDB ones and an unknown
// @@name is an error.
const txVarsSQL = "SHOW SESSION VARIABLES WHERE Variable_name IN ('max_statement_time', 'idle_transaction_timeout', 'idle_write_transaction_timeout')"

// scanTxVars reads txVarsSQL's rows.
func scanTxVars(rows *sql.Rows) (map[string]string, error) {
	vars := map[string]string{}
	for rows.Next() {
		var name string
		var v sql.NullString
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		vars[name] = v.String
	}
	return vars, rows.Err()
}

// txTimeoutOf picks the shortest limit from a server's version and
// variables (seconds, possibly fractional).
func txTimeoutOf(version, comment string, vars map[string]string) (time.Duration, string, error) {
	v := strings.ToLower(version + " " + comment)
	if strings.Contains(v, "vitess") || strings.Contains(v, "planetscale") {
		return vitessTxTimeout, fmt.Sprintf("Vitess/PlanetScale target (version %q): its transaction killer's default of %s", version, vitessTxTimeout), nil
	}
	var best time.Duration
	var what string
	for _, name := range []string{"idle_transaction_timeout", "idle_write_transaction_timeout", "max_statement_time"} {
		raw, ok := vars[name]
		if !ok || raw == "" {
			continue
		}
		secs, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return 0, "", fmt.Errorf("target variable %s = %q: not a number of seconds", name, raw)
		}
		d := time.Duration(secs * float64(time.Second))
		if d > 0 && (best == 0 || d < best) {
			best, what = d, fmt.Sprintf("target %s = %s", name, d)
		}
	}
	return best, what, nil
}
