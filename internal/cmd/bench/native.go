package main

// The native section (issue 14): sluice against the databases' own
// replication, catching up the same backlog across the same emulated link.
//
// Per run, one backlog per engine: -native-scale × (100,000 inserts, then
// 50,000 updates, then 20,000 deletes), in source transactions of 10
// changes, then a marker row (id 0), in a table (id bigint primary key, k
// int, c varchar(120), pad varchar(60)). Every consumer of the run is
// positioned before the backlog is written and started after it, so each
// one catches up the same backlog:
//
//   - PostgreSQL logical replication: a slot per consumer, created on the
//     source before the backlog; after it, a subscription on the second
//     server (create_slot = false on that slot, copy_data = false, the
//     table empty on both sides) whose CONNECTION goes through the proxy in
//     front of the SOURCE (native replication pulls), then enabled: timed
//     from ALTER SUBSCRIPTION … ENABLE.
//   - MariaDB replication: the second server (server_id 2) as a replica,
//     CHANGE MASTER TO the proxy in front of the source at the binlog
//     file/position taken before the backlog: timed from START SLAVE, with
//     slave_parallel_threads at its default (0) and at -native-my-threads.
//   - sluice: the real binary (-sluice), its stream started once with
//     --from-now before the backlog (which creates its slot or records its
//     binlog position, then stops on SIGTERM), started again after it with
//     --initial-copy off through the proxy in front of the TARGET (sluice
//     pushes): timed from process start.
//
// The time is from start until the marker row is on the target (polled
// there directly, with a deadline); then the table is checked equal with
// the source (dbtest.CompareTables on PostgreSQL, CHECKSUM TABLE on
// MariaDB). Each cell of the report is the median of -native-runs runs.

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

const secNative = "native"

// The systems of the report, in its row order.
const (
	sysPGNative      = "pg-native"
	sysPGSluice      = "pg-sluice"
	sysPGBouncer     = "pg-sluice-pgbouncer"
	sysMyNative      = "my-native"
	sysMyNativeTuned = "my-native-tuned"
	sysMySluice      = "my-sluice"
)

var nativeSystems = []string{sysPGNative, sysPGSluice, sysPGBouncer, sysMyNative, sysMyNativeTuned, sysMySluice}

// The goals at the 96 ms link.
const (
	goalNativePG   = 1.5 // sluice ÷ native logical replication
	goalNativeMy   = 3.0 // sluice ÷ native replication (the default replica)
	goalNativeLink = 0.9 // sluice at 96 ms ÷ sluice at 0 ms
)

const (
	nativeTable  = "items"
	nativeTxSize = 10 // changes per source transaction
	markerID     = 0  // the backlog's ids start at 1
)

// nativeConfig is the native section's part of the command line.
type nativeConfig struct {
	scale     float64
	runs      int
	rtts      []time.Duration
	timeout   time.Duration
	myThreads int // slave_parallel_threads of the tuned replica row; 0: no such row
	engines   []string
	logDir    string   // keep each sluice run's log here; "" drops them with the state dir
	extra     []string // more flags for the timed sluice runs (-native-sluice-flags)
	modes     []string // modeShared, modePinned: each run runs every system in each
}

// The modes of a run (issue 32): shared is every process free to run on
// any core; pinned puts the source side (the source server, sluice, the
// bench and so its WAN proxy) on one core and the target side (the target
// server, PgBouncer) on another, as two machines would.
const (
	modeShared = "shared"
	modePinned = "pinned"
)

var nativeModes = []string{modeShared, modePinned}

// nativeFlags registers the native section's flags; the returned function
// checks and stores them once flag.Parse has run.
func nativeFlags(nc *nativeConfig) func() error {
	var rtts, engines, extra, modes string
	flag.Float64Var(&nc.scale, "native-scale", 1, "native section: backlog scale: 100,000 inserts, 50,000 updates and 20,000 deletes times this (e.g. 0.1 for a quick run)")
	flag.IntVar(&nc.runs, "native-runs", 3, "native section: runs; each cell is the median")
	flag.StringVar(&rtts, "native-rtt", "0,96ms", "native section: round-trip times of the proxy, comma-separated; the ratios compare the last with the first")
	flag.DurationVar(&nc.timeout, "native-timeout", 10*time.Minute, "native section: give up on one catch-up after this")
	flag.IntVar(&nc.myThreads, "native-my-threads", 4, "native section: slave_parallel_threads (mode optimistic) of the tuned MariaDB replica row; 0 leaves the row out")
	flag.StringVar(&engines, "native-engines", "postgres,mariadb", "native section: engines to run, comma-separated: postgres, mariadb")
	flag.StringVar(&nc.logDir, "native-logs", "", "native section: keep each sluice run's JSON log in this directory, named by stream and run (to read its batches' timeline)")
	flag.StringVar(&modes, "native-modes", "shared,pinned", "native section: modes, comma-separated: shared (every process on any core), pinned (the source server, sluice and the proxy on one core, the target server on another)")
	flag.StringVar(&extra, "native-sluice-flags", "", "native section: more flags for the timed sluice runs, space-separated (e.g. \"--min-lanes 2\")")
	return func() error {
		nc.extra = strings.Fields(extra)
		if nc.scale <= 0 || nc.runs < 1 || nc.timeout <= 0 || nc.myThreads < 0 {
			return errors.New("native section: -native-scale, -native-runs and -native-timeout must be positive, -native-my-threads not negative")
		}
		if nc.scale*20000 < nativeTxSize {
			return fmt.Errorf("-native-scale %g: too small for one transaction of deletes", nc.scale)
		}
		var err error
		if nc.rtts, err = parseRTTs("-native-rtt", rtts); err != nil {
			return err
		}
		if nc.engines, err = parseEngines("-native-engines", engines); err != nil {
			return err
		}
		nc.modes, err = parseModes("-native-modes", modes)
		return err
	}
}

// parseModes reads flag's comma-separated list of modes (shared, pinned),
// each once, in the order given.
func parseModes(flag, s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if !slices.Contains(nativeModes, f) {
			return nil, fmt.Errorf("%s: unknown mode %q (want %s)", flag, f, strings.Join(nativeModes, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no mode given", flag)
	}
	return out, nil
}

// errNoEngine is parseEngines' error for a list that names none.
var errNoEngine = errors.New("no engine given")

// parseEngines reads flag's comma-separated list of engines (postgres,
// mariadb), each once.
func parseEngines(flag, s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if f != "postgres" && f != "mariadb" {
			return nil, fmt.Errorf("%s: unknown engine %q (want postgres, mariadb)", flag, f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w", flag, errNoEngine)
	}
	return out, nil
}

// backlogShape is the backlog's size: ids 1..inserts inserted, 1..updates
// updated, the last deletes of the inserted ids deleted.
type backlogShape struct{ inserts, updates, deletes int }

func shapeFor(scale float64) backlogShape {
	return backlogShape{inserts: int(100000*scale + 0.5), updates: int(50000*scale + 0.5), deletes: int(20000*scale + 0.5)}
}

func (b backlogShape) changes() int { return b.inserts + b.updates + b.deletes }

// statements are the backlog's statements, each one transaction's worth
// (nativeTxSize changes, fewer in a phase's last), marker row last.
func (b backlogShape) statements(pg bool) []string {
	var out []string
	phase := func(lo, hi int, stmt func(lo, hi int) string) {
		for l := lo; l <= hi; l += nativeTxSize {
			out = append(out, stmt(l, min(l+nativeTxSize-1, hi)))
		}
	}
	if pg {
		phase(1, b.inserts, func(lo, hi int) string {
			return fmt.Sprintf("INSERT INTO items SELECT g, g %% 1000, md5(g::text) || md5((g+1)::text), 'pad-' || g FROM generate_series(%d, %d) g", lo, hi)
		})
		phase(1, b.updates, func(lo, hi int) string {
			return fmt.Sprintf("UPDATE items SET k = k + 1, c = md5(c) || '-u', pad = 'upd-' || id WHERE id BETWEEN %d AND %d", lo, hi)
		})
	} else {
		phase(1, b.inserts, func(lo, hi int) string {
			return fmt.Sprintf("INSERT INTO items SELECT seq, seq %% 1000, CONCAT(MD5(seq), MD5(seq+1)), CONCAT('pad-', seq) FROM seq_%d_to_%d", lo, hi)
		})
		phase(1, b.updates, func(lo, hi int) string {
			return fmt.Sprintf("UPDATE items SET k = k + 1, c = CONCAT(MD5(c), '-u'), pad = CONCAT('upd-', id) WHERE id BETWEEN %d AND %d", lo, hi)
		})
	}
	phase(b.inserts-b.deletes+1, b.inserts, func(lo, hi int) string {
		return fmt.Sprintf("DELETE FROM items WHERE id BETWEEN %d AND %d", lo, hi)
	})
	return append(out, fmt.Sprintf("INSERT INTO items VALUES (%d, 0, 'marker', 'marker')", markerID))
}

// pgWriteBacklog writes stmts (see writeBacklog) on the PostgreSQL source
// at srcURL, without waiting for each commit's flush: the source's write
// speed is not measured.
func pgWriteBacklog(ctx context.Context, srcURL string, stmts []string) error {
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		return err
	}
	return writeBacklog(stmts, func(b string) error { _, err := conn.Exec(ctx, b); return err })
}

// myWriteBacklog writes stmts (see writeBacklog) on the MariaDB source at
// srcURL, with its commits not flushed to disk meanwhile (the source's
// write speed is not measured; the target keeps its setting).
func myWriteBacklog(ctx context.Context, srcURL string, stmts []string) error {
	sdb, err := myConnectMulti(ctx, srcURL)
	if err != nil {
		return err
	}
	defer sdb.Close()
	var flush int
	if err := sdb.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit").Scan(&flush); err != nil {
		return fmt.Errorf("source: innodb_flush_log_at_trx_commit: %w", err)
	}
	if _, err := sdb.ExecContext(ctx, "SET GLOBAL innodb_flush_log_at_trx_commit = 2"); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	err = writeBacklog(stmts, func(b string) error { _, err := sdb.ExecContext(ctx, b); return err })
	if _, rerr := sdb.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("SET GLOBAL innodb_flush_log_at_trx_commit = %d", flush)); err == nil {
		err = rerr
	}
	return err
}

// writeBacklog runs stmts as one transaction each, many transactions per
// round trip (each still its own commit, so its own transaction in the
// log).
func writeBacklog(stmts []string, exec func(batch string) error) error {
	const perTrip = 200
	for lo := 0; lo < len(stmts); lo += perTrip {
		var b strings.Builder
		for _, s := range stmts[lo:min(lo+perTrip, len(stmts))] {
			b.WriteString("BEGIN; ")
			b.WriteString(s)
			b.WriteString("; COMMIT; ")
		}
		if err := exec(b.String()); err != nil {
			return fmt.Errorf("write the backlog (transactions %d–%d): %w", lo, min(lo+perTrip, len(stmts))-1, err)
		}
	}
	return nil
}

const nativeDDL = "CREATE TABLE items (id bigint PRIMARY KEY, k int NOT NULL, c varchar(120) NOT NULL, pad varchar(60) NOT NULL)"

// nativeRun is one system catching up one backlog over one link.
type nativeRun struct {
	system   string
	mode     string // modeShared, modePinned
	rtt      time.Duration
	run      int
	changes  int
	elapsed  time.Duration
	verified bool
	note     string
	cpu      runCPU // from start until the marker
	rss      uint64 // sluice's peak RSS (VmHWM) just before it is stopped; 0 for native replication or unknown
}

func (r nativeRun) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.changes) / r.elapsed.Seconds()
}

type nativeEnv struct {
	*env
	nc     nativeConfig
	sluice string // the binary
	shape  backlogShape
	out    []nativeRun
	// tables are sluice's --tables, comma-separated; "" for nativeTable.
	tables string
	mode   string   // of the runs under way
	pinner *pinning // the pinned mode's cores; nil when it does not run
	// pinned holds the roots of each side's process trees while a pinned
	// run's timed part runs; nil otherwise.
	pinned *pinnedSides
}

// pinnedSides are the process trees a pinned run put on each side's core.
type pinnedSides struct{ source, target []int }

func (e *env) benchNative(ctx context.Context) ([]nativeRun, error) {
	ne := &nativeEnv{env: e, nc: e.cfg.native, shape: shapeFor(e.cfg.native.scale)}
	bin, err := filepath.Abs(e.cfg.copy.sluice)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("-sluice %s: %w (run `make build` first)", e.cfg.copy.sluice, err)
	}
	ne.sluice = bin
	modes := ne.nc.modes
	if slices.Contains(modes, modePinned) {
		if ne.pinner, err = newPinning(); err != nil {
			fmt.Fprintf(os.Stderr, "==> native: pinned mode skipped: %v\n", err)
			modes = slices.DeleteFunc(slices.Clone(modes), func(m string) bool { return m == modePinned })
		} else {
			fmt.Fprintf(os.Stderr, "==> native: pinned mode: the source side on CPU %d, the target side on CPU %d\n", ne.pinner.source, ne.pinner.target)
		}
	}
	for run := 1; run <= ne.nc.runs; run++ {
		for _, mode := range modes {
			ne.mode = mode
			for _, eng := range ne.nc.engines {
				if ctx.Err() != nil {
					return ne.out, ctx.Err()
				}
				if eng == "postgres" {
					e.stopMariaDB()
					err = ne.postgresRun(ctx, run)
				} else {
					e.stopPostgres()
					err = ne.mariadbRun(ctx, run)
				}
				if err != nil {
					return ne.out, fmt.Errorf("run %d, %s, %s: %w", run, mode, eng, err)
				}
			}
		}
	}
	return ne.out, nil
}

// pinSides, in pinned mode, puts the bench and the process trees of src on
// the source core and those of dst on the target core, for the timed part
// of a run, and returns the function that gives them every CPU back (a
// no-op in shared mode). The backlog is written before, on every core: it
// is not timed.
func (ne *nativeEnv) pinSides(src, dst []int) (undo func(), err error) {
	if ne.mode != modePinned {
		return func() {}, nil
	}
	restore, err := ne.pinner.pin(src, dst)
	if err != nil {
		return nil, err
	}
	ne.pinned = &pinnedSides{source: src, target: dst}
	n, m, err := ne.pinner.check(src, dst)
	if err != nil {
		ne.pinned = nil
		restore()
		return nil, fmt.Errorf("pinned mode: %w", err)
	}
	fmt.Fprintf(os.Stderr, "    pinned: the bench and the source server (%d threads) on CPU %d, the target side (%d threads) on CPU %d\n", n, ne.pinner.source, m, ne.pinner.target)
	return func() {
		ne.pinned = nil
		restore()
	}, nil
}

// checkPinned, in a pinned run, checks that every thread of each side is
// still on its core (those forked or started since: walsenders, apply
// workers, replica threads, sluice), more (sluice) counting with the
// source; it returns a note for the run when one is not, "" otherwise.
func (ne *nativeEnv) checkPinned(more ...int) string {
	if ne.pinned == nil {
		return ""
	}
	n, m, err := ne.pinner.check(append(slices.Clone(ne.pinned.source), more...), ne.pinned.target)
	if err != nil {
		fmt.Fprintf(os.Stderr, "    **pinned check failed**: %v\n", err)
		return "pinned check failed: " + err.Error()
	}
	fmt.Fprintf(os.Stderr, "    pinned check: the bench, the source server and sluice: %d threads on CPU %d; the target side: %d on CPU %d\n", n, ne.pinner.source, m, ne.pinner.target)
	return ""
}

func (ne *nativeEnv) record(r nativeRun) {
	v := "equal"
	if !r.verified {
		v = "**MISMATCH**"
	}
	rss := ""
	if r.rss > 0 {
		rss = ", sluice peak RSS " + mb(r.rss)
	}
	fmt.Fprintf(os.Stderr, "    %s, %s, %s: %d changes in %.2f s, %s changes/s%s, %s\n", r.system, r.mode, linkLabel(r.rtt), r.changes, r.elapsed.Seconds(), thousands(r.rate()), rss, v)
	ne.out = append(ne.out, r)
}

// ---- PostgreSQL ---------------------------------------------------------------

func (ne *nativeEnv) postgresRun(ctx context.Context, run int) error {
	if err := ne.postgres(ctx); err != nil {
		return err
	}
	src, dst := ne.pgSrc, ne.pgDst
	name := ne.nextName()
	fmt.Fprintf(os.Stderr, "==> native, run %d, PostgreSQL: %d-change backlog (database %s)\n", run, ne.shape.changes(), name)
	if err := src.CreateDatabase(ctx, name); err != nil {
		return err
	}
	srcURL := src.URL(name)
	defer src.DropDatabase(context.WithoutCancel(ctx), name) //nolint:errcheck // cleanup only
	if err := execAll(ctx, srcURL, nativeDDL, "CREATE PUBLICATION native_pub FOR TABLE items"); err != nil {
		return err
	}
	// Before the backlog: a slot per subscription, and sluice's streams
	// started once from now (their slot, publication and checkpoint).
	type consumer struct {
		rtt      time.Duration
		slot     string // the subscription's; "" for sluice through PgBouncer
		stream   string // sluice's stream id, also its target database
		stateDir string
		// targetURL and targetAddr are where sluice connects: the target
		// server, or PgBouncer in front of it.
		targetURL, targetAddr string
	}
	// sluice's row through PgBouncer in transaction pooling, in front of
	// the same target server (as managed PostgreSQL services run it): the
	// proxy sits between sluice and PgBouncer.
	bouncer, err := dbtest.StartPgBouncer(ctx, dst.(*dbtest.Postgres))
	if err != nil {
		return err
	}
	defer bouncer.Stop() //nolint:errcheck // cleanup only
	bouncerAddr := net.JoinHostPort(bouncer.Host, strconv.Itoa(bouncer.Port))
	var cs []consumer
	defer func() {
		for _, c := range cs {
			dropSlot(context.WithoutCancel(ctx), srcURL, c.stream, []string{nativeTable})
			if c.slot != "" {
				pgDropSlot(context.WithoutCancel(ctx), srcURL, c.slot)
			}
			dst.DropDatabase(context.WithoutCancel(ctx), c.stream) //nolint:errcheck // cleanup only
			os.RemoveAll(c.stateDir)
		}
	}()
	for i, rtt := range ne.nc.rtts {
		for _, viaBouncer := range []bool{false, true} {
			c := consumer{rtt: rtt, slot: fmt.Sprintf("%s_sub%d", name, i), stream: fmt.Sprintf("%s_sl%d", name, i)}
			if viaBouncer {
				c.slot, c.stream = "", fmt.Sprintf("%s_pb%d", name, i)
			}
			dir, err := os.MkdirTemp("", "sluice-bench-native-")
			if err != nil {
				return fmt.Errorf("state dir: %w", err)
			}
			c.stateDir = dir
			c.targetURL, c.targetAddr = dst.URL(c.stream), dst.Addr()
			if viaBouncer {
				c.targetURL, c.targetAddr = bouncer.URL(c.stream), bouncerAddr
			}
			cs = append(cs, c)
			if c.slot != "" {
				if err := execAll(ctx, srcURL, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", c.slot)); err != nil {
					return fmt.Errorf("create the subscription's slot %s: %w", c.slot, err)
				}
			}
			if err := dst.CreateDatabase(ctx, c.stream); err != nil {
				return err
			}
			if err := execAll(ctx, dst.URL(c.stream), nativeDDL); err != nil {
				return err
			}
			if err := ne.sluiceFromNow(ctx, srcURL, c.targetURL, c.stream, c.stateDir); err != nil {
				return err
			}
		}
	}
	t0 := time.Now()
	if err := pgWriteBacklog(ctx, srcURL, ne.shape.statements(true)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "    backlog written in %.1f s\n", time.Since(t0).Seconds())
	unpin, err := ne.pinSides([]int{src.PID()}, []int{dst.PID(), bouncer.PID()})
	if err != nil {
		return err
	}
	defer unpin()

	// The launcher starts a subscription's worker at most once per
	// wal_retrieve_retry_interval (5 s by default) since it last started
	// one: back-to-back subscriptions would otherwise wait up to 5 s for
	// it, which a subscription enabled alone never does.
	if err := execAll(ctx, dst.URL("postgres"), "ALTER SYSTEM SET wal_retrieve_retry_interval = '10ms'", "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("subscriber: %w", err)
	}
	for _, c := range cs {
		system := sysPGBouncer
		if c.slot != "" {
			system = sysPGSluice
			r, err := ne.pgSubscription(ctx, run, srcURL, name, c.slot, c.rtt)
			if err != nil {
				return fmt.Errorf("subscription, %s: %w", linkLabel(c.rtt), err)
			}
			ne.record(r)
		}
		var bouncerPID []int // PgBouncer's CPU counts with the target's
		if c.slot == "" {
			bouncerPID = []int{bouncer.PID()}
		}
		sides := serverSides(src, dst, bouncerPID...)
		marker, closeMarker := pgMarker(dst.URL(c.stream))
		r, err := ne.sluiceCatchUp(ctx, system, run, srcURL, c.targetURL, c.targetAddr, c.stream, c.stateDir, c.rtt, sides,
			marker,
			func(ctx context.Context) (bool, error) { return pgEqual(ctx, srcURL, dst.URL(c.stream)) })
		closeMarker()
		if err != nil {
			return fmt.Errorf("%s, %s: %w", nativeTitle(system, ne.nc), linkLabel(c.rtt), err)
		}
		ne.record(r)
		// Its slot would hold WAL for the rest of the run.
		dropSlot(context.WithoutCancel(ctx), srcURL, c.stream, []string{nativeTable})
	}
	return nil
}

// pgSubscription creates a disabled subscription on slot (made before the
// backlog) in a fresh database of the second server, through a proxy in
// front of the source, and times it from ENABLE to the marker.
func (ne *nativeEnv) pgSubscription(ctx context.Context, run int, srcURL, srcDB, slot string, rtt time.Duration) (nativeRun, error) {
	res := nativeRun{system: sysPGNative, mode: ne.mode, rtt: rtt, run: run, changes: ne.shape.changes()}
	fmt.Fprintf(os.Stderr, "==> native, run %d, PostgreSQL subscription, %s\n", run, linkLabel(rtt))
	src, dst := ne.pgSrc.(*dbtest.Postgres), ne.pgDst.(*dbtest.Postgres) // the subscription names the superuser and the data directory
	proxy, err := wanproxy.Start(src.Addr(), rtt/2)
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	db := slot + "_db"
	if err := dst.CreateDatabase(ctx, db); err != nil {
		return res, err
	}
	defer dst.DropDatabase(context.WithoutCancel(ctx), db) //nolint:errcheck // cleanup only
	dstURL := dst.URL(db)
	host, port, _ := strings.Cut(proxy.Addr(), ":")
	conninfo := fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable", host, port, src.User, pgQuoteConn(src.Password), srcDB)
	sub := "sub_" + slot
	create := fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION native_pub WITH (create_slot = false, slot_name = '%s', copy_data = false, enabled = false)",
		sub, strings.ReplaceAll(conninfo, "'", "''"), slot)
	if err := execAll(ctx, dstURL, nativeDDL); err != nil {
		return res, err
	}
	if err := execAll(ctx, dstURL, create); err != nil {
		return res, errors.New("create subscription: " + strings.ReplaceAll(err.Error(), src.Password, "***"))
	}
	// DROP SUBSCRIPTION stops its worker and drops its slot on the source.
	defer execAll(context.WithoutCancel(ctx), dstURL, "DROP SUBSCRIPTION "+sub) //nolint:errcheck // cleanup only
	conn, err := connect(ctx, dstURL)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	t0, meter := time.Now(), startCPU(serverSides(src, dst))
	if _, err := conn.Exec(ctx, "ALTER SUBSCRIPTION "+sub+" ENABLE"); err != nil {
		return res, fmt.Errorf("enable subscription %s: %w", sub, err)
	}
	// A failing apply worker retries for ever; its errors are counted.
	broken := func(ctx context.Context) error {
		var n int64
		err := conn.QueryRow(ctx, "SELECT coalesce(sum(apply_error_count), 0) FROM pg_stat_subscription_stats WHERE subname = $1", sub).Scan(&n)
		if err == nil && n > 0 {
			err = fmt.Errorf("subscription %s: its apply worker failed %d times (the subscriber's log, %s, says why)", sub, n, filepath.Join(dst.Dir, "postgres.log"))
		}
		return err
	}
	seen, err := pollMarker(ctx, ne.nc.timeout, func(ctx context.Context) (bool, error) { return pgMarkerOn(ctx, conn) }, broken)
	if err != nil {
		return res, err
	}
	res.elapsed, res.cpu = seen.Sub(t0), meter.stop()
	res.note = ne.checkPinned()
	res.verified, err = pgEqual(ctx, srcURL, dstURL)
	return res, err
}

func pgQuoteConn(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func pgDropSlot(ctx context.Context, srcURL, slot string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := execAll(ctx, srcURL, fmt.Sprintf("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '%s'", slot))
		if err == nil || time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Millisecond) // retry interval while a walsender still holds the slot
	}
}

// pgMarker is a check for the marker on one connection to u, and the
// function that closes it (see onOneConn).
func pgMarker(u string) (check func(context.Context) (bool, error), closeConn func()) {
	return onOneConn(func(ctx context.Context) (*pgx.Conn, error) { return connect(ctx, u) }, pgMarkerOn,
		func(c *pgx.Conn) { c.Close(context.Background()) })
}

// onOneConn is check run on one connection, opened at its first call and
// kept, and the function that closes it. Polling on a new connection each
// time would cost the target a connection's start every poll (a backend
// on PostgreSQL): CPU the native rows, which poll on one, do not pay.
func onOneConn[C any](open func(context.Context) (C, error), check func(context.Context, C) (bool, error), closeC func(C)) (func(context.Context) (bool, error), func()) {
	var conn C
	opened := false
	return func(ctx context.Context) (bool, error) {
			if !opened {
				c, err := open(ctx)
				if err != nil {
					return false, err
				}
				conn, opened = c, true
			}
			return check(ctx, conn)
		}, func() {
			if opened {
				closeC(conn)
			}
		}
}

func pgMarkerOn(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM items WHERE id = $1)", markerID).Scan(&ok)
	return ok, err
}

// pgEqual compares tables (nativeTable when none is named) on both sides,
// read in binary form, and prints the first differences.
func pgEqual(ctx context.Context, srcURL, dstURL string, tables ...string) (bool, error) {
	if len(tables) == 0 {
		tables = []string{nativeTable}
	}
	diffs, err := pgDiffs(ctx, srcURL, dstURL, tables...)
	if err != nil {
		return false, err
	}
	if !diffs.Equal() {
		fmt.Fprintf(os.Stderr, "    MISMATCH:\n%s\n", firstLines(diffs.String(), 10))
	}
	return diffs.Equal(), nil
}

func firstLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = append(l[:n], "…")
	}
	return strings.Join(l, "\n")
}

// ---- MariaDB ------------------------------------------------------------------

// replicaServerID is the second server's server_id while it replicates
// (dbtest starts every server with 1; a replica must differ from its
// source).
const replicaServerID = 2

func (ne *nativeEnv) mariadbRun(ctx context.Context, run int) error {
	if err := ne.mariadb(ctx); err != nil {
		return err
	}
	src, dst := ne.mySrc, ne.myDst
	name := ne.nextName()
	fmt.Fprintf(os.Stderr, "==> native, run %d, MariaDB: %d-change backlog (database %s)\n", run, ne.shape.changes(), name)
	// The replica and sluice both write the source's database name on the
	// second server (replication keeps names; sluice qualifies the target
	// table with the source's schema), one after the other.
	for _, srv := range []dbtest.Server{src, dst} {
		if err := srv.DropDatabase(ctx, name); err != nil {
			return err
		}
		if err := srv.CreateDatabase(ctx, name); err != nil {
			return err
		}
		defer srv.DropDatabase(context.WithoutCancel(ctx), name) //nolint:errcheck // cleanup only
		if err := myExecAll(ctx, srv.URL(name), nativeDDL); err != nil {
			return err
		}
	}
	srcURL, dstURL := src.URL(name), dst.URL(name)
	type consumer struct {
		rtt      time.Duration
		stream   string
		stateDir string
	}
	var cs []consumer
	defer func() {
		for _, c := range cs {
			os.RemoveAll(c.stateDir)
		}
	}()
	for i, rtt := range ne.nc.rtts {
		c := consumer{rtt: rtt, stream: fmt.Sprintf("%s_sl%d", name, i)}
		dir, err := os.MkdirTemp("", "sluice-bench-native-")
		if err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		c.stateDir = dir
		cs = append(cs, c)
		if err := ne.sluiceFromNow(ctx, srcURL, dstURL, c.stream, c.stateDir); err != nil {
			return err
		}
	}
	sdb, err := myConnectMulti(ctx, srcURL)
	if err != nil {
		return err
	}
	defer sdb.Close()
	var file string
	var pos int64
	if err := scanMasterStatus(ctx, sdb, &file, &pos); err != nil {
		return err
	}
	t0 := time.Now()
	if err := myWriteBacklog(ctx, srcURL, ne.shape.statements(false)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "    backlog written in %.1f s (binlog from %s:%d)\n", time.Since(t0).Seconds(), file, pos)
	unpin, err := ne.pinSides([]int{src.PID()}, []int{dst.PID()})
	if err != nil {
		return err
	}
	defer unpin()

	type replica struct {
		system  string
		threads int
	}
	replicas := []replica{{sysMyNative, 0}}
	if ne.nc.myThreads > 0 {
		replicas = append(replicas, replica{sysMyNativeTuned, ne.nc.myThreads})
	}
	for _, c := range cs {
		for _, rp := range replicas {
			if err := myExecAll(ctx, dstURL, "TRUNCATE TABLE items"); err != nil {
				return err
			}
			r, err := ne.myReplica(ctx, run, rp.system, rp.threads, srcURL, dstURL, file, pos, c.rtt)
			if err != nil {
				return fmt.Errorf("replica (slave_parallel_threads %d), %s: %w", rp.threads, linkLabel(c.rtt), err)
			}
			ne.record(r)
		}
		if err := myExecAll(ctx, dstURL, "TRUNCATE TABLE items"); err != nil {
			return err
		}
		marker, closeMarker := myMarker(dstURL)
		r, err := ne.sluiceCatchUp(ctx, sysMySluice, run, srcURL, dstURL, dst.Addr(), c.stream, c.stateDir, c.rtt, serverSides(src, dst),
			marker,
			func(ctx context.Context) (bool, error) { return myEqual(ctx, srcURL, dstURL) })
		closeMarker()
		if err != nil {
			return fmt.Errorf("sluice, %s: %w", linkLabel(c.rtt), err)
		}
		ne.record(r)
	}
	return nil
}

func scanMasterStatus(ctx context.Context, db *sql.DB, file *string, pos *int64) error {
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		return fmt.Errorf("source binlog position: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	if !rows.Next() {
		return errors.New("source binlog position: SHOW MASTER STATUS returned no row (is log_bin on?)")
	}
	vals := make([]any, len(cols))
	vals[0], vals[1] = file, pos
	for i := 2; i < len(vals); i++ {
		vals[i] = new(sql.RawBytes)
	}
	if err := rows.Scan(vals...); err != nil {
		return fmt.Errorf("source binlog position: %w", err)
	}
	return rows.Close()
}

// myReplica points the second server at the source through a proxy, at
// the binlog position taken before the backlog, and times it from START
// SLAVE to the marker.
func (ne *nativeEnv) myReplica(ctx context.Context, run int, system string, threads int, srcURL, dstURL, file string, pos int64, rtt time.Duration) (nativeRun, error) {
	res := nativeRun{system: system, mode: ne.mode, rtt: rtt, run: run, changes: ne.shape.changes()}
	fmt.Fprintf(os.Stderr, "==> native, run %d, MariaDB replica (slave_parallel_threads %d), %s\n", run, threads, linkLabel(rtt))
	src := ne.mySrc.(*dbtest.MariaDB) // the replica names the root user
	proxy, err := wanproxy.Start(src.Addr(), rtt/2)
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	db, err := myConnect(ctx, dstURL)
	if err != nil {
		return res, err
	}
	defer db.Close()
	host, port, _ := strings.Cut(proxy.Addr(), ":")
	quote := func(s string) string {
		return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
	}
	setup := []string{
		"STOP SLAVE",
		"RESET SLAVE ALL",
		fmt.Sprintf("SET GLOBAL server_id = %d", replicaServerID),
		fmt.Sprintf("SET GLOBAL slave_parallel_threads = %d", threads),
	}
	if threads > 0 {
		setup = append(setup, "SET GLOBAL slave_parallel_mode = 'optimistic'")
	}
	setup = append(setup, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = %s, MASTER_PASSWORD = %s, MASTER_LOG_FILE = %s, MASTER_LOG_POS = %d, MASTER_USE_GTID = no",
		quote(host), port, quote(src.User), quote(src.Password), quote(file), pos))
	for _, s := range setup {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return res, fmt.Errorf("replica: %s: %w", strings.ReplaceAll(firstLine(s), src.Password, "***"), err)
		}
	}
	defer func() {
		c := context.WithoutCancel(ctx)
		db.ExecContext(c, "STOP SLAVE")      //nolint:errcheck // cleanup only
		db.ExecContext(c, "RESET SLAVE ALL") //nolint:errcheck // cleanup only
	}()
	t0, meter := time.Now(), startCPU(serverSides(src, ne.myDst))
	if _, err := db.ExecContext(ctx, "START SLAVE"); err != nil {
		return res, fmt.Errorf("replica: START SLAVE: %w", err)
	}
	seen, err := pollMarker(ctx, ne.nc.timeout, func(ctx context.Context) (bool, error) { return myMarkerOn(ctx, db) },
		func(ctx context.Context) error { return replicaError(ctx, db) })
	if err != nil {
		return res, err
	}
	res.elapsed, res.cpu = seen.Sub(t0), meter.stop()
	res.note = ne.checkPinned()
	res.verified, err = myEqual(ctx, srcURL, dstURL)
	return res, err
}

// replicaError is the replica's last I/O or SQL thread error, nil while
// there is none.
func replicaError(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	if !rows.Next() {
		return rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return err
	}
	var errs []string
	for i, c := range cols {
		if (c == "Last_IO_Error" || c == "Last_SQL_Error") && vals[i].String != "" {
			errs = append(errs, c+": "+vals[i].String)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("replica stopped: %s", strings.Join(errs, "; "))
	}
	return nil
}

func myConnectMulti(ctx context.Context, u string) (*sql.DB, error) {
	cfg, err := connstr.ParseMySQL(u)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	cfg.MultiStatements = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", endpoint.MaskURL(u), err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect %s: %w", endpoint.MaskURL(u), err)
	}
	return db, nil
}

// myMarker is pgMarker for MariaDB: a check on one connection pool to u.
func myMarker(u string) (check func(context.Context) (bool, error), closeDB func()) {
	return onOneConn(func(ctx context.Context) (*sql.DB, error) { return myConnect(ctx, u) }, myMarkerOn,
		func(db *sql.DB) { db.Close() })
}

func myMarkerOn(ctx context.Context, db *sql.DB) (bool, error) {
	var ok bool
	err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM items WHERE id = ?)", markerID).Scan(&ok)
	return ok, err
}

func myEqual(ctx context.Context, srcURL, dstURL string) (bool, error) {
	return sameMyTables(ctx, srcURL, dstURL)
}

// ---- sluice -------------------------------------------------------------------

// sluiceFromNow starts the stream once with --from-now, directly (nothing
// timed), until it has recorded its start, and stops it: its slot (or its
// binlog position) and checkpoint are then before the backlog.
func (ne *nativeEnv) sluiceFromNow(ctx context.Context, srcURL, dstURL, stream, stateDir string) error {
	p, err := ne.startSluice(stream, stateDir, "sluice-from-now.log", srcURL, dstURL, "--from-now")
	if err != nil {
		return err
	}
	defer p.stop() //nolint:errcheck // the normal path stops it and checks
	deadline := time.Now().Add(2 * time.Minute)
	for !p.logged(`"msg":"streaming"`) {
		if err := p.failed(); err != nil {
			return fmt.Errorf("sluice --from-now: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sluice --from-now: not streaming within 2 min; log:\n%s", p.lw.tail(15))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if code, err := p.stop(); err != nil || code != 0 {
		return fmt.Errorf("sluice --from-now: exit %d after SIGTERM (%v); log:\n%s", code, err, p.lw.tail(15))
	}
	return nil
}

// sluiceCatchUp starts the stream again, with --initial-copy off, through
// a proxy in front of the target, and times it from process start to the
// marker on the target.
func (ne *nativeEnv) sluiceCatchUp(ctx context.Context, system string, run int, srcURL, dstURL, dstAddr, stream, stateDir string, rtt time.Duration, sides cpuSides,
	marker func(context.Context) (bool, error), equal func(context.Context) (bool, error)) (nativeRun, error) {
	res := nativeRun{system: system, mode: ne.mode, rtt: rtt, run: run, changes: ne.shape.changes()}
	fmt.Fprintf(os.Stderr, "==> native, run %d, %s, %s\n", run, nativeTitle(system, ne.nc), linkLabel(rtt))
	proxy, proxyURL, err := proxied(dstAddr, dstURL, rtt)
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	t0, meter := time.Now(), startCPU(sides)
	p, err := ne.startSluice(stream, stateDir, "sluice.log", srcURL, proxyURL, append([]string{"--initial-copy", "off"}, ne.nc.extra...)...)
	if err != nil {
		return res, err
	}
	meter.add(p.cmd.Process.Pid)
	defer p.stop() //nolint:errcheck // the normal path stops it and checks
	seen, err := pollMarker(ctx, ne.nc.timeout, marker, func(context.Context) error { return p.failed() })
	if err != nil {
		return res, fmt.Errorf("%w; log:\n%s", err, p.lw.tail(15))
	}
	res.elapsed, res.cpu = seen.Sub(t0), meter.stop()
	// With lanes, the marker's lane can commit it while another lane
	// still applies earlier changes: the catch-up ends when the tables are
	// equal, checked while sluice still runs (the marker's time when they
	// are at once, else the start of the first check that finds them so).
	// Stopping at the marker would cut those lanes off.
	deadline := time.Now().Add(time.Minute)
	for first := true; ; first = false {
		began := time.Now()
		ok, err := equal(ctx)
		if err != nil {
			return res, err
		}
		if ok {
			res.verified = true
			if !first {
				res.elapsed = began.Sub(t0)
				res.note = "lanes still applying at the marker: timed to the first equal check"
			}
			break
		}
		if time.Now().After(deadline) || p.failed() != nil {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Read while it still runs: its peak over the whole catch-up and the
	// equality checks, which the issue bounds (≤ 100 MB).
	res.rss = vmHWM(p.cmd.Process.Pid)
	notes := []string{res.note, ne.checkPinned(p.cmd.Process.Pid)}
	if code, err := p.stop(); err != nil || code != 0 {
		notes = append(notes, fmt.Sprintf("exit %d after SIGTERM (%v)", code, err))
	}
	res.note = strings.Join(slices.DeleteFunc(notes, func(n string) bool { return n == "" }), "; ")
	return res, nil
}

// proxied starts a WAN proxy of rtt in front of addr, the server of u,
// and returns it and u through it.
func proxied(addr, u string, rtt time.Duration) (*wanproxy.Proxy, string, error) {
	proxy, err := wanproxy.Start(addr, rtt/2)
	if err != nil {
		return nil, "", err
	}
	pu, err := withHost(u, proxy.Addr())
	if err != nil {
		proxy.Close()
		return nil, "", err
	}
	return proxy, pu, nil
}

// sluiceProc is a running bin/sluice.
type sluiceProc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	lw      *logWatch
}

func (ne *nativeEnv) startSluice(stream, stateDir, logName, srcURL, dstURL string, extra ...string) (*sluiceProc, error) {
	logPath := filepath.Join(stateDir, logName)
	if ne.nc.logDir != "" {
		if err := os.MkdirAll(ne.nc.logDir, 0o755); err != nil {
			return nil, fmt.Errorf("-native-logs: %w", err)
		}
		logPath = filepath.Join(ne.nc.logDir, stream+"-"+logName)
	}
	tables := ne.tables
	if tables == "" {
		tables = nativeTable
	}
	args := append([]string{"sync", "start", "--source", srcURL, "--target", dstURL, "--tables", tables,
		"--state-dir", filepath.Join(stateDir, "state"), "--stream-id", stream, "--log-format", "json"}, extra...)
	if ne.cfg.verbose {
		fmt.Fprintf(os.Stderr, "    %s %s\n", ne.sluice, strings.Join(maskArgs(args), " "))
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("sluice log: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(ne.sluice, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a Ctrl-C reaches it only through the
	// bench, which stops it with SIGTERM; SIGKILL if the bench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", ne.sluice, err)
	}
	p := &sluiceProc{cmd: cmd, done: make(chan struct{}), lw: &logWatch{path: logPath}}
	go func() { p.waitErr = cmd.Wait(); close(p.done) }()
	if ne.pinned != nil {
		// Forked by a pinned bench thread, it starts on the source core
		// already; set again so it does not hang on that inheritance.
		set := oneCPU(ne.pinner.source)
		if err := setTreeAffinity(cmd.Process.Pid, &set); err != nil {
			p.stop() //nolint:errcheck // it is not to be used
			return nil, fmt.Errorf("pin sluice to CPU %d: %w", ne.pinner.source, err)
		}
	}
	return p, nil
}

// logged reports whether a log line so far holds s.
func (p *sluiceProc) logged(s string) bool {
	p.lw.scan()
	return slices.ContainsFunc(p.lw.lines, func(l string) bool { return strings.Contains(l, s) })
}

// failed is why sluice cannot get there any more: it exited or logged an
// error; nil while it runs.
func (p *sluiceProc) failed() error {
	select {
	case <-p.done:
		p.lw.scan()
		return fmt.Errorf("sluice exited (%v)", p.waitErr)
	default:
	}
	p.lw.scan()
	if p.lw.fatal != "" {
		return fmt.Errorf("sluice logged %q", p.lw.fatal)
	}
	return nil
}

func (p *sluiceProc) stop() (int, error) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			return -1, errors.New("sluice did not stop within 30 s of SIGTERM; killed")
		}
	}
	return p.cmd.ProcessState.ExitCode(), nil
}

// ---- waiting ------------------------------------------------------------------

// pollMarker polls until marker reports the row there and returns when it
// first did; it fails after timeout, or as soon as broken (when given)
// returns an error.
func pollMarker(ctx context.Context, timeout time.Duration, marker func(context.Context) (bool, error), broken func(context.Context) error) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for i := 0; ; i++ {
		ok, err := marker(ctx)
		if ok && err == nil {
			return time.Now(), nil
		}
		if err != nil {
			lastErr = err
		}
		// Every 20 polls: a broken consumer fails now, not at the deadline.
		if broken != nil && i%20 == 0 {
			if err := broken(ctx); err != nil {
				return time.Time{}, err
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("marker row not on the target within %v (-native-timeout; last poll error: %v)", timeout, lastErr)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// ---- report -------------------------------------------------------------------

func linkLabel(d time.Duration) string {
	return fmt.Sprintf("%g ms proxy", float64(d)/float64(time.Millisecond))
}

func nativeTitle(system string, nc nativeConfig) string {
	switch system {
	case sysPGNative:
		return "PostgreSQL logical replication (subscription)"
	case sysPGSluice:
		return "sluice, pgoutput → PostgreSQL"
	case sysPGBouncer:
		return "sluice, pgoutput → PgBouncer (pool_mode transaction) → PostgreSQL"
	case sysMyNative:
		return "MariaDB replication (replica, slave_parallel_threads 0: the default)"
	case sysMyNativeTuned:
		return fmt.Sprintf("MariaDB replication (replica, slave_parallel_threads %d, optimistic)", nc.myThreads)
	case sysMySluice:
		return "sluice, binlog → MariaDB"
	}
	return system
}

// median is the middle value of xs (the mean of the two middle ones for
// an even count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// nativeCell is the median rate of a system in a mode at an RTT over its
// verified runs, and how many runs there were and how many verified.
func nativeCell(rs []nativeRun, system, mode string, rtt time.Duration) (rate float64, runs, verified int) {
	var xs []float64
	for _, r := range rs {
		if r.system == system && r.mode == mode && r.rtt == rtt {
			runs++
			if r.verified {
				verified++
				xs = append(xs, r.rate())
			}
		}
	}
	return median(xs), runs, verified
}

// modesIn is the modes rs has runs of, in nativeModes' order.
func modesIn(rs []nativeRun) []string {
	var out []string
	for _, m := range nativeModes {
		if slices.ContainsFunc(rs, func(r nativeRun) bool { return r.mode == m }) {
			out = append(out, m)
		}
	}
	return out
}

// kRate is a rate as the issue writes it: 44.8k/s.
func kRate(f float64) string { return fmt.Sprintf("%.1fk/s", f/1000) }

// goalNativeRSS is issue 32's bound on sluice's peak RSS: 100 MB, decimal
// (stricter than MiB).
const goalNativeRSS = 100e6

// rssCell is a peak RSS, marked over the goal; a dash when unknown.
func rssCell(b uint64) string {
	switch {
	case b == 0:
		return "–"
	case b > goalNativeRSS:
		return "**" + mb(b) + " ✗**"
	}
	return mb(b)
}

func renderNative(nc nativeConfig, rs []nativeRun, took time.Duration) string {
	var b strings.Builder
	shape := shapeFor(nc.scale)
	fmt.Fprintf(&b, "\n## sluice against native replication (issue 14), %s (section took %s)\n\n", time.Now().Format("2006-01-02 15:04"), took.Round(time.Second))
	fmt.Fprintf(&b, "Backlog per run and engine: %s inserts, then %s updates, then %s deletes in %d-change source transactions, then a marker row, in `items (id bigint primary key, k int, c varchar(120), pad varchar(60))`; written while every consumer is stopped, positioned before it. "+
		"Each system crosses one WAN proxy (half the RTT each way): native replication pulls across it (the subscription's CONNECTION, the replica's MASTER_PORT point at the proxy in front of the source); sluice (`sync start --initial-copy off`, resuming a stream started with `--from-now` before the backlog) pushes across it to the target. "+
		"Timed from start (ENABLE, START SLAVE, sluice's process start) until the marker is on the target; then the table is checked equal (CompareTables on PostgreSQL, CHECKSUM TABLE on MariaDB). "+
		"Rates are backlog changes (%s) per second, the median of %d run(s), on a shared, noisy machine. MariaDB's replica and sluice's MariaDB target are the same server (binlog on, log_slave_updates off), as are PostgreSQL's subscriber and sluice's PostgreSQL target; the PgBouncer row runs through a throwaway PgBouncer (pool_mode = transaction, ignore_startup_parameters = extra_float_digits) in front of that server, the proxy between sluice and PgBouncer.\n\n",
		thousands(float64(shape.inserts)), thousands(float64(shape.updates)), thousands(float64(shape.deletes)), nativeTxSize, thousands(float64(shape.changes())), nc.runs)
	modes := modesIn(rs)
	if slices.Contains(modes, modePinned) {
		b.WriteString("Modes (issue 32): *shared*, every process on any core; *pinned*, the timed part of each run with the two sides on separate cores, as two machines would be: the source server (every process and thread, those forked later too), sluice and the WAN proxy (in the bench process) on one core, the target server (its subscription apply worker, its replica threads) and PgBouncer on the other. Pinned, sluice sees one CPU (GOMAXPROCS 1).\n\n")
	}
	first, last := nc.rtts[0], nc.rtts[len(nc.rtts)-1]
	b.WriteString("| | mode |")
	for _, rtt := range nc.rtts {
		fmt.Fprintf(&b, " %s |", linkLabel(rtt))
	}
	ratioCol := len(nc.rtts) > 1
	if ratioCol {
		fmt.Fprintf(&b, " %s ÷ %s |", rttLabel(last), rttLabel(first))
	}
	b.WriteString("\n|---|---|")
	for range nc.rtts {
		b.WriteString("---:|")
	}
	if ratioCol {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, sys := range nativeSystems {
		for _, mode := range modes {
			if _, n, _ := nativeCell(rs, sys, mode, first); n == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s |", nativeTitle(sys, nc), mode)
			for _, rtt := range nc.rtts {
				rate, n, v := nativeCell(rs, sys, mode, rtt)
				switch {
				case n == 0:
					b.WriteString(" — |")
				case v < n:
					fmt.Fprintf(&b, " %s (**%d of %d runs MISMATCH**) |", kRateOrDash(rate, v), n-v, n)
				default:
					fmt.Fprintf(&b, " %s |", kRate(rate))
				}
			}
			if ratioCol {
				a, _, _ := nativeCell(rs, sys, mode, first)
				z, _, _ := nativeCell(rs, sys, mode, last)
				if a > 0 && z > 0 {
					fmt.Fprintf(&b, " %.2f |", z/a)
				} else {
					b.WriteString(" — |")
				}
			}
			b.WriteString("\n")
		}
	}

	mark := func(ok bool) string {
		if ok {
			return "✓"
		}
		return "**✗ under the goal**"
	}
	fmt.Fprintf(&b, "\n### Ratios and goals (issues 14, 32), at the %s\n\n", linkLabel(last))
	for _, mode := range modes {
		for _, p := range []struct {
			sluice, native, engine string
			goal                   float64
		}{
			{sysPGSluice, sysPGNative, "PostgreSQL", goalNativePG},
			{sysMySluice, sysMyNative, "MariaDB", goalNativeMy},
			{sysMySluice, sysMyNativeTuned, "MariaDB", 0},
		} {
			s, _, _ := nativeCell(rs, p.sluice, mode, last)
			n, _, _ := nativeCell(rs, p.native, mode, last)
			if s == 0 || n == 0 {
				continue
			}
			if p.goal > 0 {
				fmt.Fprintf(&b, "* %s, %s: sluice ÷ native at %s: **%.2f×** (%s vs %s; goal ≥ %.1f×) %s\n", p.engine, mode, rttLabel(last), s/n, kRate(s), kRate(n), p.goal, mark(s/n >= p.goal))
			} else {
				fmt.Fprintf(&b, "* %s, %s: sluice ÷ the tuned replica (slave_parallel_threads %d) at %s: **%.2f×** (%s vs %s)\n", p.engine, mode, nc.myThreads, rttLabel(last), s/n, kRate(s), kRate(n))
			}
		}
		if ratioCol {
			for _, sys := range []string{sysPGSluice, sysMySluice} {
				a, _, _ := nativeCell(rs, sys, mode, first)
				z, _, _ := nativeCell(rs, sys, mode, last)
				if a > 0 && z > 0 {
					fmt.Fprintf(&b, "* %s, %s: %s ÷ %s: **%.2f** (goal ≥ %.1f) %s\n", nativeTitle(sys, nc), mode, rttLabel(last), rttLabel(first), z/a, goalNativeLink, mark(z/a >= goalNativeLink))
				}
			}
		}
	}

	renderNativeCPU(&b, nc, rs)

	fmt.Fprintln(&b, "\n### Every run")
	fmt.Fprintln(&b, "\nCPU: ms per 1,000 changes of the source server / sluice / the target server (with PgBouncer), and the cores the machine kept busy, from start to the marker. sluice peak RSS: its VmHWM just before it was stopped (goal ≤ 100 MB).")
	fmt.Fprintln(&b, "\n| run | system | mode | link | changes | seconds | changes/s | CPU | cores busy | sluice peak RSS | verified |")
	fmt.Fprintln(&b, "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rs {
		v := "equal"
		if !r.verified {
			v = "**MISMATCH**"
		}
		if r.note != "" {
			v += " (" + r.note + ")"
		}
		cpu, busy := "—", "—"
		if u := r.cpu; u.ok {
			cpu = fmt.Sprintf("%.1f / %s / %.1f", msPerK(u.source, r.changes), applierCell(r.system, msPerK(u.applier, r.changes)), msPerK(u.target, r.changes))
			busy = fmt.Sprintf("%.2f", u.cores())
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %d | %.2f | %s | %s | %s | %s | %s |\n", r.run, nativeTitle(r.system, nc), r.mode, linkLabel(r.rtt), r.changes, r.elapsed.Seconds(), thousands(r.rate()), cpu, busy, rssCell(r.rss), v)
	}
	fmt.Fprintln(&b)
	return b.String()
}

// applierCell is the applier's CPU cell, ms: none for native
// replication, whose applying is the servers' own work. One decimal: the
// goal (goalNativeCPU) is a few ms.
func applierCell(system string, ms float64) string {
	if !isSluice(system) {
		return "–"
	}
	return fmt.Sprintf("%.1f", ms)
}

// goalNativeCPU is issue 32's bound on sluice's own CPU, ms per 1,000
// changes.
const goalNativeCPU = 3.0

// applierGoalCell is applierCell marked when over goalNativeCPU, as
// shown (rounded to its one decimal): a 3.0 is not marked.
func applierGoalCell(system string, ms float64) string {
	c := applierCell(system, ms)
	if isSluice(system) && math.Round(ms*10)/10 > goalNativeCPU {
		return "**" + c + " ✗**"
	}
	return c
}

// renderNativeCPU is the table of where the CPU went: on a machine whose
// cores the source server, the target server and the applier share, a run
// that keeps them all busy is bound by the CPU each change costs, not by
// the link, and the systems compare by that cost. Pinned, each side has
// one core: a side near 1 core busy is the bottleneck.
func renderNativeCPU(b *strings.Builder, nc nativeConfig, rs []nativeRun) {
	header := false
	modes := modesIn(rs)
	for _, rtt := range nc.rtts {
		for _, sys := range nativeSystems {
			for _, mode := range modes {
				var source, applier, target, total, cores, steal, rss []float64
				for _, r := range rs {
					u := r.cpu
					if r.system != sys || r.mode != mode || r.rtt != rtt || !u.ok || !r.verified {
						continue
					}
					source = append(source, msPerK(u.source, r.changes))
					applier = append(applier, msPerK(u.applier, r.changes))
					target = append(target, msPerK(u.target, r.changes))
					total = append(total, msPerK(u.source+u.applier+u.target, r.changes))
					cores = append(cores, u.cores())
					steal = append(steal, u.steal.Seconds()/u.wall.Seconds())
					if r.rss > 0 {
						rss = append(rss, float64(r.rss))
					}
				}
				if len(source) == 0 {
					continue
				}
				if !header {
					header = true
					fmt.Fprintf(b, "\n### Where the CPU went: ms per 1,000 changes, median of %d run(s)\n\n", nc.runs)
					fmt.Fprintf(b, "From start to the marker, by side (each process with its children: a PostgreSQL server's backends, walsenders and workers), and the cores the whole machine kept busy (of %d) and had stolen by its host. A run that kept nearly every core busy was bound by CPU, not by the link: its rate is the machine's CPU over what a change costs the three sides together. sluice: its own CPU (goal ≤ %.0f ms, issue 32); sluice peak RSS: the median of its runs' VmHWM (goal ≤ 100 MB).\n\n", runtime.NumCPU(), goalNativeCPU)
					b.WriteString("| system | mode | link | source server | sluice | target server | total | cores busy | stolen | sluice peak RSS |\n")
					b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
				}
				fmt.Fprintf(b, "| %s | %s | %s | %.1f | %s | %.1f | %.1f | %.2f | %.2f | %s |\n", nativeTitle(sys, nc), mode, linkLabel(rtt),
					median(source), applierGoalCell(sys, median(applier)), median(target), median(total), median(cores), median(steal), rssCell(uint64(median(rss))))
			}
		}
	}
}

// isSluice reports whether system is one of sluice's rows.
func isSluice(system string) bool {
	return system == sysPGSluice || system == sysPGBouncer || system == sysMySluice
}

func kRateOrDash(rate float64, verified int) string {
	if verified == 0 {
		return "—"
	}
	return kRate(rate)
}
