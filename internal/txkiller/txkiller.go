// Package txkiller does what Vitess's transaction killer does to a target
// database: every interval it kills the transactions that have been open
// longer than a limit. Tests scale production's 20 s limit down to exercise
// an applier's handling of killed transactions.
package txkiller

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql" // registers the "mysql" driver
	"github.com/jackc/pgx/v5"
)

// Killer kills old transactions until stopped.
type Killer struct {
	killed atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

// sweeper kills the transactions older than maxAge once, returning how many.
type sweeper func(ctx context.Context, maxAge time.Duration) (int64, error)

func start(ctx context.Context, name string, maxAge, interval time.Duration, sweep sweeper, closeFn func()) *Killer {
	ctx, cancel := context.WithCancel(ctx)
	k := &Killer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(k.done)
		defer closeFn()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			n, err := sweep(ctx, maxAge)
			k.killed.Add(n)
			if err != nil && ctx.Err() == nil {
				// The next tick retries; a killer that gave up on a
				// transient error would silently stop enforcing the limit.
				slog.Warn("txkiller: sweep failed", "target", name, "err", err)
			}
			if n > 0 {
				slog.Debug("txkiller: killed transactions", "target", name, "count", n, "max_age", maxAge)
			}
		}
	}()
	return k
}

func validate(maxAge, interval time.Duration) error {
	if maxAge < 0 || interval <= 0 {
		return fmt.Errorf("txkiller: need maxAge >= 0 and interval > 0, got %v and %v", maxAge, interval)
	}
	return nil
}

// StartPostgres starts killing, every interval, the client transactions in
// url's database that started more than maxAge ago. It stops when ctx ends or
// Stop is called.
func StartPostgres(ctx context.Context, url string, maxAge, interval time.Duration) (*Killer, error) {
	if err := validate(maxAge, interval); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("txkiller: connect to postgres: %w", err)
	}
	cfg := conn.Config()
	var seen killedSet
	// The connection is reopened after a failure (the server restarted, say)
	// so the killer outlives it.
	sweep := func(ctx context.Context, maxAge time.Duration) (int64, error) {
		if conn == nil || conn.IsClosed() {
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return 0, fmt.Errorf("reconnect to postgres: %w", err)
			}
			conn = c
		}
		if len(seen) > 0 {
			// Forget terminated backends that are gone, so a reused pid is
			// killable again.
			rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE pid = ANY($1::int4[])", seen.ids())
			if err == nil {
				var live []int32
				if live, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err == nil {
					ids := make([]int64, len(live))
					for i, pid := range live {
						ids[i] = int64(pid)
					}
					seen.retain(ids)
				}
			}
			if err != nil {
				conn.Close(context.WithoutCancel(ctx))
				conn = nil
				return 0, fmt.Errorf("list terminated postgres backends: %w", err)
			}
		}
		// The CTE is materialised so that pg_terminate_backend only ever sees
		// the filtered rows: in a flat WHERE the planner may evaluate it
		// first, and the killer would terminate itself.
		rows, err := conn.Query(ctx, `
			WITH old AS MATERIALIZED (
				SELECT pid
				FROM pg_stat_activity
				WHERE xact_start < clock_timestamp() - make_interval(secs => $1)
				  AND pid <> pg_backend_pid()
				  AND backend_type = 'client backend'
				  AND datname = current_database()
				  AND pid <> ALL($2::int4[])
			)
			SELECT pid FROM old WHERE pg_terminate_backend(pid)`,
			maxAge.Seconds(), seen.ids())
		if err != nil {
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			return 0, fmt.Errorf("terminate old postgres transactions: %w", err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			return 0, fmt.Errorf("terminate old postgres transactions: %w", err)
		}
		for _, pid := range pids {
			seen.add(int64(pid))
		}
		return int64(len(pids)), nil
	}
	closeFn := func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}
	return start(ctx, "postgres", maxAge, interval, sweep, closeFn), nil
}

// StartMariaDB starts killing, every interval, the InnoDB transactions that
// started more than maxAge ago. When dsn names a database, only sessions
// whose current database is that one are touched, so parallel tests sharing
// a server do not kill each other's transactions. InnoDB records
// trx_started in whole seconds, so maxAge is rounded up to whole seconds and a
// transaction is killed at an age between that and 2 s more (plus the
// interval), never younger. Intervals below minMariaDBInterval are raised to
// it. It stops when ctx ends or Stop is called.
func StartMariaDB(ctx context.Context, dsn string, maxAge, interval time.Duration) (*Killer, error) {
	if err := validate(maxAge, interval); err != nil {
		return nil, err
	}
	interval = max(interval, minMariaDBInterval)
	if _, err := mysql.ParseDSN(dsn); err != nil {
		return nil, fmt.Errorf("txkiller: parse mariadb dsn: %w", err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("txkiller: open mariadb: %w", err)
	}
	// One connection, so the killer never sees (or kills) a second session
	// of its own.
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("txkiller: connect to mariadb: %w", err)
	}
	var seen killedSet
	sweep := func(ctx context.Context, maxAge time.Duration) (int64, error) {
		rows, err := db.QueryContext(ctx, `
			SELECT t.trx_mysql_thread_id
			FROM information_schema.innodb_trx t
			JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
			WHERE t.trx_started < NOW() - INTERVAL ? SECOND
			  AND t.trx_mysql_thread_id <> CONNECTION_ID()
			  AND (DATABASE() IS NULL OR p.db = DATABASE())`,
			wholeSeconds(maxAge))
		if err != nil {
			return 0, fmt.Errorf("list old mariadb transactions: %w", err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, fmt.Errorf("scan mariadb thread id: %w", err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("list old mariadb transactions: %w", err)
		}
		// A killed thread stays listed until it has rolled back; it must not
		// be killed, and counted, again.
		seen.retain(ids)
		var n int64
		for _, id := range ids {
			if seen.has(id) {
				continue
			}
			// The transaction may have ended since the listing; killing a
			// thread that is gone fails harmlessly.
			if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil {
				if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && me.Number == 1094 { // ER_NO_SUCH_THREAD
					continue
				}
				return n, fmt.Errorf("kill mariadb thread %d: %w", id, err)
			}
			seen.add(id)
			n++
		}
		return n, nil
	}
	return start(ctx, "mariadb", maxAge, interval, sweep, func() { db.Close() }), nil
}

// minMariaDBInterval is the shortest MariaDB sweep interval. InnoDB serves
// information_schema.innodb_trx from a cache that it refreshes only when
// nobody has read it for 100 ms; sweeping more often would freeze the cache
// and the killer would act on transactions that ended long ago.
const minMariaDBInterval = 250 * time.Millisecond

// killedSet remembers the sessions already killed, because a killed session
// stays visible (and its transaction open) until it has rolled back. Only the
// sweeping goroutine uses it.
type killedSet map[int64]struct{}

func (s *killedSet) add(id int64) {
	if *s == nil {
		*s = make(killedSet)
	}
	(*s)[id] = struct{}{}
}

func (s killedSet) has(id int64) bool {
	_, ok := s[id]
	return ok
}

// retain forgets the sessions no longer listed, so a reused id is killable.
func (s killedSet) retain(listed []int64) {
	keep := make(map[int64]bool, len(listed))
	for _, id := range listed {
		keep[id] = true
	}
	for id := range s {
		if !keep[id] {
			delete(s, id)
		}
	}
}

func (s killedSet) ids() []int32 {
	out := make([]int32, 0, len(s))
	for id := range s {
		out = append(out, int32(id))
	}
	return out
}

// wholeSeconds rounds d up to whole seconds. Compared in whole seconds with
// the truncated trx_started and NOW(), "started < now - n s" then implies an
// age above n s whatever the fractions were.
func wholeSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// Killed is the number of transactions killed so far.
func (k *Killer) Killed() int64 { return k.killed.Load() }

// Stop stops the killer and waits for it to release its connection.
func (k *Killer) Stop() {
	k.cancel()
	<-k.done
}
