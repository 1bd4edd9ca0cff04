package mysql

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice/apply"
)

// A stream's fence, as on PostgreSQL (see apply/postgres/fence.go): the
// stream's generation in sluice_fence, taken by each process that starts
// the stream (Fence), read with a shared lock first in every batch, which
// fails unless it is still this process's. MariaDB runs a multi-statement
// packet only once all of it has arrived, so a late packet of a killed
// process runs whole: its check fails once a newer generation was taken,
// or it committed before the newer process took it (the take waits for its
// lock) and read the checkpoints.

const fenceWait = 2 * time.Second

const fenceTable = "sluice_fence"

const fenceDDL = "CREATE TABLE IF NOT EXISTS `" + fenceTable + "` (`stream` VARCHAR(255) NOT NULL, `generation` BIGINT NOT NULL, PRIMARY KEY (`stream`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

func fenceBump(stream string) string {
	return "INSERT INTO `" + fenceTable + "` (`stream`, `generation`) VALUES (" + lit(stream) + ", 1) ON DUPLICATE KEY UPDATE `generation` = `generation` + 1"
}

func fenceRead(stream string) string {
	return "SELECT `generation` FROM `" + fenceTable + "` WHERE `stream` = " + lit(stream)
}

// fenceCheck reads the stream's row with a shared lock and fails with
// "Subquery returns more than 1 row" (1242), which nothing else in a batch
// can raise, unless its generation is gen.
func fenceCheck(stream string, gen int64) string { return fenceCheckInto(stream, gen, "") }

// fenceCheckInto is fenceCheck whose result goes INTO into (a user
// variable) when set: the initial copy's transactions read only their
// done record's result.
func fenceCheckInto(stream string, gen int64, into string) string {
	if into != "" {
		into = " INTO " + into
	}
	return "SELECT IF(f.`generation` = " + strconv.FormatInt(gen, 10) + ", 0, (SELECT 1 FROM `" + fenceTable + "` g WHERE g.`stream` = f.`stream` UNION ALL SELECT 2 FROM `" +
		fenceTable + "` g WHERE g.`stream` = f.`stream`))" + into + " FROM `" + fenceTable + "` f WHERE f.`stream` = " + lit(stream) + " LOCK IN SHARE MODE"
}

// copyFenced reports whether the initial copy's writes for stream are
// checked against this process's generation: the copy runs after the
// stream's process took it, and a killed process's late chunk must not
// commit over the new one's copy.
func (t *Target) copyFenced(stream string) bool { return t.gen > 0 && t.genStream == stream }

// copyFenceError turns the failed fence check of a copy transaction into
// apply.ErrFenced, or returns nil: nothing else a copy sends raises 1242.
func (t *Target) copyFenceError(stream string, err error) error {
	var me *mysql.MySQLError
	if !t.copyFenced(stream) || !errors.As(err, &me) || me.Number != 1242 {
		return nil
	}
	return t.fencedMessage()
}

func (t *Target) fencedMessage() error {
	return fmt.Errorf("%w: stream %q has moved past this process's generation %d on the target %s.%s: this process stops (only one sluice may run a stream; its batches would commit over the newer one's)",
		apply.ErrFenced, t.genStream, t.gen, t.database, fenceTable)
}

// Fence takes the stream's next generation on the target and returns it;
// the target's batches for stream are checked against it from now on. It
// costs no round trip when Open took it already (apply.Prefetch.Fence). An
// earlier process's transaction holding the fence longer than fenceWait
// is ended (KILL), with a warning.
func (t *Target) Fence(ctx context.Context, stream string) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen > 0 && t.genStream == stream {
		return t.gen, nil
	}
	if err := t.ensureConn(ctx); err != nil {
		return 0, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t.endFenceHolders(watchCtx, t.connID, stream)
	}()
	var gen int64
	err := t.read(ctx, func() error {
		if _, err := t.conn.ExecContext(ctx, fenceBump(stream)); err != nil {
			return err
		}
		if t.implicitTx {
			if _, err := t.conn.ExecContext(ctx, "COMMIT"); err != nil {
				return err
			}
		}
		return t.conn.QueryRowContext(ctx, fenceRead(stream)).Scan(&gen)
	})
	stopWatch()
	<-watched
	if err != nil {
		return 0, fmt.Errorf("fence stream %q on target %s at %s (%s.%s): %w", stream, t.server, t.addr, t.database, fenceTable, err)
	}
	t.gen, t.genStream = gen, stream
	return gen, nil
}

// endFenceHolders waits while the connection id, taking the fence, is
// blocked; past fenceWait it ends the transactions that block it:
// earlier sluice processes' batches (only they lock the fence row).
func (t *Target) endFenceHolders(ctx context.Context, id int64, stream string) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(fenceWait):
	}
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, err := conn.QueryContext(ctx, "SELECT b.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w "+
			"JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "+
			"WHERE r.trx_mysql_thread_id = "+strconv.FormatInt(id, 10))
		var ids []int64
		if err == nil {
			for rows.Next() {
				var b int64
				if rows.Scan(&b) == nil {
					ids = append(ids, b)
				}
			}
			rows.Close()
		}
		for _, b := range ids {
			_, kerr := conn.ExecContext(ctx, "KILL "+strconv.FormatInt(b, 10))
			t.log.Warn("ended a session that held the stream's fence on the target: an earlier sluice's batch, left in flight when it stopped, which must not commit now",
				"stream", stream, "target", t.addr, "id", b, "err", kerr)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// SetGeneration makes the target check stream's batches against gen, the
// generation its process took with Fence on another connection (a lane).
func (t *Target) SetGeneration(stream string, gen int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen, t.genStream = gen, stream
}

// fencedError turns a failed fence check (the failing step is the check)
// into apply.ErrFenced, or returns nil.
func (t *Target) fencedError(se *stepError, err error) error {
	var me *mysql.MySQLError
	if se == nil || se.step < 1 || se.step > len(se.stmts) || !se.stmts[se.step-1].fence || !errors.As(err, &me) || me.Number != 1242 {
		return nil
	}
	return t.fencedMessage()
}
