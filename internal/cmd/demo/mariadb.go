package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// mariadbEngine is MariaDB → MariaDB with MySQL trigger capture.
func mariadbEngine(cfg config) *engine {
	return &engine{
		name:    "MariaDB",
		start:   starter(dbtest.StartMariaDB),
		connect: connectMariaDB,
		schema: []string{
			`CREATE TABLE accounts (
				id bigint PRIMARY KEY,
				owner varchar(64) NOT NULL,
				balance decimal(14,2) NOT NULL,
				updated_at datetime(6) NOT NULL)`,
			`CREATE TABLE order_lines (
				order_id int NOT NULL,
				line_no smallint NOT NULL,
				sku varchar(32) NOT NULL,
				qty int,
				price decimal(10,2),
				PRIMARY KEY (order_id, line_no))`,
			`CREATE TABLE events (
				id bigint PRIMARY KEY,
				kind varchar(16) NOT NULL,
				payload json,
				body blob,
				ok tinyint(1),
				happened datetime(6) NOT NULL)`,
		},
		seed: fmt.Sprintf(`INSERT INTO events SELECT seq, 'seeded', JSON_OBJECT('n', seq, 'note', 'there before sluice'), REPEAT('b', 64),
			seq %% 2, NOW(6) - INTERVAL seq SECOND FROM seq_1_to_%d`, seedRows),
		tables: []string{"accounts", "order_lines", "events"},
		about:  "order_lines has a composite key; events has json, blob, tinyint(1), datetime(6)",
		retryable: func(err error) bool {
			var me *mysql.MySQLError
			return errors.As(err, &me) && me.Number == 1213 // ER_LOCK_DEADLOCK
		},
		workload: workloadSQL{
			insertAccount: `INSERT IGNORE INTO accounts VALUES (?, ?, ?, NOW(6))`,
			insertLines:   `INSERT INTO order_lines SELECT ?, seq, CONCAT('SKU-', seq), seq * 2, seq * 9.99 FROM seq_1_to_2`,
			insertEvent:   `INSERT INTO events VALUES (?, ?, ?, ?, ?, NOW(6))`,
			eventArgs: func(r *rand.Rand, id int64, w, t int) []any {
				body := make([]byte, r.IntN(48)) // any bytes, NUL included
				for i := range body {
					body[i] = byte(r.IntN(256))
				}
				return []any{id, eventKinds[r.IntN(len(eventKinds))], eventPayload(w, t), body, r.IntN(2)}
			},
			bumpBalance:   `UPDATE accounts SET balance = balance + 1.25, updated_at = NOW(6) WHERE id = ?`,
			bumpLine:      `UPDATE order_lines SET qty = qty + 1 WHERE order_id = ? AND line_no = 1`,
			moveAccount:   `UPDATE accounts SET id = ? WHERE id = ?`,
			deleteAccount: `DELETE FROM accounts WHERE id = ?`,
		},
		items: backlogSQL{
			table: "items",
			ddl: `CREATE TABLE items (id bigint PRIMARY KEY, qty int NOT NULL, label varchar(64) NOT NULL,
				price decimal(12,2), at datetime(6) NOT NULL)`,
			// seq_LO_to_HI is MariaDB's built-in SEQUENCE engine.
			insertRange: func(lo, hi, gen int) string {
				return fmt.Sprintf(`INSERT INTO items (id, qty, label, price, at)
SELECT seq, (seq * 7 + %[3]d) %% 1000, CONCAT('item-', seq, '-', %[3]d), (seq %% 10000) * 1.25,
	TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND
FROM seq_%[1]d_to_%[2]d`, lo, hi, gen)
			},
			update: `UPDATE items SET qty = qty + 1, label = CONCAT(label, '+'), at = at + INTERVAL 1 HOUR WHERE id BETWEEN %d AND %d`,
			delete: `DELETE FROM items WHERE id BETWEEN %d AND %d`,
		},
		perRowChanges:    cfg.mariaPerRowChanges,
		pipelinedChanges: cfg.mariaPipelinedChanges,
	}
}

// myConn is a MariaDB session with time_zone '+00:00', as sluice's own.
type myConn struct{ db *sql.DB }

func connectMariaDB(ctx context.Context, u string) (conn, error) {
	cfg, err := connstr.ParseMySQL(u)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", mask(u), err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(1) // one session, as an application's
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect %s: %w", mask(u), err)
	}
	return myConn{db}, nil
}

// myExec runs statements on the session or in a transaction.
func myExec(ctx context.Context, x interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}) execFunc {
	return func(query string, args ...any) (int64, error) {
		res, err := x.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
}

func (m myConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return myExec(ctx, m.db)(query, args...)
}

func (m myConn) inTx(ctx context.Context, fn func(exec execFunc) error) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	return commitOrRollback(fn(myExec(ctx, tx)), tx.Commit, func() { tx.Rollback() }) //nolint:errcheck // fn's error is the one to report
}

func (m myConn) asDB() dbtest.DB { return dbtest.DB{My: m.db} }

func (m myConn) close() { m.db.Close() }
