package postgres

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// A lane's transactions chain (see apply.ErrChainBroken): the stream sends
// the next on a second connection while one is in flight, and each begins
// by locking the lane's checkpoint row, which the one before it locked
// first too, so the next runs only once that one ended; then it checks
// that the row holds the sequence the one before it wrote. A transaction
// left waiting for the lock is still one transaction of the target: the
// stream chains only while the two fit the kill budget together.

// chainMark starts the text of a failed chain check, as fenceMark does.
const chainMark = "sluice chain: "

// buildChainLock locks a lane's checkpoint row; buildChainCheck locks it
// too and fails (an integer cast of a text holding chainMark) unless it
// holds the sequence $3. The row is read through a left join, so that a
// missing row fails the check rather than returning nothing; the text is
// built from the row so that the planner cannot fold the cast.
func buildChainLock(schema string) string {
	return "SELECT FROM " + pgx.Identifier{schema, "checkpoint"}.Sanitize() + " WHERE stream = $1::text AND lane = $2::integer FOR UPDATE"
}

func buildChainCheck(schema string) string {
	return "SELECT CASE WHEN c.seq = $3::bigint THEN 0 ELSE ('" + chainMark +
		"checkpoint row of lane ' || $2::integer::text || ' holds ' || coalesce('sequence ' || c.seq::text, 'nothing') || ', not ' || $3::bigint::text)::int END " +
		"FROM (SELECT) one LEFT JOIN (SELECT seq FROM " + pgx.Identifier{schema, "checkpoint"}.Sanitize() +
		" WHERE stream = $1::text AND lane = $2::integer FOR UPDATE) c ON true"
}

// chainStatement is a chained transaction's first statement after the
// fence check (see Target.ApplyAfter).
func (t *Target) chainStatement(cp sluice.Checkpoint, after uint64) statement {
	if after == 0 {
		return statement{sql: buildChainLock(t.cfg.Schema), args: []any{cp.Stream, strconv.Itoa(cp.Lane)}, chain: true,
			what: fmt.Sprintf("lock of lane %d's checkpoint row of stream %q", cp.Lane, cp.Stream)}
	}
	return statement{sql: buildChainCheck(t.cfg.Schema), args: []any{cp.Stream, strconv.Itoa(cp.Lane), strconv.FormatUint(after, 10)},
		chain: true, what: fmt.Sprintf("check that checkpoint %d of stream %q, lane %d, committed", after, cp.Stream, cp.Lane)}
}

// chainBroken turns a failed chain check into a retryable
// apply.ErrChainBroken.
func chainBroken(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, chainMark) {
		msg := pgErr.Message[strings.Index(pgErr.Message, chainMark)+len(chainMark):]
		return &apply.RetryableError{Err: fmt.Errorf("%w: %s", apply.ErrChainBroken, strings.TrimSuffix(msg, `"`))}
	}
	return nil
}
