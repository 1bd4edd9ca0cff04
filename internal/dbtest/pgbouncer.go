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
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer is a throwaway PgBouncer in front of a harness PostgreSQL, in
// transaction pooling (as managed PostgreSQL services run it), with the
// startup-parameter ignore list those services commonly set: anything
// besides the parameters PgBouncer tracks (client_encoding, DateStyle,
// TimeZone, standard_conforming_strings, application_name) and
// extra_float_digits is refused at connect.
type PgBouncer struct {
	Host string
	Port int
	pg   *Postgres
	dir  string
	proc *process
}

// pgbouncerBin finds the pgbouncer binary.
func pgbouncerBin() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if isExecutable("/usr/sbin/pgbouncer") {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("pgbouncer not found on PATH or in /usr/sbin: install the Debian package pgbouncer; `make deps` installs it")
}

// StartPgBouncer starts a PgBouncer on a free port of 127.0.0.1 in front
// of pg, pooling every database in transaction mode. Any client user is
// accepted; PgBouncer logs in to pg as pg's superuser.
func StartPgBouncer(ctx context.Context, pg *Postgres) (*PgBouncer, error) {
	bin, err := pgbouncerBin()
	if err != nil {
		return nil, err
	}
	dir, err := newTempDir("sluice-pgbouncer-", pg.acct)
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{Host: "127.0.0.1", pg: pg, dir: dir}
	for attempt := 0; ; attempt++ {
		if b.Port, err = freePort(); err != nil {
			break
		}
		conf := fmt.Sprintf(`[databases]
* = host=%s port=%d user=%s password=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
ignore_startup_parameters = extra_float_digits
max_client_conn = 200
default_pool_size = 20
logfile = %s
pidfile = %s
`, pg.Host, pg.Port, pg.User, pg.Password, b.Port, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
		ini := filepath.Join(dir, "pgbouncer.ini")
		if err = os.WriteFile(ini, []byte(conf), 0o600); err != nil {
			break
		}
		if err = pg.acct.chown(ini); err != nil {
			break
		}
		b.proc, err = startProcess("pgbouncer", pg.acct, syscall.SIGTERM, filepath.Join(dir, "stderr.log"), bin, ini)
		if err != nil {
			break
		}
		err = pollUntil(ctx, b.proc, func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, b.URL("postgres"))
			if err != nil {
				return err
			}
			return conn.Close(ctx)
		})
		if err == nil {
			return b, nil
		}
		_ = b.proc.stop(syscall.SIGTERM, 5*time.Second)
		if attempt == 2 {
			err = fmt.Errorf("%w\n%s\n%s", err, logTail(filepath.Join(dir, "pgbouncer.log")), logTail(filepath.Join(dir, "stderr.log")))
			break
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("start pgbouncer: %w", err)
}

// URL is a connection URL for database db through PgBouncer.
func (b *PgBouncer) URL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(b.pg.User, b.pg.Password),
		Host:     net.JoinHostPort(b.Host, strconv.Itoa(b.Port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Stop stops PgBouncer and removes its directory.
func (b *PgBouncer) Stop() error {
	err := b.proc.stop(syscall.SIGTERM, 5*time.Second)
	os.RemoveAll(b.dir)
	return err
}

// PGBouncer starts a PgBouncer in front of the test binary's shared
// PostgreSQL, stopped when t ends.
func PGBouncer(t testing.TB) *PgBouncer {
	t.Helper()
	b, err := StartPgBouncer(context.Background(), PG(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	return b
}

// PID is PgBouncer's process id.
func (b *PgBouncer) PID() int { return b.proc.pid() }
