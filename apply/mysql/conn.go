package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// sqlMode is the session's sql_mode.
const sqlMode = "STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO"

func (t *Target) openDB(ctx context.Context) error {
	t.dcfg.MultiStatements = t.multi
	t.implicitTx = !t.multi && t.cfg.Mode == Pipelined
	if t.implicitTx {
		t.dcfg.Params["autocommit"] = "0"
	} else {
		delete(t.dcfg.Params, "autocommit")
	}
	conn, err := mysql.NewConnector(t.dcfg)
	if err != nil {
		return fmt.Errorf("target connection string: %w", err)
	}
	t.db = sql.OpenDB(conn)
	t.db.SetMaxOpenConns(2)
	t.db.SetMaxIdleConns(1)
	if err := t.ensureConn(ctx); err != nil {
		t.closeDB()
		return err
	}
	return nil
}

func (t *Target) closeDB() {
	if t.conn != nil {
		t.conn.Close()
		t.conn = nil
	}
	if t.db != nil {
		t.db.Close()
		t.db = nil
	}
}

// sessionSQL reads what ensureConn checks of a new connection's session.
const sessionSQL = "SELECT @@SESSION.sql_mode, @@SESSION.max_allowed_packet, DATABASE(), VERSION(), CONNECTION_ID()"

// ensureConn takes a connection when the last one was lost or discarded,
// checks its session settings and learns the packet limit.
func (t *Target) ensureConn(ctx context.Context) error {
	if t.conn != nil {
		return nil
	}
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return t.connectError(err)
	}
	var mode, version string
	var maxPacket int
	if t.setup {
		mode, maxPacket, version, err = t.setupPacket(ctx, conn)
		if err != nil {
			conn.Close()
			return err
		}
	} else {
		err = conn.QueryRowContext(ctx, sessionSQL).Scan(&mode, &maxPacket, &t.database, &version, &t.connID)
		if err != nil {
			conn.Close()
			return t.connectError(err)
		}
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		t.server = "MariaDB"
	}
	if !strings.Contains(mode, "NO_BACKSLASH_ESCAPES") || !strings.Contains(mode, "STRICT_ALL_TABLES") {
		conn.Close()
		return fmt.Errorf("target %s at %s ignored SET sql_mode (it is %q): sluice needs STRICT_ALL_TABLES and NO_BACKSLASH_ESCAPES in the session; check the proxy in between", t.server, t.addr, mode)
	}
	t.conn, t.maxPacket = conn, maxPacket
	return nil
}

// connectError turns the failures a user can fix into messages that say how.
func (t *Target) connectError(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045: // ER_ACCESS_DENIED_ERROR
			return fmt.Errorf("target %s at %s: authentication failed for user %q: check the user and password in the connection string: %w",
				t.server, t.addr, t.dcfg.User, err)
		case 1044: // ER_DBACCESS_DENIED_ERROR
			return fmt.Errorf("target %s at %s: user %q may not use database %q: GRANT it the privileges or fix the connection string: %w",
				t.server, t.addr, t.dcfg.User, t.dcfg.DBName, err)
		case 1049: // ER_BAD_DB_ERROR
			return fmt.Errorf("target %s at %s: database %q does not exist: create it or fix the connection string: %w",
				t.server, t.addr, t.dcfg.DBName, err)
		}
		return fmt.Errorf("target %s at %s: %w", t.server, t.addr, err)
	}
	return fmt.Errorf("cannot reach target %s at %s: %w", t.server, t.addr, err)
}

// discard drops the current connection: it is broken, or its state (an
// open transaction) is unknown.
func (t *Target) discard() {
	if t.conn == nil {
		return
	}
	_ = t.conn.Raw(func(any) error { return driver.ErrBadConn })
	t.conn.Close()
	t.conn = nil
}

// reading runs f, which only reads, and when the connection turns out to
// have died runs it once more on a fresh connection.
func (t *Target) reading(ctx context.Context, f func() error) error {
	if err := t.ensureConn(ctx); err != nil {
		return err
	}
	err := t.read(ctx, f)
	if err == nil || !connLost(err) || ctx.Err() != nil {
		return err
	}
	t.discard()
	if cerr := t.ensureConn(ctx); cerr != nil {
		return fmt.Errorf("%w (reconnect: %v)", err, cerr)
	}
	return t.read(ctx, f)
}

// read runs f and, with implicit transactions, ends the one it opened.
func (t *Target) read(ctx context.Context, f func() error) error {
	err := f()
	if t.implicitTx && t.conn != nil {
		if _, rerr := t.conn.ExecContext(ctx, "ROLLBACK"); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}
