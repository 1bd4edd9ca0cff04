package pgtrigger

import (
	"reflect"
	"testing"

	"github.com/sluice-cdc/sluice"
)

func TestPositionRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		pos   position
		token string
	}{
		{"start", startPosition, "1:1://0"},
		{"closed", position{prev: snapshot{xmin: 740, xmax: 745, xip: []uint64{740, 742}}}, "740:745:740,742//0"},
		{"open", position{
			prev: snapshot{xmin: 740, xmax: 745, xip: []uint64{740, 742}},
			cur:  snapshot{xmin: 742, xmax: 760},
			open: true, last: 42,
		}, "740:745:740,742/742:760:/42"},
		{"open at window start", position{prev: emptySnapshot, cur: snapshot{xmin: 9, xmax: 9}, open: true}, "1:1:/9:9:/0"},
		{"big xids", position{prev: snapshot{xmin: 1 << 40, xmax: 1<<40 + 3, xip: []uint64{1<<40 + 1}}}, "1099511627776:1099511627779:1099511627777//0"},
		{"change with its xid", position{
			prev: snapshot{xmin: 740, xmax: 745, xip: []uint64{740, 742}},
			cur:  snapshot{xmin: 742, xmax: 760},
			open: true, last: 42, xid: 740,
		}, "740:745:740,742/742:760:/42/740"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := tt.pos.sluice()
			if sp.Kind != Kind || sp.Token != tt.token {
				t.Fatalf("sluice() = %v, want %s:%s", sp, Kind, tt.token)
			}
			// Through the String form the checkpoint store keeps.
			back, err := sluice.ParsePosition(sp.String())
			if err != nil {
				t.Fatal(err)
			}
			got, err := parsePosition(back)
			if err != nil {
				t.Fatalf("parsePosition(%v): %v", back, err)
			}
			if !reflect.DeepEqual(got, tt.pos) {
				t.Fatalf("parsePosition(%v) = %+v, want %+v", back, got, tt.pos)
			}
		})
	}
}

func TestParsePositionZero(t *testing.T) {
	got, err := parsePosition(sluice.Position{})
	if err != nil || !reflect.DeepEqual(got, startPosition) {
		t.Fatalf("parsePosition(zero) = %+v, %v; want start", got, err)
	}
}

func TestParsePositionErrors(t *testing.T) {
	tests := []struct {
		name string
		pos  sluice.Position
	}{
		{"other kind", sluice.Position{Kind: "pglogical", Token: "0/16B3748"}},
		{"two parts", sluice.Position{Kind: Kind, Token: "1:1:/2"}},
		{"five parts", sluice.Position{Kind: Kind, Token: "1:1:/9:9:/3/4/5"}},
		{"xid after the window", sluice.Position{Kind: Kind, Token: "1:1:/2:2:/3/4"}},
		{"xid before the window", sluice.Position{Kind: Kind, Token: "5:5:/9:9:/3/4"}},
		{"xid running at the window's end", sluice.Position{Kind: Kind, Token: "5:5:/6:9:6/3/6"}},
		{"xid not a number", sluice.Position{Kind: Kind, Token: "1:1:/9:9:/3/x"}},
		{"xid with a sign", sluice.Position{Kind: Kind, Token: "1:1:/9:9:/3/+4"}},
		{"xid without a change", sluice.Position{Kind: Kind, Token: "1:1:/9:9:/0/4"}},
		{"xid without a window", sluice.Position{Kind: Kind, Token: "1:1://0/4"}},
		{"bad prev", sluice.Position{Kind: Kind, Token: "x:1:/2:2:/3"}},
		{"bad cur", sluice.Position{Kind: Kind, Token: "1:1:/2:2/3"}},
		{"zero xmin", sluice.Position{Kind: Kind, Token: "0:1:/2:2:/3"}},
		{"xmax below xmin", sluice.Position{Kind: Kind, Token: "5:4:/5:5:/3"}},
		{"xip outside", sluice.Position{Kind: Kind, Token: "5:9:9/9:9:/3"}},
		{"xip unsorted", sluice.Position{Kind: Kind, Token: "5:9:7,6/9:9:/3"}},
		{"negative last", sluice.Position{Kind: Kind, Token: "1:1:/2:2:/-1"}},
		{"last not a number", sluice.Position{Kind: Kind, Token: "1:1:/2:2:/x"}},
		{"last without window", sluice.Position{Kind: Kind, Token: "1:1://7"}},
		{"window backwards", sluice.Position{Kind: Kind, Token: "10:20:/5:20:/1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := parsePosition(tt.pos); err == nil {
				t.Fatalf("parsePosition(%v) = %+v, want error", tt.pos, p)
			}
		})
	}
}

func TestSnapshotVisible(t *testing.T) {
	s := snapshot{xmin: 10, xmax: 20, xip: []uint64{10, 15}}
	for xid, want := range map[uint64]bool{3: true, 9: true, 10: false, 11: true, 15: false, 19: true, 20: false, 99: false} {
		if got := s.visible(xid); got != want {
			t.Errorf("%v.visible(%d) = %v, want %v", s, xid, got, want)
		}
	}
	for _, xid := range []uint64{3, 1 << 33} {
		if emptySnapshot.visible(xid) {
			t.Errorf("empty snapshot sees xid %d", xid)
		}
	}
}

func TestSplitTriggerArgs(t *testing.T) {
	tests := []struct {
		raw  string
		want []string
	}{
		{"", nil},
		{"\"public\".\"t\"\x00id\x00", []string{`"public"."t"`, "id"}},
		{"a\x00b\x00c\x00", []string{"a", "b", "c"}},
		{"a\x00\x00", []string{"a", ""}},
	}
	for _, tt := range tests {
		if got := splitTriggerArgs([]byte(tt.raw)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitTriggerArgs(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

// TestOldTokens: positions written before change positions carried their
// transaction still parse and resume.
func TestOldTokens(t *testing.T) {
	p, err := parsePosition(sluice.Position{Kind: Kind, Token: "740:745:740,742/742:760:/42"})
	if err != nil || p.xid != 0 || !p.open || p.last != 42 {
		t.Fatalf("old token = %+v, %v", p, err)
	}
	if got := p.token(); got != "740:745:740,742/742:760:/42" {
		t.Fatalf("old token written back as %q", got)
	}
}

func snap(t *testing.T, s string) snapshot {
	t.Helper()
	sn, err := parseSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	return sn
}

// TestSnapshotLE checks le against visibility over every xid in a range,
// for pairs of snapshots of all shapes.
func TestSnapshotLE(t *testing.T) {
	snaps := []string{"1:1:", "5:5:", "5:8:5,7", "5:8:5,6,7", "5:8:", "6:8:6,7", "7:7:", "8:8:", "5:10:5", "5:10:9", "3:12:3,4,11", "9:9:", "10:12:10"}
	for _, a := range snaps {
		for _, b := range snaps {
			sa, sb := snap(t, a), snap(t, b)
			want := true
			for x := uint64(1); x < 20; x++ {
				if sa.visible(x) && !sb.visible(x) {
					want = false
				}
			}
			if got := sa.le(sb); got != want {
				t.Errorf("%s.le(%s) = %v, want %v", a, b, got, want)
			}
		}
	}
}

func TestCovers(t *testing.T) {
	p := func(s string) sluice.Position { return sluice.Position{Kind: Kind, Token: s} }
	// A first read took snapshots s0 = 10:10:, s1 = 10:14:10,12 (11 and
	// 13 committed), s2 = 12:16:12 (10, 14 and 15 committed), s3 = 16:16:.
	// Window (s0, s1) held xid 11 (ids 1, 2) and 13 (id 3); window (s1, s2)
	// xid 10 (id 4), 14 (id 5) and 15 (id 6); window (s2, s3) xid 12 (id 7).
	// Another read, after a restart at s0, took one snapshot t = 16:17:
	// and read window (s0, t) in id order.
	first := "10:10:/10:14:10,12"
	second := "12:16:12/16:16:"
	tests := []struct {
		name, p, c    string
		covered, done bool
		err           bool
	}{
		// Same windows as the first read.
		{"earlier in the window", first + "/2/11", first + "/1/11", true, false, false},
		{"itself", first + "/2/11", first + "/2/11", true, true, false},
		{"later in the window", first + "/2/11", first + "/3/13", false, true, false},
		{"next window", first + "/3/13", "10:14:10,12/12:16:12/4/10", false, true, false},
		{"previous window", "10:14:10,12/12:16:12/4/10", first + "/3/13", true, false, false},
		// Window (s0, t) of the second read spans the first read's three:
		// only the transaction says.
		{"reread: same window's earlier row", first + "/2/11", "10:10:/16:17:/1/11", true, false, false},
		{"reread: same window's later row", first + "/2/11", "10:10:/16:17:/3/13", false, false, false},
		{"reread: a later window's row with a low id", "10:14:10,12/12:16:12/5/14", "10:10:/16:17:/3/13", true, false, false},
		{"reread: an earlier window's row, later xid", "10:14:10,12/12:16:12/4/10", "10:10:/16:17:/3/13", true, false, false},
		{"reread: in p's window, id after p", "10:14:10,12/12:16:12/4/10", "10:10:/16:17:/6/15", false, false, false},
		{"reread: in p's window, id before p", "10:14:10,12/12:16:12/5/14", "10:10:/16:17:/4/10", true, false, false},
		{"reread: after p's window", "10:14:10,12/12:16:12/5/14", "10:10:/16:17:/7/12", false, false, false},
		{"reread: next window after t", second + "/7/12", "16:17:/18:18:/8/17", false, true, false},
		{"p at a window's start", "10:14:10,12//0", "10:10:/16:17:/2/11", true, false, false},
		{"p at a window's start, later xid", "10:14:10,12//0", "10:10:/16:17:/4/10", false, false, false},
		{"p from the start", "", "10:10:/16:17:/1/11", false, true, false},
		// Positions without a transaction (an older sluice's).
		{"old: same window", first + "/2", first + "/1", true, false, false},
		{"old: same window, later", first + "/2", first + "/3", false, true, false},
		{"old: window before p", "10:14:10,12/12:16:12/4", first + "/3", true, false, false},
		{"old: window after p", first + "/3", "10:14:10,12/12:16:12/4", false, true, false},
		{"old: overlapping windows", first + "/2", "10:10:/16:17:/1", false, false, true},
		// Points between windows (progress, start).
		{"point: p's prev", "10:14:10,12/12:16:12/4/10", "10:14:10,12//0", true, false, false},
		{"point: after p's window", "10:14:10,12/12:16:12/4/10", "16:17://0", false, true, false},
		{"point: p itself", "16:17://0", "16:17://0", true, true, false},
		{"point: window read to 0", "10:14:10,12//0", "10:14:10,12/12:16:12/0", true, true, false},
		{"point: end of p's window", "10:14:10,12/12:16:12/4/10", "12:16:12//0", false, false, true},
		{"point: before p closed", "16:17://0", "12:16:12//0", true, false, false},
		{"point: after p closed", "12:16:12//0", "16:17://0", false, true, false},
		// Not comparable at all.
		{"zero change", first + "/2/11", "", false, false, true},
		{"foreign p", "", "10:10:/16:17:/1/11", false, false, true},
		{"corrupt c", first + "/2/11", "10:10:/16:17:/1/99", false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pp, cp := p(tt.p), p(tt.c)
			if tt.p == "" {
				pp = sluice.Position{}
			}
			if tt.name == "foreign p" {
				pp = sluice.Position{Kind: "pglogical", Token: "0/1"}
			}
			if tt.c == "" {
				cp = sluice.Position{}
			}
			covered, done, err := Covers(pp, cp)
			if (err != nil) != tt.err {
				t.Fatalf("Covers(%v, %v) error %v, want error %v", pp, cp, err, tt.err)
			}
			if err == nil && (covered != tt.covered || done != tt.done) {
				t.Fatalf("Covers(%v, %v) = %v, %v; want %v, %v", pp, cp, covered, done, tt.covered, tt.done)
			}
		})
	}
}
