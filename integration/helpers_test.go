// Package integration holds sluice's end-to-end tests: real PostgreSQL (and
// MariaDB) servers from the harness, the WAN delay proxy and the transaction
// killer, with the target compared to the source table by table by
// checksum.
package integration

import (
	"context"
	"flag"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

var sluiceBin struct {
	once sync.Once
	path string
	err  error
}

// buildSluice builds the sluice binary once per test binary, for the tests
// that run (and kill -9) it as a process.
func buildSluice(t *testing.T) string {
	t.Helper()
	sluiceBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-bin-")
		if err != nil {
			sluiceBin.err = err
			return
		}
		sluiceBin.path = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", sluiceBin.path, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			sluiceBin.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if sluiceBin.err != nil {
		t.Fatal(sluiceBin.err)
	}
	return sluiceBin.path
}

// waitingParallel is how many parallel tests run at once unless -parallel
// says otherwise. Go's default, GOMAXPROCS, suits tests that compute; these
// mostly wait (on the 96 ms link, on rows slowed by pg_sleep, on a killed
// process's restart), and two of them at a time leave a 2-core machine
// half idle. Tests whose claim is a timing measurement stay serial.
const waitingParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(max(waitingParallel, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintf(os.Stderr, "integration: set -test.parallel: %v\n", err)
			os.Exit(2)
		}
	}
	code := func() int {
		defer func() {
			if sluiceBin.path != "" {
				os.RemoveAll(filepath.Dir(sluiceBin.path))
			}
		}()
		dbtest.Main(m)
		return 0
	}()
	os.Exit(code)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// pair is a source and a target database on the harness server, with the
// target reached through a WAN delay proxy.
type pair struct {
	src, dst       *pgxpool.Pool
	srcURL, dstURL string // dstURL goes through the proxy
	dstDirect      string
	proxy          *wanproxy.Proxy
}

func newPair(t *testing.T, oneWay time.Duration, ddl ...string) *pair {
	t.Helper()
	pg := dbtest.PG(t)
	srcDB, dstDB := dbtest.PGDatabase(t), dbtest.PGDatabase(t)
	dstURL, proxy := dbtest.ViaProxy(t, pg.URL(dstDB), pg.Addr(), oneWay)
	p := &pair{
		srcURL:    pg.URL(srcDB),
		dstDirect: pg.URL(dstDB),
		dstURL:    dstURL,
		proxy:     proxy,
	}
	p.src = pool(t, p.srcURL)
	p.dst = pool(t, p.dstDirect)
	for _, stmt := range ddl {
		exec1(t, p.src, stmt)
		exec1(t, p.dst, stmt)
	}
	return p
}

func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 12
	cfg.ConnConfig.RuntimeParams["TimeZone"] = "UTC"
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func exec1(t *testing.T, p *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := p.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// waitConverged polls until every table on the target equals the
// source's, by the independent comparison, or fails the test at the
// deadline showing the difference.
func waitConverged(t *testing.T, p *pair, tables []string, within time.Duration, run *running) {
	t.Helper()
	waitEqualDB(t, dbtest.DB{PG: p.src}, dbtest.DB{PG: p.dst}, tables, within, run)
}

// rng returns a seeded random source and logs the seed so a failure can be
// replayed with SLUICE_TEST_SEED.
func rng(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SLUICE_TEST_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (SLUICE_TEST_SEED to replay)", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// steadyInserts inserts perTick rows (id, 'x' || id) into table every 50 ms
// until ctx ends: a sustained source rate of 20 × perTick changes/s. The
// channel receives how many rows were written, once the writer stopped.
func steadyInserts(ctx context.Context, p *pgxpool.Pool, table string, perTick int) <-chan int {
	written := make(chan int, 1)
	go func() {
		n := 0
		defer func() { written <- n }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := p.Exec(ctx, fmt.Sprintf(`INSERT INTO %s SELECT g, 'x' || g FROM generate_series($1::bigint, $1::bigint + %d) g`, table, perTick-1), n); err != nil {
				return
			}
			n += perTick
		}
	}()
	return written
}

// uniqueStream returns base suffixed with a hash of the test's name. Tests
// that run in parallel share the servers, and a PostgreSQL source's
// replication slot and publication are named after the stream, server-wide:
// two subtests streaming as "lr" at once would take each other's slot.
func uniqueStream(t *testing.T, base string) string {
	return fmt.Sprintf("%s_%08x", base, crc32.ChecksumIEEE([]byte(t.Name())))
}
