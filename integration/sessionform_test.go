package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	wlgen "github.com/sluice-cdc/sluice/internal/workload"
	"github.com/sluice-cdc/sluice/source/binlog"
)

// sessionTail is how many transactions a MariaDB source's randomized run
// generates past its n, for the session form to begin in.
const sessionTail = 12

// runSessionForm goes on with a converged randomized run from a MariaDB
// source: the transactions from w.Txs[from] on run in a session that logs
// them in form (binlog_row_image NOBLOB or MINIMAL, binlog_format
// STATEMENT or MIXED). A trigger stream sees full rows whatever the
// session logs, and must converge again. A binlog stream must stop at the
// first statement of transaction from, before anything of it: with a
// binlog.SessionLogError naming the statement's table and the setting,
// and with the target still equal to the source as it was before (a copy
// of each table, taken on the source, is the reference). It returns the
// differences and why, as waitCompared does, and whether the stream
// stopped as it should.
func runSessionForm(t *testing.T, w *wlgen.Workload, form wlgen.SessionForm, from int, src randomizedSource, s, d *endpoint,
	run *running, within time.Duration) (dbtest.Diffs, string, bool) {
	t.Helper()
	ctx := context.Background()
	tables := w.Schema.TableNames()
	srcDB, srcCmp := workloadDB(s)
	_, dstCmp := workloadDB(d)
	if src.mode == daemon.ModeTrigger {
		if err := w.ApplyInSession(ctx, srcDB, w.Txs[from:], form); err != nil {
			t.Fatal(err)
		}
		diffs, why := waitCompared(t, srcCmp, dstCmp, tables, run, within)
		if why != "" {
			why = fmt.Sprintf("after transactions %d… in a session with %s: %s", from, form.Setting(), why)
		}
		return diffs, why, false
	}
	for _, tb := range tables {
		// The copy computes its generated columns itself: only the
		// others are written.
		var cols string
		if err := s.my.QueryRowContext(ctx, `SELECT GROUP_CONCAT(CONCAT('`+"`"+`', COLUMN_NAME, '`+"`"+`') ORDER BY ORDINAL_POSITION)
			FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COALESCE(GENERATION_EXPRESSION, '') = ''`, tb).Scan(&cols); err != nil {
			t.Fatalf("list the written columns of %s: %v", tb, err)
		}
		for _, q := range []string{"CREATE TABLE before_" + tb + " LIKE " + tb, "INSERT INTO before_" + tb + " (" + cols + ") SELECT " + cols + " FROM " + tb} {
			if err := s.exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	if err := w.ApplyInSession(ctx, srcDB, w.Txs[from:], form); err != nil {
		t.Fatal(err)
	}
	first := w.Txs[from].Stmts[0]
	var err error
	select {
	case err = <-run.done:
		run.done <- err
	case <-time.After(within):
		return nil, fmt.Sprintf("transactions %d… ran in a session with %s, and the stream did not stop within %v", from, form.Setting(), within), false
	}
	var se *binlog.SessionLogError
	switch {
	case !errors.As(err, &se):
		return nil, fmt.Sprintf("in a session with %s, the stream stopped with %v, want a binlog.SessionLogError", form.Setting(), err), false
	case se.Table.Name != first.Table.Name || se.Statement != (form == wlgen.Statement || form == wlgen.Mixed) || !strings.Contains(se.Setting, string(form)):
		return nil, fmt.Sprintf("in a session with %s, the first statement of transaction %d (%s %s) should stop the stream; it stopped with: %v",
			form.Setting(), from, first.Op, first.Table.Name, err), false
	}
	var diffs dbtest.Diffs
	for _, tb := range tables {
		diff, cerr := dbtest.CompareTableAs(ctx, srcCmp, "before_"+tb, dstCmp, tb)
		if cerr != nil {
			t.Fatalf("compare: %v", cerr)
		}
		diffs = append(diffs, diff)
	}
	if !diffs.Equal() {
		return diffs, fmt.Sprintf("the stream stopped as it should (%v), but the target no longer equals the source as it was before the session's transactions", err), true
	}
	t.Logf("transactions %d… in a session with %s: the stream stopped at the first: %v", from, form.Setting(), err)
	return nil, "", true
}
