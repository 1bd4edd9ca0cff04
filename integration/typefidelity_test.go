package integration

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply/typemap"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	wlgen "github.com/sluice-cdc/sluice/internal/workload"
	"github.com/sluice-cdc/sluice/verify"
)

// TestTypeFidelity carries every value of the type-fidelity corpus
// (internal/workload's Corpus: each type pair the cross-engine type map
// accepts, with its edge values) from PostgreSQL to MariaDB and from
// MariaDB to PostgreSQL, through the initial copy, stream inserts and
// stream updates, with each source mode, and checks that the target holds
// exactly what the source holds: the expected value is computed by the
// source database with SQL from its own value (PostgreSQL's output
// function, MySQL's CAST(… AS CHAR), or the value in binary form), never by
// sluice's conversion. Then each value the corpus says has no exact home
// on the target must stop the stream with an error naming the table, the
// column and the row's key.
func TestTypeFidelity(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	for _, tc := range []struct {
		from, to daemon.Engine
		mode     string
	}{
		{daemon.EnginePostgres, daemon.EngineMySQL, daemon.ModeLogical},
		{daemon.EnginePostgres, daemon.EngineMySQL, daemon.ModeTrigger},
		{daemon.EngineMySQL, daemon.EnginePostgres, daemon.ModeBinlog},
		{daemon.EngineMySQL, daemon.EnginePostgres, daemon.ModeTrigger},
	} {
		t.Run(string(tc.from)+"_"+tc.mode+"_to_"+string(tc.to), func(t *testing.T) {
			t.Parallel()
			runTypeFidelity(t, tc.from, tc.to, tc.mode)
		})
	}
}

// The rows of the fidelity table: the copy's, then the stream's inserts,
// then rows the stream first inserts all NULL and then updates.
const (
	tfCopied   = 1
	tfInserted = 1001
	tfUpdated  = 2001
)

func runTypeFidelity(t *testing.T, from, to daemon.Engine, mode string) {
	ctx := context.Background()
	corpus := wlgen.Corpus(wlgen.Engine(from), wlgen.Engine(to))
	src, dst := newEndpoint(t, from), newEndpoint(t, to)
	for _, e := range []*endpoint{src, dst} {
		for _, s := range wlgen.CorpusSetup(wlgen.Engine(from), wlgen.Engine(e.engine)) {
			if err := e.exec(ctx, s); err != nil {
				t.Fatalf("%s: %s: %v", e.engine, s, err)
			}
		}
		if err := e.exec(ctx, tfDDL("tf", corpus, e == dst)); err != nil {
			t.Fatalf("%s: %s: %v", e.engine, tfDDL("tf", corpus, e == dst), err)
		}
	}
	rows := 0
	for _, c := range corpus {
		rows = max(rows, len(c.Values))
	}
	rows++ // and one of NULLs
	if err := src.exec(ctx, tfInsert("tf", corpus, tfCopied, rows)); err != nil {
		t.Fatal(err)
	}
	id := "tf_" + string(from) + "_" + mode
	o := daemon.StreamOptions{
		ID: id, SourceURL: src.url, TargetURL: dst.url, Tables: tableNames(t, []string{"tf"}), StateDir: t.TempDir(),
		SourceMode: mode, PollInterval: 50 * time.Millisecond, KillBudget: 5 * time.Second,
	}
	if mode == daemon.ModeLogical {
		dropSlotAtCleanup(t, src, id, []string{"tf"})
	}
	run := startStream(t, o)
	run.waitStarted(t, 60*time.Second)
	if err := src.exec(ctx, tfInsert("tf", corpus, tfInserted, rows)); err != nil {
		t.Fatal(err)
	}
	if err := src.exec(ctx, tfInsert("tf", nil, tfUpdated, rows)); err != nil {
		t.Fatal(err)
	}
	for _, q := range tfUpdates("tf", corpus, tfUpdated, rows) {
		if err := src.exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		diffs, err := tfDiffs(ctx, src, dst, "tf", corpus)
		if err != nil {
			t.Fatal(err)
		}
		if len(diffs) == 0 {
			break
		}
		select {
		case err := <-run.done:
			run.done <- err
			t.Fatalf("the stream stopped before the target held the corpus: %v\n%s", err, strings.Join(diffs, "\n"))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s the target does not hold what the source does (%d differences):\n%s", len(diffs), strings.Join(diffs, "\n"))
		}
		time.Sleep(200 * time.Millisecond) // polling interval, not a wait for replication
	}
	if from == daemon.EnginePostgres {
		// sluice verify, whose canonical forms compute the source's text on
		// the source, must agree. (MariaDB → PostgreSQL: the canonical
		// form of a JSON column kept in jsonb takes seconds a row and
		// reports documents nested past 16 levels.)
		verifyAgrees(t, src, dst, []string{"tf"})
	}
	tfRefusals(t, src, dst, from, to, corpus)

	// End to end, one value without an exact home stops the stream at its
	// row, naming the table, the column and the key, and nothing of it is
	// written.
	name, v := "c_tstz_ts", "'1970-01-01 00:00:00+00'" // MariaDB's TIMESTAMP 0 is its zero value
	if from == daemon.EngineMySQL {
		name, v = "c_jsonb", `'{"a":1,"a":2}'`
	}
	if err := src.exec(ctx, fmt.Sprintf("INSERT INTO tf (id, %s) VALUES (9001, %s)", name, v)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-run.done:
		run.done <- err
		for _, want := range []string{"table ", "tf, column " + name + ", row (id=9001)"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("the stream stopped with %v, want an error naming %q", err, want)
			}
		}
		t.Logf("stopped as it must: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("the stream did not stop within 60 s at %s = %s, which the target cannot hold exactly", name, v)
	}
	if got, err := tfRead(ctx, dst, "tf", nil, nil); err != nil {
		t.Fatal(err)
	} else if _, ok := got[9001]; ok {
		t.Fatalf("row 9001, whose %s the target cannot hold, was written", name)
	}
}

// tfRefusals checks that sluice's type map refuses every value the corpus
// says the target type has no exact home for, given as the source's
// readers give it (read by verify's repair reader, which reads as the
// initial copy does), with the target's column types as its catalog
// spells them.
func tfRefusals(t *testing.T, src, dst *endpoint, from, to daemon.Engine, corpus []wlgen.CorpusPair) {
	t.Helper()
	ctx := context.Background()
	var cols []wlgen.CorpusPair
	rows := 0
	for _, c := range corpus {
		if len(c.Refused) > 0 {
			cols = append(cols, wlgen.CorpusPair{Name: c.Name, Source: c.Source, Target: c.Target, Values: c.Refused})
			rows = max(rows, len(c.Refused))
		}
	}
	if err := src.exec(ctx, tfDDL("tf_refused", cols, false)); err != nil {
		t.Fatal(err)
	}
	if err := src.exec(ctx, tfInsert("tf_refused", cols, 1, rows)); err != nil {
		t.Fatal(err)
	}
	side, err := verify.Open(ctx, "--source", src.url)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	name := sluice.TableName{Name: "tf_refused"}
	if from == daemon.EnginePostgres {
		name.Schema = "public"
	}
	desc, err := side.Describe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if db, ok := side.(interface{ Database() string }); ok {
		desc.Name.Schema = db.Database() // as the MySQL readers name it
	}
	rr, err := verify.OpenRows(src.url, side)(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	keys := make([]sluice.Row, rows)
	for i := range keys {
		keys[i] = sluice.Row{sluice.Text(fmt.Sprint(i + 1))}
	}
	dstTypes := catalogTypes(t, dst, "tf")
	tmFrom, tmTo := typemap.Postgres, typemap.MySQL
	if from == daemon.EngineMySQL {
		tmFrom, tmTo = typemap.MySQL, typemap.Postgres
	}
	checked := 0
	err = rr.ReadKeys(ctx, desc, keys, func(rs []sluice.Row) error {
		for _, r := range rs {
			for i, c := range desc.Columns {
				if c.Name == "id" || r[i].Null {
					continue
				}
				conv, err := typemap.Column(tmFrom, tmTo, c, dstTypes[c.Name])
				if err != nil {
					t.Errorf("%s (%s → %s): the pair is refused: %v", c.Name, c.Type, dstTypes[c.Name], err)
					continue
				}
				checked++
				if conv == nil {
					t.Errorf("%s (%s → %s): value %q (row id=%s) has no exact home on the target, but the type map writes it as it is", c.Name, c.Type, dstTypes[c.Name], r[i].Text, r[0].Text)
					continue
				}
				if out, err := conv(r[i].Text); err == nil {
					t.Errorf("%s (%s → %s): value %q (row id=%s) has no exact home on the target, but the type map writes it as %q", c.Name, c.Type, dstTypes[c.Name], r[i].Text, r[0].Text, out)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, c := range cols {
		want += len(c.Values)
	}
	if checked != want {
		t.Errorf("checked %d refused values, the corpus has %d", checked, want)
	}
}

func tfDDL(table string, corpus []wlgen.CorpusPair, target bool) string {
	cols := make([]canonCol, len(corpus))
	for i, c := range corpus {
		cols[i] = canonCol{name: c.Name, src: c.Source, dst: c.Target}
	}
	return canonDDL(table, cols, target)
}

// tfInsert inserts rows rows from id first on: row i holds each column's
// value i, or NULL past its last. A nil corpus inserts keys only.
func tfInsert(table string, corpus []wlgen.CorpusPair, first, rows int) string {
	names := []string{"id"}
	for _, c := range corpus {
		names = append(names, c.Name)
	}
	var vals []string
	for i := 0; i < rows; i++ {
		row := []string{fmt.Sprint(first + i)}
		for _, c := range corpus {
			row = append(row, tfValue(c.Values, i))
		}
		vals = append(vals, "("+strings.Join(row, ", ")+")")
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", table, strings.Join(names, ", "), strings.Join(vals, ", "))
}

// tfUpdates sets the corpus values on rows inserted as keys only, a
// statement per row.
func tfUpdates(table string, corpus []wlgen.CorpusPair, first, rows int) []string {
	var out []string
	for i := 0; i < rows; i++ {
		var sets []string
		for _, c := range corpus {
			sets = append(sets, c.Name+" = "+tfValue(c.Values, i))
		}
		out = append(out, fmt.Sprintf("UPDATE %s SET %s WHERE id = %d", table, strings.Join(sets, ", "), first+i))
	}
	return out
}

func tfValue(vals []string, i int) string {
	if i < len(vals) {
		return vals[i]
	}
	return "NULL"
}

// tfDiffs reads every row's expected values on the source (the corpus's
// Want) and what the target holds (its Read) and lists the differences,
// and the rows only one side has.
func tfDiffs(ctx context.Context, src, dst *endpoint, table string, corpus []wlgen.CorpusPair) ([]string, error) {
	want, err := tfRead(ctx, src, table, corpus, func(c wlgen.CorpusPair) string { return c.Want })
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	got, err := tfRead(ctx, dst, table, corpus, func(c wlgen.CorpusPair) string { return c.Read })
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	var diffs []string
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("row %d: missing on the target", id))
			continue
		}
		for i, c := range corpus {
			if !tfEqual(c.Compare, w[i], g[i]) {
				diffs = append(diffs, fmt.Sprintf("row %d %s: the source says the target must hold %s, it holds %s", id, c, tfShow(w[i]), tfShow(g[i])))
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("row %d: extra on the target", id))
		}
	}
	return diffs, nil
}

// tfRead runs the expressions expr gives over every row, keyed by id.
// MariaDB is read through a prepared statement, so that floats come in
// binary; PostgreSQL through pgx's binary results.
func tfRead(ctx context.Context, e *endpoint, table string, corpus []wlgen.CorpusPair, expr func(wlgen.CorpusPair) string) (map[int64][]any, error) {
	sel := []string{"id"}
	for _, c := range corpus {
		sel = append(sel, wlgen.Expr(expr(c), c.Name))
	}
	out := map[int64][]any{}
	if e.pg != nil {
		rows, err := e.pg.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+table+" WHERE id > $1", 0)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return nil, err
			}
			id, err := tfID(vals[0])
			if err != nil {
				return nil, err
			}
			out[id] = vals[1:]
		}
		return out, rows.Err()
	}
	rows, err := e.my.QueryContext(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+table+" WHERE id > ?", 0)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		vals := make([]any, len(sel))
		ptrs := make([]any, len(sel))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		id, err := tfID(vals[0])
		if err != nil {
			return nil, err
		}
		out[id] = vals[1:]
	}
	return out, rows.Err()
}

func tfID(v any) (int64, error) {
	switch x := v.(type) {
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	}
	return 0, fmt.Errorf("id %T %v is not an integer", v, v)
}

// tfNorm turns a result into a string of its bytes, a float64 or nil.
func tfNorm(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return string(x)
	case string:
		return x
	case float32:
		return float64(x)
	case float64:
		return x
	}
	return fmt.Sprint(v)
}

func tfEqual(how wlgen.CorpusCompare, a, b any) bool {
	a, b = tfNorm(a), tfNorm(b)
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	switch how {
	case wlgen.CompareFloat:
		x, ok1 := a.(float64)
		y, ok2 := b.(float64)
		return ok1 && ok2 && (math.Float64bits(x) == math.Float64bits(y) || math.IsNaN(x) && math.IsNaN(y))
	case wlgen.CompareJSON:
		eq, err := dbtest.JSONEqual([]byte(fmt.Sprint(a)), []byte(fmt.Sprint(b)))
		return err == nil && eq
	}
	as, ok1 := a.(string)
	bs, ok2 := b.(string)
	return ok1 && ok2 && as == bs
}

func tfShow(v any) string {
	switch x := tfNorm(v).(type) {
	case nil:
		return "NULL"
	case float64:
		return fmt.Sprintf("%v (bits %016x)", x, math.Float64bits(x))
	case string:
		if len(x) > 120 {
			return fmt.Sprintf("%q… (%d bytes)", x[:100], len(x))
		}
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprint(v)
}
