package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

func chainCP(seq uint64) sluice.Checkpoint {
	return sluice.Checkpoint{Stream: "chain", Seq: seq, Applied: seq,
		Position: sluice.Position{Kind: "binlog", Token: fmt.Sprintf("mysql-bin.000001:%d", seq)}}
}

// waitStuck polls until a session runs a statement starting with prefix
// (one that ends at once unless it waits for a lock); it fails the test
// should one of ended return first.
func waitStuck(t *testing.T, db *sql.DB, prefix string, ended ...chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, e := range ended {
			select {
			case err := <-e:
				t.Fatalf("a transaction that must wait for a lock ended: %v", err)
			default:
			}
		}
		var got int
		if err := db.QueryRow("SELECT count(*) FROM information_schema.PROCESSLIST WHERE info LIKE concat(?, '%')", prefix).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session runs %q after 10 s", prefix)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChain is apply/postgres's TestChain on MariaDB: a transaction sent
// on a second connection while the one before it is held up waits for it,
// commits after it when it commits, and fails retryably, committing
// nothing, when it does not.
func TestChain(t *testing.T) {
	each(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t, "CREATE TABLE c (id int PRIMARY KEY, v text)")
		c := table("c", []int{0}, "id int", "v text")
		ctx := context.Background()
		a, b := openTarget(t, dsn, v.mode, v.multi), openTarget(t, dsn, v.mode, v.multi)
		for _, tg := range []*Target{a, b} {
			if err := tg.Preflight(ctx, []*sluice.Table{c}); err != nil {
				t.Fatal(err)
			}
		}
		batch := func(val string) *apply.Batch {
			return apply.Compact([]sluice.Change{ins(c, "1", val)}, nil)
		}
		if err := a.Apply(ctx, batch("first"), chainCP(1)); err != nil {
			t.Fatal(err)
		}
		value := func() (string, uint64) {
			var val string
			var seq uint64
			if err := db.QueryRow("SELECT (SELECT v FROM c WHERE id = 1), (SELECT seq FROM "+checkpointTable+" WHERE stream = 'chain')").Scan(&val, &seq); err != nil {
				t.Fatal(err)
			}
			return val, seq
		}
		for _, commits := range []bool{true, false} {
			t.Run(fmt.Sprintf("first commits %v", commits), func(t *testing.T) {
				before, seq := value()
				// A session holding row 1 keeps a's transaction waiting
				// after it locked the checkpoint row.
				holder, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Close()
				// Whatever happens, the lock goes, so that the targets can
				// be closed.
				defer holder.ExecContext(ctx, "ROLLBACK")
				if _, err := holder.ExecContext(ctx, "START TRANSACTION"); err != nil {
					t.Fatal(err)
				}
				if _, err := holder.ExecContext(ctx, "SELECT * FROM c WHERE id = 1 FOR UPDATE"); err != nil {
					t.Fatal(err)
				}
				var aID int64
				if err := a.conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&aID); err != nil {
					t.Fatal(err)
				}
				aErr, bErr := make(chan error, 1), make(chan error, 1)
				written := make(chan struct{})
				go func() {
					aErr <- a.ApplyAfter(ctx, batch("a"), chainCP(seq+1), 0, func() { close(written) })
				}()
				<-written
				waitStuck(t, db, "INSERT INTO `c`", aErr)
				go func() { bErr <- b.ApplyAfter(ctx, batch("b"), chainCP(seq+2), seq+1, nil) }()
				waitStuck(t, db, "SELECT IF(c.`seq`", aErr, bErr)
				if commits {
					if _, err := holder.ExecContext(ctx, "COMMIT"); err != nil {
						t.Fatal(err)
					}
				} else {
					// a is killed: b must not commit without it.
					if _, err := holder.ExecContext(ctx, fmt.Sprintf("KILL %d", aID)); err != nil {
						t.Fatal(err)
					}
					if _, err := holder.ExecContext(ctx, "ROLLBACK"); err != nil {
						t.Fatal(err)
					}
				}
				ea, eb := <-aErr, <-bErr
				val, got := value()
				if commits {
					if ea != nil || eb != nil {
						t.Fatalf("a: %v, b: %v; want both committed", ea, eb)
					}
					if val != "b" || got != seq+2 {
						t.Fatalf("v = %q, checkpoint %d; want b, %d (b after a)", val, got, seq+2)
					}
					return
				}
				if retry, _ := apply.IsRetryable(ea); ea == nil || !retry {
					t.Fatalf("a: %v; want a retryable error", ea)
				}
				if retry, _ := apply.IsRetryable(eb); !errors.Is(eb, apply.ErrChainBroken) || !retry {
					t.Fatalf("b: %v; want a retryable %v", eb, apply.ErrChainBroken)
				}
				if val != before || got != seq {
					t.Fatalf("v = %q, checkpoint %d; want %q, %d: neither a's nor b's", val, got, before, seq)
				}
			})
		}
	})
}
