package mycopy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrNoReload is returned (wrapped) by GlobalReadLock when the user may not
// take the lock: it lacks the RELOAD privilege. Sources then take their
// snapshots without it.
var ErrNoReload = errors.New("no RELOAD privilege for FLUSH TABLES WITH READ LOCK")

// GlobalReadLock runs FLUSH TABLES WITH READ LOCK on conn, which blocks
// every commit on the server while it is held: snapshots started under it
// hold the same commits, and the log ends after exactly those. The lock
// waits for running statements at most wait (and, while it waits, already
// blocks new writes, so the wait must be short). unlock releases it and
// logs how long it was held; it may be called more than once.
func GlobalReadLock(ctx context.Context, conn *sql.Conn, wait time.Duration, log *slog.Logger) (unlock func() error, err error) {
	secs := max(1, int(wait.Round(time.Second)/time.Second))
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = "+strconv.Itoa(secs)); err != nil {
		return nil, fmt.Errorf("set lock_wait_timeout for FLUSH TABLES WITH READ LOCK: %w", err)
	}
	start := time.Now()
	if _, err := conn.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
		var me *mysql.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == 1205:
			return nil, fmt.Errorf("FLUSH TABLES WITH READ LOCK waited %s in vain: a long-running statement on the source (a write, a DDL, a LOCK TABLES) holds it off; "+
				"find it in SHOW PROCESSLIST, let it finish and run the copy again: %w", wait, err)
		case errors.As(err, &me) && me.Number == 1227:
			return nil, fmt.Errorf("%w (GRANT RELOAD ON *.* to the source user): %w", ErrNoReload, err)
		}
		return nil, fmt.Errorf("FLUSH TABLES WITH READ LOCK: %w", err)
	}
	unlocked := false
	return func() error {
		if unlocked {
			return nil
		}
		unlocked = true
		_, err := conn.ExecContext(context.WithoutCancel(ctx), "UNLOCK TABLES")
		log.Info("copy snapshot: global read lock released", "held", time.Since(start).Round(time.Microsecond))
		if err != nil {
			return fmt.Errorf("UNLOCK TABLES: %w", err)
		}
		return nil
	}, nil
}

// OpenPools opens n pools of one connection each with open, each pinged,
// one per snapshot reader (a Reader owns its pool).
func OpenPools(ctx context.Context, n int, open func() (*sql.DB, error)) ([]*sql.DB, error) {
	var pools []*sql.DB
	for range n {
		db, err := open()
		if err == nil {
			db.SetMaxOpenConns(1)
			err = db.PingContext(ctx)
			pools = append(pools, db)
		}
		if err != nil {
			for _, p := range pools {
				p.Close()
			}
			return nil, fmt.Errorf("connect the copy's readers: %w", err)
		}
	}
	return pools, nil
}
