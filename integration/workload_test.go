package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schema is the three-table schema of the end-to-end tests: a plain table
// whose primary key gets updated, a composite key, and every type sluice
// promises to carry exactly.
var schema = []string{
	`CREATE TABLE accounts (
		id bigint PRIMARY KEY,
		owner text NOT NULL,
		balance numeric(14,2) NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now())`,
	`CREATE TABLE order_lines (
		order_id integer NOT NULL,
		line_no smallint NOT NULL,
		sku varchar(32) NOT NULL,
		qty integer,
		price numeric(10,2),
		PRIMARY KEY (order_id, line_no))`,
	`CREATE TABLE all_types (
		id bigint PRIMARY KEY,
		c_smallint smallint, c_integer integer, c_bigint bigint, c_numeric numeric(30,10),
		c_real real, c_double double precision, c_text text, c_varchar varchar(40), c_char char(6),
		c_boolean boolean, c_bytea bytea, c_date date, c_timestamp timestamp, c_timestamptz timestamptz,
		c_time time, c_interval interval, c_uuid uuid, c_json json, c_jsonb jsonb,
		c_text_arr text[], c_int_arr integer[])`,
}

var schemaTables = []string{"public.accounts", "public.order_lines", "public.all_types"}

// allTypesCols lists all_types' columns with a generator of a source-side
// SQL literal (or NULL) for each.
var allTypesCols = []struct {
	name string
	gen  func(r *rand.Rand) string
}{
	{"c_smallint", func(r *rand.Rand) string { return fmt.Sprint(r.IntN(65535) - 32768) }},
	{"c_integer", func(r *rand.Rand) string { return fmt.Sprint(r.Int32() - 1<<30) }},
	{"c_bigint", func(r *rand.Rand) string { return fmt.Sprint(r.Int64() - 1<<62) }},
	{"c_numeric", func(r *rand.Rand) string {
		return fmt.Sprintf("'%d.%010d'", r.Int64N(1e18)-5e17, r.Int64N(1e10))
	}},
	{"c_real", func(r *rand.Rand) string {
		return pick(r, fmt.Sprintf("'%g'", r.Float32()*1e6), "'NaN'", "'-Infinity'", "'1.17549435e-38'", "'3.4028235e38'")
	}},
	{"c_double", func(r *rand.Rand) string {
		return pick(r, fmt.Sprintf("'%v'", r.NormFloat64()*1e12), "'Infinity'", "'2.2250738585072014e-308'", "'0.1'", "'-0'")
	}},
	{"c_text", func(r *rand.Rand) string {
		return pick(r, "'plain'", `E'tab\there, newline\nand quote '' and backslash \\ and "dq"'`, "'ünïcödé ✓ 中文'", "''", "repeat('x', 3000)")
	}},
	{"c_varchar", func(r *rand.Rand) string { return fmt.Sprintf("'v%d'", r.IntN(1e9)) }},
	{"c_char", func(r *rand.Rand) string { return pick(r, "'ab'", "'abcdef'", "' x '") }},
	{"c_boolean", func(r *rand.Rand) string { return pick(r, "true", "false") }},
	{"c_bytea", func(r *rand.Rand) string {
		return pick(r, `'\x00ff10'::bytea`, `''::bytea`, "decode(md5(random()::text), 'hex')")
	}},
	{"c_date", func(r *rand.Rand) string {
		return pick(r, "'2024-02-29'", "'0044-03-15 BC'", "'infinity'", "'1999-12-31'")
	}},
	{"c_timestamp", func(r *rand.Rand) string {
		return pick(r, "'2024-01-02 03:04:05.123456'", "'1970-01-01 00:00:00'", "'-infinity'")
	}},
	{"c_timestamptz", func(r *rand.Rand) string {
		return pick(r, "'2024-06-30 23:59:59.999999+05:30'", "'2000-01-01 00:00:00+00'", "now()")
	}},
	{"c_time", func(r *rand.Rand) string { return pick(r, "'23:59:59.999999'", "'00:00'", "'12:34:56'") }},
	{"c_interval", func(r *rand.Rand) string { return pick(r, "'1 year 2 mons 3 days 04:05:06.7'", "'-1 day'", "'0'") }},
	{"c_uuid", func(r *rand.Rand) string { return "gen_random_uuid()" }},
	{"c_json", func(r *rand.Rand) string {
		return pick(r, `'{"b": 1,   "a": [1, 2.50, "x"], "a": null}'`, `'[]'`, `'"str"'`, `'  {"nested": {"k": "v\u00e9"}}  '`)
	}},
	{"c_jsonb", func(r *rand.Rand) string { return pick(r, `'{"b": 1, "a": [1, 2.50]}'`, `'{}'`, `'123.4500'`) }},
	{"c_text_arr", func(r *rand.Rand) string {
		return pick(r, `ARRAY['a', 'b c', NULL, '{q}', 'with "quote"', 'back\slash']`, `'{}'::text[]`, `ARRAY['NULL']`)
	}},
	{"c_int_arr", func(r *rand.Rand) string {
		return pick(r, `ARRAY[1, NULL, -3]`, `'{}'::int[]`, `'{{1,2},{3,4}}'::int[]`)
	}},
}

func pick(r *rand.Rand, opts ...string) string {
	if r.IntN(8) == 0 {
		return "NULL"
	}
	return opts[r.IntN(len(opts))]
}

// workload runs random transactions against the three tables. Every
// transaction mixes inserts, updates (including primary-key updates) and
// deletes. Ids are partitioned per worker so that workers do not deadlock
// on each other; rows still see several changes each.
type workload struct {
	pool    *pgxpool.Pool
	workers int
	txs     int // transactions per worker
	ops     int // statements per transaction
	// pause between a worker's transactions shapes the workload into a
	// sustained stream rather than one burst.
	pause time.Duration
	done  atomic.Int64
}

func (w *workload) run(ctx context.Context, t *testing.T, r *rand.Rand) error {
	var wg sync.WaitGroup
	errs := make(chan error, w.workers)
	for i := 0; i < w.workers; i++ {
		seed := r.Uint64()
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			wr := rand.New(rand.NewPCG(seed, uint64(worker)))
			for n := 0; n < w.txs; n++ {
				if err := w.tx(ctx, wr, worker); err != nil {
					errs <- fmt.Errorf("worker %d tx %d: %w", worker, n, err)
					return
				}
				w.done.Add(1)
				if w.pause > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(w.pause):
					}
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (w *workload) tx(ctx context.Context, r *rand.Rand, worker int) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		for i := 0; i < w.ops; i++ {
			if err := w.op(ctx, tx, r, worker); err != nil {
				return err
			}
		}
		return nil
	})
}

// Each worker owns ids ≡ worker (mod 16) in a small space, so rows are
// revisited (update after insert, delete, re-insert) inside and across
// transactions and batches.
func (w *workload) id(r *rand.Rand, worker int) int64 {
	return int64(r.IntN(200))*16 + int64(worker)
}

func (w *workload) op(ctx context.Context, tx pgx.Tx, r *rand.Rand, worker int) error {
	id := w.id(r, worker)
	var sql string
	switch r.IntN(10) {
	case 0, 1:
		sql = fmt.Sprintf(`INSERT INTO accounts (id, owner, balance) VALUES (%d, 'owner-%d', %d.%02d)
			ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + 1, updated_at = now()`, id, r.IntN(1000), r.IntN(100000), r.IntN(100))
	case 2:
		sql = fmt.Sprintf(`UPDATE accounts SET balance = balance * 1.01, owner = owner || '+' WHERE id = %d`, id)
	case 3:
		// A primary-key change: the row moves to a new id (kept in the
		// worker's partition, above the plain-id range).
		sql = fmt.Sprintf(`UPDATE accounts SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM accounts WHERE id = %d)`,
			id+100_000, id, id+100_000)
	case 4:
		sql = fmt.Sprintf(`DELETE FROM accounts WHERE id IN (%d, %d)`, id, id+100_000)
	case 5, 6:
		sql = fmt.Sprintf(`INSERT INTO order_lines VALUES (%d, %d, 'sku-%d', %d, %d.%02d)
			ON CONFLICT (order_id, line_no) DO UPDATE SET qty = order_lines.qty + 1`, id, r.IntN(4), r.IntN(99), r.IntN(50), r.IntN(1000), r.IntN(100))
	case 7:
		sql = fmt.Sprintf(`DELETE FROM order_lines WHERE order_id = %d AND line_no = %d`, id, r.IntN(4))
	case 8:
		cols := make([]string, len(allTypesCols))
		vals := make([]string, len(allTypesCols))
		sets := make([]string, len(allTypesCols))
		for i, c := range allTypesCols {
			cols[i] = c.name
			vals[i] = c.gen(r)
			sets[i] = c.name + " = EXCLUDED." + c.name
		}
		sql = fmt.Sprintf(`INSERT INTO all_types (id, %s) VALUES (%d, %s) ON CONFLICT (id) DO UPDATE SET %s`,
			strings.Join(cols, ", "), id, strings.Join(vals, ", "), strings.Join(sets, ", "))
	case 9:
		if r.IntN(2) == 0 {
			sql = fmt.Sprintf(`DELETE FROM all_types WHERE id = %d`, id)
		} else {
			c := allTypesCols[r.IntN(len(allTypesCols))]
			sql = fmt.Sprintf(`UPDATE all_types SET %s = %s WHERE id = %d`, c.name, c.gen(r), id)
		}
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}
