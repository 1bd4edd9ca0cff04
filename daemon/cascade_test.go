package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// fkReader is a log reader of a source whose log omits the rows its
// foreign-key actions change: it gives the source's foreign keys.
type fkReader struct {
	pagedReader
	fks []sluice.ForeignKey
}

func (r *fkReader) ForeignKeys() []sluice.ForeignKey { return r.fks }

// TestStreamCascadesThroughWrappers: the cascades of a MySQL source are
// planned whatever wraps its reader. Seen before the fix: a stream resumed
// with a state file took the reader opened early, wrapped in the read
// ahead (aheadReader), whose type assertion found no ForeignKeys; the
// stream then ran with no cascades at all, and every row a parent's delete
// or renumbering changed on the source stayed on the target as it was
// (TestChaosShort's target restart, TestForeignKeysTargetRestart). A
// reader of such a source that gives no foreign keys is refused.
func TestStreamCascadesThroughWrappers(t *testing.T) {
	parent := &sluice.Table{Name: sluice.TableName{Schema: "s", Name: "orders"}, Columns: []sluice.Column{{Name: "id"}}, Key: []int{0}}
	child := &sluice.Table{Name: sluice.TableName{Schema: "s", Name: "lines"}, Columns: []sluice.Column{{Name: "order_id"}, {Name: "n"}}, Key: []int{0, 1}}
	fk := sluice.ForeignKey{Name: "lines_order_fk", Table: child.Name, Columns: []string{"order_id"}, RefTable: parent.Name, RefColumns: []string{"id"},
		OnDelete: sluice.FKCascade, OnUpdate: sluice.FKCascade}
	tables := []*sluice.Table{parent, child}
	fkr := func() reader { return &fkReader{fks: []sluice.ForeignKey{fk}} }
	ahead := func(rd reader) reader {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing to read ahead; the wrapping is what counts
		r := readAhead(ctx, cancel, rd, 0)
		r.halt()
		return r
	}
	for _, tc := range []struct {
		name    string
		rd      reader
		omits   bool
		acting  int    // foreign keys the target carries out
		wantErr string // when refused
	}{
		{name: "reader", rd: fkr(), omits: true, acting: 1},
		{name: "read ahead (a resumed stream)", rd: ahead(fkr()), omits: true, acting: 1},
		{name: "source side of the read ahead", rd: sourceSide{ahead(fkr())}, omits: true, acting: 1},
		{name: "source side", rd: sourceSide{fkr()}, omits: true, acting: 1},
		{name: "log that carries the rows", rd: ahead(&pagedReader{}), omits: false, acting: 0},
		{name: "MySQL reader without foreign keys", rd: ahead(&pagedReader{}), omits: true, wantErr: "does not give the source's foreign keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := streamCascades(tc.rd, tables, tc.omits)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := len(cs.Acting()); got != tc.acting {
				t.Fatalf("%d foreign keys carried out, want %d (%s)", got, tc.acting, cs.Summary())
			}
		})
	}
}
