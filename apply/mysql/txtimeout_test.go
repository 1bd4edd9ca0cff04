package mysql

import (
	"strings"
	"testing"
	"time"
)

func TestTxTimeoutOf(t *testing.T) {
	for _, tc := range []struct {
		name             string
		version, comment string
		vars             map[string]string
		want             time.Duration
		wantWhat         string
		wantErr          bool
	}{
		{"vitess", "8.0.30-Vitess", "Version: 19.0.4", nil, 20 * time.Second, "Vitess", false},
		{"planetscale comment", "8.0.34", "PlanetScale", map[string]string{"max_statement_time": "5"}, 20 * time.Second, "Vitess", false},
		{"mariadb none", "10.11.6-MariaDB", "Debian", map[string]string{"max_statement_time": "0.000000", "idle_transaction_timeout": "0"}, 0, "", false},
		{"mariadb shortest", "10.11.6-MariaDB", "", map[string]string{"max_statement_time": "12.5", "idle_transaction_timeout": "30", "idle_write_transaction_timeout": "0"}, 12500 * time.Millisecond, "max_statement_time", false},
		{"mariadb idle", "10.11.6-MariaDB", "", map[string]string{"max_statement_time": "0", "idle_transaction_timeout": "8"}, 8 * time.Second, "idle_transaction_timeout", false},
		{"mysql lacks them", "8.0.36", "MySQL Community Server", map[string]string{}, 0, "", false},
		{"garbage", "10.11.6-MariaDB", "", map[string]string{"max_statement_time": "soon"}, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, what, err := txTimeoutOf(tc.version, tc.comment, tc.vars)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if d != tc.want {
				t.Errorf("timeout = %s, want %s", d, tc.want)
			}
			if tc.wantWhat != "" && !strings.Contains(strings.ToLower(what), strings.ToLower(tc.wantWhat)) {
				t.Errorf("what = %q, want it to name %q", what, tc.wantWhat)
			}
		})
	}
}
