package main

// The keymoves section (issue 29): what primary-key changes cost sluice
// across the link.
//
// Backlog, per engine: the native section's lab mix (-keymoves-scale ×
// 100,000 inserts, 50,000 updates and 20,000 deletes in 10-change source
// transactions, then a marker row) in items (id, k, c, pad, body), where
// every 20th row has a 3.2 kB incompressible body (stored out of line,
// TOASTed, on PostgreSQL). Two backlogs are written side by side:
//
//   - moves: every second update transaction moves one of its rows to a
//     new primary key (id + 1,000,000) instead of updating it in place:
//     5% of the updates, alternately a row with a large body (PostgreSQL
//     logs the move without it: only the target's old row holds it) and
//     one without. On MariaDB every fourth update transaction also swaps
//     the unique names of two rows of tags through a temporary name.
//   - plain: the same rows updated in place instead, with the same number
//     of changes.
//
// Each is caught up by sluice as the native section does it (a stream
// started --from-now before the backlog and restarted after it, through
// the proxy in front of the target, with -keymoves-sluice-flags), timed
// until the lanes' checkpoint rows on the target count every change of the
// backlog, and the tables checked equal. The ratio moves ÷ plain is the
// issue's goal.
//
// Live (-keymoves-live, PostgreSQL): pgbench -c 4 on pgbench's three keyed
// tables for -keymoves-live-for, and a session that moves rows of a
// 200-row table of ~6 kB TOASTed bodies to new keys about ten times a
// second (two moves a transaction, the second of the row just moved), into
// a stream over the proxy; once as it is, once with -keymoves-kills ×
// kill -9 during the load. Reported: the source's and sluice's rates
// during the load, and how long after it the target equalled the source.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

const secKeyMoves = "keymoves"

// goalKeyMoves is the goal: a backlog with key moves applies at
// least this fraction of the rate of the same backlog without them.
const goalKeyMoves = 0.8

const (
	kmMoveOffset = 1_000_000 // a moved row's new id is its id plus this
	kmBigEvery   = 20        // rows whose id is a multiple of this have a large body
	kmTags       = 1000      // rows of tags (MariaDB)
)

// keyMovesConfig is the keymoves section's part of the command line.
type keyMovesConfig struct {
	scale    float64
	runs     int
	rtts     []time.Duration
	engines  []string
	timeout  time.Duration
	extra    []string // flags of every sluice run
	logDir   string
	live     bool
	liveFor  time.Duration
	kills    int
	pgbenchC int
	pgbenchR int // pgbench -R: transactions/s, 0 for as many as it can
}

func keyMovesFlags(kc *keyMovesConfig) func() error {
	var rtts, engines, extra string
	flag.Float64Var(&kc.scale, "keymoves-scale", 1, "keymoves section: backlog scale: 100,000 inserts, 50,000 updates and 20,000 deletes times this")
	flag.IntVar(&kc.runs, "keymoves-runs", 1, "keymoves section: runs; each cell is the median")
	flag.StringVar(&rtts, "keymoves-rtt", "0,96ms", "keymoves section: round-trip times of the proxy, comma-separated")
	flag.StringVar(&engines, "keymoves-engines", "postgres,mariadb", "keymoves section: engines of the backlog runs, comma-separated: postgres, mariadb")
	flag.DurationVar(&kc.timeout, "keymoves-timeout", 10*time.Minute, "keymoves section: give up on one catch-up after this")
	flag.StringVar(&extra, "keymoves-sluice-flags", "--min-lanes 2 --max-lanes 4", "keymoves section: flags of every sluice run, space-separated")
	flag.StringVar(&kc.logDir, "keymoves-logs", "", "keymoves section: keep each sluice run's JSON log in this directory")
	flag.BoolVar(&kc.live, "keymoves-live", false, "keymoves section: also run the live load (pgbench and a key-moving session, PostgreSQL, at the last -keymoves-rtt), without and with kills")
	flag.DurationVar(&kc.liveFor, "keymoves-live-for", 30*time.Second, "keymoves section: how long the live load runs")
	flag.IntVar(&kc.kills, "keymoves-kills", 15, "keymoves section: kill -9s during the live load's second run (0: no such run)")
	flag.IntVar(&kc.pgbenchC, "keymoves-pgbench-clients", 4, "keymoves section: pgbench -c of the live load")
	flag.IntVar(&kc.pgbenchR, "keymoves-pgbench-rate", 833, "keymoves section: pgbench -R of the live load, transactions/s (each changes 3 streamed rows; 0: as many as it can)")
	return func() error {
		kc.extra = strings.Fields(extra)
		if kc.scale <= 0 || kc.runs < 1 || kc.timeout <= 0 || kc.liveFor <= 0 || kc.kills < 0 || kc.pgbenchC < 1 || kc.pgbenchR < 0 {
			return errors.New("keymoves section: -keymoves-scale, -keymoves-runs, -keymoves-timeout, -keymoves-live-for and -keymoves-pgbench-clients must be positive, -keymoves-kills and -keymoves-pgbench-rate not negative")
		}
		if kc.scale*50000 < 4*nativeTxSize {
			return fmt.Errorf("-keymoves-scale %g: too small for a key move", kc.scale)
		}
		var err error
		if kc.rtts, err = parseRTTs("-keymoves-rtt", rtts); err != nil {
			return err
		}
		kc.engines, err = parseEngines("-keymoves-engines", engines)
		if errors.Is(err, errNoEngine) {
			err = nil // the live load alone
		}
		return err
	}
}

// kmBacklog is one of the section's backlogs.
type kmBacklog struct {
	shape backlogShape
	moves bool // the moves variant, else plain
	tags  bool // with the tags table and its unique swaps (MariaDB)
}

func (kb kmBacklog) variant() string {
	if kb.moves {
		return "moves"
	}
	return "plain"
}

// kind is what update transaction j does besides updating its rows: move
// (or, plain, update in place) the row with a large body (1), or one
// without (3), or swap two tags' names (2, MariaDB); nothing (0).
func kmKind(j int) int { return j % 4 }

// moved is the id update transaction j moves (or updates alone), 0 for
// none; lo and hi bound its rows.
func kmMoved(j, lo, hi int) int {
	x := 0
	switch kmKind(j) {
	case 1:
		x = hi - hi%kmBigEvery // the range's multiple of 20, when it has one
	case 3:
		x = lo + 4
	}
	if x < lo || x > hi {
		return 0
	}
	return x
}

// changes is how many changes the backlog holds, its marker included.
func (kb kmBacklog) changes() int {
	n := kb.shape.changes() + 1
	if kb.tags {
		for j := 0; j*nativeTxSize < kb.shape.updates; j++ {
			if kmKind(j) == 2 {
				n += 3
			}
		}
	}
	return n
}

func (kb kmBacklog) ddl(pg bool) []string {
	if pg {
		// body may be NULL: an update that leaves a TOASTed value of a NOT
		// NULL column unchanged fails on the target (the upsert's insert
		// part lacks the value, and PostgreSQL checks NOT NULL before the
		// conflict), whether or not keys move.
		return []string{"CREATE TABLE items (id bigint PRIMARY KEY, k int NOT NULL, c varchar(120) NOT NULL, pad varchar(60) NOT NULL, body text)"}
	}
	out := []string{"CREATE TABLE items (id bigint PRIMARY KEY, k int NOT NULL, c varchar(120) NOT NULL, pad varchar(60) NOT NULL, body mediumtext)"}
	if kb.tags {
		out = append(out, "CREATE TABLE tags (id int PRIMARY KEY, name varchar(40) NOT NULL UNIQUE, hits int NOT NULL)",
			fmt.Sprintf("INSERT INTO tags SELECT seq, CONCAT('tag-', seq), 0 FROM seq_1_to_%d", kmTags))
	}
	return out
}

// statements are the backlog's statements, each one source transaction's
// worth, the marker last (see writeBacklog).
func (kb kmBacklog) statements(pg bool) []string {
	var out []string
	phase := func(lo, hi int, stmt func(j, lo, hi int) string) {
		for j, l := 0, lo; l <= hi; j, l = j+1, l+nativeTxSize {
			out = append(out, stmt(j, l, min(l+nativeTxSize-1, hi)))
		}
	}
	s := kb.shape
	if pg {
		phase(1, s.inserts, func(_, lo, hi int) string {
			return fmt.Sprintf(`INSERT INTO items SELECT g, g %% 1000, md5(g::text) || md5((g+1)::text), 'pad-' || g,
	CASE WHEN g %% %d = 0 THEN (SELECT string_agg(md5(g::text || '-' || i), '') FROM generate_series(1, 100) i) ELSE 'body-' || g END
FROM generate_series(%d, %d) g`, kmBigEvery, lo, hi)
		})
		phase(1, s.updates, func(j, lo, hi int) string {
			return kb.update(j, lo, hi, "c = md5(c) || '-u', pad = 'upd-' || id")
		})
	} else {
		phase(1, s.inserts, func(_, lo, hi int) string {
			return fmt.Sprintf(`INSERT INTO items SELECT g.seq, g.seq %% 1000, CONCAT(MD5(g.seq), MD5(g.seq+1)), CONCAT('pad-', g.seq),
	IF(g.seq %% %d = 0, (SELECT GROUP_CONCAT(MD5(CONCAT(g.seq, '-', i.seq)) SEPARATOR '') FROM seq_1_to_100 i), CONCAT('body-', g.seq))
FROM seq_%d_to_%d g`, kmBigEvery, lo, hi)
		})
		phase(1, s.updates, func(j, lo, hi int) string {
			st := kb.update(j, lo, hi, "c = CONCAT(MD5(c), '-u'), pad = CONCAT('upd-', id)")
			if kb.tags && kmKind(j) == 2 {
				a := j%(kmTags-1) + 1
				b := a + 1
				if kb.moves {
					st += fmt.Sprintf("; SET @na = (SELECT name FROM tags WHERE id = %[1]d), @nb = (SELECT name FROM tags WHERE id = %[2]d)"+
						"; UPDATE tags SET name = CONCAT('swap-', id) WHERE id = %[1]d; UPDATE tags SET name = @na WHERE id = %[2]d; UPDATE tags SET name = @nb WHERE id = %[1]d", a, b)
				} else {
					st += fmt.Sprintf("; UPDATE tags SET hits = hits + 1 WHERE id = %[1]d; UPDATE tags SET hits = hits + 1 WHERE id = %[2]d; UPDATE tags SET hits = hits + 1 WHERE id = %[1]d", a, b)
				}
			}
			return st
		})
	}
	phase(s.inserts-s.deletes+1, s.inserts, func(_, lo, hi int) string {
		return fmt.Sprintf("DELETE FROM items WHERE id BETWEEN %d AND %d", lo, hi)
	})
	return append(out, fmt.Sprintf("INSERT INTO items VALUES (%d, 0, 'marker', 'marker', 'marker')", markerID))
}

// update is update transaction j of rows lo to hi, set being the
// engine's form of the lab mix's update of c and pad: it moves (or, plain,
// updates alone) the row kmMoved names.
func (kb kmBacklog) update(j, lo, hi int, set string) string {
	x := kmMoved(j, lo, hi)
	st := fmt.Sprintf("UPDATE items SET k = k + 1, %s WHERE id BETWEEN %d AND %d AND id <> %d", set, lo, hi, x)
	switch {
	case x == 0:
	case kb.moves:
		st += fmt.Sprintf("; UPDATE items SET id = id + %d, k = k + 1 WHERE id = %d", kmMoveOffset, x)
	default:
		st += fmt.Sprintf("; UPDATE items SET k = k + 1 WHERE id = %d", x)
	}
	return st
}

// kmRun is one catch-up of the section.
type kmRun struct {
	nativeRun
	engine  string
	variant string
}

// kmLive is one live run.
type kmLive struct {
	kills      int
	load       time.Duration
	sourceRate float64 // changes/s the source made during the load
	sluiceRate float64 // changes/s sluice applied during the load
	samples    []int   // sluice's changes/s, per 5 s of the load
	moves      int     // key moves the mover made
	lagAtEnd   time.Duration
	equalAfter time.Duration // from the load's end until the target was equal
	equal      bool
	note       string
}

type keyMovesEnv struct {
	*nativeEnv
	kc   keyMovesConfig
	runs []kmRun
	live []kmLive
}

func (e *env) benchKeyMoves(ctx context.Context) ([]kmRun, []kmLive, error) {
	kc := e.cfg.keymoves
	bin, err := filepath.Abs(e.cfg.copy.sluice)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("-sluice %s: %w (run `make build` first)", e.cfg.copy.sluice, err)
	}
	ke := &keyMovesEnv{kc: kc, nativeEnv: &nativeEnv{env: e, sluice: bin,
		nc: nativeConfig{timeout: kc.timeout, extra: kc.extra, logDir: kc.logDir}}}
	for run := 1; run <= kc.runs; run++ {
		for _, eng := range kc.engines {
			if ctx.Err() != nil {
				return ke.runs, ke.live, ctx.Err()
			}
			if eng == "postgres" {
				e.stopMariaDB()
			} else {
				e.stopPostgres()
			}
			err = ke.backlog(ctx, run, eng == "postgres")
			if err != nil {
				return ke.runs, ke.live, fmt.Errorf("run %d, %s: %w", run, eng, err)
			}
		}
	}
	if kc.live {
		e.stopMariaDB()
		for _, kills := range []int{0, kc.kills} {
			if kills == 0 && len(ke.live) > 0 {
				break
			}
			r, err := ke.liveRun(ctx, kills)
			if err != nil {
				return ke.runs, ke.live, fmt.Errorf("live load, %d kills: %w", kills, err)
			}
			ke.live = append(ke.live, r)
		}
	}
	return ke.runs, ke.live, nil
}

func (ke *keyMovesEnv) record(engine string, kb kmBacklog, r nativeRun) {
	r.changes = kb.changes()
	v := "equal"
	if !r.verified {
		v = "**MISMATCH**"
	}
	fmt.Fprintf(os.Stderr, "    %s, %s, %s: %d changes in %.2f s, %s changes/s, %s\n", engine, kb.variant(), linkLabel(r.rtt), r.changes, r.elapsed.Seconds(), thousands(r.rate()), v)
	ke.runs = append(ke.runs, kmRun{nativeRun: r, engine: engine, variant: kb.variant()})
}

// kmStream is one sluice stream of a backlog run: one per variant and RTT.
type kmStream struct {
	kb       kmBacklog
	srcURL   string
	dstURL   string // without the proxy
	stream   string
	stateDir string
	rtt      time.Duration
}

// backlog writes both variants' backlogs on one engine's source, each
// behind a stream per RTT started from before it, then catches each up.
func (ke *keyMovesEnv) backlog(ctx context.Context, run int, pg bool) error {
	engine, system, tables := "MariaDB", sysMySluice, []string{"items", "tags"}
	start := ke.mariadb
	if pg {
		engine, system, tables = "PostgreSQL", sysPGSluice, []string{"items"}
		start = ke.postgres
	}
	if err := start(ctx); err != nil {
		return err
	}
	src, dst := ke.mySrc, ke.myDst
	if pg {
		src, dst = ke.pgSrc, ke.pgDst
	}
	ke.tables = strings.Join(tables, ",")
	exec := myExecAll
	if pg {
		exec = execAll
	}
	var streams []kmStream
	var dbs []string
	defer func() {
		cleanup := context.WithoutCancel(ctx)
		for _, c := range streams {
			if pg {
				dropSlot(cleanup, c.srcURL, c.stream, tables)
				dst.DropDatabase(cleanup, c.stream) //nolint:errcheck // cleanup only
			}
			os.RemoveAll(c.stateDir)
		}
		for _, name := range dbs {
			src.DropDatabase(cleanup, name) //nolint:errcheck // cleanup only
			if !pg {
				dst.DropDatabase(cleanup, name) //nolint:errcheck // cleanup only
			}
		}
	}()
	for _, moves := range []bool{true, false} {
		kb := kmBacklog{shape: shapeFor(ke.kc.scale), moves: moves, tags: !pg}
		name := ke.nextName()
		fmt.Fprintf(os.Stderr, "==> keymoves, run %d, %s: %d-change %s backlog (database %s), streams from before it\n", run, engine, kb.changes(), kb.variant(), name)
		// On MariaDB sluice writes the source's database name on the
		// target: one target database per variant, emptied before each of
		// its runs; on PostgreSQL one per stream.
		dbs = append(dbs, name)
		sides := []dbtest.Server{src}
		if !pg {
			sides = append(sides, dst)
		}
		for _, srv := range sides {
			if err := srv.DropDatabase(ctx, name); err != nil {
				return err
			}
			if err := srv.CreateDatabase(ctx, name); err != nil {
				return err
			}
			if err := exec(ctx, srv.URL(name), kb.ddl(pg)...); err != nil {
				return err
			}
		}
		srcURL := src.URL(name)
		for i, rtt := range ke.kc.rtts {
			c := kmStream{kb: kb, srcURL: srcURL, dstURL: dst.URL(name), stream: fmt.Sprintf("%s_km%d", name, i), rtt: rtt}
			if pg {
				if err := dst.CreateDatabase(ctx, c.stream); err != nil {
					return err
				}
				c.dstURL = dst.URL(c.stream)
				if err := exec(ctx, c.dstURL, kb.ddl(pg)...); err != nil {
					return err
				}
			}
			dir, err := os.MkdirTemp("", "sluice-bench-keymoves-")
			if err != nil {
				return fmt.Errorf("state dir: %w", err)
			}
			c.stateDir = dir
			streams = append(streams, c)
			if err := ke.sluiceFromNow(ctx, srcURL, c.dstURL, c.stream, c.stateDir); err != nil {
				return err
			}
		}
	}
	// Every stream starts before both backlogs, so that each reads the
	// same log: the other variant's too (skipping it), as a stream of one
	// database of a busy server does.
	write := myWriteBacklog
	if pg {
		write = pgWriteBacklog
	}
	for i, c := range streams {
		if i > 0 && c.srcURL == streams[i-1].srcURL {
			continue // one backlog per variant
		}
		t0 := time.Now()
		if err := write(ctx, c.srcURL, c.kb.statements(pg)); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "    %s backlog written in %.1f s\n", c.kb.variant(), time.Since(t0).Seconds())
	}
	// By RTT, the variants taking turns, so that the machine's load falls
	// on both alike.
	slices.SortStableFunc(streams, func(a, b kmStream) int { return int(a.rtt - b.rtt) })
	for _, c := range streams {
		if !pg {
			// The target as it was before the backlog: tags' rows, no items.
			if err := exec(ctx, c.dstURL, append([]string{"TRUNCATE TABLE items", "TRUNCATE TABLE tags"}, c.kb.ddl(pg)[2:]...)...); err != nil {
				return err
			}
		}
		marker, closeMarker := kmCommitted(pg, c.dstURL, c.stream, c.kb.changes())
		equal := func(ctx context.Context) (bool, error) {
			if pg {
				return pgEqual(ctx, c.srcURL, c.dstURL, tables...)
			}
			return sameMyTables(ctx, c.srcURL, c.dstURL, tables...)
		}
		r, err := ke.sluiceCatchUp(ctx, system, run, c.srcURL, c.dstURL, dst.Addr(), c.stream, c.stateDir, c.rtt, serverSides(src, dst), marker, equal)
		closeMarker()
		if err != nil {
			return fmt.Errorf("%s backlog, %s: %w", c.kb.variant(), linkLabel(c.rtt), err)
		}
		ke.record(engine, c.kb, r)
		if pg {
			// Its slot would hold WAL for the rest of the run.
			dropSlot(context.WithoutCancel(ctx), c.srcURL, c.stream, tables)
		}
	}
	return nil
}

// kmCommitted is a check, on one connection to the target at dstURL, that
// the stream's lanes committed all of its backlog's changes (the highest
// watermark their checkpoint rows hold counts them), and the function that
// closes it. Unlike the marker row, which its lane may commit while others
// still apply earlier changes, it times the whole catch-up.
func kmCommitted(pg bool, dstURL, stream string, changes int) (check func(context.Context) (bool, error), closeConn func()) {
	if pg {
		return onOneConn(func(ctx context.Context) (*pgx.Conn, error) { return connect(ctx, dstURL) },
			func(ctx context.Context, conn *pgx.Conn) (bool, error) {
				var n int64
				err := conn.QueryRow(ctx, "SELECT coalesce(max(applied), 0) FROM sluice.checkpoint WHERE stream = $1", stream).Scan(&n)
				return n >= int64(changes), err
			}, func(c *pgx.Conn) { c.Close(context.Background()) })
	}
	return onOneConn(func(ctx context.Context) (*sql.DB, error) { return myConnect(ctx, dstURL) },
		func(ctx context.Context, db *sql.DB) (bool, error) {
			var n int64
			err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(applied), 0) FROM sluice_checkpoint WHERE stream = ?", stream).Scan(&n)
			return n >= int64(changes), err
		}, func(db *sql.DB) { db.Close() })
}

// ---- live ------------------------------------------------------------------

// kmLiveTables are the live run's streamed tables: pgbench's keyed ones
// (pgbench_history has no primary key) and docs.
var kmLiveTables = []string{"pgbench_accounts", "pgbench_branches", "pgbench_tellers", "docs"}

const kmDocsDDL = "CREATE TABLE docs (id bigint PRIMARY KEY, title text NOT NULL, body text NOT NULL)"

// liveRun runs the live load once, with kills × kill -9 of sluice spread
// over it.
func (ke *keyMovesEnv) liveRun(ctx context.Context, kills int) (kmLive, error) {
	res := kmLive{kills: kills, load: ke.kc.liveFor}
	if err := ke.postgres(ctx); err != nil {
		return res, err
	}
	src, dst := ke.pgSrc, ke.pgDst
	ke.tables = strings.Join(kmLiveTables, ",")
	rtt := ke.kc.rtts[len(ke.kc.rtts)-1]
	name := ke.nextName()
	fmt.Fprintf(os.Stderr, "==> keymoves, live load (pgbench -c %d and key moves) for %v, %s, %d kills (database %s)\n", ke.kc.pgbenchC, ke.kc.liveFor, linkLabel(rtt), kills, name)
	for _, srv := range []dbtest.Server{src, dst} {
		if err := srv.CreateDatabase(ctx, name); err != nil {
			return res, err
		}
		defer srv.DropDatabase(context.WithoutCancel(ctx), name) //nolint:errcheck // cleanup only
	}
	srcURL, dstURL := src.URL(name), dst.URL(name)
	defer dropSlot(context.WithoutCancel(ctx), srcURL, name, kmLiveTables)
	// Scale 1: 100,000 accounts. The target gets the tables and keys only.
	if err := runQuiet(ctx, "pgbench", "-i", "-q", "-s", "1", srcURL); err != nil {
		return res, err
	}
	if err := runQuiet(ctx, "pgbench", "-i", "-q", "-I", "dtp", dstURL); err != nil {
		return res, err
	}
	docs := `INSERT INTO docs SELECT g, 'doc ' || g, (SELECT string_agg(md5(g::text || '-' || i), '') FROM generate_series(1, 190) i)
FROM generate_series(1, 200) g`
	if err := execAll(ctx, srcURL, kmDocsDDL, docs); err != nil {
		return res, err
	}
	if err := execAll(ctx, dstURL, kmDocsDDL); err != nil {
		return res, err
	}
	stateDir, err := os.MkdirTemp("", "sluice-bench-keymoves-live-")
	if err != nil {
		return res, fmt.Errorf("state dir: %w", err)
	}
	defer os.RemoveAll(stateDir)
	proxy, proxyURL, err := proxied(dst.Addr(), dstURL, rtt)
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	starts := 0
	start := func() (*sluiceProc, error) {
		starts++
		return ke.startSluice(name, stateDir, fmt.Sprintf("sluice-%d.log", starts), srcURL, proxyURL, ke.kc.extra...)
	}
	p, err := start()
	if err != nil {
		return res, err
	}
	defer func() { p.stop() }() //nolint:errcheck // cleanup only
	// The initial copy, then the load.
	if err := kmPollEqual(ctx, 5*time.Minute, srcURL, dstURL, func() error { return p.failed() }); err != nil {
		return res, fmt.Errorf("initial copy: %w; log:\n%s", err, p.lw.tail(15))
	}
	status := filepath.Join(stateDir, "state", "status", name+".json")
	before, err := kmSourceChanges(ctx, srcURL)
	if err != nil {
		return res, err
	}
	applied0, _ := kmStatus(status)

	loadCtx, stopLoad := context.WithTimeout(ctx, ke.kc.liveFor)
	defer stopLoad()
	var wg sync.WaitGroup
	var pgbenchErr error
	var moves atomic.Int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		secs := fmt.Sprint(int(ke.kc.liveFor.Seconds()))
		args := []string{"-n", "-c", fmt.Sprint(ke.kc.pgbenchC), "-j", "2", "-T", secs}
		if ke.kc.pgbenchR > 0 {
			args = append(args, "-R", fmt.Sprint(ke.kc.pgbenchR))
		}
		pgbenchErr = runQuiet(ctx, "pgbench", append(args, srcURL)...)
	}()
	go func() {
		defer wg.Done()
		moves.Store(int64(kmMoveDocs(loadCtx, srcURL)))
	}()
	t0 := time.Now()
	var samples []uint64
	last := applied0
	nextKill := time.Duration(0)
	rng := rand.New(rand.NewPCG(uint64(kills), 29))
	killEvery := ke.kc.liveFor / time.Duration(max(kills, 1)+1)
	if kills > 0 {
		nextKill = killEvery/2 + time.Duration(rng.Int64N(int64(killEvery)))
	}
	killed := 0
	tick := time.NewTicker(time.Second)
	for loadCtx.Err() == nil {
		select {
		case <-loadCtx.Done():
		case <-tick.C:
		}
		if a, ok := kmStatus(status); ok {
			last = a
		}
		if since := time.Since(t0); since/(5*time.Second) >= time.Duration(len(samples)+1) {
			samples = append(samples, last)
		}
		if kills > 0 && killed < kills && time.Since(t0) >= nextKill {
			_ = p.cmd.Process.Kill()
			<-p.done
			killed++
			if p, err = start(); err != nil {
				tick.Stop()
				return res, err
			}
			nextKill += killEvery/2 + time.Duration(rng.Int64N(int64(killEvery)))
		}
	}
	tick.Stop()
	wg.Wait()
	loadEnd := time.Now()
	if pgbenchErr != nil {
		return res, fmt.Errorf("pgbench: %w", pgbenchErr)
	}
	after, err := kmSourceChanges(ctx, srcURL)
	if err != nil {
		return res, err
	}
	appliedEnd, _ := kmStatus(status)
	if st, ok := kmStatusFull(status); ok {
		res.lagAtEnd = time.Duration(st.LagSeconds * float64(time.Second))
	}
	took := loadEnd.Sub(t0)
	res.moves, res.kills = int(moves.Load()), killed
	res.sourceRate = float64(after-before) / took.Seconds()
	res.sluiceRate = float64(appliedEnd-applied0) / took.Seconds()
	prev := applied0
	for _, a := range samples {
		res.samples = append(res.samples, int(float64(a-min(prev, a))/5))
		prev = a
	}
	err = kmPollEqual(ctx, 5*time.Minute, srcURL, dstURL, func() error { return p.failed() })
	res.equalAfter = time.Since(loadEnd)
	res.equal = err == nil
	if err != nil {
		res.note = err.Error()
	}
	fmt.Fprintf(os.Stderr, "    source %s changes/s, sluice %s changes/s during the load (%v), %d key moves, %d kills; equal %.1f s after the load: %v\n",
		thousands(res.sourceRate), thousands(res.sluiceRate), res.samples, res.moves, killed, res.equalAfter.Seconds(), res.equal)
	return res, nil
}

// kmMoveDocs moves rows of docs to new keys until ctx ends, about ten
// times a second, two moves a transaction: a random row, then the row of
// the highest id (often the one just moved). It returns how many moves
// committed.
func kmMoveDocs(ctx context.Context, srcURL string) int {
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return 0
	}
	defer conn.Close(context.WithoutCancel(ctx))
	n := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "UPDATE docs SET id = id + 1000, title = title || '+' WHERE id = (SELECT id FROM docs ORDER BY random() LIMIT 1)"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE docs SET id = id + 1000 WHERE id = (SELECT max(id) FROM docs)")
			return err
		})
		if err == nil {
			n += 2
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return n
}

// kmSourceChanges is the count of row changes the source made to the
// streamed tables so far, from its statistics.
func kmSourceChanges(ctx context.Context, srcURL string) (int64, error) {
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The statistics reach the view within a second of each commit.
	time.Sleep(1500 * time.Millisecond)
	var n int64
	err = conn.QueryRow(ctx, "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_user_tables WHERE relname = ANY($1)", kmLiveTables).Scan(&n)
	return n, err
}

func kmStatusFull(path string) (daemon.Status, bool) {
	var st daemon.Status
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, true
}

// kmStatus is the applied count of sluice's status file.
func kmStatus(path string) (uint64, bool) {
	st, ok := kmStatusFull(path)
	return st.Applied, ok
}

// kmPollEqual polls until the live tables are equal on both sides, or
// timeout, or broken fails.
func kmPollEqual(ctx context.Context, timeout time.Duration, srcURL, dstURL string, broken func() error) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, diff, err := kmLiveEqual(ctx, srcURL, dstURL)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		last = diff
		if err := broken(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the target did not equal the source within %v: %s", timeout, firstLines(last, 5))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func kmLiveEqual(ctx context.Context, srcURL, dstURL string) (bool, string, error) {
	diffs, err := pgDiffs(ctx, srcURL, dstURL, kmLiveTables...)
	if err != nil {
		return false, "", err
	}
	return diffs.Equal(), diffs.String(), nil
}

// runQuiet runs a command, its output shown only when it fails.
func runQuiet(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(maskArgs(args), " "), err, lastLines(string(out), 5))
	}
	return nil
}

// ---- report -----------------------------------------------------------------

func kmCell(rs []kmRun, engine, variant string, rtt time.Duration) (rate float64, runs, verified int) {
	var xs []float64
	for _, r := range rs {
		if r.engine == engine && r.variant == variant && r.rtt == rtt {
			runs++
			if r.verified {
				verified++
				xs = append(xs, r.rate())
			}
		}
	}
	return median(xs), runs, verified
}

func renderKeyMoves(kc keyMovesConfig, rs []kmRun, live []kmLive, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Key moves (issue 29), %s (section took %s)\n\n", time.Now().Format("2006-01-02 15:04"), took.Round(time.Second))
	if len(rs) > 0 {
		renderKeyMovesBacklog(&b, kc, rs)
	}
	if len(live) > 0 {
		renderKeyMovesLive(&b, kc, live)
	}
	b.WriteString("\n")
	return b.String()
}

// renderKeyMovesBacklog is the backlog runs' table and ratios.
func renderKeyMovesBacklog(b *strings.Builder, kc keyMovesConfig, rs []kmRun) {
	shape := shapeFor(kc.scale)
	fmt.Fprintf(b, "The native section's lab backlog (%s inserts, %s updates, %s deletes in %d-change source transactions, then a marker) in `items (id, k, c, pad, body)`, every %dth row with a 3.2 kB incompressible body (TOASTed on PostgreSQL). "+
		"**moves**: every second update transaction moves one of its rows to id + %s instead of updating it (5%% of the updates; alternately a row with a large body, which PostgreSQL logs without it, and one without); on MariaDB every fourth also swaps two unique names of `tags` (%d rows) through a temporary one. "+
		"**plain**: the same rows updated in place, as many changes. sluice `%s`, resuming a stream started with `--from-now` before the backlog, through the proxy in front of the target; timed until the lanes' checkpoint rows on the target count every change, tables checked equal (CompareTables, CHECKSUM TABLE). Median of %d run(s).\n\n",
		thousands(float64(shape.inserts)), thousands(float64(shape.updates)), thousands(float64(shape.deletes)), nativeTxSize, kmBigEvery, thousands(kmMoveOffset), kmTags,
		strings.Join(kc.extra, " "), kc.runs)
	b.WriteString("| engine | backlog |")
	for _, rtt := range kc.rtts {
		fmt.Fprintf(b, " %s |", linkLabel(rtt))
	}
	b.WriteString("\n|---|---|")
	for range kc.rtts {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, eng := range []string{"PostgreSQL", "MariaDB"} {
		for _, variant := range []string{"plain", "moves"} {
			if _, n, _ := kmCell(rs, eng, variant, kc.rtts[0]); n == 0 {
				continue
			}
			fmt.Fprintf(b, "| %s | %s |", eng, variant)
			for _, rtt := range kc.rtts {
				rate, n, v := kmCell(rs, eng, variant, rtt)
				if v < n {
					fmt.Fprintf(b, " %s (**%d of %d runs MISMATCH**) |", kRateOrDash(rate, v), n-v, n)
				} else {
					fmt.Fprintf(b, " %s |", kRate(rate))
				}
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
	for _, eng := range []string{"PostgreSQL", "MariaDB"} {
		for _, rtt := range kc.rtts {
			m, _, _ := kmCell(rs, eng, "moves", rtt)
			p, _, _ := kmCell(rs, eng, "plain", rtt)
			if m == 0 || p == 0 {
				continue
			}
			mark := "✓"
			if m/p < goalKeyMoves {
				mark = "**✗ under the goal**"
			}
			fmt.Fprintf(b, "* %s, %s: moves ÷ plain **%.2f** (%s vs %s; goal ≥ %.1f) %s\n", eng, linkLabel(rtt), m/p, kRate(m), kRate(p), goalKeyMoves, mark)
		}
	}
}

// renderKeyMovesLive is the live runs' table.
func renderKeyMovesLive(b *strings.Builder, kc keyMovesConfig, live []kmLive) {
	fmt.Fprintf(b, "\n### Live load: pgbench -c %d -R %d (its three keyed tables; 0: unthrottled) and a session moving TOASTed rows of docs to new keys, PostgreSQL → PostgreSQL over the %s, for %v\n\n",
		kc.pgbenchC, kc.pgbenchR, linkLabel(kc.rtts[len(kc.rtts)-1]), kc.liveFor)
	b.WriteString("| kill -9 | key moves | source changes/s | sluice changes/s (load) | per 5 s | lag at the load's end | equal after the load's end |\n|---:|---:|---:|---:|---|---:|---|\n")
	for _, l := range live {
		eq := fmt.Sprintf("%.1f s", l.equalAfter.Seconds())
		if !l.equal {
			eq = "**not equal**: " + firstLine(l.note)
		}
		fmt.Fprintf(b, "| %d | %d | %s | %s | %v | %.1f s | %s |\n", l.kills, l.moves, thousands(l.sourceRate), thousands(l.sluiceRate), l.samples, l.lagAtEnd.Seconds(), eq)
	}
}
