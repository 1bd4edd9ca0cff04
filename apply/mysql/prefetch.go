package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// prefetched holds what Open read in its setup packet for the stream's
// first requests (see apply.Prefetch). Each part is used once and then
// dropped: later requests read the database.
type prefetched struct {
	stream      string
	checkpoints []sluice.Checkpoint
	haveCPs     bool
	plan        *tablecopy.Plan
	havePlan    bool
	tables      map[string]*prefetchedTable // by table name, in the connection's database
	version     string
	comment     string
	vars        map[string]string
	haveTx      bool
	gen         int64         // the stream's generation, when Fence was asked
	rtt         time.Duration // the setup packet's round trip
	at          time.Time
}

// prefetchedTable is a table's catalog rows; each reader takes its own
// copy once.
type prefetchedTable struct {
	cols          []targetColumn
	indexes       map[string][]string
	indexOrder    []string
	fks           []sluice.TableName
	takenByLoad   bool
	takenByType   bool
	takenByUnique bool
	takenByFKs    bool
}

// errSetupPacket marks a failure of the setup packet: Open sets up
// again one statement at a time, so that a failure (or a server that
// refuses multi-statement packets) is met as it was before the packet.
var errSetupPacket = errors.New("setup packet failed")

// setupPacket checks a new connection's session as ensureConn does and,
// in the same multi-statement packet, creates the checkpoint table and
// prefetches: one round trip for all of Open's queries and the stream's
// first requests.
func (t *Target) setupPacket(ctx context.Context, conn *sql.Conn) (mode string, maxPacket int, version string, err error) {
	stmts := []string{sessionSQL}
	if !t.cfg.CheckOnly {
		stmts = append(stmts, checkpointDDL, fenceDDL, checkpointHasLanes)
	}
	pf := t.cfg.Prefetch
	pre := &prefetched{tables: map[string]*prefetchedTable{}}
	fence := pf.Fence && pf.Stream != "" && !t.cfg.CheckOnly
	if fence {
		// The stream's next generation, before its checkpoints are read
		// (see Fence). An earlier process's batch holding the fence makes
		// the packet fail here (lock wait timeout); Fence then deals with
		// it. The packet runs in autocommit: the take commits at once.
		stmts = append(stmts, "SET SESSION innodb_lock_wait_timeout = "+strconv.Itoa(int(fenceWait.Seconds())),
			fenceBump(pf.Stream), "SET SESSION innodb_lock_wait_timeout = DEFAULT", fenceRead(pf.Stream))
	}
	if pf.Stream != "" && !t.cfg.CheckOnly {
		pre.stream = pf.Stream
		// The copy's plan: a new stream reads it to copy or to refuse to
		// stream over an unfinished copy. Its tables are created here.
		stmts = append(stmts, buildCheckpointSelect(pf.Stream), copyPlanDDL, copyChunkDDL, planSQL(pf.Stream))
	}
	var names []string
	for _, n := range pf.Tables {
		if _, dup := pre.tables[n.Name]; dup {
			continue
		}
		pre.tables[n.Name] = nil
		names = append(names, n.Name)
		var nb strings.Builder
		quoteString(&nb, n.Name)
		stmts = append(stmts, fmt.Sprintf(columnsSQL, "DATABASE()", nb.String()), fmt.Sprintf(indexesSQL, "DATABASE()", nb.String()),
			foreignKeysSQL("DATABASE()", nb.String()))
	}
	stmts = append(stmts, versionSQL, txVarsSQL)

	start := time.Now()
	rows, err := conn.QueryContext(ctx, strings.Join(stmts, ";\n"))
	if err != nil {
		return "", 0, "", fmt.Errorf("%w: %w", errSetupPacket, err)
	}
	defer rows.Close()
	// next moves to the next result set (statements without one, the
	// CREATE TABLE, are skipped by the driver).
	first := true
	next := func() error {
		if first {
			first = false
			return nil
		}
		if !rows.NextResultSet() {
			if err := rows.Err(); err != nil {
				return err
			}
			return errors.New("fewer result sets than statements")
		}
		return nil
	}
	fail := func(err error) (string, int, string, error) {
		return "", 0, "", fmt.Errorf("%w: %w", errSetupPacket, err)
	}
	if err := next(); err != nil {
		return fail(err)
	}
	if !rows.Next() {
		return fail(fmt.Errorf("session check: no row: %v", rows.Err()))
	}
	if err := rows.Scan(&mode, &maxPacket, &t.database, &version, &t.connID); err != nil {
		return fail(err)
	}
	if !t.cfg.CheckOnly {
		if err := next(); err != nil {
			return fail(err)
		}
		var n int
		if !rows.Next() {
			return fail(fmt.Errorf("checkpoint table check: no row: %v", rows.Err()))
		}
		if err := rows.Scan(&n); err != nil {
			return fail(err)
		}
		if n == 0 {
			// An old checkpoint table: the sequential path upgrades it.
			return fail(errors.New("checkpoint table needs an upgrade"))
		}
	}
	if fence {
		if err := next(); err != nil {
			return fail(err)
		}
		if !rows.Next() {
			return fail(fmt.Errorf("fence: no row: %v", rows.Err()))
		}
		if err := rows.Scan(&pre.gen); err != nil {
			return fail(err)
		}
	}
	if pre.stream != "" {
		if err := next(); err != nil {
			return fail(err)
		}
		if pre.checkpoints, err = t.scanCheckpoints(rows, pre.stream); err != nil {
			return fail(err)
		}
		pre.haveCPs = true
		if err := next(); err != nil {
			return fail(err)
		}
		if pre.plan, err = scanPlan(rows, pre.stream); err != nil {
			return fail(err)
		}
		pre.havePlan = true
	}
	for _, name := range names {
		pt := &prefetchedTable{}
		if err := next(); err != nil {
			return fail(err)
		}
		if pt.cols, err = scanColumns(rows); err != nil {
			return fail(err)
		}
		if err := next(); err != nil {
			return fail(err)
		}
		if pt.indexes, pt.indexOrder, err = scanIndexes(rows); err != nil {
			return fail(err)
		}
		if err := next(); err != nil {
			return fail(err)
		}
		if pt.fks, err = t.scanTableNames(rows); err != nil {
			return fail(err)
		}
		pre.tables[name] = pt
	}
	if err := next(); err != nil {
		return fail(err)
	}
	if !rows.Next() {
		return fail(fmt.Errorf("version: no row: %v", rows.Err()))
	}
	if err := rows.Scan(&pre.version, &pre.comment); err != nil {
		return fail(err)
	}
	if err := next(); err != nil {
		return fail(err)
	}
	if pre.vars, err = scanTxVars(rows); err != nil {
		return fail(err)
	}
	pre.haveTx = true
	pre.rtt, pre.at = time.Since(start), time.Now()
	t.pre = pre
	if pre.gen > 0 {
		t.gen, t.genStream = pre.gen, pre.stream
	}
	return mode, maxPacket, version, nil
}

// prefetchedTableOf returns the prefetched catalog of a table in the
// connection's database, if any.
func (t *Target) prefetchedTableOf(name sluice.TableName) *prefetchedTable {
	if t.pre == nil || (name.Schema != "" && name.Schema != t.database) {
		return nil
	}
	return t.pre.tables[name.Name]
}

// ForgetTables drops what the setup packet read of the stream's tables
// (columns, indexes, foreign keys) and the checks made with it: sluice
// changed their schema since (it created them, or their indexes), so the
// next requests read the catalog.
func (t *Target) ForgetTables() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pre != nil {
		t.pre.tables = nil
	}
	clear(t.tables)
}
