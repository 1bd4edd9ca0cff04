// Command chaos is `make chaos`: for each source mode × target engine sluice
// supports it runs the built binary (`sluice sync start`, as an operator
// would) under a live, seeded, randomized workload (internal/workload) and
// injects faults — kill -9 at random moments (the first ones during the
// initial copy), target and source crashes, link blackholes through the
// project's proxy, a transaction-killer storm and a read-only target — and
// after each scenario waits for the stream to catch up, compares the target
// with the source (dbtest.CompareTables; CHECKSUM TABLE between MariaDB
// databases) and checks that the source position sluice acknowledged never
// passed what the target holds. It prints a table and exits non-zero on any
// difference, stall or violated invariant. It is not part of `make test`.
//
// Each pair gets its own source and target servers, so a target crash does
// not take the source down with it, nor one pair's faults another's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
)

// pairSpec is one way sluice replicates: a source engine read in a mode,
// to a target engine.
type pairSpec struct {
	name string
	src  daemon.Engine
	mode string
	dst  daemon.Engine
}

var allPairs = []pairSpec{
	{"pg_logical_to_pg", daemon.EnginePostgres, daemon.ModeLogical, daemon.EnginePostgres},
	{"maria_binlog_to_maria", daemon.EngineMySQL, daemon.ModeBinlog, daemon.EngineMySQL},
	{"pg_trigger_to_pg", daemon.EnginePostgres, daemon.ModeTrigger, daemon.EnginePostgres},
	{"maria_trigger_to_maria", daemon.EngineMySQL, daemon.ModeTrigger, daemon.EngineMySQL},
	{"pg_logical_to_maria", daemon.EnginePostgres, daemon.ModeLogical, daemon.EngineMySQL},
	{"maria_binlog_to_pg", daemon.EngineMySQL, daemon.ModeBinlog, daemon.EnginePostgres},
}

// defaultPairs are the same-engine pairs; -pairs all adds the cross-engine
// ones.
var defaultPairs = []string{"pg_logical_to_pg", "maria_binlog_to_maria", "pg_trigger_to_pg", "maria_trigger_to_maria"}

// config is the run's settings, from the flags.
type config struct {
	sluice    string
	pairs     []pairSpec
	scenarios []string // keys
	seed      uint64
	parallel  int
	keep      bool
	verbose   bool

	kills          int
	targetRestarts int
	sourceRestarts int
	blackholes     int
	blackholeFor   time.Duration
	stormFor       time.Duration
	readOnlyFor    time.Duration
	killerAge      time.Duration

	bulkRows      int           // rows of chaos_bulk before the stream starts: the initial copy's work
	copyBandwidth int64         // bytes/s on the target link while the copy runs, so that kills land in it
	prefixTxs     int           // workload transactions committed before the stream starts
	txs           int           // workload transactions in all (the writer stops when it runs out)
	pause         time.Duration // between the writer's transactions, outside the storm
	oneWay        time.Duration // target link delay
	recoverWithin time.Duration // a scenario's catch-up deadline: past it the stream has stalled
	equalWithin   time.Duration // after the marker: lanes behind it finish within this
	duration      time.Duration // cap on the whole run: scenarios not started by then are skipped
}

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.duration+10*time.Minute) // hard stop well past the cap
	defer cancel()

	fmt.Printf("chaos: seed %d (-seed %d replays it); pairs %s; %d kills, %d target and %d source restarts, %d blackholes of %v, killer storm %v at %v, read-only %v per pair\n",
		cfg.seed, cfg.seed, pairNames(cfg.pairs), cfg.kills, cfg.targetRestarts, cfg.sourceRestarts, cfg.blackholes, cfg.blackholeFor,
		cfg.stormFor, cfg.killerAge, cfg.readOnlyFor)
	start := time.Now()
	deadline := start.Add(cfg.duration)

	results := make([][]row, len(cfg.pairs))
	errs := make([]error, len(cfg.pairs))
	sem := make(chan struct{}, cfg.parallel)
	var wg sync.WaitGroup
	for i, ps := range cfg.pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			// By the pair's place in allPairs, so that -pairs with one
			// pair replays that pair's workload of a larger run.
			seed := cfg.seed + uint64(slices.IndexFunc(allPairs, func(p pairSpec) bool { return p.name == ps.name }))*1_000_003
			results[i], errs[i] = runPair(ctx, cfg, ps, seed, deadline)
		}()
	}
	wg.Wait()

	var all []row
	for _, rs := range results {
		all = append(all, rs...)
	}
	fmt.Println()
	fmt.Print(renderTable(all))
	fmt.Printf("\nseed %d; %d pairs in %v; command: go run ./internal/cmd/chaos %s\n",
		cfg.seed, len(cfg.pairs), time.Since(start).Round(time.Second), strings.Join(os.Args[1:], " "))
	failed := false
	for i, err := range errs {
		if err != nil {
			failed = true
			fmt.Printf("FAIL %s: %v\n", cfg.pairs[i].name, err)
		}
	}
	for _, r := range all {
		if r.failed() {
			failed = true
		}
	}
	if failed {
		fmt.Printf("FAIL: see the rows above (replay with -seed %d)\n", cfg.seed)
		return 1
	}
	fmt.Println("PASS: every scenario converged with 0 differences and no acknowledged position past the target")
	return 0
}

func pairNames(ps []pairSpec) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.name
	}
	return strings.Join(names, ",")
}

func scenarioKeys() string {
	keys := make([]string, len(scenarios))
	for i, s := range scenarios {
		keys[i] = s.key
	}
	return strings.Join(keys, ",")
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg config
	var pairs, scens string
	short := fs.Bool("short", false, "a few faults of each kind, short episodes, pairs in parallel: about a minute")
	fs.StringVar(&cfg.sluice, "sluice", "bin/sluice", "the sluice binary to run (make build)")
	fs.StringVar(&pairs, "pairs", strings.Join(defaultPairs, ","), "pairs to run, comma-separated, or all: "+pairNames(allPairs))
	fs.StringVar(&scens, "scenarios", scenarioKeys(), "scenarios to run, comma-separated, in this order")
	fs.Uint64Var(&cfg.seed, "seed", 0, "seed of the workloads and the fault schedule (0: from the clock); printed, replays a run")
	fs.IntVar(&cfg.parallel, "parallel", 0, "pairs run at once (default 2, with -short all)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep each pair's sluice log and state dir even when it passes")
	fs.BoolVar(&cfg.verbose, "v", false, "print each fault as it is injected")
	kills := fs.Int("kills", -1, "kill -9 of sluice per pair (default 100, -short 4)")
	tr := fs.Int("target-restarts", -1, "immediate shutdowns and restarts of the target server per pair (default 3, -short 1)")
	sr := fs.Int("source-restarts", -1, "immediate shutdowns and restarts of the source server per pair (default 3, -short 1)")
	bh := fs.Int("blackholes", -1, "link blackholes per pair, alternately the target's and the source's link (default 3, -short 1)")
	bhFor := fs.Duration("blackhole-for", 0, "how long a blackhole holds the link (default 30s, -short 3s)")
	storm := fs.Duration("storm-for", 0, "how long the transaction killer runs (default 30s, -short 6s)")
	ro := fs.Duration("read-only-for", 0, "how long the target refuses writes (default 20s, -short 4s)")
	fs.DurationVar(&cfg.killerAge, "killer-age", 2*time.Second, "the transaction killer kills target transactions older than this")
	bulk := fs.Int("bulk-rows", -1, "rows in chaos_bulk before the stream starts, copied by the initial copy (default 60000, -short 12000)")
	fs.DurationVar(&cfg.oneWay, "one-way", 2*time.Millisecond, "one-way delay of the target link")
	fs.DurationVar(&cfg.recoverWithin, "recover-within", 3*time.Minute, "catch-up deadline after a scenario's last fault: past it the stream counts as stalled")
	dur := fs.Duration("duration", 0, "cap on the run: scenarios not started by then are skipped and the run fails (default 30m, -short 4m)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	pick := func(v, full, shortV int) int {
		if v >= 0 {
			return v
		}
		if *short {
			return shortV
		}
		return full
	}
	pickD := func(v, full, shortV time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		if *short {
			return shortV
		}
		return full
	}
	cfg.kills = pick(*kills, 100, 4)
	cfg.targetRestarts = pick(*tr, 3, 1)
	cfg.sourceRestarts = pick(*sr, 3, 1)
	cfg.blackholes = pick(*bh, 3, 1)
	cfg.blackholeFor = pickD(*bhFor, 30*time.Second, 3*time.Second)
	cfg.stormFor = pickD(*storm, 30*time.Second, 6*time.Second)
	cfg.readOnlyFor = pickD(*ro, 20*time.Second, 4*time.Second)
	cfg.bulkRows = max(pick(*bulk, 60000, 12000), 1)
	cfg.duration = pickD(*dur, 30*time.Minute, 4*time.Minute)
	cfg.equalWithin = pickD(0, 60*time.Second, 15*time.Second)
	if cfg.parallel <= 0 {
		// Two at a time fit 2 cores: a pair's servers and sluice idle
		// through most of its faults.
		cfg.parallel = 2
		if *short {
			cfg.parallel = len(allPairs)
		}
	}
	// The copy should take some 20 s of running time (-short: 5 s)
	// however many rows (about 60 bytes a row on the wire), so that many
	// kills land in it.
	copySecs := int64(20)
	if *short {
		copySecs = 5
	}
	cfg.copyBandwidth = max(int64(cfg.bulkRows)*60/copySecs, 32<<10)
	cfg.prefixTxs = 60
	// The generator's time grows with the square of its transactions (3,000
	// take a second, 18,000 half a minute), so the writer is paced to make
	// 9,000 last a pair's scenarios; when it runs out the remaining ones
	// run without load, which their notes say.
	cfg.txs, cfg.pause = cfg.prefixTxs+9000, 60*time.Millisecond
	if *short {
		cfg.txs, cfg.pause = cfg.prefixTxs+5000, 25*time.Millisecond
	}
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	if pairs == "all" {
		pairs = pairNames(allPairs)
	}
	for _, name := range strings.Split(pairs, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(allPairs, func(p pairSpec) bool { return p.name == name })
		if i < 0 {
			return cfg, fmt.Errorf("-pairs: unknown pair %q; the pairs are %s", name, pairNames(allPairs))
		}
		cfg.pairs = append(cfg.pairs, allPairs[i])
	}
	for _, key := range strings.Split(scens, ",") {
		key = strings.TrimSpace(key)
		if key == "" {
			continue
		}
		if !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.key == key }) {
			return cfg, fmt.Errorf("-scenarios: unknown scenario %q; the scenarios are %s", key, scenarioKeys())
		}
		cfg.scenarios = append(cfg.scenarios, key)
	}
	if len(cfg.pairs) == 0 {
		return cfg, errors.New("-pairs: no pair given")
	}
	if _, err := os.Stat(cfg.sluice); err != nil {
		return cfg, fmt.Errorf("-sluice %s: %w (run make build first, or pass the binary's path)", cfg.sluice, err)
	}
	return cfg, nil
}
