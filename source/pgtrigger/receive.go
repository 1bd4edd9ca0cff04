package pgtrigger

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sluice-cdc/sluice"
)

// page reads the next page of the open window, or opens the next window
// and reads its first page. It closes the window once a page comes back
// short.
func (r *Reader) page(ctx context.Context, max int) ([]sluice.Change, error) {
	var cur *string
	if r.pos.open {
		s := r.pos.cur.String()
		cur = &s
	}
	rows, err := r.conn.Query(ctx, r.query, cur, r.pos.prev.String(), r.pos.last, r.names, max, r.stream)
	if err != nil {
		return nil, r.readErr(err)
	}
	defer rows.Close()
	var (
		changes []sluice.Change
		id      pgtype.Int8
		xid     pgtype.Text
		t       int
		op      pgtype.Text
		data    []pgtype.Text
		key     []pgtype.Text
		raw     pgtype.Text
		nulls   pgtype.Text
		at      pgtype.Timestamptz
		snap    pgtype.Text
		note    pgtype.Text
		next    = r.pos
	)
	first := true
	for rows.Next() {
		if err := rows.Scan(&id, &xid, &t, &op, &data, &key, &raw, &nulls, &at, &snap, &note); err != nil {
			if first {
				return nil, r.readErr(err)
			}
			return nil, fmt.Errorf("read changelog row %d: %w", id.Int64, r.readErr(err))
		}
		if first {
			first = false
			if err := r.consumerValid(note); err != nil {
				return nil, err
			}
			s, err := parseSnapshot(snap.String)
			if err != nil {
				return nil, fmt.Errorf("read source snapshot: %w", err)
			}
			if !next.open {
				next.cur, next.open, next.last = s, true, 0
			}
			continue
		}
		if t < 1 || t > len(r.infos) {
			return nil, fmt.Errorf("changelog row %d: unexpected table index %d", id.Int64, t)
		}
		c, err := r.change(r.infos[t-1], id.Int64, op.String, data, key, raw, nulls, note)
		if err != nil {
			return nil, err
		}
		if next.xid, err = strconv.ParseUint(xid.String, 10, 64); err != nil {
			return nil, fmt.Errorf("changelog row %d: transaction id %q: %w", id.Int64, xid.String, err)
		}
		next.last = id.Int64
		c.Pos = next.sluice()
		c.Time = at.Time
		changes = append(changes, c)
	}
	if err := rows.Err(); err != nil {
		return nil, r.readErr(err)
	}
	if first {
		return nil, errors.New("read source changelog: no snapshot row")
	}
	if len(changes) < max {
		// The window is exhausted: the next one starts where it ends.
		next = position{prev: next.cur}
	}
	r.pos = next
	return changes, nil
}

// consumerValid turns the stream's consumer record, as the read statement
// saw it, into an error when the changelog no longer serves the stream.
func (r *Reader) consumerValid(note pgtype.Text) error {
	switch {
	case !note.Valid:
		return fmt.Errorf("stream %s: its consumer record in %s.%s was removed while it ran (`sluice source uninstall --stream-id`?), so other streams may prune changes it has not read: "+
			"restart the stream, which registers again and checks that its position can still be served", r.stream, r.cfg.Schema, consumerTable)
	case note.String != "":
		return fmt.Errorf("stream %s: %s, so changes it had not read are gone: %s: %w", r.stream, note.String, lostFix(r.stream), ErrPositionLost)
	}
	return nil
}

func (r *Reader) readErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42703" || pgErr.Code == "42P01" || pgErr.Code == "42846") {
		return fmt.Errorf("read changelog %s.%s: a source table changed since sluice described it (%s): restart sluice: %w",
			r.cfg.Schema, changelogTable, pgErr.Message, err)
	}
	return fmt.Errorf("read changelog %s.%s on %s: %w", r.cfg.Schema, changelogTable, r.addr, err)
}
