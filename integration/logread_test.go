package integration

// Acceptance tests of issue 4: the log-based readers (PostgreSQL logical
// replication, MySQL/MariaDB binlog) end to end through the daemon.

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// logMode is the log-based source mode of an engine.
func logMode(e daemon.Engine) string {
	if e == daemon.EnginePostgres {
		return daemon.ModeLogical
	}
	return daemon.ModeBinlog
}

// logOptions is a log-read stream that starts "from now": the target
// tables are created empty on both sides before it starts, so the target
// holds the source's rows as of the start.
func logOptions(t *testing.T, id string, src *endpoint, targetURL string, tables []string) daemon.StreamOptions {
	return daemon.StreamOptions{
		ID:           id,
		SourceURL:    src.url,
		TargetURL:    targetURL,
		Tables:       tableNames(t, tables),
		StateDir:     t.TempDir(),
		SourceMode:   logMode(src.engine),
		FromNow:      true,
		PollInterval: 50 * time.Millisecond,
		KillBudget:   5 * time.Second,
	}
}

// dropSlotAtCleanup drops a PostgreSQL source's replication slot and
// publication when the test ends: a slot retains WAL on the shared server,
// and a database with a slot cannot be dropped. Register it before the
// stream starts, so that it runs after the stream's own cleanup stopped
// it. The walsender of a killed sluice may take a moment to exit, so the
// drop is retried.
func dropSlotAtCleanup(t *testing.T, src *endpoint, id string, tables []string) {
	t.Helper()
	if src.engine != daemon.EnginePostgres {
		return
	}
	names := tableNames(t, tables)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		for ctx.Err() == nil {
			if err = daemon.UninstallLogical(ctx, src.url, id, names); err == nil {
				return
			}
			time.Sleep(200 * time.Millisecond) // retry interval
		}
		t.Errorf("drop replication slot of stream %s: %v", id, err)
	})
}

// sqlFor turns a query written with ? placeholders into the engine's form.
func (e *endpoint) sqlFor(q string) string {
	if e.pg == nil {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

type stmt struct {
	q    string
	args []any
}

func st(q string, args ...any) stmt { return stmt{q, args} }

// inTx runs statements (written with ? placeholders) in one transaction.
func (e *endpoint) inTx(ctx context.Context, stmts ...stmt) error {
	if e.pg != nil {
		tx, err := e.pg.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, e.sqlFor(s.q), s.args...); err != nil {
				return fmt.Errorf("%s: %w", s.q, err)
			}
		}
		return tx.Commit(ctx)
	}
	tx, err := e.my.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s.q, s.args...); err != nil {
			return fmt.Errorf("%s: %w", s.q, err)
		}
	}
	return tx.Commit()
}

// dumped is a table compared by dump.
type dumped struct {
	table string
	cols  []string
	order string
}

// waitLogConverged polls until the cross-engine tables (xtables, when
// withX) and the dumped tables are equal on both sides, by the independent
// comparison, failing at the deadline or when the stream stops.
func waitLogConverged(t *testing.T, src, dst *endpoint, withX bool, tables []dumped, within time.Duration, run *running) {
	t.Helper()
	var names []string
	if withX {
		names = append(names, xtableNames()...)
	}
	for _, d := range tables {
		names = append(names, d.table)
	}
	waitEqual(t, src, dst, names, within, run)
}

// bigText is a ~20 KB value that compresses badly (a chain of MD5 hex
// digests), so PostgreSQL stores it out of line in TOAST, and an update of
// another column of its row sends it as "unchanged" ('u') in pgoutput.
func bigText(seed string) string {
	var b strings.Builder
	h := md5.Sum([]byte(seed))
	for b.Len() < 20*1024 {
		b.WriteString(hex.EncodeToString(h[:]))
		h = md5.Sum(h[:])
	}
	return b.String()
}

// docsDDL is the table of the TOAST and ADD COLUMN cases: PostgreSQL text
// maps to MySQL longtext.
func docsDDL(e daemon.Engine) string {
	if e == daemon.EnginePostgres {
		return `CREATE TABLE docs (id bigint PRIMARY KEY, n integer NOT NULL, body text)`
	}
	return `CREATE TABLE docs (id bigint PRIMARY KEY, n integer NOT NULL, body longtext)`
}

// waitRows polls until a table has n rows on an endpoint.
func waitRows(t *testing.T, e *endpoint, table string, n int, within time.Duration, run *running) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		var got int
		var err error
		if e.pg != nil {
			err = e.pg.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&got)
		} else {
			err = e.my.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&got)
		}
		if err != nil {
			t.Fatalf("count %s: %v", table, err)
		}
		if got == n {
			return
		}
		if run != nil {
			select {
			case err := <-run.done:
				run.done <- err
				t.Fatalf("stream stopped while waiting for %d rows in %s: %v", n, table, err)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d rows after %v, want %d", table, got, within, n)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

// docsWorkload is the TOAST and ADD COLUMN script, run while xworkload
// writes the other tables: big values inserted, then (once the target has
// them, so the updates land in later target transactions) updates of n
// that leave the big values unchanged, one body replaced, then ADD COLUMN
// note — on the target first, then on the source — and writes that use it,
// again leaving the big values unchanged.
func docsWorkload(ctx context.Context, t *testing.T, src, dst *endpoint, r *rand.Rand, run *running) error {
	var ins []stmt
	for id := 1; id <= 6; id++ {
		ins = append(ins, st("INSERT INTO docs (id, n, body) VALUES (?, ?, ?)", id, 0, bigText("doc-"+strconv.Itoa(id))))
	}
	// The same transaction updates one of its own rows: unchanged body
	// within a single target batch.
	ins = append(ins, st("UPDATE docs SET n = n + 10 WHERE id = ?", 6))
	if err := src.inTx(ctx, ins...); err != nil {
		return err
	}
	waitRows(t, dst, "docs", 6, 60*time.Second, run)
	for i := 0; i < 12; i++ {
		a, b := 1+r.IntN(6), 1+r.IntN(6)
		if err := src.inTx(ctx,
			st("UPDATE docs SET n = n + 1 WHERE id = ?", a),
			st("UPDATE docs SET n = n + 2 WHERE id = ?", b),
		); err != nil {
			return err
		}
		if i == 5 {
			// A new big value, then an update that leaves it unchanged.
			if err := src.inTx(ctx,
				st("UPDATE docs SET body = ? WHERE id = ?", bigText("replaced"), 5),
				st("UPDATE docs SET n = n + 100 WHERE id = ?", 5),
			); err != nil {
				return err
			}
		}
		time.Sleep(15 * time.Millisecond) // shapes the workload
	}
	// ADD COLUMN mid-stream: the operator adds it to the target first.
	if err := dst.exec(ctx, "ALTER TABLE docs ADD COLUMN note varchar(32)"); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if err := src.exec(ctx, "ALTER TABLE docs ADD COLUMN note varchar(32)"); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if err := src.inTx(ctx,
		st("INSERT INTO docs (id, n, body, note) VALUES (?, ?, ?, ?)", 7, 7, bigText("doc-7"), "seven"),
		st("UPDATE docs SET note = ?, n = n + 1 WHERE id IN (1, 2)", "noted"),
	); err != nil {
		return err
	}
	for i := 0; i < 6; i++ {
		id := 1 + r.IntN(7)
		if err := src.inTx(ctx,
			st("UPDATE docs SET n = n + 1 WHERE id = ?", id),
			st("UPDATE docs SET note = ? WHERE id = ?", fmt.Sprintf("n%d", i), 1+r.IntN(7)),
		); err != nil {
			return err
		}
		time.Sleep(15 * time.Millisecond) // shapes the workload
	}
	return src.inTx(ctx, st("DELETE FROM docs WHERE id = ?", 4))
}

var docsAfter = dumped{table: "docs", cols: []string{"id", "n", "body", "note"}, order: "id"}

// TestLogReadOverWAN is issue 4's end-to-end acceptance test for the four
// log-read pairs over a 96 ms link in front of the target: concurrent
// multi-statement transactions with inserts, updates, deletes and
// primary-key updates on every mapped type (xworkload), a > 8 KB value
// left unchanged while its row updates (TOAST on PostgreSQL), and ADD
// COLUMN mid-stream; the target must equal the source by normalised
// checksum.
func TestLogReadOverWAN(t *testing.T) {
	t.Parallel() // waits on the link and the servers, not the CPU: it overlaps the other such tests
	pairs := []struct{ from, to daemon.Engine }{
		{daemon.EnginePostgres, daemon.EnginePostgres},
		{daemon.EnginePostgres, daemon.EngineMySQL},
		{daemon.EngineMySQL, daemon.EngineMySQL},
		{daemon.EngineMySQL, daemon.EnginePostgres},
	}
	for _, pr := range pairs {
		t.Run(string(pr.from)+"_to_"+string(pr.to), func(t *testing.T) {
			t.Parallel() // databases and a slot (uniqueStream) of its own
			ctx := context.Background()
			src, dst := newEndpoint(t, pr.from), newEndpoint(t, pr.to)
			for _, e := range []*endpoint{src, dst} {
				if err := e.createSchema(ctx); err != nil {
					t.Fatal(err)
				}
				if err := e.exec(ctx, docsDDL(e.engine)); err != nil {
					t.Fatal(err)
				}
			}
			dstURL, proxy := dst.viaProxy(t, 48*time.Millisecond)
			tables := []string{"items", "order_lines", "docs"}
			o := logOptions(t, uniqueStream(t, "lr"), src, dstURL, tables)
			dropSlotAtCleanup(t, src, o.ID, tables)
			r := rng(t)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)

			var wg sync.WaitGroup
			errs := make(chan error, 2)
			docSeed := r.Uint64()
			wg.Add(2)
			go func() {
				defer wg.Done()
				if err := src.xworkload(ctx, r, 4, 40, 20*time.Millisecond); err != nil {
					errs <- fmt.Errorf("xworkload: %w", err)
				}
			}()
			go func() {
				defer wg.Done()
				if err := docsWorkload(ctx, t, src, dst, rand.New(rand.NewPCG(docSeed, 1)), run); err != nil {
					errs <- fmt.Errorf("docs: %w", err)
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			waitLogConverged(t, src, dst, true, []dumped{docsAfter}, 90*time.Second, run)
			st := run.current.Load().Stats()
			if err := run.stop(t); err != nil {
				t.Fatalf("stream stopped with error: %v", err)
			}
			t.Logf("applied %d changes in %d commits; %d round trips through the proxy", st.Applied, st.Seq, proxy.RoundTrips())
		})
	}
}

// TestLogReadToastKeyChange: a primary-key UPDATE of a row whose big
// (TOASTed) value is unchanged. pgoutput sends the new row with that
// column as 'u' (unchanged) and, with REPLICA IDENTITY DEFAULT, only the
// key of the old row, so the value is nowhere in the stream: the target
// must carry it over from the old row, not write NULL. The update lands in
// its own target transaction (the insert is applied first).
func TestLogReadToastKeyChange(t *testing.T) {
	t.Parallel() // databases of its own, a stream id (slot) the suite's alone; its subtests run in turn
	for _, to := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run("postgres_to_"+string(to), func(t *testing.T) {
			ctx := context.Background()
			src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, to)
			for _, e := range []*endpoint{src, dst} {
				if err := e.exec(ctx, docsDDL(e.engine)); err != nil {
					t.Fatal(err)
				}
			}
			tables := []string{"docs"}
			o := logOptions(t, "tk", src, dst.url, tables)
			dropSlotAtCleanup(t, src, o.ID, tables)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			if err := src.inTx(ctx,
				st("INSERT INTO docs (id, n, body) VALUES (?, ?, ?)", 1, 0, bigText("k1")),
				st("INSERT INTO docs (id, n, body) VALUES (?, ?, ?)", 2, 0, bigText("k2")),
			); err != nil {
				t.Fatal(err)
			}
			docs := dumped{table: "docs", cols: []string{"id", "n", "body"}, order: "id"}
			waitLogConverged(t, src, dst, false, []dumped{docs}, 60*time.Second, run)
			// Key change alone, and key change plus another column.
			if err := src.inTx(ctx, st("UPDATE docs SET id = 101 WHERE id = 1")); err != nil {
				t.Fatal(err)
			}
			if err := src.inTx(ctx, st("UPDATE docs SET id = 102, n = 5 WHERE id = 2")); err != nil {
				t.Fatal(err)
			}
			// The failure is deterministic (the value is NULL on the
			// target): a short deadline keeps the package fast.
			waitLogConverged(t, src, dst, false, []dumped{docs}, 15*time.Second, run)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLogReadUnsupportedDDL: a DROP COLUMN on the source of a streamed
// table mid-stream, with --schema-changes=stop (by default it is followed:
// TestSchemaCreateCopyStream). The stream must stop with an error naming
// the table and the column; the target must hold exactly the source's rows
// as they were before the DDL (everything before it applied, nothing after
// it); after the operator makes the same change on the target and restarts
// the stream (same state, same stream id), it continues from there and the
// target converges.
func TestLogReadUnsupportedDDL(t *testing.T) {
	t.Parallel() // databases of its own, a stream id (slot) the suite's alone; its subtests run in turn
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			ctx := context.Background()
			src, dst := newEndpoint(t, eng), newEndpoint(t, eng)
			for _, e := range []*endpoint{src, dst} {
				if err := e.exec(ctx, `CREATE TABLE gadgets (id integer PRIMARY KEY, a integer, doomed varchar(20))`); err != nil {
					t.Fatal(err)
				}
				if err := e.exec(ctx, `CREATE TABLE other (id integer PRIMARY KEY, v integer)`); err != nil {
					t.Fatal(err)
				}
			}
			tables := []string{"gadgets", "other"}
			o := logOptions(t, "ddl", src, dst.url, tables)
			o.SchemaChanges = "stop"
			dropSlotAtCleanup(t, src, o.ID, tables)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)

			before := []dumped{
				{table: "gadgets", cols: []string{"id", "a", "doomed"}, order: "id"},
				{table: "other", cols: []string{"id", "v"}, order: "id"},
			}
			var w0 []stmt
			for i := 1; i <= 40; i++ {
				w0 = append(w0, st("INSERT INTO gadgets (id, a, doomed) VALUES (?, ?, ?)", i, i*10, fmt.Sprintf("d%d", i)))
			}
			if err := src.inTx(ctx, w0...); err != nil {
				t.Fatal(err)
			}
			waitLogConverged(t, src, dst, false, before, 60*time.Second, run)
			// W1, not waited for: applied before the stream stops.
			for i := 0; i < 5; i++ {
				if err := src.inTx(ctx,
					st("UPDATE gadgets SET a = a + 1, doomed = ? WHERE id = ?", fmt.Sprintf("w1-%d", i), 1+i*3),
					st("INSERT INTO gadgets (id, a, doomed) VALUES (?, ?, ?)", 100+i, i, "w1"),
					st("DELETE FROM gadgets WHERE id = ?", 40-i),
					st("INSERT INTO other (id, v) VALUES (?, ?)", i, i),
				); err != nil {
					t.Fatal(err)
				}
			}
			// The source as it is now, kept in copies to compare the
			// target with once the stream stopped.
			for _, d := range before {
				for _, q := range []string{
					fmt.Sprintf("CREATE TABLE %s_before AS SELECT * FROM %s", d.table, d.table),
					fmt.Sprintf("ALTER TABLE %s_before ADD PRIMARY KEY (%s)", d.table, d.order),
				} {
					if err := src.exec(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := src.exec(ctx, `ALTER TABLE gadgets DROP COLUMN doomed`); err != nil {
				t.Fatal(err)
			}
			// W2, after the DDL: none of it may reach the target before
			// the operator fixed it. The first transaction also writes the
			// unaffected table, which must not be applied either. (It
			// writes the altered table first: the PostgreSQL reader sees
			// the change of shape at the first change of the table after
			// the DDL and stops exactly there, so changes of other tables
			// that precede it in the same transaction are applied.)
			if err := src.inTx(ctx,
				st("UPDATE gadgets SET a = a + 1000 WHERE id <= ?", 10),
				st("INSERT INTO other (id, v) VALUES (?, ?)", 50, 50),
				st("INSERT INTO gadgets (id, a) VALUES (?, ?)", 200, 200),
			); err != nil {
				t.Fatal(err)
			}
			if err := src.inTx(ctx, st("DELETE FROM gadgets WHERE id = ?", 20), st("UPDATE other SET v = v + 1")); err != nil {
				t.Fatal(err)
			}

			var runErr error
			select {
			case runErr = <-run.done:
				run.done <- runErr
			case <-time.After(60 * time.Second):
				t.Fatal("the stream kept running for 60 s after an unsupported DROP COLUMN on the source")
			}
			t.Logf("stream stopped: %v", runErr)
			if runErr == nil {
				t.Fatal("RunStream returned nil; want an error naming gadgets.doomed")
			}
			for _, w := range []string{"gadgets", "doomed"} {
				if !strings.Contains(runErr.Error(), w) {
					t.Errorf("error %q does not name %q", runErr, w)
				}
			}
			for _, d := range before {
				diff, err := dbtest.CompareTableAs(ctx, src.dbOf(), d.table+"_before", dst.dbOf(), d.table)
				if err != nil {
					t.Fatal(err)
				}
				if !diff.Equal() {
					t.Errorf("target %s is not the source as it was before the DDL:\n%s", d.table, diff)
				}
			}
			if st, err := daemon.ReadStatus(o.StateDir); err != nil || len(st) != 1 || !strings.Contains(st[0].LastError, "doomed") {
				t.Errorf("state file should record the error: %+v, %v", st, err)
			}
			if t.Failed() {
				return
			}

			// The operator makes the target match and restarts the stream.
			if err := dst.exec(ctx, `ALTER TABLE gadgets DROP COLUMN doomed`); err != nil {
				t.Fatal(err)
			}
			// A restart before the fix would stop again; after it, the
			// stream continues from where it stopped.
			o2 := o
			o2.FromNow = false // it has a checkpoint; FromNow must not matter
			run2 := startStream(t, o2)
			after := []dumped{
				{table: "gadgets", cols: []string{"id", "a"}, order: "id"},
				{table: "other", cols: []string{"id", "v"}, order: "id"},
			}
			waitLogConverged(t, src, dst, false, after, 60*time.Second, run2)
			// And it keeps streaming.
			if err := src.inTx(ctx, st("INSERT INTO gadgets (id, a) VALUES (?, ?)", 300, 300), st("UPDATE other SET v = v * 2")); err != nil {
				t.Fatal(err)
			}
			waitLogConverged(t, src, dst, false, after, 60*time.Second, run2)
			if err := run2.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLogReadSourceRestart restarts the source server mid-stream, while
// a workload writes it and the stream runs behind (the target is across a
// 96 ms link): the reader must reconnect on its own and resume — the
// stream never stops — with nothing lost or doubled. The target is on the
// other engine, so only the source restarts. The source is a server of
// the test's own: restarting a shared one would cut every other test's
// sessions, and this test could then not run beside them.
func TestLogReadSourceRestart(t *testing.T) {
	t.Parallel()
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			other := daemon.EngineMySQL
			if eng == daemon.EngineMySQL {
				other = daemon.EnginePostgres
			}
			src, dst := privateEndpoint(t, eng), newEndpoint(t, other)
			for _, e := range []*endpoint{src, dst} {
				if err := e.createSchema(ctx); err != nil {
					t.Fatal(err)
				}
			}
			dstURL, _ := dst.viaProxy(t, 48*time.Millisecond)
			tables := []string{"items", "order_lines"}
			o := logOptions(t, "rs", src, dstURL, tables)
			dropSlotAtCleanup(t, src, o.ID, tables)
			r := rng(t)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)

			// Writers that carry on through the restart: a transaction
			// that fails while the server is down is retried (whether
			// its COMMIT took effect does not matter, the comparison is
			// with the source as it ends up).
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var commits, failures atomic.Int64
			for w := 0; w < 4; w++ {
				seed := r.Uint64()
				wg.Add(1)
				go func(worker int) {
					defer wg.Done()
					wr := rand.New(rand.NewPCG(seed, uint64(worker)))
					for {
						select {
						case <-stop:
							return
						default:
						}
						if err := src.xtx(ctx, wr, worker); err != nil {
							failures.Add(1)
							time.Sleep(100 * time.Millisecond) // back off while the server is down
							continue
						}
						commits.Add(1)
						time.Sleep(10 * time.Millisecond) // shapes the workload
					}
				}(w)
			}
			defer func() {
				select {
				case <-stop:
				default:
					close(stop)
				}
				wg.Wait()
			}()
			run.waitApplied(t, 300, 60*time.Second)
			before := run.current.Load().Stats()
			if err := src.server.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("source restarted; the stream had applied %d changes, queue %d", before.Applied, before.QueueLen)
			// Progress after the restart: changes written after it are
			// read from the new server.
			n0 := commits.Load()
			deadline := time.Now().Add(60 * time.Second)
			for commits.Load() < n0+100 {
				if time.Now().After(deadline) {
					t.Fatalf("the workload did not resume after the source restart (%d failures)", failures.Load())
				}
				time.Sleep(50 * time.Millisecond) // polling interval
			}
			run.waitApplied(t, 300, 60*time.Second)
			close(stop)
			wg.Wait()
			waitXConverged(t, src, dst, 90*time.Second, run)
			st := run.current.Load().Stats()
			if err := run.stop(t); err != nil {
				t.Fatalf("stream stopped with error: %v", err)
			}
			t.Logf("%d source transactions (%d failed during the restart); applied %d changes", commits.Load(), failures.Load(), st.Applied)
		})
	}
}
