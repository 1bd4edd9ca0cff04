package dbtest

// The fixture every database test starts from: an engine, chosen by name
// or by ranging over Engines, gives a fresh database on the binary's
// shared server, its addresses in the forms sluice and the drivers take,
// a session on it, and helpers that fail the test naming the statement.
// The readers', targets' and integration tests once each kept a copy of
// this; one copy keeps their conventions (database per test, cleanup,
// failure messages) the same.

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Engine is a kind of database server the tests run against.
type Engine string

const (
	// PGEngine is PostgreSQL, on the server PG returns.
	PGEngine Engine = "postgres"
	// MariaEngine is MariaDB, on the server Maria returns.
	MariaEngine Engine = "mariadb"
)

// Engines is every engine, for tests that hold on each.
var Engines = []Engine{PGEngine, MariaEngine}

func (e Engine) String() string { return string(e) }

// Server is a throwaway server of either engine.
type Server interface {
	// URL is the address sluice takes for database db as the superuser.
	URL(db string) string
	// Addr is the server's TCP address, host:port (to put a proxy in
	// front of it).
	Addr() string
	CreateDatabase(ctx context.Context, name string) error
	DropDatabase(ctx context.Context, name string) error
	// Restart stops the server cleanly and starts it again.
	Restart(ctx context.Context) error
	// Crash kills the server as a crash would, and starts it again (its
	// next start runs crash recovery).
	Crash(ctx context.Context) error
	Stop() error
	// PID is the server's process id (a PostgreSQL server's backends are
	// its children); 0 while it is stopped.
	PID() int
}

var (
	_ Server = (*Postgres)(nil)
	_ Server = (*MariaDB)(nil)
)

// Shared returns the engine's shared server, starting it on first use
// (see PG and Maria).
func (e Engine) Shared(tb testing.TB) Server {
	tb.Helper()
	if e == PGEngine {
		return PG(tb)
	}
	return Maria(tb)
}

// Start starts a private server of the engine, for a test that must not
// disturb the shared one and for the bench and chaos binaries. The caller
// stops it.
func (e Engine) Start(ctx context.Context) (Server, error) {
	// A nil *Postgres in a Server would not compare equal to nil.
	if e == PGEngine {
		p, err := StartPostgres(ctx)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	m, err := StartMariaDB(ctx)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Quote quotes an identifier in the engine's dialect.
func (e Engine) Quote(name string) string {
	if e == PGEngine {
		return pgx.Identifier{name}.Sanitize()
	}
	return quoteMySQLIdent(name)
}

// Database is a fresh database on an engine's shared server, dropped when
// the test ends, with a session on it for the test's own statements.
type Database struct {
	Engine Engine
	// Name is the database's name (on MariaDB also the tables' schema).
	Name string
	// URL is the database's address as sluice takes it: postgres://… or
	// mysql://….
	URL string
	// DSN is the driver's form: go-sql-driver's on MariaDB, the URL on
	// PostgreSQL.
	DSN string
	// PG is a session on a PostgreSQL database, nil on MariaDB.
	PG *pgx.Conn
	// My is a pool on a MariaDB database, nil on PostgreSQL.
	My *sql.DB
}

// Database creates a fresh database named after the test and runs ddl in
// it.
func (e Engine) Database(tb testing.TB, ddl ...string) *Database {
	tb.Helper()
	return e.DatabaseWith(tb, nil, ddl...)
}

// DatabaseWith is Database with the test's session opened with params:
// run-time parameters on PostgreSQL (timezone=UTC), DSN parameters on
// MariaDB (multiStatements=true, time_zone='+00:00'). The URL and DSN
// stay without them.
func (e Engine) DatabaseWith(tb testing.TB, params map[string]string, ddl ...string) *Database {
	tb.Helper()
	d := &Database{Engine: e}
	if e == PGEngine {
		d.Name = PGDatabase(tb)
		d.URL = PG(tb).URL(d.Name)
		d.DSN = d.URL
		d.PG = d.ConnectPG(tb, params)
	} else {
		d.Name = MariaDatabase(tb)
		m := Maria(tb)
		d.URL = m.URL(d.Name)
		d.DSN = m.DSN(d.Name)
		d.My = d.OpenMy(tb, params)
	}
	d.Exec(tb, ddl...)
	return d
}

// Exec runs stmts in the test's session, failing the test with the first
// statement that fails.
func (d *Database) Exec(tb testing.TB, stmts ...string) {
	tb.Helper()
	if d.PG != nil {
		ExecPG(tb, d.PG, stmts...)
		return
	}
	ExecSQL(tb, d.My, stmts...)
}

// QueryInt runs a query returning one integer (a count, an id) in the
// test's session, failing the test with the query if it fails.
func (d *Database) QueryInt(tb testing.TB, query string, args ...any) int {
	tb.Helper()
	var n int
	var err error
	if d.PG != nil {
		err = d.PG.QueryRow(context.Background(), query, args...).Scan(&n)
	} else {
		err = d.My.QueryRowContext(context.Background(), query, args...).Scan(&n)
	}
	if err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return n
}

// Side is the database as one side of CompareTables, read through the
// test's session.
func (d *Database) Side() DB {
	if d.PG != nil {
		return DB{PG: d.PG}
	}
	return DB{My: d.My}
}

// require fails the test unless d is on engine e; call names the method
// that needs it.
func (d *Database) require(tb testing.TB, e Engine, call string) {
	tb.Helper()
	if d.Engine != e {
		tb.Fatalf("%s on a %s database; it needs %s", call, d.Engine, e)
	}
}

// ConnectPG opens another session on a PostgreSQL database with run-time
// parameters params, closed when the test ends.
func (d *Database) ConnectPG(tb testing.TB, params map[string]string) *pgx.Conn {
	tb.Helper()
	d.require(tb, PGEngine, "ConnectPG")
	return ConnectPG(tb, d.URL, params)
}

// ConnectPG opens a session on PostgreSQL at url with run-time parameters
// params, closed when the test ends.
func ConnectPG(tb testing.TB, url string, params map[string]string) *pgx.Conn {
	tb.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// OpenMy opens another pool on a MariaDB database with DSN parameters
// params, closed when the test ends.
func (d *Database) OpenMy(tb testing.TB, params map[string]string) *sql.DB {
	tb.Helper()
	d.require(tb, MariaEngine, "OpenMy")
	return OpenMy(tb, d.DSN, params)
}

// OpenMy opens a go-sql-driver pool on dsn with DSN parameters params
// added, closed when the test ends.
func OpenMy(tb testing.TB, dsn string, params map[string]string) *sql.DB {
	tb.Helper()
	if len(params) > 0 {
		q := url.Values{}
		for k, v := range params {
			q.Set(k, v)
		}
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + q.Encode()
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// Session is a single session on a MariaDB database, for transactions that
// span statements, closed when the test ends.
func (d *Database) Session(tb testing.TB) *sql.Conn {
	tb.Helper()
	d.require(tb, MariaEngine, "Session")
	c, err := d.My.Conn(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// PGExecer is a pgx connection, pool or transaction.
type PGExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ExecPG runs stmts on q, failing the test with the first statement that
// fails.
func ExecPG(tb testing.TB, q PGExecer, stmts ...string) {
	tb.Helper()
	for _, s := range stmts {
		if _, err := q.Exec(context.Background(), s); err != nil {
			tb.Fatalf("%s: %v", s, err)
		}
	}
}

// SQLExecer is a database/sql pool, session or transaction.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ExecSQL runs stmts on q, failing the test with the first statement that
// fails.
func ExecSQL(tb testing.TB, q SQLExecer, stmts ...string) {
	tb.Helper()
	for _, s := range stmts {
		if _, err := q.ExecContext(context.Background(), s); err != nil {
			tb.Fatalf("%s: %v", s, err)
		}
	}
}
