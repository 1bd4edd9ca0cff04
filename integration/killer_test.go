package integration

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/internal/txkiller"
)

// TestKilledTransactionsAreRetried runs the target behind a Vitess-style
// transaction killer (1 s here, 20 s in production) with a target whose
// rows are slow to write, so the first batches run past the killer. Each
// killed batch is rolled back and retried smaller; nothing is lost or
// applied twice.
func TestKilledTransactionsAreRetried(t *testing.T) {
	t.Parallel() // the killer sees only its target database; the rows are slowed by pg_sleep, not CPU
	ddl := `CREATE TABLE slow (id int PRIMARY KEY, v text NOT NULL)`
	p := newPair(t, 0, ddl)
	ctx := context.Background()
	// 2 ms per row on the target only: a 1,500-row batch takes ~3 s.
	exec1(t, p.dst, `CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$`)
	exec1(t, p.dst, `CREATE TRIGGER slow_row BEFORE INSERT OR UPDATE ON slow FOR EACH ROW EXECUTE FUNCTION slow_row()`)
	// sluice applies with session_replication_role = replica, as logical
	// replication does, where ordinary triggers do not fire.
	exec1(t, p.dst, `ALTER TABLE slow ENABLE ALWAYS TRIGGER slow_row`)
	installCapture(t, p.srcURL, []string{"slow"})
	exec1(t, p.src, `INSERT INTO slow SELECT g, 'v' || g FROM generate_series(1, 1500) g`)
	exec1(t, p.src, `UPDATE slow SET v = v || '!' WHERE id % 3 = 0`)
	exec1(t, p.src, `DELETE FROM slow WHERE id % 7 = 0`)

	killer, err := txkiller.StartPostgres(ctx, p.dstDirect, time.Second, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Stop()

	o := streamOptions(t, p, []string{"slow"})
	o.BatchSize = 1500
	run := startStream(t, o)
	waitConverged(t, p, []string{"public.slow"}, 120*time.Second, run)
	st := run.current.Load().Stats()
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if killer.Killed() == 0 || st.Kills == 0 {
		t.Fatalf("killer killed %d transactions, stream saw %d kills: the test did not exercise a kill", killer.Killed(), st.Kills)
	}
	t.Logf("killer killed %d transactions; stream retried %d times, final batch size %d", killer.Killed(), st.Retries, st.BatchSize)
}
