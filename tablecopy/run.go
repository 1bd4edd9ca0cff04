package tablecopy

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice"
)

// Config configures one copy.
type Config struct {
	Stream string
	// Tables are the stream's tables as the user named them, checked empty
	// on the target before the snapshot is taken.
	Tables []sluice.TableName
	Source Source
	// Target, when set, is the connection that reads and writes the plan
	// (Run does not close it); otherwise NewTarget opens one.
	Target Target
	// NewTarget opens a target connection: one per worker (opened while
	// the snapshot is taken), and the plan's when Target is nil. The
	// tables are checked once, by Preflight.
	NewTarget func(ctx context.Context) (Target, error)
	// Preflight, when set, checks the target's tables against the source's
	// once the snapshot described them, before anything is written.
	Preflight func(ctx context.Context, tables []*sluice.Table) error
	// Written, when set, tells after Preflight which columns of a table
	// the target writes (the indexes in its Columns; nil: all): the
	// columns it generates are neither read, written nor digested.
	Written func(t *sluice.Table) []int
	// Workers copy chunks concurrently (default 4).
	Workers int
	// ChunkRows is the rows per chunk a table is split into (default
	// 50,000).
	ChunkRows int
	// Digests tells whether the source's and the target's digests compare
	// (one engine): a resume then keeps done chunks whose digests match
	// instead of copying them again.
	Digests bool
	// Progress, when set, is called about every ProgressEvery (default 1 s)
	// and once at the end.
	Progress      func(Progress)
	ProgressEvery time.Duration
	Logger        *slog.Logger
}

// Progress is the copy's state, per table and in total.
type Progress struct {
	Epoch   int
	Tables  []TableProgress
	Rows    int64
	Bytes   int64
	Total   int64 // estimated rows of every table
	Elapsed time.Duration
	// Rate is rows per second since this run of the copy began.
	Rate float64
	// ETA is the estimated time left; zero when unknown.
	ETA  time.Duration
	Done bool
}

// TableProgress is one table's part of the copy.
type TableProgress struct {
	Table      sluice.TableName
	Rows       int64 // rows on the target
	Bytes      int64
	Total      int64 // estimated rows on the source
	Chunks     int
	ChunksDone int
}

// Percent is the share of the estimated rows copied, at most 100.
func (t TableProgress) Percent() float64 {
	if t.ChunksDone == t.Chunks {
		return 100
	}
	if t.Total <= 0 {
		return 0
	}
	return min(100, 100*float64(t.Rows)/float64(t.Total))
}

// Result is a finished copy.
type Result struct {
	// Position is where the stream starts: the snapshot's position.
	Position sluice.Position
	Epoch    int
	Rows     int64
	Bytes    int64
	Chunks   int
	// Copied counts the chunks this run wrote; Kept the done chunks a
	// resume kept after their digests matched; Recopied the done chunks it
	// wrote again (digests differed, could not be compared, or their table
	// could not be checked by range).
	Copied, Kept, Recopied int
	Elapsed                time.Duration
}

// ErrTargetNotEmpty is returned (wrapped, naming the tables) when a new copy
// finds rows in a target table.
var ErrTargetNotEmpty = errors.New("target table not empty")

// job is one unit of a worker's work.
type job struct {
	table *sluice.Table
	st    *ChunkState
	// check: compare digests first and keep the chunk when they match.
	check   bool
	replace bool
}

// Run copies the tables, or finishes a copy an earlier run began, and
// returns the position the stream starts from.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.ChunkRows <= 0 {
		cfg.ChunkRows = 50_000
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("stream", cfg.Stream)
	began := time.Now()

	ptgt := cfg.Target
	if ptgt == nil {
		t, err := cfg.NewTarget(ctx)
		if err != nil {
			return Result{}, targetErr("open the target for the copy", err)
		}
		defer t.Close(context.WithoutCancel(ctx))
		ptgt = t
	}
	plan, err := ptgt.ReadPlan(ctx, cfg.Stream)
	if err != nil {
		return Result{}, targetErr("read the copy plan from the target", err)
	}
	if plan == nil {
		if err := checkEmpty(ctx, cfg, ptgt); err != nil {
			return Result{}, err
		}
	}
	// The workers' connections are opened while the snapshot is taken and
	// the tables split: each costs round trips to a far target.
	workers := openWorkers(ctx, cfg)
	defer workers.close(ctx)
	snap, err := cfg.Source.Snapshot(ctx, cfg.Workers)
	if err != nil {
		return Result{}, sourceErr("take the initial copy's snapshot of the source", err)
	}
	defer snap.Close()
	if len(snap.Readers) == 0 {
		return Result{}, fmt.Errorf("the source gave the copy no snapshot reader")
	}
	if cfg.Preflight != nil {
		if err := cfg.Preflight(ctx, snap.Tables); err != nil {
			return Result{}, targetErr("check the target's tables", err)
		}
	}
	// The tables as the copy reads and writes them, every step the same
	// description (a reader may keep what it learns of one).
	tables := snap.Tables
	if cfg.Written != nil {
		tables = make([]*sluice.Table, len(snap.Tables))
		for i, t := range snap.Tables {
			tables[i] = Project(t, cfg.Written(t))
		}
	}
	byName := make(map[sluice.TableName]*sluice.Table, len(tables))
	for _, t := range tables {
		byName[t.Name] = t
	}

	res := Result{Position: snap.Position}
	var jobs []job
	totals := map[sluice.TableName]int64{}
	if plan == nil {
		plan = &Plan{Stream: cfg.Stream, Epoch: 1, Position: snap.Position, Started: began}
		for _, t := range tables {
			ranges, est, err := snap.Readers[0].Split(ctx, t, cfg.ChunkRows)
			if err != nil {
				return Result{}, sourceErr("split table "+t.Name.String()+" into chunks", err)
			}
			if len(t.Key) == 0 {
				log.Warn("table has no primary key: it is copied whole, in one transaction, by one worker", "table", t.Name.String(), "rows_estimate", est)
			}
			totals[t.Name] = est
			for i, r := range ranges {
				plan.Chunks = append(plan.Chunks, ChunkState{Chunk: Chunk{Table: t.Name, N: i, Range: r}})
			}
			log.Info("copy plan", "table", t.Name.String(), "rows_estimate", est, "chunks", len(ranges))
		}
		if err := ptgt.WritePlan(ctx, plan); err != nil {
			return Result{}, targetErr("record the copy plan on the target", err)
		}
		for i := range plan.Chunks {
			jobs = append(jobs, job{table: byName[plan.Chunks[i].Table], st: &plan.Chunks[i]})
		}
	} else {
		if err := samePlanTables(plan, tables); err != nil {
			return Result{}, err
		}
		plan.Epoch++
		plan.Position = snap.Position
		if err := ptgt.WritePlan(ctx, plan); err != nil {
			return Result{}, targetErr(fmt.Sprintf("record the copy's epoch %d on the target", plan.Epoch), err)
		}
		if jobs, err = resumeJobs(ctx, cfg, log, ptgt, plan, byName); err != nil {
			return Result{}, err
		}
		for _, c := range plan.Chunks {
			// Without the split's estimate, a pending chunk counts as full.
			if c.Done {
				totals[c.Table] += c.Rows
			} else {
				totals[c.Table] += int64(cfg.ChunkRows)
			}
		}
	}
	res.Epoch = plan.Epoch
	res.Chunks = len(plan.Chunks)
	log.Info("initial copy", "epoch", plan.Epoch, "position", snap.Position.String(), "tables", len(tables),
		"chunks", len(plan.Chunks), "to_copy", len(jobs), "workers", min(cfg.Workers, len(snap.Readers)))

	// Larger tables first, so that the last chunks to finish are small
	// ones; each table's chunks stay in key order.
	slices.SortStableFunc(jobs, func(a, b job) int {
		if a.check != b.check {
			if a.check {
				return -1
			}
			return 1
		}
		return cmp.Compare(totals[b.table.Name], totals[a.table.Name])
	})

	pr := newProgress(plan, totals, began)
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if cfg.Progress == nil {
			return
		}
		tick := time.NewTicker(cfg.ProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
				cfg.Progress(pr.snapshot(false))
			}
		}
	}()
	err = runJobs(ctx, cfg, snap, workers, jobs, plan.Epoch, pr, &res)
	close(stopProgress)
	<-progressDone
	if err != nil {
		return Result{}, err
	}
	final := pr.snapshot(true)
	if cfg.Progress != nil {
		cfg.Progress(final)
	}
	res.Rows, res.Bytes, res.Elapsed = final.Rows, final.Bytes, time.Since(began)
	log.Info("initial copy done", "epoch", plan.Epoch, "rows", res.Rows, "bytes", res.Bytes, "chunks", res.Chunks,
		"copied", res.Copied, "kept", res.Kept, "recopied", res.Recopied, "elapsed", res.Elapsed.Round(time.Millisecond).String(),
		"rows_per_s", int64(float64(final.Rows)/max(res.Elapsed.Seconds(), 1e-3)), "position", res.Position.String())
	return res, nil
}

// checkEmpty refuses a new copy into tables that hold rows: the copy would
// add the source's rows to them, and whatever else they hold would stay.
func checkEmpty(ctx context.Context, cfg Config, t Target) error {
	counts, err := t.RowCounts(ctx, cfg.Tables)
	if err != nil {
		return targetErr("check that the target tables are empty", err)
	}
	var full []string
	for i, name := range cfg.Tables {
		if n := counts[i]; n > 0 {
			full = append(full, fmt.Sprintf("%s (about %d rows)", name, n))
		}
	}
	if len(full) > 0 {
		return fmt.Errorf("%w: %s: the initial copy writes the source's rows into empty tables only, and the stream has no checkpoint that says which changes these rows hold; "+
			"empty them (TRUNCATE) to let sluice copy, or, if you loaded them yourself from a consistent dump, start with --initial-copy=off --from-now",
			ErrTargetNotEmpty, strings.Join(full, ", "))
	}
	return nil
}

func samePlanTables(p *Plan, tables []*sluice.Table) error {
	inPlan := map[sluice.TableName]bool{}
	for _, c := range p.Chunks {
		inPlan[c.Table] = true
	}
	var added, gone []string
	now := map[sluice.TableName]bool{}
	for _, t := range tables {
		now[t.Name] = true
		if !inPlan[t.Name] {
			added = append(added, t.Name.String())
		}
	}
	for n := range inPlan {
		if !now[n] {
			gone = append(gone, n.String())
		}
	}
	if len(added)+len(gone) == 0 {
		return nil
	}
	slices.Sort(added)
	slices.Sort(gone)
	return fmt.Errorf("the table list changed while the initial copy was unfinished (added: %s; removed: %s): "+
		"go back to the list the copy began with to finish it, or empty the target tables and drop the stream's copy plan to copy anew",
		strings.Join(added, ", "), strings.Join(gone, ", "))
}

// resumeJobs decides what a resumed copy does with each chunk. Chunks not
// done are copied. A done chunk was read in an older snapshot: changes
// committed since may have touched its range, so it is compared by digest
// with the new snapshot and copied again (range first deleted) when it
// differs. That needs ranges to select the same rows on both servers,
// which string keys do not promise (collations order them differently):
// a table with a string key column and done chunks is emptied and copied
// whole instead.
func resumeJobs(ctx context.Context, cfg Config, log *slog.Logger, tgt Target, p *Plan, byName map[sluice.TableName]*sluice.Table) ([]job, error) {
	var jobs []job
	reset := map[sluice.TableName]string{} // table → why its ranges are not safe
	for _, c := range p.Chunks {
		if _, seen := reset[c.Table]; seen || !c.Done {
			continue
		}
		why, err := rangeUnsafe(ctx, tgt, byName[c.Table])
		if err != nil {
			return nil, targetErr("read the key columns of target table "+c.Table.String(), err)
		}
		reset[c.Table] = why
	}
	for name, why := range reset {
		if why == "" {
			delete(reset, name)
			continue
		}
		log.Warn("resuming the copy: "+why+", so its done chunks cannot be checked or copied again by range; emptying it and copying it again",
			"table", name.String())
		if err := tgt.ResetTable(ctx, cfg.Stream, byName[name]); err != nil {
			return nil, targetErr("empty table "+name.String()+" to copy it again", err)
		}
	}
	for i := range p.Chunks {
		c := &p.Chunks[i]
		t := byName[c.Table]
		switch {
		case reset[c.Table] != "":
			c.Done = false
			jobs = append(jobs, job{table: t, st: c})
		case !c.Done:
			jobs = append(jobs, job{table: t, st: c})
		default:
			jobs = append(jobs, job{table: t, st: c, check: cfg.Digests, replace: true})
		}
	}
	return jobs, nil
}

// ColumnTyper is a Target that tells how it has a table's columns: each
// column's type as the target spells it (nil when the table is missing).
// A resume asks it whether a range of the source's keys selects the same
// rows on the target; a Target without it is taken to have the source's
// types.
type ColumnTyper interface {
	ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error)
}

// rangeUnsafe says why a key range of t may select other rows on the
// target than on the source, or "" when it selects the same: a key column
// that is a string (whose order is the collation's, which may differ), or
// whose type on the target orders values otherwise than the source's (an
// integer kept in a text column: '2' is past '11').
func rangeUnsafe(ctx context.Context, tgt Target, t *sluice.Table) (string, error) {
	for _, k := range t.Key {
		if stringType(t.Columns[k].Type) {
			return "table has a string key, whose ranges may select other rows on the target", nil
		}
	}
	ct, ok := tgt.(ColumnTyper)
	if !ok {
		return "", nil
	}
	types, err := ct.ColumnTypes(ctx, t.Name)
	if err != nil {
		return "", err
	}
	for _, k := range t.Key {
		c := t.Columns[k]
		dst, found := types[c.Name]
		if !found || orderFamily(dst) != orderFamily(c.Type) {
			return fmt.Sprintf("key column %s is %s on the source but %q on the target, which may order its values otherwise", c.Name, c.Type, dst), nil
		}
	}
	return "", nil
}

// orderFamily names how a column type orders its values, in either
// engine's spelling: types of one family order the text of a key bound
// alike (any integer, decimal or float type by number; the temporal types
// by time; binary types by bytes); other types only with themselves.
func orderFamily(typ string) string {
	base := strings.ToLower(strings.TrimSpace(typ))
	if i := strings.IndexByte(base, '('); i >= 0 {
		base = strings.TrimSpace(base[:i]) + base[strings.LastIndexByte(base, ')')+1:]
	}
	for _, suffix := range []string{" unsigned", " zerofill", " with time zone", " without time zone"} {
		base = strings.ReplaceAll(base, suffix, "")
	}
	switch base = strings.TrimSpace(base); base {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "int2", "int4", "int8",
		"smallserial", "serial", "bigserial", "numeric", "decimal", "dec", "fixed",
		"float", "double", "real", "double precision", "float4", "float8":
		return "number"
	case "timestamp", "timestamptz", "datetime":
		return "timestamp"
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bytea":
		return "bytes"
	}
	return base
}

func stringType(typ string) bool {
	typ = strings.ToLower(typ)
	for _, s := range []string{"char", "text", "enum", "set(", "json", "name", "citext"} {
		if strings.Contains(typ, s) {
			return true
		}
	}
	return typ == "set"
}

func runJobs(ctx context.Context, cfg Config, snap *Snapshot, wk *workerTargets, jobs []job, epoch int, pr *progress, res *Result) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	queue := make(chan job)
	var mu sync.Mutex
	tgts, err := wk.wait()
	if err != nil {
		return err
	}
	workers := min(len(tgts), len(snap.Readers), max(len(jobs), 1))
	var wg sync.WaitGroup
	for w := range workers {
		rd, tgt := snap.Readers[w], tgts[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				kept, err := runJob(ctx, cfg, rd, tgt, j, epoch, pr)
				if err != nil {
					cancel(err)
					return
				}
				mu.Lock()
				switch {
				case kept:
					res.Kept++
				case j.replace:
					res.Recopied++
				default:
					res.Copied++
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case queue <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// runJob copies one chunk, or keeps it when its digests match.
func runJob(ctx context.Context, cfg Config, rd Reader, tgt Target, j job, epoch int, pr *progress) (kept bool, err error) {
	c := j.st.Chunk
	if j.check {
		src, err := rd.Digest(ctx, j.table, c.Range)
		if err != nil && !errors.Is(err, ErrNoDigest) {
			return false, sourceErr("digest of "+c.String()+" on the source", err)
		}
		if err == nil {
			dst, err := tgt.Digest(ctx, j.table, c.Range)
			if err != nil && !errors.Is(err, ErrNoDigest) {
				return false, targetErr("digest of "+c.String()+" on the target", err)
			}
			if err == nil && src == dst {
				pr.done(c.Table, j.st.Rows, j.st.Bytes, false)
				return true, nil
			}
		}
	}
	if cr, ok := rd.(CopyReader); ok {
		if ct, ok := tgt.(CopyTarget); ok {
			return false, copyRaw(ctx, cfg, cr, ct, j, epoch, pr)
		}
	}
	var rows, bytes int64
	st, err := tgt.WriteChunk(ctx, cfg.Stream, epoch, j.table, c, j.replace, func(emit func([]sluice.Row) error) error {
		err := rd.Read(ctx, j.table, c.Range, func(batch []sluice.Row) error {
			var b int64
			for _, r := range batch {
				for _, v := range r {
					b += int64(len(v.Text))
				}
			}
			rows += int64(len(batch))
			bytes += b
			pr.flowing(c.Table, int64(len(batch)), b)
			if err := emit(batch); err != nil {
				return &emitError{err}
			}
			return nil
		})
		var ee *emitError
		if err != nil && !errors.As(err, &ee) {
			// The target's own errors pass as they are; the reader's are
			// the source's.
			return sourceErr("read "+c.String()+" from the source", err)
		}
		return err
	})
	if err != nil {
		pr.flowing(c.Table, -rows, -bytes)
		return false, targetErr("copy "+c.String(), err)
	}
	pr.flowing(c.Table, -rows, -bytes)
	pr.done(c.Table, st.Rows, st.Bytes, true)
	return false, nil
}

// progress counts the copy's rows: those of done chunks and those of
// chunks in flight (which a failure takes back).
type progress struct {
	mu     sync.Mutex
	began  time.Time
	epoch  int
	order  []sluice.TableName
	tables map[sluice.TableName]*TableProgress
	// base is the rows already on the target when this run began, so that
	// the rate is this run's.
	base int64
}

func newProgress(p *Plan, totals map[sluice.TableName]int64, began time.Time) *progress {
	pr := &progress{began: began, epoch: p.Epoch, tables: map[sluice.TableName]*TableProgress{}}
	for _, c := range p.Chunks {
		tp, ok := pr.tables[c.Table]
		if !ok {
			tp = &TableProgress{Table: c.Table, Total: totals[c.Table]}
			pr.tables[c.Table] = tp
			pr.order = append(pr.order, c.Table)
		}
		tp.Chunks++
	}
	return pr
}

func (pr *progress) flowing(t sluice.TableName, rows, bytes int64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	tp := pr.tables[t]
	tp.Rows += rows
	tp.Bytes += bytes
}

// done counts a finished chunk; fresh says whether this run wrote it (a
// kept chunk was counted before this run).
func (pr *progress) done(t sluice.TableName, rows, bytes int64, fresh bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	tp := pr.tables[t]
	tp.Rows += rows
	tp.Bytes += bytes
	tp.ChunksDone++
	if !fresh {
		pr.base += rows
	}
}

func (pr *progress) snapshot(done bool) Progress {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := Progress{Epoch: pr.epoch, Elapsed: time.Since(pr.began), Done: done}
	for _, n := range pr.order {
		tp := *pr.tables[n]
		if tp.Total < tp.Rows {
			tp.Total = tp.Rows
		}
		p.Tables = append(p.Tables, tp)
		p.Rows += tp.Rows
		p.Bytes += tp.Bytes
		p.Total += tp.Total
	}
	if s := p.Elapsed.Seconds(); s > 0 {
		p.Rate = float64(p.Rows-pr.base) / s
	}
	if p.Rate > 0 && p.Total > p.Rows && !done {
		p.ETA = time.Duration(float64(p.Total-p.Rows) / p.Rate * float64(time.Second))
	}
	return p
}

// SourceError and TargetError tell which side of the copy failed, so that
// the daemon can exit with the right code (see daemon.ExitSource).
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// TargetError is an error of the target's side of the copy.
type TargetError struct{ Err error }

func (e *TargetError) Error() string { return e.Err.Error() }
func (e *TargetError) Unwrap() error { return e.Err }

func sourceErr(what string, err error) error {
	var se *SourceError
	if errors.As(err, &se) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return &SourceError{fmt.Errorf("%s: %w", what, err)}
}

func targetErr(what string, err error) error {
	var se *SourceError
	var te *TargetError
	if errors.As(err, &se) || errors.As(err, &te) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return &TargetError{fmt.Errorf("%s: %w", what, err)}
}

// emitError is the target's error, returned through the reader's emit.
type emitError struct{ err error }

func (e *emitError) Error() string { return e.err.Error() }
func (e *emitError) Unwrap() error { return e.err }

// workerTargets are the workers' target connections, being opened.
type workerTargets struct {
	done chan struct{}
	tgts []Target
	err  error
}

func openWorkers(ctx context.Context, cfg Config) *workerTargets {
	w := &workerTargets{done: make(chan struct{}), tgts: make([]Target, cfg.Workers)}
	go func() {
		defer close(w.done)
		errs := make([]error, cfg.Workers)
		var wg sync.WaitGroup
		for i := range cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t, err := cfg.NewTarget(ctx)
				if err != nil {
					errs[i] = targetErr(fmt.Sprintf("open copy worker %d's target connection", i), err)
					return
				}
				w.tgts[i] = t
			}()
		}
		wg.Wait()
		w.err = errors.Join(errs...)
	}()
	return w
}

func (w *workerTargets) wait() ([]Target, error) {
	<-w.done
	return w.tgts, w.err
}

func (w *workerTargets) close(ctx context.Context) {
	<-w.done
	for _, t := range w.tgts {
		if t != nil {
			t.Close(context.WithoutCancel(ctx))
		}
	}
}

// copyRaw copies a chunk as COPY text from a CopyReader to a CopyTarget.
func copyRaw(ctx context.Context, cfg Config, cr CopyReader, ct CopyTarget, j job, epoch int, pr *progress) error {
	c := j.st.Chunk
	pw := &progressWriter{pr: pr, table: c.Table}
	st, err := ct.WriteChunkCopy(ctx, cfg.Stream, epoch, j.table, c, j.replace, func(w io.Writer) (int64, error) {
		pw.w = w
		n, err := cr.CopyOut(ctx, j.table, c.Range, pw)
		pw.report()
		var ee *emitError
		if err != nil && !errors.As(err, &ee) {
			return n, sourceErr("read "+c.String()+" from the source", err)
		}
		return n, err
	})
	pr.flowing(c.Table, -pw.rows, -pw.bytes)
	if err != nil {
		return targetErr("copy "+c.String(), err)
	}
	pr.done(c.Table, st.Rows, st.Bytes, true)
	return nil
}

// progressWriter passes COPY text on and counts its rows (one per line:
// COPY escapes newlines inside values) and bytes into the progress, about
// every MiB.
type progressWriter struct {
	w                   io.Writer
	pr                  *progress
	table               sluice.TableName
	rows, bytes         int64
	pendRows, pendBytes int64
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.pendBytes += int64(n)
	p.pendRows += int64(bytes.Count(b[:n], []byte{'\n'}))
	if p.pendBytes >= 1<<20 {
		p.report()
	}
	if err != nil {
		return n, &emitError{err}
	}
	return n, nil
}

func (p *progressWriter) report() {
	p.pr.flowing(p.table, p.pendRows, p.pendBytes)
	p.rows += p.pendRows
	p.bytes += p.pendBytes
	p.pendRows, p.pendBytes = 0, 0
}
