package mytrigger

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	x := rnd.IntN(100000)
	return fmt.Sprintf("INSERT IGNORE INTO a VALUES (%d, 'ins %d', %d, %v, %d, FROM_UNIXTIME(%d.%03d), %d, x'%04x', %d.%02d, '{\"x\": %d}')",
		id, x, x, rnd.Float32()*1e6, 1901+x%254, 1e9+x, x%1000, x%1024, x%65536, x%1000, x%100, x)
}

func updateA(rnd *rand.Rand, id int) string {
	return fmt.Sprintf("UPDATE a SET v = 'upd %d', n = n + 1, f = f * 3.7, y = 0, ts = ts + INTERVAL 1 SECOND, de = -de WHERE id = %d", rnd.IntN(1000), id)
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
			db := dbtest.OpenMy(t, m.DSN(dbn), nil)
			dbtest.ExecSQL(t, db,
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
				dbtest.ExecSQL(t, db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'",
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
			w := mycopytest.StartWriter(db, 1, insertA, updateA)
			w.WaitCommits(t, 30)
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
			w.WaitCommits(t, 10)
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
				w.WaitCommits(t, 30)
			}
			w.Finish(t)
			dbtest.ExecSQL(t, db, "INSERT INTO a (id, v) VALUES (-1, 'sentinel')")

			results := make([]map[string]mycopytest.Rows, len(snaps))
			for i, snap := range snaps {
				rows := mycopytest.CopySnapshot(t, snap)
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
				mycopytest.ApplyChanges(t, rows, cs, false) // the boundary may replay (logged)
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
