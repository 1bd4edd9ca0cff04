package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

func TestCopyWanted(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		fromNow bool
		want    bool
	}{
		{"", false, true}, {"auto", false, true}, {"auto", true, false},
		{"on", false, true}, {"off", false, false}, {"off", true, false},
	} {
		o := StreamOptions{InitialCopy: tc.mode, FromNow: tc.fromNow}
		if got := o.copyWanted(); got != tc.want {
			t.Errorf("--initial-copy %q, --from-now %v: copy = %v, want %v", tc.mode, tc.fromNow, got, tc.want)
		}
	}
}

func TestCopyLine(t *testing.T) {
	big := sluice.TableName{Schema: "public", Name: "big"}
	small := sluice.TableName{Schema: "public", Name: "small"}
	p := tablecopy.Progress{Rows: 500, Total: 1000, Bytes: 3 << 20, Rate: 250, ETA: 2 * time.Second,
		Tables: []tablecopy.TableProgress{{Table: big, Rows: 490, Total: 990, Chunks: 10, ChunksDone: 4}, {Table: small, Rows: 10, Total: 10, Chunks: 1, ChunksDone: 1}}}
	line := copyLine(p)
	for _, want := range []string{"initial copy: 500 of ~1000 rows (50%)", "3.0 MiB", "250 rows/s", "ETA 2s", "public.big 49%"} {
		if !strings.Contains(line, want) {
			t.Errorf("copy line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "public.small") {
		t.Errorf("copy line %q names a finished table", line)
	}
	p.Done, p.Rows, p.ETA = true, 1000, 0
	if line := copyLine(p); !strings.HasPrefix(line, "initial copy done: 1000 of ~1000 rows (100%)") {
		t.Errorf("final copy line %q", line)
	}
	st := copyStatus(p)
	if st.Percent != 100 || len(st.Tables) != 2 || st.Tables[0].Table != "public.big" {
		t.Errorf("copy status %+v", st)
	}
}
