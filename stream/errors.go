package stream

import (
	"errors"

	"github.com/sluice-cdc/sluice"
)

// IsStalled reports whether err is the error Run returns when the stream
// stalled under ExitOnStall.
func IsStalled(err error) bool { return errors.Is(err, errStalled) }

// ErrAttrs are the log attributes of an apply error: the error, and the
// table it concerns when it names one.
func ErrAttrs(err error) []any {
	attrs := []any{"err", err.Error()}
	if t, ok := sluice.ErrTable(err); ok {
		attrs = append(attrs, "table", t.String())
	}
	return attrs
}
