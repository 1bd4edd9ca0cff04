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
