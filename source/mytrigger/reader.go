package mytrigger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/source/internal/myfk"
)

// Config configures a Reader.
type Config struct {
	// Tables to stream; an empty Schema means the connection's database.
	Tables []sluice.TableName
	// PollInterval is how long Read waits for changes before it returns an
	// empty slice. Default 200ms.
	PollInterval time.Duration
	// Install makes Open install whatever changelog or trigger is missing
	// or stale; without it Open fails and says how to install them.
	Install bool
	Logger  *slog.Logger
	// Stream names the stream the reader reads for: its consumer record
	// on the source, which keeps the changelog rows it has not
	// acknowledged. Default "default" (DefaultStream).
	Stream string
	// ProgressInterval is the least time between two OpProgress changes,
	// which Read hands out when polls move the position past rows of
	// other tables only. Default 5s.
	ProgressInterval time.Duration
	// PinWarnAfter is how long another stream's consumer may hold back
	// changelog rows this stream has acknowledged, without acknowledging
	// anything itself, before the reader warns about it. Default 30m.
	PinWarnAfter time.Duration
}

const (
	defaultPollInterval = 200 * time.Millisecond
	// defaultProgressInterval spaces OpProgress changes: each one costs
	// the stream a checkpoint and the source an acknowledgement.
	defaultProgressInterval = 5 * time.Second
	// pollEvery is how often Read looks for new changes while it waits.
	pollEvery = 50 * time.Millisecond
	// defaultPruneEvery rate-limits changelog pruning.
	defaultPruneEvery = 2 * time.Second
	// pruneChunk bounds the rows one prune statement deletes, so that it
	// never holds many locks or a long transaction.
	pruneChunk = 10000
)

// Reader streams changes from the changelog. Read and Ack may be called
// from different goroutines.
type Reader struct {
	cfg    Config
	log    *slog.Logger
	db     *sql.DB
	addr   string
	user   string
	logDB  string
	tables []*sluice.Table
	infos  map[string]*tableInfo // by changelog tbl value
	query  string
	stream string
	start  position
	// innoName is each streamed table's and the changelog's InnoDB name
	// (encoded database, encoded table), by logName.
	innoName map[string][2]string
	// fks are the foreign keys of the tables or referencing them: InnoDB
	// fires no trigger for a row their actions change (ForeignKeys).
	fks []sluice.ForeignKey

	mu    sync.Mutex // serialises Read and guards the fields below
	pos   position
	fence fence
	nonce uint64
	// ids are the tables' and changelog's InnoDB identities when the
	// stream registered; lastCheck is when Read last compared them.
	ids       map[string]string
	lastCheck time.Time
	// lastOut is the position of the last change handed out (or the
	// start); lastProgress when Read last handed out an OpProgress.
	lastOut      position
	lastProgress time.Time

	ackMu      sync.Mutex // guards the fields below
	lastPrune  time.Time
	pending    *position
	pruneEvery time.Duration
	warned     map[string]time.Time // consumers warned about, see warnPinned
}

// fence is the reader's knowledge about gaps in the changelog ids above
// pos.last, see the package documentation.
type fence struct {
	// safe: every id <= safe that will ever commit is visible to reads.
	safe uint64
	// waiting: a gap was seen; once every transaction in trx has ended,
	// safe becomes horizon.
	waiting bool
	horizon uint64
	trx     []trxKey
}

// trxKey identifies a running transaction across innodb_trx lists.
type trxKey struct {
	id      uint64
	thread  uint64
	started string
}

var _ source.Reader = (*Reader)(nil)

// Open connects to the source, checks every table and its capture triggers
// (installing what is missing or stale when cfg.Install is set) and returns
// a Reader that resumes after from, or reads the whole changelog when from
// is zero. dsnOrURL is a mysql:// URL or a go-sql-driver DSN; its database
// holds the changelog.
func Open(ctx context.Context, dsnOrURL string, cfg Config, from sluice.Position) (*Reader, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = defaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = defaultProgressInterval
	}
	if cfg.PinWarnAfter <= 0 {
		cfg.PinWarnAfter = defaultPinWarnAfter
	}
	if len(cfg.Tables) == 0 {
		return nil, errors.New("mytrigger source: no tables configured")
	}
	pos, err := parsePosition(from)
	if err != nil {
		return nil, err
	}
	db, mc, err := openDB(dsnOrURL)
	if err != nil {
		return nil, err
	}
	r := &Reader{
		cfg:          cfg,
		log:          cfg.Logger.With("source", Kind, "database", mc.DBName, "stream", cfg.Stream),
		db:           db,
		addr:         mc.Addr,
		user:         mc.User,
		logDB:        mc.DBName,
		stream:       cfg.Stream,
		start:        pos,
		pos:          pos,
		lastOut:      pos,
		lastProgress: time.Now(),
		pruneEvery:   defaultPruneEvery,
		infos:        map[string]*tableInfo{},
		warned:       map[string]time.Time{},
	}
	r.db.SetMaxOpenConns(4)
	r.db.SetMaxIdleConns(2)
	cfg.Tables = normalize(cfg.Tables, mc.DBName)
	r.cfg.Tables = cfg.Tables
	for i, t := range cfg.Tables {
		if slices.Contains(cfg.Tables[:i], t) {
			r.db.Close()
			return nil, fmt.Errorf("mytrigger source: table %s is listed twice", t)
		}
	}
	if err := r.ping(ctx); err != nil {
		r.db.Close()
		return nil, err
	}
	if err := r.check(ctx); err != nil {
		r.db.Close()
		return nil, err
	}
	if r.fks, err = myfk.Read(ctx, r.db, r.cfg.Tables); err != nil {
		r.db.Close()
		return nil, fmt.Errorf("mytrigger source: %w", err)
	}
	if err := r.register(ctx); err != nil {
		r.db.Close()
		return nil, err
	}
	r.lastCheck = time.Now()
	r.query = fmt.Sprintf(`SELECT id, tbl, op, k, d, CAST(UNIX_TIMESTAMP(at) AS CHAR) FROM %s WHERE id > ? ORDER BY id LIMIT ?`,
		ident(r.logDB, ChangelogTable))
	r.log.Info("mytrigger reader open", "tables", len(r.tables), "from", r.pos.sluice().String())
	return r, nil
}

// ping connects and turns the usual failures into messages that name the
// server and the fix.
func (r *Reader) ping(ctx context.Context) error {
	err := r.db.PingContext(ctx)
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045:
			return fmt.Errorf("MySQL source %s: access denied for user %s: check the user and password in the connection string: %w", r.addr, r.user, err)
		case 1044:
			return fmt.Errorf("MySQL source %s: user %s may not use database %s: grant it access or use another user: %w", r.addr, r.user, r.logDB, err)
		case 1049:
			return fmt.Errorf("MySQL source %s has no database %s: fix the database name in the connection string: %w", r.addr, r.logDB, err)
		}
		return fmt.Errorf("connect to MySQL source %s: %w", r.addr, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("connect to MySQL source %s: %w", r.addr, err)
	}
	return fmt.Errorf("cannot reach MySQL source at %s: check the host and port and that the server is running: %w", r.addr, err)
}

// check describes the tables and makes sure the changelog and every
// capture trigger exist and are current, installing them if allowed. It
// also checks that the fence can read innodb_trx.
func (r *Reader) check(ctx context.Context) error {
	if r.cfg.Install {
		if err := Install(ctx, r.db, r.cfg.Tables); err != nil {
			return err
		}
	}
	fix := "run `sluice source install` (or start with install enabled) to create sluice's changelog and triggers in database " + r.logDB
	for _, t := range []string{ChangelogTable, ConsumerTable, PrunedTable} {
		exists, err := tableExists(ctx, r.db, r.logDB, t)
		if err != nil {
			return err
		}
		if !exists && t == ChangelogTable {
			return fmt.Errorf("changelog %s.%s is missing: %s", r.logDB, ChangelogTable, fix)
		}
		if !exists {
			return fmt.Errorf("%s.%s, which lets several streams share the changelog, is missing (an install from an older sluice): %s", r.logDB, t, fix)
		}
	}
	for _, t := range r.cfg.Tables {
		info, err := lookupTable(ctx, r.db, t)
		if err != nil {
			return err
		}
		have, err := lookupTriggers(ctx, r.db, t)
		if err != nil {
			return err
		}
		for _, e := range events {
			tr, ok := have[e.suffix]
			if !ok {
				return fmt.Errorf("source table %s has no capture trigger %s (AFTER %s): %s", t, triggerName(t.Name, e), e.name, fix)
			}
			if current(tr, ok, r.logDB, info, e) {
				if !tr.body.Valid {
					r.log.Warn("cannot check that a capture trigger is current: the user lacks the TRIGGER privilege", "table", t.String(), "trigger", triggerName(t.Name, e))
				}
				continue
			}
			if tr.table != info.table.Name.Name {
				return fmt.Errorf("capture trigger %s now belongs to table %s.%s, not %s (was the table renamed, or swapped for another?): %s",
					triggerName(t.Name, e), t.Schema, tr.table, t, fix)
			}
			var cols []string
			if e.op == "D" {
				cols = info.keyNames()
			} else {
				for _, c := range info.table.Columns {
					cols = append(cols, c.Name)
				}
			}
			return fmt.Errorf("capture trigger %s on source table %s is stale: it captures (%s) but the table has (%s) (or their types or the primary key changed): %s",
				triggerName(t.Name, e), t, strings.Join(capturedColumns(tr.body.String), ", "), strings.Join(cols, ", "), fix)
		}
		r.infos[logName(t)] = info
		r.tables = append(r.tables, info.table)
	}
	if _, err := r.running(ctx); err != nil {
		return err
	}
	return nil
}

// Tables describes the streamed tables.
func (r *Reader) Tables() []*sluice.Table { return r.tables }

// ForeignKeys returns the source's foreign keys of the streamed tables,
// or referencing them, as the reader found them at Open: InnoDB fires no
// trigger for a row its foreign-key actions change, so the target must
// carry the actions out (apply.Cascades).
func (r *Reader) ForeignKeys() []sluice.ForeignKey { return r.fks }

// Start returns the position the reader started from: the one it was
// opened at, or for a reader opened without one the position before the
// first changelog id. It is a valid resume position.
func (r *Reader) Start() sluice.Position { return r.start.sluice() }

// Read returns up to max changes in order. It waits up to the poll interval
// for changes and returns an empty slice when none came.
func (r *Reader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	if max <= 0 {
		return nil, fmt.Errorf("mytrigger source: Read max %d: want a positive number", max)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.db == nil {
		return nil, errors.New("mytrigger source: reader is closed")
	}
	deadline := time.Now().Add(r.cfg.PollInterval)
	tick := min(pollEvery, r.cfg.PollInterval)
	for {
		if err := r.checkSource(ctx); err != nil {
			return nil, err
		}
		changes, again, err := r.page(ctx, max)
		if len(changes) > 0 {
			r.lastOut, _ = parsePosition(changes[len(changes)-1].Pos)
		}
		if err != nil || len(changes) > 0 {
			return changes, err
		}
		if r.pos.last > r.lastOut.last && time.Since(r.lastProgress) >= r.cfg.ProgressInterval {
			// The position moved past other tables' rows only (perhaps
			// many pages of them): say so, so that the stream checkpoints
			// and acknowledges it.
			r.lastOut, r.lastProgress = r.pos, time.Now()
			return []sluice.Change{{Op: sluice.OpProgress, Pos: r.pos.sluice()}}, nil
		}
		if again {
			continue
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(tick, wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Ack records that the target holds every change at or below pos and
// prunes the changelog rows every stream reading it has acknowledged.
// Pruning runs at most every two seconds; a later Ack prunes what an
// earlier one skipped.
func (r *Reader) Ack(ctx context.Context, pos sluice.Position) error {
	p, err := parsePosition(pos)
	if err != nil {
		return err
	}
	r.ackMu.Lock()
	defer r.ackMu.Unlock()
	if r.db == nil {
		return errors.New("mytrigger source: reader is closed")
	}
	if time.Since(r.lastPrune) < r.pruneEvery {
		r.pending = &p
		return nil
	}
	r.pending = nil
	n, behind, err := r.prune(ctx, p.last)
	if err != nil {
		r.pending = &p
		return fmt.Errorf("prune changelog %s.%s up to %s for stream %s: %w", r.logDB, ChangelogTable, pos, r.stream, err)
	}
	r.lastPrune = time.Now()
	r.warnPinned(behind)
	r.log.Debug("pruned changelog", "rows", n, "position", pos.String())
	return nil
}

// Close ends the reader's sessions.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ackMu.Lock()
	defer r.ackMu.Unlock()
	if r.db == nil {
		return nil
	}
	err := r.db.Close()
	r.db = nil
	return err
}

// openDB opens a pool of the source as the reader reads it: text values,
// the session's time_zone pinned so that anything the server renders is
// UTC.
func openDB(dsnOrURL string) (*sql.DB, *mysql.Config, error) {
	mc, err := connstr.ParseMySQL(dsnOrURL)
	if err != nil {
		return nil, nil, fmt.Errorf("mytrigger source connection string: %w", err)
	}
	if mc.DBName == "" {
		return nil, nil, errors.New("mytrigger source: the connection string names no database: name the database that holds sluice_changelog, e.g. mysql://user:pass@host:3306/app")
	}
	mc.ParseTime = false
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	mc.Params["time_zone"] = "'+00:00'"
	if mc.Timeout == 0 {
		mc.Timeout = 10 * time.Second
	}
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, nil, fmt.Errorf("mytrigger source: %w", err)
	}
	return sql.OpenDB(connector), mc, nil
}
