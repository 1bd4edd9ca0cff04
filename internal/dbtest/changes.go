package dbtest

// What a source reader's test reads: the changes a reader returns, read
// with a deadline and rendered as one line for comparisons and failure
// messages, the same for each trigger source.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
)

// ChangeReader is a source reader under test.
type ChangeReader interface {
	Read(ctx context.Context, max int) ([]sluice.Change, error)
}

// Tables names tables in the reader's default schema.
func Tables(names ...string) []sluice.TableName {
	out := make([]sluice.TableName, len(names))
	for i, n := range names {
		out[i] = sluice.TableName{Name: n}
	}
	return out
}

// CollectChanges reads until it holds n row changes, failing the test if
// they have not come within, or if a Read returns more than max, then
// checks that nothing more comes. Progress markers are dropped.
func CollectChanges(tb testing.TB, r ChangeReader, n, max int, within time.Duration) []sluice.Change {
	tb.Helper()
	ctx := context.Background()
	var got []sluice.Change
	deadline := time.Now().Add(within)
	for len(got) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("read %d changes before the deadline, want %d: %s", len(got), n, DescribeChanges(got))
		}
		c, err := r.Read(ctx, max)
		if err != nil {
			tb.Fatalf("Read: %v", err)
		}
		if len(c) > max {
			tb.Fatalf("Read(%d) returned %d changes", max, len(c))
		}
		got = append(got, WithoutProgress(c)...)
	}
	if len(got) > n {
		tb.Fatalf("read %d changes, want %d: %s", len(got), n, DescribeChanges(got))
	}
	if c, err := r.Read(ctx, max); err != nil || len(WithoutProgress(c)) != 0 {
		tb.Fatalf("Read after the last change = %s, %v; want nothing", DescribeChanges(c), err)
	}
	return got
}

// ReadUntilErr reads until a Read fails, and returns the changes read
// before and the error, failing the test if none came within.
func ReadUntilErr(tb testing.TB, r ChangeReader, within time.Duration) ([]sluice.Change, error) {
	tb.Helper()
	var got []sluice.Change
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		c, err := r.Read(context.Background(), 100)
		got = append(got, c...)
		if err != nil {
			return got, err
		}
	}
	tb.Fatalf("no error within %v; read %s", within, DescribeChanges(got))
	return nil, nil
}

// PartitionedDDL makes a partitioned table ev (id bigint, day date, kind
// text, payload text, PRIMARY KEY (id, day)), by month, with every kind of
// partition a reader meets: one created as a partition (ev_01), one
// attached from a table with its columns in another order and a dropped
// column (ev_02), a partitioned one (ev_03, with ev_03a and ev_03b) and
// the default one (ev_def).
var PartitionedDDL = []string{
	`CREATE TABLE ev (id bigint, day date, kind text, payload text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)`,
	`CREATE TABLE ev_01 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')`,
	`CREATE TABLE ev_02 (junk int, payload text, kind text, day date NOT NULL, id bigint NOT NULL)`,
	`ALTER TABLE ev_02 DROP COLUMN junk`,
	`ALTER TABLE ev ATTACH PARTITION ev_02 FOR VALUES FROM ('2026-02-01') TO ('2026-03-01')`,
	`CREATE TABLE ev_03 PARTITION OF ev FOR VALUES FROM ('2026-03-01') TO ('2026-04-01') PARTITION BY HASH (id)`,
	`CREATE TABLE ev_03a PARTITION OF ev_03 FOR VALUES WITH (MODULUS 2, REMAINDER 0)`,
	`CREATE TABLE ev_03b PARTITION OF ev_03 FOR VALUES WITH (MODULUS 2, REMAINDER 1)`,
	`CREATE TABLE ev_def PARTITION OF ev DEFAULT`,
}

// PartitionChange is a change to PartitionedDDL's partitions that moves
// rows in or out of ev without a row change: a reader must stop the stream
// at it with an error saying Want, whether it reads through it (Running)
// or opens after it.
type PartitionChange struct {
	Name    string
	Stmts   []string
	Running bool
	Want    string
}

// PartitionChanges are the changes of partitions every PostgreSQL reader
// must stop at. The detached partition is truncated after: that is no
// longer a TRUNCATE of ev.
var PartitionChanges = func() []PartitionChange {
	attach := []string{
		`CREATE TABLE ev_05 (LIKE ev)`, `INSERT INTO ev_05 VALUES (50, '2026-05-05', 'x', 'y')`,
		`ALTER TABLE ev ATTACH PARTITION ev_05 FOR VALUES FROM ('2026-05-01') TO ('2026-06-01')`,
	}
	return []PartitionChange{
		{"detach while running", []string{`ALTER TABLE ev DETACH PARTITION ev_01`, `TRUNCATE ev_01`}, true, "partition public.ev_01 of source table public.ev was detached or dropped"},
		{"drop while stopped", []string{`DROP TABLE ev_03b`}, false, "partition public.ev_03b of source table public.ev was detached or dropped"},
		{"attach with rows while running", attach, true, "table public.ev_05 was attached as a partition of source table public.ev holding rows"},
		{"attach with rows while stopped", attach, false, "table public.ev_05 was attached as a partition of source table public.ev holding rows"},
	}
}()

// WithoutProgress is cs without its progress markers.
func WithoutProgress(cs []sluice.Change) []sluice.Change {
	var out []sluice.Change
	for _, c := range cs {
		if c.Op != sluice.OpProgress {
			out = append(out, c)
		}
	}
	return out
}

// DescribeChanges renders changes as "insert t(id=1) [1 a]; delete …" for
// comparisons and failure messages.
func DescribeChanges(cs []sluice.Change) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString("; ")
		}
		if c.Table == nil {
			fmt.Fprintf(&b, "%s %s", c.Op, c.Pos)
			continue
		}
		fmt.Fprintf(&b, "%s %s", c.Op, c.Table.Name.Name)
		if c.Schema != nil {
			b.WriteString(" [")
			for j, e := range c.Schema.Edits {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(DescribeEdit(e))
			}
			b.WriteString("]")
		}
		if c.Key != nil {
			b.WriteString(c.Table.FormatKey(c.Key))
		}
		if c.Row != nil {
			fmt.Fprint(&b, " ", []sluice.Value(c.Row))
		}
	}
	return b.String()
}

// DescribeEdit renders a schema change's edit as "add w=1.5", "drop w",
// "retype w", "not null w", "null w", "index i(a,b)", "unique i(a)",
// "drop index i", "rename w to w2" or "refused: …".
func DescribeEdit(e sluice.SchemaEdit) string {
	switch e.Kind {
	case sluice.AddColumn:
		s := "add " + e.Column + "=" + e.Fill.String()
		if e.Volatile {
			s = "add " + e.Column + " volatile"
		}
		return s
	case sluice.DropColumn:
		return "drop " + e.Column
	case sluice.AlterColumnType:
		return "retype " + e.Column
	case sluice.SetNotNull:
		return "not null " + e.Column
	case sluice.DropNotNull:
		return "null " + e.Column
	case sluice.CreateIndex:
		kind := "index "
		if e.Index.Unique {
			kind = "unique "
		}
		return kind + e.Index.Name + "(" + strings.Join(e.Index.Columns, ",") + ")"
	case sluice.DropIndex:
		return "drop index " + e.Index.Name
	case sluice.RenameColumn:
		return "rename " + e.Column + " to " + e.To
	}
	return "refused: " + e.Reason
}

// ExpectChanges fails the test unless got renders as want, joined by "; ".
func ExpectChanges(tb testing.TB, got []sluice.Change, want ...string) {
	tb.Helper()
	if g, w := DescribeChanges(got), strings.Join(want, "; "); g != w {
		tb.Fatalf("changes:\n got %s\nwant %s", g, w)
	}
}

// TextRowsPG runs query, whose columns are text (cast with ::text), on a
// PostgreSQL session and returns its rows as a reader returns them: each
// value sluice.Text, or sluice.Null for NULL.
func TextRowsPG(tb testing.TB, q Querier, query string, args ...any) []sluice.Row {
	tb.Helper()
	res, err := q.Query(context.Background(), query, args...)
	if err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	defer res.Close()
	var out []sluice.Row
	for res.Next() {
		vals, err := res.Values()
		if err != nil {
			tb.Fatalf("%s: %v", query, err)
		}
		row := make(sluice.Row, len(vals))
		for i, v := range vals {
			s, ok := v.(string)
			switch {
			case v == nil:
				row[i] = sluice.Null
			case ok:
				row[i] = sluice.Text(s)
			default:
				tb.Fatalf("%s: column %d is %T, not text", query, i, v)
			}
		}
		out = append(out, row)
	}
	if err := res.Err(); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return out
}

// OpenReader opens a source reader with open, failing the test with the
// error, and closes it when the test ends (or earlier, by the test).
func OpenReader[R interface{ Close() error }](tb testing.TB, open func(context.Context) (R, error)) R {
	tb.Helper()
	r, err := open(context.Background())
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}
