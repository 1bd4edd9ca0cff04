package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
)

const myTableDDL = `CREATE TABLE items (
	id bigint PRIMARY KEY,
	qty int NOT NULL,
	label varchar(64) NOT NULL,
	price decimal(12,2),
	at datetime(6) NOT NULL)`

type myWorkload func(ctx context.Context, db *sql.DB, n int) error

// mariadb starts the MariaDB source and target unless running.
func (e *env) mariadb(ctx context.Context) error {
	return startPair(ctx, dbtest.MariaEngine, "MariaDB", &e.mySrc, &e.myDst)
}

func (e *env) stopMariaDB() { stopPair(&e.mySrc, &e.myDst) }

// myTables is the bench table of database name, as the MariaDB sources
// stream it (the MariaDB target writes to the same database name).
func myTables(name string) []sluice.TableName {
	return []sluice.TableName{{Schema: name, Name: "items"}}
}

// myDatabase (re)creates database name on srv with the bench table and,
// when base > 0, its base rows.
func myDatabase(ctx context.Context, srv dbtest.Server, name string, base int) (string, error) {
	if err := srv.DropDatabase(ctx, name); err != nil {
		return "", err
	}
	if err := srv.CreateDatabase(ctx, name); err != nil {
		return "", err
	}
	u := srv.URL(name)
	db, err := myConnect(ctx, u)
	if err != nil {
		return "", err
	}
	defer db.Close()
	stmts := []string{myTableDDL}
	if base > 0 {
		stmts = append(stmts, myInsertRange(1, base, 0))
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return "", fmt.Errorf("create bench table: %s: %w", firstLine(s), err)
		}
	}
	return u, nil
}

// ---- mytrigger ----------------------------------------------------------

func (e *env) benchMyTrigger(ctx context.Context) ([]result, []readerResult, error) {
	if err := e.mariadb(ctx); err != nil {
		return nil, nil, err
	}
	cfg := e.cfg
	var results []result
	for _, w := range workloads {
		for _, rtt := range cfg.myRTTs {
			if ctx.Err() != nil {
				return results, nil, ctx.Err()
			}
			n := cfg.changes
			sc := scenario{mode: "pipelined", rtt: rtt, changes: n}
			name := e.nextName()
			base := w.base(n)
			fmt.Fprintf(os.Stderr, "==> mytrigger, %s, %s, %s, %d changes\n", w.name, sc.mode, sc.link(), n)
			srcURL, err := myDatabase(ctx, e.mySrc, name, base)
			if err != nil {
				return results, nil, err
			}
			dstURL, err := myDatabase(ctx, e.myDst, name, base)
			if err != nil {
				return results, nil, err
			}
			if err := myTriggerBacklog(ctx, srcURL, name, w, n); err != nil {
				return results, nil, err
			}
			r, err := e.stream(ctx, streamRun{
				source: srcMyTrigger, workload: w.name, sc: sc, id: "bench",
				srcURL: srcURL, dstURL: dstURL, dstAddr: e.myDst.Addr(), mode: "trigger", tables: myTables(name),
			})
			if err == nil {
				r.verified, err = sameMyTables(ctx, srcURL, dstURL)
			}
			if err != nil {
				return results, nil, fmt.Errorf("%s %s %s: %w", w.name, sc.mode, sc.link(), err)
			}
			logRun(r)
			results = append(results, r)
			e.mySrc.DropDatabase(ctx, name) //nolint:errcheck // cleanup only
			e.myDst.DropDatabase(ctx, name) //nolint:errcheck // cleanup only
		}
	}
	return results, nil, nil
}

// myTriggerBacklog installs the capture triggers and writes the backlog.
func myTriggerBacklog(ctx context.Context, srcURL, name string, w workload, n int) error {
	db, err := myConnect(ctx, srcURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := mytrigger.Install(ctx, db, myTables(name)); err != nil {
		return fmt.Errorf("install capture: %w", err)
	}
	if err := w.my(ctx, db, n); err != nil {
		return fmt.Errorf("workload %s: %w", w.name, err)
	}
	var logged int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+mytrigger.ChangelogTable).Scan(&logged); err != nil {
		return fmt.Errorf("count changelog: %w", err)
	}
	if logged != n {
		return fmt.Errorf("changelog holds %d changes, want %d", logged, n)
	}
	return nil
}

// ---- binlog -------------------------------------------------------------

// benchBinlog: per workload, one source database and one backlog in the
// binlog after a recorded GTID position; the reader-ceiling passes and
// every timed run read it from there, each run into a freshly created
// target database of the same name.
func (e *env) benchBinlog(ctx context.Context) ([]result, []readerResult, error) {
	if err := e.mariadb(ctx); err != nil {
		return nil, nil, err
	}
	cfg := e.cfg
	var results []result
	var readers []readerResult
	for _, w := range workloads {
		n := cfg.changes
		base := w.base(n)
		name := e.nextName()
		tables := myTables(name)
		fmt.Fprintf(os.Stderr, "==> binlog, %s: %d-change backlog\n", w.name, n)
		srcURL, err := myDatabase(ctx, e.mySrc, name, base)
		if err != nil {
			return results, readers, err
		}
		db, err := myConnect(ctx, srcURL)
		if err != nil {
			return results, readers, err
		}
		var gtid string
		err = db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&gtid)
		if err == nil {
			err = w.my(ctx, db, n)
		}
		db.Close()
		if err != nil {
			return results, readers, fmt.Errorf("binlog backlog: %w", err)
		}
		start := sluice.Position{Kind: binlog.Kind, Token: "mariadb:" + gtid}

		fmt.Fprintf(os.Stderr, "==> binlog, %s: reader ceiling over %d changes from %s\n", w.name, n, start)
		rr, err := readPasses(ctx, srcBinlog, w.name, n, func() (reader, error) {
			return binlog.Open(ctx, srcURL, binlog.Config{Tables: tables, PollInterval: pollInterval, Logger: e.log}, start)
		})
		if err != nil {
			return results, readers, err
		}
		readers = append(readers, rr...)

		for i, rtt := range cfg.rtts {
			if ctx.Err() != nil {
				return results, readers, ctx.Err()
			}
			sc := scenario{mode: "pipelined", rtt: rtt, changes: n}
			fmt.Fprintf(os.Stderr, "==> binlog, %s, %s, %s, %d changes\n", w.name, sc.mode, sc.link(), n)
			dstURL, err := myDatabase(ctx, e.myDst, name, base)
			if err != nil {
				return results, readers, err
			}
			r, err := e.stream(ctx, streamRun{
				source: srcBinlog, workload: w.name, sc: sc, id: fmt.Sprintf("%s_run%d", name, i),
				srcURL: srcURL, dstURL: dstURL, dstAddr: e.myDst.Addr(), mode: "binlog", tables: tables,
				seed: start,
			})
			if err == nil {
				r.verified, err = sameMyTables(ctx, srcURL, dstURL)
			}
			if err != nil {
				return results, readers, fmt.Errorf("%s %s %s: %w", w.name, sc.mode, sc.link(), err)
			}
			logRun(r)
			results = append(results, r)
		}
		e.mySrc.DropDatabase(ctx, name) //nolint:errcheck // cleanup only
		e.myDst.DropDatabase(ctx, name) //nolint:errcheck // cleanup only
	}
	return results, readers, nil
}

// ---- workloads and helpers ---------------------------------------------

// myInsertRange is insertRange on MariaDB;
// seq_LO_to_HI is MariaDB's built-in SEQUENCE engine.
func myInsertRange(lo, hi, gen int) string {
	return fmt.Sprintf(`INSERT INTO items (id, qty, label, price, at)
SELECT seq, (seq * 7 + %[3]d) %% 1000, CONCAT('item-', seq, '-', %[3]d), (seq %% 10000) * 1.25,
	TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND
FROM seq_%[1]d_to_%[2]d`, lo, hi, gen)
}

// myInsertOnly inserts n new rows, 100 per statement, one transaction each.
func myInsertOnly(ctx context.Context, db *sql.DB, n int) error {
	for lo := 1; lo <= n; lo += 100 {
		if _, err := db.ExecContext(ctx, myInsertRange(lo, min(lo+99, n), 1)); err != nil {
			return err
		}
	}
	return nil
}

// myMixed is pgMixed on MariaDB.
func myMixed(ctx context.Context, db *sql.DB, n int) error {
	return mixedPlan(n, func(ins, upd, del [2]int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var stmts []string
		if ins[1] >= ins[0] {
			stmts = append(stmts, myInsertRange(ins[0], ins[1], 1))
		}
		if upd[1] >= upd[0] {
			stmts = append(stmts, fmt.Sprintf("UPDATE items SET qty = qty + 1, label = CONCAT(label, '+'), price = price + 0.01, at = at + INTERVAL 1 HOUR WHERE id BETWEEN %d AND %d", upd[0], upd[1]))
		}
		if del[1] >= del[0] {
			stmts = append(stmts, fmt.Sprintf("DELETE FROM items WHERE id BETWEEN %d AND %d", del[0], del[1]))
		}
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				tx.Rollback() //nolint:errcheck // the Exec error is the one to report
				return err
			}
		}
		return tx.Commit()
	})
}

// myConnect opens one MariaDB session with time_zone '+00:00', as sluice's
// own.
func myConnect(ctx context.Context, u string) (*sql.DB, error) {
	cfg, err := connstr.ParseMySQL(u)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", endpoint.MaskURL(u), err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect %s: %w", endpoint.MaskURL(u), err)
	}
	return db, nil
}

// sameMyTables compares tables (the bench table when none is named) on
// both sides, with the server's own CHECKSUM TABLE (the stored bytes): the
// bench claims nothing it did not check.
func sameMyTables(ctx context.Context, srcURL, dstURL string, tables ...string) (bool, error) {
	if len(tables) == 0 {
		tables = []string{"items"}
	}
	var dbs [2]*sql.DB
	for i, u := range []string{srcURL, dstURL} {
		db, err := myConnect(ctx, u)
		if err != nil {
			return false, err
		}
		defer db.Close()
		dbs[i] = db
	}
	if err := dbtest.CompareChecksumTable(ctx, dbs[0], dbs[1], tables...); err != nil {
		fmt.Fprintf(os.Stderr, "    MISMATCH: %v\n", err)
		return false, nil
	}
	return true, nil
}
