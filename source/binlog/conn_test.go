package binlog

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// TestConnStringErrorsHidePassword: Open reports a connection string that
// does not parse before it connects anywhere, and holds nothing of the
// password (connstr's TestParseMySQLErrorsHidePassword covers each form).
func TestConnStringErrorsHidePassword(t *testing.T) {
	const secret = "s3cr%et"
	_, err := Open(context.Background(), "mysql://app:"+secret+"@db1/shop", Config{Tables: []sluice.TableName{{Name: "a"}}}, sluice.Position{})
	if err == nil || strings.Contains(err.Error(), "s3cr") || !strings.Contains(err.Error(), "user name or password") {
		t.Errorf("Open: %v", err)
	}
}
