package mytrigger

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/tablecopy"
)

func copySQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func copyExec(t testing.TB, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

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
			x := rnd.IntN(100000)
			q = fmt.Sprintf("INSERT IGNORE INTO a VALUES (%d, 'ins %d', %d, %v, %d, FROM_UNIXTIME(%d.%03d), %d, x'%04x', %d.%02d, '{\"x\": %d}')",
				id, x, x, rnd.Float32()*1e6, 1901+x%254, 1e9+x, x%1000, x%1024, x%65536, x%1000, x%100, x)
		case 1:
			q = fmt.Sprintf("UPDATE a SET v = 'upd %d', n = n + 1, f = f * 3.7, y = 0, ts = ts + INTERVAL 1 SECOND, de = -de WHERE id = %d", rnd.IntN(1000), id)
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
	}{{"ftwrl", false, false}, {"no-lock", true, false}, {"no-reload", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			m := dbtest.Maria(t)
			dbn := dbtest.MariaDatabase(t)
			db := copySQL(t, m.DSN(dbn))
			copyExec(t, db,
				"CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n INT, f FLOAT, y YEAR, ts TIMESTAMP(3) NULL, bt BIT(10), vb VARBINARY(8), de DECIMAL(8,2), js JSON)",
				"CREATE TABLE b (k VARCHAR(20), j INT, v DOUBLE, PRIMARY KEY (k, j))",
				"INSERT INTO a SELECT seq, CONCAT('seed ', seq), seq, seq / 3, 2000 + seq % 50, FROM_UNIXTIME(1.5e9 + seq), seq, UNHEX(HEX(seq)), seq / 7, JSON_OBJECT('s', seq) FROM seq_1_to_200",
				"INSERT INTO b SELECT CONCAT('k', seq % 20), seq DIV 20, seq / 7 FROM seq_0_to_299")
			cfg := Config{Tables: []sluice.TableName{{Name: "a"}, {Name: "b"}}, Install: true}
			dsn := m.DSN(dbn)
			if tc.noReload {
				user := "u_" + dbn
				if len(user) > 32 {
					user = user[:32]
				}
				copyExec(t, db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'",
					"GRANT PROCESS ON *.* TO '"+user+"'@'%'",
					"GRANT ALL ON `"+dbn+"`.* TO '"+user+"'@'%'")
				t.Cleanup(func() { db.Exec("DROP USER '" + user + "'@'%'") })
				c, _ := gomysql.ParseDSN(dsn)
				c.User, c.Passwd = user, "pw"
				dsn = c.FormatDSN()
			}
			src := NewCopySource(dsn, cfg)
			cfg.Install = false
			src.NoGlobalLock = tc.noLock
			ctx := context.Background()

			// The install is part of the first Snapshot; the held
			// transaction below needs the triggers, so install first.
			if err := Install(ctx, db, cfg.Tables); err != nil {
				t.Fatal(err)
			}
			w := startCopyWriter(db, 1)
			w.waitCommits(t, 30)
			// A transaction holding a changelog id below the first
			// snapshot's highest one, committed after the snapshot: the
			// stream must carry it although later ids are in the snapshot.
			held, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			if _, err := held.ExecContext(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := held.ExecContext(ctx, "INSERT INTO a (id, v) VALUES (5000, 'held')"); err != nil {
				t.Fatal(err)
			}
			w.waitCommits(t, 10)
			var snaps []*tablecopy.Snapshot
			for i := range 2 { // the second is a resume's
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
				if i == 0 {
					if _, err := held.ExecContext(ctx, "COMMIT"); err != nil {
						t.Fatal(err)
					}
				}
				w.waitCommits(t, 30)
			}
			w.finish(t)
			copyExec(t, db, "INSERT INTO a (id, v) VALUES (-1, 'sentinel')")

			results := make([]map[string]tableRows, len(snaps))
			for i, snap := range snaps {
				rows := copySnapshot(t, snap)
				r, err := Open(ctx, dsn, cfg, snap.Position)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
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
				if i == 0 {
					found := false
					for _, c := range cs {
						found = found || (c.Table.Name.Name == "a" && c.Op == sluice.OpInsert && c.Row[0].Text == "5000")
					}
					if !found {
						t.Error("the held transaction's insert, committed after the first snapshot, was not streamed")
					}
				}
				applyChanges(t, rows, cs, false) // the boundary may replay (logged)
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
