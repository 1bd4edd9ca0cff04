// Package mytrigger reads row changes from MySQL and MariaDB through
// triggers and a changelog table, for sources where reading the binary log
// (REPLICATION SLAVE/CLIENT) is not allowed or the binary log is off.
//
// Install creates sluice_changelog in the connection's database and three
// AFTER triggers per table (sluice_<table>_ai, _au, _ad). MySQL has no
// generic row-to-JSON, so each trigger body lists the table's columns: it
// appends JSON_OBJECT of every column of the new row (insert, update) and of
// the old primary key (update, delete). How each column is captured is
// chosen per type so that the reader reproduces exactly the text the
// server's text protocol sends for it (see capture). Because the body names
// the columns, a trigger goes stale when columns change: Open compares each
// trigger with the one it would create now and refuses a stale one (or
// recreates it when Config.Install is set). Dropping or renaming a captured
// column makes the trigger fail the application's writes until `sluice
// source install` has been run: change schemas as "ALTER, then install" in
// quick succession, or uninstall first.
//
// # Reading order: the fence
//
// The changelog id is an AUTO_INCREMENT. InnoDB hands out auto-increment
// values in increasing order over time (in every innodb_autoinc_lock_mode),
// but a transaction's rows become visible when it commits, so id 10 can
// appear after id 11. Reading "id > last" would skip 10. The reader
// therefore never moves past an id that may still appear:
//
//  1. It reads rows with id > last in id order (a plain autocommit SELECT,
//     i.e. a fresh read view) and returns them while they are contiguous
//     (id = last+1), or the missing ids before them are known to be empty
//     (id-1 <= safe).
//  2. At the first gap g (a row with a higher id is visible) it records the
//     highest visible id H and the set S of InnoDB transactions running now
//     (information_schema.innodb_trx), then waits. A gap is either a row of
//     a transaction still running, a rolled-back row, or an id InnoDB
//     skipped.
//  3. Once no transaction of S is running, safe = H: every id <= H that
//     will ever commit is visible to any read started from now on. Reading
//     goes on at step 1.
//
// Why 3 holds: an id g <= H was allocated before H (ids grow with time),
// and H's transaction committed before the read of step 2 saw it, so the
// transaction T that took g started before that read. S is taken after the
// read, so T is in S unless it had already ended. Either way T has ended
// when S is empty; a read that starts after that sees g if T committed it,
// and g will never appear if T rolled back (or the id was never used). So
// no id is ever skipped, and the wait for a gap is bounded by the
// transactions that were running when the gap was seen (later
// transactions do not extend it).
//
// innodb_trx is a cache the server refreshes at most every 0.1 s, so a list
// could predate the read. To prove a list is fresh, the reader takes it
// inside a transaction of its own started (START TRANSACTION WITH
// CONSISTENT SNAPSHOT) after the read, and uses the list only if that
// transaction is in it; otherwise it asks again. Transactions that wrote
// nothing (trx_id 0 in MariaDB) are left out: the one that took g had
// written g. Reading innodb_trx needs the PROCESS privilege.
//
// Per-row order follows: two transactions modifying the same row are
// serialised by the row lock, so the second one's changelog row, written
// after the first one committed, has the higher id, and is returned after
// the first one's, which step 1 never passes. Changes of one transaction
// keep their statement order. Changes of different rows may come in id
// order rather than commit order, which the applier does not need.
//
// A position is the last id passed. A reader started without one reads the
// whole changelog: the target must hold the source rows as of the install.
// When polls pass changelog rows of other tables only, Read hands out an
// OpProgress change so that a quiet stream's position keeps up.
//
// # Several streams, pruning and lost positions
//
// Several streams may read one changelog, each with its own tables: each
// registers as a consumer (sluice_consumer, see consumer.go) when its
// reader opens, Ack records the stream's acknowledged id there, and the
// prune deletes only the ids every registered consumer has acknowledged.
// Unregister removes a consumer that is gone. A reader opening at a
// position whose changes were pruned (sluice_pruned records the highest id
// ever pruned) or whose changelog was truncated fails with ErrPositionLost
// instead of reading on from what is left.
//
// # TRUNCATE
//
// TRUNCATE fires no trigger. It gives the table a new InnoDB table id
// (MariaDB 10.11: the id changes on TRUNCATE, TRUNCATE PARTITION and every
// rebuild, not on DML or an instant ALTER; CREATE_TIME survives a
// TRUNCATE), so the reader records each table's id when the stream
// registers and checks it every second: a changed id stops the stream with
// ErrTableRewritten naming the table, which must be re-synced on the
// target. A rebuild that changed nothing (OPTIMIZE TABLE) stops it too:
// the reader cannot tell the two apart.
//
// Limits: schema changes are not captured (restart sluice after one so it
// describes the tables again); a row image longer than max_allowed_packet
// makes JSON_OBJECT return NULL and the reader fail on that row; the
// changelog's auto-increment counter must survive restarts (MySQL 8.0+,
// MariaDB 10.2.4+), else a pruned-empty changelog would reuse ids; rows
// deleted from the changelog by hand (not TRUNCATE) are not noticed;
// tested on MariaDB 10.11 only.
package mytrigger

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
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

type logRow struct {
	id      uint64
	tbl, op string
	k, d    sql.NullString
	at      sql.NullString
}

// page reads the changelog after the position and returns the changes up
// to the first gap that may still fill. again reports that reading at
// once may give more (a full page of skipped rows, or a gap just found
// empty).
func (r *Reader) page(ctx context.Context, max int) (changes []sluice.Change, again bool, err error) {
	rows, err := r.db.QueryContext(ctx, r.query, r.pos.last, max)
	if err != nil {
		return nil, false, r.readErr(err)
	}
	var page []logRow
	for rows.Next() {
		var lr logRow
		if err := rows.Scan(&lr.id, &lr.tbl, &lr.op, &lr.k, &lr.d, &lr.at); err != nil {
			rows.Close()
			return nil, false, r.readErr(err)
		}
		page = append(page, lr)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, r.readErr(err)
	}
	next := r.pos
	gap := false
	for _, lr := range page {
		if lr.id != next.last+1 && lr.id-1 > r.fence.safe {
			gap = true
			break
		}
		next.last = lr.id
		info, ok := r.infos[lr.tbl]
		if !ok {
			continue // a table this reader does not stream
		}
		c, err := r.change(info, lr)
		if err != nil {
			return nil, false, err
		}
		c.Pos = next.sluice()
		changes = append(changes, c)
	}
	r.pos = next
	if !gap {
		return changes, len(page) == max && len(changes) == 0, nil
	}
	// A gap: start waiting for the transactions running now, or see
	// whether those of the current wait have ended.
	running, err := r.running(ctx)
	if err != nil {
		return changes, false, err
	}
	f := &r.fence
	if !f.waiting {
		f.waiting = true
		f.horizon = page[len(page)-1].id
		f.trx = running
		r.log.Debug("changelog gap: waiting for running transactions", "after", r.pos.last, "horizon", f.horizon, "transactions", len(running))
	} else {
		f.trx = slices.DeleteFunc(f.trx, func(k trxKey) bool { return !slices.Contains(running, k) })
	}
	if len(f.trx) == 0 {
		f.waiting = false
		if f.horizon > f.safe {
			f.safe = f.horizon
		}
		return changes, true, nil
	}
	return changes, false, nil
}

// running lists the InnoDB transactions running now, other than the
// reader's own, from a list proven fresh (see the package documentation).
func (r *Reader) running(ctx context.Context) ([]trxKey, error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return nil, r.readErr(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	wait := trxCacheIdle
	for {
		r.nonce++
		list, fresh, err := trxList(ctx, conn, r.nonce)
		if err != nil {
			var me *mysql.MySQLError
			if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1044 || me.Number == 1142) {
				return nil, fmt.Errorf("MySQL source %s: user %s cannot read information_schema.innodb_trx, which the changelog reader needs to wait for open transactions: GRANT PROCESS ON *.* TO the user: %w", r.addr, r.user, err)
			}
			return nil, fmt.Errorf("list running transactions on %s: %w", r.addr, err)
		}
		if fresh {
			return list, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("list running transactions on %s: information_schema.innodb_trx stayed stale for 10 s (it refreshes only when nobody has read it for 0.1 s: is something polling it continuously?)", r.addr)
		}
		// The server refreshes the cache only when nobody has read it for
		// 0.1 s, and our own read just counted. Other readers of the same
		// server (another stream's, a monitor) may keep reading it: waits
		// that grow, at random, leave the cache a quiet 0.1 s sooner or
		// later, where readers polling in step would starve each other.
		t := time.NewTimer(wait + rand.N(wait))
		wait = min(2*wait, time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// trxCacheIdle is a little more than the 0.1 s for which InnoDB serves
// information_schema.innodb_trx from its cache after any read of it.
const trxCacheIdle = 120 * time.Millisecond

// trxList reads innodb_trx inside a transaction of its own, and reports
// whether the list is fresh: it shows that transaction running this very
// statement (trx_query holds the statement's nonce), so the server filled
// the cache after the statement began, after every earlier changelog read.
func trxList(ctx context.Context, conn *sql.Conn, nonce uint64) (list []trxKey, fresh bool, err error) {
	if _, err := conn.ExecContext(ctx, `START TRANSACTION WITH CONSISTENT SNAPSHOT`); err != nil {
		return nil, false, err
	}
	defer conn.ExecContext(context.Background(), `COMMIT`) //nolint:errcheck
	mark := fmt.Sprintf("sluice fence %d.%d", time.Now().UnixNano(), nonce)
	rows, err := conn.QueryContext(ctx, `SELECT /* `+mark+` */ trx_id, COALESCE(trx_mysql_thread_id, 0),
		CAST(trx_started AS CHAR), COALESCE(trx_query, ''), CONNECTION_ID() FROM information_schema.innodb_trx`)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var k trxKey
		var idText, query string
		var self uint64
		if err := rows.Scan(&idText, &k.thread, &k.started, &query, &self); err != nil {
			return nil, false, err
		}
		if k.thread == self {
			fresh = fresh || strings.Contains(query, mark)
			continue
		}
		// MySQL lists read-only transactions under large made-up ids,
		// MariaDB under 0; the transaction that took a missing id has
		// written, so it has a real id either way.
		if k.id, err = strconv.ParseUint(idText, 10, 64); err != nil || k.id == 0 {
			continue
		}
		list = append(list, k)
	}
	return list, fresh, rows.Err()
}

func (r *Reader) readErr(err error) error {
	return fmt.Errorf("read changelog %s.%s on %s: %w", r.logDB, ChangelogTable, r.addr, err)
}

// change builds one Change from a changelog row.
func (r *Reader) change(info *tableInfo, lr logRow) (sluice.Change, error) {
	t := info.table
	c := sluice.Change{Table: t}
	switch lr.op {
	case "I":
		c.Op = sluice.OpInsert
	case "U":
		c.Op = sluice.OpUpdate
	case "D":
		c.Op = sluice.OpDelete
	default:
		return c, fmt.Errorf("changelog row %d of source table %s: unknown op %q", lr.id, t.Name, lr.op)
	}
	all := make([]int, len(t.Columns))
	for i := range all {
		all[i] = i
	}
	var err error
	if c.Op != sluice.OpDelete {
		if !lr.d.Valid {
			return c, fmt.Errorf("changelog row %d of source table %s: no row image (larger than max_allowed_packet when captured?)", lr.id, t.Name)
		}
		if c.Row, err = decodeImage(info, lr.d.String, all); err != nil {
			return c, fmt.Errorf("changelog row %d of source table %s: row image: %w", lr.id, t.Name, err)
		}
	}
	if c.Op != sluice.OpInsert {
		if !lr.k.Valid {
			return c, fmt.Errorf("changelog row %d of source table %s: no key", lr.id, t.Name)
		}
		if c.Key, err = decodeImage(info, lr.k.String, t.Key); err != nil {
			return c, fmt.Errorf("changelog row %d of source table %s: key: %w", lr.id, t.Name, err)
		}
		for i, v := range c.Key {
			if v.Null {
				return c, fmt.Errorf("changelog row %d of source table %s: key column %s is NULL (was the trigger installed for another primary key? run `sluice source install`)",
					lr.id, t.Name, t.Columns[t.Key[i]].Name)
			}
		}
	}
	if lr.at.Valid {
		if at, err := formatTimestamp(lr.at.String, 6); err == nil {
			if tm, err := time.Parse(time.DateTime+".000000", at); err == nil {
				c.Time = tm
			}
		}
	}
	return c, nil
}

// decodeImage reads a JSON_OBJECT image of the columns cols.
func decodeImage(info *tableInfo, s string, cols []int) (sluice.Row, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	row := make(sluice.Row, len(cols))
	for j, i := range cols {
		col := info.table.Columns[i]
		v, ok := m[col.Name]
		if !ok {
			return nil, fmt.Errorf("column %s not captured: the trigger is stale, run `sluice source install` and restart", col.Name)
		}
		val, err := info.captures[i].decode(v, info.scales[i])
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", col.Name, err)
		}
		row[j] = val
	}
	return row, nil
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
