package pglogical

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// Partitioned tables. The publication publishes a partitioned table as
// itself, so pgoutput sends the changes of its leaf partitions under the
// leaves' own relations, in each leaf's column order, and the reader maps
// them to the table (leafRel). A leaf it has not met is looked up in the
// catalog when its relation message arrives: a partition created while
// streaming is followed from its first change. A row moved to another
// partition (an UPDATE of the partition key) is a DELETE from one leaf and
// an INSERT into the other, which the stream applies in order; a TRUNCATE
// names leaves, and is the table's own when it names every leaf, else it
// stops the stream.
//
// A partition detached or dropped, or attached holding rows, changes the
// table's rows without a row change in the WAL (see pgcatalog). The reader
// keeps the record of the leaves it follows in the publication's comment,
// by slot, compares it with the catalog when it opens and every
// partitionCheckEvery while it runs, and marks each such change it finds
// with a logical decoding message (pg_logical_emit_message, transactional)
// in the WAL: the stream stops at the marker, and there again after a
// restart, until the table is reloaded and the stream started anew.

// markerPrefix is the prefix of the reader's partition markers.
const markerPrefix = "sluice.partition"

// partitionCheckEvery is how often a running reader compares the
// partitions with its record.
const partitionCheckEvery = time.Second

// commentHead begins the publication comment that holds the streams'
// partition records: a JSON object of records by slot.
const commentHead = "sluice: the partitions of partitioned tables each stream follows, by replication slot; sluice rewrites this comment\n"

// leafRel is a leaf partition of a streamed partitioned table, as the
// receiver knows it from its relation messages: pgoutput sends its rows in
// its own column order, which perm maps to the table's.
type leafRel struct {
	root *relState
	// perm maps the leaf's column i to the table's column perm[i]; nil
	// when they are in the same order.
	perm    []int
	pending *pglogrepl.RelationMessage
}

// leafShape turns a leaf's relation message into the table's: the
// table's known columns in its order, then the columns it does not know
// yet (added since) in the leaf's order, under the table's name. It
// returns the permutation from the leaf's columns to those.
func leafShape(m *pglogrepl.RelationMessage, table *sluice.Table) (*pglogrepl.RelationMessage, []int) {
	out := *m
	out.Namespace, out.RelationName = table.Name.Schema, table.Name.Name
	out.Columns = make([]*pglogrepl.RelationMessageColumn, 0, len(m.Columns))
	perm := make([]int, len(m.Columns))
	used := make([]bool, len(m.Columns))
	for _, c := range table.Columns {
		i := slices.IndexFunc(m.Columns, func(mc *pglogrepl.RelationMessageColumn) bool { return mc.Name == c.Name })
		if i < 0 {
			continue // dropped: the comparison with the table says so
		}
		perm[i], used[i] = len(out.Columns), true
		out.Columns = append(out.Columns, m.Columns[i])
	}
	for i, mc := range m.Columns {
		if !used[i] {
			perm[i] = len(out.Columns)
			out.Columns = append(out.Columns, mc)
		}
	}
	out.ColumnNum = uint16(len(out.Columns))
	for i, p := range perm {
		if p != i {
			return &out, perm
		}
	}
	return &out, nil
}

// partitionedTables are the streamed tables that are partitioned.
func partitionedTables(infos []*tableInfo) []pgcatalog.Partitioned {
	var out []pgcatalog.Partitioned
	for _, in := range infos {
		if in.leaves != nil {
			out = append(out, pgcatalog.Partitioned{Name: in.table.Name, OID: in.oid})
		}
	}
	return out
}

// readRecords reads the streams' partition records from the publication's
// comment, and whether sluice may write it: when it is empty or sluice's.
func readRecords(ctx context.Context, q pgcatalog.Querier, pub string) (map[string]pgcatalog.Record, bool, error) {
	var comment *string
	if err := q.QueryRow(ctx, `SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = $1`, pub).Scan(&comment); err != nil {
		return nil, false, fmt.Errorf("read the comment of publication %s: %w", pub, err)
	}
	recs := map[string]pgcatalog.Record{}
	if comment == nil || *comment == "" {
		return recs, true, nil
	}
	body, ok := strings.CutPrefix(*comment, commentHead)
	if !ok {
		return recs, false, nil
	}
	if err := json.Unmarshal([]byte(body), &recs); err != nil {
		return nil, false, fmt.Errorf("the partition records in the comment of publication %s: %w", pub, err)
	}
	return recs, true, nil
}

// saveRecord records rec as the slot's partition record and writes a
// marker for each event, in one transaction. A publication whose comment
// is not sluice's, or that sluice's role may not comment on, keeps no
// record (logged): the markers are still written.
func saveRecord(ctx context.Context, conn *pgx.Conn, cfg Config, rec pgcatalog.Record, events []pgcatalog.Event) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("record the partitions of stream %s: %w", cfg.Slot, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sluice publication comment ' || $1))`, cfg.Publication); err != nil {
		return fmt.Errorf("record the partitions of stream %s: %w", cfg.Slot, err)
	}
	for _, e := range events {
		if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markerPrefix, e.Marshal()); err != nil {
			return fmt.Errorf("mark that %s in the WAL: %w", e.Err(), err)
		}
	}
	recs, ours, err := readRecords(ctx, tx, cfg.Publication)
	if err != nil {
		return err
	}
	if !ours {
		cfg.Logger.Warn("publication has a comment of its own, so sluice keeps no record of the partitions it follows there: a partition detached, dropped or attached holding rows while sluice is stopped goes unnoticed",
			"publication", cfg.Publication)
	} else {
		recs[cfg.Slot] = rec
		text := commentHead + marshalRecords(recs)
		sp, err := tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("record the partitions of stream %s: %w", cfg.Slot, err)
		}
		if _, err := sp.Exec(ctx, `COMMENT ON PUBLICATION `+ident(cfg.Publication)+` IS `+quoteLiteral(text)); err != nil {
			if rerr := sp.Rollback(ctx); rerr != nil {
				return fmt.Errorf("record the partitions of stream %s: %w", cfg.Slot, rerr)
			}
			cfg.Logger.Warn("cannot record the partitions sluice follows in the publication's comment (is sluice's role its owner?): a partition detached, dropped or attached holding rows while sluice is stopped goes unnoticed",
				"publication", cfg.Publication, "err", err)
		} else if err := sp.Commit(ctx); err != nil {
			return fmt.Errorf("record the partitions of stream %s: %w", cfg.Slot, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record the partitions of stream %s: %w", cfg.Slot, err)
	}
	return nil
}

func marshalRecords(recs map[string]pgcatalog.Record) string {
	b, err := json.Marshal(recs)
	if err != nil {
		panic(err) // maps of plain structs always marshal
	}
	return string(b)
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// initRecord gives the stream's slot a record of its partitioned tables'
// partitions as they are, when the slot is new (what it streams starts
// now) or has none (written by an older sluice).
func initRecord(ctx context.Context, conn *pgx.Conn, cfg Config, infos []*tableInfo, newSlot bool) error {
	parts := partitionedTables(infos)
	if len(parts) == 0 {
		return nil
	}
	if !newSlot {
		recs, _, err := readRecords(ctx, conn, cfg.Publication)
		if err != nil {
			return err
		}
		if recs[cfg.Slot] != nil {
			return nil
		}
	}
	rec, _, _, err := reconcile(ctx, conn, parts, pgcatalog.Record{})
	if err != nil {
		return err
	}
	return saveRecord(ctx, conn, cfg, rec, nil)
}

// checkPartitions compares the partitions with the reader's record, marks
// what it finds in the WAL and records the partitions as they are now.
func (r *Reader) checkPartitions(ctx context.Context) error {
	return r.withSQL(ctx, func(conn *pgx.Conn) error {
		recs, _, err := readRecords(ctx, conn, r.cfg.Publication)
		if err != nil {
			return err
		}
		r.partMu.Lock()
		was := r.record
		r.partMu.Unlock()
		if rec := recs[r.cfg.Slot]; rec != nil {
			was = rec
		}
		next, events, joined, err := reconcile(ctx, conn, r.parts, was)
		if err != nil {
			return err
		}
		for _, p := range joined {
			r.log.Info("following a new partition", "partition", p.Name)
		}
		if len(events) > 0 || next.Marshal() != was.Marshal() {
			if err := saveRecord(ctx, conn, r.cfg, next, events); err != nil {
				return err
			}
			for _, e := range events {
				r.log.Warn("marked a change of partitions in the WAL: the stream stops there", "err", e.Err())
			}
		}
		r.partMu.Lock()
		r.record = next
		r.partMu.Unlock()
		return nil
	})
}

// reconcile is pgcatalog.Reconcile in a transaction that waits at most a
// second for a lock: a partition it reads may be locked by a long DDL,
// and the reader's catalog session, which the receiver shares, must not
// wait that long; the next check tries again.
func reconcile(ctx context.Context, conn *pgx.Conn, parts []pgcatalog.Partitioned, was pgcatalog.Record) (pgcatalog.Record, []pgcatalog.Event, []pgcatalog.Partition, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("check the partitions of the streamed tables: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '1s'`); err != nil {
		return nil, nil, nil, fmt.Errorf("check the partitions of the streamed tables: %w", err)
	}
	return pgcatalog.Reconcile(ctx, tx, parts, was)
}

// watchPartitions runs checkPartitions every partitionCheckEvery. A
// partition sluice cannot follow at all (a foreign one, one it may not
// read) stops the stream.
func (r *Reader) watchPartitions(ctx context.Context) {
	defer r.done.Done()
	t := time.NewTicker(partitionCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.checkPartitions(ctx)
		var te *sluice.TableError
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.As(err, &te):
			r.fail(ctx, err)
			return
		default:
			r.log.Debug("check the partitions of the streamed tables", "err", err)
		}
	}
}

// resolveLeaf finds the streamed partitioned table a relation is a leaf
// partition of: in the catalog, or, for a partition that has left the
// table since, in the record. It returns nil for a relation that is not
// one.
func (r *Reader) resolveLeaf(ctx context.Context, rel uint32) (*leafRel, error) {
	if l := r.leaves[rel]; l != nil {
		return l, nil
	}
	if len(r.parts) == 0 {
		return nil, nil
	}
	var up []uint32
	err := r.withSQL(ctx, func(conn *pgx.Conn) error {
		var err error
		up, err = pgcatalog.Ancestors(ctx, conn, rel)
		return err
	})
	if err != nil {
		return nil, err
	}
	var root *relState
	for _, a := range up {
		if rs := r.rels[a]; rs != nil {
			root = rs
			break
		}
	}
	if root == nil {
		r.partMu.Lock()
		name, p := r.record.Root(rel)
		r.partMu.Unlock()
		if p == nil {
			return nil, nil
		}
		for _, rs := range r.rels {
			if rs.info.table.Name.String() == name {
				root = rs
			}
		}
		if root == nil {
			return nil, nil
		}
	}
	l := &leafRel{root: root}
	r.leaves[rel] = l
	return l, nil
}

// truncateTables turns the relations of a TRUNCATE message into the
// streamed tables it empties. A partitioned table is emptied when every
// leaf it had is named; one named in part stops the stream.
func (r *Reader) truncateTables(ctx context.Context, rels []uint32) ([]*relState, error) {
	var out []*relState
	leaves := map[*relState][]uint32{}
	for _, id := range rels {
		if rs := r.rels[id]; rs != nil {
			if !slices.Contains(out, rs) {
				out = append(out, rs)
			}
			continue
		}
		l, err := r.resolveLeaf(ctx, id)
		if err != nil {
			return nil, err
		}
		if l != nil {
			if _, seen := leaves[l.root]; !seen && !slices.Contains(out, l.root) {
				out = append(out, l.root)
			}
			leaves[l.root] = append(leaves[l.root], id)
		}
	}
	for rs, named := range leaves {
		if missed := r.untruncated(rs, named); len(missed) > 0 {
			return nil, &sluice.TableError{Table: rs.table.Name, Err: fmt.Errorf(
				"TRUNCATE of part of source table %s at LSN %s (partition %s not emptied with the others): the target cannot truncate part of a table, and the stream cannot go on without it: "+
					"reload %s on the target from a fresh copy and start the stream anew (another --stream-id, or remove its checkpoint on both sides): %w",
				rs.table.Name, r.tx.commit, strings.Join(missed, ", "), rs.table.Name, pgtrigger.ErrPartialTruncate)}
		}
	}
	return out, nil
}

// untruncated names the leaves of a partitioned table a TRUNCATE that
// named leaves did not name, among those the record follows. A leaf that
// joined in a transaction that began after the truncating one was not one
// yet (the TRUNCATE held the table locked, so the two do not overlap).
func (r *Reader) untruncated(rs *relState, named []uint32) []string {
	r.partMu.Lock()
	defer r.partMu.Unlock()
	rec := r.record[rs.table.Name.String()]
	if rec == nil {
		return nil
	}
	var missed []string
	for _, p := range rec.Leaves {
		if !slices.Contains(named, p.OID) && !(r.tx.xid != 0 && int32(p.Joined-r.tx.xid) > 0) {
			missed = append(missed, p.Name)
		}
	}
	return missed
}

// marker stops the stream at a partition marker of one of its tables.
func (r *Reader) marker(ctx context.Context, m *pglogrepl.LogicalDecodingMessage, at pglogrepl.LSN) error {
	if m.Prefix != markerPrefix || !m.Transactional || !r.tx.open || r.skipping(at) {
		return nil
	}
	e, err := pgcatalog.ParseEvent(string(m.Content))
	if err != nil {
		return &fatalError{fmt.Errorf("at LSN %s: %w", at, err)}
	}
	for _, rs := range r.rels {
		if rs.info.table.Name.String() == e.Table {
			return r.stop(ctx, fmt.Errorf("%w (stream stopped at %s, nothing after it applied; marked at LSN %s)", e.Err(), r.errPos(), at))
		}
	}
	return nil
}
