package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// chainCP is checkpoint seq of stream "chain", lane 0.
func chainCP(seq uint64) sluice.Checkpoint {
	return sluice.Checkpoint{Stream: "chain", Seq: seq, Applied: seq,
		Position: sluice.Position{Kind: "pglogical", Token: fmt.Sprintf("0/%X:0", seq)}}
}

// waitLockWaiters polls until n backends of the database wait for a lock.
func waitLockWaiters(t *testing.T, admin *pgx.Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		if err := admin.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends wait for a lock after 10 s, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChain sends a lane's transaction on a second connection while the
// one before it is held up on the target: it must wait for it and commit
// after it when it commits, and fail retryably, committing nothing, when
// it does not.
func TestChain(t *testing.T) {
	modes(t, func(t *testing.T, mode Mode) {
		url, admin := testDB(t, "CREATE TABLE c (id bigint PRIMARY KEY, v text NOT NULL)")
		tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "c"}, Key: []int{0},
			Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "v", Type: "text"}}}
		ctx := context.Background()
		a, b := openTarget(t, url, mode), openTarget(t, url, mode)
		if err := a.Preflight(ctx, []*sluice.Table{tbl}); err != nil {
			t.Fatal(err)
		}
		if err := b.Preflight(ctx, []*sluice.Table{tbl}); err != nil {
			t.Fatal(err)
		}
		batch := func(v string) *apply.Batch {
			return apply.Compact([]sluice.Change{ins(tbl, "1", v)}, nil)
		}
		if err := a.Apply(ctx, batch("first"), chainCP(1)); err != nil {
			t.Fatal(err)
		}
		value := func() (string, uint64) {
			var v string
			var seq uint64
			if err := admin.QueryRow(ctx, "SELECT (SELECT v FROM c WHERE id = 1), (SELECT seq FROM sluice.checkpoint WHERE stream = 'chain')").Scan(&v, &seq); err != nil {
				t.Fatal(err)
			}
			return v, seq
		}

		for _, commits := range []bool{true, false} {
			t.Run(fmt.Sprintf("first commits %v", commits), func(t *testing.T) {
				before, seq := value()
				// A session holding row 1 keeps a's transaction waiting
				// after it locked the checkpoint row.
				holder, err := pgx.Connect(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Close(ctx)
				if _, err := holder.Exec(ctx, "BEGIN; SELECT * FROM c WHERE id = 1 FOR UPDATE"); err != nil {
					t.Fatal(err)
				}
				aErr, bErr := make(chan error, 1), make(chan error, 1)
				written := make(chan struct{})
				go func() {
					aErr <- a.ApplyAfter(ctx, batch("a"), chainCP(seq+1), 0, func() { close(written) })
				}()
				<-written
				waitLockWaiters(t, admin, 1)
				go func() { bErr <- b.ApplyAfter(ctx, batch("b"), chainCP(seq+2), seq+1, nil) }()
				waitLockWaiters(t, admin, 2)
				if commits {
					if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
						t.Fatal(err)
					}
				} else {
					// a is killed: b must not commit without it.
					if _, err := holder.Exec(ctx, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO%c%'"); err != nil {
						t.Fatal(err)
					}
				}
				ea, eb := <-aErr, <-bErr
				v, got := value()
				if commits {
					if ea != nil || eb != nil {
						t.Fatalf("a: %v, b: %v; want both committed", ea, eb)
					}
					if v != "b" || got != seq+2 {
						t.Fatalf("v = %q, checkpoint %d; want b, %d (b after a)", v, got, seq+2)
					}
					return
				}
				if retry, _ := apply.IsRetryable(ea); ea == nil || !retry {
					t.Fatalf("a: %v; want a retryable error", ea)
				}
				if retry, _ := apply.IsRetryable(eb); !errors.Is(eb, apply.ErrChainBroken) || !retry {
					t.Fatalf("b: %v; want a retryable %v", eb, apply.ErrChainBroken)
				}
				if v != before || got != seq {
					t.Fatalf("v = %q, checkpoint %d; want %q, %d: neither a's nor b's", v, got, before, seq)
				}
			})
		}
		// A check against a stream without a row fails too.
		err := b.ApplyAfter(ctx, batch("x"), sluice.Checkpoint{Stream: "other", Seq: 2, Position: chainCP(2).Position}, 1, nil)
		if !errors.Is(err, apply.ErrChainBroken) {
			t.Fatalf("chained on a stream with no checkpoint row: %v; want %v", err, apply.ErrChainBroken)
		}
	})
}
