package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// connect opens the connection, turning the failures a user can fix into
// messages that say how.
func (t *Target) connect(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, t.connConfig)
	if err == nil {
		t.conn = conn
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01": // invalid_password
			return fmt.Errorf("target PostgreSQL at %s: authentication failed for user %q: check the user and password in the connection string: %w",
				t.addr, t.connConfig.User, err)
		case "28000": // invalid_authorization_specification: pg_hba.conf
			return fmt.Errorf("target PostgreSQL at %s rejected user %q: allow the user in pg_hba.conf or fix the connection string: %w",
				t.addr, t.connConfig.User, err)
		case "3D000": // invalid_catalog_name
			return fmt.Errorf("target PostgreSQL at %s: database %q does not exist: create it or fix the connection string: %w",
				t.addr, t.connConfig.Database, err)
		}
	}
	if strings.Contains(err.Error(), "server refused TLS connection") {
		return fmt.Errorf("target PostgreSQL at %s does not accept TLS, which the connection string's sslmode requires: enable ssl on the server, or use sslmode=prefer (or disable) if the link may go unencrypted: %w",
			t.addr, err)
	}
	return fmt.Errorf("cannot reach target PostgreSQL at %s: %w", t.addr, err)
}

// ensureConn reconnects after a failure closed the connection.
func (t *Target) ensureConn(ctx context.Context) error {
	if t.conn != nil && !t.conn.IsClosed() {
		return nil
	}
	t.conn = nil
	return t.connect(ctx)
}

// reading runs f, which only reads, and when the connection turns out to
// have died (a restart of the server, an idle link dropped by a NAT) runs it
// once more on a fresh connection.
func (t *Target) reading(ctx context.Context, f func() error) error {
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	err := f()
	if err == nil || !t.conn.IsClosed() || ctx.Err() != nil {
		return err
	}
	t.conn = nil
	if cerr := t.connect(ctx); cerr != nil {
		return fmt.Errorf("%w (reconnect: %v)", err, cerr)
	}
	return f()
}
