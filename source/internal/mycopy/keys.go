package mycopy

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

// ReadKeys emits the rows of t whose primary keys are keys (each aligned
// with t.Key, as text), rendered as Read renders them; a key without a
// row is left out. sluice verify --repair reads the source's current rows
// of the keys it found differing so.
func (r *Reader) ReadKeys(ctx context.Context, t *sluice.Table, keys []sluice.Row, emit func([]sluice.Row) error) error {
	if len(keys) == 0 {
		return nil
	}
	return r.readWhere(ctx, t, keyList(len(keys)), func(qk []string) string {
		tuples := make([]string, len(keys))
		for i, k := range keys {
			lits := make([]string, len(k))
			for j, v := range k {
				lits[j] = keyrange.MyLiteral(v.Text)
			}
			tuples[i] = "(" + strings.Join(lits, ", ") + ")"
		}
		return "(" + strings.Join(qk, ", ") + ") IN (" + strings.Join(tuples, ", ") + ")"
	}, emit)
}

// keyList names a read of n keys in errors.
type keyList int

func (n keyList) String() string { return fmt.Sprintf("%d keys", int(n)) }
