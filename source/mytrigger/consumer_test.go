package mytrigger

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestFloatExact: a FLOAT or DOUBLE arrives as text that parses back to
// the very value the source stores. The source's value is read through a
// prepared statement (the binary protocol: a FLOAT scans as the float32 it
// is), never through the text both servers print, which rounds a FLOAT to
// 6 digits.
func TestFloatExact(t *testing.T) {
	f := newFixture(t, "CREATE TABLE n (id int PRIMARY KEY, f FLOAT, d DOUBLE)")
	r := f.open(t, Config{Tables: dbtest.Tables("n"), Install: true, PollInterval: 50 * time.Millisecond}, sluice.Position{})
	floats := []float32{1234567, 16777216, 0.1234567, math.MaxFloat32, 1.17549435e-38, 1e-45, float32(math.Copysign(0, -1)), 0.1,
		-1234567, 123456789, 0.3333335, 1e-30, 2.5, 7}
	doubles := []float64{0.1, 1e-300, math.MaxFloat64, 5e-324, 1234567, 1e15, -0.000123456789, 1.0 / 3, 1e22, 4}
	n := max(len(floats), len(doubles))
	for i := range n {
		// Arguments are sent in binary: the row holds exactly these values.
		var fv, dv any
		if i < len(floats) {
			fv = floats[i]
		}
		if i < len(doubles) {
			dv = doubles[i]
		}
		if _, err := f.My.Exec("INSERT INTO n VALUES (?, ?, ?)", i, fv, dv); err != nil {
			t.Fatal(err)
		}
	}
	f.Exec(t, "UPDATE n SET f = f * 3, d = d / 7 WHERE id IN (0, 2, 9, 10)")
	got := collect(t, r, n+4, 100)

	// The source's values, by id, through the binary protocol.
	type pair struct {
		f *float32
		d *float64
	}
	want := map[string]*pair{}
	rows, err := f.My.Query("SELECT id, f, d FROM n WHERE id >= ?", 0)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		p := &pair{}
		if err := rows.Scan(&id, &p.f, &p.d); err != nil {
			t.Fatal(err)
		}
		want[strconv.Itoa(id)] = p
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	last := map[string]sluice.Row{}
	for _, c := range got {
		last[c.Row[0].Text] = c.Row
	}
	for id, row := range last {
		w := want[id]
		if w.f == nil {
			if !row[1].Null {
				t.Errorf("id %s: FLOAT %q, want NULL", id, row[1].Text)
			}
		} else {
			g, err := strconv.ParseFloat(row[1].Text, 32)
			if err != nil || math.Float32bits(float32(g)) != math.Float32bits(*w.f) {
				t.Errorf("id %s: FLOAT arrived as %q (%v), source holds %v (bits %08x): %v", id, row[1].Text, float32(g), *w.f, math.Float32bits(*w.f), err)
			}
			if s := strconv.FormatFloat(float64(*w.f), 'g', -1, 32); row[1].Text != s {
				t.Errorf("id %s: FLOAT arrived as %q, want the shortest exact text %q", id, row[1].Text, s)
			}
		}
		if w.d == nil {
			if !row[2].Null {
				t.Errorf("id %s: DOUBLE %q, want NULL", id, row[2].Text)
			}
		} else {
			g, err := strconv.ParseFloat(row[2].Text, 64)
			if err != nil || math.Float64bits(g) != math.Float64bits(*w.d) {
				t.Errorf("id %s: DOUBLE arrived as %q (%v), source holds %v: %v", id, row[2].Text, g, *w.d, err)
			}
		}
	}
	if len(last) != len(want) {
		t.Fatalf("changes for %d rows, the table has %d", len(last), len(want))
	}
}

// TestTwoStreams: two streams read one changelog with overlapping tables.
// One acknowledges everything at once; the other must still read every
// change of its tables, and the changelog is pruned only once both have
// acknowledged.
func TestTwoStreams(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)", "CREATE TABLE u (id int PRIMARY KEY)", "CREATE TABLE w (id int PRIMARY KEY)")
	ctx := context.Background()
	logs := &dbtest.LogBuffer{}
	a := f.open(t, Config{Tables: dbtest.Tables("t", "u"), Install: true, Stream: "a", PinWarnAfter: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, sluice.Position{})
	b := f.open(t, Config{Tables: dbtest.Tables("u", "w"), Install: true, Stream: "b"}, sluice.Position{})
	a.pruneEvery, b.pruneEvery = 0, 0
	f.Exec(t, "INSERT INTO t VALUES (1)", "INSERT INTO u VALUES (1)", "INSERT INTO w VALUES (1)", "UPDATE u SET id = 2", "DELETE FROM t")
	ga := collect(t, a, 4, 2)
	for _, c := range ga {
		if err := a.Ack(ctx, c.Pos); err != nil {
			t.Fatal(err)
		}
	}
	logRows := func() int { return f.QueryInt(t, "SELECT COUNT(*) FROM sluice_changelog") }
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
		t.Fatalf("%d changelog rows after b acknowledged id 3 of 5, want 2", n)
	}
	if err := b.Ack(ctx, gb[2].Pos); err != nil {
		t.Fatal(err)
	}
	// a's last change (id 5) is past b's last: a's next prune takes it once
	// b is gone.
	if n := logRows(); n != 1 {
		t.Fatalf("%d changelog rows after both acknowledged their changes, want 1", n)
	}
	if err := Unregister(ctx, f.My, "b"); err != nil {
		t.Fatal(err)
	}
	if err := a.Ack(ctx, ga[3].Pos); err != nil {
		t.Fatal(err)
	}
	if n := logRows(); n != 0 {
		t.Fatalf("%d changelog rows after b was unregistered, want 0", n)
	}
	if n := f.QueryInt(t, "SELECT COUNT(*) FROM sluice_consumer"); n != 1 {
		t.Fatalf("%d consumers after unregistering b, want 1", n)
	}
	// b's reader notices it was unregistered rather than read on unprotected.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := b.Read(ctx, 10)
		if err != nil {
			if !strings.Contains(err.Error(), "consumer record") {
				t.Fatalf("Read after unregistering: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("stream b's reader read on after it was unregistered")
		}
	}
}

// readErr reads until Read fails, failing the test after a deadline.
func readErr(t *testing.T, r *Reader) error {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := r.Read(context.Background(), 100); err != nil {
			return err
		}
	}
	t.Fatal("Read did not fail before the deadline")
	return nil
}

// TestTruncate: MySQL's TRUNCATE fires no trigger. The reader must stop
// the stream with an error naming the table, both while it runs and when
// it opens again, until the stream is registered anew.
func TestTruncate(t *testing.T) {
	for _, tt := range []struct {
		name, ddl, stmt string
	}{
		{"truncate", "CREATE TABLE t (id int PRIMARY KEY)", "TRUNCATE t"},
		{"partition", "CREATE TABLE t (id int PRIMARY KEY) PARTITION BY HASH (id) PARTITIONS 2", "ALTER TABLE t TRUNCATE PARTITION p1"},
		{"rebuild", "CREATE TABLE t (id int PRIMARY KEY)", "OPTIMIZE TABLE t"},
		{"swapped", "CREATE TABLE t (id int PRIMARY KEY)", "RENAME TABLE t TO t_old, t_new TO t"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.ddl, "CREATE TABLE t_new (id int PRIMARY KEY)", "CREATE TABLE o (id int PRIMARY KEY)")
			ctx := context.Background()
			cfg := Config{Tables: dbtest.Tables("t", "o"), Install: true, PollInterval: 50 * time.Millisecond, Stream: "s"}
			r := f.open(t, cfg, sluice.Position{})
			f.Exec(t, "INSERT INTO t VALUES (1), (2)", "INSERT INTO o VALUES (1)")
			got := collect(t, r, 3, 10)
			f.Exec(t, tt.stmt, "INSERT INTO o VALUES (2)")
			err := readErr(t, r)
			if !errors.Is(err, ErrTableRewritten) || !strings.Contains(err.Error(), "source table "+f.Name+".t ") || !strings.Contains(err.Error(), "re-sync") {
				t.Fatalf("Read after %s: %v, want ErrTableRewritten naming the table and the fix", tt.stmt, err)
			}
			if tn, ok := sluice.ErrTable(err); !ok || tn.Name != "t" {
				t.Errorf("error names table %v, %v; want t", tn, ok)
			}
			r.Close()
			if tt.name == "swapped" {
				// The triggers went with the old table: reinstall on the new.
				if err := Install(ctx, f.My, dbtest.Tables("t")); err != nil {
					t.Fatal(err)
				}
			}
			// Restarted, at its last position: still stopped.
			_, err = Open(ctx, f.URL, Config{Tables: cfg.Tables, Stream: "s", Logger: slog.New(slog.DiscardHandler)}, got[2].Pos)
			if !errors.Is(err, ErrTableRewritten) {
				t.Fatalf("Open after %s: %v, want ErrTableRewritten", tt.stmt, err)
			}
			// A stream that does not read t is not stopped.
			other := f.open(t, Config{Tables: dbtest.Tables("o"), Stream: "other"}, got[2].Pos)
			dbtest.ExpectChanges(t, collect(t, other, 1, 10), "insert o [2]")
			// Once the operator has re-synced t and unregistered the
			// stream, it starts again.
			if err := Unregister(ctx, f.My, "s"); err != nil {
				t.Fatal(err)
			}
			r2 := f.open(t, Config{Tables: cfg.Tables, Stream: "s"}, got[2].Pos)
			dbtest.ExpectChanges(t, collect(t, r2, 1, 10), "insert o [2]")
		})
	}
}

// TestChangelogTruncated: a TRUNCATE of the changelog itself (which resets
// its ids) stops a running stream and keeps it from opening again.
func TestChangelogTruncated(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)")
	ctx := context.Background()
	cfg := Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 50 * time.Millisecond, Stream: "s"}
	r := f.open(t, cfg, sluice.Position{})
	f.Exec(t, "INSERT INTO t VALUES (1), (2), (3)")
	got := collect(t, r, 3, 10)
	f.Exec(t, "TRUNCATE sluice_changelog", "INSERT INTO t VALUES (4)")
	if err := readErr(t, r); !errors.Is(err, ErrPositionLost) || !strings.Contains(err.Error(), "sluice_changelog was truncated") {
		t.Fatalf("Read after the changelog was truncated: %v, want ErrPositionLost", err)
	}
	r.Close()
	cfg.Install = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	if _, err := Open(ctx, f.URL, cfg, got[2].Pos); !errors.Is(err, ErrPositionLost) {
		t.Fatalf("Open after the changelog was truncated: %v, want ErrPositionLost", err)
	}
	// Unregistered, the stream has no record of the changelog's identity:
	// the ids handed out again below its position give it away.
	if err := Unregister(ctx, f.My, "s"); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, f.URL, cfg, got[2].Pos)
	if !errors.Is(err, ErrPositionLost) || !strings.Contains(err.Error(), "hands out ids from 2") {
		t.Fatalf("Open of an unregistered stream after the changelog was truncated: %v, want ErrPositionLost", err)
	}
}

// TestPositionLost: a reader opening at a position whose changes were
// pruned fails at Open, whoever pruned them.
func TestPositionLost(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)")
	ctx := context.Background()
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, Stream: "a"}, sluice.Position{})
	r.pruneEvery = 0
	f.Exec(t, "INSERT INTO t VALUES (1), (2), (3)")
	got := collect(t, r, 3, 10)
	if err := r.Ack(ctx, got[1].Pos); err != nil {
		t.Fatal(err)
	}
	r.Close()
	quiet := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name   string
		stream string
		from   sluice.Position
		want   string
		lost   bool
	}{
		{"behind its own acknowledgement", "a", got[0].Pos, "the stream itself had acknowledged changelog id 2", true},
		{"from the start", "a", sluice.Position{}, "pruned up to id 2", true},
		{"new stream from the start", "b", sluice.Position{}, "other streams' acknowledgements", true},
		{"at its acknowledgement", "a", got[1].Pos, "", false},
		{"new stream after the pruned ids", "c", got[1].Pos, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Open(ctx, f.URL, Config{Tables: dbtest.Tables("t"), Stream: tt.stream, Logger: quiet}, tt.from)
			if !tt.lost {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer r.Close()
				dbtest.ExpectChanges(t, collect(t, r, 1, 10), "insert t [3]")
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

// TestProgress: polls that pass only other tables' rows hand out
// OpProgress changes, at most once per interval, only when the position
// moved, and acknowledging them lets the changelog be pruned.
func TestProgress(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)", "CREATE TABLE o (id int PRIMARY KEY)")
	ctx := context.Background()
	const interval = 300 * time.Millisecond
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true, PollInterval: 20 * time.Millisecond, ProgressInterval: interval}, sluice.Position{})
	r.pruneEvery = 0
	if err := Install(ctx, f.My, dbtest.Tables("o")); err != nil {
		t.Fatal(err)
	}
	// Nothing moves: no progress.
	for end := time.Now().Add(2 * interval); time.Now().Before(end); {
		if cs, err := r.Read(ctx, 10); err != nil || len(cs) != 0 {
			t.Fatalf("Read on an idle changelog = %s, %v; want nothing", dbtest.DescribeChanges(cs), err)
		}
	}
	f.Exec(t, "INSERT INTO t VALUES (1)")
	dbtest.ExpectChanges(t, collect(t, r, 1, 10), "insert t [1]")
	var marks []sluice.Change
	var at []time.Time
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; len(marks) < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d progress changes before the deadline, want 3", len(marks))
		}
		f.Exec(t, "INSERT INTO o VALUES ("+strconv.Itoa(i)+")")
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
	for i := 1; i < len(marks); i++ {
		if d := at[i].Sub(at[i-1]); d < interval-50*time.Millisecond {
			t.Errorf("progress changes %v apart, want at most one per %v", d, interval)
		}
		if covered, _, err := Covers(marks[i-1].Pos, marks[i].Pos); err != nil || covered {
			t.Errorf("progress %v then %v: not moving forward (%v)", marks[i-1].Pos, marks[i].Pos, err)
		}
	}
	// A resumed reader starts there, and acknowledging a progress change
	// prunes the rows it passed.
	if err := r.Ack(ctx, marks[2].Pos); err != nil {
		t.Fatal(err)
	}
	p, _ := parsePosition(marks[2].Pos)
	if n := f.QueryInt(t, "SELECT COUNT(*) FROM sluice_changelog WHERE id <= "+strconv.FormatUint(p.last, 10)); n != 0 {
		t.Fatalf("%d changelog rows at or below the acknowledged progress position, want 0", n)
	}
}

func TestStart(t *testing.T) {
	f := newFixture(t, "CREATE TABLE t (id int PRIMARY KEY)")
	r := f.open(t, Config{Tables: dbtest.Tables("t"), Install: true}, sluice.Position{})
	if got, want := r.Start(), (sluice.Position{Kind: Kind, Token: "0"}); got != want {
		t.Fatalf("Start() of a reader opened without a position = %v, want %v", got, want)
	}
	f.Exec(t, "INSERT INTO t VALUES (1), (2)")
	got := collect(t, r, 2, 10)
	if r.Start() != (sluice.Position{Kind: Kind, Token: "0"}) {
		t.Fatalf("Start() moved to %v after reading", r.Start())
	}
	r2 := f.open(t, Config{Tables: dbtest.Tables("t")}, got[0].Pos)
	if r2.Start() != got[0].Pos {
		t.Fatalf("Start() = %v, want the position it was opened at, %v", r2.Start(), got[0].Pos)
	}
	r3 := f.open(t, Config{Tables: dbtest.Tables("t")}, r.Start())
	dbtest.ExpectChanges(t, collect(t, r3, 2, 10), "insert t [1]", "insert t [2]")
}

// TestCollation: a string column's collation is described unless it
// compares bytes.
func TestCollation(t *testing.T) {
	f := newFixture(t, "CREATE TABLE c (id int PRIMARY KEY, ci varchar(10) COLLATE utf8mb4_general_ci, bin varchar(10) COLLATE utf8mb4_bin, "+
		"vb varbinary(10), bl blob, l1 varchar(10) CHARACTER SET latin1 COLLATE latin1_german1_ci, js json, e enum('a','b') COLLATE utf8mb4_unicode_ci, d decimal(5,2))")
	r := f.open(t, Config{Tables: dbtest.Tables("c"), Install: true}, sluice.Position{})
	want := map[string]string{"id": "", "ci": "utf8mb4_general_ci", "bin": "utf8mb4_bin", "vb": "", "bl": "", "l1": "latin1_german1_ci",
		"js": "utf8mb4_bin", "e": "utf8mb4_unicode_ci", "d": ""}
	for _, c := range r.Tables()[0].Columns {
		if c.Collation != want[c.Name] {
			t.Errorf("column %s (%s) collation %q, want %q", c.Name, c.Type, c.Collation, want[c.Name])
		}
	}
}
