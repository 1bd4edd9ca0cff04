package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/verify"
)

// TestAddColumnVolatileDefault is issue 28's tenth class: ADD COLUMN with a
// volatile default (PostgreSQL random(), MariaDB uuid()) on a populated
// source table while it streams. The rows that existed get values of their
// own on the source, and no row event carries them: a target given the
// column by the same DDL (as the README once said to do, "add it to the
// target first") computes other values, and the tables stay different
// with nothing in the log. Wanted: the stream stops at the change, naming
// the table, the column and why, and goes on once started again.
func TestAddColumnVolatileDefault(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	for i, tc := range []struct {
		engine daemon.Engine
		ddl    string
	}{
		{daemon.EnginePostgres, "ALTER TABLE vol ADD COLUMN r float8 DEFAULT random()"},
		{daemon.EngineMySQL, "ALTER TABLE vol ADD COLUMN r varchar(40) DEFAULT (uuid())"},
	} {
		t.Run(string(tc.engine), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src, dst := newEndpoint(t, tc.engine), newEndpoint(t, tc.engine)
			for _, e := range []*endpoint{src, dst} {
				if err := e.exec(ctx, "CREATE TABLE vol (id int PRIMARY KEY, v int)"); err != nil {
					t.Fatal(err)
				}
				for id := 1; id <= 20; id++ {
					if err := e.exec(ctx, e.sqlFor("INSERT INTO vol VALUES (?, ?)"), id, id); err != nil {
						t.Fatal(err)
					}
				}
			}
			id := fmt.Sprintf("vol%d", i)
			o := logOptions(t, id, src, dst.url, []string{"vol"})
			dropSlotAtCleanup(t, src, id, []string{"vol"})
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			// The target first, as the README said; then the source, and a
			// change after it.
			for _, e := range []*endpoint{dst, src} {
				if err := e.exec(ctx, tc.ddl); err != nil {
					t.Fatal(err)
				}
			}
			if err := src.exec(ctx, "UPDATE vol SET v = v + 1 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(45 * time.Second)
			for {
				select {
				case err := <-run.done:
					run.done <- err
					if err == nil || !strings.Contains(err.Error(), "column r was added") || !strings.Contains(err.Error(), "values no row event carries") ||
						!strings.Contains(err.Error(), "vol") || !strings.Contains(err.Error(), "--repair") {
						t.Fatalf("the stream stopped, but not naming the table, the column, why and the fix: %v", err)
					}
					t.Logf("stopped: %v", err)
					// Started again, it goes on from the change (the target
					// has the column), and the repair the stop named copies
					// the existing rows' values.
					run2 := startStream(t, o)
					run2.waitStarted(t, 60*time.Second)
					if err := src.exec(ctx, "UPDATE vol SET v = v + 1 WHERE id = 2"); err != nil {
						t.Fatal(err)
					}
					repairTables(t, src, dst, []string{"vol"})
					waitEqualDB(t, src.dbOf(), dst.dbOf(), []string{"vol"}, 30*time.Second, run2)
					return
				default:
				}
				diffs, err := dbtest.CompareTables(ctx, src.dbOf(), dst.dbOf(), "vol")
				if err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the stream ran on for 45 s after an ADD COLUMN with a volatile default, the target differing from the source:\n%s", diffs)
				}
				time.Sleep(200 * time.Millisecond) // polling interval, not a wait for replication
			}
		})
	}
}

// repairTables runs sluice verify's repair over tables, as
// `sluice verify --repair` does.
func repairTables(t *testing.T, src, dst *endpoint, tables []string) {
	t.Helper()
	ctx := context.Background()
	cfg := openVerify(t, src, dst, tables)
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc, closeTarget, err := verify.OpenRepair(ctx, src.url, dst.url, cfg.Source, verify.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeTarget()
	if _, err := verify.Repair(ctx, cfg, rc, rep); err != nil {
		t.Fatal(err)
	}
}
