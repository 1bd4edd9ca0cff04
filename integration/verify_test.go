package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/verify"
)

// verifyRows is the size of the tables the verify tests compare: enough
// for several first ranges and two levels of bisection at the small
// chunk sizes the tests use.
const verifyRows = 20000

// verifyTable creates and fills vt identically on e: NULLs in note every
// tenth row, a composite-free integer key with a gap.
func verifyTable(ctx context.Context, t *testing.T, e *endpoint) {
	t.Helper()
	var stmts []string
	if e.engine == daemon.EnginePostgres {
		stmts = []string{
			`CREATE TABLE vt (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), note text, at timestamptz)`,
			fmt.Sprintf(`INSERT INTO vt SELECT g, 'name-' || g, g * 1.25, CASE WHEN g %% 10 = 0 THEN NULL ELSE 'n' || (g %% 7) END,
				timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, %d) g WHERE g <> 4242`, verifyRows),
		}
	} else {
		stmts = []string{
			`CREATE TABLE vt (id bigint PRIMARY KEY, name varchar(64) NOT NULL, amount decimal(12,2), note text, at datetime(6))`,
			fmt.Sprintf(`INSERT INTO vt SELECT seq, CONCAT('name-', seq), seq * 1.25, IF(seq %% 10 = 0, NULL, CONCAT('n', seq %% 7)),
				TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_1_to_%d WHERE seq <> 4242`, verifyRows),
		}
	}
	for _, s := range stmts {
		if err := e.exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func (e *endpoint) db() dbtest.DB { return dbtest.DB{PG: e.pg, My: e.my} }

// verifyConfig is the engine's configuration in the tests: small ranges,
// so that 20,000 rows are several ranges and a difference is bisected.
func verifyConfig(t *testing.T, src, dst *endpoint) verify.Config {
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
	tbl := "public.vt"
	if src.engine == daemon.EngineMySQL {
		tbl = "vt"
	}
	return verify.Config{Source: s, Target: d, Tables: []sluice.TableName{mustTable(t, tbl)},
		ChunkRows: 2000, LeafRows: 100, Fanout: 8, Batch: 4}
}

func mustTable(t *testing.T, s string) sluice.TableName {
	n, err := sluice.ParseTableName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// verifyDiffs renders verify's differences and the independent comparison's
// in one form, sorted, so that the two can be held equal.
func verifyDiffs(rep *verify.Report) []string {
	var out []string
	for _, tr := range rep.Tables {
		for _, d := range tr.Diffs {
			out = append(out, d.Key+" "+d.Kind+" "+strings.Join(d.Columns, ","))
		}
	}
	sort.Strings(out)
	return out
}

func independentDiffs(ds dbtest.Diffs) []string {
	var out []string
	for _, td := range ds {
		for _, r := range td.Rows {
			var cols []string
			for _, c := range r.Columns {
				cols = append(cols, c.Column)
			}
			out = append(out, r.Key+" "+string(r.Kind)+" "+strings.Join(cols, ","))
		}
	}
	sort.Strings(out)
	return out
}

// TestVerifySameEngine: equal tables give no difference, as the
// independent comparison says; then a changed column, a NULL made ” , a
// missing row and an extra row, each made by hand on the target, are each
// found and named, and verify's list is the independent comparison's;
// then --repair's engine makes the target equal to the source.
func TestVerifySameEngine(t *testing.T) {
	t.Parallel() // databases of its own, no stream
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src, dst := newEndpoint(t, eng), newEndpoint(t, eng)
			verifyTable(ctx, t, src)
			verifyTable(ctx, t, dst)
			cfg := verifyConfig(t, src, dst)
			table := "vt"

			rep, err := verify.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ind, err := dbtest.CompareTables(ctx, src.db(), dst.db(), table)
			if err != nil {
				t.Fatal(err)
			}
			if !ind.Equal() || rep.Differences() != 0 || rep.Unsettled() != 0 {
				t.Fatalf("equal tables: verify found %v, the independent comparison %v", verifyDiffs(rep), ind)
			}
			if tr := rep.Tables[0]; tr.SourceRows != verifyRows-1 || tr.TargetRows != verifyRows-1 || tr.Ranges < 5 {
				t.Fatalf("report %+v: want %d rows on each side in several ranges", tr, verifyRows-1)
			}

			for _, s := range []string{
				`UPDATE vt SET amount = amount + 0.01 WHERE id = 777`,
				`UPDATE vt SET note = '' WHERE id = 5000`, // NULL on the source
				`DELETE FROM vt WHERE id = 12345`,
				`INSERT INTO vt (id, name) VALUES (4242, 'extra')`, // in the gap
			} {
				if err := dst.exec(ctx, s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			rep, err = verify.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"(id=12345) missing ",
				"(id=4242) extra ",
				"(id=5000) different note",
				"(id=777) different amount",
			}
			got := verifyDiffs(rep)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("verify found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			ind, err = dbtest.CompareTables(ctx, src.db(), dst.db(), table)
			if err != nil {
				t.Fatal(err)
			}
			if i := independentDiffs(ind); strings.Join(i, "\n") != strings.Join(got, "\n") {
				t.Fatalf("verify found\n%s\nthe independent comparison\n%s", strings.Join(got, "\n"), strings.Join(i, "\n"))
			}
			t.Logf("%d ranges, %d bisected, in %s", rep.Tables[0].Ranges, rep.Tables[0].Bisected, rep.Elapsed.Round(time.Millisecond))
			// --repair: the source's rows of the four keys, and then the
			// independent comparison finds the tables equal.
			repairChecked(ctx, t, cfg, src, dst, rep)
			waitCompareEqual(ctx, t, src, dst, table, 0)
		})
	}
}

// TestVerifyRepairCrossEngine: a MariaDB target fed from PostgreSQL,
// corrupted by hand (changed columns, a missing row, an extra row), is
// repaired through the type map, and the independent comparison finds
// the tables equal after. (TestVerifySameEngine repairs same-engine
// pairs.)
func TestVerifyRepairCrossEngine(t *testing.T) {
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EngineMySQL)
	for _, s := range []string{`CREATE TABLE xt (id integer PRIMARY KEY, name text, qty bigint, ok boolean, at timestamptz)`,
		`INSERT INTO xt SELECT g, 'n' || g, g * 3, g % 2 = 0, timestamptz '2024-01-01 00:00:00.5+00' + g * interval '1 minute' FROM generate_series(1, 3000) g`} {
		if err := src.exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	for _, s := range []string{`CREATE TABLE xt (id int PRIMARY KEY, name longtext, qty bigint, ok tinyint(1), at datetime(6))`,
		`INSERT INTO xt SELECT seq, CONCAT('n', seq), seq * 3, seq % 2 = 0, TIMESTAMP '2024-01-01 00:00:00.5' + INTERVAL seq MINUTE FROM seq_1_to_3000`} {
		if err := dst.exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	cfg := verifyConfig(t, src, dst)
	cfg.Tables = []sluice.TableName{mustTable(t, "public.xt")}
	cfg.ChunkRows, cfg.LeafRows = 500, 50
	corrupt(ctx, t, dst, `UPDATE xt SET ok = 1 - ok, at = at + INTERVAL 1 SECOND WHERE id = 1234`, `DELETE FROM xt WHERE id = 2000`,
		`INSERT INTO xt (id, name) VALUES (5000, 'extra')`)
	repairAndCompare(ctx, t, cfg, src, dst, "xt", 3)
}

// corrupt runs stmts on the target.
func corrupt(ctx context.Context, t *testing.T, dst *endpoint, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if err := dst.exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// repairAndCompare checks that the independent comparison finds table
// different, verify finds diffs differences, the repair makes them equal
// by verify's account and, after it, by the independent comparison's.
func repairAndCompare(ctx context.Context, t *testing.T, cfg verify.Config, src, dst *endpoint, table string, diffs int) {
	t.Helper()
	ind, err := dbtest.CompareTables(ctx, src.db(), dst.db(), table)
	if err != nil {
		t.Fatal(err)
	}
	if ind.Equal() {
		t.Fatal("the corrupted target compares equal")
	}
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differences() != diffs {
		t.Fatalf("verify found %v, want %d differences", verifyDiffs(rep), diffs)
	}
	repairChecked(ctx, t, cfg, src, dst, rep)
	waitCompareEqual(ctx, t, src, dst, table, 0)
}

// repairChecked repairs what rep found and checks that verify finds the
// repaired keys equal after.
func repairChecked(ctx context.Context, t *testing.T, cfg verify.Config, src, dst *endpoint, rep *verify.Report) {
	t.Helper()
	rc, closeTarget, err := verify.OpenRepair(ctx, src.url, dst.url, cfg.Source, verify.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeTarget()
	rr, err := verify.Repair(ctx, cfg, rc, rep)
	if err != nil {
		t.Fatal(err)
	}
	if !rr.Equal || rr.Keys() != rep.Differences() {
		t.Fatalf("repair of %v: %d keys repaired, equal after: %v (%v)", verifyDiffs(rep), rr.Keys(), rr.Equal, verifyDiffs(rr.After))
	}
}

// TestVerifyLive: verify runs against a PostgreSQL → PostgreSQL stream
// while the source takes updates, inserts and deletes: nothing is
// reported; then a row corrupted by hand on the target, out of the
// writer's reach, is reported, and only it, while the writer goes on.
// Once the writer stops and the stream catches up, the independent
// comparison finds that same row and nothing else.
func TestVerifyLive(t *testing.T) {
	t.Parallel() // databases of its own; the stream ids (slots) are the suite's alone
	for _, eng := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(eng), func(t *testing.T) {
			t.Parallel()
			verifyLive(t, eng)
		})
	}
}

func verifyLive(t *testing.T, eng daemon.Engine) {
	ctx := context.Background()
	src, dst := newEndpoint(t, eng), newEndpoint(t, eng)
	verifyTable(ctx, t, src)
	ddl := `CREATE TABLE vt (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), note text, at timestamptz)`
	ph := func(i int) string { return fmt.Sprintf("$%d", i) }
	tables := []string{"public.vt"}
	if eng == daemon.EngineMySQL {
		ddl = `CREATE TABLE vt (id bigint PRIMARY KEY, name varchar(64) NOT NULL, amount decimal(12,2), note text, at datetime(6))`
		ph = func(int) string { return "?" }
		tables = []string{"vt"}
	}
	if err := dst.exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	id := "vlive" + string(eng)
	dropSlotAtCleanup(t, src, id, tables)
	o := daemon.StreamOptions{
		ID: id, SourceURL: src.url, TargetURL: dst.url, Tables: tableNames(t, tables), StateDir: t.TempDir(),
		PollInterval: 20 * time.Millisecond, KillBudget: 5 * time.Second, MaxLanes: 2,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)

	// The writer touches ids from 100 up: a few hundred changes/s.
	stopWriter := startWriter(t, src, ph, verifyRows+1)
	defer stopWriter()
	cfg := verifyConfig(t, src, dst)
	cfg.Stream, cfg.Covers, cfg.CatchUp = id, verify.Covers, 30*time.Second
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differences() != 0 || rep.Unsettled() != 0 {
		t.Fatalf("live, nothing corrupted: verify reports %v, unsettled %v", verifyDiffs(rep), rep.Tables[0].Unsettled)
	}
	t.Logf("live, equal: %d ranges, %d bisected, in %s", rep.Tables[0].Ranges, rep.Tables[0].Bisected, rep.Elapsed.Round(time.Millisecond))

	if err := dst.exec(ctx, `UPDATE vt SET name = 'corrupt' WHERE id = 42`); err != nil {
		t.Fatal(err)
	}
	rep, err = verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := "(id=42) different name"
	if got := verifyDiffs(rep); strings.Join(got, "\n") != want || rep.Unsettled() != 0 {
		t.Fatalf("live, one row corrupted: verify reports %v (unsettled %v), want %s", got, rep.Tables[0].Unsettled, want)
	}
	stopWriter()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ind, err := dbtest.CompareTables(ctx, src.db(), dst.db(), "vt")
		if err != nil {
			t.Fatal(err)
		}
		if got := independentDiffs(ind); strings.Join(got, "\n") == want {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after the writer stopped, the independent comparison finds %v, want %s", got, want)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}

	// Repair while the stream applies the writer's changes: id 42 still
	// differs; a row the writer may change goes missing, and an extra row
	// appears in the gap.
	stopWriter = startWriter(t, src, ph, 10*verifyRows)
	defer stopWriter()
	for _, s := range []string{`DELETE FROM vt WHERE id = 3000`, `INSERT INTO vt (id, name) VALUES (4242, 'extra')`} {
		if err := dst.exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	rep, err = verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differences() == 0 {
		t.Fatalf("live, three rows corrupted: verify reports nothing")
	}
	repairChecked(ctx, t, cfg, src, dst, rep)
	stopWriter()
	waitCompareEqual(ctx, t, src, dst, "vt", 30*time.Second)
}

// waitCompareEqual polls the independent comparison of table until it
// finds src and dst equal, or fails at the deadline.
func waitCompareEqual(ctx context.Context, t *testing.T, src, dst *endpoint, table string, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ind, err := dbtest.CompareTables(ctx, src.db(), dst.db(), table)
		if err != nil {
			t.Fatal(err)
		}
		if ind.Equal() {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("after %s the independent comparison still finds %v", wait, independentDiffs(ind))
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

// startWriter changes vt on src from ids 100 up, a few hundred changes/s,
// inserting ids from next on, until the returned stop (which may be
// called more than once) is called.
func startWriter(t *testing.T, src *endpoint, ph func(int) string, next int64) (stop func()) {
	t.Helper()
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		r := rng(t)
		for wctx.Err() == nil {
			var err error
			switch k := r.IntN(10); {
			case k < 6:
				err = src.exec(wctx, `UPDATE vt SET amount = amount + 1, note = 'w' WHERE id = `+ph(1), 100+r.Int64N(verifyRows-100))
			case k < 8:
				err = src.exec(wctx, `INSERT INTO vt (id, name) VALUES (`+ph(1)+`, 'new')`, next)
				next++
			default:
				err = src.exec(wctx, `DELETE FROM vt WHERE id = `+ph(1), 100+r.Int64N(verifyRows-100))
			}
			if err != nil && wctx.Err() == nil {
				done <- err
				return
			}
			time.Sleep(2 * time.Millisecond) // pacing the writer, not waiting for replication
		}
		done <- nil
	}()
	var stopped bool
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
}

// TestVerifyCrossEngineTables: across engines verify finds each table
// where the stream writes it (a PostgreSQL table without its schema in
// the MySQL database, a MySQL table in the PostgreSQL search_path) and
// compares columns by name, whatever their order; integer and text
// columns, whose canonical text is the same on both engines, compare
// equal, and a changed one is named.
func TestVerifyCrossEngineTables(t *testing.T) {
	for _, pair := range []struct{ from, to daemon.Engine }{
		{daemon.EnginePostgres, daemon.EngineMySQL},
		{daemon.EngineMySQL, daemon.EnginePostgres},
	} {
		t.Run(string(pair.from)+"_to_"+string(pair.to), func(t *testing.T) {
			ctx := context.Background()
			src, dst := newEndpoint(t, pair.from), newEndpoint(t, pair.to)
			ddl := map[daemon.Engine][]string{
				daemon.EnginePostgres: {`CREATE TABLE xt (id integer PRIMARY KEY, name text, qty bigint)`,
					`INSERT INTO xt SELECT g, 'n' || g, g * 3 FROM generate_series(1, 3000) g`},
				daemon.EngineMySQL: {`CREATE TABLE xt (qty bigint, id int PRIMARY KEY, name varchar(40))`,
					`INSERT INTO xt SELECT seq * 3, seq, CONCAT('n', seq) FROM seq_1_to_3000`},
			}
			for _, e := range []*endpoint{src, dst} {
				for _, s := range ddl[e.engine] {
					if err := e.exec(ctx, s); err != nil {
						t.Fatalf("%s: %v", s, err)
					}
				}
			}
			cfg := verifyConfig(t, src, dst)
			cfg.Tables = []sluice.TableName{mustTable(t, map[daemon.Engine]string{daemon.EnginePostgres: "public.xt", daemon.EngineMySQL: "xt"}[pair.from])}
			cfg.ChunkRows, cfg.LeafRows = 500, 50
			rep, err := verify.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Differences() != 0 || rep.Tables[0].SourceRows != 3000 || rep.Tables[0].TargetRows != 3000 {
				t.Fatalf("equal tables: verify reports %v, %+v", verifyDiffs(rep), rep.Tables[0])
			}
			if err := dst.exec(ctx, `UPDATE xt SET qty = 1 WHERE id = 1234`); err != nil {
				t.Fatal(err)
			}
			if rep, err = verify.Run(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(verifyDiffs(rep), "\n"); got != "(id=1234) different qty" {
				t.Fatalf("verify found %q, want (id=1234) different qty", got)
			}
		})
	}
}

// TestVerifyResume: a run interrupted after a few ranges leaves a state
// file; the run started again with it skips the ranges done and reports
// what a whole run reports.
func TestVerifyResume(t *testing.T) {
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EnginePostgres)
	verifyTable(ctx, t, src)
	verifyTable(ctx, t, dst)
	for _, s := range []string{`UPDATE vt SET name = 'x' WHERE id IN (150, 19000)`, `DELETE FROM vt WHERE id = 9000`} {
		if err := dst.exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"(id=150) different name", "(id=19000) different name", "(id=9000) missing "}
	path := t.TempDir() + "/verify.state"
	cfg := verifyConfig(t, src, dst)
	cfg.Workers, cfg.Batch = 1, 1
	st, err := verify.LoadState(path, "test run")
	if err != nil {
		t.Fatal(err)
	}
	cfg.State = st
	cctx, cancel := context.WithCancel(ctx)
	calls := 0
	cfg.Progress = func(verify.Progress) {
		if calls++; calls == 4 {
			cancel()
		}
	}
	if _, err := verify.Run(cctx, cfg); err == nil {
		t.Fatal("the interrupted run did not fail")
	}
	if _, err := verify.LoadState(path, "another run"); err == nil {
		t.Fatal("the state file of one run was taken for another's")
	}
	st, err = verify.LoadState(path, "test run")
	if err != nil {
		t.Fatal(err)
	}
	cfg.State = st
	var first verify.Progress
	calls = 0
	cfg.Progress = func(p verify.Progress) {
		if calls++; calls == 1 {
			first = p
		}
	}
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := verifyDiffs(rep); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("resumed run found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if first.RowsDone == 0 || first.RowsDone >= first.RowsTotal {
		t.Fatalf("resumed run started at %d of %d rows: want the interrupted run's ranges skipped, not all", first.RowsDone, first.RowsTotal)
	}
	if tr := rep.Tables[0]; tr.SourceRows != verifyRows-1 || tr.TargetRows != verifyRows-2 {
		t.Fatalf("resumed run counts %d source and %d target rows, want %d and %d", tr.SourceRows, tr.TargetRows, verifyRows-1, verifyRows-2)
	}
}

// TestVerifyCommand runs the built binary: exit 0 and a summary for equal
// tables; exit 1 and the differing row in the text and in --json once a
// row differs; exit 2 for a table the target lacks, with an error naming
// it and no password.
func TestVerifyCommand(t *testing.T) {
	bin := buildSluice(t)
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EnginePostgres)
	for _, e := range []*endpoint{src, dst} {
		for _, s := range []string{`CREATE TABLE ct (id int PRIMARY KEY, v text)`, `INSERT INTO ct SELECT g, 'v' || g FROM generate_series(1, 500) g`} {
			if err := e.exec(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"verify", "--source", src.url, "--target", dst.url}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	out, errOut, code := run("--tables", "public.ct")
	if code != 0 || !strings.Contains(out, "public.ct: equal (500 source rows, 500 target rows") || !strings.Contains(out, "summary: 1 tables equal") {
		t.Fatalf("equal: exit %d\n%s%s", code, out, errOut)
	}
	if err := dst.exec(ctx, `UPDATE ct SET v = 'changed' WHERE id = 77`); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run("--tables", "public.ct")
	if code != 1 || !strings.Contains(out, "(id=77)") || !strings.Contains(out, "different  v") || !strings.Contains(errOut, "1 rows differ") {
		t.Fatalf("one row differs: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = run("--tables", "public.ct", "--json")
	var rep struct {
		Equal       bool `json:"equal"`
		Differences int  `json:"differences"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.Equal || rep.Differences != 1 {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}
	if err := dst.exec(ctx, `DELETE FROM ct WHERE id = 78`); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run("--tables", "public.ct", "--repair", "--json")
	var repaired struct {
		Differences int `json:"differences"`
		Repair      struct {
			Tables []struct {
				Written []string `json:"written"`
			} `json:"tables"`
			Equal bool `json:"equal"`
		} `json:"repair"`
	}
	if err := json.Unmarshal([]byte(out), &repaired); err != nil || code != 0 || repaired.Differences != 2 || !repaired.Repair.Equal ||
		len(repaired.Repair.Tables) != 1 || strings.Join(repaired.Repair.Tables[0].Written, " ") != "(id=77) (id=78)" {
		t.Fatalf("--repair --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if ind, err := dbtest.CompareTables(ctx, src.db(), dst.db(), "ct"); err != nil || !ind.Equal() {
		t.Fatalf("after --repair the independent comparison finds %v (%v)", ind, err)
	}
	out, errOut, code = run("--tables", "public.ct", "--repair")
	if code != 0 || !strings.Contains(out, "summary: 1 tables equal") {
		t.Fatalf("--repair of an equal pair: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = run("--tables", "public.nosuch")
	pw, _ := url.Parse(src.url)
	secret, _ := pw.User.Password()
	if code != 2 || !strings.Contains(errOut, "public.nosuch does not exist") || (secret != "" && strings.Contains(errOut, secret)) {
		t.Fatalf("missing table: exit %d\n%s", code, errOut)
	}
}

// TestVerifyCrossEngineTypes: a PostgreSQL → MariaDB and a MariaDB →
// PostgreSQL stream over every mapped type (the cross-engine acceptance
// tables, NULLs and a composite key included): once the independent
// comparison finds the target equal, verify finds no difference either;
// then one value changed by hand on the target is found and named.
//
// MariaDB → PostgreSQL runs only with SLUICE_VERIFY_SLOW=1: PostgreSQL's
// side of the JSON column's canonical form (MariaDB's JSON_NORMALIZE,
// rebuilt from jsonb to depth 16) makes each query over the table take
// seconds, 8 s for the whole comparison of 70 rows, too long for make
// test. It passed when last run so (0 differences, the change named).
func TestVerifyCrossEngineTypes(t *testing.T) {
	for _, pr := range []struct{ from, to daemon.Engine }{
		{daemon.EnginePostgres, daemon.EngineMySQL},
		{daemon.EngineMySQL, daemon.EnginePostgres},
	} {
		t.Run(string(pr.from)+"_to_"+string(pr.to), func(t *testing.T) {
			if pr.from == daemon.EngineMySQL && os.Getenv("SLUICE_VERIFY_SLOW") == "" {
				t.Skip("slow (the JSON form on PostgreSQL): run with SLUICE_VERIFY_SLOW=1")
			}
			ctx := context.Background()
			src, dst := newEndpoint(t, pr.from), newEndpoint(t, pr.to)
			for _, e := range []*endpoint{src, dst} {
				if err := e.createSchema(ctx); err != nil {
					t.Fatal(err)
				}
			}
			o := daemon.StreamOptions{
				ID: "vx", SourceURL: src.url, TargetURL: dst.url, Tables: tableNames(t, []string{"items", "order_lines"}),
				StateDir: t.TempDir(), PollInterval: 50 * time.Millisecond, SourceMode: "trigger", KillBudget: 5 * time.Second,
				Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
			}
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			if err := src.xworkload(ctx, rng(t), 2, 30, 0); err != nil {
				t.Fatal(err)
			}
			waitXConverged(t, src, dst, 60*time.Second, run)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			cfg := verifyConfig(t, src, dst)
			cfg.Tables = tableNames(t, []string{"items", "order_lines"})
			if pr.from == daemon.EnginePostgres {
				cfg.Tables = tableNames(t, []string{"public.items", "public.order_lines"})
			}
			rep, err := verify.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("verify of the converged tables took %s", rep.Elapsed.Round(time.Millisecond))
			if rep.Differences() != 0 || rep.Unsettled() != 0 {
				var b strings.Builder
				rep.WriteText(&b)
				t.Fatalf("equal by the independent comparison, but verify reports:\n%s", b.String())
			}
			if rep.Tables[0].SourceRows == 0 {
				t.Fatal("the workload wrote no items: the test compares nothing")
			}
			if err := dst.exec(ctx, `UPDATE order_lines SET qty = -7 WHERE qty IS NOT NULL AND order_id = (SELECT m FROM (SELECT MIN(order_id) AS m FROM order_lines WHERE qty IS NOT NULL) x)`); err != nil {
				t.Fatal(err)
			}
			if rep, err = verify.Run(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if got := verifyDiffs(rep); len(got) == 0 || !strings.HasSuffix(got[0], " different qty") {
				t.Fatalf("one changed qty: verify reports %v", got)
			}
		})
	}
}
