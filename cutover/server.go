package cutover

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// server is one database of the pair as the cutover needs it besides
// verify's comparison: where its log stands, who is writing it, and its
// counters (sequences, AUTO_INCREMENT).
type server interface {
	engine() endpoint.Engine
	// where names the server for messages (host:port and database).
	where() string
	// position is the server's log position now, as a reader of kind
	// writes it; like is a position of that kind (the stream's
	// checkpoint's), which tells a binlog position's mode.
	position(ctx context.Context, kind, like string) (sluice.Position, error)
	// setReadOnly makes the database refuse the application's writes and
	// says what it did.
	setReadOnly(ctx context.Context) (string, error)
	// openWriters describes the transactions open now that have written
	// (PostgreSQL: the tables named; MySQL: the database) and may commit
	// later.
	openWriters(ctx context.Context, tables []sluice.TableName) ([]string, error)
	// counters lists the table's columns that take their values from a
	// counter (a sequence, an identity, AUTO_INCREMENT), each with the
	// value its next insert gets.
	counters(ctx context.Context, table sluice.TableName) ([]counter, error)
	// columnMax is the largest value of an integer column, ok false on
	// an empty table.
	columnMax(ctx context.Context, table sluice.TableName, column string) (v int64, ok bool, err error)
	// raise makes c's next value next; next is more than c's.
	raise(ctx context.Context, table sluice.TableName, c counter, next int64) error
	// triggers lists the enabled triggers on table, which may fire on a
	// reverse stream's writes.
	triggers(ctx context.Context, table sluice.TableName) ([]string, error)
	close()
}

// counter is where a column's values come from when an insert leaves it
// out.
type counter struct {
	column string
	// name is the sequence (quoted and qualified as PostgreSQL prints a
	// regclass) or "AUTO_INCREMENT".
	name string
	// next is the value the next insert gets; max the most the counter
	// can give (0: the column type's own limit).
	next, max int64
}

const autoIncrement = "AUTO_INCREMENT"

func openServer(ctx context.Context, role, raw string) (server, error) {
	eng, err := endpoint.EngineOf(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", role, err)
	}
	switch eng {
	case endpoint.EnginePostgres:
		conn, err := endpoint.ConnectPostgres(ctx, raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		s := &pgServer{conn: conn}
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&s.db); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		cfg := conn.Config()
		s.addr = fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
		return s, nil
	case endpoint.EngineMySQL:
		db, err := endpoint.ConnectMySQL(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		s := &myServer{db: db}
		if err := db.QueryRowContext(ctx, "SELECT COALESCE(DATABASE(), '')").Scan(&s.database); err != nil {
			db.Close()
			return nil, fmt.Errorf("%s: MySQL at %s: %w", role, endpoint.MaskURL(raw), err)
		}
		if cfg, err := connstr.ParseMySQL(raw); err == nil {
			s.addr = cfg.Addr
		}
		return s, nil
	}
	return nil, fmt.Errorf("%s: %s servers are not supported", role, eng)
}

func isMy(err error, code uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == code
}

// pgServer is a PostgreSQL database.
type pgServer struct {
	conn *pgx.Conn
	addr string
	db   string
}

func (s *pgServer) engine() endpoint.Engine { return endpoint.EnginePostgres }
func (s *pgServer) where() string           { return "PostgreSQL " + s.addr + ", database " + s.db }
func (s *pgServer) close()                  { s.conn.Close(context.Background()) }

func (s *pgServer) position(ctx context.Context, kind, _ string) (sluice.Position, error) {
	switch kind {
	case pglogical.Kind:
		var lsn string
		if err := s.conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return sluice.Position{}, fmt.Errorf("read the WAL position of %s: %w", s.where(), err)
		}
		// A boundary: every transaction whose commit record starts
		// before lsn.
		return sluice.Position{Kind: kind, Token: lsn + "/0"}, nil
	case pgtrigger.Kind:
		p, err := pgtrigger.PositionAt(ctx, s.conn)
		if err != nil {
			return sluice.Position{}, fmt.Errorf("%s: %w", s.where(), err)
		}
		return p, nil
	}
	return sluice.Position{}, fmt.Errorf("the stream reads %s as %q, which has no position cutover knows", s.where(), kind)
}

// setReadOnly makes new sessions of the database start read-only and ends
// the application's sessions already open. PostgreSQL has no switch that
// makes a primary refuse every write: default_transaction_read_only is a
// session's default, which a session may turn off itself. sluice's own
// sessions (the running stream's) are left alone.
func (s *pgServer) setReadOnly(ctx context.Context) (string, error) {
	if _, err := s.conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{s.db}.Sanitize()+" SET default_transaction_read_only = on"); err != nil {
		return "", fmt.Errorf("--source-read-only: ALTER DATABASE %s SET default_transaction_read_only on %s: %w (it needs the database's owner or a superuser)", s.db, s.addr, err)
	}
	rows, err := s.conn.Query(ctx, `SELECT pid, coalesce(usename, ''), coalesce(application_name, ''), pg_terminate_backend(pid)
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
		AND backend_type = 'client backend' AND coalesce(application_name, '') NOT LIKE 'sluice%'`)
	if err != nil {
		return "", fmt.Errorf("--source-read-only: end the sessions open on %s: %w", s.where(), err)
	}
	var ended, kept []string
	for rows.Next() {
		var pid int
		var user, app string
		var ok bool
		if err := rows.Scan(&pid, &user, &app, &ok); err != nil {
			rows.Close()
			return "", fmt.Errorf("--source-read-only: end the sessions open on %s: %w", s.where(), err)
		}
		desc := fmt.Sprintf("pid %d (user %s, application %q)", pid, user, app)
		if ok {
			ended = append(ended, desc)
		} else {
			kept = append(kept, desc)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("--source-read-only: end the sessions open on %s: %w", s.where(), err)
	}
	if len(kept) > 0 {
		return "", fmt.Errorf("--source-read-only: could not end the sessions %s on %s (ending another role's session needs membership in pg_signal_backend, a superuser's needs a superuser): end them, or stop their application, and run cutover again",
			strings.Join(kept, ", "), s.where())
	}
	return fmt.Sprintf("database %s: new sessions start read-only (ALTER DATABASE … SET default_transaction_read_only = on; undo with ALTER DATABASE %s RESET default_transaction_read_only); %d sessions open before were ended; a session that turns transaction_read_only off itself can still write, which the quiet checks would see",
		s.db, pgx.Identifier{s.db}.Sanitize(), len(ended)), nil
}

// openWriters lists the sessions whose open transaction holds a write
// lock on one of the tables: it wrote them, or is writing them, and may
// commit after the cutover's position was read.
func (s *pgServer) openWriters(ctx context.Context, tables []sluice.TableName) ([]string, error) {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = pgQualified(t)
	}
	rows, err := s.conn.Query(ctx, `SELECT DISTINCT l.pid, l.relation::regclass::text, coalesce(a.usename, ''), coalesce(a.application_name, ''), coalesce(a.state, ''),
		coalesce(now() - a.xact_start, interval '0')::text
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'relation' AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.relation = ANY (SELECT to_regclass(n) FROM unnest($1::text[]) n) AND l.pid <> pg_backend_pid()
		ORDER BY 1, 2`, names)
	if err != nil {
		return nil, fmt.Errorf("look for open write transactions on %s: %w", s.where(), err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var pid int
		var rel, user, app, state, age string
		if err := rows.Scan(&pid, &rel, &user, &app, &state, &age); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("pid %d (user %s, application %q, %s, transaction open for %s) holds a write lock on %s", pid, user, app, state, age, rel))
	}
	return out, rows.Err()
}

// pgQualified is a table's name as to_regclass reads it.
func pgQualified(t sluice.TableName) string {
	if t.Schema == "" {
		return pgx.Identifier{t.Name}.Sanitize()
	}
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

// counters finds the sequences a table's columns take values from: owned
// by the column (serial, an identity) or named in its default.
func (s *pgServer) counters(ctx context.Context, table sluice.TableName) ([]counter, error) {
	rows, err := s.conn.Query(ctx, `SELECT a.attname, q.seq::regclass::text, sq.seqmax
		FROM pg_attribute a
		CROSS JOIN LATERAL (
			SELECT d.objid AS seq FROM pg_depend d
			WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
			AND d.refobjid = a.attrelid AND d.refobjsubid = a.attnum AND d.deptype IN ('a', 'i')
			UNION
			SELECT d.refobjid FROM pg_attrdef ad JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid
			AND d.refclassid = 'pg_class'::regclass
			WHERE ad.adrelid = a.attrelid AND ad.adnum = a.attnum) q
		JOIN pg_class c ON c.oid = q.seq AND c.relkind = 'S'
		JOIN pg_sequence sq ON sq.seqrelid = q.seq
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum, 2`, pgQualified(table))
	if err != nil {
		return nil, fmt.Errorf("read the sequences of table %s on %s: %w", table, s.where(), err)
	}
	var out []counter
	for rows.Next() {
		var c counter
		if err := rows.Scan(&c.column, &c.name, &c.max); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the sequences of table %s on %s: %w", table, s.where(), err)
		}
		out = append(out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the sequences of table %s on %s: %w", table, s.where(), err)
	}
	for i := range out {
		if out[i].next, err = s.sequenceNext(ctx, out[i].name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sequenceNext is the value nextval would return: the sequence's tuple
// holds the last value handed out (with a cache, the last of the values
// sessions took ahead), so this is at least every value used.
func (s *pgServer) sequenceNext(ctx context.Context, seq string) (int64, error) {
	var last, inc int64
	var called bool
	err := s.conn.QueryRow(ctx, "SELECT s.last_value, s.is_called, q.seqincrement FROM "+seq+" s, pg_sequence q WHERE q.seqrelid = $1::regclass", seq).
		Scan(&last, &called, &inc)
	if err != nil {
		return 0, fmt.Errorf("read sequence %s on %s: %w", seq, s.where(), err)
	}
	if inc <= 0 {
		return 0, fmt.Errorf("sequence %s on %s counts down (increment %d): cutover primes only ascending sequences; set it by hand", seq, s.where(), inc)
	}
	if called {
		return last + inc, nil
	}
	return last, nil
}

func (s *pgServer) columnMax(ctx context.Context, table sluice.TableName, column string) (int64, bool, error) {
	var v *int64
	q := "SELECT max(" + pgx.Identifier{column}.Sanitize() + ")::bigint FROM " + pgQualified(table)
	if err := s.conn.QueryRow(ctx, q).Scan(&v); err != nil {
		return 0, false, fmt.Errorf("read the largest %s of table %s on %s: %w", column, table, s.where(), err)
	}
	if v == nil {
		return 0, false, nil
	}
	return *v, true, nil
}

func (s *pgServer) raise(ctx context.Context, table sluice.TableName, c counter, next int64) error {
	if c.max > 0 && next > c.max {
		return fmt.Errorf("sequence %s of %s.%s on %s: the source's next value %d is past its MAXVALUE %d: raise MAXVALUE (ALTER SEQUENCE %s MAXVALUE …) and run cutover again",
			c.name, table, c.column, s.where(), next, c.max, c.name)
	}
	if _, err := s.conn.Exec(ctx, "SELECT setval($1::regclass, $2, false)", c.name, next); err != nil {
		return fmt.Errorf("set sequence %s of %s.%s on %s to %d: %w (the target user needs UPDATE on the sequence)", c.name, table, c.column, s.where(), next, err)
	}
	return nil
}

// triggers lists the enabled user triggers of a table. A session with
// session_replication_role = replica (sluice's, where its user may set
// it) fires only those enabled ALWAYS or REPLICA; otherwise all fire.
func (s *pgServer) triggers(ctx context.Context, table sluice.TableName) ([]string, error) {
	rows, err := s.conn.Query(ctx, `SELECT tgname || CASE tgenabled WHEN 'A' THEN ' (ALWAYS)' WHEN 'R' THEN ' (REPLICA)' ELSE '' END
		FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal AND tgenabled <> 'D' ORDER BY 1`, pgQualified(table))
	if err != nil {
		return nil, fmt.Errorf("read the triggers of table %s on %s: %w", table, s.where(), err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// myServer is a MySQL or MariaDB database.
type myServer struct {
	db       *sql.DB
	addr     string
	database string
}

func (s *myServer) engine() endpoint.Engine { return endpoint.EngineMySQL }
func (s *myServer) where() string           { return "MySQL " + s.addr + ", database " + s.database }
func (s *myServer) close()                  { s.db.Close() }

func (s *myServer) position(ctx context.Context, kind, like string) (sluice.Position, error) {
	switch kind {
	case binlog.Kind:
		mode, _, _ := strings.Cut(like, ":")
		var tok string
		var err error
		switch mode {
		case "mariadb":
			err = s.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&tok)
		case "mysql":
			err = s.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&tok)
			tok = strings.ReplaceAll(tok, "\n", "")
		case "file":
			tok, err = s.binlogFilePosition(ctx)
		default:
			return sluice.Position{}, fmt.Errorf("stream position %q: not a binlog position cutover knows", like)
		}
		if err != nil {
			return sluice.Position{}, fmt.Errorf("read the binlog position of %s: %w", s.where(), err)
		}
		return sluice.Position{Kind: kind, Token: mode + ":" + tok}, nil
	case mytrigger.Kind:
		var last uint64
		if err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(id), 0) FROM "+mytrigger.ChangelogTable).Scan(&last); err != nil {
			return sluice.Position{}, fmt.Errorf("read the last id of %s on %s: %w", mytrigger.ChangelogTable, s.where(), err)
		}
		return sluice.Position{Kind: kind, Token: strconv.FormatUint(last, 10)}, nil
	}
	return sluice.Position{}, fmt.Errorf("the stream reads %s as %q, which has no position cutover knows", s.where(), kind)
}

// binlogFilePosition is SHOW MASTER STATUS's file and offset (SHOW BINARY
// LOG STATUS on MySQL 8.4, which dropped the old name).
func (s *myServer) binlogFilePosition(ctx context.Context) (string, error) {
	for _, q := range []string{"SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"} {
		rows, err := s.db.QueryContext(ctx, q)
		if isMy(err, 1064) {
			continue
		}
		if err != nil {
			return "", err
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			return "", err
		}
		if !rows.Next() {
			return "", fmt.Errorf("%s returned nothing: is the binary log on?", q)
		}
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		return string(vals[0]) + ":" + string(vals[1]), nil
	}
	return "", errors.New("neither SHOW MASTER STATUS nor SHOW BINARY LOG STATUS is understood")
}

// setReadOnly sets the server's read_only: writes by users without SUPER
// (MySQL; MariaDB: READ ONLY ADMIN) fail from then on, and setting it
// waits for the transactions and table locks already open to end. It is
// server-wide. super_read_only is not set, so that a reverse stream may
// still write with such a user.
func (s *myServer) setReadOnly(ctx context.Context) (string, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 30"); err != nil {
		return "", fmt.Errorf("--source-read-only on %s: %w", s.where(), err)
	}
	if _, err := conn.ExecContext(ctx, "SET GLOBAL read_only = ON"); err != nil {
		return "", fmt.Errorf("--source-read-only: SET GLOBAL read_only = ON on %s: %w (it needs SUPER, or MariaDB's READ ONLY ADMIN; it waits up to 30 s for open transactions and table locks to end)", s.where(), err)
	}
	return fmt.Sprintf("server %s: read_only = ON (the whole server; undo with SET GLOBAL read_only = OFF): open transactions ended before it took effect, and only users with SUPER or, on MariaDB, READ ONLY ADMIN can still write, which the quiet checks would see", s.addr), nil
}

// openWriters lists the transactions open now in the database that
// modified rows and have been open for more than a second (a sluice
// trigger reader's own short transactions are not the application's).
// It needs the PROCESS privilege.
func (s *myServer) openWriters(ctx context.Context, _ []sluice.TableName) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT t.trx_mysql_thread_id, COALESCE(p.USER, ''), t.trx_rows_modified, TIMESTAMPDIFF(SECOND, t.trx_started, NOW())
		FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
		WHERE t.trx_rows_modified > 0 AND t.trx_started < NOW() - INTERVAL 1 SECOND AND (p.DB = DATABASE() OR p.DB IS NULL) AND t.trx_mysql_thread_id <> CONNECTION_ID()`)
	if err != nil {
		return nil, fmt.Errorf("look for open write transactions on %s (information_schema.INNODB_TRX needs the PROCESS privilege): %w", s.where(), err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, modified, age int64
		var user string
		if err := rows.Scan(&id, &user, &modified, &age); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("connection %d (user %s) has modified %d rows in a transaction open for %ds", id, user, modified, age))
	}
	return out, rows.Err()
}

func (s *myServer) schema(t sluice.TableName) string {
	if t.Schema != "" {
		return t.Schema
	}
	return s.database
}

func (s *myServer) counters(ctx context.Context, table sluice.TableName) ([]counter, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the AUTO_INCREMENT of table %s on %s: %w", table, s.where(), err)
	}
	defer conn.Close()
	// MySQL 8 caches information_schema.TABLES.AUTO_INCREMENT unless the
	// session says not to; MariaDB has no such cache (nor the variable).
	if _, err := conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0"); err != nil && !isMy(err, 1193) {
		return nil, fmt.Errorf("read the AUTO_INCREMENT of table %s on %s: %w", table, s.where(), err)
	}
	var col string
	var next sql.NullInt64
	err = conn.QueryRowContext(ctx, `SELECT c.COLUMN_NAME, t.AUTO_INCREMENT FROM information_schema.COLUMNS c
		JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
		WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ? AND c.EXTRA LIKE '%auto_increment%'`, s.schema(table), table.Name).Scan(&col, &next)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the AUTO_INCREMENT of table %s on %s: %w", table, s.where(), err)
	}
	if !next.Valid {
		next.Int64 = 1
	}
	return []counter{{column: col, name: autoIncrement, next: next.Int64}}, nil
}

func (s *myServer) columnMax(ctx context.Context, table sluice.TableName, column string) (int64, bool, error) {
	var v sql.NullInt64
	q := "SELECT MAX(" + myIdent(column) + ") FROM " + myIdent(s.schema(table)) + "." + myIdent(table.Name)
	if err := s.db.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return 0, false, fmt.Errorf("read the largest %s of table %s on %s: %w", column, table, s.where(), err)
	}
	return v.Int64, v.Valid, nil
}

func (s *myServer) raise(ctx context.Context, table sluice.TableName, c counter, next int64) error {
	q := "ALTER TABLE " + myIdent(s.schema(table)) + "." + myIdent(table.Name) + " AUTO_INCREMENT = " + strconv.FormatInt(next, 10)
	if _, err := s.db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("set the AUTO_INCREMENT of table %s on %s to %d: %w (the target user needs ALTER on the table)", table, s.where(), next, err)
	}
	return nil
}

func (s *myServer) triggers(ctx context.Context, table sluice.TableName) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? ORDER BY 1`,
		s.schema(table), table.Name)
	if err != nil {
		return nil, fmt.Errorf("read the triggers of table %s on %s: %w", table, s.where(), err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

func myIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
