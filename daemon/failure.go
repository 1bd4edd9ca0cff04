package daemon

import (
	"errors"

	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/stream"
)

// Exit codes of the sluice command, by the category of what failed.
const (
	ExitOK       = 0  // success
	ExitFailure  = 1  // any other failure; sync status: a stream failed or stalled
	ExitUsage    = 2  // bad flag, value, key or command; validation failed
	ExitSource   = 3  // source unreachable or refused
	ExitTarget   = 4  // target unreachable or refused
	ExitState    = 5  // state dir, state file or its lock
	ExitStalled  = 6  // stall detection gave up (--exit-on-stall)
	ExitDataLost = 7  // data would be lost: slot dropped, binlog purged, changelog pruned
	ExitInternal = 70 // internal error (a panic)
)

// Failure is an error with the category that sets the exit code. Its
// message is its error's.
type Failure struct {
	Code int
	Err  error
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Fail tags err with code, unless err is nil or already tagged.
func Fail(code int, err error) error {
	if err == nil {
		return nil
	}
	var f *Failure
	if errors.As(err, &f) {
		return err
	}
	return &Failure{Code: code, Err: err}
}

// ExitCode classifies an error for the process's exit status: data loss
// and stalls are told by their errors wherever they are wrapped (a lost
// position found while opening the source is 7, not 3), then the first
// Failure tag, then 1.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if DataLost(err) {
		return ExitDataLost
	}
	if stream.IsStalled(err) {
		return ExitStalled
	}
	if errors.Is(err, apply.ErrFenced) {
		// Another sluice runs the stream: restarting would take it back
		// (and fence that one), so a supervisor must not.
		return ExitState
	}
	var f *Failure
	if errors.As(err, &f) {
		return f.Code
	}
	return ExitFailure
}

// DataLost reports whether err says that changes the stream has not read
// are gone from the source.
func DataLost(err error) bool {
	var purged *binlog.PurgedError
	return errors.Is(err, pgtrigger.ErrPositionLost) || errors.Is(err, mytrigger.ErrPositionLost) ||
		errors.Is(err, pglogical.ErrSlotLost) || errors.As(err, &purged)
}

// MsgStreamStopped is the message of the error log line of a lone stream's
// failure, which Run also returns: a command that prints Run's error on a
// terminal may drop the log line so that the error shows once.
const MsgStreamStopped = "stream stopped"
