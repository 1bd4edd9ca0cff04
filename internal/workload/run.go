package workload

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PGBeginner is what Apply needs of a PostgreSQL connection or pool
// (*pgx.Conn, *pgxpool.Pool).
type PGBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// DB is the database a workload is applied to: PostgreSQL through pgx, or
// a MySQL-family server through database/sql. Exactly one is set.
type DB struct {
	PG PGBeginner
	My *sql.DB
}

// Apply runs txs, in order, each in a transaction of its own. It stops at
// the first statement that fails or that does not write exactly one row:
// the model said the statement was valid and touched one row, so either
// means the model (or the database) is wrong, and the error says which
// transaction, statement and step of which seed.
func (w *Workload) Apply(ctx context.Context, db DB, txs []Tx) error {
	pg := db.PG
	if v := reflect.ValueOf(pg); pg != nil && v.Kind() == reflect.Pointer && v.IsNil() {
		pg = nil // a DB built from a nil *pgxpool.Pool
	}
	switch {
	case pg != nil && db.My == nil:
		for _, tx := range txs {
			if err := w.applyPG(ctx, pg, tx); err != nil {
				return err
			}
		}
		return nil
	case db.My != nil && pg == nil:
		return w.applyMy(ctx, db.My, txs, FullRows)
	}
	return fmt.Errorf("workload: Apply needs exactly one of DB.PG and DB.My")
}

// ApplyAll runs every transaction of the workload.
func (w *Workload) ApplyAll(ctx context.Context, db DB) error { return w.Apply(ctx, db, w.Txs) }

func (w *Workload) fail(tx Tx, i int, q string, args []any, err error) error {
	s := tx.Stmts[i]
	return fmt.Errorf("workload seed %d (%s → %s) transaction %d statement %d (%s %s, step %s): %s %s: %w; the generator's model and the database disagree",
		w.Config.Seed, w.Config.Source, w.Config.Target, tx.Index, i, s.Op, s.Table.Name, s.Step, q, formatArgs(args), err)
}

func (w *Workload) applyPG(ctx context.Context, db PGBeginner, tx Tx) error {
	t, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("workload: transaction %d: begin: %w", tx.Index, err)
	}
	defer t.Rollback(context.WithoutCancel(ctx))
	for i, s := range tx.Stmts {
		q, args := render(Postgres, s)
		tag, err := t.Exec(ctx, q, args...)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("%d rows affected, want 1", tag.RowsAffected())
		}
		if err != nil {
			return w.fail(tx, i, q, args, err)
		}
	}
	if err := t.Commit(ctx); err != nil {
		return fmt.Errorf("workload: transaction %d: commit: %w", tx.Index, err)
	}
	return nil
}

// applyMy runs the transactions on one connection whose session writes
// TIMESTAMP values in UTC (the runner passes them as UTC text) in strict
// mode (so a value that does not fit is an error, not a warning) and logs
// them in form; the session's settings are put back afterwards, since the
// connection returns to the caller's pool.
func (w *Workload) applyMy(ctx context.Context, db *sql.DB, txs []Tx, form SessionForm) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("workload: connect: %w", err)
	}
	defer conn.Close()
	var tz, mode string
	if err := conn.QueryRowContext(ctx, "SELECT @@session.time_zone, @@session.sql_mode").Scan(&tz, &mode); err != nil {
		return fmt.Errorf("workload: read session settings: %w", err)
	}
	set, reset := "", ""
	if a, b := form.assignments(); a != "" {
		set, reset = ", "+a, ", "+b
	}
	if _, err := conn.ExecContext(ctx, "SET time_zone = '+00:00', sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"+set); err != nil {
		return fmt.Errorf("workload: set session: %w", err)
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SET time_zone = ?, sql_mode = ?"+reset, tz, mode); rerr != nil && err == nil {
			err = fmt.Errorf("workload: restore session: %w", rerr)
		}
	}()
	for _, tx := range txs {
		if err := w.applyMyTx(ctx, conn, tx); err != nil {
			return err
		}
	}
	return nil
}

func (w *Workload) applyMyTx(ctx context.Context, conn *sql.Conn, tx Tx) error {
	t, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("workload: transaction %d: begin: %w", tx.Index, err)
	}
	defer t.Rollback()
	for i, s := range tx.Stmts {
		q, args := render(MySQL, s)
		res, err := t.ExecContext(ctx, q, args...)
		if err == nil {
			err = checkMyAffected(ctx, t, s, res)
		}
		if err != nil {
			return w.fail(tx, i, q, args, err)
		}
	}
	if err := t.Commit(); err != nil {
		return fmt.Errorf("workload: transaction %d: commit: %w", tx.Index, err)
	}
	return nil
}

// checkMyAffected checks that a statement wrote its row. MySQL counts an
// UPDATE that leaves a row as it was as 0 rows affected (unless the client
// asks for found rows), so a 0 there is checked by looking for the row.
func checkMyAffected(ctx context.Context, t *sql.Tx, s Stmt, res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	if n == 0 && s.Op == Update {
		key := s.Key
		for i, c := range s.Table.Key {
			for j, sc := range s.Cols {
				if sc == c {
					key = append([]any(nil), key...)
					key[i] = s.Vals[j]
				}
			}
		}
		q, args := whereKey(MySQL, s.Table, key, 0)
		var found int
		if err := t.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+s.Table.Name+" WHERE "+q, args...).Scan(&found); err != nil {
			return err
		}
		if found == 1 {
			return nil
		}
	}
	return fmt.Errorf("%d rows affected, want 1", n)
}

// render writes a statement in the engine's SQL with its arguments.
func render(e Engine, s Stmt) (string, []any) {
	t := s.Table
	var args []any
	ph := func() string {
		args = append(args, nil)
		if e == Postgres {
			return "$" + strconv.Itoa(len(args))
		}
		return "?"
	}
	switch s.Op {
	case Insert:
		names := make([]string, len(s.Cols))
		phs := make([]string, len(s.Cols))
		for i, c := range s.Cols {
			names[i] = t.Columns[c].Name
			if l, ok := s.Vals[i].(Literal); ok {
				phs[i] = string(l)
				continue
			}
			phs[i] = ph()
			args[len(args)-1] = arg(e, t.Columns[c], s.Vals[i])
		}
		return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", t.Name, strings.Join(names, ", "), strings.Join(phs, ", ")), args
	case Update:
		sets := make([]string, len(s.Cols))
		for i, c := range s.Cols {
			if l, ok := s.Vals[i].(Literal); ok {
				sets[i] = t.Columns[c].Name + " = " + string(l)
				continue
			}
			sets[i] = t.Columns[c].Name + " = " + ph()
			args[len(args)-1] = arg(e, t.Columns[c], s.Vals[i])
		}
		where, wargs := whereKey(e, t, s.Key, len(args))
		return fmt.Sprintf("UPDATE %s SET %s WHERE %s", t.Name, strings.Join(sets, ", "), where), append(args, wargs...)
	case Delete:
		where, wargs := whereKey(e, t, s.Key, 0)
		return fmt.Sprintf("DELETE FROM %s WHERE %s", t.Name, where), wargs
	}
	panic(fmt.Sprintf("workload: cannot render %v", s.Op))
}

// whereKey is "k1 = $n+1 AND k2 = $n+2" (or ?) for key.
func whereKey(e Engine, t *Table, key []any, n int) (string, []any) {
	conds := make([]string, len(t.Key))
	args := make([]any, len(t.Key))
	for i, c := range t.Key {
		p := "?"
		if e == Postgres {
			p = "$" + strconv.Itoa(n+i+1)
		}
		conds[i] = t.Columns[c].Name + " = " + p
		args[i] = arg(e, t.Columns[c], key[i])
	}
	return strings.Join(conds, " AND "), args
}

// arg turns a workload value into the driver's argument. Every value
// travels as a typed binary parameter or as the exact text the server's
// input function reads, never through a float's short text form.
func arg(e Engine, c Column, v any) any {
	if v == nil {
		return nil
	}
	switch c.Type {
	case Uint64:
		if e == Postgres {
			return strconv.FormatUint(v.(uint64), 10) // numeric(20,0)
		}
	case Decimal:
		return string(v.(Dec))
	case Timestamp, TimestampTZ:
		if e == MySQL {
			// The driver would convert a time.Time to its connection's
			// location; the session's time_zone is UTC (applyMy).
			return v.(time.Time).UTC().Format("2006-01-02 15:04:05.000000")
		}
	case Date:
		if e == MySQL {
			return v.(time.Time).Format("2006-01-02")
		}
	case Bool:
		if e == MySQL {
			if v.(bool) {
				return int64(1)
			}
			return int64(0)
		}
	}
	return v
}

func formatArgs(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		var s string
		switch v := a.(type) {
		case nil:
			s = "NULL"
		case []byte:
			s = fmt.Sprintf("bytes(%d)%x", len(v), v[:min(len(v), 16)])
		case string:
			if len(v) > 60 {
				s = fmt.Sprintf("%q…(%d bytes)", v[:40], len(v))
			} else {
				s = fmt.Sprintf("%q", v)
			}
		default:
			s = fmt.Sprintf("%v", v)
		}
		parts[i] = s
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
