package diagnose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/endpoint"
)

// Mode is an apply mode of sluice's targets.
type Mode string

const (
	// PerRow sends one statement per change, each its own round trip, as
	// naive appliers do.
	PerRow Mode = "per-row"
	// Pipelined sends a batch in a constant number of round trips.
	Pipelined Mode = "pipelined"
)

// ParseModes reads a comma-separated list of modes.
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	for _, f := range strings.Split(s, ",") {
		switch m := Mode(strings.ToLower(strings.TrimSpace(f))); m {
		case "":
		case PerRow, Pipelined:
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		default:
			return nil, fmt.Errorf("--modes: unknown mode %q: want per-row and/or pipelined", f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--modes: name at least one of per-row, pipelined")
	}
	return out, nil
}

// ParseSizes reads a comma-separated list of batch sizes; they are measured
// in increasing order.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ReplaceAll(f, "_", ""))
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--sizes: %q is not a positive whole number", f)
		}
		if n > maxSize {
			return nil, fmt.Errorf("--sizes: %d is more than %d changes", n, maxSize)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--sizes: name at least one batch size, e.g. --sizes 1,10,100")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

const maxSize = 1_000_000

// StaticBatchOptions configures StaticBatch. Zero fields take the defaults
// given.
type StaticBatchOptions struct {
	// Target is the target's connection URL or MySQL DSN.
	Target string
	// Sizes are the batch sizes to measure (default 1, 10, 100, 1000,
	// 10000).
	Sizes []int
	// Modes are the apply modes to measure (default per-row, pipelined).
	Modes []Mode
	// Table names the scratch table, "table" or "schema.table" (default
	// sluice_diag_<pid> in the connection's schema or database). It must not
	// exist.
	Table string
	// KillBudget is the longest a transaction may take; the verdict gives
	// the largest batch predicted to fit it (default 5 s, a quarter of
	// Vitess's 20 s).
	KillBudget time.Duration
	// MaxTime skips a cell whose predicted transaction time exceeds it
	// (default 60 s). A transaction running past twice MaxTime is cancelled.
	MaxTime time.Duration
	// Pings is the number of pings of the RTT measurement (default 10).
	Pings int
	// RepeatBudget: a cell is run again, up to MaxRuns times, while its
	// runs so far and one more are predicted to take under RepeatBudget
	// (default 2 s, 5 runs); it reports the median.
	RepeatBudget time.Duration
	MaxRuns      int
	// OnStart, OnRTT and OnCell, if set, are called as the run goes:
	// OnStart once the scratch table exists (the report then names the
	// server and the table), the others as the measurements come in.
	OnStart func(*StaticBatchReport)
	OnRTT   func(RTTStats)
	OnCell  func(Cell)
}

func (o *StaticBatchOptions) defaults() {
	if len(o.Sizes) == 0 {
		o.Sizes = []int{1, 10, 100, 1000, 10000}
	}
	o.Sizes = slices.Compact(slices.Sorted(slices.Values(o.Sizes)))
	if len(o.Modes) == 0 {
		o.Modes = []Mode{PerRow, Pipelined}
	}
	if o.KillBudget <= 0 {
		o.KillBudget = 5 * time.Second
	}
	if o.MaxTime <= 0 {
		o.MaxTime = 60 * time.Second
	}
	if o.Pings <= 0 {
		o.Pings = 10
	}
	if o.RepeatBudget <= 0 {
		o.RepeatBudget = 2 * time.Second
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = 5
	}
}

// CellStatus says what became of a (mode, size) cell.
type CellStatus string

const (
	Measured CellStatus = "measured"
	// Skipped: the predicted time exceeded MaxTime.
	Skipped CellStatus = "skipped"
	// Failed: the transaction failed or ran past twice MaxTime.
	Failed CellStatus = "failed"
)

// Cell is one batch size in one mode.
type Cell struct {
	Mode   Mode
	Size   int
	Status CellStatus
	// Predicted is the transaction time predicted before the cell ran, from
	// the cells of the mode measured so far (or the round trips counted for
	// a one-change batch times the RTT): why a cell was skipped.
	Predicted time.Duration
	// Runs is how many times the batch was applied; RoundTrips and TxTime
	// are the medians, Rate is Size / TxTime in changes per second.
	Runs       int
	RoundTrips int64
	TxTime     time.Duration
	Rate       float64
	// Bytes is the median number of bytes the client sent per batch.
	Bytes int64
	Err   error
}

// StaticBatchReport is the outcome of StaticBatch.
type StaticBatchReport struct {
	Target string // password masked
	Engine endpoint.Engine
	Server string // e.g. "PostgreSQL 15.8"
	// Table is the scratch table, schema.table.
	Table string
	// Workload says what a batch holds.
	Workload   string
	KillBudget time.Duration
	MaxTime    time.Duration
	// RTT is measured by pinging the target before any batch.
	RTT   RTTStats
	Cells []Cell
	// Fits holds, per mode measured, the fitted cost model and its verdict.
	Fits []Fit
	// RoundTripBound is true when some mode is round-trip-bound.
	RoundTripBound bool
	// Verdict is the diagnosis, one sentence per line.
	Verdict []string
	// Dropped reports that the scratch table was dropped at the end.
	Dropped bool
}

// Fit returns the fit of mode, if it was measured.
func (r *StaticBatchReport) Fit(mode Mode) (Fit, bool) {
	for _, f := range r.Fits {
		if f.Mode == mode {
			return f, true
		}
	}
	return Fit{}, false
}

// Cell returns the cell of mode and size.
func (r *StaticBatchReport) Cell(mode Mode, size int) (Cell, bool) {
	for _, c := range r.Cells {
		if c.Mode == mode && c.Size == size {
			return c, true
		}
	}
	return Cell{}, false
}

const workload = "one upsert per change of an id not yet in the table (each an INSERT on the server), plus the checkpoint row, in one transaction"

// StaticBatch runs the static-batch test against a target: on a scratch
// table it creates (and drops at the end, also on error or cancellation),
// it measures the RTT, then applies batches of each size in each mode with
// sluice's own target, counting round trips and timing the transaction, and
// fits and judges the cost per mode. Cells predicted to exceed MaxTime are
// skipped. On error or cancellation it returns what was measured so far
// with the error.
func StaticBatch(ctx context.Context, o StaticBatchOptions) (rep *StaticBatchReport, err error) {
	o.defaults()
	eng, err := endpoint.EngineOf(o.Target)
	if err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	name := sluice.TableName{Name: fmt.Sprintf("sluice_diag_%d", os.Getpid())}
	if o.Table != "" {
		if name, err = sluice.ParseTableName(o.Table); err != nil {
			return nil, fmt.Errorf("--table: %w", err)
		}
	}
	rep = &StaticBatchReport{Target: endpoint.MaskURL(o.Target), Engine: eng, Workload: workload,
		KillBudget: o.KillBudget, MaxTime: o.MaxTime}
	adm, err := openAdmin(ctx, eng, o.Target)
	if err != nil {
		return rep, err
	}
	defer adm.close()
	if rep.Server, err = adm.version(ctx); err != nil {
		return rep, fmt.Errorf("target %s: read server version: %w", rep.Target, err)
	}
	tbl, err := adm.create(ctx, name)
	if err != nil {
		return rep, err
	}
	rep.Table = tbl.Name.String()
	r := &runner{o: o, eng: eng, tbl: tbl, rep: rep, stream: "sluice-diagnose-" + tbl.Name.String()}
	defer func() {
		// Clean up on a context of our own: the caller's may be cancelled
		// (Ctrl-C) and the scratch table must go all the same.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		derr := adm.drop(cctx, tbl)
		if derr != nil {
			derr = fmt.Errorf("drop scratch table %s: %w (drop it by hand)", tbl.Name, derr)
		}
		rep.Dropped = derr == nil
		cerr := adm.deleteCheckpoint(cctx, r.stream)
		if cerr != nil {
			cerr = fmt.Errorf("delete checkpoint row %q: %w", r.stream, cerr)
		}
		err = errors.Join(err, derr, cerr)
	}()
	if o.OnStart != nil {
		o.OnStart(rep)
	}
	for i, mode := range o.Modes {
		if err := r.runMode(ctx, mode, i == 0); err != nil {
			r.judge()
			return rep, err
		}
	}
	r.judge()
	return rep, nil
}

type runner struct {
	o      StaticBatchOptions
	eng    endpoint.Engine
	tbl    *sluice.Table
	rep    *StaticBatchReport
	stream string
	nextID int64
	seq    uint64
	// warm holds per mode the round trips counted for the unmeasured
	// one-change batch each mode starts with.
	warm map[Mode]int64
}

// runMode measures every size in one mode on a target of its own.
func (r *runner) runMode(ctx context.Context, mode Mode, first bool) (err error) {
	var c counter
	tgt, err := openApplier(ctx, r.o.Target, mode, c.dial)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		tgt.Close(cctx)
	}()
	if err := tgt.Preflight(ctx, []*sluice.Table{r.tbl}); err != nil {
		return fmt.Errorf("scratch table %s: %w", r.tbl.Name, err)
	}
	if first {
		samples := make([]time.Duration, 0, r.o.Pings)
		for range r.o.Pings {
			d, err := tgt.Ping(ctx)
			if err != nil {
				return err
			}
			samples = append(samples, d)
		}
		r.rep.RTT = NewRTTStats(samples)
		if r.o.OnRTT != nil {
			r.o.OnRTT(r.rep.RTT)
		}
	}
	// A first, unmeasured batch of one change: connection and server caches
	// warm up, and its round trips seed the prediction of the first cell.
	c.reset()
	if b, cp := r.batch(1); true {
		err = tgt.Apply(ctx, b, cp)
	}
	if err != nil {
		return fmt.Errorf("%s: first batch: %w", mode, err)
	}
	if r.warm == nil {
		r.warm = map[Mode]int64{}
	}
	r.warm[mode] = c.roundTrips.Load()

	for _, size := range r.o.Sizes {
		cell := Cell{Mode: mode, Size: size, Predicted: r.predict(mode, size)}
		if cell.Predicted > r.o.MaxTime {
			cell.Status = Skipped
			r.add(cell)
			continue
		}
		var times []time.Duration
		var trips, bytes []int64
		var total time.Duration
		for {
			b, cp := r.batch(size)
			c.reset()
			actx, cancel := context.WithTimeout(ctx, 2*r.o.MaxTime)
			t0 := time.Now()
			err := tgt.Apply(actx, b, cp)
			d := time.Since(t0)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%s, %d changes: %w", mode, size, ctx.Err())
				}
				cell.Status, cell.Err = Failed, err
				if actx.Err() != nil {
					cell.Err = fmt.Errorf("cancelled after %s (twice --max-time): %w", FormatDuration(d), err)
				}
				break
			}
			times = append(times, d)
			trips = append(trips, c.roundTrips.Load())
			bytes = append(bytes, c.written.Load())
			total += d
			if len(times) >= r.o.MaxRuns || total+d > r.o.RepeatBudget {
				break
			}
		}
		if cell.Status == Failed {
			r.add(cell)
			// Larger batches in this mode would fail the same way or
			// worse; the other modes may still tell something.
			return nil
		}
		cell.Status = Measured
		cell.Runs = len(times)
		cell.TxTime = median(times)
		cell.RoundTrips = medianInt(trips)
		cell.Bytes = medianInt(bytes)
		cell.Rate = float64(size) / cell.TxTime.Seconds()
		r.add(cell)
	}
	return nil
}

func (r *runner) add(c Cell) {
	r.rep.Cells = append(r.rep.Cells, c)
	if r.o.OnCell != nil {
		r.o.OnCell(c)
	}
}

// batch builds a batch of n inserts of ids never used before (compacted:
// n upserts) and the checkpoint that goes with it.
func (r *runner) batch(n int) (*apply.Batch, sluice.Checkpoint) {
	changes := make([]sluice.Change, n)
	now := time.Now()
	for i := range changes {
		r.nextID++
		id := r.nextID
		changes[i] = sluice.Change{
			Table: r.tbl,
			Op:    sluice.OpInsert,
			Row: sluice.Row{
				sluice.Text(strconv.FormatInt(id, 10)),
				sluice.Text(fmt.Sprintf("sluice diagnose static-batch row %d", id)),
				sluice.Text(strconv.FormatInt(id*7919%1_000_000_007, 10)),
			},
			Time: now,
			Pos:  sluice.Position{Kind: "diagnose", Token: strconv.FormatInt(id, 10)},
		}
	}
	b := apply.Compact(changes, nil)
	r.seq++
	return b, sluice.Checkpoint{Stream: r.stream, Seq: r.seq, Position: b.Last, Applied: uint64(r.nextID), Time: now}
}

// predict is the predicted transaction time of a batch of n in mode: from
// the fit of the cells measured so far when there are two sizes, else the
// round trips of the first one-change batch, plus one per further change
// in per-row mode, times the RTT.
func (r *runner) predict(mode Mode, n int) time.Duration {
	if f := fitMode(mode, r.rep.Cells, r.warm[mode], r.rep.RTT.P50, r.o.KillBudget); f.OK {
		return f.Predict(n)
	}
	trips := float64(max(r.warm[mode], 1))
	if mode == PerRow {
		trips += float64(n - 1)
	}
	return time.Duration(trips * float64(r.rep.RTT.P50))
}

// judge fits every mode and writes the verdict.
func (r *runner) judge() {
	rep := r.rep
	rep.Fits = nil
	for _, mode := range r.o.Modes {
		f := fitMode(mode, rep.Cells, r.warm[mode], rep.RTT.P50, r.o.KillBudget)
		if f.Cells == 0 {
			continue
		}
		rep.Fits = append(rep.Fits, f)
		rep.RoundTripBound = rep.RoundTripBound || f.Bound == RoundTripBound
	}
	rep.Verdict = verdict(rep)
}
