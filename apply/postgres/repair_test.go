package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// TestRepairHoldsStreamBatches: a repair of a stream's target holds the
// stream's batches off from before it reads until it commits: a batch
// sent while the repair's read runs waits on the fence row, and commits
// after the repair, on top of its rows. The repair writes no checkpoint,
// and a stream without a fence row is refused.
func TestRepairHoldsStreamBatches(t *testing.T) {
	url, admin := testDB(t, `CREATE TABLE r (id int PRIMARY KEY, v text)`, `INSERT INTO r VALUES (1, 'old'), (2, 'extra')`)
	ctx := context.Background()
	stream, repairer := openTarget(t, url, Pipelined), openTarget(t, url, Pipelined)
	if _, err := stream.Fence(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "r"}, Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "v", Type: "text"}}, Key: []int{0}}
	cp := sluice.Checkpoint{Stream: "s", Seq: 1, Position: sluice.Position{Kind: "pglogical", Token: "0/1:1"}}
	applied := make(chan error, 1)
	err := repairer.Repair(ctx, "s", []*sluice.Table{tbl}, func(ctx context.Context) (*apply.Batch, error) {
		go func() {
			applied <- stream.Apply(ctx, &apply.Batch{Tables: []*apply.TableBatch{{Table: tbl, Upserts: []sluice.Row{row("1", "stream")}}}}, cp)
		}()
		// The stream's batch waits for the fence row's lock.
		deadline := time.Now().Add(10 * time.Second)
		for {
			var waiting int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
				return nil, err
			}
			if waiting > 0 {
				break
			}
			select {
			case err := <-applied:
				t.Errorf("the stream's batch committed while the repair held its fence (err %v)", err)
				return nil, context.Canceled
			default:
			}
			if time.Now().After(deadline) {
				t.Error("the stream's batch did not wait for the repair")
				return nil, context.Canceled
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
		return &apply.Batch{Tables: []*apply.TableBatch{{Table: tbl, Deletes: []sluice.Row{row("2")}, Upserts: []sluice.Row{row("1", "repair")}}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(dump(t, admin, "r"), " "); got != "(1,stream)" {
		t.Fatalf("after the repair and the stream's batch: %s, want (1,stream)", got)
	}
	if got, ok, err := stream.ReadCheckpoint(ctx, "s"); err != nil || !ok || got.Seq != 1 {
		t.Fatalf("checkpoint %+v, %v, %v: want the stream's seq 1", got, ok, err)
	}
	err = repairer.Repair(ctx, "nofence", []*sluice.Table{tbl}, func(context.Context) (*apply.Batch, error) {
		t.Error("read ran without the fence")
		return &apply.Batch{}, nil
	})
	if err == nil || !strings.Contains(err.Error(), `stream "nofence" has no row`) {
		t.Fatalf("repair of a stream without a fence row: %v", err)
	}
}
