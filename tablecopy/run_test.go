package tablecopy

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// These tests check the copy's orchestration (plan, resume, digests,
// progress) over in-memory tables; the SQL of each engine is tested against
// real servers in its own package and end to end in integration/.

// memDB is a set of tables of rows keyed by their first column's text.
type memDB struct {
	mu     sync.Mutex
	tables map[sluice.TableName]map[string]sluice.Row
}

func newMemDB() *memDB { return &memDB{tables: map[sluice.TableName]map[string]sluice.Row{}} }

func (d *memDB) put(t sluice.TableName, r sluice.Row) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tables[t] == nil {
		d.tables[t] = map[string]sluice.Row{}
	}
	d.tables[t][r[0].Text] = r
}

func (d *memDB) clone() map[sluice.TableName]map[string]sluice.Row {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[sluice.TableName]map[string]sluice.Row{}
	for t, rows := range d.tables {
		out[t] = maps.Clone(rows)
	}
	return out
}

// keyLess orders keys: integer keys numerically, string keys as strings
// (the test's "collation").
func keyLess(t *sluice.Table, a, b string) bool {
	if !stringType(t.Columns[t.Key[0]].Type) {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x < y
	}
	return a < b
}

func inRange(t *sluice.Table, k string, r Range) bool {
	if r.From != nil && keyLess(t, k, r.From[0].Text) {
		return false
	}
	if r.To != nil && !keyLess(t, k, r.To[0].Text) {
		return false
	}
	return true
}

func digestOf(t *sluice.Table, rows map[string]sluice.Row, r Range) Digest {
	var d Digest
	var sum uint64
	for k, row := range rows {
		if !inRange(t, k, r) {
			continue
		}
		h := fnv.New64a()
		for _, v := range row {
			fmt.Fprintf(h, "%q,", v.Text)
		}
		sum += h.Sum64() >> 4
		d.Rows++
	}
	d.Sum = strconv.FormatUint(sum, 10)
	return d
}

type memSource struct {
	db       *memDB
	tables   []*sluice.Table
	snaps    int
	failRead error
}

func (s *memSource) Snapshot(ctx context.Context, workers int) (*Snapshot, error) {
	s.snaps++
	data := s.db.clone()
	snap := &Snapshot{Position: sluice.Position{Kind: "mem", Token: strconv.Itoa(s.snaps)}, Tables: s.tables, Engine: "mem"}
	for range workers {
		snap.Readers = append(snap.Readers, &memReader{data: data, fail: s.failRead, tables: s.tables})
	}
	return snap, nil
}

type memReader struct {
	data map[sluice.TableName]map[string]sluice.Row
	fail error
	// tables are the tables as the source has them: Read gives the
	// columns of the table it is asked for.
	tables []*sluice.Table
}

// project returns row (of the source's table t.Name) with t's columns.
func (r *memReader) project(t *sluice.Table, row sluice.Row) sluice.Row {
	for _, full := range r.tables {
		if full.Name == t.Name && len(full.Columns) != len(t.Columns) {
			out := make(sluice.Row, len(t.Columns))
			for i, c := range t.Columns {
				out[i] = row[full.ColumnIndex(c.Name)]
			}
			return out
		}
	}
	return row
}

func (r *memReader) Split(ctx context.Context, t *sluice.Table, n int) ([]Range, int64, error) {
	rows := r.data[t.Name]
	keys := slices.Collect(maps.Keys(rows))
	slices.SortFunc(keys, func(a, b string) int {
		if keyLess(t, a, b) {
			return -1
		}
		return 1
	})
	var out []Range
	var from sluice.Row
	for i := n; i < len(keys); i += n {
		to := sluice.Row{sluice.Text(keys[i])}
		out = append(out, Range{From: from, To: to})
		from = to
	}
	out = append(out, Range{From: from})
	return out, int64(len(keys)), nil
}

func (r *memReader) Read(ctx context.Context, t *sluice.Table, rg Range, emit func([]sluice.Row) error) error {
	if r.fail != nil {
		return r.fail
	}
	var batch []sluice.Row
	for k, row := range r.data[t.Name] {
		if inRange(t, k, rg) {
			batch = append(batch, r.project(t, row))
		}
	}
	for len(batch) > 0 {
		n := min(len(batch), 7)
		if err := emit(batch[:n]); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

func (r *memReader) Digest(ctx context.Context, t *sluice.Table, rg Range) (Digest, error) {
	return digestOf(t, r.data[t.Name], rg), nil
}

func (r *memReader) Close() error { return nil }

// memTarget is the target's tables and plan; failAfter > 0 makes the
// failAfter-th WriteChunk from now on fail halfway through its rows, as a
// kill -9 would leave it (nothing of it committed).
type memTarget struct {
	mu        sync.Mutex
	db        *memDB
	plan      *Plan
	writes    int
	failAfter int
	noDigest  bool
}

type memConn struct{ t *memTarget }

func (m *memTarget) open(ctx context.Context) (Target, error) {
	return memConn{m}, nil
}

func clonePlan(p *Plan) *Plan {
	if p == nil {
		return nil
	}
	c := *p
	c.Chunks = slices.Clone(p.Chunks)
	return &c
}

func (c memConn) ReadPlan(ctx context.Context, stream string) (*Plan, error) {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return clonePlan(c.t.plan), nil
}

func (c memConn) WritePlan(ctx context.Context, p *Plan) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.t.plan == nil {
		c.t.plan = clonePlan(p)
		for i := range c.t.plan.Chunks {
			c.t.plan.Chunks[i] = ChunkState{Chunk: p.Chunks[i].Chunk}
		}
		return nil
	}
	c.t.plan.Epoch, c.t.plan.Position = p.Epoch, p.Position
	return nil
}

func (c memConn) RowCounts(ctx context.Context, names []sluice.TableName) ([]int64, error) {
	c.t.db.mu.Lock()
	defer c.t.db.mu.Unlock()
	out := make([]int64, len(names))
	for i, name := range names {
		out[i] = int64(len(c.t.db.tables[name]))
	}
	return out, nil
}

var errKilled = errors.New("killed")

func (c memConn) WriteChunk(ctx context.Context, stream string, epoch int, t *sluice.Table, ch Chunk, replace bool, rows Rows) (ChunkState, error) {
	c.t.mu.Lock()
	c.t.writes++
	fail := c.t.failAfter > 0 && c.t.writes >= c.t.failAfter
	c.t.mu.Unlock()
	var got []sluice.Row
	var bytes int64
	err := rows(func(b []sluice.Row) error {
		if fail && len(got) > 0 {
			return errKilled
		}
		for _, r := range b {
			got = append(got, slices.Clone(r))
			for _, v := range r {
				bytes += int64(len(v.Text))
			}
		}
		return nil
	})
	if fail && err == nil {
		err = errKilled
	}
	if err != nil {
		return ChunkState{}, err
	}
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.t.db.mu.Lock()
	tbl := c.t.db.tables[t.Name]
	if tbl == nil {
		tbl = map[string]sluice.Row{}
		c.t.db.tables[t.Name] = tbl
	}
	if replace {
		for k := range tbl {
			if inRange(t, k, ch.Range) {
				delete(tbl, k)
			}
		}
	}
	for _, r := range got {
		if _, dup := tbl[r[0].Text]; dup {
			c.t.db.mu.Unlock()
			return ChunkState{}, fmt.Errorf("duplicate key %s in %s", r[0].Text, t.Name)
		}
		tbl[r[0].Text] = r
	}
	c.t.db.mu.Unlock()
	for i := range c.t.plan.Chunks {
		st := &c.t.plan.Chunks[i]
		if st.Table == ch.Table && st.N == ch.N {
			st.Done, st.Rows, st.Bytes, st.Epoch = true, int64(len(got)), bytes, epoch
			st.Copies++
			return *st, nil
		}
	}
	return ChunkState{}, fmt.Errorf("no chunk %s", ch)
}

func (c memConn) ResetTable(ctx context.Context, stream string, t *sluice.Table) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.t.db.mu.Lock()
	delete(c.t.db.tables, t.Name)
	c.t.db.mu.Unlock()
	for i := range c.t.plan.Chunks {
		if c.t.plan.Chunks[i].Table == t.Name {
			c.t.plan.Chunks[i].Done = false
		}
	}
	return nil
}

func (c memConn) Digest(ctx context.Context, t *sluice.Table, r Range) (Digest, error) {
	if c.t.noDigest {
		return Digest{}, ErrNoDigest
	}
	data := c.t.db.clone()
	return digestOf(t, data[t.Name], r), nil
}

func (c memConn) FinishCopy(ctx context.Context, stream string, pos sluice.Position) error {
	return nil
}
func (c memConn) Close(ctx context.Context) error { return nil }

func intTable(name string) *sluice.Table {
	return &sluice.Table{Name: sluice.TableName{Schema: "s", Name: name},
		Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "v", Type: "text", Nullable: true}}, Key: []int{0}}
}

func textTable(name string) *sluice.Table {
	return &sluice.Table{Name: sluice.TableName{Schema: "s", Name: name},
		Columns: []sluice.Column{{Name: "k", Type: "varchar(20)"}, {Name: "v", Type: "text"}}, Key: []int{0}}
}

func row(vals ...string) sluice.Row {
	r := make(sluice.Row, len(vals))
	for i, v := range vals {
		r[i] = sluice.Text(v)
	}
	return r
}

func fill(db *memDB, t *sluice.Table, n int) {
	for i := range n {
		db.put(t.Name, row(strconv.Itoa(i), "v"+strconv.Itoa(i)))
	}
}

func names(ts ...*sluice.Table) []sluice.TableName {
	var out []sluice.TableName
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func equalDB(t *testing.T, want, got *memDB, tables ...*sluice.Table) {
	t.Helper()
	w, g := want.clone(), got.clone()
	for _, tb := range tables {
		if len(w[tb.Name]) != len(g[tb.Name]) {
			t.Errorf("%s: %d rows on the target, want %d", tb.Name, len(g[tb.Name]), len(w[tb.Name]))
		}
		for k, r := range w[tb.Name] {
			if !slices.Equal(r, g[tb.Name][k]) {
				t.Errorf("%s key %s: target %v, want %v", tb.Name, k, g[tb.Name][k], r)
			}
		}
	}
}

func TestCopyFresh(t *testing.T) {
	big, small, empty := intTable("big"), intTable("small"), intTable("empty")
	src := newMemDB()
	fill(src, big, 1000)
	fill(src, small, 3)
	tgt := &memTarget{db: newMemDB()}
	var last Progress
	res, err := Run(context.Background(), Config{Stream: "s1", Tables: names(big, small, empty),
		Source: &memSource{db: src, tables: []*sluice.Table{big, small, empty}}, NewTarget: tgt.open,
		Workers: 3, ChunkRows: 100, Digests: true, Progress: func(p Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	equalDB(t, src, tgt.db, big, small, empty)
	if res.Position.Token != "1" || res.Epoch != 1 || res.Copied != res.Chunks || res.Rows != 1003 {
		t.Errorf("result %+v", res)
	}
	if !last.Done || last.Rows != 1003 || last.ETA != 0 {
		t.Errorf("final progress %+v", last)
	}
	for _, tp := range last.Tables {
		if tp.Percent() != 100 {
			t.Errorf("table %s at %.0f%% at the end", tp.Table, tp.Percent())
		}
	}
}

func TestCopyRefusesFullTarget(t *testing.T) {
	tb := intTable("t")
	src := newMemDB()
	fill(src, tb, 10)
	tgt := &memTarget{db: newMemDB()}
	tgt.db.put(tb.Name, row("5", "stale"))
	ms := &memSource{db: src, tables: []*sluice.Table{tb}}
	_, err := Run(context.Background(), Config{Stream: "s1", Tables: names(tb), Source: ms, NewTarget: tgt.open})
	if !errors.Is(err, ErrTargetNotEmpty) {
		t.Fatalf("err = %v, want ErrTargetNotEmpty", err)
	}
	if ms.snaps != 0 {
		t.Errorf("a snapshot was taken before the target was found not empty")
	}
}

// TestCopyResume interrupts a copy, changes the source, and resumes: the
// target must equal the source as of the second snapshot, done chunks that
// no change touched are kept, and at most one chunk per worker is written
// again.
func TestCopyResume(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noDigest bool
		text     bool
	}{
		{"digests", false, false},
		{"no digests across engines", true, false},
		{"string key", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := intTable("t")
			if tc.text {
				tb = textTable("t")
			}
			src := newMemDB()
			fill(src, tb, 1000)
			tgt := &memTarget{db: newMemDB(), failAfter: 5, noDigest: tc.noDigest}
			ms := &memSource{db: src, tables: []*sluice.Table{tb}}
			cfg := Config{Stream: "s1", Tables: names(tb), Source: ms, NewTarget: tgt.open, Workers: 2, ChunkRows: 100, Digests: true}
			if _, err := Run(context.Background(), cfg); !errors.Is(err, errKilled) {
				t.Fatalf("first run: err = %v, want the injected failure", err)
			}
			done := 0
			for _, c := range tgt.plan.Chunks {
				if c.Done {
					done++
				}
			}
			if done == 0 || done == len(tgt.plan.Chunks) {
				t.Fatalf("%d of %d chunks done after the failure: the test needs a copy stopped halfway", done, len(tgt.plan.Chunks))
			}
			// Changes between the two snapshots: one in a done chunk's range
			// (the first key of one the workers finished: which ones did
			// depends on their timing), one past every key.
			key := ""
			for _, c := range tgt.plan.Chunks {
				if c.Done {
					key = "0"
					if c.Range.From != nil {
						key = c.Range.From[0].Text
					}
					break
				}
			}
			src.put(tb.Name, row(key, "changed"))
			src.put(tb.Name, row("5000", "new"))
			tgt.failAfter = 0
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			equalDB(t, src, tgt.db, tb)
			if res.Epoch != 2 || res.Position.Token != "2" {
				t.Errorf("resumed at epoch %d position %s, want 2 and 2", res.Epoch, res.Position)
			}
			switch {
			case tc.text || tc.noDigest:
				if res.Kept != 0 {
					t.Errorf("kept %d chunks it could not check", res.Kept)
				}
			default:
				if res.Kept != done-1 || res.Recopied != 1 {
					t.Errorf("kept %d, recopied %d of %d done chunks; want %d kept and the changed one recopied", res.Kept, res.Recopied, done, done-1)
				}
				for _, c := range tgt.plan.Chunks {
					if c.Copies > 2 {
						t.Errorf("chunk %d copied %d times", c.N, c.Copies)
					}
				}
			}
		})
	}
}

func TestCopyTableListChanged(t *testing.T) {
	a, b := intTable("a"), intTable("b")
	src := newMemDB()
	fill(src, a, 300)
	fill(src, b, 300)
	tgt := &memTarget{db: newMemDB(), failAfter: 2}
	cfg := Config{Stream: "s1", Tables: names(a), Source: &memSource{db: src, tables: []*sluice.Table{a}}, NewTarget: tgt.open, Workers: 1, ChunkRows: 100}
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Fatal("first run did not fail")
	}
	tgt.failAfter = 0
	cfg.Tables = names(a, b)
	cfg.Source = &memSource{db: src, tables: []*sluice.Table{a, b}}
	_, err := Run(context.Background(), cfg)
	if err == nil || !containsAll(err.Error(), "table list changed", "s.b") {
		t.Fatalf("err = %v, want the table list change named", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

func TestBoundRoundTrip(t *testing.T) {
	for _, k := range []sluice.Row{nil, row("1"), row("a\"b", "", `\`), row("\xff\x00\x80"), {sluice.Text("x"), sluice.Null}} {
		got, err := DecodeBound(EncodeBound(k))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, k) {
			t.Errorf("bound %v came back as %v", k, got)
		}
	}
}

// TestCopyErrorSides checks that a failure says which side it came from:
// the daemon's exit code depends on it.
func TestCopyErrorSides(t *testing.T) {
	tb := intTable("t")
	src := newMemDB()
	fill(src, tb, 50)
	readErr := errors.New("source connection lost")
	tgt := &memTarget{db: newMemDB()}
	_, err := Run(context.Background(), Config{Stream: "s1", Tables: names(tb), NewTarget: tgt.open,
		Source: &memSource{db: src, tables: []*sluice.Table{tb}, failRead: readErr}})
	var se *SourceError
	if !errors.As(err, &se) || !errors.Is(err, readErr) {
		t.Errorf("a reader's failure: %v (%T), want a SourceError wrapping it", err, err)
	}
	tgt = &memTarget{db: newMemDB(), failAfter: 1}
	_, err = Run(context.Background(), Config{Stream: "s1", Tables: names(tb), NewTarget: tgt.open,
		Source: &memSource{db: src, tables: []*sluice.Table{tb}}})
	var te *TargetError
	if !errors.As(err, &te) || errors.As(err, &se) {
		t.Errorf("a target's failure: %v (%T), want a TargetError and no SourceError", err, err)
	}
}

// TestProject: a target that generates columns takes COPY text of the
// others; the projected table's key names the same columns.
func TestProject(t *testing.T) {
	tbl := &sluice.Table{Name: sluice.TableName{Name: "g"}, Key: []int{2, 0},
		Columns: []sluice.Column{{Name: "a"}, {Name: "gen", Generated: "a + 1"}, {Name: "b"}, {Name: "c"}}}
	if Project(tbl, []int{0, 1, 2, 3}) != tbl {
		t.Error("all columns: want the table itself")
	}
	p := Project(tbl, []int{0, 2, 3})
	var names []string
	for _, c := range p.Columns {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "c"}) || !slices.Equal(p.KeyNames(), []string{"b", "a"}) || p.Name != tbl.Name {
		t.Errorf("projection %v key %v", names, p.KeyNames())
	}
}

// TestCopyWritten: the columns the target generates (Config.Written
// leaves them out) are neither read nor written.
func TestCopyWritten(t *testing.T) {
	g := intTable("g")
	g.Columns = append(g.Columns, sluice.Column{Name: "gen", Type: "text", Generated: "v || 'x'"})
	src, want := newMemDB(), newMemDB()
	for i := range 50 {
		src.put(g.Name, row(strconv.Itoa(i), "v", "wrong"))
		want.put(g.Name, row(strconv.Itoa(i), "v"))
	}
	tgt := &memTarget{db: newMemDB()}
	_, err := Run(context.Background(), Config{Stream: "s1", Tables: names(g), Source: &memSource{db: src, tables: []*sluice.Table{g}},
		NewTarget: tgt.open, Workers: 2, ChunkRows: 10,
		Preflight: func(context.Context, []*sluice.Table) error { return nil },
		Written: func(t *sluice.Table) []int {
			if t != g {
				panic("Written asked of another table than the snapshot's")
			}
			return []int{0, 1}
		}})
	if err != nil {
		t.Fatal(err)
	}
	equalDB(t, want, tgt.db, g)
}

// TestOrderFamily: key types whose text bounds order alike on both sides
// share a family; a resume copies a table whose key types differ in family
// whole instead of by range.
func TestOrderFamily(t *testing.T) {
	same := [][2]string{
		{"int(11)", "integer"}, {"bigint unsigned", "numeric(20,0)"}, {"int", "bigint"}, {"smallint", "int2"},
		{"decimal(10,2)", "numeric"}, {"double", "double precision"}, {"datetime(6)", "timestamp(6) with time zone"},
		{"timestamp without time zone", "timestamp(3)"}, {"varbinary(16)", "bytea"}, {"date", "date"}, {"uuid", "uuid"},
	}
	for _, p := range same {
		if orderFamily(p[0]) != orderFamily(p[1]) {
			t.Errorf("%s and %s: families %q and %q, want one", p[0], p[1], orderFamily(p[0]), orderFamily(p[1]))
		}
	}
	differ := [][2]string{{"int(11)", "text"}, {"int", "character varying(20)"}, {"bigint", "uuid"}, {"date", "timestamp"}, {"uuid", "char(36)"}, {"tinyint(1)", "boolean"}}
	for _, p := range differ {
		if orderFamily(p[0]) == orderFamily(p[1]) {
			t.Errorf("%s and %s: one family %q, want two", p[0], p[1], orderFamily(p[0]))
		}
	}
}
