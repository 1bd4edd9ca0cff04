package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/tablecopy"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

// emitRows is a producer that hands rows over in batches of n, reusing one
// batch slice and clobbering its rows after each emit, as a source's reader
// may: the target must not keep them.
func emitRows(rows []sluice.Row, n int) tablecopy.Rows {
	return func(emit func([]sluice.Row) error) error {
		batch := make([]sluice.Row, 0, n)
		for i := 0; i < len(rows); i += n {
			batch = batch[:0]
			for _, r := range rows[i:min(i+n, len(rows))] {
				batch = append(batch, slices.Clone(r))
			}
			if err := emit(batch); err != nil {
				return err
			}
			for _, r := range batch {
				for j := range r {
					r[j] = sluice.Text("clobbered")
				}
			}
		}
		return nil
	}
}

// insertSQL inserts rows with plain SQL literals: the path COPY's result is
// judged against.
func insertSQL(table string, rows []sluice.Row) string {
	var vals []string
	for _, r := range rows {
		lits := make([]string, len(r))
		for i, v := range r {
			if v.Null {
				lits[i] = "NULL"
			} else {
				lits[i] = keyrange.PGLiteral(v.Text)
			}
		}
		vals = append(vals, "("+strings.Join(lits, ", ")+")")
	}
	return "INSERT INTO " + table + " VALUES " + strings.Join(vals, ",\n")
}

func pgTable(name string, cols ...string) *sluice.Table {
	tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: name}}
	for _, c := range cols {
		n, typ, _ := strings.Cut(c, " ")
		key := strings.HasSuffix(typ, "*")
		typ = strings.TrimSuffix(typ, "*")
		if key {
			tbl.Key = append(tbl.Key, len(tbl.Columns))
		}
		tbl.Columns = append(tbl.Columns, sluice.Column{Name: n, Type: typ, Nullable: !key})
	}
	return tbl
}

// mustPlan records an empty plan for stream, which creates the plan tables
// the chunks' records go to.
func mustPlan(t *testing.T, tg *Target, stream string) {
	t.Helper()
	if err := tg.WritePlan(context.Background(), &tablecopy.Plan{Stream: stream, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
}

func bound(vals ...string) sluice.Row { return row(vals...) }

func sortedDump(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	d := dump(t, conn, table)
	slices.Sort(d)
	return d
}

// chunkRecord reads a chunk's record: done and copies, or copies -1 when
// it has none.
func chunkRecord(t *testing.T, conn *pgx.Conn, stream, table string, n int) (bool, int) {
	t.Helper()
	var done bool
	var copies int
	err := conn.QueryRow(context.Background(), "SELECT done, copies FROM sluice.copy_chunk WHERE stream = $1 AND table_name = $2 AND n = $3",
		stream, table, n).Scan(&done, &copies)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return done, copies
}

func chunks(tbl *sluice.Table, ranges ...tablecopy.Range) []tablecopy.ChunkState {
	var out []tablecopy.ChunkState
	for i, r := range ranges {
		out = append(out, tablecopy.ChunkState{Chunk: tablecopy.Chunk{Table: tbl.Name, N: i, Range: r}})
	}
	return out
}

func TestCopyPlan(t *testing.T) {
	pg := dbtest.PG(t)
	url, conn := testDB(t,
		"CREATE TABLE a (id int PRIMARY KEY, v text)",
		"CREATE TABLE b (k text, n int, v text, PRIMARY KEY (k, n))")
	proxied, proxy := dbtest.ViaProxy(t, url, pg.Addr(), 0)
	tg := openTarget(t, proxied, Pipelined)
	ctx := context.Background()

	var reg *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass('sluice.copy_plan')::text").Scan(&reg); err != nil {
		t.Fatal(err)
	}
	if reg != nil {
		t.Fatalf("Open created %s: the plan tables must wait for WritePlan", *reg)
	}
	proxy.ResetRoundTrips()
	if p, err := tg.ReadPlan(ctx, "s1"); p != nil || err != nil {
		t.Fatalf("ReadPlan without plan tables = %v, %v; want nil, nil", p, err)
	}
	if n := proxy.RoundTrips(); n != 1 {
		t.Errorf("ReadPlan without plan tables cost %d round trips, want 1", n)
	}

	a := pgTable("a", "id int*", "v text")
	b := pgTable("b", "k text*", "n int*", "v text")
	noSchema := &sluice.Table{Name: sluice.TableName{Name: "c"}}
	started := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	p1 := &tablecopy.Plan{Stream: "s1", Epoch: 1, Position: sluice.Position{Kind: "pglogical", Token: "0/16B3748"}, Started: started}
	p1.Chunks = append(p1.Chunks, chunks(a,
		tablecopy.Range{To: bound("10")},
		tablecopy.Range{From: bound("10"), To: bound("20")},
		tablecopy.Range{From: bound("20")})...)
	p1.Chunks = append(p1.Chunks, chunks(b,
		tablecopy.Range{To: bound(`it's "q" \ {x}`, "3")},
		tablecopy.Range{From: bound(`it's "q" \ {x}`, "3"), To: bound("zz")},
		tablecopy.Range{From: bound("zz")})...)
	p1.Chunks = append(p1.Chunks, chunks(noSchema, tablecopy.Range{})...)
	// Another stream's plan must not leak into s1's.
	other := &tablecopy.Plan{Stream: "s2", Epoch: 3, Position: sluice.Position{Kind: "binlog", Token: "f:1"}, Chunks: chunks(a, tablecopy.Range{})}
	for _, p := range []*tablecopy.Plan{p1, other} {
		if err := tg.WritePlan(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	check := func(t *testing.T, got *tablecopy.Plan, want *tablecopy.Plan, wantStarted time.Time) {
		t.Helper()
		if got == nil {
			t.Fatal("ReadPlan = nil")
		}
		if got.Stream != want.Stream || got.Epoch != want.Epoch || got.Position != want.Position || !got.Started.Equal(wantStarted) {
			t.Errorf("plan = %s epoch %d at %v started %v, want %s epoch %d at %v started %v",
				got.Stream, got.Epoch, got.Position, got.Started, want.Stream, want.Epoch, want.Position, wantStarted)
		}
		wc := slices.Clone(want.Chunks)
		slices.SortFunc(wc, func(x, y tablecopy.ChunkState) int {
			if c := strings.Compare(x.Table.String(), y.Table.String()); c != 0 {
				return c
			}
			return x.N - y.N
		})
		if len(got.Chunks) != len(wc) {
			t.Fatalf("%d chunks, want %d: %v", len(got.Chunks), len(wc), got.Chunks)
		}
		for i, g := range got.Chunks {
			w := wc[i]
			if g.Table != w.Table || g.N != w.N || g.Range.String() != w.Range.String() ||
				tablecopy.EncodeBound(g.Range.From) != tablecopy.EncodeBound(w.Range.From) ||
				tablecopy.EncodeBound(g.Range.To) != tablecopy.EncodeBound(w.Range.To) ||
				g.Done != w.Done || g.Copies != w.Copies || g.Rows != w.Rows || g.Epoch != w.Epoch {
				t.Errorf("chunk %d = %v done=%v copies=%d rows=%d epoch=%d, want %v done=%v copies=%d rows=%d epoch=%d",
					i, g.Chunk, g.Done, g.Copies, g.Rows, g.Epoch, w.Chunk, w.Done, w.Copies, w.Rows, w.Epoch)
			}
			if g.At.IsZero() {
				t.Errorf("chunk %v has no time", g.Chunk)
			}
		}
	}
	got, err := tg.ReadPlan(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	check(t, got, p1, started)

	// Copy a's chunk 1, then resume with a new epoch whose plan has one
	// more chunk: the done chunk's record stays as it is.
	var rows []sluice.Row
	for i := 10; i < 20; i++ {
		rows = append(rows, row(strconv.Itoa(i), "v"))
	}
	st, err := tg.WriteChunk(ctx, "s1", 1, a, p1.Chunks[1].Chunk, false, emitRows(rows, 3))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Done || st.Rows != 10 || st.Bytes != 30 || st.Epoch != 1 || st.Copies != 1 || st.At.IsZero() {
		t.Errorf("WriteChunk = %+v", st)
	}
	p2 := &tablecopy.Plan{Stream: "s1", Epoch: 2, Position: sluice.Position{Kind: "pglogical", Token: "0/17000000"},
		Started: started.Add(time.Hour), Chunks: slices.Clone(p1.Chunks)}
	p2.Chunks = append(p2.Chunks, tablecopy.ChunkState{Chunk: tablecopy.Chunk{Table: a.Name, N: 3, Range: tablecopy.Range{From: bound("30")}}})
	if err := tg.WritePlan(ctx, p2); err != nil {
		t.Fatal(err)
	}
	want := *p2
	want.Chunks = slices.Clone(p2.Chunks)
	want.Chunks[1].Done, want.Chunks[1].Copies, want.Chunks[1].Rows, want.Chunks[1].Epoch = true, 1, 10, 1
	got, err = tg.ReadPlan(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	check(t, got, &want, started)
	if got, err = tg.ReadPlan(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	check(t, got, other, got.Started)
	if p, err := tg.ReadPlan(ctx, "none"); p != nil || err != nil {
		t.Errorf("ReadPlan of a stream without plan = %v, %v", p, err)
	}
	proxy.ResetRoundTrips()
	if _, err := tg.ReadPlan(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if n := proxy.RoundTrips(); n != 1 {
		t.Errorf("ReadPlan cost %d round trips, want 1", n)
	}
}

// edgeColumns are columns whose values COPY's text format and the types'
// input functions could get wrong.
var edgeColumns = []string{"id int*", "t text", "b bytea", "ta text[]", "ia integer[]", "j json", "jb jsonb",
	"n numeric", "ts timestamptz", "f float8", "r real", "iv interval", "u uuid", "d date", "bo boolean"}

func edgeDDL(name string) string {
	var defs []string
	for _, c := range edgeColumns {
		n, typ, _ := strings.Cut(c, " ")
		if strings.HasSuffix(typ, "*") {
			typ = strings.TrimSuffix(typ, "*") + " PRIMARY KEY"
		}
		defs = append(defs, n+" "+typ)
	}
	return "CREATE TABLE " + name + " (" + strings.Join(defs, ", ") + ")"
}

// edgeRows are rows of edgeColumns in the text the source prints.
var edgeRows = []sluice.Row{
	row("1", null, null, null, null, null, null, null, null, null, null, null, null, null, null),
	row("2", "", `\x`, "{}", "{}", "{}", "{}", "0", "2024-01-02 03:04:05.123456+00", "-0", "-0", "00:00:00",
		"00000000-0000-0000-0000-000000000000", "2024-02-29", "false"),
	row("3", `back\slash \N \. \\ end`, `\x00ff5c0a0d09`, `{"a\\b","c	d",NULL,"NULL","",x,"{y}"}`, `{1,NULL,-3}`,
		`{"k" : "v\n\t\\",  "a": [1,2]}`, `{"a": [1, 2], "k": "tab\tin\\"}`, "-12345678901234567890.123456789012",
		"-infinity", "NaN", "NaN", "1 year 2 mons -3 days 04:05:06.789", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "infinity", "true"),
	row("4", "tab\there", null, `{{a,b},{c,d}}`, `{{1,2},{3,4}}`, `"s"`, `null`, "NaN", "infinity", "Infinity",
		"-Infinity", "-00:00:01", null, "-infinity", null),
	row("5", "line1\nline2\r\nline3\rend", `\x5c4e`, `{"\\N"}`, null, `[]`, `[1, "x", {"y": null}]`, "1e-30",
		"1999-12-31 23:59:59.999999+00", "-1.5e-300", "3.4028235e+38", "-177999999 years", null, null, null),
	row("6", "héllo 世界 🎉 \u00a0 \u200b", `\x`, `{"héllo","世界"}`, null, `"\u00e9"`, `"é 🎉"`, "0.000000000000000000001",
		"2024-06-30 23:59:60+00", "1.7976931348623157e+308", "1.17549435e-38", "PT1H", null, null, null),
	row("7", `\N`, null, null, null, null, null, null, "2024-01-02 03:04:05+05:30", "4.9e-324", null, null, null, null, null),
	row("8", `\.`, null, null, null, null, null, null, "1970-01-01 00:00:00+00", "0.1", "0.1", null, null, null, null),
}

func TestCopyWriteChunkValues(t *testing.T) {
	url, conn := testDB(t, edgeDDL("want_edge"), edgeDDL("edge"),
		"CREATE TABLE want_wide (id int PRIMARY KEY, s text, n bigint)", "CREATE TABLE wide (id int PRIMARY KEY, s text, n bigint)")
	tg := openTarget(t, url, Pipelined)
	mustPlan(t, tg, "s")
	ctx := context.Background()
	edge := pgTable("edge", edgeColumns...)
	wide := pgTable("wide", "id int*", "s text", "n bigint")
	// Enough rows of 100 bytes and more that the encoder hands COPY many
	// pieces.
	var wideRows []sluice.Row
	for i := range 5000 {
		wideRows = append(wideRows, row(strconv.Itoa(i), strings.Repeat("x\t\\\n", i%40)+strings.Repeat("é", 50), strconv.Itoa(i*i)))
	}
	wideRows = append(wideRows, row("-1", null, null))
	cases := []struct {
		name  string
		tbl   *sluice.Table
		rows  []sluice.Row
		batch int
	}{
		{"edge values", edge, edgeRows, 3},
		{"many rows", wide, wideRows, 500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := "want_" + c.tbl.Name.Name
			if _, err := conn.Exec(ctx, insertSQL(want, c.rows)); err != nil {
				t.Fatal(err)
			}
			var wantBytes int64
			for _, r := range c.rows {
				for _, v := range r {
					wantBytes += int64(len(v.Text))
				}
			}
			st, err := tg.WriteChunk(ctx, "s", 1, c.tbl, tablecopy.Chunk{Table: c.tbl.Name}, false, emitRows(c.rows, c.batch))
			if err != nil {
				t.Fatal(err)
			}
			if st.Rows != int64(len(c.rows)) || st.Bytes != wantBytes || !st.Done || st.Copies != 1 {
				t.Errorf("WriteChunk = rows %d bytes %d done %v copies %d, want rows %d bytes %d done, 1 copy",
					st.Rows, st.Bytes, st.Done, st.Copies, len(c.rows), wantBytes)
			}
			d, err := dbtest.CompareTableAs(ctx, dbtest.DB{PG: conn}, want, dbtest.DB{PG: conn}, c.tbl.Name.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Equal() {
				t.Errorf("COPY wrote other rows than plain SQL:\n%s", d)
			}
			// The text the server prints, too (json keeps its spacing).
			if w, g := sortedDump(t, conn, want), sortedDump(t, conn, c.tbl.Name.Name); !slices.Equal(w, g) {
				t.Errorf("text differs:\nwant %q\ngot  %q", w, g)
			}
		})
	}
}

func TestCopyWriteChunkFailures(t *testing.T) {
	url, conn := testDB(t, "CREATE TABLE f (id int PRIMARY KEY, req text NOT NULL, v text)",
		"INSERT INTO f VALUES (1, 'old', 'a'), (2, 'old', 'b'), (50, 'old', 'c')")
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	f := pgTable("f", "id int*", "req text", "v text")
	f.Columns[1].Nullable = false
	ck := tablecopy.Chunk{Table: f.Name, Range: tablecopy.Range{To: bound("10")}}
	if err := tg.WritePlan(ctx, &tablecopy.Plan{Stream: "s", Epoch: 1, Chunks: []tablecopy.ChunkState{{Chunk: ck}}}); err != nil {
		t.Fatal(err)
	}
	before := sortedDump(t, conn, "f")
	good := []sluice.Row{row("3", "new", "x"), row("4", "new", null)}
	// bulk is rows enough (~400 KB) that COPY data has reached the server
	// when what follows them fails.
	var bulk []sluice.Row
	for i := range 4000 {
		bulk = append(bulk, row(strconv.Itoa(1000+i), "new", strings.Repeat("b", 100)))
	}
	sourceErr := errors.New("source connection reset")
	cases := []struct {
		name    string
		rows    tablecopy.Rows
		wantErr string
	}{
		{"producer error mid-stream", func(emit func([]sluice.Row) error) error {
			if err := emit(good); err != nil {
				return err
			}
			return fmt.Errorf("read public.f: %w", sourceErr)
		}, "source connection reset"},
		{"producer error after data reached the server", func(emit func([]sluice.Row) error) error {
			if err := emitRows(bulk, 500)(emit); err != nil {
				return err
			}
			return fmt.Errorf("read public.f: %w", sourceErr)
		}, "source connection reset"},
		{"NOT NULL violation amid much data", emitRows(slices.Concat(bulk[:2000], []sluice.Row{row("5", null, "y")}, bulk[2000:]), 100), "23502"},
		{"NOT NULL violation", emitRows(append(slices.Clone(good), row("5", null, "y")), 1), "23502"},
		{"unchanged value", emitRows([]sluice.Row{good[0], {sluice.Text("6"), sluice.Text("r"), {Unchanged: true}}}, 2), "column v"},
		{"short row", emitRows([]sluice.Row{good[0], row("7", "r")}, 2), "2 values"},
		{"duplicate key", emitRows([]sluice.Row{good[0], good[0]}, 1), "23505"},
		{"bad value", emitRows([]sluice.Row{row("x", "r", "v")}, 1), "22P02"},
	}
	for _, c := range cases {
		for _, replace := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/replace=%v", c.name, replace), func(t *testing.T) {
				_, err := tg.WriteChunk(ctx, "s", 1, f, ck, replace, c.rows)
				if err == nil {
					t.Fatal("WriteChunk succeeded")
				}
				if !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "public.f chunk 0") {
					t.Errorf("error %q does not name the cause (%s) and the chunk", err, c.wantErr)
				}
				if tn, ok := sluice.ErrTable(err); !ok || tn != f.Name {
					t.Errorf("error names table %v, %v", tn, ok)
				}
				if strings.HasPrefix(c.name, "producer error") && !errors.Is(err, sourceErr) {
					t.Errorf("error %q does not wrap the producer's", err)
				}
				if got := sortedDump(t, conn, "f"); !slices.Equal(got, before) {
					t.Errorf("rows after a failed chunk = %v, want %v", got, before)
				}
				if done, copies := chunkRecord(t, conn, "s", "public.f", 0); done || copies != 0 {
					t.Errorf("chunk record after a failure: done=%v copies=%d", done, copies)
				}
			})
		}
	}
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, err := tg.WriteChunk(cctx, "s", 1, f, ck, true, func(emit func([]sluice.Row) error) error {
			if err := emitRows(bulk[:2000], 500)(emit); err != nil {
				return err
			}
			cancel()
			return emitRows(bulk[2000:], 500)(emit)
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("WriteChunk with its context cancelled: %v", err)
		}
		if got := sortedDump(t, conn, "f"); !slices.Equal(got, before) {
			t.Errorf("rows after a cancelled chunk = %v, want %v", got, before)
		}
		if done, copies := chunkRecord(t, conn, "s", "public.f", 0); done || copies != 0 {
			t.Errorf("chunk record after a cancelled copy: done=%v copies=%d", done, copies)
		}
	})
	// The target is usable afterwards.
	st, err := tg.WriteChunk(ctx, "s", 1, f, ck, true, emitRows(good, 1))
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 2 || st.Copies != 1 {
		t.Errorf("WriteChunk after failures = %+v", st)
	}
	if got := sortedDump(t, conn, "f"); fmt.Sprint(got) != "[(3,new,x) (4,new,) (50,old,c)]" {
		t.Errorf("rows = %v", got)
	}
}

func TestCopyWriteChunkReplace(t *testing.T) {
	url, conn := testDB(t,
		"CREATE TABLE r1 (id int PRIMARY KEY, v text)",
		"INSERT INTO r1 SELECT g, 'old' FROM generate_series(1, 10) g",
		"CREATE TABLE r2 (a int, b text, v text, PRIMARY KEY (a, b))",
		"INSERT INTO r2 SELECT a, b, 'old' FROM generate_series(1, 3) a, unnest(ARRAY['x', 'y', 'z']) b")
	tg := openTarget(t, url, Pipelined)
	mustPlan(t, tg, "s")
	ctx := context.Background()
	r1 := pgTable("r1", "id int*", "v text")
	r2 := pgTable("r2", "a int*", "b text*", "v text")
	cases := []struct {
		name  string
		tbl   *sluice.Table
		r     tablecopy.Range
		rows  []sluice.Row
		want  string
		twice bool
	}{
		{"single key", r1, tablecopy.Range{From: bound("3"), To: bound("7")},
			[]sluice.Row{row("3", "new"), row("4", "new"), row("6", "new")},
			"[(1,old) (10,old) (2,old) (3,new) (4,new) (6,new) (7,old) (8,old) (9,old)]", true},
		{"composite key, prefix bound", r2, tablecopy.Range{From: bound("1", "y"), To: bound("3")},
			[]sluice.Row{row("1", "z", "new"), row("2", "x", "new"), row("2", "w", "new")},
			"[(1,x,old) (1,z,new) (2,w,new) (2,x,new) (3,x,old) (3,y,old) (3,z,old)]", true},
		{"open end", r1, tablecopy.Range{From: bound("9")}, nil,
			"[(1,old) (2,old) (3,new) (4,new) (6,new) (7,old) (8,old)]", false},
	}
	for n, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ck := tablecopy.Chunk{Table: c.tbl.Name, N: n, Range: c.r}
			for i := range 1 + btoi(c.twice) {
				st, err := tg.WriteChunk(ctx, "s", i+1, c.tbl, ck, true, emitRows(c.rows, 2))
				if err != nil {
					t.Fatal(err)
				}
				if st.Copies != i+1 || st.Epoch != i+1 {
					t.Errorf("copy %d: copies=%d epoch=%d", i+1, st.Copies, st.Epoch)
				}
			}
			if got := fmt.Sprint(sortedDump(t, conn, c.tbl.Name.Name)); got != c.want {
				t.Errorf("rows = %s, want %s", got, c.want)
			}
		})
	}
}

func TestCopyDigest(t *testing.T) {
	ddl := []string{edgeDDL("edge"), "CREATE TABLE c2 (a int, b text, v numeric, PRIMARY KEY (a, b))",
		insertSQL("edge", edgeRows),
		"INSERT INTO c2 SELECT a, b, a * 1.5 FROM generate_series(1, 5) a, unnest(ARRAY['x', 'y']) b"}
	url1, _ := testDB(t, ddl...)
	url2, conn2 := testDB(t, ddl...)
	tg1, tg2 := openTarget(t, url1, Pipelined), openTarget(t, url2, Pipelined)
	ctx := context.Background()
	edge := pgTable("edge", edgeColumns...)
	c2 := pgTable("c2", "a int*", "b text*", "v numeric")
	cases := []struct {
		name  string
		tbl   *sluice.Table
		r     tablecopy.Range
		rows  int64
		moved bool // holds the row the change touches
	}{
		{"whole", edge, tablecopy.Range{}, 8, true},
		{"before", edge, tablecopy.Range{To: bound("3")}, 2, false},
		{"holding", edge, tablecopy.Range{From: bound("3"), To: bound("4")}, 1, true},
		{"after", edge, tablecopy.Range{From: bound("4")}, 5, false},
		{"composite whole", c2, tablecopy.Range{}, 10, true},
		{"composite holding", c2, tablecopy.Range{From: bound("2", "y"), To: bound("4")}, 3, true},
		{"composite after", c2, tablecopy.Range{From: bound("4")}, 4, false},
	}
	digests := func(t *testing.T) (a, b []tablecopy.Digest) {
		for _, c := range cases {
			d1, err := tg1.Digest(ctx, c.tbl, c.r)
			if err != nil {
				t.Fatal(err)
			}
			d2, err := tg2.Digest(ctx, c.tbl, c.r)
			if err != nil {
				t.Fatal(err)
			}
			if d1.Rows != c.rows {
				t.Errorf("%s: digest counts %d rows, want %d", c.name, d1.Rows, c.rows)
			}
			a, b = append(a, d1), append(b, d2)
		}
		return a, b
	}
	d1, d2 := digests(t)
	for i, c := range cases {
		if d1[i] != d2[i] {
			t.Errorf("%s: digests of equal tables differ: %v and %v", c.name, d1[i], d2[i])
		}
	}
	// One column of one row changes in the second database.
	for _, q := range []string{"UPDATE edge SET f = '-0' WHERE id = 3", "UPDATE c2 SET v = 4.51 WHERE a = 3 AND b = 'x'"} {
		if _, err := conn2.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	d1, d2 = digests(t)
	for i, c := range cases {
		if (d1[i] != d2[i]) != c.moved {
			t.Errorf("%s: digests %v and %v; want them to differ: %v", c.name, d1[i], d2[i], c.moved)
		}
	}
}

func TestCopyResetTableRowCountFinish(t *testing.T) {
	url, conn := testDB(t, "CREATE TABLE p (id int PRIMARY KEY)", "CREATE TABLE ch (id int PRIMARY KEY, p int REFERENCES p ON DELETE CASCADE)")
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	p := pgTable("p", "id int*")
	ch := pgTable("ch", "id int*", "p int")
	plan := &tablecopy.Plan{Stream: "s", Epoch: 1, Position: sluice.Position{Kind: "k", Token: "1"},
		Chunks: append(chunks(p, tablecopy.Range{To: bound("50")}, tablecopy.Range{From: bound("50")}), chunks(ch, tablecopy.Range{})...)}
	if err := tg.WritePlan(ctx, plan); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []*sluice.Table{p, ch} {
		if n, err := tg.RowCount(ctx, tbl.Name); err != nil || n != 0 {
			t.Errorf("RowCount(%s) of an empty table = %d, %v", tbl.Name, n, err)
		}
	}
	var pRows, chRows []sluice.Row
	for i := range 100 {
		pRows = append(pRows, row(strconv.Itoa(i)))
		chRows = append(chRows, row(strconv.Itoa(i), strconv.Itoa(i)))
	}
	for i, c := range plan.Chunks {
		rows := chRows
		if c.Table == p.Name {
			rows = pRows[i*50 : i*50+50]
		}
		tbl := map[sluice.TableName]*sluice.Table{p.Name: p, ch.Name: ch}[c.Table]
		if _, err := tg.WriteChunk(ctx, "s", 1, tbl, c.Chunk, false, emitRows(rows, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := tg.RowCount(ctx, p.Name); err != nil || n < 1 {
		t.Errorf("RowCount(p) with rows = %d, %v", n, err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE p"); err != nil {
		t.Fatal(err)
	}
	if n, err := tg.RowCount(ctx, p.Name); err != nil || n != 100 {
		t.Errorf("RowCount(p) after ANALYZE = %d, %v; want 100", n, err)
	}
	if _, err := tg.RowCount(ctx, sluice.TableName{Schema: "public", Name: "missing"}); err == nil || !strings.Contains(err.Error(), "public.missing") {
		t.Errorf("RowCount of a missing table: %v", err)
	}

	if err := tg.ResetTable(ctx, "s", p); err != nil {
		t.Fatal(err)
	}
	if n, err := tg.RowCount(ctx, p.Name); err != nil || n != 0 {
		t.Errorf("RowCount(p) after ResetTable = %d, %v", n, err)
	}
	if tg.ReplicaRole() {
		// No foreign-key action under the replica role: the child's done
		// chunk keeps its rows.
		if got := len(dump(t, conn, "ch")); got != 100 {
			t.Errorf("ResetTable of the parent left %d child rows, want 100", got)
		}
	}
	got, err := tg.ReadPlan(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Chunks {
		if c.Done != (c.Table == ch.Name) || c.Copies != 1 {
			t.Errorf("after ResetTable(p): %v done=%v copies=%d", c.Chunk, c.Done, c.Copies)
		}
	}

	if err := tg.FinishCopy(ctx, "s", sluice.Position{Kind: "k", Token: "2"}); err != nil {
		t.Fatal(err)
	}
	var pos string
	var at *time.Time
	if err := conn.QueryRow(ctx, "SELECT handoff_position, handed_off_at FROM sluice.copy_plan WHERE stream = 's'").Scan(&pos, &at); err != nil {
		t.Fatal(err)
	}
	if pos != "k:2" || at == nil {
		t.Errorf("handed off at %q, %v", pos, at)
	}
	if p, err := tg.ReadPlan(ctx, "s"); err != nil || p == nil || p.HandedOff.IsZero() {
		t.Errorf("ReadPlan after FinishCopy: %+v, %v; want the hand-off time", p, err)
	}
	if err := tg.FinishCopy(ctx, "nope", sluice.Position{Kind: "k", Token: "2"}); err == nil {
		t.Error("FinishCopy of a stream without plan succeeded")
	}
}

// TestCopyRoundTrips counts the round trips of the copy's target calls
// through a WAN proxy with a delay, so that the data of a chunk can go out
// before the server's first answer comes back, as on a real link.
func TestCopyRoundTrips(t *testing.T) {
	pg := dbtest.PG(t)
	url, conn := testDB(t, "CREATE TABLE rt (id int PRIMARY KEY, v text)", "INSERT INTO rt SELECT g, 'old' FROM generate_series(1, 100) g")
	const oneWay = 20 * time.Millisecond
	proxied, proxy := dbtest.ViaProxy(t, url, pg.Addr(), oneWay)
	tg := openTarget(t, proxied, Pipelined)
	ctx := context.Background()
	// Fenced, as the copy of a stream is: the fence check rides along.
	if _, err := tg.Fence(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	rt := pgTable("rt", "id int*", "v text")
	var rows []sluice.Row
	for i := range 2000 {
		rows = append(rows, row(strconv.Itoa(i), strings.Repeat("v", 40)))
	}
	ck := tablecopy.Chunk{Table: rt.Name, Range: tablecopy.Range{To: bound("5000")}}
	steps := []struct {
		name string
		max  int64
		run  func() error
	}{
		{"ReadPlan without tables", 1, func() error { _, err := tg.ReadPlan(ctx, "s"); return err }},
		{"WritePlan", 1, func() error {
			return tg.WritePlan(ctx, &tablecopy.Plan{Stream: "s", Epoch: 1, Chunks: []tablecopy.ChunkState{{Chunk: ck}}})
		}},
		{"ReadPlan", 1, func() error { _, err := tg.ReadPlan(ctx, "s"); return err }},
		{"WriteChunk 2,000 rows, replace", 1, func() error {
			_, err := tg.WriteChunk(ctx, "s", 1, rt, ck, true, emitRows(rows, 500))
			return err
		}},
		{"RowCount", 1, func() error { _, err := tg.RowCount(ctx, rt.Name); return err }},
		{"Digest", 1, func() error { _, err := tg.Digest(ctx, rt, ck.Range); return err }},
		{"ResetTable", 1, func() error { return tg.ResetTable(ctx, "s", rt) }},
		{"FinishCopy", 1, func() error { return tg.FinishCopy(ctx, "s", sluice.Position{Kind: "k", Token: "1"}) }},
	}
	for _, s := range steps {
		proxy.ResetRoundTrips()
		start := time.Now()
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		n := proxy.RoundTrips()
		t.Logf("%s: %d round trips, %v", s.name, n, time.Since(start).Round(time.Millisecond))
		if n > s.max {
			t.Errorf("%s cost %d round trips, want ≤ %d", s.name, n, s.max)
		}
		if s.name == "WriteChunk 2,000 rows, replace" {
			if got := len(dump(t, conn, "rt")); got != 2000 {
				t.Errorf("%d rows after the chunk, want 2000", got)
			}
		}
	}
}

// TestCopyReplicaRole checks that a chunk is written as the target's batches
// are: under session_replication_role = replica where the target may set it,
// so that the target's own triggers do not fire for copied rows (the
// source's triggers already ran), and with them otherwise. The DELETE
// trigger fails the statement before COPY in the one simple query: the COPY
// data sent behind it is then ignored and the connection stays usable.
func TestCopyReplicaRole(t *testing.T) {
	url, conn := testDB(t,
		`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'trigger fired'; END $$`,
		"CREATE TABLE ti (id int PRIMARY KEY)",
		"CREATE TRIGGER refuse BEFORE INSERT ON ti FOR EACH ROW EXECUTE FUNCTION refuse()",
		"CREATE TABLE td (id int PRIMARY KEY)",
		"CREATE TRIGGER refuse BEFORE DELETE ON td FOR EACH ROW EXECUTE FUNCTION refuse()")
	ctx := context.Background()
	cases := []struct {
		tbl     *sluice.Table
		replace bool
		rows    []sluice.Row
	}{
		{pgTable("ti", "id int*"), false, []sluice.Row{row("2")}},
		{pgTable("td", "id int*"), true, []sluice.Row{row("2")}},
	}
	for _, noReplica := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoReplicaRole=%v", noReplica), func(t *testing.T) {
			tg, err := Open(ctx, url, Config{NoReplicaRole: noReplica})
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close(ctx)
			if tg.ReplicaRole() == noReplica {
				t.Fatalf("ReplicaRole() = %v with NoReplicaRole %v (the test's user is a superuser)", tg.ReplicaRole(), noReplica)
			}
			mustPlan(t, tg, "s")
			for _, c := range cases {
				name := c.tbl.Name.Name
				for _, q := range []string{"ALTER TABLE " + name + " DISABLE TRIGGER refuse", "TRUNCATE " + name,
					"INSERT INTO " + name + " VALUES (1)", "ALTER TABLE " + name + " ENABLE TRIGGER refuse"} {
					if _, err := conn.Exec(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
				_, err = tg.WriteChunk(ctx, "s", 1, c.tbl, tablecopy.Chunk{Table: c.tbl.Name}, c.replace, emitRows(c.rows, 1))
				if noReplica != (err != nil && strings.Contains(err.Error(), "trigger fired")) {
					t.Errorf("%s: WriteChunk: %v", name, err)
				}
				want := "[(1) (2)]"
				switch {
				case noReplica:
					want = "[(1)]"
				case c.replace:
					want = "[(2)]"
				}
				if got := fmt.Sprint(sortedDump(t, conn, name)); got != want {
					t.Errorf("%s: rows %s, want %s", name, got, want)
				}
				if n, err := tg.RowCount(ctx, c.tbl.Name); err != nil || n == 0 {
					t.Errorf("%s: RowCount after the chunk = %d, %v", name, n, err)
				}
			}
		})
	}
}

// TestCopyNoPrimaryKey: a table without a primary key is one whole-table
// chunk, replaced, digested and counted like any other.
func TestCopyNoPrimaryKey(t *testing.T) {
	url, conn := testDB(t, "CREATE TABLE nk (a int, b text)", "INSERT INTO nk VALUES (1, 'old'), (1, 'old')")
	tg := openTarget(t, url, Pipelined)
	mustPlan(t, tg, "s")
	ctx := context.Background()
	nk := pgTable("nk", "a int", "b text")
	rows := []sluice.Row{row("1", "new"), row("1", "new"), row("2", null)}
	if _, err := tg.WriteChunk(ctx, "s", 1, nk, tablecopy.Chunk{Table: nk.Name}, true, emitRows(rows, 2)); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(sortedDump(t, conn, "nk")); got != "[(1,new) (1,new) (2,)]" {
		t.Errorf("rows = %s", got)
	}
	if d, err := tg.Digest(ctx, nk, tablecopy.Range{}); err != nil || d.Rows != 3 {
		t.Errorf("Digest = %v, %v", d, err)
	}
	part := tablecopy.Range{To: bound("2")}
	if _, err := tg.WriteChunk(ctx, "s", 1, nk, tablecopy.Chunk{Table: nk.Name, Range: part}, true, emitRows(rows, 2)); err == nil || !strings.Contains(err.Error(), "no primary key") {
		t.Errorf("WriteChunk of a part of a table without key: %v", err)
	}
	if _, err := tg.Digest(ctx, nk, part); err == nil || !strings.Contains(err.Error(), "no primary key") {
		t.Errorf("Digest of a part of a table without key: %v", err)
	}
}

// TestCopyUnderOddServerDefaults writes a chunk into a database whose
// defaults print and read values otherwise than sluice's readers do: the
// chunk's transaction sets its own (its done record's time is read back as
// text), since a pooler refuses them as startup parameters.
func TestCopyUnderOddServerDefaults(t *testing.T) {
	url, conn := testDB(t, "CREATE TABLE odd (id int PRIMARY KEY, d date, ts timestamptz, iv interval)")
	oddDefaults(t, conn)
	tg := openTarget(t, url, Pipelined)
	ctx := context.Background()
	tbl := pgTable("odd", "id int*", "d date", "ts timestamptz", "iv interval")
	mustPlan(t, tg, "s")
	ck := tablecopy.Chunk{Table: tbl.Name}
	rows := []sluice.Row{row("1", "2024-02-03", "2024-02-03 04:05:06.789+00", "-10 mons +3 days 04:05:06"), row("2", null, null, null)}
	before := time.Now()
	st, err := tg.WriteChunk(ctx, "s", 1, tbl, ck, false, emitRows(rows, 1))
	if err != nil {
		t.Fatal(err)
	}
	if st.At.Before(before.Add(-time.Minute)) || st.At.After(time.Now().Add(time.Minute)) {
		t.Errorf("the chunk's done record says %v, want about %v", st.At, before)
	}
	want := []string{`(1,2024-02-03,"2024-02-03 04:05:06.789+00","-10 mons +3 days 04:05:06")`, `(2,,,)`}
	if got := dump(t, conn, "odd"); !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
}

// TestCopyChunkFenced (issue 28, item 8): a killed process's chunk, held
// in a dead link, reaches the target after a new process took the
// stream's generation and read the plan. Its fence check fails and nothing
// of it commits (apply.ErrFenced), so the new process's copy of the chunk
// commits; unfenced, the old chunk committed first and the new one failed
// on the duplicate key, stopping the stream until a restart.
func TestCopyChunkFenced(t *testing.T) {
	pg := dbtest.PG(t)
	url, conn := testDB(t, "CREATE TABLE zc (id int PRIMARY KEY, v text)")
	ctx := context.Background()
	zc := pgTable("zc", "id int*", "v text")
	ck := tablecopy.Chunk{Table: zc.Name}
	proxied, proxy := dbtest.ViaProxy(t, url, pg.Addr(), 0)
	old := openTarget(t, proxied, Pipelined)
	if _, err := old.Fence(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := old.WritePlan(ctx, &tablecopy.Plan{Stream: "s", Epoch: 1, Chunks: []tablecopy.ChunkState{{Chunk: ck}}}); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(0)
	oldDone := make(chan error, 1)
	go func() {
		_, err := old.WriteChunk(ctx, "s", 1, zc, ck, false, emitRows([]sluice.Row{row("1", "old"), row("2", "old")}, 1))
		oldDone <- err
	}()
	tg := openTarget(t, url, Pipelined)
	if _, err := tg.Fence(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if p, err := tg.ReadPlan(ctx, "s"); err != nil || len(p.Chunks) != 1 || p.Chunks[0].Done {
		t.Fatalf("plan before the old chunk arrives: %+v, %v", p, err)
	}
	proxy.ClearBlackhole()
	if err := <-oldDone; !errors.Is(err, apply.ErrFenced) {
		t.Errorf("the old process's chunk: %v, want apply.ErrFenced", err)
	}
	if _, err := tg.WriteChunk(ctx, "s", 1, zc, ck, false, emitRows([]sluice.Row{row("1", "new"), row("3", "new")}, 1)); err != nil {
		t.Fatalf("the new process's chunk: %v", err)
	}
	if got := fmt.Sprint(sortedDump(t, conn, "zc")); got != "[(1,new) (3,new)]" {
		t.Errorf("rows %s, want the new process's", got)
	}
	// The old process's plan and reset are fenced off too.
	if err := old.ResetTable(ctx, "s", zc); !errors.Is(err, apply.ErrFenced) {
		t.Errorf("the old process's ResetTable: %v, want apply.ErrFenced", err)
	}
	if err := old.WritePlan(ctx, &tablecopy.Plan{Stream: "s", Epoch: 2}); !errors.Is(err, apply.ErrFenced) {
		t.Errorf("the old process's WritePlan: %v, want apply.ErrFenced", err)
	}
	if got := fmt.Sprint(sortedDump(t, conn, "zc")); got != "[(1,new) (3,new)]" {
		t.Errorf("rows %s after the old process's reset, want the new process's", got)
	}
}
