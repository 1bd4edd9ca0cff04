package stream

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/controller"
)

// pageReader hands out pages built before the stream started, each once
// (a read's slice is the caller's), then reports idle.
type pageReader struct {
	mu    sync.Mutex
	pages [][]sluice.Change
}

func (r *pageReader) Tables() []*sluice.Table { return []*sluice.Table{table} }

func (r *pageReader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pages) == 0 {
		r.mu.Unlock()
		defer r.mu.Lock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
		return nil, nil
	}
	p := r.pages[0]
	if len(p) > max {
		r.pages[0] = p[max:]
		return p[:max:max], nil
	}
	r.pages = r.pages[1:]
	return p, nil
}

func (r *pageReader) Ack(context.Context, sluice.Position) error { return nil }
func (r *pageReader) Close() error                               { return nil }

// nopTarget commits every batch at once.
type nopTarget struct{}

func (nopTarget) Apply(context.Context, *apply.Batch, sluice.Checkpoint) error { return nil }
func (nopTarget) Ping(context.Context) (time.Duration, error)                  { return time.Millisecond, nil }

type nopStore struct{}

func (nopStore) Commit(sluice.Checkpoint) error { return nil }
func (nopStore) SetError(_, _ string) error     { return nil }

// BenchmarkStream runs 100,000 inserts, read in pages of 1,000, through
// a stream to a target that commits at once: the stream's own cost per
// change from the reader to the batch (compaction included), for the
// single apply loop and for lanes.
func BenchmarkStream(b *testing.B) {
	const n, page = 100_000, 1000
	for _, lanes := range []int{1, 4} {
		b.Run("lanes_"+strconv.Itoa(lanes), func(b *testing.B) {
			newSizer := func() Sizer {
				return controller.NewBatch(controller.BatchConfig{Initial: 5000, Min: 5000, Max: 5000, Budget: time.Minute})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				r := &pageReader{}
				for i := 0; i < n; i += page {
					r.pages = append(r.pages, inserts(i, page))
				}
				b.StartTimer()
				s := New(Config{
					ID: "bench", Reader: r, Target: nopTarget{}, Store: nopStore{}, Batch: newSizer(),
					MinLanes: lanes, MaxLanes: lanes, NoOverlap: true,
					NewTarget: func(context.Context) (Target, error) { return nopTarget{}, nil },
					NewSizer:  newSizer,
				})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- s.Run(ctx) }()
				for s.Stats().Applied < n {
					time.Sleep(200 * time.Microsecond)
				}
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/change")
		})
	}
}
