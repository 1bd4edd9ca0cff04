package pglogical

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	gen "github.com/sluice-cdc/sluice/internal/workload"
)

// TestCatchUpMatchesStream reads a generated backlog (every change kind,
// unchanged TOAST values, key chains) through the SQL interface, in calls
// small enough that transactions straddle them, then what commits after it
// switched to streaming; and reads the same WAL from a second slot by
// streaming only. Both must hand out the same changes at the same
// positions. It also resumes from positions inside the backlog through a
// catch-up.
func TestCatchUpMatchesStream(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("workload seed %d", seed)
	w := gen.Generate(gen.Config{Seed: seed, Source: gen.Postgres, Target: gen.Postgres, Txs: 120, MaxStmts: 8})
	// Each statement is one change only in tables that are not
	// partitioned: a key change that moves a row to another partition is a
	// delete and an insert.
	for _, tbl := range w.Schema.Tables {
		tbl.Partitioning = nil
	}
	f := newFixture(t, w.Schema.TableNames(), w.Schema.DDL(gen.Postgres)...)
	ctx := context.Background()
	// Sessions default to other settings than the reader's: the values'
	// text must not depend on them, by either path.
	f.Exec(t, `ALTER DATABASE `+f.Name+` SET TimeZone = 'Asia/Kolkata'`, `ALTER DATABASE `+f.Name+` SET DateStyle = 'SQL, DMY'`,
		`ALTER DATABASE `+f.Name+` SET IntervalStyle = 'sql_standard'`, `ALTER DATABASE `+f.Name+` SET extra_float_digits = 0`)
	streamed := f.cfg
	streamed.Slot = f.cfg.Slot + "_s"
	streamed.CatchUpRows = -1
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := Uninstall(ctx, f.URL, streamed); err != nil {
			t.Errorf("Uninstall: %v", err)
		}
	})
	// Both slots start before the backlog.
	for _, cfg := range []Config{f.cfg, streamed} {
		f.open(t, cfg, sluice.Position{}).Close()
	}
	half := len(w.Txs) * 2 / 3
	if err := w.Apply(ctx, gen.DB{PG: f.PG}, w.Txs[:half]); err != nil {
		t.Fatal(err)
	}
	backlog := 0
	for _, tx := range w.Txs[:half] {
		backlog += len(tx.Stmts)
	}
	n := w.Statements()

	logs := &logCapture{}
	cu := f.cfg
	cu.CatchUpRows = 7
	cu.Logger = slog.New(logs)
	r := f.open(t, cu, sluice.Position{})
	got := collectN(t, r, backlog, 50)
	waitLog(t, logs, "caught up through the SQL interface")
	if err := w.Apply(ctx, gen.DB{PG: f.PG}, w.Txs[half:]); err != nil {
		t.Fatal(err)
	}
	got = append(got, collect(t, r, n-backlog, 50)...)
	r.Close()

	want := collect(t, f.open(t, streamed, sluice.Position{}), n, 1000)
	same := func(what string, got, want []sluice.Change) {
		t.Helper()
		if g, w := dbtest.DescribeChanges(got), dbtest.DescribeChanges(want); g != w {
			t.Fatalf("%s (seed %d):\n got %s\nwant %s", what, seed, g, w)
		}
		for i := range got {
			if got[i].Pos != want[i].Pos {
				t.Fatalf("%s (seed %d): change %d at %s, streamed at %s", what, seed, i, got[i].Pos, want[i].Pos)
			}
		}
	}
	same("caught up, then streamed", got, want)

	// Resume inside the backlog: the first transaction's middle, a
	// transaction's end, the last change before the switch.
	for _, i := range []int{0, backlog / 3, backlog - 1} {
		logs := &logCapture{}
		cfg := cu
		cfg.Logger = slog.New(logs)
		r := f.open(t, cfg, want[i].Pos)
		same("resumed from "+want[i].Pos.Token, collect(t, r, n-i-1, 50), want[i+1:])
		waitLog(t, logs, "caught up through the SQL interface")
		r.Close()
	}
}

// TestCatchUpBackpressure reads a backlog several times the reader's
// buffer through the SQL interface, slowly, acknowledging as it goes: the
// receiver waits on the full buffer in the middle of a call, the slot
// follows the acknowledgements before the catch-up ends, and every change
// arrives once, in order. Killed, the catch-up session hands over to
// streaming at the last change handed out.
func TestCatchUpBackpressure(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("session killed %v", kill), func(t *testing.T) {
			f := newFixture(t, []string{"t"}, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
			f.open(t, f.cfg, sluice.Position{}).Close()
			const n = 3 * bufferChanges
			for i := 0; i < n; i += 1000 {
				f.Exec(t, fmt.Sprintf(`INSERT INTO t SELECT g, repeat('v', 300) || g FROM generate_series(%d, %d) g`, i+1, min(i+1000, n)))
			}
			start := f.confirmedFlush(t)
			logs := &logCapture{}
			cfg := f.cfg
			cfg.CatchUpRows = bufferChanges / 2
			if kill {
				// Small calls, up to 16 times as large: many are left to
				// make when half the backlog is read, so the kill fails
				// one (a call's rows may all be in the socket's buffers).
				cfg.CatchUpRows = bufferChanges / 64
			}
			cfg.Logger = slog.New(logs)
			r := f.open(t, cfg, sluice.Position{})
			ctx := context.Background()
			var got []sluice.Change
			for len(got) < n/2 {
				got = append(got, collectN(t, r, 500, 500)...)
				if err := r.Ack(ctx, got[len(got)-1].Pos); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond) // a slow target
			}
			// The slot moves while the catch-up still reads: the reader
			// has calls left: it is a buffer past what was read.
			f.waitFlush(t, "past its start while catching up", func(l pglogrepl.LSN) bool { return l > start })
			if logs.has("caught up") {
				t.Fatalf("caught up before half the backlog was read: %v", logs.msgs)
			}
			if kill {
				killed := f.QueryInt(t, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE '%pg_logical_slot_get_binary_changes%' AND pid <> pg_backend_pid()`)
				if killed != 1 {
					t.Fatalf("terminated %d catch-up sessions, want 1", killed)
				}
			}
			got = append(got, collect(t, r, n-len(got), 1000)...)
			for i, c := range got {
				if c.Row[0].Text != fmt.Sprint(i+1) {
					t.Fatalf("change %d is %s", i, dbtest.DescribeChanges([]sluice.Change{c}))
				}
			}
			if kill {
				waitLog(t, logs, "catch-up through the SQL interface failed; streaming from the slot")
				return
			}
			waitLog(t, logs, "caught up through the SQL interface")
			// Calls of ½, 1 and 2 buffers: each decodes the backlog from
			// its start again, and calls of ½ buffer (7 of them) would
			// decode it 3.5 times over.
			if !logs.has("calls=3 ") {
				t.Fatalf("caught up in other than 3 calls of growing size: %v", logs.msgs)
			}
			if logs.has("WARN") {
				t.Fatalf("warnings: %v", logs.msgs)
			}
		})
	}
}

// TestNextCatchUpRows: calls double while each is read within a second, up
// to 16 times the first; one held back over two seconds (a slow target)
// halves the next, never below the first.
func TestNextCatchUpRows(t *testing.T) {
	const first = 1000
	for _, c := range []struct {
		want int
		took time.Duration
		next int
	}{
		{first, 100 * time.Millisecond, 2000},
		{8000, 900 * time.Millisecond, 16000},
		{16000, 10 * time.Millisecond, 16000}, // at the cap
		{8000, 1500 * time.Millisecond, 8000},
		{8000, 3 * time.Second, 4000},
		{first, time.Minute, first},
	} {
		if got := nextCatchUpRows(c.want, first, c.took); got != c.next {
			t.Errorf("nextCatchUpRows(%d, %d, %v) = %d, want %d", c.want, first, c.took, got, c.next)
		}
	}
}
