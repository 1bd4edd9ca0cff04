package binlog

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

// TestConnStringErrorsHidePassword: a connection string that does not
// parse gets an error that says which part failed and holds nothing of
// the password (url.Parse's own error quotes the whole URL, and a
// password with a bare % is exactly what it refuses).
func TestConnStringErrorsHidePassword(t *testing.T) {
	const secret = "s3cr%et"
	cases := []struct {
		name, conn string
		secrets    []string // what must not appear
		want       string   // what the error must say
	}{
		{"url bare percent", "mysql://app:" + secret + "@db1:3306/shop", []string{secret, "s3cr", "%et"}, "user name or password"},
		{"url bad escape at end", "mysql://app:pw%4@db1/shop", []string{"pw%4"}, "user name or password"},
		{"url slash in password", "mysql://app:pa/ss%zz@db1/shop", []string{"pa/ss", "ss%zz", "%zz"}, "user name or password"},
		{"mariadb url", "mariadb://app:" + secret + "@db1/shop", []string{secret, "%et"}, "user name or password"},
		{"url bad port", "mysql://app:" + "pa%25ss" + "@db1:33x6/shop", []string{"pa%25ss", "pa%ss"}, "host, port, database"},
		{"dsn bad escape in dbname", "app:pa/ss%zz@tcp(db1:3306)", []string{"pa/ss", "ss%zz", "%zz"}, "DSN"},
		{"dsn without @", "app:hunter2/shop", []string{"hunter2"}, "is the @ missing"},
		{"dsn unclosed address", "app:hunter2@tcp(db1:3306/shop", []string{"hunter2"}, "network address not terminated"},
		{"dsn bad param", "app:hunter2@tcp(db1:3306)/shop?parseTime=maybe", []string{"hunter2"}, "invalid bool value: maybe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseConn(c.conn)
			if err == nil {
				t.Fatalf("%s parsed", c.conn)
			}
			for _, s := range c.secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error holds %q: %v", s, err)
				}
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error lacks %q: %v", c.want, err)
			}
			t.Logf("%v", err)
		})
	}
	// Open reports the same, before it connects anywhere.
	_, err := Open(context.Background(), "mysql://app:"+secret+"@db1/shop", Config{Tables: []sluice.TableName{{Name: "a"}}}, sluice.Position{})
	if err == nil || strings.Contains(err.Error(), "s3cr") {
		t.Errorf("Open: %v", err)
	}
	// What parses keeps its password.
	for conn, want := range map[string]string{
		"mysql://app:p%25w%40d@db1:3306/shop": "p%w@d",
		"app:p@ss:w/rd@tcp(db1:3306)/shop":    "p@ss:w/rd",
	} {
		c, err := parseConn(conn)
		if err != nil || c.Passwd != want {
			t.Errorf("%s: password %q, %v; want %q", conn, c.Passwd, err, want)
		}
	}
}
