package mytrigger

import (
	"math"
	"testing"

	"github.com/sluice-cdc/sluice"
)

func TestPositionRoundTrip(t *testing.T) {
	for _, p := range []position{startPosition, {last: 42}, {last: 1<<64 - 1}} {
		back, err := sluice.ParsePosition(p.sluice().String())
		if err != nil {
			t.Fatal(err)
		}
		got, err := parsePosition(back)
		if err != nil || got != p {
			t.Fatalf("parsePosition(%v) = %+v, %v; want %+v", back, got, err, p)
		}
	}
	if got, err := parsePosition(sluice.Position{}); err != nil || got != startPosition {
		t.Fatalf("parsePosition(zero) = %+v, %v", got, err)
	}
	for _, bad := range []sluice.Position{
		{Kind: "pgtrigger", Token: "1:1://0"}, {Kind: Kind, Token: "-1"}, {Kind: Kind, Token: "x"},
		{Kind: Kind, Token: ""}, {Kind: Kind, Token: "007"}, {Kind: Kind, Token: "1/2"},
	} {
		if p, err := parsePosition(bad); err == nil {
			t.Errorf("parsePosition(%v) = %+v, want error", bad, p)
		}
	}
}

func TestTriggerName(t *testing.T) {
	if got := triggerName("orders", events[0]); got != "sluice_orders_ai" {
		t.Fatalf("triggerName = %s", got)
	}
	long := "a_very_long_table_name_that_goes_on_and_on_and_on_and_on_until_64"
	a, b := triggerName(long, events[1]), triggerName(long+"x", events[1])
	if len(a) > 64 || len(b) > 64 || a == b {
		t.Fatalf("long names %q, %q: want distinct and at most 64 bytes", a, b)
	}
}

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		in    string
		scale int
		want  string
	}{
		{"0", 0, "0000-00-00 00:00:00"}, {"0.000", 3, "0000-00-00 00:00:00.000"},
		{"1", 0, "1970-01-01 00:00:01"}, {"2147483647.99", 2, "2038-01-19 03:14:07.99"},
	} {
		if got, err := formatTimestamp(tt.in, tt.scale); err != nil || got != tt.want {
			t.Errorf("formatTimestamp(%q, %d) = %q, %v; want %q", tt.in, tt.scale, got, err, tt.want)
		}
	}
	for f, want := range map[float64]string{1234567: "1.234567e+06", 0.1: "0.1", 1e15: "1e+15", 1e-5: "1e-05", 123456.7: "123456.7",
		math.MaxFloat64: "1.7976931348623157e+308", 5e-324: "5e-324", math.Copysign(0, -1): "0"} {
		if got := formatFloat(f, false); got != want {
			t.Errorf("formatFloat(%v) = %q, want %q", f, got, want)
		}
	}
	// A FLOAT arrives as its exact value widened to a double.
	for f, want := range map[float32]string{1234567: "1.234567e+06", 16777216: "1.6777216e+07", 0.1234567: "0.1234567", 0.1: "0.1",
		math.MaxFloat32: "3.4028235e+38", 1.17549435e-38: "1.1754944e-38", 1e-45: "1e-45", 123456789: "1.2345679e+08"} {
		if got := formatFloat(float64(f), true); got != want {
			t.Errorf("formatFloat(float32 %v) = %q, want %q", f, got, want)
		}
	}
}

func TestCovers(t *testing.T) {
	pos := func(last uint64) sluice.Position { return position{last: last}.sluice() }
	tests := []struct {
		name          string
		p, c          sluice.Position
		covered, done bool
		wantErr       bool
	}{
		{"before", pos(10), pos(9), true, false, false},
		{"at", pos(10), pos(10), true, false, false},
		{"after", pos(10), pos(11), false, true, false},
		{"from the start", sluice.Position{}, pos(1), false, true, false},
		{"start position", pos(0), pos(1), false, true, false},
		{"zero change", pos(10), sluice.Position{}, false, false, true},
		{"foreign p", sluice.Position{Kind: "binlog", Token: "x"}, pos(1), false, false, true},
		{"foreign c", pos(1), sluice.Position{Kind: "pgtrigger", Token: "1:1://0"}, false, false, true},
		{"corrupt c", pos(1), sluice.Position{Kind: Kind, Token: "x"}, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			covered, done, err := Covers(tt.p, tt.c)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Covers(%v, %v) error %v, want error %v", tt.p, tt.c, err, tt.wantErr)
			}
			if err == nil && (covered != tt.covered || done != tt.done) {
				t.Fatalf("Covers(%v, %v) = %v, %v; want %v, %v", tt.p, tt.c, covered, done, tt.covered, tt.done)
			}
		})
	}
}
