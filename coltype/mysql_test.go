package coltype

import (
	"slices"
	"testing"
)

func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"'a'", []string{"a"}},
		{"'a','b'", []string{"a", "b"}},
		{"'it''s','x,y',''", []string{"it's", "x,y", ""}},
		{"'(',')'", []string{"(", ")"}},
	} {
		if got := Members(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Members(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWidths(t *testing.T) {
	for _, tc := range []struct {
		base       string
		bits       int
		bytes      int64
		text, blob bool
	}{
		{"tinyint", 8, 0, false, false},
		{"mediumint", 24, 0, false, false},
		{"bigint", 64, 0, false, false},
		{"tinytext", 0, 255, true, false},
		{"blob", 0, 65535, false, true},
		{"mediumtext", 0, 16777215, true, false},
		{"longblob", 0, 4294967295, false, true},
		{"json", 0, 4294967295, false, false},
		{"varchar", 0, 0, false, false},
	} {
		if MySQLIntBits(tc.base) != tc.bits || MySQLStringBytes(tc.base) != tc.bytes || IsMySQLText(tc.base) != tc.text || IsMySQLBlob(tc.base) != tc.blob {
			t.Errorf("%s: bits %d bytes %d text %v blob %v; want %d %d %v %v", tc.base,
				MySQLIntBits(tc.base), MySQLStringBytes(tc.base), IsMySQLText(tc.base), IsMySQLBlob(tc.base), tc.bits, tc.bytes, tc.text, tc.blob)
		}
	}
}
