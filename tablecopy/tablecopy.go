// Package tablecopy owns a stream's initial copy: the rows the source's
// tables already hold, read in one consistent snapshot of the source,
// split into primary-key ranges (chunks), written to the target by parallel
// workers, each chunk in one target transaction together with the record
// that says it is done. The copy ends at the snapshot's log position, from
// which the stream then reads, so that nothing committed on the source is
// missed or applied twice.
//
// A copy stopped at any moment (kill -9 included) resumes: the chunks the
// target records as done are not copied again. The snapshot they were read
// in died with the process, so a resumed copy takes a new one (a new
// boundary, a later position): every done chunk is checked against it by a
// digest computed inside both databases (only the digests cross the link),
// kept when equal and copied again when a change touched its range in the
// meantime. The whole target then matches the new snapshot, and the stream
// starts at the new position.
//
// The package holds the orchestration and the types the sources and
// targets implement; the SQL lives with them (apply/postgres, apply/mysql,
// source/...).
package tablecopy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-cdc/sluice"
)

// Range is a primary-key range of a table: the rows whose key is at or
// after From and before To, comparing keys column by column in key order
// (a row comparison). A bound may cover only the first columns of the key
// (a prefix): then the row's key prefix of that length is compared. A nil
// bound is open: nil From is the first row, nil To is past the last. A
// table without a primary key is always copied as one Range{} (every row).
type Range struct {
	From sluice.Row
	To   sluice.Row
}

// Whole reports whether r covers every row.
func (r Range) Whole() bool { return r.From == nil && r.To == nil }

func (r Range) String() string {
	b := func(k sluice.Row, open string) string {
		if k == nil {
			return open
		}
		s := "("
		for i, v := range k {
			if i > 0 {
				s += ", "
			}
			s += v.String()
		}
		return s + ")"
	}
	return "[" + b(r.From, "first") + ", " + b(r.To, "last") + ")"
}

// Digest sums up the rows of a range: their count and an order-independent
// hash of each row's canonical text, computed inside the database. Two
// digests of the same engine are equal when the ranges hold the same rows
// (up to the hash's collisions); digests of different engines are not
// comparable.
type Digest struct {
	Rows int64
	Sum  string
}

// ErrNoDigest is returned by a Target or Reader that cannot compute a
// digest comparable with the other side's (another engine): the copy then
// copies such ranges again instead of comparing them.
var ErrNoDigest = errors.New("no comparable digest")

// Chunk is one unit of the copy: a range of one table.
type Chunk struct {
	Table sluice.TableName
	// N numbers the table's chunks from 0 in key order.
	N     int
	Range Range
}

func (c Chunk) String() string { return fmt.Sprintf("%s chunk %d %s", c.Table, c.N, c.Range) }

// ChunkState is a chunk as the target records it.
type ChunkState struct {
	Chunk
	// Done is set when the chunk's rows are on the target: in the same
	// transaction as the rows.
	Done bool
	// Rows and Bytes are what the chunk's last copy wrote.
	Rows, Bytes int64
	// Epoch is the plan epoch whose snapshot the rows were read in.
	Epoch int
	// Copies counts the times the chunk was written (1 after a copy that
	// was never interrupted while this chunk was in flight, more when a
	// resume copied it again).
	Copies int
	At     time.Time
}

// Plan is a stream's copy as the target records it: the chunks, fixed when
// the copy began so that a resume copies the same ranges, and how far each
// got.
type Plan struct {
	Stream string
	// Epoch counts the snapshots the copy has read: 1 for the first, one
	// more for each resume.
	Epoch int
	// Position is the log position of the current epoch's snapshot.
	Position sluice.Position
	// Started is when epoch 1 began.
	Started time.Time
	// HandedOff is when the stream took over at Position (FinishCopy);
	// zero while the copy is unfinished. WritePlan clears it.
	HandedOff time.Time
	// Chunks are every chunk of every table, in table then key order.
	Chunks []ChunkState
}

// Rows hands the rows of a chunk to the target, in batches, as they are read
// from the source. The batch slice and its rows may be reused once emit
// returns; the target must not keep them.
type Rows func(emit func(batch []sluice.Row) error) error

// Target is what the copy needs from a target. Every method works on its
// own connection or transaction: a Target is used by one worker at a time
// (each worker opens its own).
type Target interface {
	// ReadPlan returns the stream's copy plan, nil when it has none.
	ReadPlan(ctx context.Context, stream string) (*Plan, error)
	// WritePlan records p: its epoch and position, and a row for each chunk
	// that has none yet (not done). It never changes a chunk's record.
	WritePlan(ctx context.Context, p *Plan) error
	// RowCounts tells, for each table, whether it holds rows on the
	// target: 0 for an empty table, otherwise a count that may be an
	// estimate but is never 0. A target asks for all of them in one round
	// trip where it can.
	RowCounts(ctx context.Context, tables []sluice.TableName) ([]int64, error)
	// WriteChunk writes the chunk's rows into t in one transaction that
	// also marks the chunk's record (by c.Table, the plan's name, which a
	// cross-engine target's t need not carry) done, with rows, bytes,
	// epoch and copies+1. With replace, it
	// first deletes the rows of the chunk's range on the target. It returns
	// only after the commit returned; on error nothing is committed.
	WriteChunk(ctx context.Context, stream string, epoch int, t *sluice.Table, c Chunk, replace bool, rows Rows) (ChunkState, error)
	// ResetTable deletes every row of t and marks its chunks not done, in
	// one transaction.
	ResetTable(ctx context.Context, stream string, t *sluice.Table) error
	// Digest computes the digest of a range of t on the target over the
	// source's columns (t.Columns, in that order), or ErrNoDigest.
	Digest(ctx context.Context, t *sluice.Table, r Range) (Digest, error)
	// FinishCopy marks the plan handed off (at the stream's start
	// position); it is kept as a record of the copy.
	FinishCopy(ctx context.Context, stream string, pos sluice.Position) error
	Close(ctx context.Context) error
}

// Reader reads the source's tables inside the copy's snapshot; every
// Reader of one Snapshot sees the same rows. A Reader is used by one worker
// at a time.
type Reader interface {
	// Split divides t into ranges of about rowsPerChunk rows, in key order,
	// covering every key (the first From and the last To are nil), and
	// estimates the table's rows. A table without a primary key is one
	// Range{}.
	Split(ctx context.Context, t *sluice.Table, rowsPerChunk int) ([]Range, int64, error)
	// Read emits the rows of a range of t, in batches of bounded bytes, with
	// the values in the same text form the stream's reader gives them.
	Read(ctx context.Context, t *sluice.Table, r Range, emit func(batch []sluice.Row) error) error
	// Digest computes the digest of a range of t, or ErrNoDigest.
	Digest(ctx context.Context, t *sluice.Table, r Range) (Digest, error)
	Close() error
}

// CopyReader is a Reader of a PostgreSQL source that can write a range's
// rows as COPY text, and CopyTarget a PostgreSQL target that takes them so:
// between the two the rows pass as bytes, never parsed into values (the
// values are the ones Read gives). The copy uses them when both sides have
// them.
type CopyReader interface {
	CopyOut(ctx context.Context, t *sluice.Table, r Range, w io.Writer) (rows int64, err error)
}

// CopyTarget is a target that writes a chunk from COPY text.
type CopyTarget interface {
	WriteChunkCopy(ctx context.Context, stream string, epoch int, t *sluice.Table, c Chunk, replace bool, copyOut func(w io.Writer) (int64, error)) (ChunkState, error)
}

// Project returns t with only the columns at the indexes cols (in column
// order, the primary key's among them): t itself when cols are all of
// them, or none.
func Project(t *sluice.Table, cols []int) *sluice.Table {
	if len(cols) == 0 || len(cols) == len(t.Columns) {
		return t
	}
	p := &sluice.Table{Name: t.Name, Columns: make([]sluice.Column, len(cols))}
	at := make(map[int]int, len(cols))
	for i, c := range cols {
		p.Columns[i] = t.Columns[c]
		at[c] = i
	}
	for _, k := range t.Key {
		p.Key = append(p.Key, at[k])
	}
	return p
}

// Snapshot is a consistent cut of the source: every change committed before
// Position is in the rows its readers see, every change after it is
// streamed from Position.
type Snapshot struct {
	Position sluice.Position
	// Tables describe the streamed tables as the source has them.
	Tables []*sluice.Table
	// Readers all read the one snapshot; there are as many as asked for.
	Readers []Reader
	// Engine names the source's engine ("postgres", "mysql"), to tell
	// whether digests compare.
	Engine string
}

// Close closes every reader.
func (s *Snapshot) Close() error {
	var errs []error
	for _, r := range s.Readers {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// Source takes the copy's snapshot. Each call takes a new one; a source
// that holds state for the stream (a replication slot, a changelog
// consumer) sets it to the new snapshot's position, which is safe because
// the stream has no checkpoint yet: nothing was streamed from it.
type Source interface {
	Snapshot(ctx context.Context, workers int) (*Snapshot, error)
}

// EncodeBound encodes a range bound for the target's plan table; nil stays
// "" (open). Each value is base64 in a JSON array (null for NULL): a key's
// bytes need not be UTF-8 (binary keys), which JSON strings cannot carry.
func EncodeBound(k sluice.Row) string {
	if k == nil {
		return ""
	}
	vals := make([]*string, len(k))
	for i, v := range k {
		if !v.Null {
			s := base64.StdEncoding.EncodeToString([]byte(v.Text))
			vals[i] = &s
		}
	}
	b, _ := json.Marshal(vals)
	return string(b)
}

// DecodeBound reads a bound EncodeBound wrote.
func DecodeBound(s string) (sluice.Row, error) {
	if s == "" {
		return nil, nil
	}
	var vals []*string
	if err := json.Unmarshal([]byte(s), &vals); err != nil {
		return nil, fmt.Errorf("decode chunk bound %q: %w", s, err)
	}
	k := make(sluice.Row, len(vals))
	for i, v := range vals {
		if v == nil {
			k[i] = sluice.Null
			continue
		}
		b, err := base64.StdEncoding.DecodeString(*v)
		if err != nil {
			return nil, fmt.Errorf("decode chunk bound %q: %w", s, err)
		}
		k[i] = sluice.Text(string(b))
	}
	return k, nil
}
