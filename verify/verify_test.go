package verify

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name      string
		s1, t, s2 string
		want      verdict
	}{
		{"equal", "a", "a", "a", same},
		{"target caught up with a later source value", "a", "b", "b", same},
		{"target still at the first snapshot's value, source moved on", "a", "a", "b", same},
		{"source stable, target other", "a", "x", "a", differs},
		{"missing on the target", "a", "", "a", differs},
		{"extra on the target", "", "x", "", differs},
		{"deleted on the source during the round, target still has it", "a", "a", "", same},
		{"inserted on the source during the round, target has it", "", "a", "a", same},
		{"source changed, target at neither value", "a", "x", "b", changing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judge(tc.s1, tc.t, tc.s2); got != tc.want {
				t.Fatalf("judge(%q, %q, %q) = %v, want %v", tc.s1, tc.t, tc.s2, got, tc.want)
			}
		})
	}
}

func leafRows(rows ...string) *rowSet {
	s := newRowSet()
	for i := 0; i+1 < len(rows); i += 2 {
		s.add([]rowHash{{raw: sluice.Row{sluice.Text(rows[i])}, key: rows[i], hash: rows[i+1]}})
	}
	return s
}

func TestMergeCompare(t *testing.T) {
	for _, tc := range []struct {
		name         string
		a, b         *rowSet
		cand         []string
		onlyA, onlyB []string
	}{
		{"equal", leafRows("1", "h1", "2", "h2"), leafRows("2", "h2", "1", "h1"), nil, nil, nil},
		{"one different", leafRows("1", "h1", "2", "h2"), leafRows("1", "h1", "2", "zz"), []string{"2"}, nil, nil},
		{"missing and extra", leafRows("1", "h1", "2", "h2"), leafRows("2", "h2", "3", "h3"), []string{"1", "3"}, []string{"1"}, []string{"3"}},
		{"empty target", leafRows("1", "h1"), leafRows(), []string{"1"}, []string{"1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := candidates(tc.a, tc.b); strings.Join(got, ",") != strings.Join(tc.cand, ",") {
				t.Errorf("candidates = %v, want %v", got, tc.cand)
			}
			keys := func(rs []sluice.Row) string {
				var out []string
				for _, r := range rs {
					out = append(out, r[0].Text)
				}
				return strings.Join(out, ",")
			}
			if got := keys(onlyIn(tc.a, tc.b)); got != strings.Join(tc.onlyA, ",") {
				t.Errorf("onlyIn(a, b) = %v, want %v", got, tc.onlyA)
			}
			if got := keys(onlyIn(tc.b, tc.a)); got != strings.Join(tc.onlyB, ",") {
				t.Errorf("onlyIn(b, a) = %v, want %v", got, tc.onlyB)
			}
		})
	}
}

func TestDifferingColumns(t *testing.T) {
	s := func(v string) *string { return &v }
	cols := []sluice.Column{{Name: "id"}, {Name: "a"}, {Name: "b"}, {Name: "c"}}
	got := differingColumns(cols, []*string{s("1"), s("x"), nil, s("")}, []*string{s("1"), s("y"), s(""), s("")})
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("differing columns %v, want a,b (a value, NULL against '')", got)
	}
}

func TestBisection(t *testing.T) {
	for _, tc := range []struct {
		lo, hi string
		n      int64
		want   string
	}{
		{"1", "100", 4, "26,51,76"},
		{"1", "3", 10, "2,3"}, // fewer values than ranges
		{"-9223372036854775808", "9223372036854775807", 2, "0"},
		{"5", "5", 3, ""},
	} {
		var got []string
		for _, b := range intBounds(tc.lo, tc.hi, tc.n) {
			got = append(got, b[0].Text)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("intBounds(%s, %s, %d) = %v, want %s", tc.lo, tc.hi, tc.n, got, tc.want)
		}
	}
	// Cutting a range at bounds covers it exactly, in order, without gaps.
	k := func(s string) sluice.Row { return sluice.Row{sluice.Text(s)} }
	r := tablecopy.Range{From: k("10"), To: k("90")}
	rs := rangesOf(r, []sluice.Row{k("30"), k("60")})
	var parts []string
	for _, x := range rs {
		parts = append(parts, x.String())
	}
	want := []string{
		tablecopy.Range{From: k("10"), To: k("30")}.String(),
		tablecopy.Range{From: k("30"), To: k("60")}.String(),
		tablecopy.Range{From: k("60"), To: k("90")}.String(),
	}
	if strings.Join(parts, " ") != strings.Join(want, " ") {
		t.Fatalf("rangesOf = %v, want %v", parts, want)
	}
	if got := rangesOf(tablecopy.Range{}, nil); len(got) != 1 || !got[0].Whole() {
		t.Fatalf("rangesOf(whole, no bounds) = %v", got)
	}
	// Results of batches arriving out of order are narrowed in key order.
	rds := []rangeDiff{{r: rs[2]}, {r: rs[0]}, {r: rs[1]}}
	sortRanges(rds, rs)
	for i := range rds {
		if rds[i].r.String() != rs[i].String() {
			t.Fatalf("sortRanges: %d is %s, want %s", i, rds[i].r, rs[i])
		}
	}
}

func TestSQL(t *testing.T) {
	for _, d := range []Dialect{PostgreSQL, MySQL} {
		sp := &spec{dialect: d, table: quoteTable(d, sluice.TableName{Schema: "s", Name: "t"}), canon: []string{"A", "B"},
			keyIdents: []string{quoteIdent(d, "id")}, key: []int{0}}
		q := sp.digestQuery([]tablecopy.Range{{}, {From: sluice.Row{sluice.Text("5")}}})
		if strings.Count(q, "UNION ALL") != 1 || !strings.Contains(q, "SELECT 0,") || !strings.Contains(q, "SELECT 1,") {
			t.Errorf("%v: two ranges are not one statement of two indexed parts:\n%s", d, q)
		}
		// Every value is length-prefixed and NULL is N: ("a", NULL) and
		// (NULL, "a") encode apart, as do ("ab", "") and ("a", "b").
		enc := sp.rowText()
		if strings.Count(enc, "'N'") != 2 || strings.Count(enc, "':'") != 2 {
			t.Errorf("%v: row text %s is not length-prefixed with NULL as N", d, enc)
		}
		w := sp.keysWhere([]sluice.Row{{sluice.Text("1")}, {sluice.Text("it's")}})
		if !strings.Contains(w, " IN (") || !strings.Contains(w, "'1'") {
			t.Errorf("%v: keysWhere = %s", d, w)
		}
	}
}

func TestReportRendering(t *testing.T) {
	rep := &Report{Live: true, Elapsed: 1500 * time.Millisecond, Tables: []*TableReport{
		{Source: "public.a", Target: "public.a", SourceRows: 10, TargetRows: 10, Ranges: 1,
			Skipped: []string{"j_name: generated by different expressions"}},
		{Source: "public.b", Target: "b", SourceRows: 10, TargetRows: 10, Ranges: 2, Bisected: 8, Diffs: []Diff{
			{Key: "(id=7)", Kind: Different, Columns: []string{"amount", "note"}},
			{Key: "(id=9)", Kind: Missing},
			{Key: "(id=11)", Kind: Extra},
		}},
	}}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"public.a: equal (10 source rows, 10 target rows",
		"  not compared: j_name: generated by different expressions\n",
		"public.b → b: DIFFERENT",
		"(id=7)   different  amount, note",
		"(id=9)   missing",
		"(id=11)  extra",
		"summary: 1 of 2 tables differ, 3 rows differ (live",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Equal       bool `json:"equal"`
		Differences int  `json:"differences"`
		Tables      []struct {
			Diffs []Diff `json:"diffs"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Equal || back.Differences != 3 || len(back.Tables) != 2 || back.Tables[1].Diffs[0].Columns[1] != "note" {
		t.Fatalf("JSON report does not round-trip: %s", js.String())
	}
	eq := &Report{Tables: []*TableReport{{Source: "t", Target: "t"}}}
	text.Reset()
	eq.WriteText(&text)
	if !strings.Contains(text.String(), "summary: 1 tables equal (a still pair") {
		t.Fatalf("equal report: %s", text.String())
	}
}

// TestComparedColumns: a generated column is compared where both sides
// hold it and compute it alike (or only the target generates it), left
// out, saying why, where the expressions differ or the target lacks it;
// a repair still writes the source's values of the first kind, and never
// a column the target lacks.
func TestComparedColumns(t *testing.T) {
	src := &sluice.Table{Name: sluice.TableName{Name: "g"}, Key: []int{0}, Columns: []sluice.Column{
		{Name: "id"}, {Name: "price"}, {Name: "qty"},
		{Name: "total", Generated: "(price * (qty)::numeric)"},
		{Name: "j_name", Generated: "(doc ->> 'name'::text)"},
		{Name: "half"},
		{Name: "only_src", Generated: "(qty + 1)"},
		{Name: "plain_tgt", Generated: "(qty * 2)"},
	}}
	tgt := &sluice.Table{Name: sluice.TableName{Name: "g"}, Key: []int{0}, Columns: []sluice.Column{
		{Name: "id"}, {Name: "price"}, {Name: "qty"},
		{Name: "total", Generated: "`price` * `qty`"},
		{Name: "j_name", Generated: "json_value(`doc`,'$.name')"},
		{Name: "half", Generated: "`price` / 2"},
		{Name: "plain_tgt"},
	}}
	cols, repair, skipped := compared(src, tgt, "MySQL x:1")
	names := func(t *sluice.Table) []string {
		var out []string
		for _, c := range t.Columns {
			out = append(out, c.Name)
		}
		return out
	}
	if got := names(cols); strings.Join(got, ",") != "id,price,qty,total,half,plain_tgt" {
		t.Errorf("compared %v", got)
	}
	if got := names(repair); strings.Join(got, ",") != "id,price,qty,total,j_name,half,plain_tgt" || len(repair.Omitted) != 1 || repair.Omitted[0].Name != "only_src" {
		t.Errorf("repair writes %v, omits %v", got, repair.Omitted)
	}
	if len(skipped) != 2 || !strings.Contains(skipped[0], "j_name: generated by different expressions") || !strings.Contains(skipped[1], "only_src: generated on the source") {
		t.Errorf("skipped %q", skipped)
	}
	if len(src.Columns) != 8 || src.Omitted != nil {
		t.Error("the source's description changed")
	}
}
