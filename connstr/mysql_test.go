package connstr

import (
	"strings"
	"testing"
	"time"
)

// TestParseMySQL: every MySQL form (mysql:// and mariadb:// URLs, in any
// case, and go-sql-driver DSNs) gives the same config.
func TestParseMySQL(t *testing.T) {
	cases := []struct {
		conn                 string
		user, pass, addr, db string
		timeout              time.Duration
	}{
		{"mysql://u%40x:p%3A%40w@db.example:3307/shop?timeout=5s", "u@x", "p:@w", "db.example:3307", "shop", 5 * time.Second},
		{"u@x:p:@w@tcp(db.example:3307)/shop?timeout=5s", "u@x", "p:@w", "db.example:3307", "shop", 5 * time.Second},
		{"mysql://u:p%40ss:w@db.example:3307/app?timeout=5s", "u", "p@ss:w", "db.example:3307", "app", 5 * time.Second},
		{"mariadb://u:p%40ss:w@db.example:3307/app", "u", "p@ss:w", "db.example:3307", "app", 0},
		{"MariaDB://u:pw@db.example/app", "u", "pw", "db.example:3306", "app", 0},
		{"u:p@tcp(h:3306)/app", "u", "p", "h:3306", "app", 0},
		{"mysql://u@h/app", "u", "", "h:3306", "app", 0},
		{"mysql://root@localhost/db", "root", "", "localhost:3306", "db", 0},
		{"mysql://root@[::1]/db", "root", "", "[::1]:3306", "db", 0},
		{"mysql:///db", "", "", "127.0.0.1:3306", "db", 0},
		{"mysql://u@h/my%20db%3F", "u", "", "h:3306", "my db?", 0},
		{"mysql://app:p%25w%40d@db1:3306/shop", "app", "p%w@d", "db1:3306", "shop", 0},
		{"app:p@ss:w/rd@tcp(db1:3306)/shop", "app", "p@ss:w/rd", "db1:3306", "shop", 0},
	}
	for _, c := range cases {
		t.Run(c.conn, func(t *testing.T) {
			cfg, err := ParseMySQL(c.conn)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.User != c.user || cfg.Passwd != c.pass || cfg.Addr != c.addr || cfg.DBName != c.db || cfg.Timeout != c.timeout || cfg.Net != "tcp" {
				t.Errorf("= user %q pass %q net %q addr %q db %q timeout %v; want %q %q tcp %q %q %v",
					cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName, cfg.Timeout, c.user, c.pass, c.addr, c.db, c.timeout)
			}
		})
	}
}

// TestParseMySQLErrorsHidePassword: a connection string that does not
// parse gets an error that says which part failed and holds nothing of
// the password (url.Parse's own error quotes the whole URL, and a
// password with a bare % is exactly what it refuses).
func TestParseMySQLErrorsHidePassword(t *testing.T) {
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
		{"url bad param", "mysql://app:hunter2@db1/shop?parseTime=maybe", []string{"hunter2"}, "invalid bool value: maybe"},
		{"other scheme", "postgres://app:hunter2@db1/shop", []string{"hunter2"}, "want mysql://"},
		{"dsn bad escape in dbname", "app:pa/ss%zz@tcp(db1:3306)", []string{"pa/ss", "ss%zz", "%zz"}, "DSN"},
		{"dsn without @", "app:hunter2/shop", []string{"hunter2"}, "is the @ missing"},
		{"dsn unclosed address", "app:hunter2@tcp(db1:3306/shop", []string{"hunter2"}, "network address not terminated"},
		{"dsn bad param", "app:hunter2@tcp(db1:3306)/shop?parseTime=maybe", []string{"hunter2"}, "invalid bool value: maybe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMySQL(c.conn)
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
}
