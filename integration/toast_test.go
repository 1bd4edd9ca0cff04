package integration

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/daemon"
)

// pagesDDL is a table as applications have them: a large text, NOT NULL.
func pagesDDL(e daemon.Engine) string {
	if e == daemon.EnginePostgres {
		return `CREATE TABLE pages (id bigint PRIMARY KEY, n integer NOT NULL, title varchar(64), body text NOT NULL)`
	}
	return `CREATE TABLE pages (id bigint PRIMARY KEY, n integer NOT NULL, title varchar(64), body longtext NOT NULL)`
}

// TestLogReadToastNotNull: updates that leave a TOASTed value unchanged in
// a NOT NULL column, from a PostgreSQL logical source (REPLICA IDENTITY
// DEFAULT: the value is nowhere in the log) into each target engine. An
// upsert without the column fails on both (PostgreSQL checks NOT NULL on
// the row it proposes before it finds the conflict; MariaDB's strict mode
// wants every NOT NULL column without a default), which stopped the
// stream: the rows are updated in place instead, compacted, in source
// order (an update then a key change of the same row in one transaction
// applies the table's changes of the batch one by one) and with key
// changes, and the target converges. Then a row deleted on the target
// behind sluice's back and updated on the source stops the stream, naming
// the table: the values it lacks are nowhere, and passing over it would
// lose the row.
func TestLogReadToastNotNull(t *testing.T) {
	t.Parallel()
	for i, to := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run("postgres_to_"+string(to), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src, dst := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, to)
			for _, e := range []*endpoint{src, dst} {
				if err := e.exec(ctx, pagesDDL(e.engine)); err != nil {
					t.Fatal(err)
				}
			}
			if err := src.exec(ctx, "ALTER TABLE pages REPLICA IDENTITY DEFAULT"); err != nil {
				t.Fatal(err)
			}
			tables := []string{"pages"}
			o := logOptions(t, "tnn"+strconv.Itoa(i), src, dst.url, tables) // slots are per cluster
			o.MinLanes, o.MaxLanes = 2, 2
			dropSlotAtCleanup(t, src, o.ID, tables)
			run := startStream(t, o)
			run.waitStarted(t, 60*time.Second)

			var ins []stmt
			for id := 1; id <= 8; id++ {
				ins = append(ins, st("INSERT INTO pages (id, n, title, body) VALUES (?, ?, ?, ?)", id, 0, "t", bigText("page-"+strconv.Itoa(id))))
			}
			// An update in the insert's own transaction: filled from the
			// insert's image.
			ins = append(ins, st("UPDATE pages SET n = n + 10 WHERE id = ?", 8))
			if err := src.inTx(ctx, ins...); err != nil {
				t.Fatal(err)
			}
			waitRows(t, dst, "pages", 8, 60*time.Second, run)
			for i := range 6 {
				if err := src.inTx(ctx,
					st("UPDATE pages SET n = n + 1 WHERE id = ?", 1+i%4),
					st("UPDATE pages SET n = n + 2, title = ? WHERE id = ?", "title "+strconv.Itoa(i), 2+i%5),
					st("UPDATE pages SET title = NULL WHERE id = ?", 6),
				); err != nil {
					t.Fatal(err)
				}
			}
			if err := src.inTx(ctx,
				// Source order: the row is updated, then moved, in one
				// batch.
				st("UPDATE pages SET n = n + 1 WHERE id = ?", 7),
				st("UPDATE pages SET id = ? WHERE id = ?", 107, 7),
				// A key change alone, moved in place before the rest.
				st("UPDATE pages SET id = ? WHERE id = ?", 105, 5),
				st("UPDATE pages SET n = n + 1 WHERE id = ?", 1),
			); err != nil {
				t.Fatal(err)
			}
			waitEqual(t, src, dst, tables, 60*time.Second, run)

			// The target loses a row behind sluice's back.
			if err := dst.exec(ctx, "DELETE FROM pages WHERE id = 3"); err != nil {
				t.Fatal(err)
			}
			if err := src.inTx(ctx, st("UPDATE pages SET n = n + 1 WHERE id = ?", 3)); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-run.done:
				run.done <- err
				if !errors.Is(err, apply.ErrRowMissing) || !strings.Contains(err.Error(), "pages") || !strings.Contains(err.Error(), "(id=3)") {
					t.Fatalf("stream stopped with %v; want apply.ErrRowMissing naming pages and (id=3)", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the stream ran on over an update of a row the target lacks")
			}
		})
	}
}
