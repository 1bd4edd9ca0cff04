package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// appSchema is an application schema on the source: customers ← orders ←
// order_lines, joined by foreign keys with cascades, a unique key, a
// secondary index, text long enough for PostgreSQL to store out of line,
// NULLs, decimals, timestamps, JSON and bytes.
func appSchema(e daemon.Engine) []string {
	if e == daemon.EnginePostgres {
		return []string{
			`CREATE TABLE customers (id bigint PRIMARY KEY, email varchar(120) NOT NULL UNIQUE, name text,
				created timestamptz NOT NULL DEFAULT now(), balance numeric(12,2) DEFAULT 0)`,
			`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL REFERENCES customers (id) ON DELETE CASCADE,
				placed timestamp(6) NOT NULL, status varchar(20) NOT NULL DEFAULT 'new', total numeric(12,2), note text, attrs jsonb, receipt bytea)`,
			`CREATE INDEX orders_placed_idx ON orders (placed)`,
			`CREATE TABLE order_lines (order_id bigint NOT NULL REFERENCES orders (id) ON DELETE CASCADE, line_no integer NOT NULL,
				sku varchar(32) NOT NULL, qty integer NOT NULL, price numeric(10,2), PRIMARY KEY (order_id, line_no))`,
		}
	}
	return []string{
		`CREATE TABLE customers (id bigint PRIMARY KEY, email varchar(120) NOT NULL UNIQUE, name text,
			created timestamp(6) NOT NULL DEFAULT current_timestamp(6), balance decimal(12,2) DEFAULT 0)`,
		`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, placed datetime(6) NOT NULL,
			status varchar(20) NOT NULL DEFAULT 'new', total decimal(12,2), note mediumtext, attrs json, receipt longblob,
			KEY orders_placed_idx (placed), CONSTRAINT orders_customer_fk FOREIGN KEY (customer_id) REFERENCES customers (id) ON DELETE CASCADE)`,
		`CREATE TABLE order_lines (order_id bigint NOT NULL, line_no int NOT NULL, sku varchar(32) NOT NULL, qty int NOT NULL,
			price decimal(10,2), PRIMARY KEY (order_id, line_no),
			CONSTRAINT order_lines_order_fk FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE)`,
	}
}

var appTables = []string{"customers", "orders", "order_lines"}

// appWriter writes the application's transactions to the source.
type appWriter struct {
	e        *endpoint
	r        *rand.Rand
	next     int // next customer id; orders are id*10+k, lines their own
	cascades bool
	// noReceipt: orders.receipt was dropped.
	noReceipt bool
}

func (w *appWriter) customer(id int) []stmt {
	var name any = fmt.Sprintf("customer %d ✓", id)
	if id%7 == 0 {
		name = nil
	}
	out := []stmt{st("INSERT INTO customers (id, email, name, balance) VALUES (?, ?, ?, ?)", id, fmt.Sprintf("c%d@example.com", id), name, fmt.Sprintf("%d.%02d", id*3, id%100))}
	for k := 0; k < 3; k++ {
		oid := id*10 + k
		note := any(nil)
		if k == 1 {
			note = strings.Repeat(fmt.Sprintf("long note %d ", oid), 1500) // stored out of line (TOAST)
		}
		var attrs, receipt any
		if k != 2 {
			attrs = fmt.Sprintf(`{"k": %d, "tags": ["a", "b"]}`, oid)
			receipt = []byte{0, byte(oid), 0xff, 'x'}
			if w.e.pg != nil {
				receipt = fmt.Sprintf(`\x00%02xff78`, byte(oid))
			}
		}
		if w.noReceipt {
			out = append(out, st("INSERT INTO orders (id, customer_id, placed, total, note, attrs) VALUES (?, ?, ?, ?, ?, ?)",
				oid, id, fmt.Sprintf("2024-0%d-1%d 10:11:12.%06d", 1+k, k, oid), fmt.Sprintf("%d.5", oid), note, attrs))
		} else {
			out = append(out, st("INSERT INTO orders (id, customer_id, placed, total, note, attrs, receipt) VALUES (?, ?, ?, ?, ?, ?, ?)",
				oid, id, fmt.Sprintf("2024-0%d-1%d 10:11:12.%06d", 1+k, k, oid), fmt.Sprintf("%d.5", oid), note, attrs, receipt))
		}
		for l := 1; l <= 3; l++ {
			out = append(out, st("INSERT INTO order_lines (order_id, line_no, sku, qty, price) VALUES (?, ?, ?, ?, ?)",
				oid, l, fmt.Sprintf("SKU-%d-%d", oid, l), l, fmt.Sprintf("%d.99", l)))
		}
	}
	return out
}

// populate inserts n customers, each with three orders of three lines.
func (w *appWriter) populate(ctx context.Context, n int) error {
	for i := 0; i < n; i++ {
		w.next++
		if err := w.e.inTx(ctx, w.customer(w.next)...); err != nil {
			return err
		}
	}
	return nil
}

// tx writes one random transaction: a new customer with orders, an order
// updated, its lines changed, a line deleted, or (with cascades) a
// customer deleted with everything below it.
func (w *appWriter) tx(ctx context.Context) error {
	id := 1 + w.r.IntN(w.next)
	oid := id*10 + w.r.IntN(3)
	switch n := w.r.IntN(10); {
	case n < 3:
		w.next++
		return w.e.inTx(ctx, w.customer(w.next)...)
	case n < 6:
		return w.e.inTx(ctx,
			st("UPDATE orders SET status = ?, total = total + 1 WHERE id = ?", []string{"paid", "sent", "done"}[w.r.IntN(3)], oid),
			st("UPDATE order_lines SET qty = qty + 1 WHERE order_id = ? AND line_no = 1", oid))
	case n < 8:
		return w.e.inTx(ctx, st("DELETE FROM order_lines WHERE order_id = ? AND line_no = 3", oid),
			st("UPDATE customers SET name = NULL, balance = balance - 1 WHERE id = ?", id))
	case w.cascades:
		return w.e.inTx(ctx, st("DELETE FROM customers WHERE id = ?", id))
	}
	return w.e.inTx(ctx, st("UPDATE orders SET note = NULL WHERE id = ?", oid))
}

// TestSchemaCreateCopyStream is issue 30's first case, in the four
// directions: from a populated source and an empty target database, a
// plain sync start creates the tables (primary keys first, unique keys,
// the index and the foreign keys with their actions after the copy),
// copies the rows, streams a live workload, and the target ends equal to
// the source by the independent comparison, with the target's keys,
// index and foreign keys as the source has them.
func TestSchemaCreateCopyStream(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	for i, pair := range []struct{ from, to daemon.Engine }{
		{daemon.EnginePostgres, daemon.EnginePostgres},
		{daemon.EnginePostgres, daemon.EngineMySQL},
		{daemon.EngineMySQL, daemon.EnginePostgres},
		{daemon.EngineMySQL, daemon.EngineMySQL},
	} {
		t.Run(fmt.Sprintf("%s_to_%s", pair.from, pair.to), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src, dst := newEndpoint(t, pair.from), newEndpoint(t, pair.to)
			for _, ddl := range appSchema(pair.from) {
				if err := src.exec(ctx, ddl); err != nil {
					t.Fatalf("%s: %v", ddl, err)
				}
			}
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			w := &appWriter{e: src, r: rand.New(rand.NewPCG(seed, 30)),
				// A MySQL source's log omits the rows its cascades change;
				// carrying them out on a PostgreSQL target is issue 28's.
				cascades: !(pair.from == daemon.EngineMySQL && pair.to == daemon.EnginePostgres)}
			if err := w.populate(ctx, 20); err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("sch%d", i)
			o := daemon.StreamOptions{
				ID: id, SourceURL: src.url, TargetURL: dst.url, Tables: tableNames(t, appTables), StateDir: t.TempDir(),
				SourceMode: logMode(pair.from), PollInterval: 50 * time.Millisecond, KillBudget: 5 * time.Second,
				MaxLanes: 2, CopyChunkRows: 25,
			}
			dropSlotAtCleanup(t, src, id, appTables)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)
			for n := 0; n < 40; n++ {
				if err := w.tx(ctx); err != nil {
					t.Fatal(err)
				}
			}
			waitEqualDB(t, src.dbOf(), dst.dbOf(), appTables, 60*time.Second, run)
			checkTargetSchema(t, dst, pair.from)

			// DDL on the source while it streams, between the writer's
			// transactions: each reaches the target at its place.
			for _, ddl := range appDDL(pair.from) {
				if err := src.exec(ctx, ddl); err != nil {
					t.Fatalf("%s: %v", ddl, err)
				}
				w.noReceipt = w.noReceipt || strings.Contains(ddl, "DROP COLUMN receipt")
				for n := 0; n < 10; n++ {
					if err := w.tx(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			waitEqualAfterDDL(t, src, dst, appTables, 60*time.Second, run)
			checkFollowedDDL(t, dst)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// appDDL is the DDL made on the source while it streams: an added column
// with a constant default, a dropped column, a widened VARCHAR and a
// created index.
func appDDL(e daemon.Engine) []string {
	if e == daemon.EnginePostgres {
		return []string{
			`ALTER TABLE orders ADD COLUMN priority integer DEFAULT 1`,
			`ALTER TABLE orders DROP COLUMN receipt`,
			`ALTER TABLE orders ALTER COLUMN status TYPE varchar(40)`,
			`CREATE INDEX orders_status_idx ON orders (status)`,
		}
	}
	return []string{
		`ALTER TABLE orders ADD COLUMN priority int DEFAULT 1`,
		`ALTER TABLE orders DROP COLUMN receipt`,
		`ALTER TABLE orders MODIFY status varchar(40) NOT NULL DEFAULT 'new'`,
		`CREATE INDEX orders_status_idx ON orders (status)`,
	}
}

// checkFollowedDDL checks the target's orders table after appDDL: the
// column added, the one dropped, status widened to 40 characters and the
// index on it.
func checkFollowedDDL(t *testing.T, dst *endpoint) {
	t.Helper()
	ctx := context.Background()
	var priority, receipt, statusLen, statusIdx int
	var err error
	if dst.pg != nil {
		err = dst.pg.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'priority'),
			(SELECT count(*) FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'receipt'),
			(SELECT coalesce(character_maximum_length, 0) FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'status'),
			(SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
				WHERE i.indrelid = 'orders'::regclass AND a.attname = 'status')`).Scan(&priority, &receipt, &statusLen, &statusIdx)
	} else {
		err = dst.my.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'priority'),
			(SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'receipt'),
			(SELECT COALESCE(CHARACTER_MAXIMUM_LENGTH, 0) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'status'),
			(SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'status' AND SEQ_IN_INDEX = 1)`).Scan(&priority, &receipt, &statusLen, &statusIdx)
	}
	if err != nil {
		t.Fatal(err)
	}
	if priority != 1 || receipt != 0 || statusLen != 40 || statusIdx != 1 {
		t.Errorf("target orders after the source's DDL: priority column %d (want 1), receipt column %d (want 0), status length %d (want 40), indexes on status %d (want 1)",
			priority, receipt, statusLen, statusIdx)
	}
}

// checkTargetSchema checks what sync start created besides the rows: the
// unique key, the secondary index and both foreign keys, with their
// ON DELETE CASCADE.
func checkTargetSchema(t *testing.T, dst *endpoint, from daemon.Engine) {
	t.Helper()
	ctx := context.Background()
	var uniques, indexes, cascades int
	var err error
	if dst.pg != nil {
		err = dst.pg.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_index WHERE indrelid = 'customers'::regclass AND indisunique AND NOT indisprimary),
			(SELECT count(*) FROM pg_index WHERE indrelid = 'orders'::regclass AND NOT indisunique),
			(SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND confdeltype = 'c' AND convalidated
				AND conrelid IN ('orders'::regclass, 'order_lines'::regclass))`).Scan(&uniques, &indexes, &cascades)
	} else {
		err = dst.my.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'customers' AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY'),
			(SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'orders' AND NON_UNIQUE = 1 AND COLUMN_NAME = 'placed'),
			(SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE() AND DELETE_RULE = 'CASCADE')`).Scan(&uniques, &indexes, &cascades)
	}
	if err != nil {
		t.Fatal(err)
	}
	if uniques != 1 || indexes < 1 || cascades != 2 {
		t.Errorf("created target schema (from %s): %d unique keys on customers (want 1), %d indexes on orders.placed (want 1), %d validated ON DELETE CASCADE foreign keys (want 2)",
			from, uniques, indexes, cascades)
	}
}

// runSluice runs the sluice binary and returns its exit code and output.
func runSluice(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, buildSluice(t), args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("run sluice %s: %v", strings.Join(args, " "), err)
	}
	return 0, string(out)
}

// TestSchemaCommands runs sluice schema diff, plan (text and JSON) and
// apply through the binary, PostgreSQL to MariaDB: an empty target
// differs (exit 1, each table named), plan prints the DDL sync start
// would run, apply creates the tables and their keys, after which diff
// finds none (exit 0); a column no MariaDB type holds exactly is refused
// by plan (exit 4), named with the choices.
func TestSchemaCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EngineMySQL)
	for _, ddl := range appSchema(daemon.EnginePostgres) {
		if err := src.exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	args := func(cmd string, extra ...string) []string {
		return append([]string{"schema", cmd, "--source", src.url, "--target", dst.url, "--tables", strings.Join(appTables, ",")}, extra...)
	}
	code, out := runSluice(t, args("diff")...)
	if code != 1 || strings.Count(out, "table missing") != 3 {
		t.Errorf("diff of an empty target: exit %d, want 1 naming 3 missing tables:\n%s", code, out)
	}
	code, out = runSluice(t, args("plan")...)
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS `orders`", "COLLATE utf8mb4_nopad_bin", "after the initial copy", "ON DELETE CASCADE"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("plan: exit %d, lacks %q:\n%s", code, want, out)
		}
	}
	code, out = runSluice(t, args("plan", "--json")...)
	var plans []struct {
		Plan struct {
			Tables []struct {
				Create []struct{ SQL string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &plans); code != 0 || err != nil || len(plans) != 1 || len(plans[0].Plan.Tables) != 3 {
		t.Errorf("plan --json: exit %d, %v:\n%s", code, err, out)
	}
	if code, out = runSluice(t, args("apply")...); code != 0 || strings.Count(out, "created table") != 3 {
		t.Errorf("apply: exit %d, want 0 creating 3 tables:\n%s", code, out)
	}
	if code, out = runSluice(t, args("diff")...); code != 0 {
		t.Errorf("diff after apply: exit %d, want 0:\n%s", code, out)
	}
	checkTargetSchema(t, dst, daemon.EnginePostgres)

	if err := src.exec(ctx, "CREATE TABLE ledger (id int PRIMARY KEY, amount numeric)"); err != nil {
		t.Fatal(err)
	}
	code, out = runSluice(t, "schema", "plan", "--source", src.url, "--target", dst.url, "--tables", "ledger")
	for _, want := range []string{"column public.ledger.amount", "numeric without precision", "declare the source column numeric(p,s)", "longtext"} {
		if code != 4 || !strings.Contains(out, want) {
			t.Errorf("plan of a numeric without precision: exit %d, want 4 saying %q:\n%s", code, want, out)
		}
	}
}

// waitEqualAfterDDL is waitEqualDB while the target's tables may still
// have the columns of before the source's DDL: a comparison that cannot
// match the two tables' columns yet is a difference, not an error.
func waitEqualAfterDDL(t *testing.T, src, dst *endpoint, tables []string, within time.Duration, run *running) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		diffs, err := dbtest.CompareTables(ctx, src.dbOf(), dst.dbOf(), tables...)
		if err == nil && diffs.Equal() {
			return
		}
		select {
		case err := <-run.done:
			run.done <- err
			t.Fatalf("stream stopped before the target equalled the source: %v\n%v", err, diffs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("target does not equal the source after %v: %v\n%v", within, err, diffs)
		}
		time.Sleep(200 * time.Millisecond) // polling interval, not a wait for replication
	}
}
