package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyCommandLine: what `sluice verify` does before it compares a
// row: the flags it needs, a config file's stream, and an unreachable
// database, each exit 2 with an error that names the fix and no password.
func TestVerifyCommandLine(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(cfg, []byte("target = \""+unreachable+"\"\n[[stream]]\nstream_id = \"orders\"\nsource = \""+unreachable+"\"\ntables = [\"public.orders\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no flags", nil, "verify needs --source and --target and --tables"},
		{"config without stream", []string{"--config", cfg}, "needs --stream ID"},
		{"config, unknown stream", []string{"--config", cfg, "--stream", "billing"}, "has no such stream (it has [orders])"},
		{"stream without config", []string{"--stream", "orders", "--source", unreachable, "--target", unreachable, "--tables", "t"}, "with --source and --target, name the stream writing the target with --stream-id"},
		{"config, unreachable source", []string{"--config", cfg, "--stream", "orders"}, "--source: connect to PostgreSQL at 127.0.0.1:1"},
		{"flags, unreachable", []string{"--source", unreachable, "--target", unreachable, "--tables", "t"}, "connect to PostgreSQL at 127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), append([]string{"sluice", "verify"}, tc.args...), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr.String(), tc.stderr)
			}
			if strings.Contains(stderr.String(), "sluice:pw@") || strings.Contains(stderr.String(), ":pw") {
				t.Fatalf("stderr shows the password: %s", stderr.String())
			}
		})
	}
}
