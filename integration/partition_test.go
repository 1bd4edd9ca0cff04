package integration

// Acceptance tests of issue 35: PostgreSQL partitioned tables streamed
// under the name the user gives, in both source modes, to a target
// partitioned the same way, otherwise, or not at all, on PostgreSQL and
// MariaDB.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
)

// partitionedEvents is the source table of issue 35: monthly partitions
// for the first half of 2026 and a default one.
func partitionedEvents() []string {
	ddl := []string{`CREATE TABLE events (id bigint, day date, kind text, payload text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)`}
	for m := 1; m <= 6; m++ {
		ddl = append(ddl, fmt.Sprintf(`CREATE TABLE events_2026_%02d PARTITION OF events FOR VALUES FROM ('2026-%02d-01') TO ('2026-%02d-01')`, m, m, m+1))
	}
	return append(ddl, `CREATE TABLE events_default PARTITION OF events DEFAULT`)
}

// eventsWriter writes to the partitioned events table, from one session,
// transactions of inserts into every partition, updates, moves to another
// month's partition and deletes; halfway it creates a new partition (July)
// and writes into it from then on.
type eventsWriter struct {
	s    *endpoint
	r    *rand.Rand
	next int64            // next id
	live map[int64]string // id → its day
	ids  []int64
}

// day picks a day of a month the table has a partition for: January to
// June, or, once created, July; or one for the default partition.
func (w *eventsWriter) day(july bool) string {
	months := 6
	if july {
		months = 7
	}
	if w.r.IntN(8) == 0 {
		return fmt.Sprintf("2027-%02d-%02d", 1+w.r.IntN(12), 1+w.r.IntN(28))
	}
	return fmt.Sprintf("2026-%02d-%02d", 1+w.r.IntN(months), 1+w.r.IntN(28))
}

func (w *eventsWriter) pick() (int64, bool) {
	for len(w.ids) > 0 {
		i := w.r.IntN(len(w.ids))
		id := w.ids[i]
		if _, ok := w.live[id]; ok {
			return id, true
		}
		w.ids[i] = w.ids[len(w.ids)-1]
		w.ids = w.ids[:len(w.ids)-1]
	}
	return 0, false
}

func (w *eventsWriter) insert(july bool) stmt {
	id, day := w.next, w.day(july)
	w.next++
	w.live[id] = day
	w.ids = append(w.ids, id)
	return st(`INSERT INTO events VALUES (?, ?::date, ?, ?)`, id, day, fmt.Sprintf("k%d", w.r.IntN(5)), strings.Repeat("p", w.r.IntN(40)))
}

// run writes txs transactions.
func (w *eventsWriter) run(ctx context.Context, txs int) error {
	for i := 0; i < txs; i++ {
		july := i >= txs/2
		if i == txs/2 {
			// No row is in July yet, so the default partition holds none.
			if err := w.s.exec(ctx, `CREATE TABLE events_2026_07 PARTITION OF events FOR VALUES FROM ('2026-07-01') TO ('2026-08-01')`); err != nil {
				return err
			}
		}
		var stmts []stmt
		for range 1 + w.r.IntN(4) {
			id, ok := w.pick()
			switch k := w.r.IntN(10); {
			case k < 4 || !ok:
				stmts = append(stmts, w.insert(july))
			case k < 6:
				stmts = append(stmts, st(`UPDATE events SET payload = ?, kind = 'u' WHERE id = ?`, fmt.Sprintf("u%d", i), id))
			case k < 8:
				// A move to another month's partition, mostly.
				day := w.day(july)
				w.live[id] = day
				stmts = append(stmts, st(`UPDATE events SET day = ?::date WHERE id = ?`, day, id))
			default:
				delete(w.live, id)
				stmts = append(stmts, st(`DELETE FROM events WHERE id = ?`, id))
			}
		}
		if err := w.s.inTx(ctx, stmts...); err != nil {
			return err
		}
		time.Sleep(2 * time.Millisecond) // pacing of the writer, not a wait
	}
	return nil
}

// partitionPairs are the source modes and targets of
// TestPartitionedTable.
var partitionPairs = []struct {
	name   string
	mode   string
	to     daemon.Engine
	target []string
}{
	{"logical_to_pg_partitioned_alike", daemon.ModeLogical, daemon.EnginePostgres, partitionedEvents()},
	{"logical_to_pg_plain", daemon.ModeLogical, daemon.EnginePostgres, []string{plainEvents}},
	{"trigger_to_pg_partitioned_by_hash", daemon.ModeTrigger, daemon.EnginePostgres, []string{
		`CREATE TABLE events (id bigint, day date, kind text, payload text, PRIMARY KEY (id, day)) PARTITION BY HASH (id)`,
		`CREATE TABLE events_h0 PARTITION OF events FOR VALUES WITH (MODULUS 3, REMAINDER 0)`,
		`CREATE TABLE events_h1 PARTITION OF events FOR VALUES WITH (MODULUS 3, REMAINDER 1)`,
		`CREATE TABLE events_h2 PARTITION OF events FOR VALUES WITH (MODULUS 3, REMAINDER 2)`,
	}},
	{"trigger_to_pg_plain", daemon.ModeTrigger, daemon.EnginePostgres, []string{plainEvents}},
	{"logical_to_mariadb_partitioned", daemon.ModeLogical, daemon.EngineMySQL, []string{
		`CREATE TABLE events (id bigint, day date, kind longtext, payload longtext, PRIMARY KEY (id, day)) PARTITION BY RANGE COLUMNS (day) (
			PARTITION p2026h1 VALUES LESS THAN ('2026-07-01'), PARTITION p2026h2 VALUES LESS THAN ('2027-01-01'), PARTITION pmax VALUES LESS THAN (MAXVALUE))`,
	}},
}

// plainEvents is the events table, not partitioned.
const plainEvents = `CREATE TABLE events (id bigint, day date, kind text, payload text, PRIMARY KEY (id, day))`

// TestPartitionedTable is issue 35's acceptance. stream: a partitioned source
// table is copied, then streamed while a writer inserts into every
// partition, updates rows, moves rows across partitions, deletes and adds
// a partition, through 2 to 4 lanes, with sluice killed (-9) and started
// again; the target, partitioned the same way, otherwise, or not at
// all, on PostgreSQL or MariaDB, must then equal the source by the
// independent comparison (and by sluice verify). On main the logical
// stream stopped after the copy (`relation "events" is already member of
// publication`).
//
// detach_stops: a partition detached from a streamed table stops the
// stream with an error naming it, in both source modes, and a stream
// started again stops there again rather than go on with the target
// holding the partition's rows.
func TestPartitionedTable(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	bin := buildSluice(t)
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		for i, tc := range partitionPairs {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				runPartitionedStream(t, bin, i, tc.mode, tc.to, tc.target)
			})
		}
	})
	t.Run("detach_stops", func(t *testing.T) {
		t.Parallel()
		for _, mode := range []string{daemon.ModeLogical, daemon.ModeTrigger} {
			t.Run(mode, func(t *testing.T) {
				t.Parallel()
				runPartitionDetach(t, mode)
			})
		}
	})
}

// runPartitionedStream is one pair of TestPartitionedTable/stream.
func runPartitionedStream(t *testing.T, bin string, i int, mode string, to daemon.Engine, target []string) {
	ctx := context.Background()
	s, d := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, to)
	for _, q := range partitionedEvents() {
		if err := s.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range target {
		if err := d.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	seed := uint64(20261206 + i)
	w := &eventsWriter{s: s, r: rand.New(rand.NewPCG(seed, 35)), next: 1, live: map[int64]string{}}
	var rows []stmt
	for range 1500 {
		rows = append(rows, w.insert(false))
	}
	for len(rows) > 0 {
		n := min(len(rows), 500)
		if err := s.inTx(ctx, rows[:n]...); err != nil {
			t.Fatal(err)
		}
		rows = rows[n:]
	}
	id := fmt.Sprintf("part%d", i)
	dir := t.TempDir()
	args := []string{"sync", "start", "--source", s.url, "--target", d.url, "--tables", "public.events",
		"--state-dir", dir, "--stream-id", id, "--source-mode", mode, "--min-lanes", "2", "--max-lanes", "4",
		"--copy-chunk-rows", "1000", "--apply-batch-size", "50", "--poll-interval", "50ms", "--log-format", "json"}
	dropSlotAtCleanup(t, s, id, []string{"public.events"})
	t.Logf("seed %d", seed)

	// Preflight accepts the partitioned table.
	out, err := exec.Command(bin, append([]string{"preflight"}, args[2:]...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "partitioned: 7 ") || !strings.Contains(string(out), "sync start would start this stream") {
		t.Fatalf("preflight: %v\n%s", err, out)
	}

	werr := make(chan error, 1)
	proc := startSluice(t, bin, args...)
	waitStatus(t, proc, dir, 90*time.Second, "the hand-off", func(st daemon.Status) bool { return st.Running && st.Copy == nil })
	go func() { werr <- w.run(ctx, 300) }()
	st := waitStatus(t, proc, dir, 60*time.Second, "progress", func(st daemon.Status) bool { return st.Running && st.Applied > 150 })
	if err := proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-proc.done
	proc.done <- nil
	t.Logf("killed (-9) after %d changes applied", st.Applied)
	proc = startSluice(t, bin, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sluice's log after the restart:\n%s", proc.logText())
		}
	})
	if err := <-werr; err != nil {
		t.Fatalf("writer: %v", err)
	}
	table := "public.events"
	if to == daemon.EngineMySQL {
		table = "events"
	}
	waitEqual(t, s, d, []string{table}, 90*time.Second, nil)
	if strings.Contains(proc.logText(), `"level":"ERROR"`) {
		t.Errorf("sluice logged an error:\n%s", proc.logText())
	}
	sigterm(t, proc)
}

// runPartitionDetach is one mode of TestPartitionedTable/detach_stops.
func runPartitionDetach(t *testing.T, mode string) {
	ctx := context.Background()
	s, d := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EnginePostgres)
	for _, q := range partitionedEvents() {
		if err := s.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		if err := d.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.exec(ctx, `INSERT INTO events SELECT g, date '2026-01-01' + g % 200, 'k', 'p' FROM generate_series(1, 500) g`); err != nil {
		t.Fatal(err)
	}
	id := "pstop" + mode
	o := daemon.StreamOptions{ID: id, SourceURL: s.url, TargetURL: d.url, Tables: tableNames(t, []string{"public.events"}),
		StateDir: t.TempDir(), SourceMode: mode, PollInterval: 50 * time.Millisecond, KillBudget: 5 * time.Second}
	dropSlotAtCleanup(t, s, id, []string{"public.events"})
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)
	waitEqual(t, s, d, []string{"public.events"}, 60*time.Second, run)
	if err := s.exec(ctx, `ALTER TABLE events DETACH PARTITION events_2026_03`); err != nil {
		t.Fatal(err)
	}
	if err := s.exec(ctx, `INSERT INTO events VALUES (1000, '2026-01-02', 'after', 'the detach')`); err != nil {
		t.Fatal(err)
	}
	const want = "partition public.events_2026_03 of source table public.events was detached or dropped"
	for attempt := range 2 {
		var err error
		select {
		case err = <-run.done:
			run.done <- err
		case <-time.After(60 * time.Second):
			t.Fatalf("run %d: the stream did not stop within 60 s of the detach", attempt+1)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("run %d: stream ended with %v, want %q", attempt+1, err, want)
		}
		if code := daemon.ExitCode(err); code == daemon.ExitOK || errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: exit code %d for %v", attempt+1, code, err)
		}
		if attempt == 0 {
			run = startStream(t, o)
		}
	}
}
