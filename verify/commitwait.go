package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// awaitCommitsSeen waits, before a repair takes its snapshot of a
// PostgreSQL source, until the commits that wait for synchronous standbys
// are seen by other sessions, for up to settle.
//
// PostgreSQL writes and flushes a commit record, and then, before other
// sessions see the transaction, waits for the synchronous standbys
// (synchronous_standby_names) to confirm it. The walsenders of logical
// replication decode the WAL as it is flushed (PostgreSQL 17's
// synchronized_standby_slots makes them wait for physical standbys; no
// earlier version does), so a logical stream may apply such a transaction
// while no snapshot sees it, as long as the standbys take, or for ever
// while one is missing. A repair reading then would write the older row
// over the newer one the stream applied, and nothing would mend it.
//
// Such a transaction's session waits on SyncRep (pg_stat_activity). Those
// waiting now include every transaction the stream can have applied
// before the repair's fence was taken; once none of them waits any more,
// each is visible to a snapshot taken after. (Between flushing its commit
// record and starting to wait a session spends microseconds; the stream
// needs milliseconds to receive and apply a transaction.) Without
// synchronous standbys no commit waits.
func (s *pgSide) awaitCommitsSeen(ctx context.Context, settle time.Duration) error {
	var standbys, user string
	var canSee bool
	err := s.pool.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'), current_user,
		pg_has_role('pg_read_all_stats', 'MEMBER')`).Scan(&standbys, &user, &canSee)
	if err != nil {
		return fmt.Errorf("repair: read the synchronous standby settings of %s: %w", s.Where(), err)
	}
	if strings.TrimSpace(standbys) == "" {
		return nil
	}
	if !canSee {
		return fmt.Errorf("repair: %s has synchronous standbys (synchronous_standby_names = %q): a commit waiting for them is in the WAL, where the logical stream may have applied it, "+
			"but no other session sees it yet, and user %s cannot see which sessions wait (pg_stat_activity shows other users' wait events only to members of pg_read_all_stats), "+
			"so a repair could write older rows over newer ones, and writes nothing: GRANT pg_read_all_stats TO %s", s.Where(), standbys, user, user)
	}
	waiting, err := s.syncRepWaits(ctx, nil)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(settle)
	for len(waiting) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("repair: on %s, %d sessions (pid/transaction %s) still wait, after %s, for the synchronous standbys (synchronous_standby_names = %q) to confirm their commits: "+
				"the logical stream may have applied those, and no other session sees them yet, so a repair would write the older rows over them, and writes nothing; "+
				"repair once the standbys confirm, or raise --catch-up", s.Where(), len(waiting), strings.Join(waiting, ", "), settle, standbys)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if waiting, err = s.syncRepWaits(ctx, waiting); err != nil {
			return err
		}
	}
	return nil
}

// syncRepWaits lists the sessions, as "pid/xid", whose commits wait for
// synchronous standbys; of those in among only, when it is not nil.
func (s *pgSide) syncRepWaits(ctx context.Context, among []string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT pid::text || '/' || backend_xid::text FROM pg_stat_activity
		WHERE wait_event = 'SyncRep' AND backend_xid IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("repair: find the commits waiting for synchronous standbys on %s: %w", s.Where(), err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, err
		}
		if among == nil || slices.Contains(among, w) {
			out = append(out, w)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("repair: find the commits waiting for synchronous standbys on %s: %w", s.Where(), err)
	}
	return out, nil
}
