package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OldestTransaction describes the oldest open transaction on the target
// in the target database other than the applier's own, for a stall's
// diagnosis: a session that holds locks the applier waits for, or a long
// transaction holding back the server. Empty when there is none. The stream's appliers are recognised by
// their application_name ("sluice" unless the target URL sets another), so
// other sluice processes with the same name are left out too.
func (t *Target) OldestTransaction(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.ensureConn(ctx); err != nil {
		return "", err
	}
	var (
		pid              int32
		user, state, app string
		age              time.Duration
		query            string
		waiting          bool
	)
	found := true
	err := t.reading(ctx, func() error {
		err := t.conn.QueryRow(ctx, `SELECT pid, coalesce(usename, ''), coalesce(application_name, ''), coalesce(state, ''),
				now() - xact_start, left(regexp_replace(coalesce(query, ''), '\s+', ' ', 'g'), 120), coalesce(wait_event_type = 'Lock', false)
			FROM pg_stat_activity
			WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() AND backend_type = 'client backend'
				AND datname = current_database()
				AND application_name IS DISTINCT FROM current_setting('application_name')
			ORDER BY xact_start LIMIT 1`).Scan(&pid, &user, &app, &state, &age, &query, &waiting)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read the oldest transaction on target PostgreSQL at %s: %w", t.addr, err)
	}
	if !found {
		return "", nil
	}
	what := fmt.Sprintf("pid %d, user %q, open %s, %s", pid, user, age.Round(time.Second), state)
	if app != "" {
		what += fmt.Sprintf(", application %q", app)
	}
	if waiting {
		what += ", itself waiting for a lock"
	}
	return what + fmt.Sprintf(", last query %q (pg_terminate_backend(%d) ends it)", query, pid), nil
}
