package daemon

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
)

// pagedReader hands out its changes in pages of at most page, then fails
// with err (when set) or waits like an idle log reader. Like the log
// readers, a Read whose context ends gives back nothing it took.
type pagedReader struct {
	mu     sync.Mutex
	cs     []sluice.Change
	next   int
	page   int
	err    error
	closed bool
}

func (r *pagedReader) Tables() []*sluice.Table { return nil }
func (r *pagedReader) Start() sluice.Position  { return sluice.Position{} }
func (r *pagedReader) Ack(context.Context, sluice.Position) error {
	return nil
}

func (r *pagedReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

func (r *pagedReader) handedOut() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

func (r *pagedReader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	r.mu.Lock()
	if r.next == len(r.cs) {
		err := r.err
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
			return nil, nil
		}
	}
	defer r.mu.Unlock()
	n := min(max, r.page, len(r.cs)-r.next)
	// Capped: the caller owns it (source.Reader), and the changes after
	// it are handed out later.
	out := r.cs[r.next : r.next+n : r.next+n]
	r.next += n
	return out, nil
}

func changes(n int) []sluice.Change {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "t"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	cs := make([]sluice.Change, n)
	for i := range cs {
		cs[i] = sluice.Change{Table: tbl, Op: sluice.OpInsert, Row: sluice.Row{{Text: strconv.Itoa(i)}}, Pos: sluice.Position{Kind: "test", Token: strconv.Itoa(i)}}
	}
	return cs
}

// TestReadAhead: what was read ahead is handed out first, in order and in
// reads of at most the size asked, then the reader is read on; every
// change once. The read ahead stops at its byte limit, its error comes
// after its changes, and Close ends it and closes the reader.
func TestReadAhead(t *testing.T) {
	waitFor := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	readAll := func(t *testing.T, r reader, n int, sizes []int) []sluice.Change {
		t.Helper()
		var got []sluice.Change
		for i := 0; len(got) < n; i++ {
			max := sizes[i%len(sizes)]
			cs, err := r.Read(context.Background(), max)
			if err != nil {
				t.Fatal(err)
			}
			if len(cs) > max {
				t.Fatalf("Read(%d) returned %d changes", max, len(cs))
			}
			if cap(cs) != len(cs) {
				// The caller owns what Read returns (source.Reader).
				t.Fatalf("Read(%d) returned %d changes of capacity %d: an append would write over those handed out next", max, len(cs), cap(cs))
			}
			got = append(got, cs...)
		}
		return got
	}
	t.Run("in order, once", func(t *testing.T) {
		cs := changes(20000)
		src := &pagedReader{cs: cs, page: 700}
		var limit int64 // the bytes of the first 12000
		for i := range 12000 {
			limit += int64(cs[i].Size())
		}
		ctx, stop := context.WithCancel(context.Background())
		r := readAhead(ctx, stop, src, limit)
		waitFor(t, "the read ahead to reach its limit", func() bool { return src.handedOut() >= 12000 })
		time.Sleep(20 * time.Millisecond)
		if n := src.handedOut(); n > 12000+700 {
			t.Fatalf("read ahead %d changes, past its limit of 12000 by more than a page", n)
		}
		got := readAll(t, r, len(cs), []int{1000, 3, 4096, 250})
		if len(got) != len(cs) {
			t.Fatalf("read %d changes, want %d", len(got), len(cs))
		}
		for i := range got {
			if got[i].Pos != cs[i].Pos {
				t.Fatalf("change %d is %v, want %v", i, got[i].Pos, cs[i].Pos)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if !src.closed {
			t.Fatal("Close did not close the reader")
		}
	})
	t.Run("error after the changes", func(t *testing.T) {
		boom := errors.New("boom")
		src := &pagedReader{cs: changes(50), page: 7, err: boom}
		ctx, stop := context.WithCancel(context.Background())
		r := readAhead(ctx, stop, src, 1<<30)
		waitFor(t, "the read ahead to read everything", func() bool { return src.handedOut() == 50 })
		time.Sleep(10 * time.Millisecond)
		got := readAll(t, r, 50, []int{100})
		if len(got) != 50 {
			t.Fatalf("read %d changes, want 50", len(got))
		}
		if _, err := r.Read(context.Background(), 100); !errors.Is(err, boom) {
			t.Fatalf("Read after the changes: %v, want the reader's error", err)
		}
	})
	t.Run("close while reading ahead", func(t *testing.T) {
		src := &pagedReader{cs: changes(10), page: 10} // then idle
		ctx, stop := context.WithCancel(context.Background())
		r := readAhead(ctx, stop, src, 1<<30)
		waitFor(t, "the read ahead to start", func() bool { return src.handedOut() == 10 })
		done := make(chan error, 1)
		go func() { done <- r.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close still waiting for an idle read ahead")
		}
		if !src.closed {
			t.Fatal("Close did not close the reader")
		}
	})
}
