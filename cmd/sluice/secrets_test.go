package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/urfave/cli/v2"
)

// secretPasswords hold every character that a connection string escapes,
// quotes or splits on, and non-ASCII.
var secretPasswords = []string{
	"pc%Secret&1",
	"at@col:sl/Secret2",
	"sp ace Secret3",
	`qu'ote"Secret4\x`,
	"pässwörd✓Secret5",
	"?#=&;Secret6",
}

// secretForms writes one password into each connection string form sluice
// accepts, each pointing at a port where nothing listens.
var secretForms = []struct {
	name  string
	write func(pw string) string
}{
	{"postgres URL", func(pw string) string {
		return "postgres://" + url.UserPassword("app", pw).String() + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"
	}},
	{"postgres key=value", func(pw string) string {
		q := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
		return "host=127.0.0.1 port=1 user=app password='" + q + "' dbname=db sslmode=disable connect_timeout=2"
	}},
	{"mysql URL", func(pw string) string {
		return "mysql://" + url.UserPassword("app", pw).String() + "@127.0.0.1:1/db"
	}},
	{"mysql DSN", func(pw string) string { return "app:" + pw + "@tcp(127.0.0.1:1)/db?timeout=2s" }},
	// Not a valid URL: the password is not percent-encoded. It must be
	// refused without being echoed.
	{"postgres URL unencoded", func(pw string) string { return "postgres://app:" + pw + "@127.0.0.1:1/db" }},
}

// TestSecretsNeverLeave runs the built binary with passwords in every
// connection string form, through every command that takes one, and greps
// everything sluice wrote (stdout, stderr, the status files and the state
// file) for the password, raw or in any encoding.
func TestSecretsNeverLeave(t *testing.T) {
	bin := buildSluice(t)
	for _, form := range secretForms {
		for i, pw := range secretPasswords {
			t.Run(fmt.Sprintf("%s/%d", form.name, i), func(t *testing.T) {
				conn := form.write(pw)
				dir := t.TempDir()
				state := filepath.Join(dir, "state")
				cfg := filepath.Join(dir, "sluice.toml")
				toml := fmt.Sprintf("source = %q\ntarget = %q\ntables = [\"t\"]\nfrom_now = true\n", conn, conn)
				if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				runs := [][]string{
					{"sync", "start", "--state-dir", state, "--source", conn, "--target", conn, "--tables", "t", "--from-now"},
					{"sync", "start", "--state-dir", state, "--config", cfg},
					{"sync", "status", "--state-dir", state},
					{"sync", "status", "--state-dir", state, "--json"},
					{"config", "check", "--config", cfg},
					{"preflight", "--state-dir", state, "--config", cfg},
					{"source", "install", "--source", conn, "--tables", "t", "--source-mode", "trigger"},
				}
				for _, args := range runs {
					ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
					cmd := exec.CommandContext(ctx, bin, args...)
					cmd.Env = append(os.Environ(), "SLUICE_LOG_FORMAT=json", "SLUICE_LOG_LEVEL=debug")
					var o bytes.Buffer
					cmd.Stdout, cmd.Stderr = &o, &o
					_ = cmd.Run() // every run fails: nothing listens; only the output matters
					cancel()
					fmt.Fprintf(&out, "$ sluice %s\n%s\n", strings.Join(args[:2], " "), o.Bytes())
				}
				_ = filepath.Walk(state, func(path string, info os.FileInfo, err error) error {
					if err != nil || info.IsDir() {
						return nil
					}
					b, err := os.ReadFile(path)
					if err != nil {
						t.Errorf("read %s: %v", path, err)
						return nil
					}
					fmt.Fprintf(&out, "== %s\n%s\n", path, b)
					return nil
				})
				for _, leak := range encodings(pw) {
					if i := bytes.Index(out.Bytes(), []byte(leak)); i >= 0 {
						lo, hi := max(0, i-200), min(out.Len(), i+len(leak)+50)
						t.Fatalf("password %q printed as %q:\n…%s…", pw, leak, out.Bytes()[lo:hi])
					}
				}
			})
		}
	}
}

// encodings are the ways a password could show up in output: raw, percent
// encoded, quoted for key=value, escaped in JSON.
func encodings(pw string) []string {
	quoted := fmt.Sprintf("%q", pw)
	j, _ := json.Marshal(pw)
	return []string{
		string(j[1 : len(j)-1]),
		pw,
		url.QueryEscape(pw),
		url.PathEscape(pw),
		url.UserPassword("", pw).String()[1:],
		strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw),
		quoted[1 : len(quoted)-1],
	}
}

// TestKeyValueConnects starts a preflight of a PostgreSQL → PostgreSQL
// stream whose connection strings are in libpq's key=value form: the form
// is accepted and connects, on both sides.
func TestKeyValueConnects(t *testing.T) {
	if os.Getenv("SLUICE_TEST_SKIP_DB") == "1" {
		t.Skip("needs the test databases")
	}
	bin := buildSluice(t)
	pg := dbtest.PG(t)
	db := dbtest.PGEngine.Database(t, "CREATE TABLE kv (id int PRIMARY KEY, v text)").Name
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	q := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pg.Password)
	kv := fmt.Sprintf("host=%s port=%d user=%s password='%s' dbname=%s sslmode=disable", pg.Host, pg.Port, pg.User, q, db)
	cmd := exec.CommandContext(ctx, bin, "preflight", "--state-dir", t.TempDir(), "--source", kv, "--target", kv, "--tables", "kv", "--from-now", "--source-mode", "logical")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("preflight with key=value connection strings: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "kv") || bytes.Contains(out, []byte(pg.Password)) {
		t.Errorf("preflight output should name table kv and never the password:\n%s", out)
	}
}

// TestPanicRedacted: a panic whose value quotes a connection string exits
// 70 and prints the value with the password masked.
func TestPanicRedacted(t *testing.T) {
	const pw = "pan!c Secret@7"
	conn := "postgres://" + url.UserPassword("app", pw).String() + "@db:5432/x"
	app := newApp()
	app.Commands = append(app.Commands, &cli.Command{
		Name:   "boom",
		Flags:  []cli.Flag{&cli.StringFlag{Name: "target"}},
		Action: func(*cli.Context) error { panic(fmt.Sprintf("cannot use %s: password=%s", conn, pw)) },
	})
	var stdout, stderr bytes.Buffer
	code := runApp(context.Background(), app, []string{"sluice", "boom", "--target", conn}, &stdout, &stderr)
	if code != 70 {
		t.Fatalf("exit %d, want 70; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "internal error") {
		t.Errorf("stderr does not say internal error:\n%s", stderr.String())
	}
	for _, leak := range encodings(pw) {
		if strings.Contains(stderr.String(), leak) {
			t.Fatalf("panic output holds the password as %q:\n%s", leak, stderr.String())
		}
	}
}
