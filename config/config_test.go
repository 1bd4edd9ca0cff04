package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Stream's fields follow Settings' one for one (Resolve relies on it).
func TestStreamMatchesSettings(t *testing.T) {
	st, ss := reflect.TypeFor[Stream](), reflect.TypeFor[Settings]()
	if st.NumField() != ss.NumField() {
		t.Fatalf("Stream has %d fields, Settings %d", st.NumField(), ss.NumField())
	}
	for i := range st.NumField() {
		if st.Field(i).Name != ss.Field(i).Name {
			t.Errorf("field %d: Stream.%s, Settings.%s", i, st.Field(i).Name, ss.Field(i).Name)
		}
	}
}

func TestWithPassword(t *testing.T) {
	for _, tc := range []struct{ in, pw, want string }{
		{"postgres://app@db1:5432/shop?sslmode=disable", "p@ss/w:rd", "postgres://app:p%40ss%2Fw%3Ard@db1:5432/shop?sslmode=disable"},
		{"postgres://app:old@db1/shop", "new", "postgres://app:new@db1/shop"},
		{"mysql://root@127.0.0.1:3306/db", "pw", "mysql://root:pw@127.0.0.1:3306/db"},
		{"root@tcp(127.0.0.1:3306)/db", "pw", "root:pw@tcp(127.0.0.1:3306)/db"},
		{"root:old@tcp(127.0.0.1:3306)/db?parseTime=true", "n@w", "root:n@w@tcp(127.0.0.1:3306)/db?parseTime=true"},
	} {
		got, err := WithPassword(tc.in, tc.pw)
		if err != nil || got != tc.want {
			t.Errorf("WithPassword(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("eu-orders.v2", "source"); got != "SLUICE_EU_ORDERS_V2_SOURCE_PASSWORD" {
		t.Error(got)
	}
}

// TestSecretsOrder: password file > per-stream variable > variable >
// systemd credential for the stream > shared systemd credential.
func TestSecretsOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := write("pwfile", "fromfile\n")
	creds := filepath.Join(dir, "creds")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	write("creds/target-password", "credshared")
	write("creds/orders.target-password", "credstream")
	env := map[string]string{}
	Getenv = func(k string) string { return env[k] }
	defer func() { Getenv = os.Getenv }()

	check := func(s Stream, wantSrc, wantTgt string) {
		t.Helper()
		if _, _, err := s.ApplySecrets(); err != nil {
			t.Fatal(err)
		}
		if s.Source != wantSrc || s.Target != wantTgt {
			t.Errorf("source %s target %s; want %s %s", s.Source, s.Target, wantSrc, wantTgt)
		}
	}
	base := Stream{StreamID: "orders", Source: "postgres://a@h/db", Target: "b@tcp(h:3306)/db"}
	check(base, "postgres://a@h/db", "b@tcp(h:3306)/db")
	env["CREDENTIALS_DIRECTORY"] = creds
	check(base, "postgres://a@h/db", "b:credstream@tcp(h:3306)/db")
	other := base
	other.StreamID = "billing"
	check(other, "postgres://a@h/db", "b:credshared@tcp(h:3306)/db")
	env["SLUICE_TARGET_PASSWORD"] = "envshared"
	env["SLUICE_SOURCE_PASSWORD"] = "srcenv"
	check(base, "postgres://a:srcenv@h/db", "b:envshared@tcp(h:3306)/db")
	env["SLUICE_ORDERS_TARGET_PASSWORD"] = "envstream"
	check(base, "postgres://a:srcenv@h/db", "b:envstream@tcp(h:3306)/db")
	check(other, "postgres://a:srcenv@h/db", "b:envshared@tcp(h:3306)/db")
	withFile := base
	withFile.TargetPasswordFile = file
	check(withFile, "postgres://a:srcenv@h/db", "b:fromfile@tcp(h:3306)/db")

	withFile.TargetPasswordFile = filepath.Join(dir, "missing")
	if _, _, err := withFile.ApplySecrets(); err == nil || !strings.Contains(err.Error(), "target_password_file") {
		t.Errorf("missing password file: %v", err)
	}
}

func TestParseUnknownKeyLine(t *testing.T) {
	_, err := Parse("f.toml", "# comment\nstate_dir = \"/x\"\ntabels = [\"t\"]\n")
	if err == nil || !strings.Contains(err.Error(), `line 3: unknown key "tabels"`) {
		t.Errorf("err %v", err)
	}
}
