package keyrange

import (
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

func TestPredicates(t *testing.T) {
	one := func(s ...string) sluice.Row {
		r := make(sluice.Row, len(s))
		for i, v := range s {
			r[i] = sluice.Text(v)
		}
		return r
	}
	cols := []string{`"a"`, `"b"`}
	mcols := []string{"`a`", "`b`"}
	for _, tc := range []struct {
		name   string
		r      tablecopy.Range
		pg, my string
	}{
		{"whole", tablecopy.Range{}, "TRUE", "TRUE"},
		{"from", tablecopy.Range{From: one("1")}, `"a" >= '1'`, "(`a` >= '1')"},
		{"to", tablecopy.Range{To: one("it's")}, `"a" < 'it''s'`, "(`a` < 'it\\'s')"},
		{"both composite", tablecopy.Range{From: one("1", "x"), To: one("2", `\`)},
			`("a", "b") >= ('1', 'x') AND ("a", "b") < ('2', E'\\')`,
			"(`a` > '1' OR (`a` = '1' AND (`b` >= 'x'))) AND (`a` < '2' OR (`a` = '2' AND (`b` < '\\\\')))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PG(cols, tc.r); got != tc.pg {
				t.Errorf("PG = %s, want %s", got, tc.pg)
			}
			if got := My(mcols, tc.r); got != tc.my {
				t.Errorf("My = %s, want %s", got, tc.my)
			}
		})
	}
}

func TestMyLiteral(t *testing.T) {
	if got, want := MyLiteral("a\x00'\\\n\r\x1az"), `'a\0\'\\\n\r\Zz'`; got != want {
		t.Errorf("MyLiteral = %s, want %s", got, want)
	}
}
