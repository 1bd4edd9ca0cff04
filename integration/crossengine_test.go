package integration

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

// An endpoint is one side of a cross-engine test: a database on the
// harness's PostgreSQL or MariaDB.
type endpoint struct {
	engine daemon.Engine
	server dbtest.Server // the harness's shared server of the engine
	pg     *pgxpool.Pool
	my     *sql.DB
	url    string // for sluice, direct
	addr   string // server address, for the proxy
}

func newEndpoint(t *testing.T, engine daemon.Engine) *endpoint {
	t.Helper()
	e := &endpoint{engine: engine}
	switch engine {
	case daemon.EnginePostgres:
		e.server = dbtest.PGEngine.Shared(t)
		e.url = e.server.URL(dbtest.PGDatabase(t))
		e.pg = pool(t, e.url)
	case daemon.EngineMySQL:
		e.server = dbtest.MariaEngine.Shared(t)
		// TIMESTAMP values are written and read in UTC, as sluice does.
		d := dbtest.MariaEngine.DatabaseWith(t, map[string]string{"time_zone": "'+00:00'"})
		e.url, e.my = d.URL, d.My
	}
	e.addr = e.server.Addr()
	return e
}

// viaProxy returns the endpoint's URL through a WAN proxy.
func (e *endpoint) viaProxy(t *testing.T, oneWay time.Duration) (string, *wanproxy.Proxy) {
	t.Helper()
	return dbtest.ViaProxy(t, e.url, e.addr, oneWay)
}

func (e *endpoint) exec(ctx context.Context, q string, args ...any) error {
	if e.pg != nil {
		_, err := e.pg.Exec(ctx, q, args...)
		return err
	}
	_, err := e.my.ExecContext(ctx, q, args...)
	return err
}

// ph is the engine's placeholder for parameter i (1-based) of a type.
func (e *endpoint) ph(i int, pgType string) string {
	if e.pg != nil {
		return fmt.Sprintf("$%d::text::%s", i, pgType)
	}
	return "?"
}

// xcol is a column of the cross-engine schema: its type on each engine,
// how values compare, and a generator of source values.
type xcol struct {
	name   string
	pgType string
	myType string
	kind   string // how to normalise for comparison
	gen    func(r *rand.Rand) any
}

func strp(r *rand.Rand, vals ...string) any {
	if r.IntN(7) == 0 {
		return nil
	}
	return vals[r.IntN(len(vals))]
}

var xcols = []xcol{
	{"qty", "integer", "int", "text", func(r *rand.Rand) any { return strp(r, strconv.Itoa(r.IntN(1e6)-5e5)) }},
	{"big", "bigint", "bigint", "text", func(r *rand.Rand) any { return strp(r, strconv.FormatInt(r.Int64()-1<<62, 10)) }},
	{"price", "numeric(12,2)", "decimal(12,2)", "text", func(r *rand.Rand) any {
		return strp(r, fmt.Sprintf("%d.%02d", r.IntN(1e9)-5e8, r.IntN(100)))
	}},
	{"ratio", "double precision", "double", "f64", func(r *rand.Rand) any {
		return strp(r, "0.1", "-1e-300", "123456.789", strconv.FormatFloat(r.NormFloat64(), 'g', -1, 64))
	}},
	{"small_f", "real", "float", "f32", func(r *rand.Rand) any { return strp(r, "1.5", "-2.25", "1024", "0.125") }},
	{"name", "varchar(64)", "varchar(64)", "text", func(r *rand.Rand) any {
		return strp(r, "plain", "quote ' and backslash \\ and \"dq\"", "ünïcödé ✓ 中文", "", fmt.Sprintf("n%d", r.IntN(1e6)))
	}},
	{"code", "char(6)", "char(6)", "char", func(r *rand.Rand) any { return strp(r, "ab", "abcdef", "x") }},
	{"active", "boolean", "tinyint(1)", "bool", func(r *rand.Rand) any { return strp(r, "true", "false") }},
	{"payload", "bytea", "longblob", "bytes", func(r *rand.Rand) any {
		if r.IntN(7) == 0 {
			return nil
		}
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return hex.EncodeToString(b)
	}},
	{"born", "date", "date", "text", func(r *rand.Rand) any { return strp(r, "2024-02-29", "1999-12-31", "1970-01-01") }},
	{"seen", "timestamp(6) without time zone", "datetime(6)", "ts", func(r *rand.Rand) any {
		return strp(r, "2024-01-02 03:04:05.123456", "1999-12-31 23:59:59", "2000-01-01 00:00:00.5")
	}},
	{"stamped", "timestamp(6) with time zone", "timestamp(6)", "ts", func(r *rand.Rand) any {
		return strp(r, "2024-06-30 23:59:59.999999", "2001-09-09 01:46:40", "2020-02-02 02:02:02.02")
	}},
	{"at_time", "time(6) without time zone", "time(6)", "ts", func(r *rand.Rand) any {
		return strp(r, "23:59:59.999999", "00:00:00", "12:34:56.5")
	}},
	{"doc", "jsonb", "json", "json", func(r *rand.Rand) any {
		return strp(r, `{"b": 1, "a": [1, 2.5, "x"]}`, `[]`, `"str"`, `{"nested": {"k": "v"}}`)
	}},
	{"uid", "uuid", "char(36)", "lower", func(r *rand.Rand) any {
		if r.IntN(7) == 0 {
			return nil
		}
		return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", r.Uint32(), r.IntN(1<<16), r.IntN(1<<12), r.IntN(1<<12), r.Int64N(1<<48))
	}},
}

// arg turns a generator's value (a string, or nil for NULL) into the
// argument each engine takes: bytes from their hex form (PostgreSQL's \x
// text, MySQL's raw bytes), a bool as 0 or 1 on MySQL.
func (e *endpoint) arg(c xcol, v any) any {
	if v == nil {
		return nil
	}
	s := v.(string)
	switch {
	case c.kind == "bytes" && e.pg != nil:
		return `\x` + s
	case c.kind == "bytes":
		b, _ := hex.DecodeString(s)
		return b
	case c.kind == "bool" && e.my != nil:
		if s == "true" {
			return 1
		}
		return 0
	}
	return s
}

func (e *endpoint) createSchema(ctx context.Context) error {
	var cols []string
	for _, c := range xcols {
		typ := c.myType
		if e.pg != nil {
			typ = c.pgType
		}
		cols = append(cols, c.name+" "+typ)
	}
	stmts := []string{
		fmt.Sprintf("CREATE TABLE items (id bigint PRIMARY KEY, %s)", strings.Join(cols, ", ")),
		"CREATE TABLE order_lines (order_id integer NOT NULL, line_no smallint NOT NULL, sku varchar(32) NOT NULL, qty integer, PRIMARY KEY (order_id, line_no))",
	}
	for _, s := range stmts {
		if err := e.exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// xworkload writes random transactions to the cross-engine schema.
func (e *endpoint) xworkload(ctx context.Context, r *rand.Rand, workers, txs int, pause time.Duration) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		seed := r.Uint64()
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			wr := rand.New(rand.NewPCG(seed, uint64(worker)))
			for n := 0; n < txs; n++ {
				err := e.xtx(ctx, wr, worker)
				for try := 0; err != nil && isDeadlock(err) && try < 10; try++ {
					err = e.xtx(ctx, wr, worker) // what an application does
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d tx %d: %w", worker, n, err)
					return
				}
				time.Sleep(pause) // shapes the workload; not a wait for replication
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (e *endpoint) xtx(ctx context.Context, r *rand.Rand, worker int) error {
	var stmts []struct {
		q    string
		args []any
	}
	add := func(q string, args ...any) {
		stmts = append(stmts, struct {
			q    string
			args []any
		}{q, args})
	}
	for i := 0; i < 5; i++ {
		id := int64(r.IntN(60))*8 + int64(worker)
		switch r.IntN(8) {
		case 0, 1, 2:
			names := []string{"id"}
			phs := []string{e.ph(1, "bigint")}
			args := []any{strconv.FormatInt(id, 10)}
			sets := []string{}
			for j, c := range xcols {
				names = append(names, c.name)
				phs = append(phs, e.ph(j+2, c.pgType))
				args = append(args, e.arg(c, c.gen(r)))
				if e.pg != nil {
					sets = append(sets, c.name+" = EXCLUDED."+c.name)
				} else {
					sets = append(sets, c.name+" = VALUES("+c.name+")")
				}
			}
			if e.pg != nil {
				for j := range args {
					if j > 0 && xcols[j-1].kind == "bytes" && args[j] != nil {
						// bytea takes its hex text form through the text cast.
						phs[j] = fmt.Sprintf("$%d::text::bytea", j+1)
					}
				}
				add(fmt.Sprintf("INSERT INTO items (%s) VALUES (%s) ON CONFLICT (id) DO UPDATE SET %s",
					strings.Join(names, ", "), strings.Join(phs, ", "), strings.Join(sets, ", ")), args...)
			} else {
				add(fmt.Sprintf("INSERT INTO items (%s) VALUES (%s) ON DUPLICATE KEY UPDATE %s",
					strings.Join(names, ", "), strings.Join(phs, ", "), strings.Join(sets, ", ")), args...)
			}
		case 3:
			c := xcols[r.IntN(len(xcols))]
			add(fmt.Sprintf("UPDATE items SET %s = %s WHERE id = %s", c.name, e.ph(1, c.pgType), e.ph(2, "bigint")),
				e.arg(c, c.gen(r)), strconv.FormatInt(id, 10))
		case 4:
			// A primary-key change, staying in the worker's partition.
			if e.pg != nil {
				add(fmt.Sprintf("UPDATE items SET id = id + 800 WHERE id = %d AND NOT EXISTS (SELECT 1 FROM items WHERE id = %d)", id, id+800))
			} else {
				add(fmt.Sprintf("UPDATE IGNORE items SET id = id + 800 WHERE id = %d", id))
			}
		case 5:
			add(fmt.Sprintf("DELETE FROM items WHERE id IN (%d, %d)", id, id+800))
		case 6:
			if e.pg != nil {
				add(fmt.Sprintf("INSERT INTO order_lines VALUES (%d, %d, 'sku-%d', %d) ON CONFLICT (order_id, line_no) DO UPDATE SET qty = order_lines.qty + 1",
					id, r.IntN(4), r.IntN(99), r.IntN(50)))
			} else {
				add(fmt.Sprintf("INSERT INTO order_lines VALUES (%d, %d, 'sku-%d', %d) ON DUPLICATE KEY UPDATE qty = qty + 1",
					id, r.IntN(4), r.IntN(99), r.IntN(50)))
			}
		case 7:
			add(fmt.Sprintf("DELETE FROM order_lines WHERE order_id = %d AND line_no = %d", id, r.IntN(4)))
		}
	}
	if e.pg != nil {
		tx, err := e.pg.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s.q, s.args...); err != nil {
				return fmt.Errorf("%s: %w", s.q, err)
			}
		}
		return tx.Commit(ctx)
	}
	tx, err := e.my.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s.q, s.args...); err != nil {
			return fmt.Errorf("%s: %w", s.q, err)
		}
	}
	return tx.Commit()
}

var xtables = map[string][]string{
	"items": append([]string{"id"}, func() []string {
		var n []string
		for _, c := range xcols {
			n = append(n, c.name)
		}
		return n
	}()...),
	"order_lines": {"order_id", "line_no", "sku", "qty"},
}

// xtableNames are the cross-engine schema's tables, in a fixed order.
func xtableNames() []string {
	names := make([]string, 0, len(xtables))
	for t := range xtables {
		names = append(names, t)
	}
	slices.Sort(names)
	return names
}

// waitXConverged polls until the cross-engine tables are equal on both
// sides, by the independent comparison.
func waitXConverged(t *testing.T, src, dst *endpoint, within time.Duration, run *running) {
	t.Helper()
	waitEqual(t, src, dst, xtableNames(), within, run)
}

// TestCrossEngineOverWAN runs the three MySQL-family acceptance pairs end
// to end over a 96 ms link: concurrent inserts, updates (including primary
// key changes) and deletes, a composite key, every mapped type and NULLs.
func TestCrossEngineOverWAN(t *testing.T) {
	t.Parallel() // waits on the link and the servers, not the CPU: it overlaps the other such tests
	pairs := []struct{ from, to daemon.Engine }{
		{daemon.EngineMySQL, daemon.EngineMySQL},
		{daemon.EngineMySQL, daemon.EnginePostgres},
		{daemon.EnginePostgres, daemon.EngineMySQL},
	}
	for _, pr := range pairs {
		t.Run(string(pr.from)+"_to_"+string(pr.to), func(t *testing.T) {
			t.Parallel() // a database pair of its own; a trigger stream's state lives in it
			ctx := context.Background()
			src, dst := newEndpoint(t, pr.from), newEndpoint(t, pr.to)
			if err := src.createSchema(ctx); err != nil {
				t.Fatal(err)
			}
			if err := dst.createSchema(ctx); err != nil {
				t.Fatal(err)
			}
			dstURL, _ := dst.viaProxy(t, 48*time.Millisecond)
			r := rng(t)
			o := daemon.StreamOptions{
				ID:           "x",
				SourceURL:    src.url,
				TargetURL:    dstURL,
				Tables:       tableNames(t, []string{"items", "order_lines"}),
				StateDir:     t.TempDir(),
				PollInterval: 50 * time.Millisecond,
				SourceMode:   "trigger",
				KillBudget:   5 * time.Second,
			}
			run := startStream(t, o)
			// Wait for capture to be installed before writing.
			run.waitStarted(t, 60*time.Second)
			if err := src.xworkload(ctx, r, 4, 40, 20*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			waitXConverged(t, src, dst, 90*time.Second, run)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func isDeadlock(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Deadlock found") || strings.Contains(s, "40P01") || strings.Contains(s, "Lock wait timeout")
}
