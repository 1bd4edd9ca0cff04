package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// postgresEngine is PostgreSQL → PostgreSQL with trigger capture.
func postgresEngine(cfg config) *engine {
	return &engine{
		name:    "PostgreSQL",
		start:   starter(dbtest.StartPostgres),
		connect: connectPostgres,
		schema: []string{
			`CREATE TABLE accounts (
				id bigint PRIMARY KEY,
				owner text NOT NULL,
				balance numeric(14,2) NOT NULL,
				updated_at timestamptz NOT NULL)`,
			`CREATE TABLE order_lines (
				order_id integer NOT NULL,
				line_no smallint NOT NULL,
				sku varchar(32) NOT NULL,
				qty integer,
				price numeric(10,2),
				PRIMARY KEY (order_id, line_no))`,
			`CREATE TABLE events (
				id bigint PRIMARY KEY,
				kind text NOT NULL,
				payload jsonb,
				tags text[],
				ref uuid,
				ok boolean,
				happened timestamptz NOT NULL)`,
		},
		seed: fmt.Sprintf(`INSERT INTO events SELECT g, 'seeded', jsonb_build_object('n', g, 'note', 'there before sluice'), ARRAY['seed', g::text],
			gen_random_uuid(), g %% 2 = 0, now() - g * interval '1 second' FROM generate_series(1, %d) g`, seedRows),
		tables: []string{"public.accounts", "public.order_lines", "public.events"},
		about:  "order_lines has a composite key; events has jsonb, text[], uuid, boolean",
		retryable: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "40P01" // deadlock_detected
		},
		workload: workloadSQL{
			insertAccount: `INSERT INTO accounts VALUES ($1, $2, $3, now()) ON CONFLICT DO NOTHING`,
			insertLines:   `INSERT INTO order_lines SELECT $1, n, 'SKU-' || n, n * 2, n * 9.99 FROM generate_series(1, 2) n`,
			insertEvent:   `INSERT INTO events VALUES ($1, $2, $3, $4, gen_random_uuid(), $5, now())`,
			eventArgs: func(r *rand.Rand, id int64, w, t int) []any {
				return []any{id, eventKinds[r.IntN(len(eventKinds))], eventPayload(w, t), []string{"a", fmt.Sprint(t)}, r.IntN(2) == 0}
			},
			bumpBalance:   `UPDATE accounts SET balance = balance + 1.25, updated_at = now() WHERE id = $1`,
			bumpLine:      `UPDATE order_lines SET qty = qty + 1 WHERE order_id = $1 AND line_no = 1`,
			moveAccount:   `UPDATE accounts SET id = $1 WHERE id = $2`,
			deleteAccount: `DELETE FROM accounts WHERE id = $1`,
		},
		items: backlogSQL{
			table: "public.items",
			ddl: `CREATE TABLE items (id bigint PRIMARY KEY, qty integer NOT NULL, label text NOT NULL,
				price numeric(12,2), at timestamptz NOT NULL)`,
			insertRange: func(lo, hi, gen int) string {
				return fmt.Sprintf(`INSERT INTO items (id, qty, label, price, at)
SELECT g, (g * 7 + %[3]d) %% 1000, 'item-' || g || '-' || %[3]d, ((g %% 10000) * 1.25)::numeric(12,2),
	timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(%[1]d, %[2]d) g`, lo, hi, gen)
			},
			update: `UPDATE items SET qty = qty + 1, label = label || '+', at = at + interval '1 hour' WHERE id BETWEEN %d AND %d`,
			delete: `DELETE FROM items WHERE id BETWEEN %d AND %d`,
		},
		perRowChanges:    cfg.perRowChanges,
		pipelinedChanges: cfg.pipelinedChanges,
	}
}

// pgConn is a PostgreSQL session in UTC, so that checksums compare the
// text forms of timestamptz values.
type pgConn struct{ c *pgx.Conn }

func connectPostgres(ctx context.Context, u string) (conn, error) {
	cc, err := pgx.ParseConfig(u)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", mask(u), err)
	}
	cc.RuntimeParams["TimeZone"] = "UTC" // checksums compare text forms
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", mask(u), err)
	}
	return pgConn{c}, nil
}

// pgExec runs statements on a connection or in a transaction.
func pgExec(ctx context.Context, x interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) execFunc {
	return func(sql string, args ...any) (int64, error) {
		tag, err := x.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
}

func (p pgConn) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	return pgExec(ctx, p.c)(sql, args...)
}

func (p pgConn) inTx(ctx context.Context, fn func(exec execFunc) error) error {
	tx, err := p.c.Begin(ctx)
	if err != nil {
		return err
	}
	return commitOrRollback(fn(pgExec(ctx, tx)),
		func() error { return tx.Commit(ctx) },
		func() { tx.Rollback(context.WithoutCancel(ctx)) }) //nolint:errcheck // fn's error is the one to report
}

func (p pgConn) asDB() dbtest.DB { return dbtest.DB{PG: p.c} }

func (p pgConn) close() { p.c.Close(context.Background()) }
