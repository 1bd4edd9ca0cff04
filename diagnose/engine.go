package diagnose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/endpoint"
)

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// applier is what diagnose needs of a sluice apply target.
type applier interface {
	Apply(ctx context.Context, b *apply.Batch, cp sluice.Checkpoint) error
	Ping(ctx context.Context) (time.Duration, error)
	Preflight(ctx context.Context, tables []*sluice.Table) error
	Close(ctx context.Context) error
}

// openApplier opens sluice's own target in the given mode, dialing
// through dial.
func openApplier(ctx context.Context, url string, mode Mode, dial dialFunc) (applier, error) {
	return endpoint.OpenTarget(ctx, endpoint.TargetOptions{URL: url, Mode: string(mode), Dial: dial})
}

// pinger is a bare connection for RTT measurements: nothing is created on
// the target.
type pinger interface {
	ping(ctx context.Context) error
	// server names the server, e.g. "PostgreSQL 15.8", or says "".
	server(ctx context.Context) string
	close()
}

func openPinger(ctx context.Context, eng endpoint.Engine, url string, dial dialFunc) (pinger, error) {
	switch eng {
	case endpoint.EnginePostgres:
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, fmt.Errorf("--target: %w", err)
		}
		cfg.DialFunc = dial
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("cannot reach target PostgreSQL at %s: %w", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), err)
		}
		return &pgPinger{conn: conn}, nil
	case endpoint.EngineMySQL:
		cfg, err := mysqlConfig(url)
		if err != nil {
			return nil, err
		}
		cfg.DialFunc = dial
		db, conn, err := mysqlConn(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &myPinger{db: db, conn: conn}, nil
	}
	return nil, fmt.Errorf("--target: %s targets are not supported", eng)
}

type pgPinger struct{ conn *pgx.Conn }

// ping sends an empty query ("-- ping"): one round trip.
func (p *pgPinger) ping(ctx context.Context) error { return p.conn.Ping(ctx) }
func (p *pgPinger) server(context.Context) string {
	return pgServerName(p.conn.PgConn().ParameterStatus("server_version"))
}

// pgServerName turns server_version ("15.8 (Debian 15.8-0+deb12u1)") into
// "PostgreSQL 15.8".
func pgServerName(v string) string {
	v, _, _ = strings.Cut(v, " ")
	return "PostgreSQL " + v
}
func (p *pgPinger) close() { p.conn.Close(context.Background()) }

type myPinger struct {
	db   *sql.DB
	conn *sql.Conn
}

// ping sends COM_PING: one round trip.
func (p *myPinger) ping(ctx context.Context) error { return p.conn.PingContext(ctx) }
func (p *myPinger) server(ctx context.Context) string {
	var v string
	if p.conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v) != nil {
		return ""
	}
	return mysqlServerName(v)
}
func (p *myPinger) close() {
	p.conn.Close()
	p.db.Close()
}

func mysqlConfig(url string) (*mysql.Config, error) {
	cfg, err := connstr.ParseMySQL(url)
	if err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return cfg, nil
}

func mysqlConn(ctx context.Context, cfg *mysql.Config) (*sql.DB, *sql.Conn, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--target: %w", err)
	}
	db := sql.OpenDB(connector)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("cannot reach target MySQL at %s: %w", cfg.Addr, err)
	}
	return db, conn, nil
}

// scratchMarker starts the comment of every scratch table diagnose creates,
// so that a leftover of an interrupted run can be told from a user's table.
const scratchMarker = "sluice diagnose scratch table"

// admin creates and drops the scratch table, on its own connection (not
// counted, not the applier's).
type admin interface {
	// version names the server, e.g. "PostgreSQL 15.8".
	version(ctx context.Context) (string, error)
	// create creates the scratch table, refusing a table that exists.
	create(ctx context.Context, name sluice.TableName) (*sluice.Table, error)
	drop(ctx context.Context, t *sluice.Table) error
	// deleteCheckpoint removes the checkpoint row stream left on the target.
	deleteCheckpoint(ctx context.Context, stream string) error
	close()
}

func openAdmin(ctx context.Context, eng endpoint.Engine, url string) (admin, error) {
	switch eng {
	case endpoint.EnginePostgres:
		conn, err := endpoint.ConnectPostgres(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("cannot reach target: %w", err)
		}
		return &pgAdmin{conn: conn}, nil
	case endpoint.EngineMySQL:
		cfg, err := mysqlConfig(url)
		if err != nil {
			return nil, err
		}
		if cfg.DBName == "" {
			return nil, fmt.Errorf("--target names no database: add /dbname (the scratch table and sluice's checkpoint table go there)")
		}
		db, conn, err := mysqlConn(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &myAdmin{db: db, conn: conn, database: cfg.DBName}, nil
	}
	return nil, fmt.Errorf("--target: %s targets are not supported", eng)
}

// scratchTable is the scratch table: id bigint primary key, v varchar(100),
// n bigint, spelled as each engine's catalog prints the types.
func scratchTable(name sluice.TableName, varchar string) *sluice.Table {
	return &sluice.Table{
		Name: name,
		Columns: []sluice.Column{
			{Name: "id", Type: "bigint"},
			{Name: "v", Type: varchar, Nullable: true},
			{Name: "n", Type: "bigint", Nullable: true},
		},
		Key: []int{0},
	}
}

type pgAdmin struct{ conn *pgx.Conn }

func (a *pgAdmin) version(ctx context.Context) (string, error) {
	var v string
	if err := a.conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "", err
	}
	return pgServerName(v), nil
}

func (a *pgAdmin) create(ctx context.Context, name sluice.TableName) (*sluice.Table, error) {
	if name.Schema == "" {
		var schema *string
		if err := a.conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
			return nil, fmt.Errorf("find the target's current schema: %w", err)
		}
		if schema == nil {
			return nil, fmt.Errorf("the target's search_path names no existing schema: give --table as schema.table")
		}
		name.Schema = *schema
	}
	ident := pgx.Identifier{name.Schema, name.Name}.Sanitize()
	_, err := a.conn.Exec(ctx, "CREATE TABLE "+ident+" (id bigint PRIMARY KEY, v varchar(100), n bigint)")
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P07" { // duplicate_table
		var comment *string
		_ = a.conn.QueryRow(ctx, "SELECT obj_description(to_regclass($1), 'pg_class')", ident).Scan(&comment)
		return nil, existsError(name, comment != nil && strings.HasPrefix(*comment, scratchMarker))
	}
	if err != nil {
		return nil, fmt.Errorf("create scratch table %s: %w (the target user needs CREATE on schema %s; or name another with --table schema.table)", name, err, name.Schema)
	}
	comment := scratchMarker + ", created " + time.Now().UTC().Format(time.RFC3339) + "; safe to drop"
	if _, err := a.conn.Exec(ctx, "COMMENT ON TABLE "+ident+" IS "+pgQuote(comment)); err != nil {
		a.conn.Exec(ctx, "DROP TABLE IF EXISTS "+ident)
		return nil, fmt.Errorf("comment on scratch table %s: %w", name, err)
	}
	return scratchTable(name, "character varying(100)"), nil
}

func (a *pgAdmin) drop(ctx context.Context, t *sluice.Table) error {
	// An applier connection that was cut mid-transaction still holds its
	// lock until the server notices: wait for it, but not forever.
	if _, err := a.conn.Exec(ctx, "SET lock_timeout = '30s'"); err != nil {
		return err
	}
	_, err := a.conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t.Name.Schema, t.Name.Name}.Sanitize())
	return err
}

func (a *pgAdmin) deleteCheckpoint(ctx context.Context, stream string) error {
	_, err := a.conn.Exec(ctx, `DELETE FROM "sluice"."checkpoint" WHERE stream = $1`, stream)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return nil // no checkpoint table: nothing to delete
	}
	return err
}

func (a *pgAdmin) close() { a.conn.Close(context.Background()) }

func pgQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

type myAdmin struct {
	db       *sql.DB
	conn     *sql.Conn
	database string
}

func (a *myAdmin) version(ctx context.Context) (string, error) {
	var v string
	if err := a.conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", err
	}
	return mysqlServerName(v), nil
}

// mysqlServerName turns VERSION() ("10.11.6-MariaDB-0+deb12u1-log",
// "8.0.36") into "MariaDB 10.11.6" or "MySQL 8.0.36".
func mysqlServerName(v string) string {
	if i := strings.Index(strings.ToLower(v), "-mariadb"); i >= 0 {
		return "MariaDB " + v[:i]
	}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		return "MariaDB " + v
	}
	return "MySQL " + v
}

func myIdent(parts ...string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = "`" + strings.ReplaceAll(p, "`", "``") + "`"
	}
	return strings.Join(q, ".")
}

func myQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func (a *myAdmin) create(ctx context.Context, name sluice.TableName) (*sluice.Table, error) {
	if name.Schema == "" {
		name.Schema = a.database
	}
	comment := scratchMarker + ", created " + time.Now().UTC().Format(time.RFC3339) + "; safe to drop"
	_, err := a.conn.ExecContext(ctx, "CREATE TABLE "+myIdent(name.Schema, name.Name)+
		" (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR(100), n BIGINT) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT="+myQuote(comment))
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1050 { // ER_TABLE_EXISTS_ERROR
		var c string
		_ = a.conn.QueryRowContext(ctx, "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
			name.Schema, name.Name).Scan(&c)
		return nil, existsError(name, strings.HasPrefix(c, scratchMarker))
	}
	if err != nil {
		return nil, fmt.Errorf("create scratch table %s: %w (the target user needs CREATE on database %s; or name another with --table db.table)", name, err, name.Schema)
	}
	return scratchTable(name, "varchar(100)"), nil
}

func (a *myAdmin) drop(ctx context.Context, t *sluice.Table) error {
	if _, err := a.conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 30"); err != nil {
		return err
	}
	_, err := a.conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+myIdent(t.Name.Schema, t.Name.Name))
	return err
}

func (a *myAdmin) deleteCheckpoint(ctx context.Context, stream string) error {
	_, err := a.conn.ExecContext(ctx, "DELETE FROM "+myIdent(a.database, "sluice_checkpoint")+" WHERE stream = ?", stream)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 { // no such table
		return nil
	}
	return err
}

func (a *myAdmin) close() {
	a.conn.Close()
	a.db.Close()
}

func existsError(name sluice.TableName, leftover bool) error {
	if leftover {
		return fmt.Errorf("scratch table %s already exists: it is left over from an interrupted `sluice diagnose` (its comment says so); drop it (DROP TABLE %s) or choose another name with --table", name, name)
	}
	return fmt.Errorf("table %s already exists and was not created by sluice diagnose: refusing to touch it; choose another name with --table", name)
}
