package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestTransientOf(t *testing.T) {
	refused := fmt.Errorf("connect: %w", &pgconn.ConnectError{})
	tests := []struct {
		name  string
		err   error
		ran   bool
		cause string // "": not transient
		side  string
	}{
		{"postgres starting up", Fail(ExitTarget, &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}), false, causeStarting, "target"},
		{"postgres admin shutdown", &pgconn.PgError{Code: "57P01"}, true, causeStarting, "source or target"},
		{"postgres read-only target", &sluice.TableError{Err: &pgconn.PgError{Code: "25006"}}, false, causeReadOnly, "target"},
		{"postgres read-only source", &sourceError{&pgconn.PgError{Code: "25006"}}, true, causeReadOnly, "source"},
		{"postgres wrong password", Fail(ExitTarget, &pgconn.PgError{Code: "28P01"}), true, "", ""},
		{"postgres missing table", &pgconn.PgError{Code: "42P01"}, true, "", ""},
		{"postgres connection exception after a run", &pgconn.PgError{Code: "08006"}, true, causeLost, "source or target"},
		{"postgres connection exception at the first start", &pgconn.PgError{Code: "08006"}, false, "", ""},
		{"mariadb read_only", Fail(ExitTarget, &mysql.MySQLError{Number: 1290, Message: "The MariaDB server is running with the --read-only option so it cannot execute this statement"}), false, causeReadOnly, "target"},
		{"mariadb 1290 not read-only", &mysql.MySQLError{Number: 1290, Message: "The MariaDB server is running with the --skip-grant-tables option"}, true, "", ""},
		{"mariadb shutdown", &mysql.MySQLError{Number: 1053}, false, causeStarting, "source or target"},
		{"mariadb access denied", &mysql.MySQLError{Number: 1045}, true, "", ""},
		{"source connection lost after a run", &sourceError{fmt.Errorf("read changelog: %w", mysql.ErrInvalidConn)}, true, causeLost, "source"},
		{"connection refused after a run", Fail(ExitTarget, refused), true, causeLost, "target"},
		{"connection refused at the first start", Fail(ExitTarget, refused), false, "", ""},
		{"postgres session terminated under a starting stream", Fail(ExitTarget, fmt.Errorf("create checkpoint table: %w", pgconn.ErrConnClosed)), true, causeLost, "target"},
		{"reset after a run", fmt.Errorf("x: %w", syscall.ECONNRESET), true, causeLost, "source or target"},
		{"batch committed before its retry", fmt.Errorf("apply batch: stream %q: %w", "s", apply.ErrCommittedBefore), true, causeLost, "target"},
		{"cancelled", context.Canceled, true, "", ""},
		{"other", errors.New("duplicate key"), true, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := transientOf(tc.err, tc.ran)
			if ok != (tc.cause != "") || f.cause != tc.cause || (ok && f.side != tc.side) {
				t.Errorf("transientOf(%v, ran %v) = %+v, %v; want cause %q side %q", tc.err, tc.ran, f, ok, tc.cause, tc.side)
			}
		})
	}
}

// TestTransientReadOnlyTarget starts a lone stream on a target that
// refuses writes (default_transaction_read_only): the stream must wait for
// it, warning each time and naming the target and the cause, and apply once
// the target accepts writes again; kept read-only past
// TransientRetryFor, it must stop with an error that says so.
func TestTransientReadOnlyTarget(t *testing.T) {
	pg := dbtest.PG(t)
	ctx := context.Background()
	srcDB, dstDB := dbtest.PGDatabase(t), dbtest.PGDatabase(t)
	src, err := pgx.Connect(ctx, pg.URL(srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	dst, err := pgx.Connect(ctx, pg.URL(dstDB))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close(ctx)
	for _, c := range []*pgx.Conn{src, dst} {
		if _, err := c.Exec(ctx, "CREATE TABLE items (id int PRIMARY KEY, v text NOT NULL)"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.Exec(ctx, "INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 200) g"); err != nil {
		t.Fatal(err)
	}
	setReadOnly := func(on bool) {
		t.Helper()
		q := "ALTER DATABASE " + pgx.Identifier{dstDB}.Sanitize() + " RESET default_transaction_read_only"
		if on {
			q = "ALTER DATABASE " + pgx.Identifier{dstDB}.Sanitize() + " SET default_transaction_read_only = on"
		}
		if _, err := dst.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	setReadOnly(true)
	defer setReadOnly(false)

	run := func(t *testing.T, retryFor time.Duration) (*dbtest.LogBuffer, chan error, context.CancelFunc) {
		var log dbtest.LogBuffer
		tables, err := endpoint.ParseTables([]string{"public.items"})
		if err != nil {
			t.Fatal(err)
		}
		o := StreamOptions{
			ID: "transient", SourceURL: pg.URL(srcDB), TargetURL: pg.URL(dstDB), Tables: tables,
			StateDir: t.TempDir(), SourceMode: ModeTrigger, PollInterval: 50 * time.Millisecond,
			KillBudget: 5 * time.Second, TransientRetryFor: retryFor,
			Logger: slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- RunStream(rctx, o) }()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		return &log, done, cancel
	}

	t.Run("waits for the target", func(t *testing.T) {
		log, done, cancel := run(t, time.Minute)
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(log.String(), `"cause":"read-only"`) {
			select {
			case err := <-done:
				done <- err
				t.Fatalf("the stream stopped instead of waiting for the read-only target: %v\nlog:\n%s", err, log)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no warning about the read-only target within 30 s; log:\n%s", log)
			}
			time.Sleep(50 * time.Millisecond) // polling interval
		}
		if !strings.Contains(log.String(), `"endpoint":"postgres://`) || !strings.Contains(log.String(), dstDB) {
			t.Errorf("the warning does not name the target %s:\n%s", dstDB, log)
		}
		setReadOnly(false)
		deadline = time.Now().Add(60 * time.Second)
		for {
			diffs, err := dbtest.CompareTables(ctx, dbtest.DB{PG: src}, dbtest.DB{PG: dst}, "items")
			if err == nil && diffs.Equal() {
				break
			}
			select {
			case err := <-done:
				done <- err
				t.Fatalf("the stream stopped: %v\nlog:\n%s", err, log)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the target did not get the source's rows within 60 s of accepting writes (compare: %v, %v); log:\n%s", err, diffs, log)
			}
			time.Sleep(100 * time.Millisecond) // polling interval, not a wait for replication
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the stream's stop: %v", err)
		}
		done <- nil
	})

	t.Run("gives up after TransientRetryFor", func(t *testing.T) {
		setReadOnly(true)
		log, done, _ := run(t, 3*time.Second)
		select {
		case err := <-done:
			done <- err
			if err == nil || !strings.Contains(err.Error(), "stayed read-only") || !strings.Contains(err.Error(), "--transient-retry-for") {
				t.Fatalf("want an error saying the target stayed read-only past --transient-retry-for, got %v", err)
			}
			if code := ExitCode(err); code != ExitTarget {
				t.Errorf("exit code %d, want %d (target)", code, ExitTarget)
			}
			if n := strings.Count(log.String(), `"cause":"read-only"`); n < 2 {
				t.Errorf("%d warnings before it gave up, want at least 2; log:\n%s", n, log)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the stream did not give up within 60 s; log:\n%s", log)
		}
	})
}
