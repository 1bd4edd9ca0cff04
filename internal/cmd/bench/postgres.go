package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// table is the bench table on PostgreSQL.
const table = "public.items"

var pgTables = []sluice.TableName{{Schema: "public", Name: "items"}}

const tableDDL = `CREATE TABLE items (
	id bigint PRIMARY KEY,
	qty integer NOT NULL,
	label text NOT NULL,
	price numeric(12,2),
	at timestamptz NOT NULL)`

type pgWorkload func(ctx context.Context, conn *pgx.Conn, n int) error

// postgres starts the PostgreSQL source and target unless running.
func (e *env) postgres(ctx context.Context) error {
	return startPair(ctx, dbtest.PGEngine, "PostgreSQL", &e.pgSrc, &e.pgDst)
}

func (e *env) stopPostgres() { stopPair(&e.pgSrc, &e.pgDst) }

// pgDatabase creates database name on srv with the bench table and, when
// base > 0, its base rows.
func pgDatabase(ctx context.Context, srv dbtest.Server, name string, base int) (string, error) {
	if err := srv.CreateDatabase(ctx, name); err != nil {
		return "", err
	}
	u := srv.URL(name)
	stmts := []string{tableDDL}
	if base > 0 {
		stmts = append(stmts, insertRange(1, base, 0))
	}
	if err := execAll(ctx, u, stmts...); err != nil {
		return "", fmt.Errorf("create bench table: %w", err)
	}
	return u, nil
}

// ---- pgtrigger ----------------------------------------------------------

func (e *env) benchPGTrigger(ctx context.Context) ([]result, []readerResult, error) {
	if err := e.postgres(ctx); err != nil {
		return nil, nil, err
	}
	cfg := e.cfg
	var scenarios []scenario
	for _, rtt := range cfg.rtts {
		scenarios = append(scenarios, scenario{mode: "pipelined", rtt: rtt, changes: cfg.changes})
	}
	if cfg.direct {
		scenarios = append(scenarios, scenario{mode: "pipelined", direct: true, changes: cfg.changes})
	}
	if cfg.perRow {
		for _, rtt := range cfg.rtts {
			scenarios = append(scenarios, scenario{mode: "per-row", rtt: rtt, changes: cfg.perRowChanges})
		}
	}
	var results []result
	var readers []readerResult
	for _, w := range workloads {
		fmt.Fprintf(os.Stderr, "==> pgtrigger, %s: reader ceiling over %d changes\n", w.name, cfg.changes)
		srcURL, _, err := e.prepareTrigger(ctx, w, cfg.changes)
		if err != nil {
			return results, readers, err
		}
		rr, err := readPasses(ctx, srcPGTrigger, w.name, cfg.changes, func() (reader, error) {
			return pgtrigger.Open(ctx, srcURL, pgtrigger.Config{Tables: pgTables, PollInterval: pollInterval, Logger: e.log}, sluice.Position{})
		})
		if err != nil {
			return results, readers, err
		}
		readers = append(readers, rr...)
		for _, sc := range scenarios {
			if ctx.Err() != nil {
				return results, readers, ctx.Err()
			}
			fmt.Fprintf(os.Stderr, "==> pgtrigger, %s, %s, %s, %d changes\n", w.name, sc.mode, sc.link(), sc.changes)
			srcURL, dstURL, err := e.prepareTrigger(ctx, w, sc.changes)
			if err != nil {
				return results, readers, err
			}
			r, err := e.stream(ctx, streamRun{
				source: srcPGTrigger, workload: w.name, sc: sc, id: "bench",
				srcURL: srcURL, dstURL: dstURL, dstAddr: e.pgDst.Addr(), mode: "trigger", tables: pgTables,
			})
			if err == nil {
				r.verified, err = sameTables(ctx, srcURL, dstURL)
			}
			if err != nil {
				return results, readers, fmt.Errorf("%s %s %s: %w", w.name, sc.mode, sc.link(), err)
			}
			logRun(r)
			results = append(results, r)
		}
	}
	return results, readers, nil
}

// prepareTrigger makes a fresh source/target pair holding the workload's
// base rows and a backlog of n changes in the source's trigger changelog.
func (e *env) prepareTrigger(ctx context.Context, w workload, n int) (srcURL, dstURL string, err error) {
	name := e.nextName()
	base := w.base(n)
	if srcURL, err = pgDatabase(ctx, e.pgSrc, name, base); err != nil {
		return "", "", err
	}
	if dstURL, err = pgDatabase(ctx, e.pgDst, name, base); err != nil {
		return "", "", err
	}
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return "", "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := pgtrigger.Install(ctx, conn, pgtrigger.DefaultSchema, pgTables); err != nil {
		return "", "", fmt.Errorf("install capture: %w", err)
	}
	if err := w.pg(ctx, conn, n); err != nil {
		return "", "", fmt.Errorf("workload %s: %w", w.name, err)
	}
	var logged int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sluice.changelog`).Scan(&logged); err != nil {
		return "", "", fmt.Errorf("count changelog: %w", err)
	}
	if logged != n {
		return "", "", fmt.Errorf("changelog holds %d changes, want %d", logged, n)
	}
	return srcURL, dstURL, nil
}

// ---- pglogical ----------------------------------------------------------

// benchPGLogical: per workload, one source database and one backlog, read
// through several slots all created before the backlog was written: one
// for the reader-ceiling passes (never acknowledged, so both passes read
// the same backlog), one per timed run, each run into its own fresh target
// database.
func (e *env) benchPGLogical(ctx context.Context) ([]result, []readerResult, error) {
	if err := e.postgres(ctx); err != nil {
		return nil, nil, err
	}
	cfg := e.cfg
	var results []result
	var readers []readerResult
	for _, w := range workloads {
		n := cfg.changes
		base := w.base(n)
		name := e.nextName()
		fmt.Fprintf(os.Stderr, "==> pglogical, %s: %d-change backlog behind %d slots\n", w.name, n, len(cfg.rtts)+1)
		srcURL, err := pgDatabase(ctx, e.pgSrc, name, base)
		if err != nil {
			return results, readers, err
		}
		ceilID := name + "_ceiling"
		ids := []string{ceilID}
		for i := range cfg.rtts {
			ids = append(ids, fmt.Sprintf("%s_run%d", name, i))
		}
		start := map[string]string{}
		for _, id := range ids {
			if err := pglogical.Setup(ctx, srcURL, pglogical.Config{Tables: pgTables, Stream: id, Logger: e.log}); err != nil {
				return results, readers, fmt.Errorf("create slot: %w", err)
			}
			lsn, err := slotLSN(ctx, srcURL, pglogical.DefaultName(id))
			if err != nil {
				return results, readers, err
			}
			start[id] = lsn
		}
		dropSlot := func(id string) {
			if err := pglogical.Uninstall(context.WithoutCancel(ctx), srcURL, pglogical.Config{Tables: pgTables, Stream: id, Logger: e.log}); err != nil {
				fmt.Fprintf(os.Stderr, "    drop slot %s: %v\n", id, err)
			}
		}
		if err := e.pgBacklog(ctx, srcURL, w, n); err != nil {
			return results, readers, err
		}

		fmt.Fprintf(os.Stderr, "==> pglogical, %s: reader ceiling over %d changes\n", w.name, n)
		rr, err := readPasses(ctx, srcPGLogical, w.name, n, func() (reader, error) {
			return pglogical.Open(ctx, srcURL, pglogical.Config{Tables: pgTables, Stream: ceilID, PollInterval: pollInterval, Logger: e.log}, sluice.Position{})
		})
		dropSlot(ceilID)
		if err != nil {
			return results, readers, err
		}
		readers = append(readers, rr...)

		for i, rtt := range cfg.rtts {
			if ctx.Err() != nil {
				return results, readers, ctx.Err()
			}
			sc := scenario{mode: "pipelined", rtt: rtt, changes: n}
			id := ids[i+1]
			fmt.Fprintf(os.Stderr, "==> pglogical, %s, %s, %s, %d changes\n", w.name, sc.mode, sc.link(), n)
			dstURL, err := pgDatabase(ctx, e.pgDst, fmt.Sprintf("%s_target%d", name, i), base)
			if err != nil {
				return results, readers, err
			}
			r, err := e.stream(ctx, streamRun{
				source: srcPGLogical, workload: w.name, sc: sc, id: id,
				srcURL: srcURL, dstURL: dstURL, dstAddr: e.pgDst.Addr(), mode: "logical", tables: pgTables,
				seed: sluice.Position{Kind: pglogical.Kind, Token: start[id] + "/0"},
			})
			dropSlot(id)
			if err == nil {
				r.verified, err = sameTables(ctx, srcURL, dstURL)
			}
			if err != nil {
				return results, readers, fmt.Errorf("%s %s %s: %w", w.name, sc.mode, sc.link(), err)
			}
			logRun(r)
			results = append(results, r)
		}
	}
	return results, readers, nil
}

// pgBacklog writes the workload's n changes on the source.
func (e *env) pgBacklog(ctx context.Context, srcURL string, w workload, n int) error {
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := w.pg(ctx, conn, n); err != nil {
		return fmt.Errorf("workload %s: %w", w.name, err)
	}
	return nil
}

// slotLSN is a replication slot's confirmed_flush_lsn: a fresh slot's is
// where it starts decoding.
func slotLSN(ctx context.Context, u, slot string) (string, error) {
	conn, err := connect(ctx, u)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var lsn string
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn); err != nil {
		return "", fmt.Errorf("read slot %s position: %w", slot, err)
	}
	return lsn, nil
}

// ---- workloads and helpers ---------------------------------------------

// pgInsertOnly inserts n new rows, 100 per statement, one transaction each.
func pgInsertOnly(ctx context.Context, conn *pgx.Conn, n int) error {
	for lo := 1; lo <= n; lo += 100 {
		hi := min(lo+99, n)
		if _, err := conn.Exec(ctx, insertRange(lo, hi, 1)); err != nil {
			return err
		}
	}
	return nil
}

// pgMixed writes n changes over the n base rows: per source transaction of
// 100 changes, 50 inserts of new rows, 30 updates and 20 deletes of
// distinct base rows.
func pgMixed(ctx context.Context, conn *pgx.Conn, n int) error {
	return mixedPlan(n, func(ins, upd, del [2]int) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		var stmts []string
		if ins[1] >= ins[0] {
			stmts = append(stmts, insertRange(ins[0], ins[1], 1))
		}
		if upd[1] >= upd[0] {
			stmts = append(stmts, fmt.Sprintf(`UPDATE items SET qty = qty + 1, label = label || '+', price = price * 1.01, at = at + interval '1 hour' WHERE id BETWEEN %d AND %d`, upd[0], upd[1]))
		}
		if del[1] >= del[0] {
			stmts = append(stmts, fmt.Sprintf(`DELETE FROM items WHERE id BETWEEN %d AND %d`, del[0], del[1]))
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				tx.Rollback(ctx) //nolint:errcheck // the Exec error is the one to report
				return err
			}
		}
		return tx.Commit(ctx)
	})
}

// mixedPlan splits n changes over the n base rows into source transactions
// of 100: 50 inserts of new rows, 30 updates and 20 deletes of distinct
// base rows, and calls tx with each one's inclusive id ranges (empty when
// hi < lo).
func mixedPlan(n int, tx func(ins, upd, del [2]int) error) error {
	nextIns, nextUpd := n+1, 1
	nextDel := n*3/10 + 1 // past every id the updates can reach
	for done := 0; done < n; {
		chunk := min(100, n-done)
		ins := chunk / 2
		upd := chunk * 3 / 10
		del := chunk - ins - upd
		if err := tx([2]int{nextIns, nextIns + ins - 1}, [2]int{nextUpd, nextUpd + upd - 1}, [2]int{nextDel, nextDel + del - 1}); err != nil {
			return err
		}
		nextIns += ins
		nextUpd += upd
		nextDel += del
		done += chunk
	}
	return nil
}

// insertRange is one multi-row INSERT of ids lo..hi with deterministic
// values; gen varies the values between the base rows and later inserts.
func insertRange(lo, hi, gen int) string {
	return fmt.Sprintf(`INSERT INTO items (id, qty, label, price, at)
SELECT g, (g * 7 + %[3]d) %% 1000, 'item-' || g || '-' || %[3]d, ((g %% 10000) * 1.25)::numeric(12,2),
	timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(%[1]d, %[2]d) g`, lo, hi, gen)
}

func connect(ctx context.Context, u string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(u)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", endpoint.MaskURL(u), err)
	}
	cc.RuntimeParams["TimeZone"] = "UTC"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", endpoint.MaskURL(u), err)
	}
	return conn, nil
}

func execAll(ctx context.Context, u string, stmts ...string) error {
	conn, err := connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

// sameTables compares the bench table on both sides, both read in binary
// form (dbtest.CompareTable).
func sameTables(ctx context.Context, srcURL, dstURL string) (bool, error) {
	diffs, err := pgDiffs(ctx, srcURL, dstURL, table)
	if err != nil {
		return false, err
	}
	if !diffs.Equal() {
		fmt.Fprintf(os.Stderr, "    MISMATCH: %s\n", diffs)
	}
	return diffs.Equal(), nil
}

// pgDiffs compares tables on both sides, read in binary form
// (dbtest.CompareTables).
func pgDiffs(ctx context.Context, srcURL, dstURL string, tables ...string) (dbtest.Diffs, error) {
	var conns [2]*pgx.Conn
	for i, u := range []string{srcURL, dstURL} {
		conn, err := connect(ctx, u)
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		conns[i] = conn
	}
	return dbtest.CompareTables(ctx, dbtest.DB{PG: conns[0]}, dbtest.DB{PG: conns[1]}, tables...)
}
