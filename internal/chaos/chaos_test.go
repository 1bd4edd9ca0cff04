package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// shortGroups are the scenarios of TestChaosShort, split among two pairs
// of servers run side by side, of about the same length each (each pair
// starts two servers of its own, which is most of the test's cost).
var shortGroups = [][]string{
	{"kill", "target-restarts", "read-only"},
	{"source-restarts", "blackholes", "storm", "zombie"},
}

// TestChaosShort is the short, seeded form of `make chaos`: every scenario
// once, each on a pair picked by the seed (so that successive runs go
// round the source modes and target engines), with a few faults and short
// episodes. It asserts what `make chaos` asserts: after each scenario the
// target equals the source by CompareTables (and CHECKSUM TABLE between
// MariaDB databases), no stall, and the acknowledged position never past
// the target. SLUICE_CHAOS_SEED=<seed> replays a run's workloads, pairs
// and fault schedule (the faults' timing still depends on the machine).
func TestChaosShort(t *testing.T) {
	if os.Getenv("SLUICE_TEST_SKIP_DB") == "1" {
		t.Skip("SLUICE_TEST_SKIP_DB=1: skipping test that needs database servers")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SLUICE_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (SLUICE_CHAOS_SEED=%d replays it)", seed, seed)
	bin := buildSluice(t)

	cfg := Config{
		Sluice:         bin,
		Seed:           seed,
		Kills:          3,
		TargetRestarts: 1,
		SourceRestarts: 1,
		Blackholes:     1,
		BlackholeFor:   2 * time.Second,
		StormFor:       4 * time.Second,
		ReadOnlyFor:    3 * time.Second,
		KillerAge:      2 * time.Second,
		ZombieRounds:   1,
		BulkRows:       3000,
		PrefixTxs:      40,
		Txs:            40 + 1500,
		Pause:          25 * time.Millisecond,
		OneWay:         2 * time.Millisecond,
		RecoverWithin:  90 * time.Second,
		EqualWithin:    15 * time.Second,
		Duration:       5 * time.Minute,
	}
	// The copy takes some 2 s, so that a kill lands in it.
	cfg.CopyBandwidth = max(int64(cfg.BulkRows)*60/2, 32<<10)

	// The groups run at once, in goroutines rather than parallel subtests:
	// most of a scenario is waiting, and -parallel (GOMAXPROCS) would run
	// two of three at a time.
	first := int(seed % uint64(len(AllPairs)))
	type result struct {
		spec PairSpec
		keys []string
		seed uint64
		rows []Row
		err  error
		log  *syncBuffer
	}
	results := make([]result, len(shortGroups))
	var wg sync.WaitGroup
	for g, keys := range shortGroups {
		spec := AllPairs[(first+3*g)%len(AllPairs)]
		res := &results[g]
		*res = result{spec: spec, keys: keys, seed: PairSeed(seed, spec), log: &syncBuffer{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			c := cfg
			c.Scenarios, c.Out, c.Pairs = keys, res.log, []PairSpec{spec}
			res.rows, res.err = RunPair(ctx, c, spec, res.seed, time.Now().Add(c.Duration))
		}()
	}
	wg.Wait()
	for _, res := range results {
		t.Run(fmt.Sprintf("%s/%s", res.spec.Name, strings.Join(res.keys, "+")), func(t *testing.T) {
			if res.err != nil || failedRows(res.rows) || len(res.rows) != len(res.keys) || testing.Verbose() {
				t.Logf("log of %s:\n%s\n%s", res.spec.Name, res.log.String(), RenderTable(res.rows))
			}
			if res.err != nil {
				t.Fatalf("%s (pair seed %d; SLUICE_CHAOS_SEED=%d replays the run): %v", res.spec.Name, res.seed, seed, res.err)
			}
			for _, r := range res.rows {
				if r.Failed() {
					t.Errorf("%s, %s (SLUICE_CHAOS_SEED=%d replays the run): %d differences, ack %s, stalled %v, error %q; notes: %v",
						r.pair, r.scenario, seed, r.diffs, r.ack, r.stalled, r.err, r.notes)
				}
			}
			if len(res.rows) != len(res.keys) {
				t.Errorf("%s: %d scenarios ran of %v", res.spec.Name, len(res.rows), res.keys)
			}
		})
	}
}

// syncBuffer is a pair's progress log: its writer, supervisor and
// scenarios write it from their goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// buildSluice builds the sluice binary the scenarios run and kill.
func buildSluice(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", path, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		t.Fatalf("go build sluice: %v\n%s", err, out)
	}
	return path
}
