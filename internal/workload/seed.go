package workload

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// SeedEnv names the environment variable that replays a seed.
const SeedEnv = "SLUICE_TEST_SEED"

// Seed returns the seed a test runs with: $SLUICE_TEST_SEED when set, else
// def, else (def 0) one from the clock. It logs the seed at once and again
// when the test fails, so that the failure's output says how to replay it.
func Seed(tb testing.TB, def uint64) uint64 {
	tb.Helper()
	seed := def
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		seed = v
	} else if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	tb.Logf("seed %d (%s=%d replays it)", seed, SeedEnv, seed)
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("FAILED with seed %d: replay with %s=%d", seed, SeedEnv, seed)
		}
	})
	return seed
}
