package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
	wlgen "github.com/sluice-cdc/sluice/internal/workload"
	"github.com/sluice-cdc/sluice/source/pglogical"
)

const streamID = "chaos"

// The runner's own tables, beside the workload's: chaos_bulk gives the
// initial copy its work and gets random updates while it runs;
// chaos_marker gets one row per scenario, the marker the stream must
// deliver; chaos_probe (target only, not replicated) is written to check
// that a read-only episode refuses writes.
var runnerDDL = []string{
	"CREATE TABLE chaos_bulk (id bigint PRIMARY KEY, k int NOT NULL, c varchar(64) NOT NULL)",
	"CREATE TABLE chaos_marker (id bigint PRIMARY KEY, scenario varchar(64) NOT NULL)",
}

const probeDDL = "CREATE TABLE chaos_probe (id int PRIMARY KEY)"

// pairRun is one pair's run: its servers, workload, sluice process and the
// scenarios' rows.
type pairRun struct {
	cfg      Config
	spec     PairSpec
	seed     uint64
	rng      *rand.Rand
	src, dst *endpoint
	w        *wlgen.Workload
	wr       *writer
	tables   []string
	dir      string
	stateDir string
	logPath  string
	// dstURL is the target as sluice reaches it: the target proxy's, or
	// after the zombie scenario a second proxy's.
	dstURL   string
	altProxy *wanproxy.Proxy

	mu        sync.Mutex // guards proc, selfExits, exitWhy, extraArgs across the supervisor
	extraArgs []string   // a scenario's flags for sluice, after the usual ones
	proc      *sluiceProc
	selfExits int
	exitWhy   []string
	markers   int
	stopSup   chan struct{}
	supDone   chan struct{}
}

func (pr *pairRun) logf(format string, args ...any) {
	out := pr.cfg.Out
	if out == nil {
		out = os.Stdout
	}
	fmt.Fprintf(out, "%s [%s] %s\n", time.Now().UTC().Format("15:04:05.0"), pr.spec.Name, fmt.Sprintf(format, args...))
}

func (pr *pairRun) vlogf(format string, args ...any) {
	if pr.cfg.Verbose {
		pr.logf(format, args...)
	}
}

// scenario injects its faults and says what it injected; the time to
// recover is measured from its return, when the last fault has ended.
type scenario struct {
	key  string // for -scenarios
	name string
	run  func(pr *pairRun, ctx context.Context) (faults string, notes []string, err error)
}

var scenarios = []scenario{
	{"kill", "kill -9", (*pairRun).scenarioKills},
	{"target-restarts", "target restarts", (*pairRun).scenarioTargetRestarts},
	{"source-restarts", "source restarts", (*pairRun).scenarioSourceRestarts},
	{"blackholes", "link blackholes", (*pairRun).scenarioBlackholes},
	{"storm", "txkiller storm", (*pairRun).scenarioStorm},
	{"read-only", "target read-only", (*pairRun).scenarioReadOnly},
	{"zombie", "zombie batch", (*pairRun).scenarioZombie},
}

func RunPair(ctx context.Context, cfg Config, spec PairSpec, seed uint64, deadline time.Time) (rows []Row, err error) {
	pr := &pairRun{cfg: cfg, spec: spec, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	pr.logf("seed %d; starting servers", seed)
	if pr.dir, err = os.MkdirTemp("", "sluice-chaos-"+spec.Name+"-"); err != nil {
		return nil, err
	}
	pr.stateDir, pr.logPath = filepath.Join(pr.dir, "state"), filepath.Join(pr.dir, "sluice.log")
	keep := cfg.Keep
	defer func() {
		if keep || err != nil || failedRows(rows) {
			pr.logf("sluice's log and state kept in %s", pr.dir)
		} else {
			os.RemoveAll(pr.dir)
		}
	}()
	if err := pr.setup(ctx); err != nil {
		return nil, fmt.Errorf("set up %s: %w", spec.Name, err)
	}
	defer pr.src.close()
	defer pr.dst.close()
	pr.dstURL = pr.dst.sluiceURL
	defer func() {
		if pr.altProxy != nil {
			pr.altProxy.Close()
		}
	}()

	pr.wr = newWriter(pr, pr.w.Txs[cfg.PrefixTxs:])
	go pr.wr.run(ctx)
	defer pr.wr.finish()

	pr.stopSup, pr.supDone = make(chan struct{}), make(chan struct{})
	if err := pr.startSluice(); err != nil {
		return nil, err
	}
	go pr.supervise()
	defer pr.stopSluice()

	for _, sc := range scenarios {
		if !slices.Contains(cfg.Scenarios, sc.key) {
			continue
		}
		r := Row{pair: spec.Name, scenario: sc.name}
		if time.Now().After(deadline) {
			r.skipped, r.ack = true, "-"
			r.notes = append(r.notes, "not started: -duration reached")
			rows = append(rows, r)
			continue
		}
		pr.logf("scenario %s", sc.name)
		before := pr.wr.changes.Load()
		exitsBefore := pr.exits()
		first := len(rows) == 0
		if first {
			before = 0 // the prefix, copied by the initial copy, is the first scenario's
		}
		faults, notes, ferr := sc.run(pr, ctx)
		r.faults, r.notes = faults, notes
		if ferr != nil {
			r.err = ferr.Error()
		}
		pr.settle(ctx, &r, time.Now())
		r.changes = pr.wr.changes.Load() - before
		if first {
			r.changes += int64(pr.prefixChanges())
		}
		if n := pr.exits() - exitsBefore; n > 0 {
			r.notes = append(r.notes, fmt.Sprintf("sluice exited by itself %d× (restarted 1 s later, as systemd would); last: %s", n, pr.lastExitWhy()))
		}
		if pr.wr.exhausted() {
			r.notes = append(r.notes, "the workload ran out during the scenario")
		}
		if err := pr.wr.failure(); err != nil && r.err == "" {
			r.err = "source workload: " + err.Error()
		}
		pr.logf("scenario %s: %s; %d changes; %d differences; ack %s; recovered in %v",
			sc.name, r.faults, r.changes, r.diffs, r.ack, r.recover.Round(100*time.Millisecond))
		rows = append(rows, r)
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
	}
	return rows, nil
}

func failedRows(rs []Row) bool {
	for _, r := range rs {
		if r.Failed() {
			return true
		}
	}
	return false
}

// setup starts the servers, creates the schema on both sides, and commits
// the workload's first transactions and chaos_bulk's rows before the
// stream starts, so that its initial copy has them to copy.
func (pr *pairRun) setup(ctx context.Context) error {
	// The generator takes seconds: it runs while the servers start.
	generated := make(chan *wlgen.Workload, 1)
	go func() {
		generated <- wlgen.Generate(wlgen.Config{
			Seed: pr.seed, Source: wlgen.Engine(pr.spec.Src), Target: wlgen.Engine(pr.spec.Dst),
			Txs: pr.cfg.Txs, MaxStmts: 8, ForeignKeys: true,
		})
	}()
	defer func() {
		if pr.w == nil {
			<-generated
		}
	}()
	var err error
	db := "chaos_" + pr.spec.Name
	if pr.src, err = startEndpoint(ctx, pr.spec.Src, db, 0, false); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if pr.dst, err = startEndpoint(ctx, pr.spec.Dst, db, pr.cfg.OneWay, true); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	pr.w = <-generated
	for _, e := range []*endpoint{pr.src, pr.dst} {
		ddl := append(pr.w.Schema.DDL(wlgen.Engine(e.engine)), runnerDDL...)
		if e == pr.dst {
			ddl = append(ddl, probeDDL)
		}
		for _, q := range ddl {
			if err := e.exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %s: %w", e.engine, q, err)
			}
		}
	}
	pr.tables = append(pr.w.Schema.TableNames(), "chaos_bulk", "chaos_marker")
	fill := fmt.Sprintf("INSERT INTO chaos_bulk SELECT g, g %% 1000, md5(g::text) FROM generate_series(1, %d) g", pr.cfg.BulkRows)
	if pr.spec.Src == daemon.EngineMySQL {
		fill = fmt.Sprintf("INSERT INTO chaos_bulk SELECT seq, seq %% 1000, MD5(seq) FROM seq_1_to_%d", pr.cfg.BulkRows)
	}
	if err := pr.src.exec(ctx, fill); err != nil {
		return fmt.Errorf("fill chaos_bulk: %w", err)
	}
	if err := pr.w.Apply(ctx, pr.srcWorkloadDB(), pr.w.Txs[:pr.cfg.PrefixTxs]); err != nil {
		return err
	}
	pr.logf("workload %s", pr.w)
	return nil
}

func (pr *pairRun) prefixChanges() int {
	n := pr.cfg.BulkRows
	for _, tx := range pr.w.Txs[:pr.cfg.PrefixTxs] {
		n += len(tx.Stmts)
	}
	return n
}

func (pr *pairRun) srcWorkloadDB() wlgen.DB {
	if pr.src.pg != nil {
		return wlgen.DB{PG: pr.src.pg}
	}
	return wlgen.DB{My: pr.src.my}
}

// --- the sluice process ---

type sluiceProc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	killed atomic.Bool // by the runner: not an exit of its own
}

func (p *sluiceProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (pr *pairRun) sluiceArgs() []string {
	return []string{"sync", "start", "--source", pr.src.sluiceURL, "--target", pr.dstURL,
		"--tables", strings.Join(pr.tables, ","), "--state-dir", pr.stateDir, "--stream-id", streamID,
		"--source-mode", pr.spec.Mode, "--min-lanes", "1", "--max-lanes", "4",
		"--copy-workers", "2", "--copy-chunk-rows", "1000", "--poll-interval", "50ms",
		"--shutdown-timeout", "5s", "--log-format", "json"}
}

// restartWith kills sluice and starts it again with extra flags (none:
// the usual ones), for a scenario that needs sluice run differently.
func (pr *pairRun) restartWith(extra ...string) error {
	pr.kill()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.extraArgs = extra
	return pr.startLocked()
}

// startSluice starts `sluice sync start`, its output appended to the
// pair's log. The caller holds no lock; it takes pr.mu.
func (pr *pairRun) startSluice() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.startLocked()
}

func (pr *pairRun) startLocked() error {
	f, err := os.OpenFile(pr.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("sluice log: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(f, "{\"chaos\":\"start\",\"time\":%q}\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(pr.cfg.Sluice, append(pr.sluiceArgs(), pr.extraArgs...)...)
	cmd.Stdout, cmd.Stderr = f, f
	// SIGKILL when the runner dies, so that no sluice outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", pr.cfg.Sluice, err)
	}
	p := &sluiceProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	pr.proc = p
	return nil
}

// kill sends SIGKILL to the running sluice and waits for it to be gone.
func (pr *pairRun) kill() *sluiceProc {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := pr.proc
	p.killed.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return p
}

// supervise restarts a sluice that exited by itself one second later, as
// systemd's Restart=on-failure would, and records why it exited.
func (pr *pairRun) supervise() {
	defer close(pr.supDone)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-pr.stopSup:
			return
		case <-tick.C:
		}
		pr.mu.Lock()
		p := pr.proc
		if p != nil && p.exited() && !p.killed.Load() {
			pr.selfExits++
			pr.exitWhy = append(pr.exitWhy, fmt.Sprintf("%v, %s", p.err, lastError(pr.logPath)))
			pr.vlogf("sluice exited by itself (%v): %s", p.err, lastError(pr.logPath))
			p.killed.Store(true) // handled
			pr.mu.Unlock()
			select {
			case <-pr.stopSup:
				return
			case <-time.After(time.Second):
			}
			pr.mu.Lock()
			if pr.proc == p {
				if err := pr.startLocked(); err != nil {
					pr.logf("restart sluice: %v", err)
				}
			}
		}
		pr.mu.Unlock()
	}
}

func (pr *pairRun) exits() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.selfExits
}

func (pr *pairRun) lastExitWhy() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if len(pr.exitWhy) == 0 {
		return ""
	}
	return pr.exitWhy[len(pr.exitWhy)-1]
}

func (pr *pairRun) stopSluice() {
	close(pr.stopSup)
	<-pr.supDone
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := pr.proc
	if p == nil || p.exited() {
		return
	}
	p.killed.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// lastError is the error of the last error-level line of sluice's log.
func lastError(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `"level":"ERROR"`) {
			last = l
		}
	}
	var line struct {
		Err string `json:"err"`
	}
	if json.Unmarshal([]byte(last), &line) == nil && line.Err != "" {
		last = line.Err
	}
	if len(last) > 200 {
		last = strings.ToValidUTF8(last[:200], "") + "…"
	}
	return last
}

// status is the running sluice's status, if it has written one.
func (pr *pairRun) status() (daemon.Status, bool) {
	sts, err := daemon.ReadStatus(pr.stateDir)
	if err != nil {
		return daemon.Status{}, false
	}
	for _, s := range sts {
		if s.Stream == streamID {
			return s, true
		}
	}
	return daemon.Status{}, false
}

// --- the checks ---

// settle ends a scenario: with the writer held, it writes a marker row on
// the source, waits (polling, with the deadline) until the stream has
// delivered it and the target equals the source, counts what differs if it
// does not, and checks after a kill -9 that the acknowledged position is
// not past the target's.
func (pr *pairRun) settle(ctx context.Context, r *Row, faultEnd time.Time) {
	pr.wr.hold()
	defer pr.wr.release()
	pr.markers++
	marker := pr.markers
	stallAt := faultEnd.Add(pr.cfg.RecoverWithin)
	if err := retry(ctx, stallAt, func() error {
		return pr.src.exec(ctx, fmt.Sprintf("INSERT INTO chaos_marker VALUES (%d, '%s')", marker, r.scenario))
	}); err != nil {
		r.err = fmt.Sprintf("write the marker on the source: %v", err)
		return
	}
	ok := poll(ctx, stallAt, 200*time.Millisecond, func() bool {
		var n int
		q := fmt.Sprintf("SELECT count(*) FROM chaos_marker WHERE id = %d", marker)
		var err error
		if pr.dst.pg != nil {
			err = pr.dst.pg.QueryRow(ctx, q).Scan(&n)
		} else {
			err = pr.dst.my.QueryRowContext(ctx, q).Scan(&n)
		}
		return err == nil && n == 1
	})
	if !ok {
		r.stalled = true
		r.recover = time.Since(faultEnd)
		st, _ := pr.status()
		r.notes = append(r.notes, fmt.Sprintf("the marker did not reach the target within %v (status: applied %d, queue %d, last error %q; last logged error: %s)",
			pr.cfg.RecoverWithin, st.Applied, st.QueueLen, st.LastError, lastError(pr.logPath)))
	}
	// Lanes behind the marker's finish within moments of it.
	var diffs dbtest.Diffs
	var cmpErr error
	equal := poll(ctx, time.Now().Add(pr.cfg.EqualWithin), 500*time.Millisecond, func() bool {
		diffs, cmpErr = dbtest.CompareTables(ctx, pr.src.cmpDB(), pr.dst.cmpDB(), pr.tables...)
		return cmpErr == nil && diffs.Equal()
	})
	if ok {
		r.recover = time.Since(faultEnd)
	}
	switch {
	case cmpErr != nil:
		r.err = fmt.Sprintf("compare: %v", cmpErr)
	case !equal:
		for _, td := range diffs {
			r.diffs += len(td.Rows)
		}
		pr.logf("DIFFERENCES after %s (seed %d):\n%s%s", r.scenario, pr.seed, diffs, pr.w.TraceDiffs(diffs))
		r.notes = append(r.notes, "differences listed in the log above")
	}
	if equal && pr.spec.Src == daemon.EngineMySQL && pr.spec.Dst == daemon.EngineMySQL {
		// The server's own row checksum, a second judge sharing no code
		// with the comparison.
		if err := dbtest.CompareChecksumTable(ctx, pr.src.my, pr.dst.my, pr.tables...); err != nil {
			r.diffs++
			r.notes = append(r.notes, "CHECKSUM TABLE differs: "+err.Error())
		}
	}
	// The acknowledged position, with sluice dead so that nothing moves.
	pr.kill()
	v, err := pr.checkAck(ctx)
	switch {
	case err != nil:
		r.ack = "check failed"
		r.notes = append(r.notes, "ack check: "+err.Error())
	case v != "":
		r.ack = "VIOLATED"
		r.notes = append(r.notes, v)
	default:
		r.ack = "ok"
	}
	if err := pr.startSluice(); err != nil {
		r.err = err.Error()
	}
}

// checkAck checks, with sluice dead, that the position sluice acknowledged
// is not past what the target holds: the state file's checkpoint is one
// the target committed (its seq is not past the target's checkpoint rows),
// and for a logical source the slot's confirmed_flush_lsn is not past the
// target's checkpoint, or the server would never resend what lies between.
func (pr *pairRun) checkAck(ctx context.Context) (string, error) {
	var stateSeq uint64
	var haveState bool
	if _, err := os.Stat(filepath.Join(pr.stateDir, checkpoint.FileName)); err == nil {
		st, err := checkpoint.ReadOnly(pr.stateDir)
		if err != nil {
			return "", err
		}
		rec, ok, err := st.Get(streamID)
		st.Close()
		if err != nil {
			return "", err
		}
		stateSeq, haveState = rec.Seq, ok
	}
	tgtSeq, tgtPos, haveTarget, err := pr.targetCheckpoint(ctx)
	if err != nil {
		return "", err
	}
	if haveState && stateSeq > 0 && (!haveTarget || stateSeq > tgtSeq) {
		return fmt.Sprintf("the state file's checkpoint (seq %d) is past the target's (seq %d, present %v)", stateSeq, tgtSeq, haveTarget), nil
	}
	if pr.spec.Mode != daemon.ModeLogical || !haveTarget {
		return "", nil
	}
	confirmed, err := pr.slotConfirmed(ctx)
	if err != nil {
		return "", err
	}
	lsn, err := parsePGLogical(tgtPos)
	if err != nil {
		return "", err
	}
	if confirmed > lsn {
		return fmt.Sprintf("the slot's confirmed_flush_lsn %s is past the target's checkpoint %s (%s)", confirmed, lsn, tgtPos), nil
	}
	return "", nil
}

// targetCheckpoint reads the stream's checkpoint rows on the target: the
// highest seq, and the position of the lane row the stream resumes from.
func (pr *pairRun) targetCheckpoint(ctx context.Context) (seq uint64, pos string, ok bool, err error) {
	if pr.dst.pg != nil {
		err = pr.dst.pg.QueryRow(ctx, `SELECT position, (SELECT max(seq) FROM sluice.checkpoint WHERE stream = $1)
			FROM sluice.checkpoint WHERE stream = $1 ORDER BY applied DESC, seq DESC LIMIT 1`, streamID).Scan(&pos, &seq)
	} else {
		err = pr.dst.my.QueryRowContext(ctx, "SELECT `position`, (SELECT MAX(seq) FROM sluice_checkpoint WHERE stream = ?) FROM sluice_checkpoint WHERE stream = ? ORDER BY applied DESC, seq DESC LIMIT 1",
			streamID, streamID).Scan(&pos, &seq)
	}
	if isMissingTable(err) || errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("read the target's checkpoint: %w", err)
	}
	return seq, pos, true, nil
}

// slotConfirmed waits until the stream's slot has no walsender (the
// killed sluice's has gone, so nothing moves it) and returns its
// confirmed_flush_lsn.
func (pr *pairRun) slotConfirmed(ctx context.Context) (pglogrepl.LSN, error) {
	slot := pglogical.DefaultName(streamID)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		var confirmed string
		err := pr.src.pg.QueryRow(ctx, `SELECT active, coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active, &confirmed)
		if err != nil {
			return 0, fmt.Errorf("slot %s: %w", slot, err)
		}
		if !active {
			return pglogrepl.ParseLSN(confirmed)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("slot %s still active 30 s after sluice was killed", slot)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// parsePGLogical reads a pglogical checkpoint token, "pglogical:<lsn>/<k>"
// at or "pglogical:<commit>@<change>.<i>" inside a transaction, as the
// commit LSN every transaction below which is applied.
func parsePGLogical(pos string) (pglogrepl.LSN, error) {
	tok, ok := strings.CutPrefix(pos, pglogical.Kind+":")
	if !ok {
		return 0, fmt.Errorf("target checkpoint position %q is not a pglogical position", pos)
	}
	if commit, _, in := strings.Cut(tok, "@"); in {
		tok = commit + "/1"
	}
	i := strings.LastIndexByte(tok, '/')
	if i < 0 {
		return 0, fmt.Errorf("target checkpoint position %q is not a pglogical position", pos)
	}
	return pglogrepl.ParseLSN(tok[:i])
}

// poll calls cond every interval until it holds (true) or the deadline
// passes (false).
func poll(ctx context.Context, deadline time.Time, interval time.Duration, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(interval) // polling interval, not a wait for replication
	}
}

// retry calls f until it succeeds or the deadline passes: a server just
// restarted refuses connections for a moment.
func retry(ctx context.Context, deadline time.Time, f func() error) error {
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(250 * time.Millisecond) // retry interval
	}
}
