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
		{"four parts", sluice.Position{Kind: Kind, Token: "1:1:/2:2:/3/4"}},
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
