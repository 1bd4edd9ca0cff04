package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

// appName marks the runner's own PostgreSQL sessions, which the read-only
// episode leaves alone.
const appName = "sluice-chaos"

// The MariaDB target's applier account: without SUPER or READ_ONLY ADMIN,
// so that the server's read_only refuses its writes. A throwaway server's
// throwaway account.
const (
	applierUser = "chaos_applier"
	applierPass = "chaos-applier-pw"
)

// endpoint is one side of a pair: a server of its own, one database on it,
// the runner's connections and the proxy sluice reaches it through.
type endpoint struct {
	engine daemon.Engine
	pgSrv  *dbtest.Postgres
	mySrv  *dbtest.MariaDB
	db     string
	pg     *pgxpool.Pool
	my     *sql.DB
	proxy  *wanproxy.Proxy
	// sluiceURL is what sluice connects to: through the proxy, as the
	// applier account on a MariaDB target.
	sluiceURL string
}

func startEndpoint(ctx context.Context, engine daemon.Engine, db string, oneWay time.Duration, target bool) (_ *endpoint, err error) {
	e := &endpoint{engine: engine, db: db}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	var addr, direct string
	switch engine {
	case daemon.EnginePostgres:
		if e.pgSrv, err = dbtest.StartPostgres(ctx); err != nil {
			return nil, err
		}
		if err = e.pgSrv.CreateDatabase(ctx, db); err != nil {
			return nil, err
		}
		addr, direct = e.pgSrv.Addr(), e.pgSrv.URL(db)
		cfg, err := pgxpool.ParseConfig(direct)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = 6
		cfg.ConnConfig.RuntimeParams["TimeZone"] = "UTC"
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
		if e.pg, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, err
		}
	case daemon.EngineMySQL:
		if e.mySrv, err = dbtest.StartMariaDB(ctx); err != nil {
			return nil, err
		}
		if err = e.mySrv.CreateDatabase(ctx, db); err != nil {
			return nil, err
		}
		addr, direct = e.mySrv.Addr(), e.mySrv.URL(db)
		mc, err := mysql.ParseDSN(e.mySrv.DSN(db))
		if err != nil {
			return nil, err
		}
		// TIMESTAMP values are written and read in UTC, as sluice does.
		mc.Params = map[string]string{"time_zone": "'+00:00'"}
		conn, err := mysql.NewConnector(mc)
		if err != nil {
			return nil, err
		}
		e.my = sql.OpenDB(conn)
		e.my.SetMaxOpenConns(6)
		e.my.SetConnMaxIdleTime(2 * time.Second)
		if target {
			for _, q := range []string{
				fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", applierUser, applierPass),
				fmt.Sprintf("GRANT ALL PRIVILEGES ON `%s`.* TO '%s'@'%%'", db, applierUser),
			} {
				if _, err := e.my.ExecContext(ctx, q); err != nil {
					return nil, fmt.Errorf("mariadb target: create the applier account: %w", err)
				}
			}
		}
	}
	if e.proxy, err = wanproxy.Start(addr, oneWay); err != nil {
		return nil, err
	}
	u, err := url.Parse(direct)
	if err != nil {
		return nil, err
	}
	u.Host = e.proxy.Addr()
	if target && engine == daemon.EngineMySQL {
		u.User = url.UserPassword(applierUser, applierPass)
	}
	e.sluiceURL = u.String()
	return e, nil
}

func (e *endpoint) exec(ctx context.Context, q string, args ...any) error {
	if e.pg != nil {
		_, err := e.pg.Exec(ctx, q, args...)
		return err
	}
	_, err := e.my.ExecContext(ctx, q, args...)
	return err
}

func (e *endpoint) cmpDB() dbtest.DB {
	if e.pg != nil {
		return dbtest.DB{PG: e.pg}
	}
	return dbtest.DB{My: e.my}
}

// crash is an immediate shutdown and restart of the endpoint's server.
func (e *endpoint) crash(ctx context.Context) error {
	var err error
	if e.pgSrv != nil {
		err = e.pgSrv.Crash(ctx)
		// The pool's connections died with the server.
		e.pg.Reset()
	} else {
		err = e.mySrv.Crash(ctx)
	}
	return err
}

// proxyTarget is the server's address, which the proxies forward to.
func (e *endpoint) proxyTarget() string {
	if e.pgSrv != nil {
		return e.pgSrv.Addr()
	}
	return e.mySrv.Addr()
}

// killerURL is the transaction killer's connection: the superuser, direct.
func (e *endpoint) killerURL() string {
	if e.pgSrv != nil {
		return e.pgSrv.URL(e.db)
	}
	return e.mySrv.DSN(e.db)
}

func (e *endpoint) close() {
	if e.pg != nil {
		e.pg.Close()
	}
	if e.my != nil {
		e.my.Close()
	}
	if e.proxy != nil {
		e.proxy.Close()
	}
	if e.pgSrv != nil {
		_ = e.pgSrv.Stop()
	}
	if e.mySrv != nil {
		_ = e.mySrv.Stop()
	}
}

// setReadOnly makes the target refuse writes, or accept them again. On
// PostgreSQL the database's default_transaction_read_only is set and its
// sessions other than the runner's are terminated, so that sluice's new
// sessions start read-only (and, when it ends, read-write again); on
// MariaDB the server's read_only, which binds every account without SUPER
// or READ_ONLY ADMIN, the applier's among them.
func (e *endpoint) setReadOnly(ctx context.Context, on bool) error {
	if e.pgSrv != nil {
		q := "ALTER DATABASE " + pgx.Identifier{e.db}.Sanitize() + " RESET default_transaction_read_only"
		if on {
			q = "ALTER DATABASE " + pgx.Identifier{e.db}.Sanitize() + " SET default_transaction_read_only = on"
		}
		if _, err := e.pg.Exec(ctx, q); err != nil {
			return fmt.Errorf("postgres target: %s: %w", q, err)
		}
		_, err := e.pg.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name IS DISTINCT FROM $2`, e.db, appName)
		if err != nil {
			return fmt.Errorf("postgres target: terminate sessions: %w", err)
		}
		return nil
	}
	v := 0
	if on {
		v = 1
	}
	if _, err := e.my.ExecContext(ctx, fmt.Sprintf("SET GLOBAL read_only = %d", v)); err != nil {
		return fmt.Errorf("mariadb target: SET GLOBAL read_only = %d: %w", v, err)
	}
	return nil
}

// probeWrite writes the scratch table chaos_probe (not replicated) as the
// applier would: a new session of sluice's account. During a read-only
// episode it must fail.
func (e *endpoint) probeWrite(ctx context.Context) error {
	if e.pgSrv != nil {
		conn, err := pgx.Connect(ctx, e.pgSrv.URL(e.db))
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, "INSERT INTO chaos_probe VALUES (1) ON CONFLICT DO NOTHING")
		return err
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = applierUser, applierPass, "tcp", e.mySrv.Addr(), e.db
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "INSERT IGNORE INTO chaos_probe VALUES (1)")
	return err
}

// isMissingTable reports whether err says a table does not exist
// (PostgreSQL 42P01, MariaDB 1146).
func isMissingTable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1146
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "42P01" || pe.Code == "3F000" // undefined table, schema
	}
	return false
}
