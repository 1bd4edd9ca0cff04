package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/source/internal/myfk"
)

// Kind is the Position.Kind of binlog positions.
const Kind = "binlog"

// Config configures a Reader.
type Config struct {
	// Tables to stream; Schema is the database (empty: the DSN's database).
	Tables []sluice.TableName
	// ServerID is the replica server_id the reader registers with. Zero
	// picks a random one in [2^30, 2^31) that is neither the source's
	// server_id nor a registered replica's.
	ServerID uint32
	// FromNow starts at the current end of the binlog when there is no
	// position. (With no position the reader always starts there: the
	// binlog rarely reaches back to a table's creation, so "from the
	// beginning" would not be a copy of the table.)
	FromNow bool
	// FilePositions makes the reader use file:offset positions even when the
	// server has GTIDs (it does when gtid_mode is off on MySQL).
	FilePositions bool
	// HeartbeatPeriod is how often an idle source sends a heartbeat
	// (default 5 s); a connection silent for three periods while the reader
	// waits for it is reopened.
	HeartbeatPeriod time.Duration
	// PollInterval is how long Read waits for changes (default 200 ms).
	PollInterval time.Duration
	// ProgressInterval is how often, at most, Read hands out an OpProgress
	// marker while the reader moves through binlog that holds no change
	// of the streamed tables (default 5 s). The stream checkpoints the
	// markers, so a quiet stream's position keeps up with the source and
	// does not need binlogs the source may purge.
	ProgressInterval time.Duration
	// BufferChanges bounds the changes decoded ahead of Read (default
	// 16384), and BufferBytes their bytes (default
	// source.DefaultBufferBytes).
	BufferChanges int
	BufferBytes   int64
	Logger        *slog.Logger
}

// Reader streams changes from a binlog. It implements source.Reader.
type Reader struct {
	cfg    Config
	log    *slog.Logger
	db     *sql.DB
	conn   connInfo
	flavor string
	tables []*sluice.Table
	repl   map[string]*sluice.Table // "schema.table" -> described table
	dbs    map[string]bool          // databases of the streamed tables, lower case (streamedDBs)
	colls  map[uint64]collation     // collation id -> name and character set
	start  sluice.Position

	// fks are the foreign keys of the tables or referencing them: InnoDB
	// logs no row their actions change (ForeignKeys).
	fks []sluice.ForeignKey

	out     chan batch // decoded changes, bounded
	budget  *source.Budget
	pending []sluice.Change
	failed  error

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	acked sluice.Position
	syncr *replication.BinlogSyncer

	reconnects atomic.Int64 // connection losses recovered from
}

type batch struct {
	changes []sluice.Change
	size    int64 // bytes taken from the budget
	err     error
}

type connInfo struct {
	host     string
	port     uint16
	user     string
	password string
	dbName   string
}

// Open checks the source, describes the tables and starts reading at from
// (or, when from is zero, at the current end of the binlog).
func Open(ctx context.Context, dsnOrURL string, cfg Config, from sluice.Position) (*Reader, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeartbeatPeriod <= 0 {
		cfg.HeartbeatPeriod = 5 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.BufferChanges <= 0 {
		cfg.BufferChanges = 16384
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 5 * time.Second
	}
	if len(cfg.Tables) == 0 {
		return nil, errors.New("binlog: no tables to stream")
	}
	if !from.IsZero() && from.Kind != Kind {
		return nil, fmt.Errorf("binlog: position %s was written by a %q reader, not %q", from, from.Kind, Kind)
	}
	db, ci, err := openDB(dsnOrURL)
	if err != nil {
		return nil, err
	}
	r := &Reader{cfg: cfg, log: cfg.Logger.With("source", "binlog"), db: db, conn: ci, repl: map[string]*sluice.Table{}}
	fail := func(err error) (*Reader, error) {
		db.Close()
		return nil, err
	}
	info, err := r.preflight(ctx)
	if err != nil {
		return fail(err)
	}
	if _, err := r.qualifyTables(); err != nil {
		return fail(err)
	}
	if err := r.loadCollations(ctx); err != nil {
		return fail(err)
	}
	if err := r.describe(ctx); err != nil {
		return fail(err)
	}
	if r.fks, err = myfk.Read(ctx, r.db, r.cfg.Tables); err != nil {
		return fail(fmt.Errorf("binlog: %w", err))
	}
	start, err := r.startPosition(ctx, info, from)
	if err != nil {
		return fail(err)
	}
	if !from.IsZero() {
		if err := r.checkServable(ctx, start, from); err != nil {
			return fail(err)
		}
	}
	r.out = make(chan batch, max(1, cfg.BufferChanges/256))
	r.budget = source.NewBudget(cfg.BufferBytes)
	rctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	st := &state{r: r, skipTo: start.at, skipK: start.oldK, expectTxn: start.txn,
		byID: map[uint64]*tableMap{}, byName: map[string]*sluice.Table{}, lastMarker: time.Now()}
	for k, t := range r.repl {
		st.byName[k] = t
	}
	startTok := start.token()
	r.start = from
	if from.IsZero() {
		r.start = sluice.Position{Kind: Kind, Token: start.base()}
	}
	st.pos = &position{mode: start.mode, file: start.file, off: start.off}
	if start.gset != nil {
		st.pos.gset = start.gset.Clone()
	}
	// Connect once synchronously so that a refused dump (privileges,
	// purged binlog) is Open's error.
	streamer, err := st.connect(rctx)
	if err != nil {
		cancel()
		r.mu.Lock()
		if r.syncr != nil {
			r.syncr.Close()
		}
		r.mu.Unlock()
		return fail(err)
	}
	go func() {
		defer close(r.done)
		st.run(rctx, streamer)
	}()
	r.log.Info("binlog reader started", "flavor", r.flavor, "position", startTok, "server_id", r.cfg.ServerID)
	return r, nil
}

// openDB opens the SQL pool the reader queries the source with: times in
// UTC, and raw values (ParseTime off) so that they are decoded as the
// binlog's are.
func openDB(dsnOrURL string) (*sql.DB, connInfo, error) {
	dcfg, err := connstr.ParseMySQL(dsnOrURL)
	if err != nil {
		return nil, connInfo{}, fmt.Errorf("binlog: source connection string: %w", err)
	}
	ci, err := connOf(dcfg)
	if err != nil {
		return nil, connInfo{}, err
	}
	dcfg.ParseTime = false
	if dcfg.Params == nil {
		dcfg.Params = map[string]string{}
	}
	dcfg.Params["time_zone"] = "'+00:00'"
	db, err := sql.Open("mysql", dcfg.FormatDSN())
	if err != nil {
		return nil, connInfo{}, fmt.Errorf("binlog: open %s: %w", ci.host, err)
	}
	db.SetMaxOpenConns(2)
	return db, ci, nil
}

// qualifyTables gives every configured table without a database the
// connection's; a table it cannot qualify is returned with the error.
func (r *Reader) qualifyTables() (sluice.TableName, error) {
	tables := make([]sluice.TableName, len(r.cfg.Tables))
	for i, t := range r.cfg.Tables {
		if t.Schema == "" {
			if r.conn.dbName == "" {
				return t, fmt.Errorf("binlog: table %s has no database and the connection names none: write it as db.table", t.Name)
			}
			t.Schema = r.conn.dbName
		}
		tables[i] = t
	}
	r.cfg.Tables = tables
	return sluice.TableName{}, nil
}

func connOf(c *gomysql.Config) (connInfo, error) {
	if c.Net != "tcp" && c.Net != "" {
		return connInfo{}, fmt.Errorf("binlog: source must be reached over TCP, not %s", c.Net)
	}
	host, portS, err := net.SplitHostPort(c.Addr)
	if err != nil {
		host, portS = c.Addr, "3306"
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil {
		return connInfo{}, fmt.Errorf("binlog: source port %q: %w", portS, err)
	}
	return connInfo{host: host, port: uint16(port), user: c.User, password: c.Passwd, dbName: c.DBName}, nil
}

// Tables describes the streamed tables as they are now.
func (r *Reader) Tables() []*sluice.Table { return r.tables }

// ForeignKeys returns the source's foreign keys of the streamed tables,
// or referencing them, as the reader found them at Open: InnoDB writes no
// row event for a row its foreign-key actions change, so the target must
// carry the actions out (apply.Cascades).
func (r *Reader) ForeignKeys() []sluice.ForeignKey { return r.fks }

// Start returns the position the reader started from, as a resume token:
// the one it was opened at, or (with no position) the source's position
// at Open, where it started reading. Recording it durably before the
// stream reports itself started makes a restart of a --from-now stream
// resume there, not at the source's new "now".
func (r *Reader) Start() sluice.Position { return r.start }

// Read returns up to max changes, waiting up to the poll interval. The
// returned slice is the caller's: the reader keeps no reference to it
// and never writes to it again. It hands out one decoded page (about
// flushAt changes) at a time, or the part of it max allows: gathering
// several pages into one slice copied every change once more.
func (r *Reader) Read(ctx context.Context, maxN int) ([]sluice.Change, error) {
	if maxN <= 0 {
		maxN = 1
	}
	if len(r.pending) == 0 {
		if r.failed != nil {
			return nil, r.failed
		}
		t := time.NewTimer(r.cfg.PollInterval)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return []sluice.Change{}, nil
		case b, ok := <-r.out:
			if !ok {
				r.failed = errors.New("binlog: reader closed")
				return nil, r.failed
			}
			r.budget.Give(b.size)
			if b.err != nil {
				r.failed = b.err
			}
			r.pending = b.changes
		}
	}
	if len(r.pending) == 0 && r.failed != nil {
		return nil, r.failed
	}
	n := min(maxN, len(r.pending))
	// The batches' slices are handed over by the decoding goroutine and
	// never written again; the capacity cut keeps the caller's appends
	// out of the changes after its n.
	out := r.pending[:n:n]
	r.pending = r.pending[n:]
	if len(r.pending) == 0 {
		r.pending = nil
	}
	return out, nil
}

// Ack remembers the newest position committed on the target. MySQL keeps
// no replica state for us, so there is nothing to confirm.
func (r *Reader) Ack(ctx context.Context, pos sluice.Position) error {
	r.mu.Lock()
	r.acked = pos
	r.mu.Unlock()
	return nil
}

// Acked returns the position last passed to Ack.
func (r *Reader) Acked() sluice.Position {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked
}

// Close stops reading.
func (r *Reader) Close() error {
	r.closeOnce.Do(func() {
		r.cancel()
		<-r.done
		r.mu.Lock()
		if r.syncr != nil {
			r.syncr.Close()
		}
		r.mu.Unlock()
		r.db.Close()
	})
	return nil
}

// serverInfo is what preflight learned.
type serverInfo struct {
	mariadb  bool
	gtidOn   bool
	serverID uint32
	version  string
}

func (r *Reader) preflight(ctx context.Context) (serverInfo, error) {
	var si serverInfo
	if err := r.db.PingContext(ctx); err != nil {
		return si, fmt.Errorf("binlog: connect to %s:%d as %s: %w", r.conn.host, r.conn.port, r.conn.user, err)
	}
	if err := r.db.QueryRowContext(ctx, "SELECT @@version, @@server_id").Scan(&si.version, &si.serverID); err != nil {
		return si, fmt.Errorf("binlog: read server version: %w", err)
	}
	si.mariadb = strings.Contains(strings.ToLower(si.version), "mariadb")
	r.flavor = mysql.MySQLFlavor
	if si.mariadb {
		r.flavor = mysql.MariaDBFlavor
	}
	vars := map[string]string{}
	rows, err := r.db.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "+
		"('log_bin','binlog_format','binlog_row_image','binlog_row_metadata','gtid_mode','binlog_row_value_options')")
	if err != nil {
		return si, fmt.Errorf("binlog: read server variables: %w", err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return si, fmt.Errorf("binlog: read server variables: %w", err)
		}
		vars[strings.ToLower(k)] = v
	}
	rows.Close()
	if err := checkVars(vars); err != nil {
		return si, err
	}
	si.gtidOn = si.mariadb || strings.EqualFold(vars["gtid_mode"], "ON")
	if err := r.checkPrivileges(ctx); err != nil {
		return si, err
	}
	if err := r.pickServerID(ctx, si.serverID); err != nil {
		return si, err
	}
	return si, nil
}

// checkVars turns the binlog settings into errors that name the fix.
func checkVars(v map[string]string) error {
	var problems []string
	if !strings.EqualFold(v["log_bin"], "ON") && v["log_bin"] != "1" {
		problems = append(problems, "the binary log is off (log_bin=OFF): start the server with log_bin (e.g. --log-bin=mysql-bin) — or use --source-mode trigger")
	}
	if f := v["binlog_format"]; !strings.EqualFold(f, "ROW") {
		problems = append(problems, fmt.Sprintf("binlog_format is %s, need ROW: SET GLOBAL binlog_format = 'ROW' and set it in the server's configuration", orUnset(f)))
	}
	if f := v["binlog_row_image"]; !strings.EqualFold(f, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_image is %s, need FULL: SET GLOBAL binlog_row_image = 'FULL' and set it in the server's configuration", orUnset(f)))
	}
	if f, ok := v["binlog_row_metadata"]; !ok {
		problems = append(problems, "the server has no binlog_row_metadata setting (MySQL before 8.0.1, MariaDB before 10.5): sluice needs binlog_row_metadata=FULL to describe rows from the binlog itself; upgrade the server or use --source-mode trigger")
	} else if !strings.EqualFold(f, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_metadata is %s, need FULL (column names, signedness and ENUM/SET labels in the binlog): SET GLOBAL binlog_row_metadata = 'FULL' and set it in the server's configuration", f))
	}
	if o := v["binlog_row_value_options"]; strings.Contains(strings.ToUpper(o), "PARTIAL_JSON") {
		problems = append(problems, "binlog_row_value_options=PARTIAL_JSON logs JSON updates as diffs, which sluice cannot apply: SET GLOBAL binlog_row_value_options = ''")
	}
	if len(problems) > 0 {
		return errors.New("binlog: the source's binary log is not usable: " + strings.Join(problems, "; "))
	}
	return nil
}

func orUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}

func (r *Reader) checkPrivileges(ctx context.Context) error {
	rows, err := r.db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return fmt.Errorf("binlog: SHOW GRANTS: %w", err)
	}
	var grants []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			rows.Close()
			return fmt.Errorf("binlog: SHOW GRANTS: %w", err)
		}
		grants = append(grants, strings.ToUpper(g))
	}
	rows.Close()
	return checkGrants(grants, r.conn.user)
}

// checkGrants looks for the global privileges a binlog reader needs.
// (Privileges granted through roles are not seen; the dump itself would
// still fail with the server's own message.)
func checkGrants(grants []string, user string) error {
	has := func(names ...string) bool {
		for _, g := range grants {
			if !strings.Contains(g, " ON *.* ") {
				continue
			}
			if strings.Contains(g, "ALL PRIVILEGES") {
				return true
			}
			for _, n := range names {
				if strings.Contains(g, n) {
					return true
				}
			}
		}
		return false
	}
	var missing []string
	if !has("REPLICATION SLAVE", "REPLICATION REPLICA") {
		missing = append(missing, "REPLICATION SLAVE")
	}
	if !has("REPLICATION CLIENT", "BINLOG MONITOR", "SUPER") {
		missing = append(missing, "REPLICATION CLIENT")
	}
	if len(missing) > 0 {
		return fmt.Errorf("binlog: user %s lacks the %s privilege(s) needed to read the binary log: "+
			"GRANT %s ON *.* TO %s — or use --source-mode trigger", user, strings.Join(missing, " and "),
			strings.Join(missing, ", "), user)
	}
	return nil
}

func (r *Reader) pickServerID(ctx context.Context, sourceID uint32) error {
	taken := map[uint32]bool{sourceID: true}
	rows, err := r.db.QueryContext(ctx, "SHOW SLAVE HOSTS")
	if err == nil {
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if rows.Scan(ptrs...) == nil && len(vals) > 0 {
				if id, err := strconv.ParseUint(fmt.Sprint(asString(vals[0])), 10, 32); err == nil {
					taken[uint32(id)] = true
				}
			}
		}
		rows.Close()
	} else {
		r.log.Warn("cannot list replicas to check the server_id (SHOW SLAVE HOSTS); going on", "err", err)
	}
	if r.cfg.ServerID != 0 {
		if taken[r.cfg.ServerID] {
			what := "a connected replica"
			if r.cfg.ServerID == sourceID {
				what = "the source itself"
			}
			return fmt.Errorf("binlog: server_id %d is already used by %s: pick another ServerID (each replica needs its own)", r.cfg.ServerID, what)
		}
		return nil
	}
	for {
		id := uint32(1<<30 + rand.IntN(1<<30))
		if !taken[id] {
			r.cfg.ServerID = id
			return nil
		}
	}
}

func asString(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

// describe reads the tables' current definitions: for Tables() before any
// event arrives, and to check that they exist and have a primary key.
func (r *Reader) describe(ctx context.Context) error {
	for _, tn := range r.cfg.Tables {
		rows, err := r.db.QueryContext(ctx, `SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY, CHARACTER_SET_NAME, COLLATION_NAME,
				COALESCE(GENERATION_EXPRESSION, '')
			FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, tn.Schema, tn.Name)
		if err != nil {
			return fmt.Errorf("binlog: describe %s: %w", tn, err)
		}
		t := &sluice.Table{Name: tn}
		var refused []string
		for rows.Next() {
			var name, typ, null, key, gen string
			var charset, coll sql.NullString
			if err := rows.Scan(&name, &typ, &null, &key, &charset, &coll, &gen); err != nil {
				rows.Close()
				return fmt.Errorf("binlog: describe %s: %w", tn, err)
			}
			if _, ok := charsets[charset.String]; charset.Valid && !ok {
				refused = append(refused, (&charsetError{table: tn.String(), column: name, charset: charset.String}).Error())
			}
			// A generated column's values are in the row image with the
			// others (binlog_row_image=FULL logs VIRTUAL columns too).
			t.Columns = append(t.Columns, sluice.Column{Name: name, Type: typ, Nullable: null == "YES",
				Collation: columnCollation(charset.String, coll.String), Generated: gen})
		}
		rows.Close()
		if len(t.Columns) == 0 {
			return fmt.Errorf("binlog: table %s does not exist on the source (or user %s may not read it: GRANT SELECT ON %s TO %s)", tn, r.conn.user, tn, r.conn.user)
		}
		if len(refused) > 0 {
			return &sluice.TableError{Table: tn, Err: errors.New("binlog: " + strings.Join(refused, "; "))}
		}
		krows, err := r.db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.STATISTICS
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX`, tn.Schema, tn.Name)
		if err != nil {
			return fmt.Errorf("binlog: describe %s primary key: %w", tn, err)
		}
		for krows.Next() {
			var c string
			if err := krows.Scan(&c); err != nil {
				krows.Close()
				return err
			}
			t.Key = append(t.Key, t.ColumnIndex(c))
		}
		krows.Close()
		if len(t.Key) == 0 {
			return fmt.Errorf("binlog: table %s has no primary key: sluice needs one to apply updates and deletes (ALTER TABLE %s ADD PRIMARY KEY (...))", tn, tn)
		}
		r.tables = append(r.tables, t)
		r.repl[tn.Schema+"."+tn.Name] = t
	}
	return nil
}

// loadCollations reads the server's collation ids: a table map names each
// character column's character set by the id of its collation. MariaDB
// 10.10+ lists the ids of its charset-independent collations (uca1400_…)
// per character set only in COLLATION_CHARACTER_SET_APPLICABILITY.
func (r *Reader) loadCollations(ctx context.Context) error {
	r.colls = map[uint64]collation{}
	read := func(q string) error {
		rows, err := r.db.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id sql.NullInt64
			var cs, name sql.NullString
			if err := rows.Scan(&id, &cs, &name); err != nil {
				return err
			}
			if id.Valid && cs.Valid && name.Valid {
				r.colls[uint64(id.Int64)] = collation{name: name.String, charset: cs.String}
			}
		}
		return rows.Err()
	}
	if err := read("SELECT ID, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS"); err != nil {
		return fmt.Errorf("binlog: read the source's collations (information_schema.COLLATIONS): %w", err)
	}
	if r.flavor == mysql.MariaDBFlavor {
		// Absent before MariaDB 10.10, which lists every id in COLLATIONS.
		_ = read("SELECT ID, CHARACTER_SET_NAME, FULL_COLLATION_NAME FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY")
	}
	return nil
}

// currentColumns returns the table's columns as the server has them now,
// by name, with their type and generation expression (empty when it
// cannot tell).
func (r *Reader) currentColumns(tn sluice.TableName) map[string]sluice.Column {
	out := map[string]sluice.Column{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := r.db.QueryContext(ctx, `SELECT COLUMN_NAME, COLUMN_TYPE, COALESCE(GENERATION_EXPRESSION, '') FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`, tn.Schema, tn.Name)
	if err != nil {
		r.log.Warn("binlog: cannot read column types", "table", tn, "err", err)
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var c sluice.Column
		if rows.Scan(&c.Name, &c.Type, &c.Generated) == nil {
			out[c.Name] = c
		}
	}
	return out
}

func (r *Reader) startPosition(ctx context.Context, si serverInfo, from sluice.Position) (*position, error) {
	if !from.IsZero() {
		p, err := parseToken(from.Token)
		if err != nil {
			return nil, err
		}
		if p.mode == modeMariaDB && !si.mariadb || p.mode == modeMySQL && si.mariadb {
			return nil, fmt.Errorf("binlog: position %s is a %s GTID position but the source is %s", from, p.mode, si.version)
		}
		if p.mode == modeMySQL && !si.gtidOn {
			return nil, fmt.Errorf("binlog: position %s holds MySQL GTIDs but the source has gtid_mode off", from)
		}
		return p, nil
	}
	if si.gtidOn && !r.cfg.FilePositions {
		if si.mariadb {
			var s string
			if err := r.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&s); err != nil {
				return nil, fmt.Errorf("binlog: read gtid_binlog_pos: %w", err)
			}
			g, err := mysql.ParseMariadbGTIDSet(s)
			if err != nil {
				return nil, fmt.Errorf("binlog: gtid_binlog_pos %q: %w", s, err)
			}
			return &position{mode: modeMariaDB, gset: g}, nil
		}
		var s string
		if err := r.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&s); err != nil {
			return nil, fmt.Errorf("binlog: read gtid_executed: %w", err)
		}
		g, err := mysql.ParseMysqlGTIDSet(strings.ReplaceAll(s, "\n", ""))
		if err != nil {
			return nil, fmt.Errorf("binlog: gtid_executed %q: %w", s, err)
		}
		return &position{mode: modeMySQL, gset: g}, nil
	}
	return binlogEnd(ctx, r.db)
}

// binlogEnd is the end of the server's binlog (SHOW MASTER STATUS), as a
// file position.
func binlogEnd(ctx context.Context, db *sql.DB) (*position, error) {
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		return nil, fmt.Errorf("binlog: SHOW MASTER STATUS: %w", err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return nil, errors.New("binlog: SHOW MASTER STATUS returned nothing: is the binary log on?")
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, fmt.Errorf("binlog: SHOW MASTER STATUS: %w", err)
	}
	off, err := strconv.ParseUint(asString(vals[1]), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("binlog: SHOW MASTER STATUS position %v: %w", vals[1], err)
	}
	return &position{mode: modeFile, file: asString(vals[0]), off: uint32(off)}, nil
}

// newSyncer builds a syncer that does not retry on its own: the reader
// reconnects from its exact position instead.
func (r *Reader) newSyncer() *replication.BinlogSyncer {
	return replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:                r.cfg.ServerID,
		Flavor:                  r.flavor,
		Host:                    r.conn.host,
		Port:                    r.conn.port,
		User:                    r.conn.user,
		Password:                r.conn.password,
		Charset:                 "utf8mb4",
		TimestampStringLocation: time.UTC,
		RenderJSONAsMySQLText:   true,
		HeartbeatPeriod:         r.cfg.HeartbeatPeriod,
		DisableRetrySync:        true,
		// Events parsed ahead by go-mysql, outside the reader's byte
		// budget: a rows event holds up to binlog_row_event_max_size
		// (8 KiB by default) of rows. (When go-mysql decoded the rows,
		// several times that, 1024 events held 25 MB at the peak of a
		// large transaction; keepRawRows now leaves them as bytes.)
		EventCacheCount: 64,
		// The reader decodes rows itself (state.rows), from the bytes.
		RowsEventDecodeFunc: keepRawRows,
		Logger:              slog.New(discardHandler{}),
	})
}

type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }
