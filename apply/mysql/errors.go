package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// stepError is a failed statement of a batch; step is 0 for START
// TRANSACTION, i for stmts[i-1], len(stmts)+1 for COMMIT and -1 while
// unknown.
type stepError struct {
	err   error
	stmts []statement
	step  int
	// candidates names the batch's tables when the step is unknown.
	candidates string
}

// Table names the table of the failing statement, for the log's table
// field.
func (e *stepError) TableOf() (sluice.TableName, bool) {
	if e.step > 0 && e.step <= len(e.stmts) && e.stmts[e.step-1].table != nil {
		return e.stmts[e.step-1].table.Name, true
	}
	return sluice.TableName{}, false
}

func (e *stepError) Error() string {
	switch {
	case e.step == 0:
		return "apply: start transaction: " + e.err.Error()
	case e.step > 0 && e.step <= len(e.stmts):
		s := e.stmts[e.step-1]
		var me *mysql.MySQLError
		if s.keyCheck && errors.As(e.err, &me) && me.Number == 1242 {
			// keyChangeCheck raises 1242 itself: a statement of a
			// multi-statement packet has no other way to fail.
			return "apply " + s.what + ": no row has the old key on the target, so the target differs from the source (a row the source had is missing, " +
				"or something on the target, such as a trigger, moved it): the check after the key change found no row moved and failed on purpose with " + e.err.Error()
		}
		if e.rowMissing() {
			return "apply " + s.what + ": " + apply.ErrRowMissing.Error() + " (the check's error: " + e.err.Error() + ")"
		}
		if s.guard && errors.As(e.err, &me) && me.Number == 1048 {
			return "apply " + s.what + ": a row collides on a unique key with a row of the table that this batch does not touch " +
				"(the target differs from the source, or the changes that free the value are in another batch): " + e.err.Error()
		}
		return "apply " + s.what + ": " + e.err.Error()
	case e.step == len(e.stmts)+1:
		return "apply: commit: " + e.err.Error()
	}
	return "apply batch of " + strconv.Itoa(len(e.stmts)) + " statements" + e.candidates + ": " + e.err.Error()
}

func (e *stepError) Unwrap() error { return e.err }

// Is makes a failed row check apply.ErrRowMissing.
func (e *stepError) Is(target error) bool { return target == apply.ErrRowMissing && e.rowMissing() }

// rowMissing reports whether the failed statement is the check that the
// rows an update with unsent values updated were all there.
func (e *stepError) rowMissing() bool {
	var me *mysql.MySQLError
	return e.step > 0 && e.step <= len(e.stmts) && e.stmts[e.step-1].rowCheck && errors.As(e.err, &me) && me.Number == 1242
}

// connLost reports whether err means the connection is gone.
func connLost(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1927, // ER_CONNECTION_KILLED (MariaDB)
			1053, // ER_SERVER_SHUTDOWN
			2006, // CR_SERVER_GONE_ERROR
			2013: // CR_SERVER_LOST
			return true
		}
	}
	return false
}

// constraintError turns a failed statement that broke a unique key (or the
// upsert guard that stands for one) or a foreign key into an
// *apply.ConstraintError, which the stream answers by applying the tables'
// changes in source order; nil for any other failure.
func (t *Target) constraintError(se *stepError, err error) error {
	var me *mysql.MySQLError
	if se == nil || !errors.As(err, &me) {
		return nil
	}
	var st *statement
	if se.step > 0 && se.step <= len(se.stmts) {
		st = &se.stmts[se.step-1]
	}
	switch {
	case me.Number == 1062, // ER_DUP_ENTRY
		me.Number == 1451, me.Number == 1452, // ER_ROW_IS_REFERENCED_2, ER_NO_REFERENCED_ROW_2
		me.Number == 1048 && st != nil && st.guard: // the upsert guard
	default:
		return nil
	}
	ce := &apply.ConstraintError{Err: err}
	if me.Number != 1048 {
		ce.Detail = me.Message
	}
	if _, rest, ok := strings.Cut(me.Message, "CONSTRAINT `"); ok {
		ce.Constraint, _, _ = strings.Cut(rest, "`")
	}
	if st != nil && st.table != nil {
		ce.Tables = append(ce.Tables, st.table.Name)
		// A foreign key's other side, when it is another of the stream's
		// tables: the message names the child as `db`.`table` and the
		// parent as REFERENCES `table`.
		for _, d := range t.tables {
			if d.src.Name != st.table.Name && (me.Number == 1451 || me.Number == 1452) &&
				(strings.Contains(me.Message, "`"+t.database+"`.`"+d.src.Name.Name+"`") || strings.Contains(me.Message, "REFERENCES `"+d.src.Name.Name+"`")) {
				ce.Tables = append(ce.Tables, d.src.Name)
			}
		}
	}
	return ce
}

// wasKilled tells, after the connection with id old was lost in the middle
// of a batch, whether the server killed it (KILL, a transaction killer): a
// killed session is gone or shows as Killed while it rolls back, whereas
// after a network failure the server's session is still busy with the
// batch, waiting on a lock or for the client. Such an orphan is killed here,
// so that it releases its locks at once.
func (t *Target) wasKilled(ctx context.Context, old int64) bool {
	if old == 0 {
		return false
	}
	// The client can see its connection close a moment before the killed
	// session leaves the process list, so a session still listed as busy
	// is watched for a second before it is taken for an orphan.
	deadline := time.Now().Add(time.Second)
	for {
		var command, state string
		err := t.conn.QueryRowContext(ctx, "SELECT COMMAND, COALESCE(STATE, '') FROM information_schema.PROCESSLIST WHERE ID = "+strconv.FormatInt(old, 10)).Scan(&command, &state)
		if t.implicitTx {
			t.conn.ExecContext(ctx, "ROLLBACK")
		}
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return true
		case err != nil:
			return false
		case strings.EqualFold(command, "Killed") || strings.Contains(strings.ToLower(state), "kill"):
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := t.conn.ExecContext(ctx, "KILL "+strconv.FormatInt(old, 10)); err != nil {
		t.log.Debug("kill orphaned session", "id", old, "err", err)
	}
	return false
}

// classify marks the errors after which the batch may be retried as is.
// Killed is set when the transaction was killed or timed out.
func classify(err error, lost bool) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1205, // ER_LOCK_WAIT_TIMEOUT
			1317, // ER_QUERY_INTERRUPTED (KILL QUERY)
			1927, // ER_CONNECTION_KILLED (MariaDB KILL)
			3024, // ER_QUERY_TIMEOUT (MySQL max_execution_time)
			1969: // ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
			return &apply.RetryableError{Err: err, Killed: true}
		case 1213, // ER_LOCK_DEADLOCK
			1053, 2006, 2013:
			return &apply.RetryableError{Err: err}
		}
		// Vitess's transaction killer: "… tx killer rollback …", and later
		// statements of the killed transaction "… exceeded timeout: 20s".
		msg := strings.ToLower(me.Message)
		if strings.Contains(msg, "tx killer rollback") || strings.Contains(msg, "exceeded timeout") ||
			strings.Contains(msg, "transaction was killed") {
			return &apply.RetryableError{Err: err, Killed: true}
		}
	}
	if lost {
		return &apply.RetryableError{Err: err}
	}
	return err
}
