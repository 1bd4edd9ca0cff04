package connstr

import (
	"net/url"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// passwords holds every character that has broken a connection string.
var passwords = []string{
	"simple",
	"p%&ss",
	"a@b:c/d",
	"with space",
	`q'uote"s`,
	`back\slash`,
	"pässwörd✓",
	"%25%40",
	"?#=&;",
}

// forms builds each accepted form around a password, as an operator
// would write it.
func forms(pw string) map[string]string {
	enc := strings.ReplaceAll(url.QueryEscape(pw), "+", "%20")
	kvq := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
	return map[string]string{
		"pg url":       "postgres://alice:" + enc + "@db.example:5432/app?sslmode=disable",
		"pg url user":  (&url.URL{Scheme: "postgresql", User: url.UserPassword("alice", pw), Host: "db.example", Path: "/app"}).String(),
		"pg kv":        "host=db.example port=5432 user=alice password=" + kvq + " dbname=app",
		"pg kv spaces": "host = db.example password = " + kvq + " dbname=app",
		"mysql url":    "mysql://alice:" + enc + "@db.example:3306/app",
		"mysql dsn":    "alice:" + pw + "@tcp(db.example:3306)/app?parseTime=true",
	}
}

func TestMaskForms(t *testing.T) {
	for _, pw := range passwords {
		for name, s := range forms(pw) {
			t.Run(name+"/"+pw, func(t *testing.T) {
				f, err := FormOf(s)
				if err != nil {
					t.Fatalf("FormOf(%q): %v", s, err)
				}
				got, ok := Password(s)
				if !ok || got != pw {
					t.Fatalf("Password(%q) = %q, %v; want %q", s, got, ok, pw)
				}
				m := Mask(s)
				for _, leak := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
					if strings.Contains(m, leak) {
						t.Fatalf("Mask(%q) = %q holds the password", s, m)
					}
				}
				if !strings.Contains(m, Masked) || !strings.Contains(m, "db.example") {
					t.Fatalf("Mask(%q) = %q: want the host kept and the password masked", s, m)
				}
				// The drivers read the same password.
				switch f {
				case PostgresURL, PostgresKeyValue:
					c, err := pgconn.ParseConfig(s)
					if err != nil {
						t.Fatalf("pgconn.ParseConfig: %v", err)
					}
					if c.Password != pw {
						t.Fatalf("pgconn reads password %q, want %q", c.Password, pw)
					}
				case MySQLDSN:
					c, err := mysql.ParseDSN(s)
					if err != nil {
						t.Fatalf("mysql.ParseDSN: %v", err)
					}
					if c.Passwd != pw {
						t.Fatalf("go-sql-driver reads password %q, want %q", c.Passwd, pw)
					}
				}
				// WithPassword round-trips.
				w, err := WithPassword(s, "new"+pw)
				if err != nil {
					t.Fatalf("WithPassword: %v", err)
				}
				if got, _ := Password(w); got != "new"+pw {
					t.Fatalf("WithPassword(%q) = %q: password %q", s, w, got)
				}
			})
		}
	}
}

func TestMaskUnparseable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://alice:p%&ss@db.example/app", "<unparseable postgres:// connection string redacted>"},
		{"mysql://alice:50%off@db/app", "<unparseable mysql:// connection string redacted>"},
		{"redis://alice:secret@db/0", "<redis:// connection string redacted>"},
		{"host=db password='unterminated", Redacted},
		{"just some secret words", Redacted},
		{"", Redacted},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := Mask(tc.in); got != tc.want {
				t.Fatalf("Mask(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if _, err := FormOf(tc.in); err == nil {
				t.Fatalf("FormOf(%q): want an error", tc.in)
			} else if tc.in != "" && strings.Contains(err.Error(), tc.in) {
				t.Fatalf("FormOf error %q echoes the string", err)
			}
		})
	}
}

func TestFormOf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Form
	}{
		{"postgres://u@h/db", PostgresURL},
		{"POSTGRESQL://u@h/db", PostgresURL},
		{"host=h dbname=d", PostgresKeyValue},
		{"mysql://u@h/db", MySQLURL},
		{"mariadb://u@h/db", MySQLURL},
		{"u:p@tcp(h:3306)/db", MySQLDSN},
		{"u@unix(/tmp/s)/db", MySQLDSN},
		{"tcp(h)/db", MySQLDSN},
	} {
		if got, err := FormOf(tc.in); err != nil || got != tc.want {
			t.Errorf("FormOf(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestRedact(t *testing.T) {
	pw := "p@ss wörd%"
	text := "dial: postgres://a:" + url.QueryEscape(pw) + "@h failed; password " + pw + " and " + url.PathEscape(pw)
	got := Redact(text, pw)
	for _, leak := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
		if strings.Contains(got, leak) {
			t.Fatalf("Redact left %q in %q", leak, got)
		}
	}
}

func FuzzMask(f *testing.F) {
	for _, pw := range passwords {
		f.Add(pw)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		if len(pw) < 3 || strings.ContainsAny(pw, "\x00") {
			t.Skip()
		}
		for name, s := range forms(pw) {
			got, ok := Password(s)
			if !ok {
				// Not parseable (the form cannot hold it): redacted whole.
				if m := Mask(s); strings.Contains(m, pw) {
					t.Fatalf("%s: Mask(%q) = %q holds the password", name, s, m)
				}
				continue
			}
			m := Mask(s)
			skeleton := Mask(strings.ReplaceAll(s, pw, ""))
			if strings.Contains(m, got) && !strings.Contains(skeleton+" alice db.example app postgres mysql sslmode disable parseTime true tcp 5432 3306", got) {
				t.Fatalf("%s: Mask(%q) = %q holds the password %q", name, s, m, got)
			}
		}
		// Arbitrary input never panics, and a string in no form is
		// redacted whole.
		if _, err := FormOf(pw); err != nil && !strings.HasSuffix(Mask(pw), "redacted>") {
			t.Fatalf("Mask(%q) = %q: want it redacted whole", pw, Mask(pw))
		}
	})
}
