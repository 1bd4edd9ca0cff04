package pglogical

import (
	"strconv"
	"testing"

	"github.com/sluice-cdc/sluice"
)

func TestPositionRoundTrip(t *testing.T) {
	for _, p := range []position{{}, {lsn: 0x16B3748}, {lsn: 0x1_0000_0010, k: 17}} {
		got, ok, err := parsePosition(p.sluice())
		if err != nil || !ok || got != p {
			t.Errorf("parse(%s) = %v, %v, %v", p.sluice(), got, ok, err)
		}
	}
	if p := (position{lsn: 0x1_0000_0010, k: 17}).token(); p != "1/10/17" {
		t.Errorf("token = %q", p)
	}
	if _, ok, err := parsePosition(sluice.Position{}); ok || err != nil {
		t.Errorf("zero position: %v, %v", ok, err)
	}
	for _, tok := range []string{"", "1/10", "x/y/1", "1/10/-1", "1/10/x", "10/1"} {
		if _, _, err := parsePosition(sluice.Position{Kind: Kind, Token: tok}); err == nil {
			t.Errorf("token %q parsed", tok)
		}
	}
	if _, _, err := parsePosition(sluice.Position{Kind: "pgtrigger", Token: "1/10/0"}); err == nil {
		t.Errorf("other kind parsed")
	}
}

// TestTokenForm checks the hand-built token against the form LSN.String
// and strconv give, which positions written before it have.
func TestTokenForm(t *testing.T) {
	for _, p := range []position{{}, {lsn: 0xA}, {lsn: 0x16B3748, k: 3}, {lsn: 0xFFFFFFFF_FFFFFFFF, at: 0xABCDEF_00000001, i: 12},
		{lsn: 0x1_0000_0000, at: 0x10, i: 0}, {lsn: 0xDEADBEEF, at: 0x1_0000_0001, i: 1 << 40}} {
		want := p.lsn.String() + "/" + strconv.FormatInt(p.k, 10)
		if p.at > 0 {
			want = p.lsn.String() + "@" + p.at.String() + "." + strconv.FormatInt(p.i, 10)
		}
		if got := p.token(); got != want {
			t.Errorf("token of %#v = %q, want %q", p, got, want)
		}
		if got, ok, err := parsePosition(p.sluice()); p.lsn > 0 && (err != nil || !ok || got != p) {
			t.Errorf("parse(%s) = %v, %v, %v", p.sluice(), got, ok, err)
		}
	}
}

func TestSkip(t *testing.T) {
	p := position{lsn: 100, k: 2}
	if !p.skipTx(99) || p.skipTx(100) || p.skipTx(101) {
		t.Errorf("skipTx around %v wrong", p)
	}
}

func TestCastText(t *testing.T) {
	for _, c := range []struct {
		base     uint32
		in, want string
	}{
		{16, "t", "true"}, {16, "f", "false"}, {1042, "ab  ", "ab"}, {1042, "   ", ""},
		{869, "10.0.0.1", "10.0.0.1/32"}, {869, "::1", "::1/128"}, {869, "10.0.0.0/8", "10.0.0.0/8"},
		{25, "t ", "t "},
	} {
		if got := castText(c.base, c.in); got != c.want {
			t.Errorf("castText(%d, %q) = %q, want %q", c.base, c.in, got, c.want)
		}
	}
}

func TestDefaultName(t *testing.T) {
	if got := DefaultName("Orders-EU 1"); got != "sluice_orders_eu_1" {
		t.Errorf("DefaultName = %q", got)
	}
	long := DefaultName(string(make([]byte, 100)))
	if len(long) != 63 || checkSlotName(long) != nil {
		t.Errorf("long name %q", long)
	}
}
