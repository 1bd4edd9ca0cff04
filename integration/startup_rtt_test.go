package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

// startupCounter is a log handler that notes the proxy's round-trip count
// when the stream logs that it is streaming: the round trips the start-up
// cost before the first batch's transaction.
type startupCounter struct {
	slog.Handler
	proxy *wanproxy.Proxy
	at    *atomic.Int64 // -1 until the "streaming" line
}

func (h startupCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "streaming" {
		h.at.CompareAndSwap(-1, h.proxy.RoundTrips())
	}
	return h.Handler.Handle(ctx, r)
}

func (h startupCounter) WithAttrs(a []slog.Attr) slog.Handler {
	return startupCounter{h.Handler.WithAttrs(a), h.proxy, h.at}
}

// TestStartupRoundTrips counts, through the 96 ms proxy, the round trips
// to the target from the start of a stream until it streams — everything
// before its first batch's transaction: connecting, creating the checkpoint
// table, reading the checkpoints, the preflight of each table, the lanes'
// routing (unique and foreign keys; lanes up to 16 as by default), the
// transaction time limits and the link's RTT. Issue 14 allows at most 5
// (a PostgreSQL connection's SCRAM authentication takes 3 of them).
// Both a new stream (--from-now, whose start is recorded on the target)
// and a restart over a backlog are counted, and the backlog must then be
// on the target, compared independently.
func TestStartupRoundTrips(t *testing.T) {
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			ctx := context.Background()
			src, dst := newEndpoint(t, eng), newEndpoint(t, eng)
			ddl := []string{
				"CREATE TABLE rt_parent (id bigint PRIMARY KEY, v varchar(40) NOT NULL)",
				"CREATE TABLE rt_child (id bigint PRIMARY KEY, parent bigint NOT NULL REFERENCES rt_parent (id), code varchar(20) NOT NULL UNIQUE)",
			}
			for _, e := range []*endpoint{src, dst} {
				for _, q := range ddl {
					if err := e.exec(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
			}
			dstURL, proxy := dst.viaProxy(t, 48*time.Millisecond)
			tables := []string{"rt_parent", "rt_child"}
			o := logOptions(t, "rt", src, dstURL, tables)
			o.MaxLanes = 16
			dropSlotAtCleanup(t, src, o.ID, tables)
			counted := func(what string) int64 {
				at := &atomic.Int64{}
				at.Store(-1)
				o.Logger = slog.New(startupCounter{slog.NewTextHandler(testWriter{t}, nil), proxy, at})
				proxy.ResetRoundTrips()
				run := startStream(t, o)
				run.waitStarted(t, 60*time.Second)
				n := at.Load()
				t.Logf("%s: %d round trips to the target before streaming", what, n)
				if n < 0 || n > 5 {
					t.Errorf("%s: %d round trips to the target before the first batch, want at most 5", what, n)
				}
				if what == "restart" {
					waitEqual(t, src, dst, tables, 60*time.Second, run)
				}
				if err := run.stop(t); err != nil {
					t.Fatal(err)
				}
				return n
			}
			counted("new stream")
			for i := range 50 {
				q := src.sqlFor("INSERT INTO rt_parent VALUES (?, ?)")
				if err := src.exec(ctx, q, i, fmt.Sprint("p", i)); err != nil {
					t.Fatal(err)
				}
				q = src.sqlFor("INSERT INTO rt_child VALUES (?, ?, ?)")
				if err := src.exec(ctx, q, i, i, strings.Repeat("c", i%7)+fmt.Sprint(i)); err != nil {
					t.Fatal(err)
				}
			}
			o.FromNow = false
			counted("restart")
		})
	}
}
