package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
	wlgen "github.com/sluice-cdc/sluice/internal/workload"
)

// The copy tests start streams on populated sources: the initial copy
// must bring the target to the source's rows as of a snapshot, and the
// stream must then apply exactly the changes committed after it, while a
// live workload writes throughout. The target is judged by
// dbtest.CompareTables (binary forms) and, between MariaDB databases, by
// CHECKSUM TABLE as well.

// copyTables are the hand-off edge cases added to the workload's tables: a
// table larger than the stream's queue, split into many chunks and
// changed (updates, deletes, key changes, inserts) while it is copied; a
// table of one row; an empty one.
var copyTables = []string{"cp_big", "cp_one", "cp_empty"}

func copyDDL(e daemon.Engine) []string {
	var out []string
	for _, name := range copyTables {
		out = append(out, "CREATE TABLE "+name+" (id bigint PRIMARY KEY, k int NOT NULL, c varchar(120) NOT NULL, pad varchar(60) NOT NULL)")
	}
	return out
}

// fillCopyTables gives cp_big n rows and cp_one one.
func fillCopyTables(ctx context.Context, e *endpoint, n int) error {
	qs := map[daemon.Engine][]string{
		daemon.EnginePostgres: {
			fmt.Sprintf("INSERT INTO cp_big SELECT g, g %% 1000, md5(g::text) || md5((g+1)::text), 'pad-' || g FROM generate_series(1, %d) g", n),
			"INSERT INTO cp_one VALUES (1, 1, 'one', 'pad')",
		},
		daemon.EngineMySQL: {
			fmt.Sprintf("INSERT INTO cp_big SELECT seq, seq %% 1000, CONCAT(MD5(seq), MD5(seq+1)), CONCAT('pad-', seq) FROM seq_1_to_%d", n),
			"INSERT INTO cp_one VALUES (1, 1, 'one', 'pad')",
		},
	}
	for _, q := range qs[e.engine] {
		if err := e.exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// churn changes cp_big until stop closes: updates, deletes, key changes
// and inserts of random rows, each in its own transaction. It returns the
// number of changes made.
func churn(ctx context.Context, e *endpoint, r *rand.Rand, n int, stop <-chan struct{}) (int, error) {
	next := int64(n) + 1
	done := 0
	for {
		select {
		case <-stop:
			return done, nil
		default:
		}
		id := r.Int64N(int64(n)) + 1
		var q string
		switch r.IntN(4) {
		case 0:
			q = fmt.Sprintf("UPDATE cp_big SET k = k + 1, c = 'changed' WHERE id = %d", id)
		case 1:
			q = fmt.Sprintf("DELETE FROM cp_big WHERE id = %d", id)
		case 2:
			q = fmt.Sprintf("UPDATE cp_big SET id = %d WHERE id = %d", next+1_000_000, id)
			next++
		default:
			q = fmt.Sprintf("INSERT INTO cp_big VALUES (%d, 7, 'new', 'pad')", next)
			next++
		}
		if err := e.exec(ctx, q); err != nil {
			return done, fmt.Errorf("%s: %w", q, err)
		}
		done++
		time.Sleep(time.Millisecond) // pacing of the writer, not a wait
	}
}

type copyPair struct {
	name string
	src  randomizedSource
	to   daemon.Engine
	// pooled puts PgBouncer, in transaction pooling, between sluice and a
	// PostgreSQL target (behind the WAN proxy), as managed services do:
	// the copy's COPY, the stream's batches and lanes all pass through it.
	pooled bool
}

var copyPairs = []copyPair{
	{"pg_logical_to_postgres", randomizedSources[0], daemon.EnginePostgres, false},
	{"pg_logical_to_mysql", randomizedSources[0], daemon.EngineMySQL, false},
	{"pg_trigger_to_postgres", randomizedSources[1], daemon.EnginePostgres, false},
	{"maria_binlog_to_mysql", randomizedSources[2], daemon.EngineMySQL, false},
	{"maria_binlog_to_postgres", randomizedSources[2], daemon.EnginePostgres, false},
	{"maria_trigger_to_mysql", randomizedSources[3], daemon.EngineMySQL, false},
	{name: "pg_logical_to_postgres_through_pgbouncer", src: randomizedSources[0], to: daemon.EnginePostgres, pooled: true},
}

// TestInitialCopy starts a stream on a source that holds half of a
// randomized workload's transactions and the copy edge-case tables, runs
// the other half and a writer on cp_big while the copy runs, and checks
// that the target converges to the source exactly.
func TestInitialCopy(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	for i, cp := range copyPairs {
		t.Run(cp.name, func(t *testing.T) {
			t.Parallel()
			seed := wlgen.Seed(t, uint64(20261202+i))
			runInitialCopy(t, cp, seed, fmt.Sprintf("cp%d", i))
		})
	}
}

func runInitialCopy(t *testing.T, cp copyPair, seed uint64, id string) {
	ctx := context.Background()
	const txs, bigRows = 40, 3000
	w := wlgen.Generate(wlgen.Config{Seed: seed, Source: wlgen.Engine(cp.src.engine), Target: wlgen.Engine(cp.to), Txs: txs, MaxStmts: 8})
	s, d := newEndpoint(t, cp.src.engine), newEndpoint(t, cp.to)
	for _, e := range []*endpoint{s, d} {
		for _, ddl := range append(w.Schema.DDL(wlgen.Engine(e.engine)), copyDDL(e.engine)...) {
			if err := e.exec(ctx, ddl); err != nil {
				t.Fatalf("%s: %s: %v", e.engine, ddl, err)
			}
		}
	}
	srcDB, srcCmp := workloadDB(s)
	_, dstCmp := workloadDB(d)
	if err := w.Apply(ctx, srcDB, w.Txs[:txs/2]); err != nil {
		t.Fatal(err)
	}
	if err := fillCopyTables(ctx, s, bigRows); err != nil {
		t.Fatal(err)
	}
	tables := append(w.Schema.TableNames(), copyTables...)
	dstURL, _ := d.viaProxy(t, 5*time.Millisecond)
	if cp.pooled {
		dstURL = throughPgBouncer(t, d, 5*time.Millisecond)
	}
	o := daemon.StreamOptions{
		ID: id, SourceURL: s.url, TargetURL: dstURL, Tables: tableNames(t, tables), StateDir: t.TempDir(),
		SourceMode: cp.src.mode, PollInterval: 50 * time.Millisecond, KillBudget: 5 * time.Second,
		CopyWorkers: 3, CopyChunkRows: 400, MaxQueueBytes: 64 << 10, MaxLanes: 2,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	dropSlotAtCleanup(t, s, o.ID, tables)
	run := startStream(t, o)

	// The rest of the workload and the writer run while the copy does.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churned int
	var churnErr, wlErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		churned, churnErr = churn(ctx, s, rand.New(rand.NewPCG(seed, 1)), bigRows, stop)
	}()
	go func() {
		defer wg.Done()
		wlErr = w.Apply(ctx, srcDB, w.Txs[txs/2:])
	}()
	run.waitStarted(t, 120*time.Second)
	close(stop)
	wg.Wait()
	if err := errors.Join(churnErr, wlErr); err != nil {
		t.Fatal(err)
	}
	diffs, why := waitCompared(t, srcCmp, dstCmp, tables, run, 60*time.Second)
	if diffs == nil && why == "" && cp.src.engine == daemon.EngineMySQL && cp.to == daemon.EngineMySQL {
		if err := dbtest.CompareChecksumTable(ctx, s.my, d.my, tables...); err != nil {
			why = "the comparison found the tables equal but CHECKSUM TABLE does not: " + err.Error()
		}
	}
	if diffs != nil || why != "" {
		var b strings.Builder
		fmt.Fprintf(&b, "%s, seed %d (SLUICE_TEST_SEED=%d replays it), %d changes to cp_big during the copy: %s", cp.name, seed, seed, churned, why)
		if diffs != nil {
			fmt.Fprintf(&b, "\n%s", diffs)
		}
		t.Fatal(b.String())
	}
	chunks := copyChunks(t, d, id)
	if len(chunks) == 0 {
		t.Fatal("the target records no copy chunks: was anything copied?")
	}
	for _, c := range chunks {
		if !c.done || c.copies != 1 {
			t.Errorf("chunk %s/%d: done %v, copied %d times; want done, once (no interruption)", c.table, c.n, c.done, c.copies)
		}
	}
	t.Logf("%s: copy and stream converged; %d changes to cp_big during the copy, %d chunks", cp.name, churned, len(chunks))
	if err := run.stop(t); err != nil {
		t.Errorf("stream stopped with error: %v", err)
	}
}

// throughPgBouncer returns a PostgreSQL endpoint's URL through PgBouncer
// (transaction pooling, only extra_float_digits among the ignored startup
// parameters) behind a WAN proxy.
func throughPgBouncer(t *testing.T, e *endpoint, oneWay time.Duration) string {
	t.Helper()
	b := dbtest.PGBouncer(t)
	proxy, err := wanproxy.Start(net.JoinHostPort(b.Host, strconv.Itoa(b.Port)), oneWay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy.Addr()
	return u.String()
}

type chunkRecord struct {
	table  string
	n      int
	done   bool
	copies int
}

// copyChunks reads the copy's chunk records from the target.
func copyChunks(t *testing.T, d *endpoint, stream string) []chunkRecord {
	t.Helper()
	out, err := readChunks(d, stream)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readChunks(d *endpoint, stream string) ([]chunkRecord, error) {
	ctx := context.Background()
	const q = "SELECT table_name, n, done, copies FROM %s WHERE stream = '%s' ORDER BY table_name, n"
	// pgx rows and database/sql rows scan alike.
	type scanner interface {
		Next() bool
		Scan(...any) error
		Err() error
	}
	var rows scanner
	if d.pg != nil {
		r, err := d.pg.Query(ctx, fmt.Sprintf(q, "sluice.copy_chunk", stream))
		if err != nil {
			return nil, err
		}
		defer r.Close()
		rows = r
	} else {
		r, err := d.my.QueryContext(ctx, fmt.Sprintf(q, "sluice_copy_chunk", stream))
		if err != nil {
			return nil, err
		}
		defer r.Close()
		rows = r
	}
	var out []chunkRecord
	for rows.Next() {
		var c chunkRecord
		if err := rows.Scan(&c.table, &c.n, &c.done, &c.copies); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// countDone counts the chunks the target records as done.
func countDone(t *testing.T, d *endpoint, stream string) int {
	chunks, err := readChunks(d, stream)
	if err != nil {
		// Until the copy wrote its plan, the tables do not exist.
		if strings.Contains(err.Error(), "exist") {
			return 0
		}
		t.Fatal(err)
	}
	n := 0
	for _, c := range chunks {
		if c.done {
			n++
		}
	}
	return n
}

// TestInitialCopyKill9 kills sluice with SIGKILL five times while it copies a
// populated source, at moments picked by how many chunks the target holds,
// and starts it again each time, while a writer changes another table.
// After the hand-off the target must equal the source; the chunks of the
// table nobody changed must each have been written once (a resume keeps
// done chunks whose digests match the new snapshot); the changed table's
// done chunks may be written again. Between the kills, a start with
// --from-now is refused: the target holds half a copy.
func TestInitialCopyKill9(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	bin := buildSluice(t)
	for i, cp := range []copyPair{copyPairs[0], copyPairs[3]} {
		t.Run(cp.name, func(t *testing.T) {
			t.Parallel()
			runCopyKill(t, bin, cp, fmt.Sprintf("cpk%d", i), uint64(20261203+i))
		})
	}
}

func runCopyKill(t *testing.T, bin string, cp copyPair, id string, seed uint64) {
	ctx := context.Background()
	const bigRows, chunkRows, hotRows = 60000, 1000, 3000
	s, d := newEndpoint(t, cp.src.engine), newEndpoint(t, cp.to)
	for _, e := range []*endpoint{s, d} {
		for _, ddl := range copyDDL(e.engine) {
			if err := e.exec(ctx, ddl); err != nil {
				t.Fatalf("%s: %s: %v", e.engine, ddl, err)
			}
		}
	}
	if err := fillCopyTables(ctx, s, bigRows); err != nil {
		t.Fatal(err)
	}
	tables := copyTables
	dstURL, _ := d.viaProxy(t, 20*time.Millisecond)
	dir := t.TempDir()
	args := []string{"sync", "start", "--source", s.url, "--target", dstURL, "--tables", strings.Join(tables, ","),
		"--state-dir", dir, "--stream-id", id, "--source-mode", cp.src.mode, "--copy-workers", "2",
		"--copy-chunk-rows", fmt.Sprint(chunkRows), "--poll-interval", "50ms", "--log-format", "json"}
	dropSlotAtCleanup(t, s, id, tables)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churned int
	var churnErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The writer changes only cp_big's first hotRows rows: the chunks
		// past them must each be copied once, whatever the kills.
		churned, churnErr = churnTable(ctx, s, "cp_big", rand.New(rand.NewPCG(seed, 2)), hotRows, stop)
	}()
	defer func() { close(stop); wg.Wait() }()

	total := bigRows/chunkRows + 4 // about: cp_big's chunks and the small tables'
	kills := []int{total / 6, 2 * total / 6, 3 * total / 6, 4 * total / 6, 5 * total / 6}
	for k, at := range kills {
		proc := startSluice(t, bin, args...)
		deadline := time.Now().Add(90 * time.Second)
		for countDone(t, d, id) < at {
			select {
			case err := <-proc.done:
				proc.done <- err
				t.Fatalf("sluice exited (%v) before kill %d; log:\n%s", err, k+1, proc.logText())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the copy did not reach %d done chunks within 90 s; log:\n%s", at, proc.logText())
			}
			time.Sleep(10 * time.Millisecond) // polling interval
		}
		if err := proc.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-proc.done
		proc.done <- nil
		n := countDone(t, d, id)
		t.Logf("kill %d: %d chunks done", k+1, n)
		if n >= total {
			t.Fatalf("kill %d came after the copy had finished: the test needs a slower copy", k+1)
		}
		if k == 0 {
			// Half a copy on the target: streaming from now would leave it so.
			cmd := exec.Command(bin, append(append([]string{}, args...), "--from-now")...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "unfinished initial copy") {
				t.Fatalf("sync start --from-now on a half-copied target: err %v, want exit 2 naming the unfinished copy; output:\n%s", err, out)
			}
		}
	}
	proc := startSluice(t, bin, args...)
	waitStatus(t, proc, dir, 120*time.Second, "the hand-off", func(st daemon.Status) bool { return st.Running && st.Copy == nil })
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	if churnErr != nil {
		t.Fatal(churnErr)
	}
	_, srcCmp := workloadDB(s)
	_, dstCmp := workloadDB(d)
	deadline := time.Now().Add(60 * time.Second)
	for {
		diffs, err := dbtest.CompareTables(ctx, srcCmp, dstCmp, tables...)
		if err != nil {
			t.Fatal(err)
		}
		if diffs.Equal() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target did not converge within 60 s of the hand-off (%d changes to cp_big's first %d rows): %s\nlog:\n%s", churned, hotRows, diffs, proc.logText())
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
	if cp.src.engine == daemon.EngineMySQL && cp.to == daemon.EngineMySQL {
		if err := dbtest.CompareChecksumTable(ctx, s.my, d.my, tables...); err != nil {
			t.Fatalf("CHECKSUM TABLE differs: %v", err)
		}
	}
	// cp_big is split in equal-width id ranges of chunkRows: chunks below
	// hotRows/chunkRows hold the rows the writer changed.
	again := 0
	for _, c := range copyChunks(t, d, id) {
		if !c.done {
			t.Errorf("chunk %s/%d is not done after the hand-off", c.table, c.n)
		}
		hot := strings.HasSuffix(c.table, "cp_big") && c.n < hotRows/chunkRows
		switch {
		case c.copies > 1 && hot:
			again += c.copies - 1
		case c.copies != 1:
			t.Errorf("chunk %s/%d, whose rows nobody changed, was copied %d times: a resume must keep done chunks whose digests match and copy the others once", c.table, c.n, c.copies)
		}
	}
	if again == 0 {
		t.Errorf("no chunk of the rows the writer changed was copied again: the resumes did not compare the done chunks with the new snapshot (or the writer changed nothing: %d changes)", churned)
	}
	t.Logf("%s: converged after %d kills during the copy; %d changes to cp_big's first %d rows; %d chunk copies repeated, all of chunks holding them", cp.name, len(kills), churned, hotRows, again)
}

// churnTable updates and deletes random rows of table among ids 1..n.
func churnTable(ctx context.Context, e *endpoint, table string, r *rand.Rand, n int, stop <-chan struct{}) (int, error) {
	done := 0
	for {
		select {
		case <-stop:
			return done, nil
		default:
		}
		id := r.Int64N(int64(n)) + 1
		q := fmt.Sprintf("UPDATE %s SET k = k + 1, c = 'changed %d' WHERE id = %d", table, done, id)
		if r.IntN(5) == 0 {
			q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, id)
		}
		if err := e.exec(ctx, q); err != nil {
			return done, fmt.Errorf("%s: %w", q, err)
		}
		done++
		time.Sleep(2 * time.Millisecond) // pacing of the writer, not a wait
	}
}

// TestInitialCopyRefusals checks what a copy refuses before it changes the
// source: a target table that holds rows (nothing says which changes they
// hold) and a table without a primary key. Neither may leave a replication
// slot behind: a slot keeps WAL until someone drops it.
func TestInitialCopyRefusals(t *testing.T) {
	t.Parallel() // databases of its own, a stream id (slot) the suite's alone; its subtests run in turn
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		dstRow bool
		keyed  bool
		want   []string
	}{
		{"target not empty", true, true, []string{"target table not empty", "public.r", "TRUNCATE", "--initial-copy=off --from-now"}},
		{"no primary key", false, false, []string{"public.r", "primary key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, d := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EnginePostgres)
			ddl := "CREATE TABLE r (id bigint PRIMARY KEY, v text)"
			if !tc.keyed {
				ddl = "CREATE TABLE r (id bigint, v text)"
			}
			for _, e := range []*endpoint{s, d} {
				if err := e.exec(ctx, ddl); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.exec(ctx, "INSERT INTO r SELECT g, 'v' FROM generate_series(1, 10) g"); err != nil {
				t.Fatal(err)
			}
			if tc.dstRow {
				if err := d.exec(ctx, "INSERT INTO r VALUES (5, 'stale')"); err != nil {
					t.Fatal(err)
				}
			}
			id := "ref" + strings.ReplaceAll(tc.name, " ", "")
			o := daemon.StreamOptions{ID: id, SourceURL: s.url, TargetURL: d.url, Tables: tableNames(t, []string{"r"}),
				StateDir: t.TempDir(), SourceMode: daemon.ModeLogical, Logger: testLogger(t)}
			dropSlotAtCleanup(t, s, id, []string{"r"})
			err := daemon.RunStream(ctx, o)
			if err == nil {
				t.Fatal("the stream started; want a refusal")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if code := daemon.ExitCode(err); tc.dstRow && code != daemon.ExitUsage {
				t.Errorf("exit code %d, want %d (usage: a person must decide)", code, daemon.ExitUsage)
			}
			var slots int
			if err := s.pg.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()").Scan(&slots); err != nil {
				t.Fatal(err)
			}
			if slots != 0 {
				t.Errorf("the refused copy left %d replication slot(s) on the source", slots)
			}
		})
	}
}

// TestInitialCopyAsService runs a copy under the systemd notify protocol
// with metrics served: while it copies, READY=1 has been sent (a copy may
// take hours; systemd must not time the start out), /readyz answers 503
// naming the copy, the copy's metrics are exported and STATUS= carries its
// progress; after the hand-off /readyz answers 200.
func TestInitialCopyAsService(t *testing.T) {
	t.Parallel() // the copy crosses the 96 ms link; NOTIFY_SOCKET goes to its own process only
	bin := buildSluice(t)
	p := newPair(t, 48*time.Millisecond, `CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL)`)
	exec1(t, p.src, `INSERT INTO items SELECT g, repeat('v', 100) || g FROM generate_series(1, 100000) g`)
	ns := listenNotify(t)
	addr := freePort(t)
	dir := t.TempDir()
	dropSlotAtCleanup(t, &endpoint{engine: daemon.EnginePostgres, url: p.srcURL}, "svccopy", []string{"public.items"})
	began := time.Now()
	proc := startSluiceEnv(t, bin, []string{"NOTIFY_SOCKET=" + ns.path}, "sync", "start", "--source", p.srcURL, "--target", p.dstURL, "--tables", "public.items",
		"--state-dir", dir, "--stream-id", "svccopy", "--metrics-listen", addr, "--copy-chunk-rows", "4000",
		"--copy-workers", "2", "--log-format", "json")

	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var sawBusy, sawMetric bool
	deadline := time.Now().Add(90 * time.Second)
	for !(sawBusy && sawMetric) {
		if time.Now().After(deadline) {
			t.Fatalf("within 90 s: /readyz 503 naming the copy %v, copy metrics %v; log:\n%s", sawBusy, sawMetric, proc.logText())
		}
		select {
		case err := <-proc.done:
			proc.done <- err
			t.Fatalf("sluice exited (%v); log:\n%s", err, proc.logText())
		default:
		}
		st, _ := daemon.ReadStatus(dir)
		copying := len(st) == 1 && st[0].Copy != nil && !st[0].Copy.Done
		if code, body := readyz(); code == http.StatusServiceUnavailable && strings.Contains(body, "initial copy") && copying {
			sawBusy = true
		}
		if copying && !sawMetric {
			if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				sawMetric = strings.Contains(string(b), `sluice_copy_active{stream="svccopy"} 1`) &&
					strings.Contains(string(b), `sluice_copy_rows_estimate{stream="svccopy",table="public.items"}`)
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	// READY=1 came while the copy ran, with the copy's line as STATUS.
	ready := ns.wait(t, proc, began, "READY=1", 5*time.Second)
	var status string
	for _, m := range ns.since(ready.at) {
		if strings.HasPrefix(m.line, "STATUS=") {
			status = m.line
			break
		}
	}
	if !strings.Contains(status, "initial copy") {
		t.Errorf("STATUS= with READY=1 was %q, want the copy's progress", status)
	}
	st, _ := daemon.ReadStatus(dir)
	if len(st) != 1 || st[0].Copy == nil {
		t.Logf("the copy had finished by the time READY=1 was read: %+v", st)
	}
	for {
		if code, _ := readyz(); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200 after the copy; log:\n%s", proc.logText())
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	waitConverged(t, p, []string{"public.items"}, 30*time.Second, nil)
	sigterm(t, proc)
}
