package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
)

// DB is a session on a database whose catalog the package reads or whose
// schema it changes: a source or a target. The caller opens the
// connection (daemon's endpoints) and closes it.
type DB struct {
	Engine Engine
	Flavor Flavor
	// Database is the database the session is in (a MySQL name without a
	// schema is in it).
	Database string
	// Addr names the server in messages (host:port).
	Addr string
	PG   *pgx.Conn
	My   *sql.DB
}

// NewPG wraps a PostgreSQL session.
func NewPG(conn *pgx.Conn, addr string) *DB {
	return &DB{Engine: Postgres, Flavor: FlavorPostgres, Database: conn.Config().Database, Addr: addr, PG: conn}
}

// NewMy wraps a MySQL or MariaDB pool on database name; it reads the
// server's flavor.
func NewMy(ctx context.Context, db *sql.DB, name, addr string) (*DB, error) {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, fmt.Errorf("read the server version of %s: %w", addr, err)
	}
	return &DB{Engine: MySQL, Flavor: FlavorOf(MySQL, version), Database: name, Addr: addr, My: db}, nil
}

func (d *DB) String() string {
	return fmt.Sprintf("%s at %s, database %s", d.Flavor, d.Addr, d.Database)
}

// ReadTable reads a table's definition; nil when it does not exist.
func (d *DB) ReadTable(ctx context.Context, name sluice.TableName) (*Table, error) {
	if d.Engine == Postgres {
		return ReadPostgres(ctx, d.PG, name)
	}
	return ReadMySQL(ctx, d.My, d.Flavor, d.Database, name)
}

// ReadTables reads the definitions of tables that must exist, as a source's
// do; a missing one is an error naming it.
func (d *DB) ReadTables(ctx context.Context, names []sluice.TableName) ([]*Table, error) {
	out := make([]*Table, 0, len(names))
	for _, n := range names {
		t, err := d.ReadTable(ctx, n)
		if err != nil {
			return nil, err
		}
		if t == nil {
			return nil, fmt.Errorf("source table %s does not exist in database %s: create it or fix the table list", n, d.Database)
		}
		out = append(out, t)
	}
	return out, nil
}

// Run runs steps in order. A step whose Exists query finds its object, or
// whose statement fails only because the object exists already, is
// skipped: a run stopped midway is run again from its start. done, when
// set, is called after each step that ran or was found done.
func (d *DB) Run(ctx context.Context, log *slog.Logger, steps []Step, done func(i int) error) error {
	for i, s := range steps {
		skip, err := d.exists(ctx, s)
		if err != nil {
			return fmt.Errorf("check whether %s ran already on %s: %w", clip(s.SQL), d, err)
		}
		if !skip {
			if err := d.Exec(ctx, s.SQL); err != nil && !alreadyExists(err) {
				return fmt.Errorf("run on %s: %s: %w", d, clip(s.SQL), err)
			}
			if log != nil {
				log.Debug("schema statement", "sql", s.SQL)
			}
		}
		if done != nil {
			if err := done(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// Exec runs one statement.
func (d *DB) Exec(ctx context.Context, stmt string) error {
	if d.Engine == Postgres {
		_, err := d.PG.Exec(ctx, stmt)
		return err
	}
	_, err := d.My.ExecContext(ctx, stmt)
	return err
}

func (d *DB) exists(ctx context.Context, s Step) (bool, error) {
	if s.Exists == "" {
		return false, nil
	}
	var n int64
	var err error
	if d.Engine == Postgres {
		err = d.PG.QueryRow(ctx, s.Exists).Scan(&n)
	} else {
		err = d.My.QueryRowContext(ctx, s.Exists).Scan(&n)
	}
	return n > 0, err
}

// alreadyExists reports an error that says the statement's object exists:
// the step ran before.
func alreadyExists(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P07", // duplicate_table (also an index or a unique constraint's index)
			"42710", // duplicate_object (a constraint, a type)
			"42P06": // duplicate_schema
			return true
		}
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1050, // table exists
			1061, // duplicate key name
			1826: // duplicate foreign key constraint name
			return true
		}
	}
	return false
}

func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		return s[:157] + "..."
	}
	return s
}
