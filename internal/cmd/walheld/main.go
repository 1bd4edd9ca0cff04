// Command walheld measures what a PostgreSQL source keeps while sluice's
// initial copy runs under writes: it copies a table of -rows rows while a
// writer updates it, and reports the WAL the stream's slot holds back at
// the hand-off and once the stream has caught up. It is a measurement for
// docs/operating.md (Initial copy), not a test.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

func main() {
	rows := flag.Int("rows", 2_000_000, "rows in the copied table")
	bin := flag.String("sluice", "bin/sluice", "sluice binary")
	oneWay := flag.Duration("delay", 48*time.Millisecond, "one-way delay of the WAN proxy in front of the target")
	flag.Parse()
	if err := run(context.Background(), *bin, *rows, *oneWay); err != nil {
		fmt.Fprintln(os.Stderr, "walheld:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin string, rows int, oneWay time.Duration) error {
	// Two servers: the target's writes must not count in the source's WAL.
	pg, err := dbtest.StartPostgres(ctx)
	if err != nil {
		return err
	}
	defer pg.Stop()
	pgDst, err := dbtest.StartPostgres(ctx)
	if err != nil {
		return err
	}
	defer pgDst.Stop()
	if err := pg.CreateDatabase(ctx, "src"); err != nil {
		return err
	}
	if err := pgDst.CreateDatabase(ctx, "dst"); err != nil {
		return err
	}
	src, err := pgx.Connect(ctx, pg.URL("src"))
	if err != nil {
		return err
	}
	dst, err := pgx.Connect(ctx, pgDst.URL("dst"))
	if err != nil {
		return err
	}
	ddl := "CREATE TABLE items (id bigint PRIMARY KEY, k int NOT NULL, c varchar(120) NOT NULL, pad varchar(60) NOT NULL)"
	for _, c := range []*pgx.Conn{src, dst} {
		if _, err := c.Exec(ctx, ddl); err != nil {
			return err
		}
	}
	if _, err := src.Exec(ctx, fmt.Sprintf("INSERT INTO items SELECT g, g %% 1000, md5(g::text) || md5((g+1)::text), 'pad-' || g FROM generate_series(1, %d) g", rows)); err != nil {
		return err
	}
	if _, err := src.Exec(ctx, "VACUUM ANALYZE items"); err != nil {
		return err
	}
	writer, err := pgx.Connect(ctx, pg.URL("src"))
	if err != nil {
		return err
	}
	var updates atomic.Int64
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := writer.Exec(ctx, "UPDATE items SET k = k + 1, c = md5(c) WHERE id = $1", int64(i*7919%rows+1)); err == nil {
				updates.Add(1)
			}
		}
	}()
	proxy, err := wanproxy.Start(pgDst.Addr(), oneWay)
	if err != nil {
		return err
	}
	defer proxy.Close()
	dstURL, err := url.Parse(pgDst.URL("dst"))
	if err != nil {
		return err
	}
	dstURL.Host = proxy.Addr()
	dir, err := os.MkdirTemp("", "walheld-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logPath := filepath.Join(dir, "sluice.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "sync", "start", "--source", pg.URL("src"), "--target", dstURL.String(), "--tables", "items",
		"--state-dir", filepath.Join(dir, "state"), "--stream-id", "walheld", "--log-format", "json")
	cmd.Stdout, cmd.Stderr = logf, logf
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	held := func() (int64, error) {
		var n int64
		err := src.QueryRow(ctx, "SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint FROM pg_replication_slots WHERE slot_name LIKE '%walheld%'").Scan(&n)
		return n, err
	}
	var peak int64
	for {
		b, _ := os.ReadFile(logPath)
		if n, err := held(); err == nil && n > peak {
			peak = n
		}
		if strings.Contains(string(b), "initial copy handed off to the stream") {
			break
		}
		if time.Since(began) > 5*time.Minute {
			return fmt.Errorf("no hand-off within 5 minutes; log:\n%s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	copied := time.Since(began)
	atHandoff, _ := held()
	ups := updates.Load()
	close(stop)
	// Caught up: the slot's confirmed position reaches the WAL's end.
	var after int64
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var lag int64
		if err := src.QueryRow(ctx, "SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint FROM pg_replication_slots WHERE slot_name LIKE '%walheld%'").Scan(&lag); err == nil && lag < 64<<10 {
			// The slot's restart point moves at the next running-transactions
			// record; a checkpoint writes one.
			if _, err := src.Exec(ctx, "CHECKPOINT"); err != nil {
				return err
			}
			// Poll until the walsender's next feedback moves it.
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				if after, _ = held(); after < atHandoff/2 {
					break
				}
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("target through a %v RTT proxy; ", 2*oneWay)
	fmt.Printf("copy of %d rows with a writer on the table: %d updates during the copy (%.0f/s), hand-off after %.1f s\n", rows, ups, float64(ups)/copied.Seconds(), copied.Seconds())
	fmt.Printf("WAL held by the slot: peak %.1f MiB during the copy, %.1f MiB at the hand-off, %.1f MiB once caught up\n",
		float64(peak)/(1<<20), float64(atHandoff)/(1<<20), float64(after)/(1<<20))
	return nil
}
