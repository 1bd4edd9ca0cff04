package integration

// Generated columns (issue 36): a generated column on the target is never
// written, the target computes it from the replicated base columns; a
// plain target column whose source column is generated is written with
// the values the source's log carries, or refused when the log carries
// none (PostgreSQL logical replication).

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// genMariaDDL is the table as a MariaDB user writes it: a STORED
// total, a VIRTUAL half, and an indexed VIRTUAL column over a JSON field.
const genMariaDDL = "CREATE TABLE g (id int NOT NULL PRIMARY KEY, price decimal(10,2), qty int, " +
	"total decimal(12,2) AS (price * qty) STORED, " +
	"half decimal(12,3) AS (price / 2) VIRTUAL, " +
	"doc json, " +
	"j_name varchar(40) AS (json_value(doc, '$.name')) VIRTUAL, " +
	"KEY g_j_name (j_name))"

// genPGSourceDDL is the table on a PostgreSQL source: total and j_name
// generated (pgoutput sends neither), half a plain column the workload
// writes as price / 2.
var genPGSourceDDL = []string{
	"CREATE TABLE g (id integer PRIMARY KEY, price numeric(10,2), qty integer, " +
		"total numeric(12,2) GENERATED ALWAYS AS (price * qty) STORED, " +
		"half numeric(12,3), " +
		"doc jsonb, " +
		"j_name varchar(40) GENERATED ALWAYS AS (doc ->> 'name') STORED)",
}

// genPGTargetDDL is the table on a PostgreSQL target fed from MariaDB:
// total and j_name generated (j_name by another expression than the
// source's), half a plain column written with the VIRTUAL values the
// binlog carries.
var genPGTargetDDL = []string{
	"CREATE TABLE g (id integer PRIMARY KEY, price numeric(10,2), qty integer, " +
		"total numeric(12,2) GENERATED ALWAYS AS (price * qty) STORED, " +
		"half numeric(12,3), " +
		"doc jsonb, " +
		"j_name varchar(40) GENERATED ALWAYS AS (doc ->> 'name') STORED)",
	"CREATE INDEX g_j_name ON g (j_name)",
}

// genWorkload writes transactions of inserts, updates, key moves and
// deletes to table g, keeping a model of the live keys so that every
// statement touches a row. halfPlain: the source's half is a plain column,
// written as price / 2 where price is.
type genWorkload struct {
	e         *endpoint
	r         *rand.Rand
	halfPlain bool
	live      []int
	next      int
}

func (w *genWorkload) price() string {
	if w.r.IntN(9) == 0 {
		return "NULL"
	}
	return fmt.Sprintf("%d.%02d", w.r.IntN(2_000_000)-1_000_000, w.r.IntN(100))
}

func (w *genWorkload) qty() string {
	if w.r.IntN(9) == 0 {
		return "NULL"
	}
	return fmt.Sprint(w.r.IntN(1000) - 100)
}

func (w *genWorkload) doc() string {
	switch w.r.IntN(6) {
	case 0:
		return "NULL"
	case 1:
		return `'{"other": 1}'`
	case 2:
		return `'{"name": "ünï ✓", "n": [1, 2]}'`
	}
	return fmt.Sprintf(`'{"name": "n%d", "x": %d}'`, w.r.IntN(10_000), w.r.IntN(100))
}

// sets is "price = p[, half = p / 2]".
func (w *genWorkload) setPrice(p string) string {
	s := "price = " + p
	if w.halfPlain {
		s += ", half = " + p + " / 2"
	}
	return s
}

func (w *genWorkload) insert() string {
	id := w.next
	w.next++
	w.live = append(w.live, id)
	p := w.price()
	if w.halfPlain {
		return fmt.Sprintf("INSERT INTO g (id, price, qty, doc, half) VALUES (%d, %s, %s, %s, %s / 2)", id, p, w.qty(), w.doc(), p)
	}
	return fmt.Sprintf("INSERT INTO g (id, price, qty, doc) VALUES (%d, %s, %s, %s)", id, p, w.qty(), w.doc())
}

// stmt is one statement; an insert when no row is live.
func (w *genWorkload) stmt() string {
	if len(w.live) == 0 {
		return w.insert()
	}
	i := w.r.IntN(len(w.live))
	id := w.live[i]
	switch w.r.IntN(7) {
	case 0, 1:
		return w.insert()
	case 2:
		return fmt.Sprintf("UPDATE g SET %s, qty = %s WHERE id = %d", w.setPrice(w.price()), w.qty(), id)
	case 3:
		return fmt.Sprintf("UPDATE g SET doc = %s WHERE id = %d", w.doc(), id)
	case 4:
		// A key move, half the time with another column changed.
		nid := w.next
		w.next++
		w.live[i] = nid
		if w.r.IntN(2) == 0 {
			return fmt.Sprintf("UPDATE g SET id = %d, qty = %s WHERE id = %d", nid, w.qty(), id)
		}
		return fmt.Sprintf("UPDATE g SET id = %d WHERE id = %d", nid, id)
	case 5:
		w.live = append(w.live[:i], w.live[i+1:]...)
		return fmt.Sprintf("DELETE FROM g WHERE id = %d", id)
	}
	return fmt.Sprintf("UPDATE g SET qty = %s WHERE id = %d", w.qty(), id)
}

// tx runs a transaction of one to four statements.
func (w *genWorkload) tx(ctx context.Context) error {
	n := 1 + w.r.IntN(4)
	stmts := make([]string, n)
	for i := range stmts {
		stmts[i] = w.stmt()
	}
	if w.e.pg != nil {
		tx, err := w.e.pg.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return tx.Commit(ctx)
	}
	tx, err := w.e.my.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return tx.Commit()
}

// TestGeneratedColumns replicates the table on every pair it
// names: MariaDB → MariaDB with the same DDL (STORED, VIRTUAL and an
// indexed VIRTUAL column over JSON), MariaDB → PostgreSQL (a VIRTUAL
// source column into a plain target column, from the binlog's values),
// and PostgreSQL → MariaDB (columns pgoutput does not send, computed by
// the target; a plain source column into a generated target column). Each
// copies 300 rows, then streams inserts, updates, key moves and deletes
// with up to four lanes, and must end equal by dbtest.CompareTables
// (generated values included), by sluice verify (which compares the
// generated columns both sides compute alike), and between MariaDB
// databases by CHECKSUM TABLE; then a row changed and one deleted on the
// target are repaired by verify --repair.
func TestGeneratedColumns(t *testing.T) {
	t.Parallel() // its subtests already run in parallel on databases and stream ids of their own: overlap them with the other tests too
	pg, my := daemon.EnginePostgres, daemon.EngineMySQL
	for i, tc := range []struct {
		name      string
		from, to  daemon.Engine
		src, dst  []string
		halfPlain bool // the source's half is plain
		// verify: sluice verify must agree. Not from MariaDB to
		// PostgreSQL, where verify's canonical form of a json column
		// against jsonb takes some 40 s for these few hundred rows.
		verify bool
	}{
		{"maria_binlog_to_mysql", my, my, []string{genMariaDDL}, []string{genMariaDDL}, false, true},
		{"maria_binlog_to_postgres", my, pg, []string{genMariaDDL}, genPGTargetDDL, false, false},
		{"pg_logical_to_mysql", pg, my, genPGSourceDDL, []string{genMariaDDL}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, d := newEndpoint(t, tc.from), newEndpoint(t, tc.to)
			for _, q := range tc.src {
				if err := s.exec(ctx, q); err != nil {
					t.Fatalf("source: %s: %v", q, err)
				}
			}
			for _, q := range tc.dst {
				if err := d.exec(ctx, q); err != nil {
					t.Fatalf("target: %s: %v", q, err)
				}
			}
			w := &genWorkload{e: s, r: rng(t), halfPlain: tc.halfPlain, next: 1}
			// The rows the initial copy carries.
			for range 30 {
				var vals []string
				for range 10 {
					id := w.next
					w.next++
					w.live = append(w.live, id)
					p := w.price()
					v := fmt.Sprintf("(%d, %s, %s, %s", id, p, w.qty(), w.doc())
					if tc.halfPlain {
						v += ", " + p + " / 2"
					}
					vals = append(vals, v+")")
				}
				cols := "id, price, qty, doc"
				if tc.halfPlain {
					cols += ", half"
				}
				q := "INSERT INTO g (" + cols + ") VALUES " + strings.Join(vals, ", ")
				if err := s.exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			dstURL, _ := d.viaProxy(t, 2*time.Millisecond)
			id := fmt.Sprintf("gen%d", i)
			if tc.from == pg {
				// The expressions of j_name differ: sluice preflight says
				// so, and would start the stream.
				out, code := runPreflight(t, "preflight", "--source", s.url, "--target", d.url, "--tables", "g",
					"--stream-id", id, "--state-dir", t.TempDir())
				if code != 0 || !strings.Contains(out, "! target tables: warning: column ") ||
					!strings.Contains(out, `.g.j_name is generated by different expressions: "(doc ->> 'name'::text)" on the source`) {
					t.Errorf("preflight exited %d, want 0 and a warning about j_name:\n%s", code, out)
				}
			}
			o := daemon.StreamOptions{
				ID: id, SourceURL: s.url, TargetURL: dstURL, Tables: tableNames(t, []string{"g"}), StateDir: t.TempDir(),
				SourceMode: logMode(tc.from), PollInterval: 50 * time.Millisecond, KillBudget: 5 * time.Second,
				CopyWorkers: 2, CopyChunkRows: 100, MinLanes: 2, MaxLanes: 4,
				Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
			}
			dropSlotAtCleanup(t, s, id, []string{"g"})
			run := startStream(t, o)
			for range 60 {
				if err := w.tx(ctx); err != nil {
					t.Fatal(err)
				}
			}
			run.waitStarted(t, 60*time.Second)
			for range 120 {
				if err := w.tx(ctx); err != nil {
					t.Fatal(err)
				}
			}
			waitEqualDB(t, s.dbOf(), d.dbOf(), []string{"g"}, 60*time.Second, run)
			if tc.verify {
				verifyAgrees(t, s, d, []string{"g"})
			}
			if tc.from == my && tc.to == my {
				if err := dbtest.CompareChecksumTable(ctx, s.my, d.my, "g"); err != nil {
					t.Fatalf("CompareTables finds the tables equal but CHECKSUM TABLE does not: %v", err)
				}
			}
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			if !tc.verify {
				return
			}
			// A repair writes the source's rows through the apply path:
			// the generated columns are left to the target again.
			cfg := verifyConfig(t, s, d)
			cfg.Tables = []sluice.TableName{mustTable(t, "g")}
			if tc.from == pg {
				cfg.Tables[0].Schema = "public"
			}
			corrupt(ctx, t, d, fmt.Sprintf("UPDATE g SET price = -0.01 WHERE id = %d", w.live[0]), fmt.Sprintf("DELETE FROM g WHERE id = %d", w.live[1]))
			repairAndCompare(ctx, t, cfg, s, d, "g", 2)
		})
	}
}

// TestGeneratedColumnNotSent: PostgreSQL's logical replication sends no
// generated column, so a plain target column whose source column is
// generated would never be written (NULL on every row, in silence). The
// stream refuses it before any data moves, naming the column and the fix.
func TestGeneratedColumnNotSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := newEndpoint(t, daemon.EnginePostgres), newEndpoint(t, daemon.EnginePostgres)
	if err := s.exec(ctx, genPGSourceDDL[0]); err != nil {
		t.Fatal(err)
	}
	if err := d.exec(ctx, "CREATE TABLE g (id integer PRIMARY KEY, price numeric(10,2), qty integer, total numeric(12,2), half numeric(12,3), doc jsonb, j_name varchar(40))"); err != nil {
		t.Fatal(err)
	}
	o := logOptions(t, "gennotsent", s, d.url, []string{"g"})
	dropSlotAtCleanup(t, s, o.ID, []string{"g"})
	o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err := daemon.RunStream(cctx, o)
	if err == nil {
		t.Fatal("the stream started; want it refused at preflight")
	}
	for _, want := range []string{"g.total", "g.j_name", "generated on the source", "price * (qty)::numeric", "--source-mode trigger"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}
