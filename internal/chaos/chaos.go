// Package chaos runs sluice's fault scenarios: for a source mode × target
// engine it runs the built binary (`sluice sync start`, as an operator
// would) under a live, seeded, randomized workload (internal/workload, with
// its graph of tables joined by foreign keys of every action) and
// injects faults — kill -9 at random moments (the first ones during the
// initial copy), target and source crashes, link blackholes through the
// project's proxy, a transaction-killer storm, a read-only target and a
// zombie batch — and after each scenario waits for the stream to catch up,
// compares the target with the source (dbtest.CompareTables; CHECKSUM
// TABLE between MariaDB databases) and checks that the source position
// sluice acknowledged never passed what the target holds.
//
// `make chaos` (internal/cmd/chaos) runs every scenario at full length on
// every pair; TestChaosShort runs each once, short, in `make test`.
//
// Each pair gets its own source and target servers, so a target crash does
// not take the source down with it, nor one pair's faults another's.
package chaos

import (
	"io"
	"slices"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
)

// PairSpec is one way sluice replicates: a source engine read in a mode,
// to a target engine.
type PairSpec struct {
	Name string
	Src  daemon.Engine
	Mode string
	Dst  daemon.Engine
}

// AllPairs are the pairs sluice supports, in a fixed order (a pair's seed
// is derived from its place here: see PairSeed).
var AllPairs = []PairSpec{
	{"pg_logical_to_pg", daemon.EnginePostgres, daemon.ModeLogical, daemon.EnginePostgres},
	{"maria_binlog_to_maria", daemon.EngineMySQL, daemon.ModeBinlog, daemon.EngineMySQL},
	{"pg_trigger_to_pg", daemon.EnginePostgres, daemon.ModeTrigger, daemon.EnginePostgres},
	{"maria_trigger_to_maria", daemon.EngineMySQL, daemon.ModeTrigger, daemon.EngineMySQL},
	{"pg_logical_to_maria", daemon.EnginePostgres, daemon.ModeLogical, daemon.EngineMySQL},
	{"maria_binlog_to_pg", daemon.EngineMySQL, daemon.ModeBinlog, daemon.EnginePostgres},
}

// DefaultPairs are the same-engine pairs; `make chaos -pairs all` adds the
// cross-engine ones.
var DefaultPairs = []string{"pg_logical_to_pg", "maria_binlog_to_maria", "pg_trigger_to_pg", "maria_trigger_to_maria"}

// PairSeed is the seed of pair p's workload and faults in a run seeded
// with seed: by the pair's place in AllPairs, so that a run of one pair
// replays that pair's part of a larger run.
func PairSeed(seed uint64, p PairSpec) uint64 {
	return seed + uint64(slices.IndexFunc(AllPairs, func(q PairSpec) bool { return q.Name == p.Name }))*1_000_003
}

// ScenarioKeys are the scenarios' keys (Config.Scenarios), in the order a
// pair runs them.
func ScenarioKeys() []string {
	keys := make([]string, len(scenarios))
	for i, s := range scenarios {
		keys[i] = s.key
	}
	return keys
}

// Config is a run's settings.
type Config struct {
	Sluice    string // the sluice binary to run
	Pairs     []PairSpec
	Scenarios []string // keys, see ScenarioKeys
	Seed      uint64
	Parallel  int  // pairs at once (the command's; RunPair ignores it)
	Keep      bool // keep each pair's log and state dir even when it passes
	Verbose   bool // log each fault as it is injected
	// Out receives the progress log; nil: standard output.
	Out io.Writer

	Kills          int
	TargetRestarts int
	SourceRestarts int
	Blackholes     int
	BlackholeFor   time.Duration
	StormFor       time.Duration
	ReadOnlyFor    time.Duration
	KillerAge      time.Duration
	ZombieRounds   int

	BulkRows      int           // rows of chaos_bulk before the stream starts: the initial copy's work
	CopyBandwidth int64         // bytes/s on the target link while the copy runs, so that kills land in it
	PrefixTxs     int           // workload transactions committed before the stream starts
	Txs           int           // workload transactions in all (the writer stops when it runs out)
	Pause         time.Duration // between the writer's transactions, outside the storm
	OneWay        time.Duration // target link delay
	RecoverWithin time.Duration // a scenario's catch-up deadline: past it the stream has stalled
	EqualWithin   time.Duration // after the marker: lanes behind it finish within this
	Duration      time.Duration // cap on the whole run: scenarios not started by then are skipped
}
