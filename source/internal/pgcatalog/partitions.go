package pgcatalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
)

// A partitioned table's rows live in its leaf partitions, and both readers
// see the leaves: pgoutput names the leaf a row was written to, a row
// trigger on the table is cloned to every leaf. Some changes to the set of
// leaves move rows into or out of the table with no row change that either
// reader sees: DETACH PARTITION and DROP TABLE of a partition take its rows
// away, ATTACH PARTITION of a table holding rows brings them in. A stream
// cannot follow those, so each reader keeps a record of the leaves it
// follows (Record), compares it with the catalog when it opens and while it
// runs (Reconcile), and writes a marker into its own change log at the
// moment it notices one: the stream then stops there with an error naming
// the partition, and stops there again after any restart. A partition
// created as one (CREATE TABLE … PARTITION OF), or attached while it holds
// no row older than its attachment, is simply followed from then on.

// ErrPartitionsChanged is the cause of a stream that stops because a
// partition left one of its partitioned tables, or joined it holding rows.
var ErrPartitionsChanged = errors.New("the partitions of a source table changed without row changes")

// Partition is a leaf partition of a partitioned source table.
type Partition struct {
	OID  uint32 `json:"oid"`
	Name string `json:"name"` // schema.name, unquoted, for messages
	// Joined is the transaction that made it part of the table: the newest
	// pg_inherits row between it and the table (it, or a partitioned
	// partition above it, may have been attached later than it was made).
	Joined uint32 `json:"joined"`

	ident string // quoted and qualified, for SQL
	// born reports whether the table was created by the transaction that
	// made it part of the table (CREATE TABLE … PARTITION OF, or created
	// and attached in one transaction), so it held no rows before.
	born bool
}

// MinLogicalVersion is the first PostgreSQL version (server_version_num)
// whose pgoutput sends logical decoding messages, which carry the logical
// reader's partition markers.
const MinLogicalVersion = 140000

// Leaves returns the leaf partitions, at every level, of table oid, or
// nil when it is not partitioned. A partition whose detach is pending
// (DETACH PARTITION … CONCURRENTLY) is not one. A foreign partition is
// refused: its rows live on another server, where neither reader sees
// them change.
func Leaves(ctx context.Context, q Querier, name sluice.TableName, oid uint32) ([]Partition, error) {
	var kind string
	if err := q.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1`, oid).Scan(&kind); err != nil {
		return nil, fmt.Errorf("look up source table %s: %w", name, err)
	}
	if kind != "p" {
		return nil, nil
	}
	var version int
	if err := q.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return nil, fmt.Errorf("read the server version: %w", err)
	}
	pending := "false"
	if version >= 140000 {
		pending = "i.inhdetachpending"
	}
	// Down the tree from the table: each partition with the newest
	// pg_inherits row on its path (the transaction that made it part of
	// the table) and whether a detach on the path is pending.
	rows, err := q.Query(ctx, `WITH RECURSIVE t(relid, joined, pending) AS (
			SELECT i.inhrelid, i.xmin, `+pending+` FROM pg_inherits i WHERE i.inhparent = $1
			UNION ALL
			SELECT i.inhrelid, CASE WHEN age(i.xmin) < age(t.joined) THEN i.xmin ELSE t.joined END, t.pending OR `+pending+`
			FROM pg_inherits i JOIN t ON i.inhparent = t.relid
		)
		SELECT t.relid, n.nspname, c.relname, c.relkind::text, t.joined::text, a.xmin::text, t.pending
		FROM t JOIN pg_class c ON c.oid = t.relid
			JOIN pg_namespace n ON n.oid = c.relnamespace
			JOIN pg_attribute a ON a.attrelid = t.relid AND a.attnum = -1
		WHERE c.relkind <> 'p'
		ORDER BY n.nspname, c.relname`, oid)
	if err != nil {
		return nil, fmt.Errorf("list the partitions of source table %s: %w", name, err)
	}
	var out []Partition
	for rows.Next() {
		var p Partition
		var schema, rel, relkind, joined, created string
		var detaching bool
		if err := rows.Scan(&p.OID, &schema, &rel, &relkind, &joined, &created, &detaching); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list the partitions of source table %s: %w", name, err)
		}
		if detaching {
			continue
		}
		if relkind == "f" {
			rows.Close()
			return nil, &sluice.TableError{Table: name, Err: fmt.Errorf("partition %s.%s of source table %s is a foreign table: its rows live on another server, where sluice sees no change: "+
				"stream the other partitions by name instead of the partitioned table", schema, rel, name)}
		}
		j, err := strconv.ParseUint(joined, 10, 32)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("partition %s.%s of source table %s: transaction id %q: %w", schema, rel, name, joined, err)
		}
		p.Joined = uint32(j)
		p.Name = schema + "." + rel
		p.ident = pgx.Identifier{schema, rel}.Sanitize()
		p.born = joined == created
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the partitions of source table %s: %w", name, err)
	}
	if out == nil {
		out = []Partition{}
	}
	return out, nil
}

// heldRowsBefore reports whether partition p holds a row that a
// transaction older than the one that made it a partition wrote: a row the
// table gained without a row change. Transaction ids order by when
// transactions began, not when they committed, so a row written after the
// attachment by a transaction that began before it counts too (the stream
// stops, loudly, where it need not); a row written before the attachment
// by the attaching transaction itself does not.
func heldRowsBefore(ctx context.Context, q Querier, table sluice.TableName, p Partition) (bool, error) {
	var held bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ONLY `+p.ident+` WHERE xmin <> $1::text::xid AND age(xmin) > age($1::text::xid))`,
		strconv.FormatUint(uint64(p.Joined), 10)).Scan(&held)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return false, &sluice.TableError{Table: table, Err: fmt.Errorf("partition %s of source table %s was attached to it since the stream last looked, and sluice may not read it to tell whether it held rows then: GRANT SELECT ON %s to sluice's role: %w",
			p.Name, table, p.ident, err)}
	}
	if err != nil {
		return false, fmt.Errorf("read partition %s of source table %s: %w", p.Name, table, err)
	}
	return held, nil
}

// Ancestors returns the partitioned tables a relation is a partition of,
// nearest first; none for a relation that is not a partition, or no longer
// exists.
func Ancestors(ctx context.Context, q Querier, oid uint32) ([]uint32, error) {
	rows, err := q.Query(ctx, `SELECT relid::oid FROM pg_partition_ancestors($1) WHERE relid <> $1`, oid)
	if err != nil {
		return nil, fmt.Errorf("look up the partitioned tables relation %d belongs to: %w", oid, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	if err != nil {
		return nil, fmt.Errorf("look up the partitioned tables relation %d belongs to: %w", oid, err)
	}
	return out, nil
}

// RefuseNested refuses a table list that names a partition and a
// partitioned table it belongs to: its rows would be streamed twice.
func RefuseNested(ctx context.Context, q Querier, tables []Partitioned) error {
	for _, in := range tables {
		up, err := Ancestors(ctx, q, in.OID)
		if err != nil {
			return err
		}
		for _, t := range tables {
			if slices.Contains(up, t.OID) {
				return fmt.Errorf("table %s is a partition of %s, which the table list also names: its rows would be streamed twice: name only one of them", in.Name, t.Name)
			}
		}
	}
	return nil
}

// Record is what a stream knows of the partitions of its partitioned
// tables, kept on the source between runs as JSON (see Marshal).
type Record map[string]*RecordedTable

// RecordedTable is the record of one partitioned table, by its name.
type RecordedTable struct {
	OID uint32 `json:"oid"`
	// Leaves are the partitions followed.
	Leaves []Partition `json:"leaves"`
	// Gone are partitions whose arrival or departure stops the stream (see
	// Event): their changes written before it still belong to the table.
	Gone []Partition `json:"gone,omitempty"`
}

// ParseRecord reads a record written by Marshal; an empty text is an empty
// record.
func ParseRecord(text string) (Record, error) {
	rec := Record{}
	if strings.TrimSpace(text) == "" {
		return rec, nil
	}
	if err := json.Unmarshal([]byte(text), &rec); err != nil {
		return nil, fmt.Errorf("partition record %q: %w", text, err)
	}
	return rec, nil
}

// Marshal writes the record as JSON.
func (r Record) Marshal() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a map of plain structs always marshals
	}
	return string(b)
}

// Root names the leaf oid's partitioned table in the record, with the leaf
// as recorded: a leaf followed, or one whose departure stops the stream.
func (r Record) Root(leaf uint32) (string, *Partition) {
	for name, t := range r {
		for _, list := range [][]Partition{t.Leaves, t.Gone} {
			if i := slices.IndexFunc(list, func(p Partition) bool { return p.OID == leaf }); i >= 0 {
				return name, &list[i]
			}
		}
	}
	return "", nil
}

// Event is a change to a partitioned table's partitions that moved rows
// without row changes; Err describes it. A reader writes it into its
// change log as a marker (its JSON), where the stream stops.
type Event struct {
	Table     string `json:"table"`
	Partition string `json:"partition"`
	// Kind is EventLeft or EventJoinedWithRows.
	Kind string `json:"event"`
}

// Kinds of Event.
const (
	EventLeft           = "left"
	EventJoinedWithRows = "joined-with-rows"
)

// Err is the error a stream stops with at the event's marker.
func (e Event) Err() error {
	name, err := sluice.ParseTableName(e.Table)
	if err != nil {
		name = sluice.TableName{Name: e.Table}
	}
	fix := fmt.Sprintf("reload %s on the target from a fresh copy and start the stream anew (another --stream-id, or remove its checkpoint on both sides)", e.Table)
	var what string
	switch e.Kind {
	case EventLeft:
		what = fmt.Sprintf("partition %s of source table %s was detached or dropped: its rows left the table without a row change, so the target still holds them", e.Partition, e.Table)
	case EventJoinedWithRows:
		what = fmt.Sprintf("table %s was attached as a partition of source table %s holding rows written before it joined: they came into the table without a row change, so the target lacks them", e.Partition, e.Table)
	default:
		what = fmt.Sprintf("the partitions of source table %s changed (%s of %s)", e.Table, e.Kind, e.Partition)
	}
	return &sluice.TableError{Table: name, Err: fmt.Errorf("%s: %s: %w", what, fix, ErrPartitionsChanged)}
}

// ParseEvent reads an event's marker.
func ParseEvent(text string) (Event, error) {
	var e Event
	if err := json.Unmarshal([]byte(text), &e); err != nil {
		return e, fmt.Errorf("partition marker %q: %w", text, err)
	}
	return e, nil
}

// Marshal writes the event's marker.
func (e Event) Marshal() string {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Partitioned is a streamed table as Reconcile needs it.
type Partitioned struct {
	Name sluice.TableName
	OID  uint32
}

// Reconcile compares the record with the catalog's partitions of each
// table, and returns the record brought up to date, the events to mark (a
// partition gone, or one that joined holding older rows) and the
// partitions that joined without rows, to follow from now on. A table the
// record does not know (a new stream's, or one recorded by an older
// sluice) is recorded as it is, with no events.
func Reconcile(ctx context.Context, q Querier, tables []Partitioned, rec Record) (Record, []Event, []Partition, error) {
	next := Record{}
	var events []Event
	var joined []Partition
	for _, t := range tables {
		leaves, err := Leaves(ctx, q, t.Name, t.OID)
		if err != nil {
			return nil, nil, nil, err
		}
		if leaves == nil {
			continue
		}
		key := t.Name.String()
		was := rec[key]
		if was == nil || was.OID != t.OID {
			next[key] = &RecordedTable{OID: t.OID, Leaves: leaves}
			continue
		}
		now := &RecordedTable{OID: t.OID, Gone: slices.Clone(was.Gone)}
		known := func(list []Partition, oid uint32) bool {
			return slices.ContainsFunc(list, func(p Partition) bool { return p.OID == oid })
		}
		for _, p := range leaves {
			switch {
			case known(was.Leaves, p.OID):
				now.Leaves = append(now.Leaves, p)
			case known(was.Gone, p.OID):
				// Its event is marked already; it is not followed again.
			case p.born:
				now.Leaves = append(now.Leaves, p)
				joined = append(joined, p)
			default:
				held, err := heldRowsBefore(ctx, q, t.Name, p)
				if err != nil {
					return nil, nil, nil, err
				}
				if !held {
					now.Leaves = append(now.Leaves, p)
					joined = append(joined, p)
					continue
				}
				now.Gone = append(now.Gone, p)
				events = append(events, Event{Table: key, Partition: p.Name, Kind: EventJoinedWithRows})
			}
		}
		for _, p := range was.Leaves {
			if !known(leaves, p.OID) {
				now.Gone = append(now.Gone, p)
				events = append(events, Event{Table: key, Partition: p.Name, Kind: EventLeft})
			}
		}
		next[key] = now
	}
	return next, events, joined, nil
}
