package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/verify"
)

// TestRepairWaitsForUnseenCommits is issue 28's item 9: a source that
// holds a commit back from its readers after its log has given it to the
// stream. PostgreSQL with synchronous_standby_names naming a standby that
// never connects: the committing session waits for it with its commit
// record flushed, logical decoding sends the change, the stream applies
// it, and no other session sees it. MariaDB with semi-synchronous
// replication waiting after the binlog sync (AFTER_SYNC) and no replica:
// the binlog dump sends the transaction while InnoDB has not committed
// it. Either way the source's readers still see the old row, verify
// reports the row as different, and a repair that read the source then
// wrote the old row over the new one, which nothing mended once the
// commit became visible (the stream had applied it already). The repair
// must wait until its snapshot holds what the stream applied: it fails,
// writing nothing, while the commit stays unseen past --catch-up, and
// once the commit is released it writes the new row. Each source is a
// private server, since the setting holds back every commit of a server.
func TestRepairWaitsForUnseenCommits(t *testing.T) {
	// Serial, although its servers are its own: hold() relies on the
	// server's reload (pg_reload_conf) landing before the next commit, and
	// under the parallel pool's CPU load it once did not ("the hazard is
	// not staged").
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			t.Parallel()
			repairWaitsForUnseen(t, eng)
		})
	}
}

func repairWaitsForUnseen(t *testing.T, eng daemon.Engine) {
	ctx := context.Background()
	src := privateEndpoint(t, eng)
	dst := newEndpoint(t, daemon.EnginePostgres)
	for _, e := range []*endpoint{src, dst} {
		for _, q := range []string{"CREATE TABLE vt (id integer PRIMARY KEY, name varchar(20))", "INSERT INTO vt VALUES (1, 'old'), (2, 'old'), (3, 'old')"} {
			if err := e.exec(ctx, q); err != nil {
				t.Fatalf("%s: %s: %v", e.engine, q, err)
			}
		}
	}
	if err := src.exec(ctx, "CREATE TABLE other (id integer PRIMARY KEY)"); err != nil { // not streamed
		t.Fatal(err)
	}
	id := "unseen_" + string(eng)
	o := logOptions(t, id, src, dst.url, []string{"vt"})
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)

	// Hold every commit back from the source's readers, and commit.
	hold, release := holdCommits(t, src)
	hold()
	defer release()
	committed := make(chan error, 1)
	go func() { committed <- src.exec(ctx, "UPDATE vt SET name = 'new' WHERE id = 1") }()
	ph := "?"
	if src.pg != nil {
		ph = "$1"
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got string
		if err := dst.pg.QueryRow(ctx, "SELECT name FROM vt WHERE id = 1").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == "new" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not apply the held-back commit within 30 s: the hazard is not staged (target has %q)", got)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not a wait for replication
	}
	var seen string
	if err := src.queryRow(ctx, "SELECT name FROM vt WHERE id = "+ph, 1).Scan(&seen); err != nil || seen != "old" {
		t.Fatalf("a source reader sees %q (%v) while the commit is held back, want old: the hazard is not staged", seen, err)
	}
	t.Log("staged: the stream applied id 1 = new; the source's readers see old")

	cfg := verifyConfig(t, src, dst)
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(verifyDiffs(rep), "; "); got != "(id=1) different name" {
		t.Fatalf("verify reports %q, want (id=1) different name", got)
	}
	cfg.Stream, cfg.Covers, cfg.CatchUp = id, verify.Covers, time.Second
	rc, closeTarget, err := verify.OpenRepair(ctx, src.url, dst.url, cfg.Source, verify.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeTarget()
	if _, err := verify.Repair(ctx, cfg, rc, rep); err == nil || !strings.Contains(err.Error(), "repair: nothing was written") {
		t.Errorf("the repair ran while the source held back a commit the stream had applied (%v)", err)
	} else {
		t.Logf("refused as it must be: %v", err)
	}
	var got string
	if err := dst.pg.QueryRow(ctx, "SELECT name FROM vt WHERE id = 1").Scan(&got); err != nil || got != "new" {
		t.Fatalf("after the repair the target has %q (%v): it wrote the older row over the stream's", got, err)
	}

	// Released while the repair waits, the commit is in its snapshot.
	// Then a writer on a table the stream does not read moves the stream's
	// checkpoint past the source's position for the repair's check of the
	// keys afterwards: a binlog stream whose source commits nothing more
	// keeps its checkpoint inside the last transaction it applied, which
	// that check cannot place past the position.
	cfg.CatchUp = 60 * time.Second
	wctx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	go func() {
		time.Sleep(time.Second) // lets the repair start waiting; not a wait for replication
		release()
		for i := 1; wctx.Err() == nil; i++ {
			_ = src.exec(wctx, "INSERT INTO other VALUES ("+ph+")", i)
			time.Sleep(100 * time.Millisecond) // pacing the writer
		}
	}()
	if _, err := verify.Repair(ctx, cfg, rc, rep); err != nil {
		t.Fatal(err)
	}
	stopWriter()
	if err := <-committed; err != nil && !strings.Contains(err.Error(), "synchronous replication") {
		t.Fatal(err)
	}
	waitCompareEqual(ctx, t, src, dst, "vt", 30*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}

// privateEndpoint is a database on a server of the engine of its own.
func privateEndpoint(t *testing.T, eng daemon.Engine) *endpoint {
	t.Helper()
	ctx := context.Background()
	dbe := dbtest.PGEngine
	if eng == daemon.EngineMySQL {
		dbe = dbtest.MariaEngine
	}
	srv, err := dbe.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	if err := srv.CreateDatabase(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	e := &endpoint{engine: eng, server: srv, url: srv.URL("src"), addr: srv.Addr()}
	if eng == daemon.EnginePostgres {
		e.pg = pool(t, e.url)
	} else {
		e.my = dbtest.OpenMy(t, srv.(*dbtest.MariaDB).DSN("src"), map[string]string{"time_zone": "'+00:00'"})
	}
	return e
}

// holdCommits returns how to make the source hold every later commit back
// from its readers, and how to let them go (which may be called more than
// once).
func holdCommits(t *testing.T, e *endpoint) (hold, release func()) {
	t.Helper()
	ctx := context.Background()
	run := func(stmts ...string) {
		for _, q := range stmts {
			if err := e.exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	if e.pg != nil {
		return func() {
				run("ALTER SYSTEM SET synchronous_standby_names = 'absent_standby'", "SELECT pg_reload_conf()")
				// pg_reload_conf only signals the postmaster, which signals
				// the backends in its own time: a commit right after it may
				// not wait yet. Once a backend shows the setting, every
				// backend has been signalled and applies it before its
				// next statement.
				for deadline := time.Now().Add(10 * time.Second); ; {
					var v string
					if err := e.pg.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&v); err != nil {
						t.Fatal(err)
					}
					if v == "absent_standby" {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("synchronous_standby_names is %q 10 s after pg_reload_conf", v)
					}
					time.Sleep(20 * time.Millisecond) // polling interval
				}
			}, func() {
				run("ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()")
			}
	}
	return func() {
			run("SET GLOBAL rpl_semi_sync_master_wait_point = 'AFTER_SYNC'", "SET GLOBAL rpl_semi_sync_master_timeout = 600000",
				"SET GLOBAL rpl_semi_sync_master_enabled = ON")
		}, func() {
			run("SET GLOBAL rpl_semi_sync_master_enabled = OFF")
		}
}

// queryRow runs a one-row query on the endpoint.
func (e *endpoint) queryRow(ctx context.Context, q string, args ...any) interface{ Scan(...any) error } {
	if e.pg != nil {
		return e.pg.QueryRow(ctx, q, args...)
	}
	return e.my.QueryRowContext(ctx, q, args...)
}
