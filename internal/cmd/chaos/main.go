// Command chaos is `make chaos`: every scenario of internal/chaos at full
// length, for each source mode × target engine sluice supports, a few pairs
// at a time. It prints a table and exits non-zero on any difference, stall
// or violated invariant. It is not part of `make test` (TestChaosShort is).
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

	"github.com/sluice-cdc/sluice/internal/chaos"
)

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
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+10*time.Minute) // hard stop well past the cap
	defer cancel()

	fmt.Printf("chaos: seed %d (-seed %d replays it); pairs %s; %d kills, %d target and %d source restarts, %d blackholes of %v, killer storm %v at %v, read-only %v per pair\n",
		cfg.Seed, cfg.Seed, pairNames(cfg.Pairs), cfg.Kills, cfg.TargetRestarts, cfg.SourceRestarts, cfg.Blackholes, cfg.BlackholeFor,
		cfg.StormFor, cfg.KillerAge, cfg.ReadOnlyFor)
	start := time.Now()
	deadline := start.Add(cfg.Duration)

	results := make([][]chaos.Row, len(cfg.Pairs))
	errs := make([]error, len(cfg.Pairs))
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	for i, ps := range cfg.Pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			// By the pair's place in chaos.AllPairs, so that -pairs with one
			// pair replays that pair's workload of a larger run.
			results[i], errs[i] = chaos.RunPair(ctx, cfg, ps, chaos.PairSeed(cfg.Seed, ps), deadline)
		}()
	}
	wg.Wait()

	var all []chaos.Row
	for _, rs := range results {
		all = append(all, rs...)
	}
	fmt.Println()
	fmt.Print(chaos.RenderTable(all))
	fmt.Printf("\nseed %d; %d pairs in %v; command: go run ./internal/cmd/chaos %s\n",
		cfg.Seed, len(cfg.Pairs), time.Since(start).Round(time.Second), strings.Join(os.Args[1:], " "))
	failed := false
	for i, err := range errs {
		if err != nil {
			failed = true
			fmt.Printf("FAIL %s: %v\n", cfg.Pairs[i].Name, err)
		}
	}
	for _, r := range all {
		if r.Failed() {
			failed = true
		}
	}
	if failed {
		fmt.Printf("FAIL: see the rows above (replay with -seed %d)\n", cfg.Seed)
		return 1
	}
	fmt.Println("PASS: every scenario converged with 0 differences and no acknowledged position past the target")
	return 0
}

func pairNames(ps []chaos.PairSpec) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return strings.Join(names, ",")
}

func scenarioKeys() string { return strings.Join(chaos.ScenarioKeys(), ",") }

func parseFlags(args []string) (chaos.Config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg chaos.Config
	var pairs, scens string
	short := fs.Bool("short", false, "a few faults of each kind, short episodes, pairs in parallel: about a minute")
	fs.StringVar(&cfg.Sluice, "sluice", "bin/sluice", "the sluice binary to run (make build)")
	fs.StringVar(&pairs, "pairs", strings.Join(chaos.DefaultPairs, ","), "pairs to run, comma-separated, or all: "+pairNames(chaos.AllPairs))
	fs.StringVar(&scens, "scenarios", scenarioKeys(), "scenarios to run, comma-separated, in this order")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the workloads and the fault schedule (0: from the clock); printed, replays a run")
	fs.IntVar(&cfg.Parallel, "parallel", 0, "pairs run at once (default 2, with -short all)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep each pair's sluice log and state dir even when it passes")
	fs.BoolVar(&cfg.Verbose, "v", false, "print each fault as it is injected")
	kills := fs.Int("kills", -1, "kill -9 of sluice per pair (default 100, -short 4)")
	tr := fs.Int("target-restarts", -1, "immediate shutdowns and restarts of the target server per pair (default 3, -short 1)")
	sr := fs.Int("source-restarts", -1, "immediate shutdowns and restarts of the source server per pair (default 3, -short 1)")
	bh := fs.Int("blackholes", -1, "link blackholes per pair, alternately the target's and the source's link (default 3, -short 1)")
	bhFor := fs.Duration("blackhole-for", 0, "how long a blackhole holds the link (default 30s, -short 3s)")
	storm := fs.Duration("storm-for", 0, "how long the transaction killer runs (default 30s, -short 6s)")
	ro := fs.Duration("read-only-for", 0, "how long the target refuses writes (default 20s, -short 4s)")
	fs.DurationVar(&cfg.KillerAge, "killer-age", 2*time.Second, "the transaction killer kills target transactions older than this")
	zombie := fs.Int("zombie-rounds", -1, "rounds of the zombie batch scenario per pair (default 3, -short 2)")
	bulk := fs.Int("bulk-rows", -1, "rows in chaos_bulk before the stream starts, copied by the initial copy (default 60000, -short 12000)")
	fs.DurationVar(&cfg.OneWay, "one-way", 2*time.Millisecond, "one-way delay of the target link")
	fs.DurationVar(&cfg.RecoverWithin, "recover-within", 3*time.Minute, "catch-up deadline after a scenario's last fault: past it the stream counts as stalled")
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
	cfg.Kills = pick(*kills, 100, 4)
	cfg.TargetRestarts = pick(*tr, 3, 1)
	cfg.SourceRestarts = pick(*sr, 3, 1)
	cfg.Blackholes = pick(*bh, 3, 1)
	cfg.BlackholeFor = pickD(*bhFor, 30*time.Second, 3*time.Second)
	cfg.StormFor = pickD(*storm, 30*time.Second, 6*time.Second)
	cfg.ReadOnlyFor = pickD(*ro, 20*time.Second, 4*time.Second)
	cfg.BulkRows = max(pick(*bulk, 60000, 12000), 1)
	cfg.Duration = pickD(*dur, 30*time.Minute, 4*time.Minute)
	cfg.ZombieRounds = pick(*zombie, 3, 2)
	cfg.EqualWithin = pickD(0, 60*time.Second, 15*time.Second)
	if cfg.Parallel <= 0 {
		// Two at a time fit 2 cores: a pair's servers and sluice idle
		// through most of its faults.
		cfg.Parallel = 2
		if *short {
			cfg.Parallel = len(chaos.AllPairs)
		}
	}
	// The copy should take some 20 s of running time (-short: 5 s)
	// however many rows (about 60 bytes a row on the wire), so that many
	// kills land in it.
	copySecs := int64(20)
	if *short {
		copySecs = 5
	}
	cfg.CopyBandwidth = max(int64(cfg.BulkRows)*60/copySecs, 32<<10)
	cfg.PrefixTxs = 60
	// The generator's time grows with the square of its transactions (3,000
	// take a second, 18,000 half a minute), so the writer is paced to make
	// 9,000 last a pair's scenarios; when it runs out the remaining ones
	// run without load, which their notes say.
	cfg.Txs, cfg.Pause = cfg.PrefixTxs+9000, 60*time.Millisecond
	if *short {
		cfg.Txs, cfg.Pause = cfg.PrefixTxs+5000, 25*time.Millisecond
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if pairs == "all" {
		pairs = pairNames(chaos.AllPairs)
	}
	for _, name := range strings.Split(pairs, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(chaos.AllPairs, func(p chaos.PairSpec) bool { return p.Name == name })
		if i < 0 {
			return cfg, fmt.Errorf("-pairs: unknown pair %q; the pairs are %s", name, pairNames(chaos.AllPairs))
		}
		cfg.Pairs = append(cfg.Pairs, chaos.AllPairs[i])
	}
	for _, key := range strings.Split(scens, ",") {
		key = strings.TrimSpace(key)
		if key == "" {
			continue
		}
		if !slices.Contains(chaos.ScenarioKeys(), key) {
			return cfg, fmt.Errorf("-scenarios: unknown scenario %q; the scenarios are %s", key, scenarioKeys())
		}
		cfg.Scenarios = append(cfg.Scenarios, key)
	}
	if len(cfg.Pairs) == 0 {
		return cfg, errors.New("-pairs: no pair given")
	}
	if _, err := os.Stat(cfg.Sluice); err != nil {
		return cfg, fmt.Errorf("-sluice %s: %w (run make build first, or pass the binary's path)", cfg.Sluice, err)
	}
	return cfg, nil
}
