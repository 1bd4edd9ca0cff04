package stream

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// TestErrAttrsNameTheTable: a stream's error log line carries the table
// its error concerns as a field of its own, however deep the error is
// wrapped, and no table field when the error names none.
func TestErrAttrsNameTheTable(t *testing.T) {
	orders := sluice.TableName{Schema: "public", Name: "orders"}
	for _, tc := range []struct {
		name  string
		err   error
		table string
	}{
		{"plain", errors.New("cannot reach target"), ""},
		{"table error", &sluice.TableError{Table: orders, Err: errors.New("apply upsert of 3 rows to public.orders: boom")}, "public.orders"},
		{"wrapped retryable", fmt.Errorf("stream s: %w", &apply.RetryableError{Err: &sluice.TableError{Table: orders, Err: errors.New("killed")}}), "public.orders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs := ErrAttrs(tc.err)
			i := slices.Index(attrs, any("table"))
			switch {
			case tc.table == "" && i >= 0:
				t.Errorf("attrs %v carry a table", attrs)
			case tc.table != "" && (i < 0 || attrs[i+1] != tc.table):
				t.Errorf("attrs %v, want table %s", attrs, tc.table)
			}
			if attrs[1] != tc.err.Error() {
				t.Errorf("err attr %v, want %q", attrs[1], tc.err.Error())
			}
		})
	}
}
