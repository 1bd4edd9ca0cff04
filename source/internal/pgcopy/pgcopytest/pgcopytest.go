// Package pgcopytest is the test harness the PostgreSQL sources share to
// check a copy's boundary: a workload committing inserts, updates (key
// changes too) and deletes on two tables while a snapshot is taken, a
// replica built from the snapshot's readers and then the stream's
// changes, refusing any change that shows a gap or a double, and the
// comparison of the replica with the source's final rows.
package pgcopytest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// Tables are the workload's tables.
var Tables = []string{"a", "b"}

// DDL creates the workload's tables with their first rows. The column
// types are those whose text the stream readers adjust (boolean, floats,
// timestamptz, jsonb, char(n)), so that the comparison also checks that the
// copy gives the stream's text.
var DDL = []string{
	`CREATE TABLE a (id int PRIMARY KEY, v text, f float8, ts timestamptz DEFAULT now(), bo boolean, j jsonb, c char(4))`,
	`CREATE TABLE b (k text, n bigint, v int, PRIMARY KEY (k, n))`,
	`INSERT INTO a SELECT g, 'v' || g, g / 7.0, now(), g % 2 = 0, jsonb_build_object('g', g), 'c' FROM generate_series(1, 300) g`,
	`INSERT INTO b SELECT 'k' || (g % 7), g, g FROM generate_series(1, 300) g`,
}

// Workload commits small random transactions from writers sessions until
// Stop.
type Workload struct {
	url  string
	next atomic.Int64 // keys of new rows
	tx   atomic.Int64 // committed transactions
	stop chan struct{}
	wg   sync.WaitGroup
	errs chan error
}

// New returns a workload that has not started writing.
func New(t *testing.T, url string) *Workload {
	w := &Workload{url: url, stop: make(chan struct{}), errs: make(chan error, 16)}
	w.next.Store(time.Now().UnixNano() % 1_000_000 * 1000)
	t.Cleanup(w.Stop)
	return w
}

// Start starts a new workload's writers.
func Start(t *testing.T, url string, writers int) *Workload {
	t.Helper()
	w := New(t, url)
	w.Start(t, writers)
	return w
}

// Start starts writers sessions writing.
func (w *Workload) Start(t *testing.T, writers int) {
	t.Helper()
	for i := range writers {
		conn := dbtest.ConnectPG(t, w.url, nil)
		// Cleanups run last first: the writers stop before their
		// sessions close.
		t.Cleanup(w.Stop)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				if err := w.write(conn, rnd); err != nil {
					select {
					case w.errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
}

// ops are the writers' statements. A row to change is picked among those
// no other transaction holds (SKIP LOCKED): a transaction held open across
// a snapshot (Hold) must not stall both writers behind its rows.
var ops = []string{
	`INSERT INTO a (id, v, f, bo, j, c) VALUES ($1::int, 'new', random(), random() < 0.5, jsonb_build_object('r', random()), 'n')`,
	`UPDATE a SET v = v || 'u', f = random(), ts = now(), bo = NOT bo WHERE id = (SELECT id FROM a WHERE id > 0 ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED)`,
	`UPDATE a SET id = $1::int WHERE id = (SELECT id FROM a WHERE id > 0 ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED)`,
	`DELETE FROM a WHERE id = (SELECT id FROM a WHERE id > 0 ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED)`,
	`INSERT INTO b VALUES ('k' || ($1::bigint % 7), $1::bigint, 0)`,
	`UPDATE b SET v = v + 1 WHERE (k, n) = (SELECT k, n FROM b ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED)`,
	`UPDATE b SET n = $1::bigint, k = 'z' || ($1::bigint % 5) WHERE (k, n) = (SELECT k, n FROM b ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED)`,
	`DELETE FROM b WHERE (k, n) = (SELECT k, n FROM b ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED)`,
}

// write commits one transaction of one to three changes. Deadlocks and
// lost races between the writers are rolled back and not counted.
func (w *Workload) write(conn *pgx.Conn, rnd *rand.Rand) error {
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit a no-op
	for range 1 + rnd.IntN(3) {
		op := ops[rnd.IntN(len(ops))]
		var args []any
		if strings.Contains(op, "$1") {
			args = append(args, w.next.Add(1))
		}
		if _, err := tx.Exec(ctx, op, args...); err != nil {
			return benign(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return benign(err)
	}
	w.tx.Add(1)
	return nil
}

// benign drops the errors concurrent writers cause each other.
func benign(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "23505" || pgErr.Code == "40001") {
		return nil
	}
	return err
}

// Wait polls until n more transactions are committed than when it was
// called.
func (w *Workload) Wait(t *testing.T, n int64) {
	t.Helper()
	target := w.tx.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for w.tx.Load() < target {
		select {
		case err := <-w.errs:
			t.Fatalf("workload: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("workload committed %d transactions in 30s, want %d", w.tx.Load(), target)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stop stops the writers and returns the transactions they committed.
func (w *Workload) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// Hold begins a transaction that changes rows of both tables (a key
// change too) and leaves it open; commit commits it. Taken around a
// snapshot, it is a transaction in flight when the snapshot was taken.
func (w *Workload) Hold(t *testing.T) (commit func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := dbtest.ConnectPG(t, w.url, nil).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{ops[0], ops[1], ops[2], ops[3], ops[4], ops[6]} {
		var args []any
		if strings.Contains(op, "$1") {
			args = append(args, w.next.Add(1))
		}
		if _, err := tx.Exec(ctx, op, args...); err != nil {
			t.Fatalf("held transaction: %s: %v", op, err)
		}
	}
	return func() {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit the held transaction: %v", err)
		}
	}
}

// Committed is the number of transactions committed so far.
func (w *Workload) Committed() int64 { return w.tx.Load() }

// Replica holds rows by table and key, each as its values' text.
type Replica map[string]map[string]string

func keyString(k sluice.Row) string { return fmt.Sprint([]sluice.Value(k)) }

// Copy reads every table of snap into a new replica, in chunks of
// rowsPerChunk rows, spreading them over the readers.
func Copy(t *testing.T, snap *tablecopy.Snapshot, rowsPerChunk int) Replica {
	t.Helper()
	ctx := context.Background()
	rep := Replica{}
	n := 0
	for _, tbl := range snap.Tables {
		rows := map[string]string{}
		rep[tbl.Name.String()] = rows
		ranges, _, err := snap.Readers[0].Split(ctx, tbl, rowsPerChunk)
		if err != nil {
			t.Fatalf("Split %s: %v", tbl.Name, err)
		}
		for _, rg := range ranges {
			r := snap.Readers[n%len(snap.Readers)]
			n++
			err := r.Read(ctx, tbl, rg, func(batch []sluice.Row) error {
				for _, row := range batch {
					k := keyString(tbl.KeyOf(row))
					if _, ok := rows[k]; ok {
						return fmt.Errorf("row %s read twice", k)
					}
					rows[k] = fmt.Sprint([]sluice.Value(row))
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Read %s %s: %v", tbl.Name, rg, err)
			}
		}
	}
	return rep
}

// Apply applies a change, refusing an insert of a row the replica holds
// (a change the snapshot already held: a double) and an update or delete
// of one it lacks (a change missed: a gap).
func (rep Replica) Apply(c sluice.Change) error {
	if c.Table == nil {
		return nil
	}
	rows := rep[c.Table.Name.String()]
	if rows == nil {
		return fmt.Errorf("change of unknown table %s", c.Table.Name)
	}
	switch c.Op {
	case sluice.OpInsert:
		k := keyString(c.Table.KeyOf(c.Row))
		if _, ok := rows[k]; ok {
			return fmt.Errorf("insert %s %s at %s: the replica holds the row (a double)", c.Table.Name, k, c.Pos)
		}
		rows[k] = fmt.Sprint([]sluice.Value(c.Row))
	case sluice.OpUpdate, sluice.OpDelete:
		old := keyString(c.Key)
		if _, ok := rows[old]; !ok {
			return fmt.Errorf("%s %s %s at %s: the replica lacks the row (a gap)", c.Op, c.Table.Name, old, c.Pos)
		}
		delete(rows, old)
		if c.Op == sluice.OpUpdate {
			k := keyString(c.Table.KeyOf(c.Row))
			if _, ok := rows[k]; ok {
				return fmt.Errorf("update %s %s to key %s at %s: the replica holds that key", c.Table.Name, old, k, c.Pos)
			}
			rows[k] = fmt.Sprint([]sluice.Value(c.Row))
		}
	default:
		return fmt.Errorf("unexpected %s of %s at %s", c.Op, c.Table.Name, c.Pos)
	}
	return nil
}

// Reader is what Stream needs of a stream reader.
type Reader interface {
	Read(ctx context.Context, max int) ([]sluice.Change, error)
}

// Stream commits a marker row (key marker of table a), then applies the
// reader's changes to rep until the marker's insert, which commits after
// everything the workload committed. It returns the changes applied.
func Stream(t *testing.T, url string, r Reader, rep Replica, marker int) int {
	t.Helper()
	ctx := context.Background()
	conn := dbtest.ConnectPG(t, url, nil)
	if _, err := conn.Exec(ctx, `INSERT INTO a (id, v) VALUES ($1, 'marker')`, marker); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(marker)
	n := 0
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cs, err := r.Read(ctx, 500)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		for _, c := range cs {
			if err := rep.Apply(c); err != nil {
				t.Fatal(err)
			}
			n++
			if c.Op == sluice.OpInsert && c.Table.Name.Name == "a" && c.Row[0].Text == want {
				return n
			}
		}
	}
	t.Fatalf("the marker's insert did not arrive in 30s (%d changes applied)", n)
	return n
}

// Check compares the replica with the source's rows, read as ::text under
// settings (those of the stream readers).
func Check(t *testing.T, url string, tables []*sluice.Table, settings map[string]string, rep Replica) {
	t.Helper()
	conn := dbtest.ConnectPG(t, url, settings)
	for _, tbl := range tables {
		sel := make([]string, len(tbl.Columns))
		for i, c := range tbl.Columns {
			sel[i] = pgx.Identifier{c.Name}.Sanitize() + "::text"
		}
		want := map[string]string{}
		for _, row := range dbtest.TextRowsPG(t, conn, `SELECT `+strings.Join(sel, ", ")+` FROM `+pgx.Identifier{tbl.Name.Schema, tbl.Name.Name}.Sanitize()) {
			want[keyString(tbl.KeyOf(row))] = fmt.Sprint([]sluice.Value(row))
		}
		got := rep[tbl.Name.String()]
		var diffs []string
		for k, w := range want {
			if g, ok := got[k]; !ok {
				diffs = append(diffs, "missing "+w)
			} else if g != w {
				diffs = append(diffs, "differs: source "+w+", replica "+g)
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok {
				diffs = append(diffs, "extra "+g)
			}
		}
		slices.Sort(diffs)
		if len(diffs) > 0 {
			t.Fatalf("table %s: replica differs from the source in %d rows:\n%s", tbl.Name, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
		}
	}
}
