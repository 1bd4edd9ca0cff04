package pglogical

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SlotState is what the server says of a replication slot, for a health
// check that runs whether or not a reader holds the slot.
type SlotState struct {
	Exists bool
	// Active: a session (a walsender, or a SQL call holding it) uses the
	// slot now.
	Active bool
	// RetainedBytes is the WAL the slot keeps the server from removing:
	// the current WAL position minus the slot's restart_lsn.
	RetainedBytes int64
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved (past max_wal_size: lost at the next checkpoint unless
	// read), lost.
	WALStatus string
	// MaxKeepBytes is max_slot_wal_keep_size in bytes, -1 when the server
	// sets no limit (a slot then keeps WAL until the disk fills).
	MaxKeepBytes int64
}

// ReadSlotState reads slot's state on the server conn is connected to.
func ReadSlotState(ctx context.Context, conn *pgx.Conn, slot string) (SlotState, error) {
	var st SlotState
	var status *string
	var keepMB int64
	err := conn.QueryRow(ctx, `SELECT s.active, coalesce((pg_current_wal_lsn() - s.restart_lsn)::bigint, 0), s.wal_status,
		(SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size')
		FROM pg_replication_slots s WHERE s.slot_name = $1`, slot).Scan(&st.Active, &st.RetainedBytes, &status, &keepMB)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotState{}, nil
	}
	if err != nil {
		return SlotState{}, fmt.Errorf("read replication slot %s: %w", slot, err)
	}
	st.Exists = true
	if status != nil {
		st.WALStatus = *status
	}
	// pg_settings gives max_slot_wal_keep_size in MB.
	st.MaxKeepBytes = -1
	if keepMB >= 0 {
		st.MaxKeepBytes = keepMB << 20
	}
	return st, nil
}
