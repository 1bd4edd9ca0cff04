package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
)

// badCase is one row of the bad-input matrix (issue 13): an input a user
// gets wrong, run through the real binary, and what they must see: the
// exit code, and words naming the object, the cause and the fix. Nothing
// is written to the target, and no password is printed.
type badCase struct {
	name string
	// engine of the source, and of the target unless target is set.
	engine, target daemon.Engine
	// setup prepares the source and the target; it returns the arguments
	// after "sluice" (the state dir is appended by the runner).
	setup func(t *testing.T, c *badEnv) []string
	code  int
	want  []string // each must appear in the output, case-insensitively
}

// badEnv is a case's source and target: databases of their own with a
// table t (id, v) on both sides, and a state dir. A setup that ran sluice
// itself (a stream that stops mid-stream) leaves its exit code and output
// here and returns no arguments.
type badEnv struct {
	src, dst *endpoint
	stateDir string
	// stream names the case's stream (and so its replication slot): the
	// cases run in parallel on shared servers, where two streams named
	// "default" would take each other's slot.
	stream string
	code   int
	out    string
}

func (c *badEnv) exec(t *testing.T, e *endpoint, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if err := e.exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// withURL returns raw with f applied to its parsed form.
func withURL(t *testing.T, raw string, f func(u *url.URL)) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	f(u)
	return u.String()
}

// streamDuring runs sync start from the source's log, from now, makes the
// source run stmts once it streams, and waits for the stream to stop; its
// exit code and output are the case's (badEnv.code, out).
func streamDuring(t *testing.T, c *badEnv, stmts ...string) {
	t.Helper()
	cmd, out, rest := startStreaming(t, c)
	c.exec(t, c.src, stmts...)
	io.Copy(out, rest)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("sync start: %v, want it to stop with an error\n%s", err, out.String())
	}
	c.code, c.out = ee.ExitCode(), out.String()
}

// streamedOnce runs sync start from the source's log, from now, until it
// streams, and stops it (SIGINT): the stream has a checkpoint to resume
// from.
func streamedOnce(t *testing.T, c *badEnv) {
	t.Helper()
	cmd, out, rest := startStreaming(t, c)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	io.Copy(out, rest)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sync start did not stop cleanly: %v\n%s", err, out.String())
	}
}

// startStreaming starts sync start from the source's log, from now, and
// returns once it logged that it streams, with what it logged so far and
// the rest of its log to read.
func startStreaming(t *testing.T, c *badEnv) (*exec.Cmd, *bytes.Buffer, io.Reader) {
	t.Helper()
	if c.src.engine == daemon.EnginePostgres {
		dropSlotAtCleanup(t, c.src, c.stream, []string{"t"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, buildSluice(t), "sync", "start", "--source", c.src.url, "--target", c.dst.url, "--tables", "t",
		"--initial-copy", "off", "--from-now", "--state-dir", c.stateDir, "--log-format", "json", "--stream-id", c.stream)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), `"msg":"streaming"`) {
		n, err := stderr.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			t.Fatalf("the stream did not start: %v\n%s", err, out.String())
		}
	}
	return cmd, &out, stderr
}

func syncArgs(c *badEnv, extra ...string) []string {
	return append([]string{"sync", "start", "--source", c.src.url, "--target", c.dst.url, "--tables", "t",
		"--initial-copy", "off", "--from-now", "--source-mode", "trigger"}, extra...)
}

var badCases = []badCase{
	{
		name: "malformed target URL", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[5] = "postgres://user:secret-pw@127.0.0.1:notaport/db"
			return a
		},
		want: []string{"--target", "port is not a number", "percent-encode"},
	},
	{
		name: "wrong password on the target", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[5] = withURL(t, c.dst.url, func(u *url.URL) { u.User = url.UserPassword(u.User.Username(), "secret-pw") })
			return a
		},
		want: []string{"authentication failed", "postgres", "password"},
	},
	{
		name: "unreachable target host", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[5] = "postgres://postgres:secret-pw@127.0.0.1:1/db?sslmode=disable&connect_timeout=3"
			return a
		},
		want: []string{"cannot reach target", "127.0.0.1:1"},
	},
	{
		name: "TLS required, server without TLS", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[5] = withURL(t, c.dst.url, func(u *url.URL) { u.RawQuery = "sslmode=require" })
			return a
		},
		want: []string{"target", "does not accept TLS", "sslmode=prefer"},
	},
	{
		name: "wrong password on the MariaDB source", engine: daemon.EngineMySQL, code: daemon.ExitSource,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[3] = withURL(t, c.src.url, func(u *url.URL) { u.User = url.UserPassword(u.User.Username(), "secret-pw") })
			return a
		},
		want: []string{"source", "access denied", "password"},
	},
	{
		name: "table missing on the target", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "CREATE TABLE gone (id int PRIMARY KEY)")
			a := syncArgs(c)
			a[7] = "t,gone"
			return a
		},
		want: []string{"gone", "does not exist", "create it"},
	},
	{
		name: "table missing on the source", engine: daemon.EnginePostgres, code: daemon.ExitSource,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.dst, "CREATE TABLE nowhere (id int PRIMARY KEY)")
			a := syncArgs(c)
			a[7] = "t,nowhere"
			return a
		},
		want: []string{"nowhere", "source"},
	},
	{
		name: "column missing on the target", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "ALTER TABLE t ADD COLUMN extra text")
			return syncArgs(c)
		},
		want: []string{"extra", "target", "add"},
	},
	{
		name: "extra NOT NULL column on the target", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.dst, "ALTER TABLE t ADD COLUMN must int NOT NULL")
			return syncArgs(c)
		},
		want: []string{"must", "NOT NULL", "default"},
	},
	{
		name: "target type too narrow", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "ALTER TABLE t ADD COLUMN big bigint")
			c.exec(t, c.dst, "ALTER TABLE t ADD COLUMN big integer")
			return syncArgs(c)
		},
		want: []string{"big", "bigint", "integer"},
	},
	{
		name: "MariaDB target type too narrow", engine: daemon.EngineMySQL, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "ALTER TABLE t ADD COLUMN big bigint")
			c.exec(t, c.dst, "ALTER TABLE t ADD COLUMN big int")
			return syncArgs(c)
		},
		want: []string{"big", "bigint", "int"},
	},
	{
		name: "table without a primary key", engine: daemon.EnginePostgres, code: daemon.ExitSource,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "CREATE TABLE nokey (id int, v text)")
			c.exec(t, c.dst, "CREATE TABLE nokey (id int, v text)")
			a := syncArgs(c)
			a[7] = "t,nokey"
			return a
		},
		want: []string{"nokey", "no primary key", "add one"},
	},
	{
		name: "no table named", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[7] = ""
			return a
		},
		want: []string{"--tables"},
	},
	{
		name: "--from-now with --initial-copy on", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[9] = "on"
			return a
		},
		want: []string{"--from-now", "--initial-copy"},
	},
	{
		name: "a flag value out of range", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			return syncArgs(c, "--min-lanes", "8", "--max-lanes", "2")
		},
		want: []string{"--min-lanes", "--max-lanes"},
	},
	{
		name: "an unknown source mode", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[12] = "replication"
			return a
		},
		want: []string{"--source-mode", "replication"},
	},
	{
		name: "state dir not writable", engine: daemon.EnginePostgres, code: daemon.ExitState,
		setup: func(t *testing.T, c *badEnv) []string {
			f := filepath.Join(t.TempDir(), "a-file")
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			c.stateDir = filepath.Join(f, "state") // under a file: cannot be created, even by root
			return syncArgs(c)
		},
		want: []string{"state dir", "a-file", "--state-dir"},
	},
	{
		name: "corrupted state file", engine: daemon.EnginePostgres, code: daemon.ExitState,
		setup: func(t *testing.T, c *badEnv) []string {
			if err := os.WriteFile(filepath.Join(c.stateDir, "sluice.db"), bytes.Repeat([]byte("not a bbolt file "), 512), 0o600); err != nil {
				t.Fatal(err)
			}
			return syncArgs(c)
		},
		want: []string{"sluice.db", "damaged", "move it away"},
	},
	{
		name: "a config file with a typo", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			f := filepath.Join(t.TempDir(), "sluice.toml")
			body := fmt.Sprintf("state_dir = %q\n\n[[stream]]\nstream_id = \"s\"\nsource = %q\ntarget = %q\ntables = [\"t\"]\nsource_mode = \"trigger\"\nfrom_now = true\nmax_lanse = 4\n", c.stateDir, c.src.url, c.dst.url)
			if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"sync", "start", "--config", f}
		},
		want: []string{"max_lanse", "max_lanes"},
	},
	{
		name: "target database does not exist", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[5] = withURL(t, c.dst.url, func(u *url.URL) { u.Path = "/no_such_db" })
			return a
		},
		want: []string{"no_such_db", "does not exist", "create it"},
	},
	{
		name: "MariaDB target database does not exist", engine: daemon.EngineMySQL, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[5] = withURL(t, c.dst.url, func(u *url.URL) { u.Path = "/no_such_db" })
			return a
		},
		want: []string{"no_such_db", "does not exist", "create it"},
	},
	{
		name: "wrong password on the MariaDB target", engine: daemon.EngineMySQL, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[5] = withURL(t, c.dst.url, func(u *url.URL) { u.User = url.UserPassword(u.User.Username(), "secret-pw") })
			return a
		},
		want: []string{"target", "authentication failed", "password"},
	},
	{
		name: "unreachable MariaDB source", engine: daemon.EngineMySQL, code: daemon.ExitSource,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[3] = "mysql://root:secret-pw@127.0.0.1:1/db"
			return a
		},
		want: []string{"source", "127.0.0.1:1"},
	},
	{
		name: "unsupported scheme", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[5] = "redis://127.0.0.1:6379/0"
			return a
		},
		want: []string{"--target", "not a database sluice supports", "postgres://"},
	},
	{
		name: "binlog mode on a PostgreSQL source", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			a := syncArgs(c)
			a[12] = "binlog"
			return a
		},
		want: []string{"binlog", "PostgreSQL", "logical"},
	},
	{
		name: "MariaDB table missing on the target", engine: daemon.EngineMySQL, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "CREATE TABLE gone (id int PRIMARY KEY)")
			a := syncArgs(c)
			a[7] = "t,gone"
			return a
		},
		want: []string{"gone", "does not exist", "create it"},
	},
	{
		name: "MariaDB table without a primary key", engine: daemon.EngineMySQL, code: daemon.ExitSource,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "CREATE TABLE nokey (id int, v text)")
			c.exec(t, c.dst, "CREATE TABLE nokey (id int, v text)")
			a := syncArgs(c)
			a[7] = "t,nokey"
			return a
		},
		want: []string{"nokey", "primary key"},
	},
	{
		name: "an unknown flag", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			return syncArgs(c, "--max-lane", "4")
		},
		want: []string{"max-lane"},
	},
	{
		name: "a password file that does not exist", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			return syncArgs(c, "--target-password-file", "/nonexistent/target.password")
		},
		want: []string{"/nonexistent/target.password", "target_password_file", "no such file"},
	},
	{
		name: "a config stream without a target", engine: daemon.EnginePostgres, code: daemon.ExitUsage,
		setup: func(t *testing.T, c *badEnv) []string {
			f := filepath.Join(t.TempDir(), "sluice.toml")
			body := fmt.Sprintf("state_dir = %q\n\n[[stream]]\nstream_id = \"s\"\nsource = %q\ntables = [\"t\"]\n", c.stateDir, c.src.url)
			if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"sync", "start", "--config", f}
		},
		want: []string{"stream", "target"},
	},
	{
		name: "no REPLICATION privilege for logical replication", engine: daemon.EnginePostgres, code: daemon.ExitSource,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'norepl') THEN CREATE ROLE norepl LOGIN PASSWORD 'norepl-pw'; END IF; END $$",
				"GRANT ALL ON TABLE t TO norepl")
			a := syncArgs(c)
			a[3] = withURL(t, c.src.url, func(u *url.URL) { u.User = url.UserPassword("norepl", "norepl-pw") })
			a[12] = "logical"
			return a
		},
		want: []string{"norepl", "REPLICATION"},
	},
	{
		name: "a target user without INSERT", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.dst, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'readonly') THEN CREATE ROLE readonly LOGIN PASSWORD 'readonly-pw'; END IF; END $$",
				"GRANT SELECT ON TABLE t TO readonly", "GRANT CREATE, USAGE ON SCHEMA public TO readonly", "GRANT CREATE ON DATABASE "+pgDBName(t, c.dst)+" TO readonly")
			a := syncArgs(c)
			a[5] = withURL(t, c.dst.url, func(u *url.URL) { u.User = url.UserPassword("readonly", "readonly-pw") })
			a[9] = "on"
			return append(a[:10], a[11:]...) // without --from-now: the copy writes
		},
		want: []string{"permission denied for table t", "GRANT SELECT, INSERT, UPDATE, DELETE"},
	},
	{
		name: "a type with no exact equivalent on the target", engine: daemon.EnginePostgres, target: daemon.EngineMySQL, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "CREATE TABLE ledger (id int PRIMARY KEY, amount numeric)")
			return []string{"sync", "start", "--source", c.src.url, "--target", c.dst.url, "--tables", "ledger"}
		},
		want: []string{"column public.ledger.amount", "numeric without precision", "declare the source column numeric(p,s)", "longtext", "sluice schema plan"},
	},
	{
		name: "a column renamed on the source while it streams", engine: daemon.EngineMySQL, code: daemon.ExitFailure,
		setup: func(t *testing.T, c *badEnv) []string {
			streamDuring(t, c, "ALTER TABLE t RENAME COLUMN v TO w", "INSERT INTO t (id, w) VALUES (5, 'after')")
			return nil
		},
		want: []string{".t changed at", "column v was renamed to w", "ALTER TABLE `t` RENAME COLUMN `v` TO `w`", "start sluice again"},
	},
	{
		name: "a column renamed on the source while sluice was stopped", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "ALTER TABLE t ADD COLUMN x int")
			c.exec(t, c.dst, "ALTER TABLE t ADD COLUMN x int")
			streamedOnce(t, c)
			c.exec(t, c.src, "ALTER TABLE t RENAME COLUMN x TO y")
			return []string{"sync", "start", "--source", c.src.url, "--target", c.dst.url, "--tables", "t", "--initial-copy", "off"}
		},
		want: []string{"public.t", "column y is on the source but not on the target", "RENAME COLUMN x TO y"},
	},
	{
		name: "a type narrowed on the source while it streams", engine: daemon.EnginePostgres, code: daemon.ExitFailure,
		setup: func(t *testing.T, c *badEnv) []string {
			streamDuring(t, c, "ALTER TABLE t ALTER COLUMN v TYPE varchar(10)", "INSERT INTO t (id, v) VALUES (5, 'after')")
			return nil
		},
		want: []string{"public.t changed at", "column v's type narrowed from character varying(40) to character varying(10)", "TYPE character varying(10)", "keeps the wider type"},
	},
	{
		// InnoDB logs no row its foreign-key actions change: sluice carries
		// them out, but the parent's deletes would never reach it.
		name: "a MariaDB table whose foreign key cascades from a table not streamed", engine: daemon.EngineMySQL, code: daemon.ExitSource,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "CREATE TABLE parent (id int PRIMARY KEY)",
				"ALTER TABLE t ADD COLUMN parent_id int, ADD CONSTRAINT t_parent_fk FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE")
			c.exec(t, c.dst, "ALTER TABLE t ADD COLUMN parent_id int")
			return syncArgs(c)
		},
		want: []string{"t_parent_fk", "ON DELETE CASCADE", "parent", "add", "to the stream's tables"},
	},
	{
		// The target's own action would run a second time.
		name: "a target foreign key with an action, and a user who may not set session_replication_role", engine: daemon.EnginePostgres, code: daemon.ExitTarget,
		setup: func(t *testing.T, c *badEnv) []string {
			c.exec(t, c.src, "CREATE TABLE p (id int PRIMARY KEY)", "ALTER TABLE t ADD COLUMN p_id int REFERENCES p ON DELETE CASCADE")
			c.exec(t, c.dst, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'noreplica') THEN CREATE ROLE noreplica LOGIN PASSWORD 'noreplica-pw'; END IF; END $$",
				"CREATE TABLE p (id int PRIMARY KEY)", "ALTER TABLE t ADD COLUMN p_id int CONSTRAINT t_p_fk REFERENCES p ON DELETE CASCADE",
				"GRANT SELECT, INSERT, UPDATE, DELETE ON t, p TO noreplica", "GRANT CREATE, USAGE ON SCHEMA public TO noreplica", "GRANT CREATE ON DATABASE "+pgDBName(t, c.dst)+" TO noreplica")
			a := syncArgs(c)
			a[5] = withURL(t, c.dst.url, func(u *url.URL) { u.User = url.UserPassword("noreplica", "noreplica-pw") })
			a[7] = "t,p"
			return a
		},
		want: []string{"t_p_fk", "ON DELETE CASCADE", "session_replication_role", "GRANT SET ON PARAMETER session_replication_role", "drop the action"},
	},
	{
		name: "a second sluice on the same state dir", engine: daemon.EnginePostgres, code: daemon.ExitState,
		setup: func(t *testing.T, c *badEnv) []string {
			// The first streams another table, so that t stays empty.
			c.exec(t, c.src, "CREATE TABLE u (id int PRIMARY KEY)")
			c.exec(t, c.dst, "CREATE TABLE u (id int PRIMARY KEY)")
			a := syncArgs(c, "--state-dir", c.stateDir)
			a[7] = "u"
			first := startSluice(t, buildSluice(t), a...)
			waitStatus(t, first, c.stateDir, 60*time.Second, "the first sluice running", func(s daemon.Status) bool { return s.Running })
			return syncArgs(c)
		},
		want: []string{"in use by another sluice", "pid", "--state-dir"},
	},
}

// TestBadInputMatrix runs every bad-input case through the real binary.
func TestBadInputMatrix(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	bin := buildSluice(t)
	for _, bc := range badCases {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			target := bc.target
			if target == "" {
				target = bc.engine
			}
			c := &badEnv{src: newEndpoint(t, bc.engine), dst: newEndpoint(t, target), stateDir: t.TempDir(), stream: fmt.Sprintf("bad%08x", crc32.ChecksumIEEE([]byte(t.Name())))}
			for _, e := range []*endpoint{c.src, c.dst} {
				if err := e.exec(ctx, "CREATE TABLE t (id int PRIMARY KEY, v varchar(40))"); err != nil {
					t.Fatal(err)
				}
			}
			args := bc.setup(t, c)
			if len(args) > 0 && args[0] == "sync" && !strings.Contains(strings.Join(args, " "), "--config") {
				args = append(args, "--state-dir", c.stateDir)
				if args[1] == "start" && !slices.Contains(args, "--stream-id") {
					args = append(args, "--stream-id", c.stream)
					dropSlotAtCleanup(t, c.src, c.stream, []string{"t"})
				}
			}
			if len(args) > 0 {
				if err := c.src.exec(ctx, "INSERT INTO t (id, v) VALUES (1, 'one')"); err != nil {
					t.Fatal(err)
				}
			}
			runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			code, text := c.code, c.out
			if len(args) > 0 {
				cmd := exec.CommandContext(runCtx, bin, args...)
				out, err := cmd.CombinedOutput()
				text = string(out)
				var ee *exec.ExitError
				code = 0
				switch {
				case errors.As(err, &ee):
					code = ee.ExitCode()
				case err != nil:
					t.Fatalf("run sluice: %v", err)
				}
			}
			t.Logf("exit %d:\n%s", code, text)
			if runCtx.Err() != nil {
				t.Fatalf("sluice ran for 60 s instead of failing")
			}
			if code != bc.code {
				t.Errorf("exit code %d, want %d", code, bc.code)
			}
			for _, w := range bc.want {
				if !strings.Contains(strings.ToLower(text), strings.ToLower(w)) {
					t.Errorf("the output does not say %q", w)
				}
			}
			for _, secret := range []string{"secret-pw", passwordOf(c.src.url), passwordOf(c.dst.url)} {
				if secret != "" && strings.Contains(text, secret) {
					t.Errorf("the output prints a password (%q)", secret)
				}
			}
			var n int
			row := c.dst.my.QueryRowContext
			if c.dst.pg != nil {
				if err := c.dst.pg.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
					t.Fatal(err)
				}
			} else if err := row(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("the target's table t holds %d rows: something was applied", n)
			}
		})
	}
}

// pgDBName is a PostgreSQL endpoint's database, quoted.
func pgDBName(t *testing.T, e *endpoint) string {
	t.Helper()
	var db string
	if err := e.pg.QueryRow(context.Background(), "SELECT quote_ident(current_database())").Scan(&db); err != nil {
		t.Fatal(err)
	}
	return db
}

// passwordOf is the password in a URL, or "".
func passwordOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

// TestREADMEBadInputMatrix holds the bad-input table of docs/operating.md
// (the manual the README links to) to the cases: every case is a row.
func TestREADMEBadInputMatrix(t *testing.T) {
	b, err := os.ReadFile("../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([^|]+?) \|`).FindAllStringSubmatch(string(b), -1) {
		rows[strings.TrimSpace(m[1])] = true
	}
	for _, bc := range badCases {
		if !rows[bc.name] {
			t.Errorf("docs/operating.md's bad-input table has no row %q", bc.name)
		}
	}
}
