package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/txkiller"
)

// TestMariaDBKilledTransactionsAreRetried: a MariaDB target behind a
// Vitess-style transaction killer (1 s), with rows slow enough to write
// that the first batches overrun it. Killed batches are rolled back and
// retried smaller; the target converges, nothing lost or doubled.
func TestMariaDBKilledTransactionsAreRetried(t *testing.T) {
	t.Parallel() // the killer sees only its target database; the rows are slowed by SLEEP, not CPU
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, daemon.EngineMySQL)
	for _, e := range []*endpoint{src, dst} {
		if err := e.createSchema(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// 2 ms per row on the target only.
	if err := dst.exec(ctx, `CREATE TRIGGER slow_row BEFORE INSERT ON order_lines FOR EACH ROW SET @sluice_test_slow = SLEEP(0.002)`); err != nil {
		t.Fatal(err)
	}
	o := daemon.StreamOptions{
		ID: "killed", SourceURL: src.url, TargetURL: dst.url,
		Tables: tableNames(t, []string{"items", "order_lines"}), StateDir: t.TempDir(),
		PollInterval: 50 * time.Millisecond, KillBudget: 5 * time.Second, BatchSize: 1500, SourceMode: "trigger",
		InitialCopy: "off", // the backlog is streamed from the changelog
	}
	// Capture first, then the backlog, then the killer and the stream.
	if err := installMy(ctx, src, o); err != nil {
		t.Fatal(err)
	}
	if err := src.exec(ctx, `INSERT INTO order_lines (order_id, line_no, sku, qty)
		SELECT seq, 1, CONCAT('sku-', seq), seq % 17 FROM seq_1_to_1500`); err != nil {
		t.Fatal(err)
	}
	if err := src.exec(ctx, `UPDATE order_lines SET qty = qty + 1 WHERE order_id % 3 = 0`); err != nil {
		t.Fatal(err)
	}
	if err := src.exec(ctx, `DELETE FROM order_lines WHERE order_id % 7 = 0`); err != nil {
		t.Fatal(err)
	}
	m := dbtest.Maria(t)
	dsn := m.DSN(strings.TrimPrefix(dst.url[strings.LastIndex(dst.url, "/"):], "/"))
	killer, err := txkiller.StartMariaDB(ctx, dsn, time.Second, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Stop()
	run := startStream(t, o)
	waitXConverged(t, src, dst, 120*time.Second, run)
	st := run.current.Load().Stats()
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if killer.Killed() == 0 || st.Kills == 0 {
		t.Fatalf("killer killed %d, stream saw %d kills: the test did not exercise a kill", killer.Killed(), st.Kills)
	}
	t.Logf("killer killed %d transactions; %d retries; final batch size %d", killer.Killed(), st.Retries, st.BatchSize)
}

// installMy installs trigger capture the way `sluice source install` does.
func installMy(ctx context.Context, src *endpoint, o daemon.StreamOptions) error {
	return daemon.InstallCapture(ctx, src.url, o.Tables)
}

// TestCrossEngineRefusesUnrepresentableValue: a MySQL zero date has no
// PostgreSQL equivalent. The stream stops at that change with an error that
// names the table, column and row key; nothing of its batch is applied.
func TestCrossEngineRefusesUnrepresentableValue(t *testing.T) {
	ctx := context.Background()
	src, dst := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, daemon.EnginePostgres)
	if err := src.exec(ctx, `CREATE TABLE events (id int PRIMARY KEY, happened date)`); err != nil {
		t.Fatal(err)
	}
	if err := dst.exec(ctx, `CREATE TABLE events (id int PRIMARY KEY, happened date)`); err != nil {
		t.Fatal(err)
	}
	o := daemon.StreamOptions{
		ID: "zero", SourceURL: src.url, TargetURL: dst.url, Tables: tableNames(t, []string{"events"}),
		StateDir: t.TempDir(), PollInterval: 50 * time.Millisecond, SourceMode: "trigger", InitialCopy: "off",
	}
	if err := installMy(ctx, src, o); err != nil {
		t.Fatal(err)
	}
	if err := src.exec(ctx, `INSERT INTO events VALUES (1, '2024-01-01'), (2, '2024-01-02')`); err != nil {
		t.Fatal(err)
	}
	// Zero dates need a non-strict session, as legacy applications have.
	conn, err := src.my.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET SESSION sql_mode = ''`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO events VALUES (7, '0000-00-00')`); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = daemon.RunStream(runCtx, o)
	if err == nil || runCtx.Err() != nil {
		t.Fatalf("RunStream = %v; want an error about the zero date", err)
	}
	for _, want := range []string{"events", "happened", "(id=7)", "zero date"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	var n int
	if err := dst.pg.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("target has %d rows; the batch holding the bad value must not be applied", n)
	}
	st, err := daemon.ReadStatus(o.StateDir)
	if err != nil || len(st) != 1 || !strings.Contains(st[0].LastError, "(id=7)") {
		t.Errorf("state file should record the error: %+v, %v", st, err)
	}
}
