package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDB is a throwaway MariaDB server writing a full-image row binlog.
type MariaDB struct {
	Host     string
	Port     int
	User     string
	Password string
	Dir      string // temp dir holding the data directory, socket and log

	bin     string
	dataDir string
	socket  string
	logPath string
	acct    account

	mu   sync.Mutex // guards proc across Restart and Stop
	proc *process
}

func mariaBinaries() (installDB, server string, err error) {
	find := func(name string, dirs ...string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, d := range dirs {
			if p := filepath.Join(d, name); isExecutable(p) {
				return p
			}
		}
		return ""
	}
	installDB = find("mariadb-install-db", "/usr/bin", "/usr/local/bin")
	server = find("mariadbd", "/usr/sbin", "/usr/local/sbin", "/usr/bin")
	if installDB == "" || server == "" {
		return "", "", errors.New("MariaDB server binaries (mariadb-install-db, mariadbd) not found: " +
			"install the Debian package mariadb-server; `make deps` installs it")
	}
	return installDB, server, nil
}

// StartMariaDB installs a fresh data directory in a temp dir and starts
// mariadbd on a free port of 127.0.0.1, returning once root can log in over
// TCP with the test password. Stop it with Stop, which also removes the
// directory.
func StartMariaDB(ctx context.Context) (*MariaDB, error) {
	installDB, server, err := mariaBinaries()
	if err != nil {
		return nil, err
	}
	acct, err := lookupAccount("mysql")
	if err != nil {
		return nil, err
	}
	dir, err := newTempDir("sluice-maria-", acct)
	if err != nil {
		return nil, fmt.Errorf("start mariadb: %w", err)
	}
	m := &MariaDB{
		Host: "127.0.0.1", User: "root", Password: password, Dir: dir,
		bin: server, dataDir: filepath.Join(dir, "data"), socket: filepath.Join(dir, "mysqld.sock"),
		logPath: filepath.Join(dir, "mariadb.log"), acct: acct,
	}
	if err := installMariaDB(ctx, acct, installDB, m.Dir, m.dataDir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		if m.Port, err = freePort(); err != nil {
			break
		}
		if err = m.start(ctx, false); err == nil {
			break
		}
		if attempt == 3 || !addrInUse(err.Error()) {
			break
		}
	}
	if err == nil {
		err = m.setPassword(ctx)
	}
	if err != nil {
		if m.proc != nil {
			_ = m.proc.stop(syscall.SIGKILL, 5*time.Second)
		}
		os.RemoveAll(dir)
		return nil, err
	}
	return m, nil
}

// installMariaDB creates the data directory dataDir (in dir) with
// mariadb-install-db. The bootstrap's temporary tables go to dir, as the
// server's do, not to the system's /tmp. An install that fails is tried
// again in a fresh data directory, twice: under load, with other test
// binaries bootstrapping at the same time, the bootstrap has failed now
// and then on its own temporary tables (ERROR 1051 Unknown table
// 'mysql.tmp_user_nopasswd,mysql.tmp_user_socket'), and a test run must
// not fail on the harness.
func installMariaDB(ctx context.Context, acct account, installDB, dir, dataDir string) error {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if attempt > 1 {
			if rerr := os.RemoveAll(dataDir); rerr != nil {
				return fmt.Errorf("install mariadb data directory in %s: %w (and removing it to try again: %v)", dataDir, err, rerr)
			}
		}
		err = runTool(ctx, acct, installDB,
			// --no-defaults keeps the system's /etc/mysql configuration
			// (its socket, port and data directory) out of the throwaway
			// instance.
			"--no-defaults",
			"--datadir="+dataDir,
			"--tmpdir="+dir,
			"--auth-root-authentication-method=normal",
			"--skip-test-db",
			"--skip-name-resolve",
		)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("install mariadb data directory in %s: %w", dataDir, err)
	}
	return nil
}

// start runs mariadbd on the existing data directory and waits until it
// accepts connections: over the socket without a password on first start
// (before setPassword), over TCP with the password afterwards.
func (m *MariaDB) start(ctx context.Context, passwordSet bool) error {
	proc, err := startProcess("mariadbd", m.acct, syscall.SIGKILL, m.logPath, m.bin,
		"--no-defaults",
		"--datadir="+m.dataDir,
		"--port="+strconv.Itoa(m.Port),
		"--bind-address=127.0.0.1",
		"--socket="+m.socket,
		"--pid-file="+filepath.Join(m.Dir, "mariadbd.pid"),
		"--tmpdir="+m.Dir,
		"--log-bin=mysql-bin",
		"--binlog-format=ROW",
		"--binlog-row-image=FULL",
		"--binlog-row-metadata=FULL",
		"--server-id=1",
		"--innodb-buffer-pool-size=128M",
		"--innodb-log-file-size=48M",
		"--max-connections=300",
		"--skip-name-resolve",
		// Sessions killed or aborted are logged (4: with the reason), so
		// that a test whose connection was cut can be matched with the
		// server's account of it (see reportServerLogs).
		"--log-warnings=4",
		// utf8mb4 as production servers use; the compiled-in default is
		// latin1, which cannot hold most of the text the tests write.
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_unicode_ci",
	)
	if err != nil {
		return err
	}
	dsn := m.DSN("")
	if !passwordSet {
		dsn = m.socketDSN()
	}
	err = pollUntil(ctx, proc, func(ctx context.Context) error { return pingMySQL(ctx, dsn) })
	if err != nil {
		_ = proc.stop(syscall.SIGKILL, 5*time.Second)
		return fmt.Errorf("start mariadb on port %d: %w\n%s", m.Port, err, logTail(m.logPath))
	}
	m.mu.Lock()
	m.proc = proc
	m.mu.Unlock()
	return nil
}

func (m *MariaDB) socketDSN() string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "unix"
	cfg.Addr = m.socket
	cfg.Timeout = 2 * time.Second
	return cfg.FormatDSN()
}

func pingMySQL(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// setPassword gives root the test password for local and TCP logins; the
// "normal" install leaves root without one.
func (m *MariaDB) setPassword(ctx context.Context) error {
	db, err := sql.Open("mysql", m.socketDSN())
	if err != nil {
		return fmt.Errorf("open mariadb socket connection: %w", err)
	}
	defer db.Close()
	// A single connection, because a session that has just changed its own
	// password keeps working while new ones would need the password.
	db.SetMaxOpenConns(1)
	quoted := "'" + strings.ReplaceAll(m.Password, "'", "''") + "'"
	stmts := []string{
		// Anonymous accounts would otherwise take precedence over root@%
		// for some client hosts.
		"DROP USER IF EXISTS ''@'localhost'",
	}
	for _, host := range []string{"localhost", "127.0.0.1", "%"} {
		user := "'root'@'" + host + "'"
		stmts = append(stmts,
			"CREATE USER IF NOT EXISTS "+user+" IDENTIFIED BY "+quoted,
			"ALTER USER "+user+" IDENTIFIED BY "+quoted,
			"GRANT ALL PRIVILEGES ON *.* TO "+user+" WITH GRANT OPTION",
		)
	}
	stmts = append(stmts, "FLUSH PRIVILEGES")
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("set mariadb root password: %s: %w", s, err)
		}
	}
	if err := pingMySQL(ctx, m.DSN("")); err != nil {
		return fmt.Errorf("log in to mariadb with the new root password: %w", err)
	}
	return nil
}

// URL is a mysql:// URL for database db as root.
func (m *MariaDB) URL(db string) string {
	return fmt.Sprintf("mysql://%s:%s@%s/%s", m.User, m.Password, m.Addr(), db)
}

// DSN is a go-sql-driver/mysql data source name for database db as root.
func (m *MariaDB) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User = m.User
	cfg.Passwd = m.Password
	cfg.Net = "tcp"
	cfg.Addr = m.Addr()
	cfg.DBName = db
	return cfg.FormatDSN()
}

// Addr is the server's TCP address, host:port.
func (m *MariaDB) Addr() string {
	return net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
}

func (m *MariaDB) admin(ctx context.Context, stmt string) error {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return fmt.Errorf("open mariadb connection: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return err
	}
	return nil
}

func quoteMySQLIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// CreateDatabase creates database name.
func (m *MariaDB) CreateDatabase(ctx context.Context, name string) error {
	if err := m.admin(ctx, "CREATE DATABASE "+quoteMySQLIdent(name)); err != nil {
		return fmt.Errorf("create mariadb database %q: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name if it exists, first killing the sessions
// using it, like PostgreSQL's DROP DATABASE WITH (FORCE): a session left in
// an open transaction would otherwise hold a metadata lock and block the drop.
func (m *MariaDB) DropDatabase(ctx context.Context, name string) error {
	if err := m.dropDatabase(ctx, name); err != nil {
		return fmt.Errorf("drop mariadb database %q: %w", name, err)
	}
	return nil
}

func (m *MariaDB) dropDatabase(ctx context.Context, name string) error {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return fmt.Errorf("open mariadb connection: %w", err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx,
		"SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()", name)
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("list sessions: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	for _, id := range ids {
		// The session may have ended meanwhile (ER_NO_SUCH_THREAD); that is
		// what we wanted anyway.
		if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil {
			if me := (*mysql.MySQLError)(nil); !errors.As(err, &me) || me.Number != 1094 {
				return fmt.Errorf("kill session %d: %w", id, err)
			}
		}
	}
	_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteMySQLIdent(name))
	return err
}

// Restart shuts the server down cleanly and starts it again on the same port
// and data directory.
func (m *MariaDB) Restart(ctx context.Context) error {
	if err := m.shutdown(); err != nil {
		return fmt.Errorf("restart mariadb: %w", err)
	}
	if err := m.start(ctx, true); err != nil {
		return fmt.Errorf("restart mariadb: %w", err)
	}
	return nil
}

// Crash kills mariadbd with SIGKILL, as a crash would (InnoDB runs crash
// recovery on the next start), and starts it again on the same port and
// data directory.
func (m *MariaDB) Crash(ctx context.Context) error {
	m.mu.Lock()
	proc := m.proc
	m.proc = nil
	m.mu.Unlock()
	if proc != nil {
		if err := proc.stop(syscall.SIGKILL, 30*time.Second); err != nil {
			return fmt.Errorf("crash mariadb: %w", err)
		}
	}
	if err := m.start(ctx, true); err != nil {
		return fmt.Errorf("start mariadb after a kill: %w", err)
	}
	return nil
}

// shutdown sends SIGTERM, mariadbd's normal shutdown.
func (m *MariaDB) shutdown() error {
	m.mu.Lock()
	proc := m.proc
	m.proc = nil
	m.mu.Unlock()
	if proc == nil {
		return nil
	}
	return proc.stop(syscall.SIGTERM, 60*time.Second)
}

// Stop shuts the server down and removes its directory.
func (m *MariaDB) Stop() error {
	err := m.shutdown()
	if rmErr := os.RemoveAll(m.Dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove mariadb dir: %w", rmErr))
	}
	if err != nil {
		return fmt.Errorf("stop mariadb: %w", err)
	}
	return nil
}

// PID is the server's process id (see Server).
func (m *MariaDB) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc.pid()
}
