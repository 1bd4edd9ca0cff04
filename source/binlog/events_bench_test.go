package binlog

import (
	"context"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

// BenchmarkTakeEvents: taking a full syncer buffer's events one by one,
// each with a deadline of its own (how stream waited before), against
// taking what the buffer holds at once (DumpEvents).
func BenchmarkTakeEvents(b *testing.B) {
	const n = 64 // the syncer's EventCacheCount
	ev := &replication.BinlogEvent{}
	fill := func(st *replication.BinlogStreamer) {
		for range n {
			if err := st.AddEventToStreamer(ev); err != nil {
				b.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	b.Run("deadline per event", func(b *testing.B) {
		st := replication.NewBinlogStreamer()
		b.ReportAllocs()
		for b.Loop() {
			fill(st)
			for range n {
				ectx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Minute))
				if _, err := st.GetEvent(ectx); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		}
	})
	b.Run("dump", func(b *testing.B) {
		st := replication.NewBinlogStreamer()
		b.ReportAllocs()
		for b.Loop() {
			fill(st)
			if got := st.DumpEvents(); len(got) != n {
				b.Fatalf("took %d events, want %d", len(got), n)
			}
		}
	})
}
