package integration

// The silent-loss classes: each test here reproduces a workload that once
// ended with a target different from the source and nothing in the log.
// Every "target equals source" is judged by dbtest.CompareTables (values in
// their binary form, compared in Go), never by the text both servers print.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/verify"
)

// dbOf is an endpoint as the comparison reads it.
func (e *endpoint) dbOf() dbtest.DB {
	if e.pg != nil {
		return dbtest.DB{PG: e.pg}
	}
	return dbtest.DB{My: e.my}
}

// waitEqual polls until every table is equal on both endpoints by the
// independent comparison, failing at the deadline (with the differences)
// or when the stream stops.
func waitEqual(t *testing.T, src, dst *endpoint, tables []string, within time.Duration, run *running) {
	t.Helper()
	waitEqualDB(t, src.dbOf(), dst.dbOf(), tables, within, run)
	verifyAgrees(t, src, dst, tables)
}

// verifyAgrees runs sluice verify's engine over tables the independent
// comparison has just found equal: it must find them equal too (issue 12:
// the tests use verify, but never it alone).
func verifyAgrees(t *testing.T, src, dst *endpoint, tables []string) {
	t.Helper()
	ctx := context.Background()
	cfg := openVerify(t, src, dst, tables)
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("sluice verify over tables the independent comparison finds equal: %v", err)
	}
	if n := rep.Differences(); n != 0 {
		var b strings.Builder
		for _, tr := range rep.Tables {
			if !tr.Equal() {
				fmt.Fprintf(&b, "\n%+v", tr)
			}
		}
		t.Fatalf("sluice verify reports %d differences in tables the independent comparison finds equal:%s", n, b.String())
	}
}

// openVerify opens sluice verify's sides on two endpoints, for tables
// (closed when the test ends).
func openVerify(t *testing.T, src, dst *endpoint, tables []string) verify.Config {
	t.Helper()
	ctx := context.Background()
	s, err := verify.Open(ctx, "--source", src.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	d, err := verify.Open(ctx, "--target", dst.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	names := make([]sluice.TableName, len(tables))
	for i, tb := range tables {
		if names[i], err = sluice.ParseTableName(tb); err != nil {
			t.Fatal(err)
		}
		if src.engine == daemon.EnginePostgres && names[i].Schema == "" {
			names[i].Schema = "public"
		}
	}
	return verify.Config{Source: s, Target: d, Tables: names}
}

// waitEqualDB is waitEqual for any two databases: the tables are compared
// by reading both sides in binary form (dbtest.CompareTables), never by
// the text both servers print, which once hid FLOATs rounded to six
// digits.
func waitEqualDB(t *testing.T, want, got dbtest.DB, tables []string, within time.Duration, run *running) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		diffs, err := dbtest.CompareTables(ctx, want, got, tables...)
		if err != nil {
			t.Fatalf("compare: %v", err)
		}
		if diffs.Equal() {
			return
		}
		if run != nil {
			select {
			case err := <-run.done:
				run.done <- err
				t.Fatalf("stream stopped before the target equalled the source: %v\n%s", err, diffs)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("target does not equal the source after %v:\n%s", within, diffs)
		}
		time.Sleep(200 * time.Millisecond) // polling interval, not a wait for replication
	}
}

// TestToastKeyChangedTwice is the first class: transactions that
// move a row's key (UPDATE … SET id = id + 1000), move the row with the
// highest key again (often the one just moved), and touch another row,
// over bodies PostgreSQL keeps out of line and does not send when they do
// not change. The target once ended with NULL bodies. One lane and four.
func TestToastKeyChangedTwice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		to    daemon.Engine
		lanes int
	}{{daemon.EnginePostgres, 1}, {daemon.EnginePostgres, 4}, {daemon.EngineMySQL, 1}} {
		t.Run(fmt.Sprintf("to_%s_lanes_%d", tc.to, tc.lanes), func(t *testing.T) {
			t.Parallel() // databases and a slot (uniqueStream) of its own
			ctx := context.Background()
			src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, tc.to)
			for _, e := range []*endpoint{src, dst} {
				if err := e.exec(ctx, docsDDL(e.engine)); err != nil {
					t.Fatal(err)
				}
				for i := 1; i <= 200; i += 50 {
					var stmts []stmt
					for id := i; id < i+50; id++ {
						stmts = append(stmts, st("INSERT INTO docs (id, n, body) VALUES (?, ?, ?)", id, 0, bigText(fmt.Sprint("doc", id))[:12000]))
					}
					if err := e.inTx(ctx, stmts...); err != nil {
						t.Fatal(err)
					}
				}
			}
			tables := []string{"docs"}
			dstURL, _ := dst.viaProxy(t, 5*time.Millisecond)
			o := logOptions(t, uniqueStream(t, "toast2"), src, dstURL, tables)
			o.MinLanes, o.MaxLanes = tc.lanes, tc.lanes
			o.BatchSize = 7 // batches that cut the writer's transactions at odd places
			dropSlotAtCleanup(t, src, o.ID, tables)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			r := rng(t)
			for i := range 120 {
				id := 1 + r.IntN(200)
				err := src.inTx(ctx,
					st("UPDATE docs SET id = id + 1000, n = n + 1 WHERE id = (SELECT id FROM docs ORDER BY id OFFSET ? LIMIT 1)", id%180),
					st("UPDATE docs SET id = id + 1000 WHERE id = (SELECT max(id) FROM docs)"),
					st("UPDATE docs SET n = n + 1 WHERE id = (SELECT min(id) FROM docs)"),
				)
				if err != nil {
					t.Fatalf("transaction %d: %v", i, err)
				}
			}
			waitEqual(t, src, dst, tables, 90*time.Second, run)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFromNowRestartSkipsNothing is the third class: a --from-now
// stream stopped before its first change, a row committed while it is
// down, then the same start again (a unit file with from_now = true does
// that on every restart). The slot, or the binlog position, once moved
// past the row. And a restart without --from-now once refused with "no
// checkpoint" although the source held every change since the first start.
func TestFromNowRestartSkipsNothing(t *testing.T) {
	t.Parallel() // databases of its own, a stream id (slot) the suite's alone; its subtests run in turn
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			ctx := context.Background()
			src, dst := newEndpoint(t, eng), newEndpoint(t, eng)
			for _, e := range []*endpoint{src, dst} {
				if err := e.exec(ctx, "CREATE TABLE t (id int PRIMARY KEY, v varchar(20))"); err != nil {
					t.Fatal(err)
				}
			}
			tables := []string{"t"}
			o := logOptions(t, "fromnow", src, dst.url, tables)
			dropSlotAtCleanup(t, src, o.ID, tables)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			if err := src.exec(ctx, src.sqlFor("INSERT INTO t VALUES (1, 'while down')")); err != nil {
				t.Fatal(err)
			}
			run = startStream(t, o) // --from-now again
			run.waitStarted(t, 60*time.Second)
			waitEqual(t, src, dst, tables, 30*time.Second, run)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			if err := src.exec(ctx, src.sqlFor("INSERT INTO t VALUES (2, 'down again')")); err != nil {
				t.Fatal(err)
			}
			o.FromNow = false
			run = startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			waitEqual(t, src, dst, tables, 30*time.Second, run)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRestoredTarget is the tenth class: the target restored from
// a backup taken a while ago. Its checkpoint row is older than the state
// file, and resuming from the state file once skipped the gap in silence.
// Now the stream resumes from the target's own checkpoint: where the source
// still has the changes since (the binlog) the target converges, and where
// it does not (a slot sluice let move on) it refuses, saying why.
func TestRestoredTarget(t *testing.T) {
	t.Parallel() // databases of its own, a stream id (slot) the suite's alone; its subtests run in turn
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			ctx := context.Background()
			src, dst := newEndpoint(t, eng), newEndpoint(t, eng)
			cp := "sluice.checkpoint"
			if eng == daemon.EngineMySQL {
				cp = "sluice_checkpoint"
			}
			for _, e := range []*endpoint{src, dst} {
				if err := e.exec(ctx, "CREATE TABLE t (id int PRIMARY KEY, v varchar(20))"); err != nil {
					t.Fatal(err)
				}
			}
			tables := []string{"t"}
			o := logOptions(t, "restored", src, dst.url, tables)
			dropSlotAtCleanup(t, src, o.ID, tables)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			for i := 1; i <= 5; i++ {
				if err := src.exec(ctx, src.sqlFor(fmt.Sprintf("INSERT INTO t VALUES (%d, 'first')", i))); err != nil {
					t.Fatal(err)
				}
			}
			waitEqual(t, src, dst, tables, 30*time.Second, run)
			// The backup: the table and sluice's checkpoint rows.
			for _, q := range []string{"CREATE TABLE t_backup AS SELECT * FROM t", "CREATE TABLE cp_backup AS SELECT * FROM " + cp} {
				if err := dst.exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			for i := 6; i <= 10; i++ {
				if err := src.exec(ctx, src.sqlFor(fmt.Sprintf("INSERT INTO t VALUES (%d, 'after the backup')", i))); err != nil {
					t.Fatal(err)
				}
			}
			waitEqual(t, src, dst, tables, 30*time.Second, run)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"DELETE FROM t", "INSERT INTO t SELECT * FROM t_backup", "DELETE FROM " + cp, "INSERT INTO " + cp + " SELECT * FROM cp_backup"} {
				if err := dst.exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			run = startStream(t, o)
			if eng == daemon.EngineMySQL {
				run.waitStarted(t, 60*time.Second)
				waitEqual(t, src, dst, tables, 30*time.Second, run)
				return
			}
			select {
			case err := <-run.done:
				run.done <- err
				if err == nil || !strings.Contains(err.Error(), "older than the state file") || !strings.Contains(err.Error(), "restored from a backup") {
					t.Fatalf("restart on a restored target: err = %v", err)
				}
				t.Logf("refused: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("restart on a restored target neither refused nor converged")
			}
		})
	}
}

// TestUniqueSwapsUnderLoad is the fourth class: each writer
// transaction moves a row to a new key and swaps a NOT NULL UNIQUE value
// between the lowest and the highest row through a temporary value, while
// other transactions insert and update another table. Compacted batches
// break the unique key; the stream must apply the table in source order
// instead, never stop, never crawl.
func TestUniqueSwapsUnderLoad(t *testing.T) {
	t.Parallel() // databases of its own, a stream id (slot) the suite's alone; its subtests run in turn
	for _, to := range []daemon.Engine{daemon.EngineMySQL, daemon.EnginePostgres} {
		t.Run("mariadb_to_"+string(to), func(t *testing.T) {
			ctx := context.Background()
			src, dst := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, to)
			for _, e := range []*endpoint{src, dst} {
				for _, q := range []string{
					"CREATE TABLE users (id int PRIMARY KEY, email varchar(40) NOT NULL, n int NOT NULL, UNIQUE (email))",
					"CREATE TABLE load_t (id int PRIMARY KEY, k int NOT NULL, c varchar(60))",
				} {
					if e.engine == daemon.EngineMySQL {
						q = strings.Replace(q, "varchar(40)", "varchar(40) COLLATE utf8mb4_nopad_bin", 1)
					}
					if err := e.exec(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
			}
			tables := []string{"users", "load_t"}
			dstURL, _ := dst.viaProxy(t, 5*time.Millisecond)
			o := logOptions(t, "swaps", src, dstURL, tables)
			o.MaxLanes = 4
			logs := &logCounter{}
			o.Logger = logs.logger(t)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			for i := 1; i <= 20; i++ {
				if err := src.exec(ctx, "INSERT INTO users VALUES (?, ?, 0)", i, fmt.Sprintf("u%d@x", i)); err != nil {
					t.Fatal(err)
				}
			}
			loadCtx, stopLoad := context.WithCancel(ctx)
			loaded := make(chan error, 1)
			go func() {
				var err error
				for i := 0; loadCtx.Err() == nil; i++ {
					if err = src.inTx(loadCtx, st("INSERT INTO load_t VALUES (?, ?, 'x')", i, i), st("UPDATE load_t SET k = k + 1 WHERE id = ?", i/2)); err != nil {
						break
					}
				}
				if loadCtx.Err() != nil {
					err = nil
				}
				loaded <- err
			}()
			next := 1000
			for i := range 200 {
				next++
				if err := swapTx(ctx, src, i%10, next); err != nil && !isDeadlock(err) {
					t.Fatalf("writer transaction %d: %v", i, err)
				}
			}
			stopLoad()
			if err := <-loaded; err != nil {
				t.Fatal(err)
			}
			waitEqual(t, src, dst, tables, 90*time.Second, run)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			if n := logs.count("retrying smaller"); n > 0 {
				t.Errorf("%d batches were retried smaller: a constraint the source kept is no reason to shrink", n)
			}
			n := logs.count("applying the tables' changes in source order")
			if n == 0 {
				t.Error("no compacted batch broke the unique key: the test did not exercise the swap")
			}
			t.Logf("%d reorders", n)
		})
	}
}

// swapTx moves the row at the k-th key to key next, then swaps the
// emails of the rows with the lowest and highest keys through a temporary
// value, in one transaction, as an application does.
func swapTx(ctx context.Context, e *endpoint, k, next int) error {
	tx, err := e.my.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var id int
	if err := tx.QueryRowContext(ctx, "SELECT id FROM users ORDER BY id LIMIT 1 OFFSET ?", k).Scan(&id); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE users SET id = ?, n = n + 1 WHERE id = ?", next, id); err != nil {
		return err
	}
	var lo, hi int
	var loEmail, hiEmail string
	if err := tx.QueryRowContext(ctx, "SELECT id, email FROM users ORDER BY id LIMIT 1").Scan(&lo, &loEmail); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, "SELECT id, email FROM users ORDER BY id DESC LIMIT 1").Scan(&hi, &hiEmail); err != nil {
		return err
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"UPDATE users SET email = 'tmp' WHERE id = ?", []any{lo}},
		{"UPDATE users SET email = ? WHERE id = ?", []any{loEmail, hi}},
		{"UPDATE users SET email = ? WHERE id = ?", []any{hiEmail, lo}},
	} {
		if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// logCounter keeps the messages a stream logs, for tests that count them.
type logCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCounter) logger(t *testing.T) *slog.Logger {
	return slog.New(&countingHandler{l: l, next: testLogger(t).Handler()})
}

func (l *logCounter) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

type countingHandler struct {
	l    *logCounter
	next slog.Handler
}

func (h *countingHandler) Enabled(ctx context.Context, lv slog.Level) bool {
	return h.next.Enabled(ctx, lv)
}
func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.l.mu.Lock()
	h.l.msgs = append(h.l.msgs, r.Message)
	h.l.mu.Unlock()
	return h.next.Handle(ctx, r)
}
func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{l: h.l, next: h.next.WithAttrs(as)}
}
func (h *countingHandler) WithGroup(g string) slog.Handler {
	return &countingHandler{l: h.l, next: h.next.WithGroup(g)}
}

// TestToastKeyChangesKill9Lanes: the same key-moving workload over
// TOASTed bodies, applied by 2–4 lanes, with sluice killed (SIGKILL) at
// random moments while the writer runs, and restarted each time. Lanes
// commit past the checkpoint; after a kill those changes are read again,
// and a key change applied twice once deleted the moved row. The target
// must equal the source.
func TestToastKeyChangesKill9Lanes(t *testing.T) {
	t.Parallel() // kills only its own sluice process; slot "toastk9" is the suite's alone
	bin := buildSluice(t)
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EnginePostgres)
	for _, e := range []*endpoint{src, dst} {
		if err := e.exec(ctx, docsDDL(e.engine)); err != nil {
			t.Fatal(err)
		}
		var stmts []stmt
		for id := 1; id <= 200; id++ {
			stmts = append(stmts, st("INSERT INTO docs (id, n, body) VALUES (?, ?, ?)", id, 0, bigText(fmt.Sprint("doc", id))[:12000]))
		}
		if err := e.inTx(ctx, stmts...); err != nil {
			t.Fatal(err)
		}
	}
	tables := []string{"public.docs"}
	const stream = "toastk9"
	dropSlotAtCleanup(t, src, stream, tables)
	dstURL, _ := dst.viaProxy(t, 5*time.Millisecond)
	dir := t.TempDir()
	args := []string{"sync", "start", "--source", src.url, "--target", dstURL, "--tables", strings.Join(tables, ","),
		"--state-dir", dir, "--stream-id", stream, "--source-mode", "logical", "--from-now",
		"--min-lanes", "2", "--max-lanes", "4", "--apply-batch-size", "5", "--poll-interval", "50ms", "--log-format", "json"}
	r := rng(t)
	stop := make(chan struct{})
	werr := make(chan error, 1)
	writer := func() {
		var err error
		defer func() { werr <- err }()
		// A bounded workload: every key change that crosses lanes is
		// applied alone with the lanes drained, so this workload is slow
		// with lanes, and an unbounded writer would outrun the catch-up.
		for i := 0; i < 800; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond): // the writer's pace
			}
			if i%4 == 0 {
				err = src.inTx(ctx,
					st("UPDATE docs SET id = id + 1000, n = n + 1 WHERE id = (SELECT id FROM docs ORDER BY id OFFSET ? LIMIT 1)", i%180),
					st("UPDATE docs SET id = id + 1000 WHERE id = (SELECT max(id) FROM docs)"),
					st("UPDATE docs SET n = n + 1 WHERE id = (SELECT min(id) FROM docs)"),
				)
			} else {
				// Updates that leave the bodies unsent and spread over the
				// lanes, so that lanes commit past the checkpoint.
				err = src.inTx(ctx, st("UPDATE docs SET n = n + 1 WHERE id % 13 = ?", i%13))
			}
			if err != nil {
				return
			}
		}
	}
	var applied uint64
	recoveries := 0
	for i := range 5 {
		proc := startSluice(t, bin, args...)
		if i == 0 {
			waitStatus(t, proc, dir, 60*time.Second, "start", func(s daemon.Status) bool { return s.Running })
			go writer()
		}
		st := waitStatus(t, proc, dir, 60*time.Second, "progress", func(s daemon.Status) bool { return s.Running && s.Applied > applied+100 })
		applied = st.Applied
		time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond) // a random kill point, not a wait for replication
		if err := proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-proc.done
		proc.done <- nil
		if strings.Contains(proc.logText(), "recovering lanes") {
			recoveries++
		}
	}
	close(stop)
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	proc := startSluice(t, bin, args...)
	waitStatus(t, proc, dir, 60*time.Second, "the last start", func(s daemon.Status) bool { return s.Running })
	defer func() {
		if t.Failed() {
			t.Logf("last sluice's log:\n%s", proc.logText())
		}
	}()
	waitEqual(t, src, dst, []string{"docs"}, 90*time.Second, nil)
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-proc.done; err != nil {
		t.Fatalf("sluice exited with %v after SIGTERM; log:\n%s", err, proc.logText())
	}
	proc.done <- nil
	if strings.Contains(proc.logText(), "recovering lanes") {
		recoveries++
	}
	t.Logf("5 kills; %d restarts found lanes past the checkpoint and skipped what they had committed", recoveries)
}

// TestForeignKeysAcrossLanes: parents and children joined by a foreign key
// (on both sides), applied by four lanes. Lanes once put a parent and its
// child on different connections, and a compacted batch could bring a
// child before its parent: the foreign key failed, and the stream stopped.
// Tables joined by a foreign key now go to one lane together (and a MySQL
// target's sessions no longer check foreign keys at all).
func TestForeignKeysAcrossLanes(t *testing.T) {
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, daemon.EngineMySQL)
	for _, e := range []*endpoint{src, dst} {
		for _, q := range []string{
			"CREATE TABLE parents (id int PRIMARY KEY, name varchar(20) NOT NULL) ENGINE=InnoDB",
			"CREATE TABLE children (id int PRIMARY KEY, parent_id int NOT NULL, v int NOT NULL, FOREIGN KEY (parent_id) REFERENCES parents (id)) ENGINE=InnoDB",
			"CREATE TABLE other (id int PRIMARY KEY, v int NOT NULL) ENGINE=InnoDB",
		} {
			if err := e.exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	tables := []string{"parents", "children", "other"}
	o := logOptions(t, "fk", src, dst.url, tables)
	o.MinLanes, o.MaxLanes = 4, 4
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)
	r := rng(t)
	child := 0
	for p := 1; p <= 150; p++ {
		var stmts []stmt
		// Another table's rows, so that the lanes have work besides.
		stmts = append(stmts, st("INSERT INTO other VALUES (?, ?)", p, p))
		stmts = append(stmts, st("INSERT INTO parents VALUES (?, ?)", p, fmt.Sprint("p", p)))
		for range 1 + r.IntN(3) {
			child++
			stmts = append(stmts, st("INSERT INTO children VALUES (?, ?, 0)", child, p))
		}
		if p > 5 && r.IntN(3) == 0 {
			// A child moves to another parent, and an old parent goes
			// with its children.
			old := p - 5
			stmts = append(stmts, st("UPDATE children SET parent_id = ? WHERE parent_id = ? LIMIT 1", p, old-1),
				st("DELETE FROM children WHERE parent_id = ?", old),
				st("DELETE FROM parents WHERE id = ?", old))
		}
		if err := src.inTx(ctx, stmts...); err != nil {
			t.Fatalf("transaction %d: %v", p, err)
		}
	}
	waitEqual(t, src, dst, tables, 60*time.Second, run)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}
