// Package mycopytest holds what the MySQL copy sources' tests share: a
// writer that changes two tables while a snapshot is taken, a copy of a
// snapshot into memory, and the application of a stream's changes to it
// with a check for gaps and doubles.
package mycopytest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// Writer commits transactions of inserts, updates (key changes too)
// and deletes on tables a and b until stopped, counting the commits.
type Writer struct {
	db               *sql.DB
	insertA, updateA func(rnd *rand.Rand, id int) string
	commits          atomic.Int64
	stop             chan struct{}
	done             chan error
}

// StartWriter starts a Writer on db; insertA and updateA write the
// statements of table a, whose columns the tests choose (an id INT key
// first).
func StartWriter(db *sql.DB, seed uint64, insertA, updateA func(rnd *rand.Rand, id int) string) *Writer {
	w := &Writer{db: db, insertA: insertA, updateA: updateA, stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		rnd := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-w.stop:
				w.done <- nil
				return
			default:
			}
			if err := w.txn(rnd); err != nil {
				w.done <- err
				return
			}
			w.commits.Add(1)
		}
	}()
	return w
}

func (w *Writer) txn(rnd *rand.Rand) error {
	tx, err := w.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for range 1 + rnd.IntN(3) {
		id := 1 + rnd.IntN(400)
		k := fmt.Sprintf("k%d", rnd.IntN(20))
		var q string
		switch rnd.IntN(8) {
		case 0:
			q = w.insertA(rnd, id)
		case 1:
			q = w.updateA(rnd, id)
		case 2:
			q = fmt.Sprintf("UPDATE IGNORE a SET id = %d WHERE id = %d", 1+rnd.IntN(400), id)
		case 3:
			q = fmt.Sprintf("DELETE FROM a WHERE id = %d", id)
		case 4:
			q = fmt.Sprintf("INSERT IGNORE INTO b VALUES ('%s', %d, %v)", k, rnd.IntN(30), rnd.Float64())
		case 5:
			q = fmt.Sprintf("UPDATE b SET v = %v WHERE k = '%s'", rnd.Float64(), k)
		case 6:
			q = fmt.Sprintf("UPDATE IGNORE b SET k = 'k%d' WHERE k = '%s' AND j = %d", rnd.IntN(20), k, rnd.IntN(30))
		case 7:
			q = fmt.Sprintf("DELETE FROM b WHERE k = '%s' AND j = %d", k, rnd.IntN(30))
		}
		if _, err := tx.Exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return tx.Commit()
}

// WaitCommits polls until the writer has committed n more transactions.
func (w *Writer) WaitCommits(t testing.TB, n int64) {
	t.Helper()
	target := w.commits.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for w.commits.Load() < target {
		select {
		case err := <-w.done:
			t.Fatalf("writer stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer committed %d transactions, want %d", w.commits.Load(), target)
		}
		time.Sleep(5 * time.Millisecond) // the writer's pace, not a wait for a state
	}
}

// Finish stops the writer and fails t if it failed.
func (w *Writer) Finish(t testing.TB) {
	t.Helper()
	close(w.stop)
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
}

// Rows is a table's rows by encoded key.
type Rows map[string]sluice.Row

// CopySnapshot reads every table of snap through its readers, chunks
// spread over them.
func CopySnapshot(t testing.TB, snap *tablecopy.Snapshot) map[string]Rows {
	t.Helper()
	ctx := context.Background()
	out := map[string]Rows{}
	n := 0
	for _, tb := range snap.Tables {
		rows := Rows{}
		out[tb.Name.Name] = rows
		rs, _, err := snap.Readers[0].Split(ctx, tb, 37)
		if err != nil {
			t.Fatal(err)
		}
		for _, rg := range rs {
			rd := snap.Readers[n%len(snap.Readers)]
			n++
			err := rd.Read(ctx, tb, rg, func(b []sluice.Row) error {
				for _, r := range b {
					k := tablecopy.EncodeBound(tb.KeyOf(r))
					if _, dup := rows[k]; dup {
						return fmt.Errorf("%s: key %s read twice", tb.Name, k)
					}
					rows[k] = append(sluice.Row(nil), r...)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// ApplyChanges applies a stream's changes to rows; strict requires that
// each change finds the state the source had (an insert's key absent, an
// update's or delete's present): a change applied twice or missed breaks
// that.
func ApplyChanges(t testing.TB, rows map[string]Rows, cs []sluice.Change, strict bool) {
	t.Helper()
	for _, c := range cs {
		tr := rows[c.Table.Name.Name]
		switch c.Op {
		case sluice.OpInsert:
			k := tablecopy.EncodeBound(c.Table.KeyOf(c.Row))
			if _, ok := tr[k]; ok && strict {
				t.Errorf("%s: insert of %s, which the copy already has (applied twice?)", c.Table.Name, k)
			}
			tr[k] = c.Row
		case sluice.OpUpdate, sluice.OpDelete:
			old := tablecopy.EncodeBound(c.Key)
			if _, ok := tr[old]; !ok && strict {
				t.Errorf("%s: %s of %s, which the copy does not have (missed?)", c.Table.Name, c.Op, old)
			}
			delete(tr, old)
			if c.Op == sluice.OpUpdate {
				tr[tablecopy.EncodeBound(c.Table.KeyOf(c.Row))] = c.Row
			}
		}
	}
}
