package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	wlgen "github.com/sluice-cdc/sluice/internal/workload"
)

// randomizedN is the number of source transactions per run: small in `go
// test`, larger with SLUICE_RANDOMIZED_N for a long soak.
func randomizedN(t *testing.T) int {
	n := 20
	if s := os.Getenv("SLUICE_RANDOMIZED_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("SLUICE_RANDOMIZED_N=%q: want a positive number of transactions", s)
		}
		n = v
	}
	return n
}

// randomizedWithout lists generator steps to leave out
// (SLUICE_RANDOMIZED_WITHOUT=uk-swap,uk-chain), to find which kind of
// change a failure needs, or what else fails once it is out of the way.
func randomizedWithout() []string {
	var out []string
	for _, s := range strings.Split(os.Getenv("SLUICE_RANDOMIZED_WITHOUT"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// randomizedSession is the session form a MySQL-family source's run ends
// with: by default each of the four forms once per source mode (one per
// target and lane count), SLUICE_RANDOMIZED_SESSION=noblob (minimal,
// statement, mixed, none) for every run.
func randomizedSession(t *testing.T, target, lanes int) wlgen.SessionForm {
	if s, ok := os.LookupEnv("SLUICE_RANDOMIZED_SESSION"); ok {
		f, err := wlgen.ParseSessionForm(s)
		if err != nil {
			t.Fatalf("SLUICE_RANDOMIZED_SESSION: %v", err)
		}
		return f
	}
	return wlgen.SessionForms[(2*target+lanes)%len(wlgen.SessionForms)]
}

// randomizedSource is one way sluice reads a source.
type randomizedSource struct {
	name   string
	engine daemon.Engine
	mode   string
}

var randomizedSources = []randomizedSource{
	{"pg_logical", daemon.EnginePostgres, daemon.ModeLogical},
	{"pg_trigger", daemon.EnginePostgres, daemon.ModeTrigger},
	{"maria_binlog", daemon.EngineMySQL, daemon.ModeBinlog},
	{"maria_trigger", daemon.EngineMySQL, daemon.ModeTrigger},
}

// TestRandomized runs the seeded workload generator (internal/workload)
// through sluice for every source → target pair it supports — PostgreSQL
// logical and trigger, MariaDB binlog and trigger, to PostgreSQL and to
// MariaDB — with the target behind a 5 ms WAN proxy, first with one lane
// and then with several, and checks that the target converges to exactly
// the source, judged by dbtest.CompareTables (values in their binary
// form, never the text both servers print). The workload holds key
// changes and chains of them, keys reused inside a transaction, TOASTed
// values left unchanged, unique-value swaps, NULL transitions, a composite
// key, every type pair's edge values, and a graph of tables joined by
// foreign keys of every action (the same on both sides), whose parents it
// deletes and renumbers so that the actions fire. A MariaDB source's run
// then goes on in a session that logs partial rows or statements
// (randomizedSession, runSessionForm). A failure prints the seed, the
// pair, the lanes, every differing row and the source statements that
// touched it; SLUICE_TEST_SEED=<seed> replays it.
func TestRandomized(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	n := randomizedN(t)
	lanes := []struct{ min, max int }{{1, 1}, {2, 4}}
	for i, src := range randomizedSources {
		for j, to := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
			pair := src.name + "_to_" + string(to)
			// A fixed seed per pair, so that go test is repeatable; the
			// same one for every lane count, so that a difference between
			// them is the lanes'.
			def := uint64(20250601 + 10*i + j)
			t.Run(pair, func(t *testing.T) {
				t.Parallel()
				seed := wlgen.Seed(t, def)
				for k, l := range lanes {
					t.Run(fmt.Sprintf("lanes_%d_%d", l.min, l.max), func(t *testing.T) {
						id := fmt.Sprintf("rnd%d%d%d", i, j, k) // slots are per cluster: one name per run
						form := wlgen.FullRows
						if src.engine == daemon.EngineMySQL {
							form = randomizedSession(t, j, k)
						}
						// The one-lane run starts from an empty target
						// database: sync start creates its tables from the
						// source's (every type the workload has through
						// the type map) and copies them (empty) first.
						runRandomized(t, src, to, seed, n, l.min, l.max, id, form, k == 0)
					})
				}
			})
		}
	}
}

func runRandomized(t *testing.T, src randomizedSource, to daemon.Engine, seed uint64, n, minLanes, maxLanes int, id string, form wlgen.SessionForm, create bool) {
	ctx := context.Background()
	start := time.Now()
	tail := 0
	if form != wlgen.FullRows {
		tail = sessionTail
	}
	w := wlgen.Generate(wlgen.Config{
		Seed: seed, Source: wlgen.Engine(src.engine), Target: wlgen.Engine(to), Txs: n + tail, MaxStmts: 8, Corpus: true,
		Without: randomizedWithout(), ForeignKeys: true,
	})
	// The transactions up to from run in full rows, the others in form
	// (from is the first after the n whose first statement form logs
	// partly).
	from := len(w.Txs)
	if form != wlgen.FullRows {
		if from = w.FirstLoggedAs(form, n); from < 0 {
			t.Fatalf("seed %d: none of the %d transactions after the first %d starts with a statement that %s logs partly: lengthen sessionTail", seed, tail, n, form)
		}
	}
	s, d := newEndpoint(t, src.engine), newEndpoint(t, to)
	ddls := map[*endpoint]*wlgen.Schema{s: w.Schema, d: w.Schema}
	if create {
		// sync start creates the target's tables, but for the corpus's:
		// its target types are the pairings under test (a PostgreSQL enum
		// in a MySQL ENUM, an unconstrained numeric as its text), which
		// the user chooses and sluice would not.
		ddls[d] = &wlgen.Schema{Source: w.Schema.Source, Tables: []*wlgen.Table{w.Schema.Table(wlgen.CorpusTable)}}
	}
	for _, e := range []*endpoint{s, d} {
		for _, ddl := range ddls[e].DDL(wlgen.Engine(e.engine)) {
			if err := e.exec(ctx, ddl); err != nil {
				t.Fatalf("%s: %s: %v", e.engine, ddl, err)
			}
		}
	}
	dstURL, _ := d.viaProxy(t, 5*time.Millisecond)
	tables := w.Schema.TableNames()
	var o daemon.StreamOptions
	if src.mode == daemon.ModeTrigger {
		o = daemon.StreamOptions{
			ID: id, SourceURL: s.url, TargetURL: dstURL, Tables: tableNames(t, tables), StateDir: t.TempDir(),
			SourceMode: daemon.ModeTrigger, PollInterval: 50 * time.Millisecond, KillBudget: 5 * time.Second,
		}
	} else {
		// The tables exist, empty, on both sides: the stream starts from
		// now; or they are to be created, and it copies first.
		o = logOptions(t, id, s, dstURL, tables)
		o.FromNow = !create
		dropSlotAtCleanup(t, s, o.ID, tables)
	}
	o.MinLanes, o.MaxLanes = minLanes, maxLanes
	// Warnings and errors only: a failing run's report is the diff below,
	// not thousands of info lines.
	o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)

	srcDB, srcCmp := workloadDB(s)
	if err := w.Apply(ctx, srcDB, w.Txs[:from]); err != nil {
		t.Fatal(err) // the generator's model is wrong, not sluice
	}
	_, dstCmp := workloadDB(d)
	within := 30*time.Second + time.Duration(n)*50*time.Millisecond
	diffs, why := waitCompared(t, srcCmp, dstCmp, tables, run, within)
	if diffs == nil && why == "" && src.engine == daemon.EngineMySQL && to == daemon.EngineMySQL {
		// Between two MariaDB databases the server's own row checksum
		// is a second judge that shares no code with the comparison.
		if err := dbtest.CompareChecksumTable(ctx, s.my, d.my, tables...); err != nil {
			why = "the comparison found the tables equal but CHECKSUM TABLE does not: " + err.Error()
		}
	}
	stopped := false
	if diffs == nil && why == "" && form != wlgen.FullRows {
		diffs, why, stopped = runSessionForm(t, w, form, from, src, s, d, run, within)
	}
	if diffs == nil && why == "" {
		st := run.current.Load().Stats()
		t.Logf("converged: %d transactions, %d statements, %d changes applied in %d commits, %v",
			len(w.Txs), w.Statements(), st.Applied, st.Seq, time.Since(start).Round(10*time.Millisecond))
		if err := run.stop(t); err != nil && !stopped {
			t.Errorf("stream stopped with error: %v", err)
		}
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s → %s (%s), lanes %d–%d, seed %d (SLUICE_TEST_SEED=%d replays it): %s", src.name, to, src.mode, minLanes, maxLanes, seed, seed, why)
	if form != wlgen.FullRows {
		fmt.Fprintf(&b, " [transactions %d… in a session with %s; SLUICE_RANDOMIZED_SESSION=%s for every run]", from, form.Setting(), strings.ToLower(string(form)))
	}
	if len(w.Config.Without) > 0 {
		fmt.Fprintf(&b, " [without steps %s]", strings.Join(w.Config.Without, ","))
	}
	if diffs != nil {
		fmt.Fprintf(&b, "\n%s", diffs)
		b.WriteString(w.TraceDiffs(diffs))
	}
	t.Error(b.String())
}

// workloadDB is an endpoint as the workload runner and the comparison
// take it.
func workloadDB(e *endpoint) (wlgen.DB, dbtest.DB) {
	if e.pg != nil {
		return wlgen.DB{PG: e.pg}, dbtest.DB{PG: e.pg}
	}
	return wlgen.DB{My: e.my}, dbtest.DB{My: e.my}
}

// waitCompared polls the comparison until the target equals the source.
// It gives up, returning the last differences and why, when the deadline
// passes, when the stream stops, when the stream is caught up (nothing
// read, queued or in flight) and has applied nothing for a while with the
// tables still different, or when it makes no progress while reporting
// an error: waiting longer would change nothing, and a failing pair must
// not hold the whole test up until the deadline.
func waitCompared(t *testing.T, src, dst dbtest.DB, tables []string, run *running, within time.Duration) (dbtest.Diffs, string) {
	t.Helper()
	ctx := context.Background()
	const settle = 3 * time.Second
	deadline := time.Now().Add(within)
	var lastApplied uint64
	var stillSince time.Time
	for {
		diffs, err := dbtest.CompareTables(ctx, src, dst, tables...)
		if err != nil {
			t.Fatalf("compare: %v", err)
		}
		if diffs.Equal() {
			return nil, ""
		}
		select {
		case err := <-run.done:
			run.done <- err
			return diffs, fmt.Sprintf("the stream stopped before the target converged: %v", err)
		default:
		}
		st := run.current.Load().Stats()
		now := time.Now()
		if st.Applied != lastApplied || stillSince.IsZero() {
			lastApplied, stillSince = st.Applied, now
		}
		switch still := now.Sub(stillSince); {
		case st.CaughtUp && still > settle:
			return diffs, fmt.Sprintf("the stream caught up (%d changes applied, nothing pending for %v) and the target still differs", st.Applied, still.Round(time.Second))
		case st.LastError != "" && still > 2*settle:
			return diffs, fmt.Sprintf("no progress for %v (%d changes applied, %d queued); last error: %s", still.Round(time.Second), st.Applied, st.QueueLen, st.LastError)
		case now.After(deadline):
			return diffs, fmt.Sprintf("the target did not converge within %v (%d changes applied, %d queued, last error %q)", within, st.Applied, st.QueueLen, st.LastError)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not a wait for replication
	}
}
