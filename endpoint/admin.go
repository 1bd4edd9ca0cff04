package endpoint

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/connstr"
)

// ConnectPostgres opens a plain connection for administrative commands.
func ConnectPostgres(ctx context.Context, rawURL string) (*pgx.Conn, error) {
	return connectPostgres(ctx, rawURL, false)
}

// ConnectPostgresUnprepared is ConnectPostgres for a connection that may
// go through PgBouncer's transaction pooling, as a target's may: it
// prepares no named statement. pgx's statement cache names a statement
// by its text's hash, so two of sluice's connections sent to one server
// connection by the pooler collide ("prepared statement stmtcache_…
// already exists"); the target's own connections run this way too.
func ConnectPostgresUnprepared(ctx context.Context, rawURL string) (*pgx.Conn, error) {
	return connectPostgres(ctx, rawURL, true)
}

func connectPostgres(ctx context.Context, rawURL string, unprepared bool) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", MaskURL(rawURL), err)
	}
	if unprepared {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		cfg.StatementCacheCapacity, cfg.DescriptionCacheCapacity = 0, 0
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	return conn, nil
}

// ConnectMySQL opens a pool for administrative commands on a MySQL or
// MariaDB server, from a URL or a DSN. It connects lazily: the first
// query says whether the server answers.
func ConnectMySQL(rawURL string) (*sql.DB, error) {
	cfg, err := connstr.ParseMySQL(rawURL)
	if err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("MySQL connection %s: %w", MaskURL(rawURL), err)
	}
	return sql.OpenDB(connector), nil
}
