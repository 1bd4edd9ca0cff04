package schema

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Journal records on a target the steps that create a stream's tables,
// before any runs, and marks each done once it ran: the steps after the
// initial copy (indexes, foreign keys) are then finished by the run that
// follows a kill between the copy and the index build, and by none other.
// It lives in sluice's own table on the target (sluice.schema_step on
// PostgreSQL, sluice_schema_step in a MySQL target's database), one row
// per step of each stream.
type Journal struct {
	db     *DB
	stream string
}

// NewJournal returns the journal of a stream on a target.
func NewJournal(db *DB, stream string) *Journal { return &Journal{db: db, stream: stream} }

// JournalStep is a step recorded in a journal.
type JournalStep struct {
	Seq   int
	Phase Phase
	Step
	Done bool
}

func (j *Journal) table() string {
	if j.db.Engine == Postgres {
		return "sluice.schema_step"
	}
	return "sluice_schema_step"
}

// ensure creates the journal's table.
func (j *Journal) ensure(ctx context.Context) error {
	stmts := []string{"CREATE TABLE IF NOT EXISTS sluice_schema_step (stream varchar(255) NOT NULL, seq int NOT NULL, phase varchar(32) NOT NULL, " +
		"statement longtext NOT NULL, exists_sql longtext NOT NULL, done tinyint(1) NOT NULL DEFAULT 0, PRIMARY KEY (stream, seq))"}
	if j.db.Engine == Postgres {
		stmts = []string{"CREATE SCHEMA IF NOT EXISTS sluice",
			"CREATE TABLE IF NOT EXISTS sluice.schema_step (stream text NOT NULL, seq integer NOT NULL, phase text NOT NULL, " +
				"statement text NOT NULL, exists_sql text NOT NULL, done boolean NOT NULL DEFAULT false, PRIMARY KEY (stream, seq))"}
	}
	for _, s := range stmts {
		if err := j.db.Exec(ctx, s); err != nil {
			return fmt.Errorf("create sluice's table of schema steps on %s (%s): %w", j.db, j.table(), err)
		}
	}
	return nil
}

// Pending returns the stream's steps not done yet, in order; none when
// the journal's table does not exist.
func (j *Journal) Pending(ctx context.Context) ([]JournalStep, error) {
	all, err := j.pendingAll(ctx)
	return slices.DeleteFunc(all, func(s JournalStep) bool { return s.Seq == 0 }), err
}

// pendingAll is Pending with the stop record.
func (j *Journal) pendingAll(ctx context.Context) ([]JournalStep, error) {
	var exists bool
	var err error
	if j.db.Engine == Postgres {
		err = j.db.PG.QueryRow(ctx, "SELECT to_regclass('sluice.schema_step') IS NOT NULL").Scan(&exists)
	} else {
		err = j.db.My.QueryRowContext(ctx, "SELECT COUNT(*) > 0 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'sluice_schema_step'").Scan(&exists)
	}
	if err != nil {
		return nil, fmt.Errorf("read sluice's schema steps on %s: %w", j.db, err)
	}
	if !exists {
		return nil, nil
	}
	q := "SELECT seq, phase, statement, exists_sql FROM " + j.table() + " WHERE stream = $1 AND NOT done ORDER BY seq"
	var out []JournalStep
	scan := func(seq int, phase, stmt, ex string) {
		out = append(out, JournalStep{Seq: seq, Phase: Phase(phase), Step: Step{SQL: stmt, Exists: ex}})
	}
	if j.db.Engine == Postgres {
		rows, err := j.db.PG.Query(ctx, q, j.stream)
		if err != nil {
			return nil, fmt.Errorf("read sluice's schema steps on %s: %w", j.db, err)
		}
		var seq int
		var phase, stmt, ex string
		_, err = pgx.ForEachRow(rows, []any{&seq, &phase, &stmt, &ex}, func() error {
			scan(seq, phase, stmt, ex)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read sluice's schema steps on %s: %w", j.db, err)
		}
		return out, nil
	}
	rows, err := j.db.My.QueryContext(ctx, "SELECT seq, phase, statement, exists_sql FROM "+j.table()+" WHERE stream = ? AND NOT done ORDER BY seq", j.stream)
	if err != nil {
		return nil, fmt.Errorf("read sluice's schema steps on %s: %w", j.db, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int
		var phase, stmt, ex string
		if err := rows.Scan(&seq, &phase, &stmt, &ex); err != nil {
			return nil, fmt.Errorf("read sluice's schema steps on %s: %w", j.db, err)
		}
		scan(seq, phase, stmt, ex)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read sluice's schema steps on %s: %w", j.db, err)
	}
	return out, nil
}

// Record writes a plan's steps, in the order they run (every table's
// creation, then every index, then every foreign key), after the stream's
// steps still pending and in place of those done, in one transaction.
func (j *Journal) Record(ctx context.Context, p *Plan) error {
	if err := j.ensure(ctx); err != nil {
		return err
	}
	pending, err := j.Pending(ctx)
	if err != nil {
		return err
	}
	next := 1
	if len(pending) > 0 {
		next = pending[len(pending)-1].Seq + 1
	}
	var rows [][]any
	for _, ph := range []Phase{PhaseCreate, PhaseIndexes, PhaseForeignKeys} {
		for _, s := range p.Steps(ph) {
			rows = append(rows, []any{j.stream, next + len(rows), string(ph), s.SQL, s.Exists})
		}
	}
	err = j.tx(ctx, func(exec func(q string, args ...any) error) error {
		if err := exec("DELETE FROM "+j.table()+" WHERE stream = $1 AND seq > 0 AND done", j.stream); err != nil {
			return err
		}
		for _, r := range rows {
			if err := exec("INSERT INTO "+j.table()+" (stream, seq, phase, statement, exists_sql) VALUES ($1, $2, $3, $4, $5)", r...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the schema steps of stream %s on %s: %w", j.stream, j.db, err)
	}
	return nil
}

// tx runs f in a transaction; exec takes PostgreSQL's $n placeholders,
// turned into ? on MySQL.
func (j *Journal) tx(ctx context.Context, f func(exec func(q string, args ...any) error) error) error {
	if j.db.Engine == Postgres {
		return pgx.BeginFunc(ctx, j.db.PG, func(tx pgx.Tx) error {
			return f(func(q string, args ...any) error {
				_, err := tx.Exec(ctx, q, args...)
				return err
			})
		})
	}
	tx, err := j.db.My.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := f(func(q string, args ...any) error {
		_, err := tx.ExecContext(ctx, myPlaceholders(q), args...)
		return err
	}); err != nil {
		return err
	}
	return tx.Commit()
}

// myPlaceholders turns $1, $2, … into ?.
func myPlaceholders(q string) string {
	out := make([]byte, 0, len(q))
	for i := 0; i < len(q); i++ {
		if q[i] == '$' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9' {
			for i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9' {
				i++
			}
			out = append(out, '?')
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

// Run runs the stream's pending steps of the phases given, in order,
// marking each done as it completes, and returns how many ran.
func (j *Journal) Run(ctx context.Context, log *slog.Logger, phases ...Phase) (int, error) {
	pending, err := j.Pending(ctx)
	if err != nil {
		return 0, err
	}
	pending = slices.DeleteFunc(pending, func(s JournalStep) bool { return !slices.Contains(phases, s.Phase) })
	steps := make([]Step, len(pending))
	for i, s := range pending {
		steps[i] = s.Step
	}
	mark := "UPDATE " + j.table() + " SET done = true WHERE stream = $1 AND seq = $2"
	if j.db.Engine == MySQL {
		mark = myPlaceholders(mark)
	}
	n := 0
	err = j.db.Run(ctx, log, steps, func(i int) error {
		n++
		var err error
		if j.db.Engine == Postgres {
			_, err = j.db.PG.Exec(ctx, mark, j.stream, pending[i].Seq)
		} else {
			_, err = j.db.My.ExecContext(ctx, mark, j.stream, pending[i].Seq)
		}
		if err != nil {
			return fmt.Errorf("mark schema step %d of stream %s done on %s: %w", pending[i].Seq, j.stream, j.db, err)
		}
		return nil
	})
	return n, err
}

// The journal also keeps the schema change a stream stopped at (see
// Follower): one row per stream, seq 0, phase "stopped", its key as the
// statement.

// StoppedAt returns the key of the schema change the stream last stopped
// at, "" when none.
func (j *Journal) StoppedAt(ctx context.Context) (string, error) {
	pending, err := j.pendingAll(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range pending {
		if s.Seq == 0 && s.Phase == phaseStopped {
			return s.SQL, nil
		}
	}
	return "", nil
}

// RecordStop records the schema change the stream stops at.
func (j *Journal) RecordStop(ctx context.Context, key string) error {
	if err := j.ensure(ctx); err != nil {
		return err
	}
	err := j.tx(ctx, func(exec func(q string, args ...any) error) error {
		if err := exec("DELETE FROM "+j.table()+" WHERE stream = $1 AND seq = 0", j.stream); err != nil {
			return err
		}
		return exec("INSERT INTO "+j.table()+" (stream, seq, phase, statement, exists_sql) VALUES ($1, 0, $2, $3, '')", j.stream, string(phaseStopped), key)
	})
	if err != nil {
		return fmt.Errorf("record the schema change stream %s stops at on %s: %w", j.stream, j.db, err)
	}
	return nil
}

// ClearStop forgets the schema change the stream stopped at.
func (j *Journal) ClearStop(ctx context.Context) error {
	err := j.tx(ctx, func(exec func(q string, args ...any) error) error {
		return exec("DELETE FROM "+j.table()+" WHERE stream = $1 AND seq = 0", j.stream)
	})
	if err != nil {
		return fmt.Errorf("clear the schema change stream %s stopped at on %s: %w", j.stream, j.db, err)
	}
	return nil
}

// phaseStopped marks the stop record.
const phaseStopped Phase = "stopped"
