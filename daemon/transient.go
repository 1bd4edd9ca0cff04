package daemon

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/endpoint"
)

// A lone stream that stops on a state of its target or source that passes
// by itself — a server starting up, shutting down or in recovery, a target
// made read-only for a while, a connection lost to a server restart — is
// started again in the process, after a backoff, with a warning each time
// that names the endpoint and the cause, for up to
// StreamOptions.TransientRetryFor; past it the process exits with the
// error, as it does at once for any other failure. Without this a plain
// `sluice sync start` exits on the first such moment and only a supervisor
// brings it back.

// Backoff between starts of a stream stopped by a transient state: short,
// since every second of it past the state's end is lag (a make chaos run
// with 30 s took 22 s to recover from a 20 s read-only episode).
const (
	transientFirst = 1 * time.Second
	transientMax   = 5 * time.Second
	// transientHealthy is how long a run must last for its failure to
	// begin a new episode, with the whole TransientRetryFor ahead of it.
	transientHealthy = time.Minute
)

// Causes of a transient stop.
const (
	causeStarting = "starting up, shutting down or in recovery"
	causeReadOnly = "read-only"
	causeLost     = "unreachable (connection lost)"
)

// transientFault is the transient state a stream stopped on.
type transientFault struct {
	side  string // "target", "source", or "source or target" when the error does not say
	cause string // one of the cause* constants
}

// transientOf reports whether err is a transient state of the stream's
// source or target. A lost or refused connection counts only when the
// stream had run in this process (ran): at the first start an unreachable
// server is far more often a wrong host or port than a restart, and the
// user should hear so at once.
func transientOf(err error, ran bool) (transientFault, bool) {
	side := sideOf(err)
	if errors.Is(err, apply.ErrCommittedBefore) {
		// A batch whose outcome a lost connection hid committed after
		// all: the stream starts again from the target's checkpoint
		// rather than apply its changes twice.
		return transientFault{"target", causeLost}, true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "57P03" || pgErr.Code == "57P02" || pgErr.Code == "57P01":
			// cannot_connect_now (starting up, shutting down, recovery),
			// crash_shutdown, admin_shutdown (a fast shutdown ends the
			// sessions with it).
			return transientFault{side, causeStarting}, true
		case pgErr.Code == "25006":
			// read_only_sql_transaction: default_transaction_read_only,
			// a hot standby.
			if side != "source" {
				side = "target"
			}
			return transientFault{side, causeReadOnly}, true
		case strings.HasPrefix(pgErr.Code, "08") && ran:
			return transientFault{side, causeLost}, true
		}
		return transientFault{}, false
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		msg := strings.ToLower(myErr.Message)
		switch {
		case myErr.Number == 1053: // ER_SERVER_SHUTDOWN
			return transientFault{side, causeStarting}, true
		case myErr.Number == 1836, // ER_READ_ONLY_MODE
			myErr.Number == 1792, // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
			myErr.Number == 1290 && (strings.Contains(msg, "read-only") || strings.Contains(msg, "read_only")):
			if side != "source" {
				side = "target"
			}
			return transientFault{side, causeReadOnly}, true
		case (myErr.Number == 2006 || myErr.Number == 2013) && ran:
			return transientFault{side, causeLost}, true
		}
		return transientFault{}, false
	}
	if ran && connectionLost(err) {
		return transientFault{side, causeLost}, true
	}
	return transientFault{}, false
}

// connectionLost reports whether err says a connection broke or was
// refused, rather than that a server refused a request.
func connectionLost(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &netErr) || errors.As(err, &connectErr)
}

// sideOf says which endpoint err came from, when it tells.
func sideOf(err error) string {
	var se *sourceError
	if errors.As(err, &se) {
		return "source"
	}
	var f *Failure
	if errors.As(err, &f) {
		switch f.Code {
		case ExitSource:
			return "source"
		case ExitTarget:
			return "target"
		}
	}
	var re *apply.RetryableError
	var te *sluice.TableError
	if errors.As(err, &re) || errors.As(err, &te) {
		return "target"
	}
	return "source or target"
}

// sourceError marks an error of the stream's source reader, so that a
// transient one is reported as the source's.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// sourceSide tags the errors of a reader's Read and Ack as the source's.
type sourceSide struct{ reader }

// Unwrap returns the reader whose errors it tags (see foreignKeysOf).
func (r sourceSide) Unwrap() reader { return r.reader }

func (r sourceSide) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	cs, err := r.reader.Read(ctx, max)
	if err != nil {
		err = &sourceError{err}
	}
	return cs, err
}

func (r sourceSide) Ack(ctx context.Context, pos sluice.Position) error {
	if err := r.reader.Ack(ctx, pos); err != nil {
		return &sourceError{err}
	}
	return nil
}

// transientRetry is a lone stream's record of its current episode of
// transient stops.
type transientRetry struct {
	limit   time.Duration // StreamOptions.TransientRetryFor; 0: never retry
	since   time.Time     // the episode's first stop; zero: none
	backoff time.Duration
}

// after decides, when the stream stopped with err after running for
// ranFor, whether to start it again: the wait (zero: not again) and the
// fault, and the error to report: err, explained when the episode
// outlasted the limit.
func (r *transientRetry) after(err error, ran bool, ranFor time.Duration, o StreamOptions) (time.Duration, transientFault, error) {
	f, ok := transientOf(err, ran)
	if !ok || r.limit <= 0 {
		r.since = time.Time{}
		return 0, transientFault{}, err
	}
	now := time.Now()
	if r.since.IsZero() || ranFor >= transientHealthy {
		r.since, r.backoff = now, transientFirst
	}
	if lasted := now.Sub(r.since); lasted >= r.limit {
		r.since = time.Time{}
		return 0, f, fmt.Errorf("%s %s stayed %s for %v, longer than --transient-retry-for %v: %w; %s",
			f.side, f.endpoint(o), f.cause, lasted.Round(time.Second), r.limit, err, f.fix())
	}
	wait := max(min(r.backoff, r.limit-now.Sub(r.since)), time.Millisecond)
	r.backoff = min(2*r.backoff, transientMax)
	return wait, f, err
}

// endpoint names the side's server, its password masked.
func (f transientFault) endpoint(o StreamOptions) string {
	switch f.side {
	case "source":
		return endpoint.MaskURL(o.SourceURL)
	case "target":
		return endpoint.MaskURL(o.TargetURL)
	}
	return endpoint.MaskURL(o.SourceURL) + " or " + endpoint.MaskURL(o.TargetURL)
}

func (f transientFault) fix() string {
	switch f.cause {
	case causeReadOnly:
		return "make it accept writes again (PostgreSQL: default_transaction_read_only off, or point sluice at the primary rather than a standby; MariaDB: SET GLOBAL read_only = 0), then start sluice"
	case causeStarting:
		return "see the server's log for why it keeps starting up or shutting down, then start sluice"
	}
	return "check that the server is up and reachable from here, then start sluice"
}

// pastStart reports whether the stream's current run got past opening and
// checking its endpoints (it copied or streamed).
func (sl *slot) pastStart() bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.phase != phaseStarting
}
