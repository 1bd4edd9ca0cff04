package dbtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throwaway PostgreSQL server configured for logical decoding.
type Postgres struct {
	Host     string
	Port     int
	User     string
	Password string
	Dir      string // temp dir holding the data directory, socket and log

	binDir  string
	dataDir string
	logPath string
	acct    account

	mu   sync.Mutex // guards proc across Restart and Stop
	proc *process
}

// pgBinDir finds the directory holding initdb and postgres.
func pgBinDir() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	// Debian's pg_config may belong to libpq-dev without a server; the
	// versioned server directories are the fallback, newest first.
	globbed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(globbed, func(i, j int) bool { return pgVersion(globbed[i]) > pgVersion(globbed[j]) })
	candidates = append(candidates, globbed...)
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found via pg_config or /usr/lib/postgresql/*/bin: " +
		"install the Debian package postgresql-15 (or postgresql); `make deps` installs it")
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// StartPostgres initialises a cluster in a temp dir and starts it on a free
// port of 127.0.0.1, returning once it accepts password-authenticated
// connections. Stop it with Stop, which also removes the directory.
func StartPostgres(ctx context.Context) (*Postgres, error) {
	binDir, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	acct, err := lookupAccount("postgres")
	if err != nil {
		return nil, err
	}
	dir, err := newTempDir("sluice-pg-", acct)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	p := &Postgres{
		Host: "127.0.0.1", User: "postgres", Password: password, Dir: dir,
		binDir: binDir, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "postgres.log"), acct: acct,
	}
	if err := p.initdb(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// The port is chosen before the server binds it, so another process can
	// take it in between; a few fresh ports make that race harmless.
	for attempt := 1; ; attempt++ {
		if p.Port, err = freePort(); err != nil {
			break
		}
		if err = p.writePortConf(); err != nil {
			break
		}
		if err = p.start(ctx); err == nil {
			return p, nil
		}
		if attempt == 3 || !addrInUse(err.Error()) {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

func (p *Postgres) initdb(ctx context.Context) error {
	pwFile := filepath.Join(p.Dir, "pwfile")
	if err := os.WriteFile(pwFile, []byte(p.Password+"\n"), 0o600); err != nil {
		return fmt.Errorf("write postgres password file: %w", err)
	}
	if err := p.acct.chown(pwFile); err != nil {
		return err
	}
	err := runTool(ctx, p.acct, filepath.Join(p.binDir, "initdb"),
		"-D", p.dataDir, "-U", p.User, "--pwfile="+pwFile,
		"--auth-host=scram-sha-256", "--auth-local=trust",
		"--encoding=UTF8", "--locale=C",
		// Syncing a throwaway cluster's files only costs time; the server
		// itself still runs with fsync=on.
		"--no-sync")
	if err != nil {
		return fmt.Errorf("initialise postgres cluster in %s: %w", p.dataDir, err)
	}
	// Settings go into postgresql.conf rather than the command line so that
	// tests can still change them with ALTER SYSTEM and Restart.
	conf := fmt.Sprintf(`
# added by sluice dbtest
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
include_if_exists = 'port.conf'
wal_level = logical
fsync = on
max_replication_slots = 20
max_wal_senders = 20
max_connections = 200
shared_buffers = 32MB
logging_collector = off
`, p.Dir)
	f, err := os.OpenFile(filepath.Join(p.dataDir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open postgresql.conf: %w", err)
	}
	if _, err := f.WriteString(conf); err != nil {
		f.Close()
		return fmt.Errorf("append to postgresql.conf: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close postgresql.conf: %w", err)
	}
	return nil
}

func (p *Postgres) writePortConf() error {
	path := filepath.Join(p.dataDir, "port.conf")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("port = %d\n", p.Port)), 0o600); err != nil {
		return fmt.Errorf("write postgres port.conf: %w", err)
	}
	return p.acct.chown(path)
}

// start runs the postmaster on the existing data directory and waits for it.
func (p *Postgres) start(ctx context.Context) error {
	// SIGQUIT is PostgreSQL's immediate shutdown: the postmaster kills its
	// backends and exits, which is what we want when the test binary dies.
	proc, err := startProcess("postgres", p.acct, syscall.SIGQUIT, p.logPath,
		filepath.Join(p.binDir, "postgres"), "-D", p.dataDir)
	if err != nil {
		return err
	}
	err = pollUntil(ctx, proc, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, p.URL("postgres"))
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	if err != nil {
		_ = proc.stop(syscall.SIGQUIT, 5*time.Second)
		return fmt.Errorf("start postgres on port %d: %w\n%s", p.Port, err, logTail(p.logPath))
	}
	p.mu.Lock()
	p.proc = proc
	p.mu.Unlock()
	return nil
}

// URL is a libpq/pgx connection URL for database db as the superuser.
func (p *Postgres) URL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(p.User, p.Password),
		Host:     p.Addr(),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Addr is the server's TCP address, host:port.
func (p *Postgres) Addr() string {
	return net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
}

// admin runs statements on the maintenance database "postgres".
func (p *Postgres) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to postgres at %s: %w", p.Addr(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return err
	}
	return nil
}

// CreateDatabase creates database name.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) error {
	if err := p.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create postgres database %q: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name if it exists, terminating its sessions.
func (p *Postgres) DropDatabase(ctx context.Context, name string) error {
	if err := p.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop postgres database %q: %w", name, err)
	}
	return nil
}

// Restart stops the server with a fast shutdown and starts it again on the
// same port and data directory.
func (p *Postgres) Restart(ctx context.Context) error {
	if err := p.shutdown(); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	if err := p.start(ctx); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	return nil
}

// Crash stops the server with an immediate shutdown (SIGQUIT: the
// postmaster kills its backends at once, without a checkpoint, so the next
// start runs crash recovery) and starts it again on the same port and data
// directory.
func (p *Postgres) Crash(ctx context.Context) error {
	p.mu.Lock()
	proc := p.proc
	p.proc = nil
	p.mu.Unlock()
	if proc != nil {
		if err := proc.stop(syscall.SIGQUIT, 30*time.Second); err != nil {
			return fmt.Errorf("crash postgres: %w", err)
		}
	}
	if err := p.start(ctx); err != nil {
		return fmt.Errorf("start postgres after an immediate shutdown: %w", err)
	}
	return nil
}

// shutdown performs a fast shutdown: SIGINT rolls back open transactions and
// disconnects clients, unlike the default smart shutdown which waits for them.
func (p *Postgres) shutdown() error {
	p.mu.Lock()
	proc := p.proc
	p.proc = nil
	p.mu.Unlock()
	if proc == nil {
		return nil
	}
	return proc.stop(syscall.SIGINT, 30*time.Second)
}

// Stop shuts the server down and removes its directory.
func (p *Postgres) Stop() error {
	err := p.shutdown()
	if rmErr := os.RemoveAll(p.Dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove postgres dir: %w", rmErr))
	}
	if err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	return nil
}

// PID is the postmaster's process id (see Server).
func (p *Postgres) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc.pid()
}
