package binlog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/internal/mycopy/mycopytest"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// insertA and updateA are the writer's statements of table a, whose
// columns this package's test chooses.
func insertA(rnd *rand.Rand, id int) string {
	return fmt.Sprintf("INSERT IGNORE INTO a VALUES (%d, 'ins %d', %d)", id, rnd.IntN(1000), rnd.IntN(1000))
}

func updateA(rnd *rand.Rand, id int) string {
	return fmt.Sprintf("UPDATE a SET v = 'upd %d', n = n + 1 WHERE id = %d", rnd.IntN(1000), id)
}

// TestCopySnapshotBoundary: a copy through the snapshot's readers plus the
// stream opened at its position give exactly the source's final rows
// while a writer commits before, during and after the snapshot; a second
// snapshot (a resume) does too.
func TestCopySnapshotBoundary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noLock bool
		// noReload runs the copy as a user without the RELOAD privilege
		// FLUSH TABLES WITH READ LOCK needs.
		noReload bool
	}{{"ftwrl", false, false}, {"snapshot-status", true, false}, {"no-reload", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			d := utcDatabase(t)
			dbn, db := d.Name, d.My
			dbtest.ExecSQL(t, db,
				"CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
				"CREATE TABLE b (k VARCHAR(20), j INT, v DOUBLE, PRIMARY KEY (k, j))",
				"INSERT INTO a SELECT seq, CONCAT('seed ', seq), seq FROM seq_1_to_200",
				"INSERT INTO b SELECT CONCAT('k', seq % 20), seq DIV 20, seq / 7 FROM seq_0_to_299")
			cfg := Config{Tables: []sluice.TableName{tn(dbn, "a"), tn(dbn, "b")}}
			dsn := d.DSN
			if tc.noReload {
				user := "u_" + dbn
				if len(user) > 32 {
					user = user[:32]
				}
				dbtest.ExecSQL(t, db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'",
					"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '"+user+"'@'%'",
					"GRANT SELECT ON `"+dbn+"`.* TO '"+user+"'@'%'")
				t.Cleanup(func() { db.Exec("DROP USER '" + user + "'@'%'") })
				c, _ := gomysql.ParseDSN(dsn)
				c.User, c.Passwd = user, "pw"
				dsn = c.FormatDSN()
			}
			src := NewCopySource(dsn, cfg)
			src.NoGlobalLock = tc.noLock
			ctx := context.Background()

			w := mycopytest.StartWriter(db, 1, insertA, updateA)
			w.WaitCommits(t, 30)
			var snaps []*tablecopy.Snapshot
			for range 2 { // the second is a resume's
				start := time.Now()
				snap, err := src.Snapshot(ctx, 3)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("snapshot at %s in %s", snap.Position.Token, time.Since(start))
				defer snap.Close()
				if snap.Engine != "mysql" || len(snap.Readers) != 3 || len(snap.Tables) != 2 || snap.Position.Kind != Kind {
					t.Fatalf("snapshot %+v", snap)
				}
				snaps = append(snaps, snap)
				w.WaitCommits(t, 30)
			}
			w.Finish(t)
			dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (-1, 'sentinel', 0)")

			results := make([]map[string]mycopytest.Rows, len(snaps))
			for i, snap := range snaps {
				rows := mycopytest.CopySnapshot(t, snap)
				r := open(t, dsn, cfg, snap.Position)
				var cs []sluice.Change
				deadline := time.Now().Add(30 * time.Second)
			read:
				for {
					if time.Now().After(deadline) {
						t.Fatalf("snapshot %d: no sentinel after %d changes", i, len(cs))
					}
					got, err := r.Read(ctx, 1000)
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range got {
						if c.Op == sluice.OpProgress {
							continue
						}
						cs = append(cs, c)
						if c.Table.Name.Name == "a" && c.Op == sluice.OpInsert && c.Row[0].Text == "-1" {
							break read
						}
					}
				}
				mycopytest.ApplyChanges(t, rows, cs, !tc.noLock && !tc.noReload)
				results[i] = rows
				t.Logf("snapshot %d: %d changes streamed after it", i, len(cs))
			}

			final, err := src.Snapshot(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer final.Close()
			want := mycopytest.CopySnapshot(t, final)
			for i, got := range results {
				for name, wt := range want {
					gt := got[name]
					for k, wr := range wt {
						if gr, ok := gt[k]; !ok {
							t.Errorf("snapshot %d: %s row %s missing", i, name, k)
						} else if tablecopy.EncodeBound(gr) != tablecopy.EncodeBound(wr) {
							t.Errorf("snapshot %d: %s row %s is %v, source has %v", i, name, k, gr, wr)
						}
					}
					for k := range gt {
						if _, ok := wt[k]; !ok {
							t.Errorf("snapshot %d: %s row %s is not on the source", i, name, k)
						}
					}
				}
			}
		})
	}
}

// TestCopySnapshotLockTimeout: a long-running write keeps FLUSH TABLES
// WITH READ LOCK from taking the lock; the snapshot fails within LockWait
// and says what holds it.
func TestCopySnapshotLockTimeout(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY)", "INSERT INTO a VALUES (1)")
	ctx := context.Background()
	slow, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	var slowID int64
	if err := slow.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&slowID); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		slow.ExecContext(ctx, "UPDATE a SET id = id + SLEEP(30)")
	}()
	defer func() {
		dbtest.ExecSQL(t, db, fmt.Sprintf("KILL QUERY %d", slowID))
		<-done
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'UPDATE a SET%'", slowID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow statement did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	src := NewCopySource(d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}})
	src.LockWait = time.Second
	start := time.Now()
	snap, err := src.Snapshot(ctx, 2)
	if err == nil {
		snap.Close()
		t.Fatal("Snapshot took the lock past a running statement")
	}
	if !strings.Contains(err.Error(), "long-running statement") || time.Since(start) > 5*time.Second {
		t.Fatalf("after %s: %v", time.Since(start), err)
	}
	t.Logf("after %s: %v", time.Since(start), err)
}
