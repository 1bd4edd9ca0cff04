package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/config"
	"github.com/urfave/cli/v2"
)

// resolveWith runs the real `sync start` flags over args and returns the
// streams resolveStreams makes of them.
func resolveWith(t *testing.T, args ...string) ([]config.Stream, error) {
	t.Helper()
	var got []config.Stream
	var rerr error
	app := &cli.App{Name: "sluice", Commands: []*cli.Command{{
		Name:  "start",
		Flags: syncStartFlags(),
		Action: func(c *cli.Context) error {
			got, rerr = resolveStreams(c)
			return nil
		},
	}}}
	if err := app.RunContext(context.Background(), append([]string{"sluice", "start"}, args...)); err != nil {
		t.Fatal(err)
	}
	return got, rerr
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigPrecedence: flag > environment > the stream's key > the file's
// top level > the flag's default, for an int, a duration, a bool and a
// string, with and without a file.
func TestConfigPrecedence(t *testing.T) {
	const base = "source = \"postgres://a@h/db\"\ntarget = \"postgres://b@h/db\"\ntables = [\"t\"]\n"
	cases := []struct {
		name  string
		top   string // top-level keys
		strm  string // keys in the [[stream]]
		env   map[string]string
		flags []string
		batch int
		kill  time.Duration
		now   bool
		mode  string
	}{
		{name: "default", batch: 1000, mode: "pipelined"},
		{name: "top level beats default", top: "apply_batch_size = 500\nkill_budget = \"5s\"\nfrom_now = true\napply_mode = \"per-row\"\n",
			batch: 500, kill: 5 * time.Second, now: true, mode: "per-row"},
		{name: "stream beats top level", top: "apply_batch_size = 500\nkill_budget = \"5s\"\nfrom_now = true\n",
			strm:  "apply_batch_size = 300\nkill_budget = \"3s\"\nfrom_now = false\napply_mode = \"per-row\"\n",
			batch: 300, kill: 3 * time.Second, now: false, mode: "per-row"},
		{name: "env beats file", top: "apply_batch_size = 500\nkill_budget = \"5s\"\n", strm: "apply_batch_size = 300\napply_mode = \"per-row\"\n",
			env:   map[string]string{"SLUICE_APPLY_BATCH_SIZE": "200", "SLUICE_KILL_BUDGET": "2s", "SLUICE_FROM_NOW": "true", "SLUICE_APPLY_MODE": "pipelined"},
			batch: 200, kill: 2 * time.Second, now: true, mode: "pipelined"},
		{name: "flag beats env", strm: "apply_batch_size = 300\n",
			env:   map[string]string{"SLUICE_APPLY_BATCH_SIZE": "200", "SLUICE_KILL_BUDGET": "2s", "SLUICE_APPLY_MODE": "per-row"},
			flags: []string{"--apply-batch-size", "100", "--kill-budget", "1s", "--from-now", "--apply-mode", "pipelined"},
			batch: 100, kill: time.Second, now: true, mode: "pipelined"},
		{name: "no file: env", env: map[string]string{"SLUICE_APPLY_BATCH_SIZE": "200"}, batch: 200, mode: "pipelined"},
		{name: "no file: flag beats env", env: map[string]string{"SLUICE_APPLY_BATCH_SIZE": "200"}, flags: []string{"--apply-batch-size=100"},
			batch: 100, mode: "pipelined"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var args []string
			if strings.HasPrefix(tc.name, "no file") {
				args = append(args, "--source", "postgres://a@h/db", "--target", "postgres://b@h/db", "--tables", "t")
			} else {
				text := base + tc.top + "\n[[stream]]\nstream_id = \"s1\"\n" + tc.strm
				args = append(args, "--config", writeConfig(t, text))
			}
			got, err := resolveWith(t, append(args, tc.flags...)...)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("%d streams, want 1", len(got))
			}
			s := got[0]
			if s.ApplyBatchSize != tc.batch || s.KillBudget != tc.kill || s.FromNow != tc.now || s.ApplyMode != tc.mode {
				t.Errorf("apply_batch_size %d kill_budget %s from_now %v apply_mode %s; want %d %s %v %s",
					s.ApplyBatchSize, s.KillBudget, s.FromNow, s.ApplyMode, tc.batch, tc.kill, tc.now, tc.mode)
			}
		})
	}
}

func TestConfigSeveralStreams(t *testing.T) {
	path := writeConfig(t, `
state_dir = "/var/lib/sluice"
target = "postgres://sluice@replica/shop"
max_lanes = 4

[[stream]]
stream_id = "orders"
source = "postgres://app@db1/shop"
tables = ["public.orders", "public.order_lines"]

[[stream]]
stream_id = "billing"
source = "mysql://app@db2:3306/billing"
target = "mysql://sluice@replica2:3306/billing"
tables = ["invoices"]
max_lanes = 2
`)
	got, err := resolveWith(t, "--config", path, "--min-lanes", "2")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d streams", len(got))
	}
	o, b := got[0], got[1]
	if o.StreamID != "orders" || o.Target != "postgres://sluice@replica/shop" || o.MaxLanes != 4 || len(o.Tables) != 2 || o.StateDir != "/var/lib/sluice" {
		t.Errorf("orders: %+v", o)
	}
	if b.StreamID != "billing" || b.Target != "mysql://sluice@replica2:3306/billing" || b.MaxLanes != 2 || b.StateDir != "/var/lib/sluice" {
		t.Errorf("billing: %+v", b)
	}
	if o.MinLanes != 2 || b.MinLanes != 2 {
		t.Errorf("--min-lanes applies to every stream: %d %d", o.MinLanes, b.MinLanes)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"source = \"postgres://a@h/db\"\n\n[[stream]]\nstream_id = \"x\"\napply_batchsize = 3\n", `line 5: unknown key "stream.apply_batchsize"`},
		{"[[stream]]\nstream_id = \"orders\"\nsource = \"postgres://a@h/db\"\ntables = [\"t\"]\n", "stream orders: missing target"},
		{"target = \"postgres://b@h/db\"\ntables = [\"t\"]\n[[stream]]\nstream_id = \"a\"\nsource = \"postgres://a@h/db\"\n[[stream]]\nstream_id = \"a\"\nsource = \"postgres://a@h/db\"\n", `stream id "a" is used by streams #1 and #2`},
		{"[[stream]]\nstream_id = \"a\"\nstate_dir = \"/x\"\n", "state_dir is daemon-wide"},
		{"kill_budget = 15\n", "kill_budget"},
	} {
		_, err := resolveWith(t, "--config", writeConfig(t, tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.text, err, tc.want)
		}
	}
}

func TestConfigCheckMasks(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("s3cretFromFile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, `
target = "postgres://sluice:inlineSecret@replica/shop"
[[stream]]
stream_id = "orders"
source = "postgres://app@db1/shop"
source_password_file = "`+pwFile+`"
tables = ["orders"]
`)
	var out strings.Builder
	app := newApp()
	app.Writer = &out
	if err := app.Run([]string{"sluice", "config", "check", "--config", path}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, secret := range []string{"s3cretFromFile", "inlineSecret"} {
		if strings.Contains(s, secret) {
			t.Errorf("config check printed the password %q:\n%s", secret, s)
		}
	}
	for _, want := range []string{`source = "postgres://app:xxxxx@db1/shop"`, `apply_batch_size = 1000`, `kill_budget = "0s"  # a quarter of target_tx_timeout`, "source password from file " + pwFile} {
		if !strings.Contains(s, want) {
			t.Errorf("config check output lacks %q:\n%s", want, s)
		}
	}
}
