package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/daemon"
)

// catalog is what a preflight must leave as it found it on one endpoint:
// PostgreSQL's slots (of the stream), publications, namespaces, relations,
// triggers and functions outside the system schemas; MariaDB's tables and
// triggers of the database.
func catalog(t *testing.T, e *endpoint, stream string) string {
	t.Helper()
	ctx := context.Background()
	var qs []string
	if e.pg != nil {
		qs = []string{
			fmt.Sprintf(`SELECT coalesce(string_agg(slot_name || ':' || coalesce(confirmed_flush_lsn::text, ''), ',' ORDER BY slot_name), '') FROM pg_replication_slots WHERE slot_name LIKE '%%%s%%'`, stream),
			`SELECT coalesce(string_agg(pubname, ',' ORDER BY pubname), '') FROM pg_publication`,
			`SELECT coalesce(string_agg(nspname, ',' ORDER BY nspname), '') FROM pg_namespace`,
			`SELECT coalesce(string_agg(n.nspname || '.' || c.relname, ',' ORDER BY n.nspname, c.relname), '') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'`,
			`SELECT coalesce(string_agg(tgrelid::regclass::text || '.' || tgname, ',' ORDER BY 1), '') FROM pg_trigger WHERE NOT tgisinternal`,
			`SELECT coalesce(string_agg(n.nspname || '.' || p.proname, ',' ORDER BY 1), '') FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
				WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')`,
		}
	} else {
		qs = []string{
			`SELECT coalesce(group_concat(TABLE_NAME ORDER BY TABLE_NAME), '') FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`,
			`SELECT coalesce(group_concat(CONCAT(EVENT_OBJECT_TABLE, '.', TRIGGER_NAME) ORDER BY TRIGGER_NAME), '') FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()`,
		}
	}
	var out []string
	for _, q := range qs {
		var s string
		var err error
		if e.pg != nil {
			err = e.pg.QueryRow(ctx, q).Scan(&s)
		} else {
			err = e.my.QueryRowContext(ctx, q).Scan(&s)
		}
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

// runPreflight runs the sluice binary and returns its output and exit code.
func runPreflight(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(buildSluice(t), args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("run sluice %v: %v\n%s", args, err, out)
	return "", 0
}

func TestPreflightChangesNothing(t *testing.T) {
	pg, my := daemon.EnginePostgres, daemon.EngineMySQL
	for _, tc := range []struct {
		name     string
		src, dst daemon.Engine
		mode     string
	}{
		{"logical", pg, pg, "logical"},
		{"pgtrigger-to-mariadb", pg, my, "trigger"},
		{"binlog", my, my, "binlog"},
		{"mytrigger", my, my, "trigger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := newEndpoint(t, tc.src), newEndpoint(t, tc.dst)
			ctx := context.Background()
			for _, e := range []*endpoint{src, dst} {
				for _, q := range []string{
					`CREATE TABLE pf_orders (id bigint PRIMARY KEY, note varchar(20))`,
					`CREATE TABLE pf_items (id bigint PRIMARY KEY, qty int NOT NULL)`,
					`CREATE TABLE pf_nokey (id bigint, note varchar(20))`,
				} {
					if err := e.exec(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			}
			if err := src.exec(ctx, `CREATE TABLE pf_srconly (id bigint PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			stream := "pf" + strings.ReplaceAll(tc.name, "-", "")
			stateDir := t.TempDir()
			beforeSrc, beforeDst := catalog(t, src, stream), catalog(t, dst, stream)
			args := func(cmd []string, tables string) []string {
				return append(cmd, "--source", src.url, "--target", dst.url, "--tables", tables,
					"--source-mode", tc.mode, "--stream-id", stream, "--state-dir", stateDir, "--from-now")
			}
			unchanged := func(step string) {
				t.Helper()
				if got := catalog(t, src, stream); got != beforeSrc {
					t.Errorf("%s changed the source's catalog:\nbefore:\n%s\nafter:\n%s", step, beforeSrc, got)
				}
				if got := catalog(t, dst, stream); got != beforeDst {
					t.Errorf("%s changed the target's catalog:\nbefore:\n%s\nafter:\n%s", step, beforeDst, got)
				}
				if ents, err := os.ReadDir(stateDir); err != nil || len(ents) != 0 {
					t.Errorf("%s wrote into the state directory: %v %v", step, ents, err)
				}
			}

			out, code := runPreflight(t, args([]string{"preflight"}, "pf_orders,pf_items")...)
			if code != 0 {
				t.Errorf("preflight exited %d, want 0:\n%s", code, out)
			}
			for _, want := range []string{"pf_orders", "pf_items", "✓", "would start"} {
				if !strings.Contains(out, want) {
					t.Errorf("preflight report does not name %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "✗") {
				t.Errorf("preflight report has a failed check:\n%s", out)
			}
			unchanged("preflight")

			out, code = runPreflight(t, args([]string{"sync", "start", "--check", "--json"}, "pf_orders,pf_items")...)
			var reports []struct {
				OK     bool `json:"ok"`
				Checks []struct {
					OK     bool   `json:"ok"`
					Object string `json:"object"`
				} `json:"checks"`
			}
			if err := json.Unmarshal([]byte(out), &reports); err != nil || code != 0 || len(reports) != 1 || !reports[0].OK {
				t.Errorf("sync start --check --json: exit %d, %v:\n%s", code, err, out)
			}
			unchanged("sync start --check")

			for _, bad := range []struct {
				tables, names string
				code          int
			}{
				{"pf_orders,pf_nokey", "pf_nokey", 3},
				{"pf_orders,pf_srconly", "pf_srconly", 4},
			} {
				out, code := runPreflight(t, args([]string{"preflight"}, bad.tables)...)
				if code != bad.code {
					t.Errorf("preflight of %s exited %d, want %d:\n%s", bad.tables, code, bad.code, out)
				}
				if !strings.Contains(out, "✗") || !strings.Contains(out, bad.names) || !strings.Contains(out, "would refuse") {
					t.Errorf("preflight of %s does not fail naming %s:\n%s", bad.tables, bad.names, out)
				}
				unchanged("failing preflight of " + bad.tables)
			}
		})
	}
}
