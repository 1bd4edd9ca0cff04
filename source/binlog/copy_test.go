package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// copyWriter commits transactions of inserts, updates (key changes too)
// and deletes on tables a and b until stopped, counting the commits.
type copyWriter struct {
	db      *sql.DB
	commits atomic.Int64
	stop    chan struct{}
	done    chan error
}

func startCopyWriter(db *sql.DB, seed uint64) *copyWriter {
	w := &copyWriter{db: db, stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		rnd := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-w.stop:
				w.done <- nil
				return
			default:
			}
			if err := w.txn(rnd); err != nil {
				w.done <- err
				return
			}
			w.commits.Add(1)
		}
	}()
	return w
}

func (w *copyWriter) txn(rnd *rand.Rand) error {
	tx, err := w.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for range 1 + rnd.IntN(3) {
		id := 1 + rnd.IntN(400)
		k := fmt.Sprintf("k%d", rnd.IntN(20))
		var q string
		switch rnd.IntN(8) {
		case 0:
			q = fmt.Sprintf("INSERT IGNORE INTO a VALUES (%d, 'ins %d', %d)", id, rnd.IntN(1000), rnd.IntN(1000))
		case 1:
			q = fmt.Sprintf("UPDATE a SET v = 'upd %d', n = n + 1 WHERE id = %d", rnd.IntN(1000), id)
		case 2:
			q = fmt.Sprintf("UPDATE IGNORE a SET id = %d WHERE id = %d", 1+rnd.IntN(400), id)
		case 3:
			q = fmt.Sprintf("DELETE FROM a WHERE id = %d", id)
		case 4:
			q = fmt.Sprintf("INSERT IGNORE INTO b VALUES ('%s', %d, %v)", k, rnd.IntN(30), rnd.Float64())
		case 5:
			q = fmt.Sprintf("UPDATE b SET v = %v WHERE k = '%s'", rnd.Float64(), k)
		case 6:
			q = fmt.Sprintf("UPDATE IGNORE b SET k = 'k%d' WHERE k = '%s' AND j = %d", rnd.IntN(20), k, rnd.IntN(30))
		case 7:
			q = fmt.Sprintf("DELETE FROM b WHERE k = '%s' AND j = %d", k, rnd.IntN(30))
		}
		if _, err := tx.Exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return tx.Commit()
}

// waitCommits polls until the writer has committed n more transactions.
func (w *copyWriter) waitCommits(t testing.TB, n int64) {
	t.Helper()
	target := w.commits.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for w.commits.Load() < target {
		select {
		case err := <-w.done:
			t.Fatalf("writer stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer committed %d transactions, want %d", w.commits.Load(), target)
		}
		time.Sleep(5 * time.Millisecond) // the writer's pace, not a wait for a state
	}
}

func (w *copyWriter) finish(t testing.TB) {
	t.Helper()
	close(w.stop)
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
}

// tableRows is a table's rows by encoded key.
type tableRows map[string]sluice.Row

// copySnapshot reads every table of snap through its readers, chunks
// spread over them.
func copySnapshot(t testing.TB, snap *tablecopy.Snapshot) map[string]tableRows {
	t.Helper()
	ctx := context.Background()
	out := map[string]tableRows{}
	n := 0
	for _, tb := range snap.Tables {
		rows := tableRows{}
		out[tb.Name.Name] = rows
		rs, _, err := snap.Readers[0].Split(ctx, tb, 37)
		if err != nil {
			t.Fatal(err)
		}
		for _, rg := range rs {
			rd := snap.Readers[n%len(snap.Readers)]
			n++
			err := rd.Read(ctx, tb, rg, func(b []sluice.Row) error {
				for _, r := range b {
					k := tablecopy.EncodeBound(tb.KeyOf(r))
					if _, dup := rows[k]; dup {
						return fmt.Errorf("%s: key %s read twice", tb.Name, k)
					}
					rows[k] = append(sluice.Row(nil), r...)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// applyChanges applies a stream's changes to rows; strict requires that
// each change finds the state the source had (an insert's key absent, an
// update's or delete's present): a change applied twice or missed breaks
// that.
func applyChanges(t testing.TB, rows map[string]tableRows, cs []sluice.Change, strict bool) {
	t.Helper()
	for _, c := range cs {
		tr := rows[c.Table.Name.Name]
		switch c.Op {
		case sluice.OpInsert:
			k := tablecopy.EncodeBound(c.Table.KeyOf(c.Row))
			if _, ok := tr[k]; ok && strict {
				t.Errorf("%s: insert of %s, which the copy already has (applied twice?)", c.Table.Name, k)
			}
			tr[k] = c.Row
		case sluice.OpUpdate, sluice.OpDelete:
			old := tablecopy.EncodeBound(c.Key)
			if _, ok := tr[old]; !ok && strict {
				t.Errorf("%s: %s of %s, which the copy does not have (missed?)", c.Table.Name, c.Op, old)
			}
			delete(tr, old)
			if c.Op == sluice.OpUpdate {
				tr[tablecopy.EncodeBound(c.Table.KeyOf(c.Row))] = c.Row
			}
		}
	}
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
			m := dbtest.Maria(t)
			dbn := dbtest.MariaDatabase(t)
			db := sqlDB(t, m.DSN(dbn))
			exec(t, db,
				"CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
				"CREATE TABLE b (k VARCHAR(20), j INT, v DOUBLE, PRIMARY KEY (k, j))",
				"INSERT INTO a SELECT seq, CONCAT('seed ', seq), seq FROM seq_1_to_200",
				"INSERT INTO b SELECT CONCAT('k', seq % 20), seq DIV 20, seq / 7 FROM seq_0_to_299")
			cfg := Config{Tables: []sluice.TableName{tn(dbn, "a"), tn(dbn, "b")}}
			dsn := m.DSN(dbn)
			if tc.noReload {
				user := "u_" + dbn
				if len(user) > 32 {
					user = user[:32]
				}
				exec(t, db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'",
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

			w := startCopyWriter(db, 1)
			w.waitCommits(t, 30)
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
				w.waitCommits(t, 30)
			}
			w.finish(t)
			exec(t, db, "INSERT INTO a VALUES (-1, 'sentinel', 0)")

			results := make([]map[string]tableRows, len(snaps))
			for i, snap := range snaps {
				rows := copySnapshot(t, snap)
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
				applyChanges(t, rows, cs, !tc.noLock && !tc.noReload)
				results[i] = rows
				t.Logf("snapshot %d: %d changes streamed after it", i, len(cs))
			}

			final, err := src.Snapshot(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer final.Close()
			want := copySnapshot(t, final)
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
	m := dbtest.Maria(t)
	dbn := dbtest.MariaDatabase(t)
	db := sqlDB(t, m.DSN(dbn))
	exec(t, db, "CREATE TABLE a (id INT PRIMARY KEY)", "INSERT INTO a VALUES (1)")
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
		exec(t, db, fmt.Sprintf("KILL QUERY %d", slowID))
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
	src := NewCopySource(m.DSN(dbn), Config{Tables: []sluice.TableName{tn(dbn, "a")}})
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
