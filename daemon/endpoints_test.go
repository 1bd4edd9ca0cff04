package daemon

import "testing"

func TestMaskURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:secret@db1:5432/shop", "postgres://app:xxxxx@db1:5432/shop"},
		{"postgres://app@db1:5432/shop", "postgres://app@db1:5432/shop"},
		{"root:secret@tcp(h:3306)/db", "root:xxxxx@tcp(h:3306)/db"},
		{"root:se@cr/et@tcp(h:3306)/db", "root:xxxxx@tcp(h:3306)/db"},
		{"root@tcp(h:3306)/db", "root@tcp(h:3306)/db"},
	} {
		if got := MaskURL(tc.in); got != tc.want {
			t.Errorf("MaskURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
