package mytrigger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice/source/internal/mycopy"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// Engine is the tablecopy.Snapshot engine of the trigger source.
const Engine = "mysql"

// defaultLockWait bounds the wait for FLUSH TABLES WITH READ LOCK, which
// blocks the source's writes while it waits.
const defaultLockWait = 5 * time.Second

// CopySource takes the initial copy's snapshot of a trigger source: it
// installs the capture (with Config.Install), registers the stream's
// consumer so that nothing it may need is pruned, takes readers of one
// consistent snapshot, and sets the consumer to the changelog position
// from which Open streams what the snapshot lacks. It implements
// tablecopy.Source.
//
// The boundary. The changelog position is "every id at or below it is
// handled", and ids become visible out of order (a transaction commits an
// id lower than one already committed). The snapshot is taken under FLUSH
// TABLES WITH READ LOCK: no transaction commits and no write statement is
// in flight meanwhile, so every changelog id allocated before the lock is
// either in the snapshot (committed) or an uncommitted row that a READ
// UNCOMMITTED read sees; every id allocated later is above all of them.
// After the lock is released, the snapshot's ids are compared with those a
// READ UNCOMMITTED read sees up to the snapshot's highest id B: the first id
// the snapshot lacks is U. The position is B when there is none (exact),
// else U-1: the snapshot's ids between U and B are streamed again (logged),
// which the apply path's full-row upserts and deletes make harmless. Without
// the RELOAD privilege (or with NoGlobalLock) the readers' snapshots are
// taken without the lock: the same comparison per reader, the lowest
// position of all; a write statement that had allocated an id but not yet
// written its row when the snapshot was taken and the comparison ran could
// then be missed (a window of a statement's duration), which the lock
// excludes.
type CopySource struct {
	dsn string
	cfg Config
	// LockWait bounds the wait for FLUSH TABLES WITH READ LOCK (default
	// 5 s).
	LockWait time.Duration
	// NoGlobalLock skips FLUSH TABLES WITH READ LOCK.
	NoGlobalLock bool
}

var _ tablecopy.Source = (*CopySource)(nil)

// NewCopySource returns the copy source of the stream Open(dsn, cfg)
// reads; cfg.Install installs the capture as Open would.
func NewCopySource(dsn string, cfg Config) *CopySource {
	return &CopySource{dsn: dsn, cfg: cfg, LockWait: defaultLockWait}
}

// openPool opens a pool of the source like Open's: text values, UTC.
func openPool(dsn string, conns int) (*sql.DB, error) {
	mc, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if mc.DBName == "" {
		return nil, errors.New("mytrigger source: the connection string names no database: name the database that holds sluice_changelog")
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
		return nil, fmt.Errorf("mytrigger source: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(conns)
	return db, nil
}

// Snapshot takes a snapshot with workers readers and sets the stream's
// consumer to its position.
func (s *CopySource) Snapshot(ctx context.Context, workers int) (*tablecopy.Snapshot, error) {
	if workers <= 0 {
		workers = 1
	}
	cfg := s.cfg
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	log := cfg.Logger.With("source", Kind, "stream", cfg.Stream)
	ctl, err := openPool(s.dsn, 3)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	if cfg.Install {
		if err := Install(ctx, ctl, cfg.Tables); err != nil {
			return nil, err
		}
		cfg.Install = false
	}
	// The stream has streamed nothing yet (tablecopy.Source): its old
	// consumer record, and the table identities it holds, are dropped and
	// written anew by the registration below.
	if err := Unregister(ctx, ctl, cfg.Stream); err != nil {
		return nil, err
	}
	var logDB string
	if err := ctl.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&logDB); err != nil {
		return nil, fmt.Errorf("mytrigger copy snapshot: %w", err)
	}
	// Register at the lowest position the changelog still serves: from
	// then on nothing after it is pruned, and the comparison below may
	// look at every id after it. A prune between the read and the
	// registration makes the registration refuse it: read again.
	var lo uint64
	var r *Reader
	for attempt := 1; ; attempt++ {
		var pruned sql.Null[uint64]
		err := ctl.QueryRowContext(ctx, "SELECT max_id FROM "+ident(logDB, PrunedTable)+" WHERE one = 1").Scan(&pruned)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("mytrigger copy snapshot: read %s.%s: %w", logDB, PrunedTable, err)
		}
		lo = pruned.V
		r, err = Open(ctx, s.dsn, cfg, position{last: lo}.sluice())
		if err == nil {
			break
		}
		if !errors.Is(err, ErrPositionLost) || attempt == 3 {
			return nil, err
		}
	}
	tables := r.Tables()
	r.Close()

	snap := &tablecopy.Snapshot{Tables: tables, Engine: Engine}
	var pos uint64
	if s.NoGlobalLock {
		pos, err = s.snapshotNoLock(ctx, ctl, logDB, lo, snap, workers, log)
	} else {
		pos, err = s.snapshotLocked(ctx, ctl, logDB, lo, snap, workers, log)
		if errors.Is(err, mycopy.ErrNoReload) {
			log.Info("copy snapshot: no RELOAD privilege for FLUSH TABLES WITH READ LOCK; taking the snapshot without it")
			pos, err = s.snapshotNoLock(ctx, ctl, logDB, lo, snap, workers, log)
		}
	}
	if err == nil {
		_, err = ctl.ExecContext(ctx, "UPDATE "+ident(logDB, ConsumerTable)+" SET acked = ?, acked_at = CURRENT_TIMESTAMP(6) WHERE stream = ?", pos, cfg.Stream)
		if err != nil {
			err = fmt.Errorf("mytrigger copy snapshot: set stream %s's consumer to changelog id %d: %w", cfg.Stream, pos, err)
		}
	}
	if err != nil {
		snap.Close()
		// Registered at lo, the consumer would keep the changelog from
		// being pruned until the next snapshot.
		if uerr := Unregister(context.WithoutCancel(ctx), ctl, cfg.Stream); uerr != nil {
			log.Warn("copy snapshot failed, and the stream's consumer, registered for it, could not be removed: it keeps changelog rows from being pruned until the copy runs again", "err", uerr)
		}
		return nil, err
	}
	snap.Position = position{last: pos}.sluice()
	log.Info("copy snapshot taken", "position", snap.Position.Token, "readers", len(snap.Readers), "tables", len(tables))
	return snap, nil
}

func (s *CopySource) beginReaders(ctx context.Context, pools []*sql.DB, snap *tablecopy.Snapshot, log *slog.Logger) error {
	for len(pools) > 0 {
		rd, err := mycopy.Begin(ctx, pools[0], mycopy.Config{Style: mycopy.Trigger, Logger: log})
		pools = pools[1:]
		if err != nil {
			for _, p := range pools {
				p.Close()
			}
			return err
		}
		snap.Readers = append(snap.Readers, rd)
	}
	return nil
}

// openPools opens a connected pool of one connection per reader.
func (s *CopySource) openPools(ctx context.Context, n int) ([]*sql.DB, error) {
	pools, err := mycopy.OpenPools(ctx, n, func() (*sql.DB, error) { return openPool(s.dsn, 1) })
	if err != nil {
		return nil, fmt.Errorf("mytrigger copy snapshot: %w", err)
	}
	return pools, nil
}

func (s *CopySource) snapshotLocked(ctx context.Context, ctl *sql.DB, logDB string, lo uint64, snap *tablecopy.Snapshot, workers int, log *slog.Logger) (uint64, error) {
	lockWait := s.LockWait
	if lockWait <= 0 {
		lockWait = defaultLockWait
	}
	pools, err := s.openPools(ctx, workers)
	if err != nil {
		return 0, err
	}
	conn, err := ctl.Conn(ctx)
	if err != nil {
		for _, p := range pools {
			p.Close()
		}
		return 0, fmt.Errorf("mytrigger copy snapshot: connect: %w", err)
	}
	defer conn.Close()
	unlock, err := mycopy.GlobalReadLock(ctx, conn, lockWait, log)
	if err != nil {
		for _, p := range pools {
			p.Close()
		}
		return 0, fmt.Errorf("mytrigger copy snapshot: %w", err) // ErrNoReload is handled by the caller
	}
	err = s.beginReaders(ctx, pools, snap, log)
	if uerr := unlock(); uerr != nil && err == nil {
		err = fmt.Errorf("mytrigger copy snapshot: %w", uerr)
	}
	if err != nil {
		return 0, err
	}
	return s.boundary(ctx, ctl, logDB, lo, snap, snap.Readers[0].(*mycopy.Reader), log)
}

func (s *CopySource) snapshotNoLock(ctx context.Context, ctl *sql.DB, logDB string, lo uint64, snap *tablecopy.Snapshot, workers int, log *slog.Logger) (uint64, error) {
	pools, err := s.openPools(ctx, workers)
	if err != nil {
		return 0, err
	}
	if err := s.beginReaders(ctx, pools, snap, log); err != nil {
		return 0, err
	}
	var pos uint64
	var all []uint64
	for i, rd := range snap.Readers {
		p, err := s.boundary(ctx, ctl, logDB, lo, snap, rd.(*mycopy.Reader), log)
		if err != nil {
			return 0, err
		}
		if i == 0 || p < pos {
			pos = p
		}
		all = append(all, p)
	}
	for _, p := range all {
		if p != pos {
			log.Warn("copy snapshot: the readers' snapshots (taken without FLUSH TABLES WITH READ LOCK) hold different changelog ids; "+
				"the stream starts at the lowest position and streams again what some of them hold, which the target applies idempotently",
				"positions", fmt.Sprint(all))
			break
		}
	}
	return pos, nil
}

// boundary is the position of rd's snapshot: its highest changelog id B,
// or one below the first id up to B the snapshot lacks (see CopySource).
func (s *CopySource) boundary(ctx context.Context, ctl *sql.DB, logDB string, lo uint64, snap *tablecopy.Snapshot, rd *mycopy.Reader, log *slog.Logger) (uint64, error) {
	table := ident(logDB, ChangelogTable)
	// Only the streamed tables' rows matter: the stream skips the others'
	// ids whatever their order.
	names := make([]string, len(snap.Tables))
	for i, t := range snap.Tables {
		names[i] = quoteLiteral(logName(t.Name))
	}
	ours := " AND tbl IN (" + strings.Join(names, ", ") + ")"
	var b sql.Null[uint64]
	if err := rd.Conn().QueryRowContext(ctx, "SELECT MAX(id) FROM "+table+" WHERE id > ?", lo).Scan(&b); err != nil {
		return 0, fmt.Errorf("mytrigger copy snapshot: the snapshot's highest changelog id: %w", err)
	}
	if !b.Valid {
		b.V = lo
	}
	ru, err := ctl.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("mytrigger copy snapshot: connect: %w", err)
	}
	defer ru.Close()
	if _, err := ru.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED"); err != nil {
		return 0, fmt.Errorf("mytrigger copy snapshot: %w", err)
	}
	all, err := ru.QueryContext(ctx, "SELECT id FROM "+table+" WHERE id > ? AND id <= ?"+ours+" ORDER BY id", lo, b.V)
	if err != nil {
		return 0, fmt.Errorf("mytrigger copy snapshot: read the changelog's ids, uncommitted too: %w", err)
	}
	defer all.Close()
	seen, err := rd.Conn().QueryContext(ctx, "SELECT id FROM "+table+" WHERE id > ? AND id <= ?"+ours+" ORDER BY id", lo, b.V)
	if err != nil {
		return 0, fmt.Errorf("mytrigger copy snapshot: read the snapshot's changelog ids: %w", err)
	}
	defer seen.Close()
	var have uint64
	haveOK := false
	for all.Next() {
		var id uint64
		if err := all.Scan(&id); err != nil {
			return 0, fmt.Errorf("mytrigger copy snapshot: %w", err)
		}
		for (!haveOK || have < id) && seen.Next() {
			if err := seen.Scan(&have); err != nil {
				return 0, fmt.Errorf("mytrigger copy snapshot: %w", err)
			}
			haveOK = true
		}
		if !haveOK || have != id {
			log.Info("copy snapshot: a transaction that was running at the snapshot holds a lower changelog id than the snapshot's highest; "+
				"the stream starts below it and streams again the snapshot's changes after it (applied idempotently)",
				"uncommitted_id", id, "snapshot_max_id", b.V, "replayed_ids", b.V-id+1)
			return id - 1, nil
		}
	}
	if err := all.Err(); err != nil {
		return 0, fmt.Errorf("mytrigger copy snapshot: %w", err)
	}
	return b.V, nil
}
