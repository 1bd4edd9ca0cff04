package pgtrigger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestTruncate: a TRUNCATE of a streamed table arrives in order with the
// other changes, also inside a transaction and through CASCADE.
func TestTruncate(t *testing.T) {
	f := newFixture(t, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY, a int REFERENCES a)`, `CREATE TABLE other (id int PRIMARY KEY)`)
	r := f.open(t, Config{Tables: dbtest.Tables("a", "b"), Install: true}, sluice.Position{})
	ctx := context.Background()
	f.Exec(t, `INSERT INTO a VALUES (1), (2)`, `INSERT INTO b VALUES (1, 1)`, `INSERT INTO other VALUES (1)`)
	tx, err := f.ConnectPG(t, nil).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbtest.ExecPG(t, tx, `INSERT INTO a VALUES (3)`, `TRUNCATE a CASCADE`, `INSERT INTO a VALUES (4)`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `TRUNCATE other`, `INSERT INTO b VALUES (5, 4)`, `TRUNCATE b`)
	got := collect(t, r, 9, 3)
	dbtest.ExpectChanges(t, got, "insert a [1]", "insert a [2]", "insert b [1 1]", "insert a [3]", "truncate a", "truncate b", "insert a [4]", "insert b [5 4]", "truncate b")
	for _, c := range got {
		if c.Op == sluice.OpTruncate && (c.Key != nil || c.Row != nil || c.Time.IsZero()) {
			t.Errorf("truncate change %+v: want no key or row, and a time", c)
		}
	}
	// Resuming after a truncate reads exactly what follows.
	r2 := f.open(t, Config{Tables: dbtest.Tables("a", "b"), Stream: "other"}, got[5].Pos)
	dbtest.ExpectChanges(t, collect(t, r2, 3, 10), "insert a [4]", "insert b [5 4]", "truncate b")
}

// TestTruncatePartition: a TRUNCATE of a partitioned table is one
// truncate; a TRUNCATE of one of its partitions stops the stream, since
// the target cannot truncate part of a table.
func TestTruncatePartition(t *testing.T) {
	f := newFixture(t, `CREATE TABLE p (id int PRIMARY KEY) PARTITION BY RANGE (id)`,
		`CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10)`,
		`CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (10) TO (30) PARTITION BY RANGE (id)`,
		`CREATE TABLE p21 PARTITION OF p2 FOR VALUES FROM (10) TO (20)`)
	r := f.open(t, Config{Tables: dbtest.Tables("p"), Install: true}, sluice.Position{})
	if n := f.QueryInt(t, `SELECT count(*) FROM pg_trigger WHERE tgname = 'sluice_truncate'`); n != 4 {
		t.Fatalf("%d TRUNCATE triggers, want 4 (p and its three partitions)", n)
	}
	ctx := context.Background()
	f.Exec(t, `INSERT INTO p VALUES (1), (11)`, `TRUNCATE p`, `INSERT INTO p VALUES (2)`)
	// Partitions emptied by the table's own truncate, in its transaction.
	tx, err := f.ConnectPG(t, nil).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbtest.ExecPG(t, tx, `TRUNCATE p`, `TRUNCATE p1`, `TRUNCATE p2`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	dbtest.ExpectChanges(t, collect(t, r, 5, 10), "insert p [1]", "insert p [11]", "truncate p", "insert p [2]", "truncate p")

	for _, tt := range []struct{ name, stmts, partition string }{
		{"alone", `TRUNCATE p1`, "public.p1"},
		{"sub-partition", `TRUNCATE p21`, "public.p21"},
		{"written to after the table's truncate", `BEGIN; TRUNCATE p; INSERT INTO p VALUES (3); TRUNCATE p1; COMMIT`, "public.p1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.open(t, Config{Tables: dbtest.Tables("p"), Stream: tt.name}, positionNow(t, f))
			f.Exec(t, `INSERT INTO p VALUES (5), (15)`)
			dbtest.ExecPG(t, f.ConnectPG(t, nil), tt.stmts)
			var err error
			deadline := time.Now().Add(10 * time.Second)
			for err == nil && time.Now().Before(deadline) {
				_, err = r.Read(ctx, 100)
			}
			if !errors.Is(err, ErrPartialTruncate) || !strings.Contains(err.Error(), "partition "+tt.partition+" of source table public.p ") {
				t.Fatalf("Read after %s: %v, want ErrPartialTruncate naming %s", tt.stmts, err, tt.partition)
			}
			if tn, ok := sluice.ErrTable(err); !ok || tn.Name != "p" {
				t.Errorf("error names table %v, %v; want p", tn, ok)
			}
			f.Exec(t, `TRUNCATE p`)
		})
	}
}

// positionNow is the position after every change committed so far.
func positionNow(t *testing.T, f *fixture) sluice.Position {
	t.Helper()
	ctx := context.Background()
	tx, err := f.ConnectPG(t, nil).BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	pos, err := PositionAt(ctx, tx.Conn())
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

// TestUpgrade: an install by a sluice from before TRUNCATE capture and
// consumers is refused until installed again, which adds what is
// missing, keeps the changes captured, and then changes nothing.
func TestUpgrade(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	ctx := context.Background()
	if err := Install(ctx, f.PG, "", dbtest.Tables("t")); err != nil {
		t.Fatal(err)
	}
	// What the previous sluice installed: no TRUNCATE triggers, consumer
	// or pruned tables.
	f.Exec(t, `DROP TRIGGER sluice_truncate ON t`, `DROP TRIGGER changelog_truncated ON sluice.changelog`,
		`DROP FUNCTION sluice.capture_truncate()`, `DROP FUNCTION sluice.changelog_truncated()`,
		`DROP TABLE sluice.consumer`, `DROP TABLE sluice.pruned`,
		`INSERT INTO t VALUES (1), (2)`)
	quiet := slog.New(slog.DiscardHandler)
	_, err := Open(ctx, f.URL, Config{Tables: dbtest.Tables("t"), Logger: quiet}, sluice.Position{})
	if err == nil || !strings.Contains(err.Error(), "TRUNCATE trigger sluice_truncate on public.t") || !strings.Contains(err.Error(), "sluice source install") {
		t.Fatalf("Open on an old install: %v, want an error asking to install", err)
	}
	if err := Install(ctx, f.PG, "", dbtest.Tables("t")); err != nil {
		t.Fatal(err)
	}
	if missing, err := missingObjects(ctx, f.PG, DefaultSchema, dbtest.Tables("t")); err != nil || len(missing) > 0 {
		t.Fatalf("after the upgrade %v are missing (%v)", missing, err)
	}
	// Current now: a second install takes no lock, so an open writer's
	// transaction does not make it wait.
	writer, err := f.ConnectPG(t, nil).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbtest.ExecPG(t, writer, `INSERT INTO t VALUES (3)`)
	start := time.Now()
	if err := Install(ctx, f.PG, "", dbtest.Tables("t")); err != nil {
		t.Fatalf("Install of a current setup: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Install of a current setup took %v", d)
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := f.open(t, Config{Tables: dbtest.Tables("t")}, sluice.Position{})
	f.Exec(t, `TRUNCATE t`)
	got := collect(t, r, 4, 10)
	dbtest.ExpectChanges(t, got, "insert t [1]", "insert t [2]", "insert t [3]", "truncate t")
	// A position the previous sluice wrote (no transaction id) resumes.
	parts := strings.Split(got[0].Pos.Token, "/")
	old := sluice.Position{Kind: Kind, Token: strings.Join(parts[:3], "/")}
	r2 := f.open(t, Config{Tables: dbtest.Tables("t"), Stream: "old"}, old)
	dbtest.ExpectChanges(t, collect(t, r2, 3, 10), "insert t [2]", "insert t [3]", "truncate t")
}

// TestTwoStreams: two streams read one changelog with overlapping tables.
// One acknowledges everything at once; the other must still read every
// change of its tables, and the changelog is pruned only once both have
// acknowledged.
func TestTwoStreams(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`, `CREATE TABLE u (id int PRIMARY KEY)`, `CREATE TABLE w (id int PRIMARY KEY)`)
	ctx := context.Background()
	logs := &dbtest.LogBuffer{}
	a := f.open(t, Config{Tables: dbtest.Tables("t", "u"), Install: true, Stream: "a", PinWarnAfter: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, sluice.Position{})
	b := f.open(t, Config{Tables: dbtest.Tables("u", "w"), Install: true, Stream: "b"}, sluice.Position{})
	a.pruneEvery, b.pruneEvery = 0, 0
	f.Exec(t, `INSERT INTO t VALUES (1)`, `INSERT INTO u VALUES (1)`, `INSERT INTO w VALUES (1)`, `UPDATE u SET id = 2`, `DELETE FROM t`)
	ga := collect(t, a, 4, 2)
	for _, c := range ga {
		if err := a.Ack(ctx, c.Pos); err != nil {
			t.Fatal(err)
		}
	}
	logRows := func() int { return f.QueryInt(t, `SELECT count(*) FROM sluice.changelog`) }
	if n := logRows(); n != 5 {
		t.Fatalf("%d changelog rows after stream a acknowledged everything, want all 5 (stream b has read none)", n)
	}
	if !strings.Contains(logs.String(), "consumer=b") {
		t.Errorf("stream a did not warn that stream b pins the changelog; log:\n%s", logs)
	}
	gb := collect(t, b, 3, 2)
	dbtest.ExpectChanges(t, gb, "insert u [1]", "insert w [1]", "update u(id=1) [2]")
	if err := b.Ack(ctx, gb[1].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 2 {
		t.Fatalf("%d changelog rows after b acknowledged the third of 5, want 2", n)
	}
	if err := b.Ack(ctx, gb[2].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 1 {
		t.Fatalf("%d changelog rows after both acknowledged their changes, want 1", n)
	}
	if err := Unregister(ctx, f.PG, "", "b"); err != nil {
		t.Fatal(err)
	}
	if err := a.Ack(ctx, ga[3].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 0 {
		t.Fatalf("%d changelog rows after b was unregistered, want 0", n)
	}
	// b's reader notices it was unregistered rather than read on unprotected.
	if _, err := b.Read(ctx, 10); err == nil || !strings.Contains(err.Error(), "consumer record") {
		t.Fatalf("Read after unregistering: %v, want an error", err)
	}
}

// TestPositionLost: a reader opening at a position whose changes were
// pruned fails at Open, whoever pruned them.
func TestPositionLost(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	ctx := context.Background()
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, Stream: "a"}, sluice.Position{})
	r.pruneEvery = 0
	f.Exec(t, `INSERT INTO t VALUES (1)`, `INSERT INTO t VALUES (2)`, `INSERT INTO t VALUES (3)`)
	got := collect(t, r, 3, 10)
	f.Exec(t, `INSERT INTO t VALUES (4)`)
	got = append(got, collect(t, r, 1, 10)...)
	if err := r.Ack(ctx, got[1].Pos); err != nil {
		t.Fatal(err)
	}
	if n := f.QueryInt(t, `SELECT count(*) FROM sluice.changelog`); n != 2 {
		t.Fatalf("%d changelog rows, want 2", n)
	}
	r.Close()
	quiet := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name   string
		stream string
		from   sluice.Position
		want   string // "" when it opens
		rest   int
	}{
		{"behind its own acknowledgement", "a", got[0].Pos, "it had acknowledged", 0},
		{"from the start", "a", sluice.Position{}, "it had acknowledged", 0},
		{"new stream from the start", "b", sluice.Position{}, "for other streams before this one registered", 0},
		{"at its acknowledgement", "a", got[1].Pos, "", 2},
		{"new stream after the pruned rows", "c", got[3].Pos, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Open(ctx, f.URL, Config{Tables: dbtest.Tables("t"), Stream: tt.stream, Logger: quiet}, tt.from)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer r.Close()
				collect(t, r, tt.rest, 10)
				return
			}
			if err == nil {
				r.Close()
				t.Fatal("Open succeeded, want ErrPositionLost")
			}
			if !errors.Is(err, ErrPositionLost) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "fresh copy") ||
				!strings.Contains(err.Error(), "stream "+tt.stream) {
				t.Fatalf("Open: %v, want ErrPositionLost saying %q", err, tt.want)
			}
		})
	}
}

// TestChangelogTruncated: a TRUNCATE of the changelog itself stops a
// running stream that had not acknowledged every row, and keeps it from
// resuming at a position from before it; a stream whose position covered
// every row goes on.
func TestChangelogTruncated(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	ctx := context.Background()
	cfg := Config{Tables: dbtest.Tables("t"), Install: true, Stream: "s"}
	r := f.open(t, cfg, sluice.Position{})
	caughtUp := f.open(t, Config{Tables: dbtest.Tables("t"), Stream: "caught-up"}, sluice.Position{})
	caughtUp.pruneEvery = 0
	f.Exec(t, `INSERT INTO t VALUES (1)`, `INSERT INTO t VALUES (2)`)
	got := collect(t, r, 2, 10)
	done := collect(t, caughtUp, 2, 10)
	if err := caughtUp.Ack(ctx, done[1].Pos); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `TRUNCATE sluice.changelog`, `INSERT INTO t VALUES (4)`)
	if _, err := r.Read(ctx, 10); !errors.Is(err, ErrPositionLost) || !strings.Contains(err.Error(), "was truncated") {
		t.Fatalf("Read after the changelog was truncated: %v, want ErrPositionLost", err)
	}
	dbtest.ExpectChanges(t, collect(t, caughtUp, 1, 10), "insert t [4]")
	r.Close()
	cfg.Install = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	if _, err := Open(ctx, f.URL, cfg, got[1].Pos); !errors.Is(err, ErrPositionLost) || !strings.Contains(err.Error(), "was truncated") {
		t.Fatalf("Open after the changelog was truncated: %v, want ErrPositionLost", err)
	}
	// Unregistered, the stream still cannot resume from before the
	// truncate, but from a copy taken after it.
	if err := Unregister(ctx, f.PG, "", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, f.URL, cfg, got[1].Pos); !errors.Is(err, ErrPositionLost) {
		t.Fatalf("Open of an unregistered stream at a position from before the truncate: %v, want ErrPositionLost", err)
	}
	pos := positionNow(t, f)
	f.Exec(t, `INSERT INTO t VALUES (5)`)
	r2 := f.open(t, cfg, pos)
	dbtest.ExpectChanges(t, collect(t, r2, 1, 10), "insert t [5]")
}

// TestProgress: windows that bring no change of the streamed tables hand
// out OpProgress changes, at most once per interval and each past the
// last, and acknowledging one lets the changelog be pruned.
func TestProgress(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`, `CREATE TABLE o (id int PRIMARY KEY)`)
	ctx := context.Background()
	const interval = 300 * time.Millisecond
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 20 * time.Millisecond, ProgressInterval: interval}, sluice.Position{})
	r.pruneEvery = 0
	if err := Install(ctx, f.PG, "", dbtest.Tables("o")); err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `INSERT INTO t VALUES (1)`)
	last := collect(t, r, 1, 10)[0]
	var marks []sluice.Change
	var at []time.Time
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; len(marks) < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d progress changes before the deadline, want 3", len(marks))
		}
		f.Exec(t, fmt.Sprintf(`INSERT INTO o VALUES (%d)`, i))
		cs, err := r.Read(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Op != sluice.OpProgress || c.Table != nil || c.Key != nil || c.Row != nil {
				t.Fatalf("Read while only o changes = %s, want progress", dbtest.DescribeChanges(cs))
			}
			marks = append(marks, c)
			at = append(at, time.Now())
		}
	}
	prev := last.Pos
	for i, m := range marks {
		if i > 0 && at[i].Sub(at[i-1]) < interval-50*time.Millisecond {
			t.Errorf("progress changes %v apart, want at most one per %v", at[i].Sub(at[i-1]), interval)
		}
		if covered, done, err := Covers(prev, m.Pos); err != nil || covered || !done {
			t.Errorf("progress %v after %v: covered %v, done %v, %v; want it past", m.Pos, prev, covered, done, err)
		}
		prev = m.Pos
	}
	// A reader resumed at a progress position reads what follows it.
	f.Exec(t, `INSERT INTO t VALUES (2)`)
	r2 := f.open(t, Config{Tables: dbtest.Tables("t"), Stream: "resumed"}, marks[2].Pos)
	dbtest.ExpectChanges(t, collect(t, r2, 1, 10), "insert t [2]")
	r2.Close()
	if err := Unregister(ctx, f.PG, "", "resumed"); err != nil {
		t.Fatal(err)
	}
	// Acknowledging a progress change prunes the other table's rows it
	// passed.
	collect(t, r, 1, 10)
	var mark sluice.Change
	deadline = time.Now().Add(10 * time.Second)
	for mark.Op != sluice.OpProgress {
		if time.Now().After(deadline) {
			t.Fatal("no progress change after the last insert")
		}
		f.Exec(t, `SELECT pg_current_xact_id()`) // moves the snapshot, writes nothing
		cs, err := r.Read(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			mark = c
		}
	}
	if err := r.Ack(ctx, mark.Pos); err != nil {
		t.Fatal(err)
	}
	if n := f.QueryInt(t, `SELECT count(*) FROM sluice.changelog`); n != 0 {
		t.Fatalf("%d changelog rows after acknowledging a progress change past them all, want 0", n)
	}
}

func TestStart(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
	want := sluice.Position{Kind: Kind, Token: "1:1://0"}
	if got := r.Start(); got != want {
		t.Fatalf("Start() of a reader opened without a position = %v, want %v", got, want)
	}
	f.Exec(t, `INSERT INTO t VALUES (1)`, `INSERT INTO t VALUES (2)`)
	got := collect(t, r, 2, 1)
	if r.Start() != want {
		t.Fatalf("Start() moved to %v after reading", r.Start())
	}
	r2 := f.open(t, Config{Tables: dbtest.Tables("t")}, got[0].Pos)
	if r2.Start() != got[0].Pos {
		t.Fatalf("Start() = %v, want the position it was opened at, %v", r2.Start(), got[0].Pos)
	}
	r3 := f.open(t, Config{Tables: dbtest.Tables("t")}, r.Start())
	dbtest.ExpectChanges(t, collect(t, r3, 2, 10), "insert t [1]", "insert t [2]")
}

// TestCollation: a column is described with its collation only when the
// collation is nondeterministic.
func TestCollation(t *testing.T) {
	f := newFixture(t, `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
		`CREATE DOMAIN ci_text AS text COLLATE ci`,
		`CREATE TABLE c (id text COLLATE ci PRIMARY KEY, plain text, c text COLLATE "C", d ci_text, n int, arr text[] COLLATE ci, b bytea)`)
	r := f.open(t, Config{Tables: dbtest.Tables("c"), Install: true}, sluice.Position{})
	want := map[string]string{"id": "ci", "plain": "", "c": "", "d": "ci", "n": "", "arr": "ci", "b": ""}
	for _, c := range r.Tables()[0].Columns {
		if c.Collation != want[c.Name] {
			t.Errorf("column %s (%s) collation %q, want %q", c.Name, c.Type, c.Collation, want[c.Name])
		}
	}
}

// TestCoversReread reads a changelog in one set of windows, then again
// from a position inside the first window after more commits, in windows
// cut differently (one spans what were three, with a long transaction's
// change moved ahead of changes read before it the first time), and
// checks Covers against the first reading for every pair of positions.
func TestCoversReread(t *testing.T) {
	f := newFixture(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	ctx := context.Background()
	r1 := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, Stream: "s"}, sluice.Position{})
	begin := func() pgx.Tx {
		tx, err := f.ConnectPG(t, nil).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dbtest.ExecPG(t, tx, `SELECT pg_current_xact_id()`)
		return tx
	}
	commit := func(tx pgx.Tx) {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l1 := begin()
	dbtest.ExecPG(t, l1, `INSERT INTO t VALUES (100, 'l1')`) // id 1, commits after window 1
	f.Exec(t, `INSERT INTO t VALUES (1, 'a')`, `INSERT INTO t VALUES (2, 'a')`, `INSERT INTO t VALUES (3, 'a')`)
	first := collect(t, r1, 3, 2) // window 1: ids 2, 3 | 4
	l2 := begin()
	dbtest.ExecPG(t, l2, `INSERT INTO t VALUES (200, 'l2')`) // id 5, commits after window 2
	commit(l1)
	f.Exec(t, `INSERT INTO t VALUES (4, 'b')`, `INSERT INTO t VALUES (5, 'b')`)
	first = append(first, collect(t, r1, 3, 2)...) // window 2: ids 1, 6 | 7
	commit(l2)
	f.Exec(t, `UPDATE t SET v = 'c' WHERE id = 100`)
	first = append(first, collect(t, r1, 2, 2)...) // window 3: ids 5, 8
	r1.Close()
	f.Exec(t, `INSERT INTO t VALUES (6, 'd')`, `DELETE FROM t WHERE id = 1`)

	idOf := func(c sluice.Change) int64 {
		p, err := parsePosition(c.Pos)
		if err != nil {
			t.Fatal(err)
		}
		return p.last
	}
	r2 := f.open(t, Config{Tables: dbtest.Tables("t"), Stream: "s"}, first[0].Pos)
	second := collect(t, r2, len(first)-1+2, 100)
	var order []int64
	for _, c := range second {
		order = append(order, idOf(c))
	}
	if fmt.Sprint(order) != "[3 4 1 5 6 7 8 9 10]" {
		t.Fatalf("second reading in id order %v, want [3 4 1 5 6 7 8 9 10] (window 1's rest, then one window)", order)
	}
	for i, p := range first {
		// What a target holding everything up to p holds.
		held := map[int64]bool{}
		for _, c := range first[:i+1] {
			held[idOf(c)] = true
		}
		for j, c := range second {
			covered, done, err := Covers(p.Pos, c.Pos)
			if err != nil {
				t.Fatalf("Covers(%v, %v): %v", p.Pos, c.Pos, err)
			}
			if covered != held[idOf(c)] {
				t.Errorf("Covers(first[%d] id %d, second[%d] id %d) covered = %v, want %v", i, idOf(p), j, idOf(c), covered, !covered)
			}
			if done {
				for _, later := range second[j+1:] {
					if held[idOf(later)] {
						t.Errorf("Covers(first[%d] id %d, second[%d] id %d) done, but id %d later is covered", i, idOf(p), j, idOf(c), idOf(later))
					}
				}
			}
			// From the second window on, the second reading's windows start
			// after everything the first reading saw.
			if j >= 2 && i < 3 && !done {
				t.Errorf("Covers(first[%d] id %d, second[%d] id %d) not done past p's window", i, idOf(p), j, idOf(c))
			}
		}
	}
}
