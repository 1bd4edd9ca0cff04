package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
)

// rssKiB reads a process's resident and peak resident set size.
func rssKiB(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			peak = v
		}
	}
	return rss, peak, sc.Err()
}

// TestBackpressureBoundsMemory: a large backlog and a slow target. The
// reader must wait when the queue is full, so the process's memory stays
// under the configured queue size plus a fixed overhead, whatever the
// backlog — nothing dropped, nothing turned into an error.
func TestBackpressureBoundsMemory(t *testing.T) {
	bin := buildSluice(t)
	ddl := `CREATE TABLE backlog (id bigint PRIMARY KEY, pad text NOT NULL)`
	p := newPair(t, 0, ddl)
	// About 0.2 ms per row on the target: far slower than the reader. A
	// millisecond every fifth row, since pg_sleep sleeps whole
	// milliseconds: pg_sleep(0.0002) returns at once, and the target was
	// slow only on a loaded machine.
	exec1(t, p.dst, `CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN IF NEW.id % 5 = 0 THEN PERFORM pg_sleep(0.001); END IF; RETURN NEW; END $$`)
	exec1(t, p.dst, `CREATE TRIGGER slow_row BEFORE INSERT ON backlog FOR EACH ROW EXECUTE FUNCTION slow_row()`)
	// ALWAYS: sluice applies as a replica (session_replication_role), which
	// skips ordinary triggers.
	exec1(t, p.dst, `ALTER TABLE backlog ENABLE ALWAYS TRIGGER slow_row`)
	installCapture(t, p.srcURL, []string{"backlog"})
	const backlog = 2_000_000
	// Small rows (~190 bytes a change as the queue counts it): the backlog
	// is ~380 MB of changes, about a hundred times the queue. One
	// set-based INSERT per half on two sessions, so the capture trigger
	// fills the changelog on both cores.
	genStart := time.Now()
	halves := [][2]int{{1, backlog / 2}, {backlog/2 + 1, backlog}}
	genErr := make(chan error, len(halves))
	for _, h := range halves {
		go func() {
			_, err := p.src.Exec(context.Background(), `INSERT INTO backlog SELECT g, md5(g::text) FROM generate_series($1::int, $2::int) g`, h[0], h[1])
			genErr <- err
		}()
	}
	for range halves {
		if err := <-genErr; err != nil {
			t.Fatalf("generate the backlog: %v", err)
		}
	}
	t.Logf("generated a %d-change backlog in %v", backlog, time.Since(genStart).Round(time.Millisecond))

	const queue = 4 << 20
	dir := t.TempDir()
	proc := startSluice(t, bin, "sync", "start", "--source", p.srcURL, "--target", p.dstURL, "--tables", "backlog",
		"--state-dir", dir, "--source-mode", "trigger", "--initial-copy", "off", "--max-queue-bytes", strconv.Itoa(queue), "--max-lanes", "1", "--log-format", "json")
	first := waitStatus(t, proc, dir, 60*time.Second, "first commit", func(s daemon.Status) bool { return s.Applied > 0 })
	var peak int64
	var peakQueue int64
	var last daemon.Status
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
		_, hwm, err := rssKiB(proc.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		peak = max(peak, hwm)
		if st, err := daemon.ReadStatus(dir); err == nil && len(st) == 1 {
			last = st[0]
			peakQueue = max(peakQueue, last.QueueBytes)
			// A push waits while the queue is full, and one read is at most
			// half of it: the queue never holds more than configured.
			if last.QueueBytes > queue {
				t.Errorf("queue holds %d bytes, configured %d", last.QueueBytes, queue)
			}
			if last.LastError != "" || !last.Running {
				t.Fatalf("stream not running cleanly under backpressure: running %v, error %q", last.Running, last.LastError)
			}
		}
		time.Sleep(200 * time.Millisecond) // sampling interval
	}
	if last.Applied <= first.Applied {
		t.Fatalf("applied stayed at %d over the sampling window: the slow target must still make progress", last.Applied)
	}
	if last.Applied >= backlog {
		t.Fatalf("the backlog drained in the sampling window (%d applied): the target was not slow enough to test backpressure", last.Applied)
	}
	if peakQueue < queue/4 {
		t.Fatalf("queue peaked at %d bytes of %d: the reader never filled it, so backpressure was not exercised", peakQueue, queue)
	}
	// Fixed overhead: the Go runtime, drivers, and one batch being built
	// (bounded by the queue).
	limit := int64(queue>>10)*3 + 80<<10
	t.Logf("peak RSS %d KiB with %d of %d changes applied (%d in the sampling window), queue peak %d bytes (limit %d KiB)",
		peak, last.Applied, backlog, last.Applied-first.Applied, peakQueue, limit)
	if peak > limit {
		t.Fatalf("peak RSS %d KiB exceeds %d KiB: memory follows the backlog, not the configured queue", peak, limit)
	}
	sigtermWithin(t, proc, 60*time.Second)
}
