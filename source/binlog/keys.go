package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/mycopy"
)

// KeyReader reads a MySQL or MariaDB source's rows by primary key inside
// one consistent snapshot, each value in the text this package's reader
// gives it (the initial copy's rendering: FLOAT exact, not the text
// protocol's 6 digits).
type KeyReader interface {
	// ReadKeys emits the rows of t (a schema-qualified source table)
	// whose keys are keys; a key without a row is left out.
	ReadKeys(ctx context.Context, t *sluice.Table, keys []sluice.Row, emit func([]sluice.Row) error) error
	Close() error
}

// OpenKeyReader connects to the source at dsn and begins the snapshot
// (REPEATABLE READ, WITH CONSISTENT SNAPSHOT) before it returns: it holds
// every change committed before the call. sluice verify --repair reads
// the source's current rows of the keys it found differing with it.
//
// With settle > 0 the snapshot also holds every transaction the binlog
// held at the call, which a stream reading the binlog may have applied.
// The two differ while a transaction is in the binlog but not yet
// committed in InnoDB: for a moment in every group commit, and for as
// long as semi-synchronous replication waits for a replica's
// acknowledgement after the binlog sync (rpl_semi_sync_master_wait_point
// AFTER_SYNC, MySQL's default), during which binlog readers receive the
// transaction and other sessions do not see it. A repair reading such a
// snapshot would write the older row over the newer one the stream
// applied, and nothing would mend it. On MariaDB, which records a
// consistent snapshot's binlog position (binlog_snapshot_file/_position),
// the snapshot is taken again until that position reaches the binlog's
// end as it was at the call, for up to settle. MySQL records none, so
// there a repair is refused while semi-synchronous replication waits
// after the sync.
func OpenKeyReader(ctx context.Context, dsn string, settle time.Duration) (KeyReader, error) {
	db, ci, err := openDB(dsn)
	if err != nil {
		return nil, err
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("binlog: connect to the source %s:%d as %s: %w", ci.host, ci.port, ci.user, err)
	}
	cfg := mycopy.Config{Style: mycopy.Binlog, MariaDB: strings.Contains(strings.ToLower(version), "mariadb")}
	if settle <= 0 {
		return mycopy.Begin(ctx, db, cfg)
	}
	if !cfg.MariaDB {
		if err := refuseAfterSyncWaits(ctx, db, ci); err != nil {
			db.Close()
			return nil, err
		}
		return mycopy.Begin(ctx, db, cfg)
	}
	end, err := binlogEnd(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	deadline := time.Now().Add(settle)
	for {
		r, err := mycopy.Begin(ctx, db, cfg)
		if err != nil {
			return nil, err
		}
		file, off, err := snapshotPos(ctx, r.Conn())
		if err != nil {
			r.Close()
			return nil, err
		}
		at := &position{mode: modeFile, file: file, off: off}
		c, err := cmpFilePos(at, end)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("binlog: repair snapshot: %w", err)
		}
		if c >= 0 {
			return r, nil
		}
		waits := semiSyncWaits(ctx, db)
		r.Close() // and db
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("binlog: the source %s:%d holds transactions in its binlog (up to %s:%d) that its readers do not see yet (a snapshot holds up to %s:%d) after %s%s: "+
				"a stream reading the binlog may have applied them, and a repair would write the older rows over them, so it writes nothing. "+
				"Semi-synchronous replication waiting for a replica's acknowledgement after the binlog sync (AFTER_SYNC) holds them: repair once the replicas acknowledge, or raise --catch-up",
				ci.host, ci.port, end.file, end.off, file, off, settle, waits)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if db, _, err = openDB(dsn); err != nil {
			return nil, err
		}
	}
}

// semiSyncWaits describes the sessions waiting for a semi-synchronous
// acknowledgement, for an error; empty when the server does not say.
func semiSyncWaits(ctx context.Context, db *sql.DB) string {
	var name, n string
	err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Rpl_semi_sync_master_wait_sessions', 'Rpl_semi_sync_source_wait_sessions')").Scan(&name, &n)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (%s = %s)", name, n)
}

// refuseAfterSyncWaits refuses a MySQL source whose semi-synchronous
// replication waits after the binlog sync: a snapshot there cannot be
// shown to hold what a binlog reader has received (see OpenKeyReader).
func refuseAfterSyncWaits(ctx context.Context, db *sql.DB, ci connInfo) error {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('rpl_semi_sync_master_enabled', 'rpl_semi_sync_source_enabled', 'rpl_semi_sync_master_wait_point', 'rpl_semi_sync_source_wait_point')")
	if err != nil {
		return fmt.Errorf("binlog: read the source's semi-synchronous replication settings: %w", err)
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return fmt.Errorf("binlog: read the source's semi-synchronous replication settings: %w", err)
		}
		k = strings.NewReplacer("_master_", "_", "_source_", "_").Replace(strings.ToLower(k))
		vars[k] = strings.ToUpper(v)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("binlog: read the source's semi-synchronous replication settings: %w", err)
	}
	if vars["rpl_semi_sync_enabled"] == "ON" && vars["rpl_semi_sync_wait_point"] != "AFTER_COMMIT" {
		return fmt.Errorf("binlog: the source %s:%d runs semi-synchronous replication waiting after the binlog sync (AFTER_SYNC): a transaction waiting for its acknowledgement is in the binlog, "+
			"where the stream may have applied it, but not visible to a snapshot, and MySQL does not say which binlog position a snapshot holds, so a repair could write older rows over newer ones; "+
			"repair refused: run it with rpl_semi_sync_source_enabled (rpl_semi_sync_master_enabled) OFF for its duration, or once the rows it repairs no longer change", ci.host, ci.port)
	}
	return nil
}
