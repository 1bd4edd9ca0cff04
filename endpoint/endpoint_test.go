package endpoint

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

func TestMaskURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:secret@db1:5432/shop", "postgres://app:xxxxx@db1:5432/shop"},
		{"postgres://app@db1:5432/shop", "postgres://app@db1:5432/shop"},
		{"postgres://app@db1:5432/shop?password=secret&sslmode=require", "postgres://app@db1:5432/shop?password=xxxxx&sslmode=require"},
		{"root:secret@tcp(h:3306)/db", "root:xxxxx@tcp(h:3306)/db"},
		{"root:se@cr/et@tcp(h:3306)/db", "root:xxxxx@tcp(h:3306)/db"},
		{"root@tcp(h:3306)/db", "root@tcp(h:3306)/db"},
		// A bare % makes the URL unparsable: nothing of it is shown.
		{"mysql://root:se%&cret@h:3306/db", "<unparseable mysql:// connection string redacted>"},
		{"host=db1 password=secret dbname=shop", "host=db1 password=xxxxx dbname=shop"},
		{"host=db1 password='sec ret\\'x' dbname=shop", "host=db1 password=xxxxx dbname=shop"},
		{"password=secret", "password=xxxxx"},
	} {
		if got := MaskURL(tc.in); got != tc.want {
			t.Errorf("MaskURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestParseErrorsHideThePassword: a connection string that does not
// parse must not bring its password into the error, which reaches the log,
// the state file and the status files.
func TestParseErrorsHideThePassword(t *testing.T) {
	const secret = "se%&cr3t"
	for _, raw := range []string{
		"mysql://root:" + secret + "@127.0.0.1:1/db",
		"postgres://app:" + secret + "@127.0.0.1:1/db",
	} {
		_, terr := OpenTarget(context.Background(), TargetOptions{URL: raw, Mode: apply.Pipelined.String()})
		errs := []error{terr}
		for _, mode := range []string{ModeTrigger, ""} {
			_, err := OpenSource(context.Background(), SourceOptions{URL: raw, Mode: mode, Stream: "s", FromNow: true,
				Tables: []sluice.TableName{{Name: "t"}}}, sluice.Position{})
			errs = append(errs, err)
		}
		for _, err := range errs {
			if err == nil {
				t.Fatalf("%s: opened", MaskURL(raw))
			}
			for _, leak := range []string{secret, "cr3t", "%&c"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("error for %s shows the password: %v", MaskURL(raw), err)
				}
			}
		}
	}
}
