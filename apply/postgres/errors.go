package postgres

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// stepError names the table of a batch's failing statement stmts[i] (none
// for begin, i < 0, and commit, i == len(stmts)) for the log's table field,
// and turns a violated unique, exclusion or foreign-key constraint into an
// *apply.ConstraintError: compacting a batch can break one that the
// source's order kept.
func (t *Target) stepError(stmts []statement, i int, err error) error {
	var st *statement
	if i >= 0 && i < len(stmts) && stmts[i].table != nil {
		st = &stmts[i]
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "23503" || pgErr.Code == "23P01") {
		ce := &apply.ConstraintError{Constraint: pgErr.ConstraintName, Detail: pgErr.Detail, Err: err}
		if pgErr.Detail != "" {
			ce.Err = fmt.Errorf("%w: %s", err, pgErr.Detail)
		}
		if st != nil {
			ce.Tables = append(ce.Tables, st.table.Name)
		}
		// The constraint's own table, when it is another of the stream's
		// (a foreign key's other side).
		for _, d := range t.tables {
			if d.display == pgErr.SchemaName+"."+pgErr.TableName && (st == nil || d.src.Name != st.table.Name) {
				ce.Tables = append(ce.Tables, d.src.Name)
			}
		}
		return ce
	}
	if st != nil && st.keyChange && errors.As(err, &pgErr) && pgErr.Code == "22012" {
		err = fmt.Errorf("%s: no row has the old key on the target, so the target differs from the source (a row the source had is missing): %w", st.what, err)
	}
	if st != nil && st.inPlace && errors.As(err, &pgErr) && pgErr.Code == "22012" {
		err = fmt.Errorf("apply %s: %w (the check's error: %w)", st.what, apply.ErrRowMissing, pgErr)
	}
	if st != nil {
		return &sluice.TableError{Table: st.table.Name, Err: err}
	}
	return err
}

// classify marks the errors after which the batch may be retried as is.
func classify(err error, connLost bool) error {
	if f := fenced(err); f != nil {
		return f
	}
	if c := chainBroken(err); c != nil {
		return c
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", // admin_shutdown: pg_terminate_backend, a transaction killer
			"57014", // query_canceled: statement_timeout, pg_cancel_backend
			"25P03", // idle_in_transaction_session_timeout
			"25P04": // transaction_timeout
			return &apply.RetryableError{Err: err, Killed: true}
		case "40001", "40P01", // serialization failure, deadlock
			"57P02", "57P03", // crash shutdown, cannot connect now
			"55P03": // lock_not_available (lock_timeout)
			return &apply.RetryableError{Err: err}
		}
		if strings.HasPrefix(pgErr.Code, "08") { // connection exception
			return &apply.RetryableError{Err: err}
		}
		if pgErr.Code == "42501" { // insufficient_privilege
			return fmt.Errorf("%w: the target user lacks a privilege sluice needs: GRANT SELECT, INSERT, UPDATE, DELETE (and TRUNCATE, if the source truncates) ON the stream's tables TO the user sluice connects as", err)
		}
	}
	if connLost {
		return &apply.RetryableError{Err: err}
	}
	return err
}
