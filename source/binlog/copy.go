package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/mycopy"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// Engine is the tablecopy.Snapshot engine of MySQL and MariaDB sources:
// their digests (keyrange.MyDigest) compare with a MySQL target's.
const Engine = "mysql"

// defaultLockWait bounds how long FLUSH TABLES WITH READ LOCK waits for
// running statements. While it waits, it already blocks every new write on
// the source, so the wait must be short.
const defaultLockWait = 5 * time.Second

// CopySource takes the initial copy's snapshot of a binlog source: readers
// of one consistent InnoDB snapshot and the binlog position exactly at it,
// from which Open streams every change the snapshot does not hold. It
// implements tablecopy.Source.
//
// The boundary: one connection holds FLUSH TABLES WITH READ LOCK (which
// blocks commits) while each reader starts its transaction WITH
// CONSISTENT SNAPSHOT and the binlog position is read, then lets go; the
// lock is held for a few milliseconds. Without the RELOAD privilege that
// needs (or with NoGlobalLock), MariaDB's own consistent snapshot is
// used: START TRANSACTION WITH CONSISTENT SNAPSHOT there records the binlog
// position of the snapshot (binlog_snapshot_file/_position), and the
// readers are started again until all of them have the same one; if they
// never do, the earliest is the start and the overlap (changes some
// readers already see) is streamed again, which the apply path's
// full-row upserts and deletes make harmless.
type CopySource struct {
	dsn string
	cfg Config
	// LockWait bounds the wait for FLUSH TABLES WITH READ LOCK (default
	// 5 s).
	LockWait time.Duration
	// NoGlobalLock skips FLUSH TABLES WITH READ LOCK (MariaDB only).
	NoGlobalLock bool
}

// tablesChanged describes r's tables again and reports whether they differ
// from r.tables.
func (s *CopySource) tablesChanged(ctx context.Context, r *Reader) (bool, error) {
	again := &Reader{cfg: r.cfg, log: r.log, db: r.db, conn: r.conn, repl: map[string]*sluice.Table{}, colls: r.colls, flavor: r.flavor}
	if err := again.describe(ctx); err != nil {
		return false, err
	}
	if len(again.tables) != len(r.tables) {
		return true, nil
	}
	for i, t := range r.tables {
		u := again.tables[i]
		if len(t.Columns) != len(u.Columns) || len(t.Key) != len(u.Key) {
			return true, nil
		}
		for j := range t.Columns {
			if t.Columns[j] != u.Columns[j] {
				return true, nil
			}
		}
		for j := range t.Key {
			if t.Key[j] != u.Key[j] {
				return true, nil
			}
		}
	}
	return false, nil
}

var _ tablecopy.Source = (*CopySource)(nil)

// NewCopySource returns the copy source of the stream that Open(dsn, cfg)
// reads.
func NewCopySource(dsn string, cfg Config) *CopySource {
	return &CopySource{dsn: dsn, cfg: cfg, LockWait: defaultLockWait}
}

// Snapshot checks the source as Open does, describes the tables as the
// Reader's Tables() does, and takes a snapshot with workers readers.
func (s *CopySource) Snapshot(ctx context.Context, workers int) (*tablecopy.Snapshot, error) {
	for attempt := 1; ; attempt++ {
		snap, changed, err := s.take(ctx, workers)
		if err != nil || !changed {
			return snap, err
		}
		if attempt == 3 {
			return nil, errors.New("binlog: copy snapshot: the tables' definitions kept changing while the snapshot was taken; run the copy again once the schema change is done")
		}
		log := s.cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Info("binlog: copy snapshot: a table's definition changed while the snapshot was taken; taking it again", "attempt", attempt)
	}
}

// take takes one snapshot; changed reports (with no snapshot) that a
// table's definition changed meanwhile.
func (s *CopySource) take(ctx context.Context, workers int) (*tablecopy.Snapshot, bool, error) {
	if workers <= 0 {
		workers = 1
	}
	cfg := s.cfg
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.Tables) == 0 {
		return nil, false, errors.New("binlog: no tables to copy")
	}
	db, ci, err := openDB(s.dsn)
	if err != nil {
		return nil, false, err
	}
	defer db.Close()
	r := &Reader{cfg: cfg, log: cfg.Logger.With("source", "binlog"), db: db, conn: ci, repl: map[string]*sluice.Table{}}
	info, err := r.preflight(ctx)
	if err != nil {
		return nil, false, err
	}
	if _, err := r.qualifyTables(); err != nil {
		return nil, false, err
	}
	if err := r.loadCollations(ctx); err != nil {
		return nil, false, err
	}
	if err := r.describe(ctx); err != nil {
		return nil, false, err
	}
	snap := &tablecopy.Snapshot{Tables: r.tables, Engine: Engine}
	var pos *position
	if s.NoGlobalLock {
		pos, err = s.snapshotNoLock(ctx, r, info, snap, workers)
	} else {
		pos, err = s.snapshotLocked(ctx, r, info, snap, workers)
		if errors.Is(err, mycopy.ErrNoReload) && info.mariadb {
			r.log.Info("copy snapshot: no RELOAD privilege for FLUSH TABLES WITH READ LOCK; using MariaDB's consistent snapshot position instead", "user", ci.user)
			pos, err = s.snapshotNoLock(ctx, r, info, snap, workers)
		}
	}
	if err != nil {
		snap.Close()
		return nil, false, err
	}
	// A DDL between the description above and the snapshot would make
	// the tables' description not the snapshot's: describe them again
	// and, if they changed, take the snapshot again.
	if changed, err := s.tablesChanged(ctx, r); err != nil || changed {
		snap.Close()
		return nil, changed, err
	}
	snap.Position = sluice.Position{Kind: Kind, Token: pos.token()}
	r.log.Info("copy snapshot taken", "position", snap.Position.Token, "readers", len(snap.Readers), "tables", len(snap.Tables))
	return snap, false, nil
}

// readerConfig is how the copy renders values: as this package's reader.
func readerConfig(r *Reader, info serverInfo) mycopy.Config {
	return mycopy.Config{Style: mycopy.Binlog, MariaDB: info.mariadb, Logger: r.log}
}

// openPools opens a pool of one connection for each reader, connected
// already so that starting the readers under the lock takes no handshake.
func (s *CopySource) openPools(ctx context.Context, n int) ([]*sql.DB, error) {
	pools, err := mycopy.OpenPools(ctx, n, func() (*sql.DB, error) {
		db, _, err := openDB(s.dsn)
		return db, err
	})
	if err != nil {
		return nil, fmt.Errorf("binlog: copy snapshot: %w", err)
	}
	return pools, nil
}

// beginReader starts one snapshot reader on a pool of its own.
func (s *CopySource) beginReader(ctx context.Context, r *Reader, info serverInfo) (*mycopy.Reader, error) {
	pools, err := s.openPools(ctx, 1)
	if err != nil {
		return nil, err
	}
	return mycopy.Begin(ctx, pools[0], readerConfig(r, info))
}

func (s *CopySource) snapshotLocked(ctx context.Context, r *Reader, info serverInfo, snap *tablecopy.Snapshot, workers int) (*position, error) {
	lockWait := s.LockWait
	if lockWait <= 0 {
		lockWait = defaultLockWait
	}
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("binlog: copy snapshot: connect: %w", err)
	}
	defer conn.Close()
	pools, err := s.openPools(ctx, workers)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range pools[len(snap.Readers):] { // not handed to a reader
			p.Close()
		}
	}()
	unlock, err := mycopy.GlobalReadLock(ctx, conn, lockWait, r.log)
	if err != nil {
		return nil, fmt.Errorf("binlog: copy snapshot: %w", err)
	}
	defer unlock()
	// No transaction commits while the lock is held: every snapshot
	// started now holds the same commits, and the binlog ends after
	// exactly those.
	for _, p := range pools {
		rd, err := mycopy.Begin(ctx, p, readerConfig(r, info))
		if err != nil {
			return nil, err
		}
		snap.Readers = append(snap.Readers, rd)
	}
	pos, err := r.startPosition(ctx, info, sluice.Position{})
	if err != nil {
		return nil, err
	}
	if err := unlock(); err != nil {
		return nil, fmt.Errorf("binlog: copy snapshot: %w", err)
	}
	return pos, nil
}

// snapshotAttempts bounds how often the no-lock boundary starts the
// readers again to get them all at one position.
const snapshotAttempts = 5

func (s *CopySource) snapshotNoLock(ctx context.Context, r *Reader, info serverInfo, snap *tablecopy.Snapshot, workers int) (*position, error) {
	if !info.mariadb {
		return nil, fmt.Errorf("binlog: copy snapshot without FLUSH TABLES WITH READ LOCK needs MariaDB (which records a consistent snapshot's binlog position); "+
			"on %s, GRANT RELOAD ON *.* TO %s", info.version, r.conn.user)
	}
	for attempt := 1; ; attempt++ {
		for _, rd := range snap.Readers {
			rd.Close()
		}
		snap.Readers = snap.Readers[:0]
		var files []string
		var offs []uint32
		for range workers {
			rd, err := s.beginReader(ctx, r, info)
			if err != nil {
				return nil, err
			}
			snap.Readers = append(snap.Readers, rd)
			f, off, err := snapshotPos(ctx, rd.Conn())
			if err != nil {
				return nil, err
			}
			files, offs = append(files, f), append(offs, off)
		}
		first := 0
		same := true
		for i := 1; i < len(files); i++ {
			c, err := cmpFilePos(&position{mode: modeFile, file: files[i], off: offs[i]}, &position{mode: modeFile, file: files[first], off: offs[first]})
			if err != nil {
				return nil, fmt.Errorf("binlog: copy snapshot: %w", err)
			}
			if c != 0 {
				same = false
			}
			if c < 0 {
				first = i
			}
		}
		if !same && attempt < snapshotAttempts {
			continue
		}
		if !same {
			r.log.Warn("copy snapshot: the readers' snapshots are at different binlog positions (the source commits fast); "+
				"the stream starts at the earliest, and replays the changes between them, which the target applies idempotently",
				"earliest", files[first]+":"+strconv.FormatUint(uint64(offs[first]), 10), "readers", workers)
		}
		p := &position{mode: modeFile, file: files[first], off: offs[first]}
		if info.gtidOn && !r.cfg.FilePositions {
			var g sql.NullString
			if err := r.db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", p.file, p.off).Scan(&g); err != nil || !g.Valid {
				return nil, fmt.Errorf("binlog: copy snapshot: BINLOG_GTID_POS(%s, %d) (the GTID position of the snapshot): %v", p.file, p.off, err)
			}
			gs, err := mysql.ParseMariadbGTIDSet(g.String)
			if err != nil {
				return nil, fmt.Errorf("binlog: copy snapshot: GTID position %q: %w", g.String, err)
			}
			p = &position{mode: modeMariaDB, gset: gs}
		}
		return p, nil
	}
}

// snapshotPos reads the binlog position of the transaction's consistent
// snapshot on conn (MariaDB).
func snapshotPos(ctx context.Context, conn *sql.Conn) (string, uint32, error) {
	rows, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return "", 0, fmt.Errorf("binlog: copy snapshot: SHOW STATUS LIKE 'binlog_snapshot_%%': %w", err)
	}
	defer rows.Close()
	var file, off string
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return "", 0, fmt.Errorf("binlog: copy snapshot: binlog_snapshot status: %w", err)
		}
		switch strings.ToLower(k) {
		case "binlog_snapshot_file":
			file = v
		case "binlog_snapshot_position":
			off = v
		}
	}
	if err := rows.Err(); err != nil {
		return "", 0, fmt.Errorf("binlog: copy snapshot: binlog_snapshot status: %w", err)
	}
	n, err := strconv.ParseUint(off, 10, 32)
	if file == "" || err != nil {
		return "", 0, fmt.Errorf("binlog: copy snapshot: the server gives no binlog_snapshot_file/_position (%q, %q): is the binary log on?", file, off)
	}
	return file, uint32(n), nil
}
