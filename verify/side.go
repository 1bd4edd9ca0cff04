package verify

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

// Side is one database of the comparison: it hands out read-only
// snapshots, each on a connection of its own.
type Side interface {
	Dialect() Dialect
	// Describe reads a table's columns (types as this side's catalog
	// spells them) and primary key.
	Describe(ctx context.Context, name sluice.TableName) (*sluice.Table, error)
	Begin(ctx context.Context) (Snapshot, error)
	// Where names the server for errors (host:port, never a password).
	Where() string
	// Warm opens up to n connections at once, so that the snapshots to
	// come do not each pay a connection's round trips.
	Warm(ctx context.Context, n int)
	Close()
}

// Snapshot is one consistent, read-only view of a side: every query sees
// the same rows.
type Snapshot interface {
	// Query runs one statement and returns its rows as text (nil for NULL).
	Query(ctx context.Context, q string) ([][]*string, error)
	// Position is the source position the snapshot has seen everything up
	// to (an upper bound: a target that covers it holds every change the
	// snapshot sees), for a log of the kind named.
	Position(ctx context.Context, kind, like string) (sluice.Position, error)
	// Checkpoint is the stream's low watermark as this (target) snapshot
	// sees it; ok is false when the stream has none.
	Checkpoint(ctx context.Context, stream string) (cp sluice.Checkpoint, ok bool, err error)
	Close()
}

// OpenPostgres opens a PostgreSQL side from a connection string.
// checkpointSchema is where its sluice checkpoint table lives ("sluice"
// when empty).
func OpenPostgres(ctx context.Context, url, checkpointSchema string) (Side, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse the PostgreSQL connection string: %w", err)
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "sluice-verify"
	}
	cfg.MaxConns = 16
	where := fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", where, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s as %s: %w (check the host, port, user and password)", where, cfg.ConnConfig.User, err)
	}
	if checkpointSchema == "" {
		checkpointSchema = "sluice"
	}
	return &pgSide{pool: pool, where: where, cpSchema: checkpointSchema}, nil
}

type pgSide struct {
	pool     *pgxpool.Pool
	where    string
	cpSchema string
}

func (s *pgSide) Dialect() Dialect { return PostgreSQL }
func (s *pgSide) Where() string    { return "PostgreSQL " + s.where }
func (s *pgSide) Close()           { s.pool.Close() }

func (s *pgSide) Warm(ctx context.Context, n int) {
	warm(n, func() (func(), error) {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return c.Release, nil
	})
}

// warm takes n connections at once with acquire, then gives them back.
func warm(n int, acquire func() (release func(), err error)) {
	var wg sync.WaitGroup
	releases := make(chan func(), n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := acquire(); err == nil {
				releases <- r
			}
		}()
	}
	wg.Wait()
	close(releases)
	for r := range releases {
		r()
	}
}

func (s *pgSide) Describe(ctx context.Context, name sluice.TableName) (*sluice.Table, error) {
	rel := quoteTable(PostgreSQL, name)
	// An enum's labels (sluice.Column.Enum) choose its canonical form
	// against a MySQL ENUM or varchar.
	rows, err := s.pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
		coalesce((SELECT k.n FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(att, n) WHERE k.att = a.attnum), 0)::int,
		CASE WHEN a.attgenerated <> '' THEN pg_get_expr(d.adbin, d.adrelid) ELSE '' END,
		coalesce((SELECT string_agg('''' || replace(e.enumlabel, '''', '''''') || '''', ',' ORDER BY e.enumsortorder)
			FROM pg_type t JOIN pg_enum e ON e.enumtypid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
			WHERE t.oid = a.atttypid), '')
		FROM pg_attribute a LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, rel)
	if err != nil {
		return nil, fmt.Errorf("describe table %s on %s: %w", name, s.Where(), err)
	}
	t := &sluice.Table{Name: name}
	keyAt := map[int]int{}
	for rows.Next() {
		var c sluice.Column
		var k int
		if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &k, &c.Generated, &c.Enum); err != nil {
			rows.Close()
			return nil, fmt.Errorf("describe table %s on %s: %w", name, s.Where(), err)
		}
		if k > 0 {
			keyAt[k] = len(t.Columns)
		}
		t.Columns = append(t.Columns, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe table %s on %s: %w", name, s.Where(), err)
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("table %s does not exist on %s (or the user cannot see it): check --tables and the connection's database and search_path", name, s.Where())
	}
	for i := 1; i <= len(keyAt); i++ {
		t.Key = append(t.Key, keyAt[i])
	}
	return t, nil
}

func (s *pgSide) Begin(ctx context.Context) (Snapshot, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", s.Where(), err)
	}
	return &pgSnap{c: c, side: s}, nil
}

// pgSnap begins its transaction with its first query: BEGIN, the settings
// and the query go in one simple-protocol message, one round trip, and
// the snapshot is taken by that query.
type pgSnap struct {
	c     *pgxpool.Conn
	side  *pgSide
	begun bool
}

func (p *pgSnap) Query(ctx context.Context, q string) ([][]*string, error) {
	stmts := []string{q}
	if !p.begun {
		stmts = append(append([]string{"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"}, keyrange.PGSetLocal()...), q)
	}
	results, err := p.c.Conn().PgConn().Exec(ctx, strings.Join(stmts, ";\n")).ReadAll()
	if err != nil {
		return nil, err
	}
	p.begun = true
	if len(results) != len(stmts) {
		return nil, fmt.Errorf("%d results for %d statements", len(results), len(stmts))
	}
	last := results[len(results)-1]
	out := make([][]*string, len(last.Rows))
	for i, raw := range last.Rows {
		r := make([]*string, len(raw))
		for j, v := range raw {
			if v != nil {
				s := string(v)
				r[j] = &s
			}
		}
		out[i] = r
	}
	return out, nil
}

func (p *pgSnap) Position(ctx context.Context, kind, _ string) (sluice.Position, error) {
	switch kind {
	case "pglogical":
		rows, err := p.Query(ctx, "SELECT pg_current_wal_lsn()::text")
		if err != nil || len(rows) != 1 || rows[0][0] == nil {
			return sluice.Position{}, fmt.Errorf("read the WAL position of the snapshot on %s: %v", p.side.Where(), err)
		}
		return sluice.Position{Kind: kind, Token: *rows[0][0] + "/0"}, nil
	case pgtrigger.Kind:
		if _, err := p.Query(ctx, "SELECT 1"); err != nil { // takes the snapshot
			return sluice.Position{}, err
		}
		return pgtrigger.PositionAt(ctx, p.c.Conn())
	}
	return sluice.Position{}, fmt.Errorf("a PostgreSQL source read as %q cannot tell its position: verify knows pglogical and pgtrigger streams", kind)
}

func (p *pgSnap) Checkpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error) {
	q := "SELECT lane, seq, position, applied, coalesce(last_position, ''), coalesce(lanes, 0) FROM " +
		pgx.Identifier{p.side.cpSchema, "checkpoint"}.Sanitize() + " WHERE stream = " + keyrange.PGLiteral(stream) + " ORDER BY lane"
	rows, err := p.Query(ctx, q)
	if err != nil {
		return sluice.Checkpoint{}, false, fmt.Errorf("read the checkpoint of stream %q from %s.checkpoint on %s: %w", stream, p.side.cpSchema, p.side.Where(), err)
	}
	return parseCheckpoints(stream, rows)
}

// Close ends the transaction off the critical path: nothing waits for
// the ROLLBACK's round trip.
func (p *pgSnap) Close() {
	go func() {
		if p.begun {
			// A broken connection is not returned to the pool.
			if _, err := p.c.Exec(context.Background(), "ROLLBACK"); err != nil {
				p.c.Conn().Close(context.Background())
			}
		}
		p.c.Release()
	}()
}

func parseCheckpoints(stream string, rows [][]*string) (sluice.Checkpoint, bool, error) {
	var cps []sluice.Checkpoint
	for _, r := range rows {
		cp := sluice.Checkpoint{Stream: stream}
		var err error
		fmt.Sscan(deref(r[0]), &cp.Lane)
		fmt.Sscan(deref(r[1]), &cp.Seq)
		fmt.Sscan(deref(r[3]), &cp.Applied)
		fmt.Sscan(deref(r[5]), &cp.Lanes)
		if cp.Position, err = sluice.ParsePosition(deref(r[2])); err == nil {
			cp.Last, err = sluice.ParsePosition(deref(r[4]))
		}
		if err != nil {
			return sluice.Checkpoint{}, false, fmt.Errorf("checkpoint of stream %q, lane %d: %w", stream, cp.Lane, err)
		}
		cps = append(cps, cp)
	}
	cp, ok := apply.Resume(cps)
	return cp, ok, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// OpenMySQL opens a MySQL or MariaDB side from a DSN (cfg as
// go-sql-driver parses it).
func OpenMySQL(ctx context.Context, cfg *mysql.Config) (Side, error) {
	cfg = cfg.Clone()
	cfg.ParseTime = false
	// Set on every new connection, so that a snapshot costs one round
	// trip (START TRANSACTION) where the server's default isolation is
	// REPEATABLE READ, which START TRANSACTION WITH CONSISTENT SNAPSHOT
	// needs to take one.
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("MySQL connection %s: %w", cfg.Addr, err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	s := &mySide{db: db, where: cfg.Addr, database: cfg.DBName}
	iso, err := isolation(ctx, db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to MySQL at %s as %s: %w (check the host, port, user and password)", cfg.Addr, cfg.User, err)
	}
	s.setIsolation = iso != "REPEATABLE-READ"
	return s, nil
}

type mySide struct {
	db       *sql.DB
	where    string
	database string
	// setIsolation: sessions do not default to REPEATABLE READ.
	setIsolation bool
}

func (s *mySide) Dialect() Dialect { return MySQL }

// Database is the connection's database, which a MySQL reader names
// unqualified tables with.
func (s *mySide) Database() string { return s.database }
func (s *mySide) Where() string    { return "MySQL " + s.where }
func (s *mySide) Close()           { s.db.Close() }

func (s *mySide) Warm(ctx context.Context, n int) {
	warm(n, func() (func(), error) {
		c, err := s.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		return func() { c.Close() }, nil
	})
}

func (s *mySide) Describe(ctx context.Context, name sluice.TableName) (*sluice.Table, error) {
	schema := "DATABASE()"
	if name.Schema != "" {
		schema = keyrange.MyLiteral(name.Schema)
	}
	fail := func(err error) (*sluice.Table, error) {
		return nil, fmt.Errorf("describe table %s on %s: %w", name, s.Where(), err)
	}
	rows, err := s.db.QueryContext(ctx, "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE = 'YES', COALESCE(COLLATION_NAME, ''), COALESCE(GENERATION_EXPRESSION, '') "+
		"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "+
		schema+" AND TABLE_NAME = "+keyrange.MyLiteral(name.Name)+" ORDER BY ORDINAL_POSITION")
	if err != nil {
		return fail(err)
	}
	t := &sluice.Table{Name: name}
	for rows.Next() {
		var c sluice.Column
		if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &c.Collation, &c.Generated); err != nil {
			rows.Close()
			return fail(err)
		}
		t.Columns = append(t.Columns, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("table %s does not exist on %s (or the user cannot see it): check --tables and the connection's database", name, s.Where())
	}
	krows, err := s.db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = "+
		schema+" AND TABLE_NAME = "+keyrange.MyLiteral(name.Name)+" AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION")
	if err != nil {
		return fail(err)
	}
	defer krows.Close()
	for krows.Next() {
		var n string
		if err := krows.Scan(&n); err != nil {
			return fail(err)
		}
		t.Key = append(t.Key, t.ColumnIndex(n))
	}
	return t, krows.Err()
}

func (s *mySide) Begin(ctx context.Context) (Snapshot, error) {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", s.Where(), err)
	}
	stmts := []string{"START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"}
	if s.setIsolation {
		stmts = append([]string{"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"}, stmts...)
	}
	for _, q := range stmts {
		if _, err := c.ExecContext(ctx, q); err != nil {
			c.Close()
			return nil, fmt.Errorf("begin a read-only snapshot on %s (%s): %w", s.Where(), q, err)
		}
	}
	return &mySnap{c: c, side: s}, nil
}

type mySnap struct {
	c    *sql.Conn
	side *mySide
}

func (m *mySnap) Query(ctx context.Context, q string) ([][]*string, error) {
	rows, err := m.c.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	raw := make([]sql.RawBytes, len(cols))
	dst := make([]any, len(cols))
	for i := range raw {
		dst[i] = &raw[i]
	}
	var out [][]*string
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return nil, err
		}
		r := make([]*string, len(raw))
		for i, v := range raw {
			if v != nil {
				s := string(v)
				r[i] = &s
			}
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (m *mySnap) Position(ctx context.Context, kind, like string) (sluice.Position, error) {
	if kind != "binlog" {
		return sluice.Position{}, fmt.Errorf("a MySQL source read as %q cannot tell its position: verify knows binlog streams", kind)
	}
	mode, _, _ := strings.Cut(like, ":")
	var q string
	switch mode {
	case "mariadb":
		q = "SELECT @@GLOBAL.gtid_binlog_pos"
	case "mysql":
		q = "SELECT @@GLOBAL.gtid_executed"
	default:
		return sluice.Position{}, fmt.Errorf("stream position %q: verify compares MariaDB and MySQL GTID positions only (the stream reads the binlog by file and offset)", like)
	}
	var v string
	if err := m.c.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return sluice.Position{}, fmt.Errorf("read the binlog position of the snapshot on %s: %w", m.side.Where(), err)
	}
	return sluice.Position{Kind: kind, Token: mode + ":" + strings.ReplaceAll(v, "\n", "")}, nil
}

func (m *mySnap) Checkpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error) {
	rows, err := m.Query(ctx, "SELECT `lane`, `seq`, `position`, `applied`, COALESCE(`last_position`, ''), COALESCE(`lanes`, 0) FROM `sluice_checkpoint` WHERE `stream` = "+
		keyrange.MyLiteral(stream)+" ORDER BY `lane`")
	if err != nil {
		return sluice.Checkpoint{}, false, fmt.Errorf("read the checkpoint of stream %q from sluice_checkpoint on %s: %w", stream, m.side.Where(), err)
	}
	return parseCheckpoints(stream, rows)
}

// Close ends the transaction off the critical path.
func (m *mySnap) Close() {
	go func() {
		if _, err := m.c.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			m.c.Raw(func(any) error { return errors.New("drop the connection") })
		}
		m.c.Close()
	}()
}

// isolation is the sessions' isolation level, e.g. REPEATABLE-READ
// (transaction_isolation; tx_isolation before MySQL 8 and MariaDB 11.1).
func isolation(ctx context.Context, db *sql.DB) (string, error) {
	var v string
	err := db.QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&v)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1193 { // unknown system variable
		err = db.QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&v)
	}
	return v, err
}
