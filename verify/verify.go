package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply/genexpr"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// Config says what to compare and how.
type Config struct {
	Source, Target Side
	// Tables are the source's tables. On the target a table has the same
	// name, without its schema unless both sides are PostgreSQL (as the
	// stream writes it).
	Tables []sluice.TableName
	// Stream, when set, makes the comparison live: the target holds that
	// stream's checkpoint row, and a difference counts only once the
	// target has applied past the source position at which it was seen
	// (see docs/verify.md, "How verify works while a stream runs").
	Stream string
	// Covers reports whether the target's checkpoint position p covers the
	// source position c. Needed with Stream.
	Covers func(p, c sluice.Position) (bool, error)

	// ChunkRows is the size of the first ranges (10,000); LeafRows the size
	// under which a differing range's rows are compared key by key (1,000);
	// Fanout how many parts a differing larger range is cut into (16).
	ChunkRows, LeafRows, Fanout int
	// Batch is the most ranges one query hashes (32); Workers how many
	// batches are in flight at once (2).
	Batch, Workers int
	// Rounds bounds how often a key that keeps changing is compared again
	// before it is reported unsettled (6).
	Rounds int
	// CatchUp bounds the wait for the target to apply past a source
	// position (2 min); Poll is the interval of that wait (100 ms).
	CatchUp, Poll time.Duration
	// MaxDiffs bounds the differences kept per table (1,000).
	MaxDiffs int
	// State, when set, records the run's progress as it goes and holds
	// what an interrupted run did (see LoadState): a resumed run skips it.
	State *State
	// Progress, when set, is called as ranges are done.
	Progress func(Progress)
	Logger   *slog.Logger
}

// Progress is how far a run got.
type Progress struct {
	Table               string
	TableIndex, Tables  int
	RowsDone, RowsTotal int64
	Elapsed             time.Duration
}

// Kind of a difference.
const (
	Missing   = "missing"   // on the source, not on the target
	Extra     = "extra"     // on the target, not on the source
	Different = "different" // on both, with other values
)

// Diff is one differing row.
type Diff struct {
	// Key is the row's key as (col=value, …), as the source spells it.
	Key  string     `json:"key"`
	Kind string     `json:"kind"`
	Raw  sluice.Row `json:"-"`
	// Columns are the source's names of the differing columns (Different
	// only).
	Columns []string `json:"columns,omitempty"`
	canon   string
}

// TableReport is the comparison of one table.
type TableReport struct {
	Source     string `json:"source"`
	Target     string `json:"target"`
	SourceRows int64  `json:"source_rows"`
	TargetRows int64  `json:"target_rows"`
	Ranges     int    `json:"ranges"`
	// Bisected counts the ranges hashed again to narrow differences down.
	Bisected int    `json:"bisected"`
	Diffs    []Diff `json:"diffs"`
	// Truncated: more differences than MaxDiffs were found.
	Truncated bool `json:"truncated,omitempty"`
	// Unsettled are keys that kept changing on the source
	// through every round: neither equal nor proven different.
	Unsettled []string `json:"unsettled,omitempty"`
	// NoKey: the table has no primary key and differs; its rows cannot be
	// named.
	NoKey bool `json:"no_key_differs,omitempty"`
	// Skipped are the columns not compared, each with why (generated
	// columns whose values may differ by design).
	Skipped []string      `json:"skipped_columns,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Equal reports whether the table was proven equal.
func (t *TableReport) Equal() bool {
	return len(t.Diffs) == 0 && len(t.Unsettled) == 0 && !t.NoKey && !t.Truncated
}

// Report is a whole run.
type Report struct {
	Tables  []*TableReport `json:"tables"`
	Live    bool           `json:"live"`
	Elapsed time.Duration  `json:"elapsed_ns"`
	// Repair is what --repair wrote and found after, when it ran.
	Repair *RepairReport `json:"repair,omitempty"`
}

// Differences counts the differing rows (and differing key-less tables).
func (r *Report) Differences() int {
	n := 0
	for _, t := range r.Tables {
		n += len(t.Diffs)
		if t.NoKey {
			n++
		}
	}
	return n
}

// Unsettled counts what could not be settled.
func (r *Report) Unsettled() int {
	n := 0
	for _, t := range r.Tables {
		n += len(t.Unsettled)
	}
	return n
}

func (c *Config) defaults() {
	set := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	set(&c.ChunkRows, 10_000)
	set(&c.LeafRows, 1_000)
	set(&c.Fanout, 16)
	set(&c.Batch, 32)
	set(&c.Workers, 2)
	set(&c.Rounds, 6)
	set(&c.MaxDiffs, 1_000)
	if c.CatchUp <= 0 {
		c.CatchUp = 2 * time.Minute
	}
	if c.Poll <= 0 {
		c.Poll = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Run compares every table of cfg. An error means the comparison could
// not be made; differences are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if cfg.Stream != "" && cfg.Covers == nil {
		return nil, errors.New("verify: a live comparison (a stream) needs Covers")
	}
	v := &run{cfg: cfg, start: time.Now(), rounds: make(chan struct{}, 2*cfg.Workers)}
	// Every worker's snapshots (S1 and T at once, S2, and the one closing
	// in the background) find a connection open.
	for _, s := range []Side{cfg.Source, cfg.Target} {
		go s.Warm(ctx, 2*cfg.Workers+1)
	}
	rep := &Report{Live: cfg.Stream != ""}
	if cfg.Stream != "" {
		if err := v.streamKind(ctx); err != nil {
			return nil, err
		}
	}
	for i, name := range cfg.Tables {
		tb, err := v.table(ctx, name)
		if err != nil {
			return nil, err
		}
		tr, err := v.compareTable(ctx, tb, i)
		if err != nil {
			return nil, err
		}
		rep.Tables = append(rep.Tables, tr)
	}
	rep.Elapsed = time.Since(v.start)
	return rep, nil
}

type run struct {
	cfg   Config
	start time.Time
	// rounds bounds the rounds in flight (each holds up to two
	// connections per side), so that the pools cannot run dry.
	rounds chan struct{}
	// kind and like: the stream's position kind and a position of it (its
	// checkpoint's), which tells a binlog's GTID flavour.
	kind, like string
}

// table is one table on both sides.
type table struct {
	src, tgt *spec
	// desc is the source's description, as a repair writes it (without
	// the generated columns the target lacks).
	desc *sluice.Table
	// skipped are the columns not compared, each with why.
	skipped []string
}

func (v *run) streamKind(ctx context.Context) error {
	s, err := v.cfg.Target.Begin(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	cp, ok, err := s.Checkpoint(ctx, v.cfg.Stream)
	if err != nil {
		return fmt.Errorf("%w (is this the stream's target, and did stream %s ever commit?)", err, v.cfg.Stream)
	}
	if !ok {
		return fmt.Errorf("stream %s has no checkpoint on the target %s: start the stream first, or verify a still pair without --stream", v.cfg.Stream, v.cfg.Target.Where())
	}
	v.kind, v.like = cp.Position.Kind, cp.Position.Token
	return nil
}

// TargetName is where a stream writes a source table: under its own name,
// in the schema it has on the source only from PostgreSQL to PostgreSQL.
func TargetName(n sluice.TableName, from, to Dialect) sluice.TableName {
	if from == PostgreSQL && to == PostgreSQL {
		return n
	}
	return sluice.TableName{Name: n.Name}
}

func (v *run) table(ctx context.Context, name sluice.TableName) (*table, error) {
	sd, td := v.cfg.Source.Dialect(), v.cfg.Target.Dialect()
	tname := TargetName(name, sd, td)
	var tgt *sluice.Table
	var terr error
	described := make(chan struct{})
	go func() {
		defer close(described)
		tgt, terr = v.cfg.Target.Describe(ctx, tname)
	}()
	full, err := v.cfg.Source.Describe(ctx, name)
	<-described
	if err = errors.Join(err, terr); err != nil {
		return nil, err
	}
	src, desc, skipped := compared(full, tgt, v.cfg.Target.Where())
	mk := func(d Dialect, n sluice.TableName, own *sluice.Table) (*spec, error) {
		s := &spec{dialect: d, table: quoteTable(d, n), name: n, cols: src.Columns, key: src.Key}
		for _, c := range src.Columns {
			i := own.ColumnIndex(c.Name)
			if i < 0 {
				return nil, fmt.Errorf("table %s: column %s of the source is not on the target %s: the target's table must have every source column (add it, or verify another table list)", name, c.Name, v.cfg.Target.Where())
			}
			id := quoteIdent(d, c.Name)
			ti := tgt.ColumnIndex(c.Name)
			if ti < 0 {
				return nil, fmt.Errorf("table %s: column %s of the source is not on the target %s: the target's table must have every source column (add it, or verify another table list)", name, c.Name, v.cfg.Target.Where())
			}
			e, err := CanonExpr(CanonColumn{Dialect: d, Ident: id, Type: own.Columns[i].Type, Source: c, SourceDialect: sd,
				TargetType: tgt.Columns[ti].Type, TargetDialect: td})
			if err != nil {
				return nil, fmt.Errorf("table %s column %s (%s on %s): %w", n, c.Name, own.Columns[i].Type, d, err)
			}
			s.canon = append(s.canon, e)
		}
		for _, k := range src.Key {
			s.keyIdents = append(s.keyIdents, quoteIdent(d, src.Columns[k].Name))
		}
		if len(src.Key) > 0 {
			s.intKey = isIntType(src.Columns[src.Key[0]].Type)
		}
		return s, nil
	}
	ss, err := mk(sd, name, src)
	if err != nil {
		return nil, err
	}
	ts, err := mk(td, tname, tgt)
	if err != nil {
		return nil, err
	}
	return &table{src: ss, tgt: ts, desc: desc, skipped: skipped}, nil
}

// compared returns the columns of src (the source's table) that verify
// compares with tgt's, the table a repair writes, and why each column
// left out is. A generated column is compared where both sides hold its
// values (a MariaDB VIRTUAL column reads like any other) and compute them
// alike; it is left out when both sides generate it by expressions that
// differ (see genexpr), or when the target lacks it (PostgreSQL's logical
// replication never sends it, so the stream needs no target column). A
// key column is always compared.
func compared(src, tgt *sluice.Table, where string) (cols, repair *sluice.Table, skipped []string) {
	var keep, write []int
	var omitted []sluice.Column
	for i, c := range src.Columns {
		ti := tgt.ColumnIndex(c.Name)
		switch {
		case c.Generated == "" || slices.Contains(src.Key, i):
		case ti < 0:
			skipped = append(skipped, fmt.Sprintf("%s: generated on the source (%s) and not on the target %s", c.Name, c.Generated, where))
			omitted = append(omitted, c)
			continue
		case tgt.Columns[ti].Generated != "" && !genexpr.Same(c.Generated, tgt.Columns[ti].Generated):
			skipped = append(skipped, fmt.Sprintf("%s: generated by different expressions, %s on the source and %s on the target (%s)",
				c.Name, c.Generated, tgt.Columns[ti].Generated, genexpr.How))
			write = append(write, i)
			continue
		}
		keep = append(keep, i)
		write = append(write, i)
	}
	repair = tablecopy.Project(src, write)
	if len(omitted) > 0 {
		repair.Omitted = omitted
	}
	return tablecopy.Project(src, keep), repair, skipped
}

func isIntType(t string) bool {
	t = strings.ToLower(t)
	for _, p := range []string{"smallint", "integer", "bigint", "tinyint", "mediumint", "int"} {
		if t == p || strings.HasPrefix(t, p+"(") || strings.HasPrefix(t, p+" ") {
			return true
		}
	}
	return false
}

// digest is a range's count and hash sum, as text.
type digest struct{ count, sum string }

func (d digest) rows() int64 {
	var n int64
	fmt.Sscan(d.count, &n)
	return n
}

// digests hashes rs inside snapshot s: one query, one round trip.
func digests(ctx context.Context, s Snapshot, sp *spec, rs []tablecopy.Range) ([]digest, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	rows, err := s.Query(ctx, sp.digestQuery(rs))
	if err != nil {
		return nil, fmt.Errorf("hash %d ranges of table %s: %w", len(rs), sp.name, err)
	}
	out := make([]digest, len(rs))
	seen := 0
	for _, r := range rows {
		var i int
		if _, err := fmt.Sscan(deref(r[0]), &i); err != nil || i < 0 || i >= len(rs) {
			return nil, fmt.Errorf("hash ranges of table %s: bad range index %q", sp.name, deref(r[0]))
		}
		out[i] = digest{deref(r[1]), deref(r[2])}
		seen++
	}
	if seen != len(rs) {
		return nil, fmt.Errorf("hash ranges of table %s: %d results for %d ranges", sp.name, seen, len(rs))
	}
	return out, nil
}

// sourceSnap begins a source snapshot and, live, reads its position.
func (v *run) sourceSnap(ctx context.Context) (Snapshot, sluice.Position, error) {
	s, err := v.cfg.Source.Begin(ctx)
	if err != nil {
		return nil, sluice.Position{}, err
	}
	if v.cfg.Stream == "" {
		return s, sluice.Position{}, nil
	}
	pos, err := s.Position(ctx, v.kind, v.like)
	if err != nil {
		s.Close()
		return nil, sluice.Position{}, err
	}
	return s, pos, nil
}

// targetSnap begins a target snapshot whose checkpoint covers pos
// (live), waiting for the stream to get there.
func (v *run) targetSnap(ctx context.Context, pos sluice.Position) (Snapshot, error) {
	deadline := time.Now().Add(v.cfg.CatchUp)
	for {
		s, err := v.cfg.Target.Begin(ctx)
		if err != nil || v.cfg.Stream == "" {
			return s, err
		}
		cp, ok, err := s.Checkpoint(ctx, v.cfg.Stream)
		if err != nil {
			s.Close()
			return nil, err
		}
		if ok {
			covered, err := v.cfg.Covers(cp.Position, pos)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("stream %s: compare the target's checkpoint with the source's position: %w", v.cfg.Stream, err)
			}
			if covered {
				return s, nil
			}
		}
		s.Close()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("stream %s: the target did not apply up to source position %s within %s (its checkpoint is at %s): is the stream running and keeping up? Run verify when it is, or raise --catch-up", v.cfg.Stream, pos, v.cfg.CatchUp, cp.Position)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(v.cfg.Poll):
		}
	}
}

// rangeDiff is a range that may differ, with each side's row count.
type rangeDiff struct {
	r        tablecopy.Range
	src, tgt int64
}

// compareRanges hashes rs on both sides in one round and returns the
// ranges that are not proven equal.
//
// A round: the source's hashes in snapshot S1 (at position P1); the
// target's in a snapshot T that covers P1; for the ranges that differ, the
// source's again in a new snapshot S2, taken after T. A range whose T hash
// equals its S1 or S2 hash is equal. Any other differs for real (S1 and S2
// agree: the source held those rows through the window in which T, past
// P1, was taken) or changed on the source during the round; both are
// narrowed down, which ends in rounds per key (compareKeys): a smaller
// range changes less often, and a key's verdict does not depend on its
// neighbours'.
func (v *run) compareRanges(ctx context.Context, tb *table, rs []tablecopy.Range, counted func(src, tgt int64)) ([]rangeDiff, error) {
	release, err := v.round(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	s1, pos, err := v.sourceSnap(ctx)
	if err != nil {
		return nil, err
	}
	// S1 holds its snapshot from its first query on (the position, live),
	// so the two servers hash at once: T need only be taken after P1.
	var d1 []digest
	var err1 error
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		d1, err1 = digests(ctx, s1, tb.src, rs)
		s1.Close()
	}()
	t, err := v.targetSnap(ctx, pos)
	if err != nil {
		<-hashed
		return nil, err
	}
	dt, err := digests(ctx, t, tb.tgt, rs)
	t.Close()
	<-hashed
	if err = errors.Join(err1, err); err != nil {
		return nil, err
	}
	if counted != nil {
		var ns, nt int64
		for i := range rs {
			ns += d1[i].rows()
			nt += dt[i].rows()
		}
		counted(ns, nt)
	}
	var diff []int
	var again []tablecopy.Range
	for i := range rs {
		if d1[i] != dt[i] {
			diff = append(diff, i)
			again = append(again, rs[i])
		}
	}
	if len(diff) == 0 {
		return nil, nil
	}
	s2, err := v.cfg.Source.Begin(ctx)
	if err != nil {
		return nil, err
	}
	d2, err := digests(ctx, s2, tb.src, again)
	s2.Close()
	if err != nil {
		return nil, err
	}
	var out []rangeDiff
	for j, i := range diff {
		if dt[i] != d2[j] {
			out = append(out, rangeDiff{r: rs[i], src: max(d1[i].rows(), d2[j].rows()), tgt: dt[i].rows()})
		}
	}
	return out, nil
}

// round waits for a place among the rounds in flight.
func (v *run) round(ctx context.Context) (release func(), err error) {
	select {
	case v.rounds <- struct{}{}:
		return func() { <-v.rounds }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// split cuts the whole table into ranges of about ChunkRows rows, and
// counts its rows (on the source).
func (v *run) split(ctx context.Context, tb *table) ([]tablecopy.Range, int64, error) {
	if len(tb.src.key) == 0 {
		return []tablecopy.Range{{}}, 0, nil
	}
	s, err := v.cfg.Source.Begin(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	rows, err := s.Query(ctx, tb.src.extentQuery())
	if err != nil || len(rows) != 1 {
		return nil, 0, fmt.Errorf("count the rows of table %s on %s: %v", tb.src.name, v.cfg.Source.Where(), err)
	}
	var n int64
	fmt.Sscan(deref(rows[0][2]), &n)
	if n <= int64(v.cfg.ChunkRows) {
		return []tablecopy.Range{{}}, n, nil
	}
	var bounds []sluice.Row
	if tb.src.intKey {
		bounds = intBounds(deref(rows[0][0]), deref(rows[0][1]), (n+int64(v.cfg.ChunkRows)-1)/int64(v.cfg.ChunkRows))
	} else {
		bounds, err = keyBounds(ctx, s, tb.src, tablecopy.Range{}, int64(v.cfg.ChunkRows))
		if err != nil {
			return nil, 0, err
		}
	}
	return rangesOf(tablecopy.Range{}, bounds), n, nil
}

// intBounds cuts [lo, hi] into n ranges of equal width (exact for any
// integer span).
func intBounds(lo, hi string, n int64) []sluice.Row {
	min, ok1 := new(big.Int).SetString(lo, 10)
	max, ok2 := new(big.Int).SetString(hi, 10)
	if !ok1 || !ok2 || n < 2 {
		return nil
	}
	span := new(big.Int).Sub(max, min)
	span.Add(span, big.NewInt(1))
	if span.Cmp(big.NewInt(n)) < 0 {
		n = span.Int64()
	}
	width := new(big.Int).Add(span, big.NewInt(n-1))
	width.Quo(width, big.NewInt(n))
	var out []sluice.Row
	b := new(big.Int).Set(min)
	for i := int64(1); i < n; i++ {
		b.Add(b, width)
		if b.Cmp(max) > 0 {
			break
		}
		out = append(out, sluice.Row{sluice.Text(b.String())})
	}
	return out
}

// rangesOf cuts r at bounds (in key order, inside r).
func rangesOf(r tablecopy.Range, bounds []sluice.Row) []tablecopy.Range {
	out := make([]tablecopy.Range, 0, len(bounds)+1)
	from := r.From
	for _, b := range bounds {
		out = append(out, tablecopy.Range{From: from, To: b})
		from = b
	}
	return append(out, tablecopy.Range{From: from, To: r.To})
}

func keyBounds(ctx context.Context, s Snapshot, sp *spec, r tablecopy.Range, every int64) ([]sluice.Row, error) {
	rows, err := s.Query(ctx, sp.boundsQuery(r, max(every, 1)))
	if err != nil {
		return nil, fmt.Errorf("split table %s range %s by its key: %w", sp.name, r, err)
	}
	out := make([]sluice.Row, len(rows))
	for i, row := range rows {
		k := make(sluice.Row, len(row))
		for j, v := range row {
			if v == nil {
				return nil, fmt.Errorf("split table %s: NULL in primary key", sp.name)
			}
			k[j] = sluice.Text(*v)
		}
		out[i] = k
	}
	return out, nil
}

// compareTable compares one table: its first ranges in batches, Workers
// at a time, then each differing range narrowed down.
func (v *run) compareTable(ctx context.Context, tb *table, index int) (*TableReport, error) {
	start := time.Now()
	tr := &TableReport{Source: tb.src.name.String(), Target: tb.tgt.name.String(), Skipped: tb.skipped}
	st := v.cfg.State
	ts, ranges, total, real, err := v.resumeTable(ctx, tb, tr)
	if err != nil {
		return nil, err
	}
	if ts.Finished != nil {
		return ts.Finished, nil
	}
	tr.Ranges = len(ranges)
	var mu sync.Mutex
	progress := func() {
		if v.cfg.Progress != nil {
			mu.Lock()
			d := tr.SourceRows
			mu.Unlock()
			v.cfg.Progress(Progress{Table: tr.Source, TableIndex: index, Tables: len(v.cfg.Tables), RowsDone: d, RowsTotal: max(total, d), Elapsed: time.Since(v.start)})
		}
	}
	progress()
	type batch struct {
		at []int
		rs []tablecopy.Range
	}
	var firstErr error
	batches := make(chan batch)
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	for range v.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				var ns, nt int64
				rd, err := v.compareRanges(wctx, tb, b.rs, func(s, t int64) { ns, nt = s, t })
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				tr.SourceRows += ns
				tr.TargetRows += nt
				real = append(real, rd...)
				mu.Unlock()
				// The batch's ranges are done, with the counts and the
				// suspects they gave, in one save.
				if err := st.update(func() {
					for _, i := range b.at {
						ts.Done[i] = true
					}
					ts.SourceRows += ns
					ts.TargetRows += nt
					for _, d := range rd {
						sr := encodeRange(d.r)
						sr.Src, sr.Tgt = d.src, d.tgt
						ts.Suspects = append(ts.Suspects, sr)
					}
				}); err != nil {
					fail(err)
				}
				progress()
			}
		}()
	}
	// Batches small enough that every worker gets two, so that the
	// servers' work overlaps the round trips.
	var todo []int
	for i := range ranges {
		if !ts.Done[i] {
			todo = append(todo, i)
		}
	}
	size := min(v.cfg.Batch, max(1, (len(todo)+2*v.cfg.Workers-1)/(2*v.cfg.Workers)))
	for i := 0; i < len(todo); i += size {
		b := batch{at: todo[i:min(i+size, len(todo))]}
		for _, j := range b.at {
			b.rs = append(b.rs, ranges[j])
		}
		select {
		case batches <- b:
		case <-wctx.Done():
		}
	}
	close(batches)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	// Narrowed down in key order, so that diffs come out in key order.
	sortRanges(real, ranges)
	if err := v.narrowAll(ctx, tb, tr, real); err != nil {
		return nil, err
	}
	tr.Elapsed = time.Since(start)
	if err := st.update(func() { ts.Finished = tr }); err != nil {
		return nil, err
	}
	return tr, nil
}

// resumeTable returns the table's state: the first ranges, the total row
// count, and the suspects found so far, from the run's state when it
// holds the table, else from a new split (recorded in the state). A
// state with Finished set is a table done.
func (v *run) resumeTable(ctx context.Context, tb *table, tr *TableReport) (*TableState, []tablecopy.Range, int64, []rangeDiff, error) {
	st := v.cfg.State
	var ts *TableState
	if st != nil {
		st.mu.Lock()
		ts = st.Tables[tr.Source]
		st.mu.Unlock()
	}
	if ts != nil && ts.Finished != nil {
		return ts, nil, 0, nil, nil
	}
	if ts != nil && len(ts.Done) == len(ts.Ranges) {
		ranges := make([]tablecopy.Range, len(ts.Ranges))
		var real []rangeDiff
		for i, sr := range ts.Ranges {
			r, err := sr.decode()
			if err != nil {
				return nil, nil, 0, nil, fmt.Errorf("verify state: table %s: %w", tr.Source, err)
			}
			ranges[i] = r
		}
		for _, sr := range ts.Suspects {
			r, err := sr.decode()
			if err != nil {
				return nil, nil, 0, nil, fmt.Errorf("verify state: table %s: %w", tr.Source, err)
			}
			real = append(real, rangeDiff{r: r, src: sr.Src, tgt: sr.Tgt})
		}
		tr.SourceRows, tr.TargetRows = ts.SourceRows, ts.TargetRows
		return ts, ranges, ts.Rows, real, nil
	}
	ranges, total, err := v.split(ctx, tb)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	ts = &TableState{Done: make([]bool, len(ranges)), Rows: total}
	for _, r := range ranges {
		ts.Ranges = append(ts.Ranges, encodeRange(r))
	}
	if err := st.update(func() { st.Tables[tr.Source] = ts }); err != nil {
		return nil, nil, 0, nil, err
	}
	return ts, ranges, total, nil, nil
}

// sortRanges orders rds as their ranges come in order (the first ranges
// are in key order; a batch's results may arrive in any order).
func sortRanges(rds []rangeDiff, order []tablecopy.Range) {
	at := map[string]int{}
	for i, r := range order {
		at[r.String()] = i
	}
	for i := 1; i < len(rds); i++ {
		for j := i; j > 0 && at[rds[j].r.String()] < at[rds[j-1].r.String()]; j-- {
			rds[j], rds[j-1] = rds[j-1], rds[j]
		}
	}
}

// narrowAll narrows rds down at once, each into a report of its own, and
// adds those to tr in rds' order: rounds of different ranges overlap, so
// their waits for the stream and their round trips do too.
func (v *run) narrowAll(ctx context.Context, tb *table, tr *TableReport, rds []rangeDiff) error {
	parts := make([]TableReport, len(rds))
	errs := make([]error, len(rds))
	var wg sync.WaitGroup
	for i, rd := range rds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = v.narrow(ctx, tb, &parts[i], rd)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, p := range parts {
		tr.Bisected += p.Bisected
		tr.NoKey = tr.NoKey || p.NoKey
		tr.Unsettled = append(tr.Unsettled, p.Unsettled...)
		tr.Truncated = tr.Truncated || p.Truncated
		for _, d := range p.Diffs {
			if len(tr.Diffs) >= v.cfg.MaxDiffs {
				tr.Truncated = true
				break
			}
			tr.Diffs = append(tr.Diffs, d)
		}
	}
	return nil
}

// narrow bisects a differing range down to LeafRows, then compares its
// rows key by key.
func (v *run) narrow(ctx context.Context, tb *table, tr *TableReport, rd rangeDiff) error {
	if len(tb.src.key) == 0 {
		// No key to narrow down by: hash the whole table again until it
		// matches, or call it different.
		for range v.cfg.Rounds - 1 {
			again, err := v.compareRanges(ctx, tb, []tablecopy.Range{rd.r}, nil)
			if err != nil || len(again) == 0 {
				return err
			}
		}
		tr.NoKey = true
		return nil
	}
	n := max(rd.src, rd.tgt)
	if n > int64(v.cfg.LeafRows) {
		// Cut where the side with more rows has its every n/Fanout-th key.
		side, sp := v.cfg.Source, tb.src
		if rd.tgt > rd.src {
			side, sp = v.cfg.Target, tb.tgt
		}
		s, err := side.Begin(ctx)
		if err != nil {
			return err
		}
		bounds, err := keyBounds(ctx, s, sp, rd.r, (n+int64(v.cfg.Fanout)-1)/int64(v.cfg.Fanout))
		s.Close()
		if err != nil {
			return err
		}
		if len(bounds) > 0 {
			subs := rangesOf(rd.r, bounds)
			tr.Bisected += len(subs)
			real, err := v.compareRanges(ctx, tb, subs, nil)
			if err != nil {
				return err
			}
			return v.narrowAll(ctx, tb, tr, real)
		}
	}
	return v.compareKeys(ctx, tb, tr, rd.r)
}
