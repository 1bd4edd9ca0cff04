package postgres

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// prefetched holds what Open read in its setup round trip for the stream's
// first requests (see apply.Prefetch). Each part is used once and then
// dropped: later requests read the database.
type prefetched struct {
	stream      string
	checkpoints []sluice.Checkpoint
	haveCPs     bool
	catalog     map[string][]targetColumn // by the ident catalogSQL was given
	names       map[string][2]string      // ident → schema, relname as resolved
	plan        *tablecopy.Plan
	havePlan    bool
	unique      map[string]bool               // by ident: HasUniqueKeys
	fks         map[string][]sluice.TableName // by ident: ForeignKeys
	txTimeout   *txLimit
	gen         int64         // the stream's generation, when Fence was asked
	rtt         time.Duration // the setup round trip's duration
	at          time.Time
}

// txLimit is TxTimeout's answer.
type txLimit struct {
	d    time.Duration
	what string
}

// queuePrefetch adds the prefetch queries to the setup batch.
func (t *Target) queuePrefetch(b *pgx.Batch, p *prefetched) {
	pf := t.cfg.Prefetch
	if pf.Stream != "" && !t.cfg.CheckOnly {
		p.stream = pf.Stream
		if pf.Fence {
			// The stream's next generation, before its checkpoints are
			// read (see Fence). An earlier process's batch holding the
			// fence makes the setup fail here; Fence then deals with it.
			b.Queue("SET LOCAL lock_timeout = '" + fenceWait.String() + "'")
			b.Queue(buildFenceBump(t.cfg.Schema), pf.Stream).QueryRow(func(r pgx.Row) error {
				return r.Scan(&p.gen)
			})
		}
		b.Queue(buildCheckpointSelect(t.cfg.Schema), pf.Stream).Query(func(rows pgx.Rows) error {
			cps, err := t.scanCheckpoints(rows, pf.Stream)
			p.checkpoints, p.haveCPs = cps, err == nil
			return err
		})
		// The copy's plan: a new stream reads it to copy or to refuse to
		// stream over an unfinished copy. Its tables are created here.
		for _, q := range buildCopyPlanDDL(t.cfg.Schema)[1:] {
			b.Queue(q)
		}
		t.queuePlan(b, pf.Stream, &p.plan)
	}
	for _, n := range pf.Tables {
		ident := tableIdent(n)
		if _, dup := p.catalog[ident]; dup {
			continue
		}
		if p.catalog == nil {
			p.catalog, p.names = map[string][]targetColumn{}, map[string][2]string{}
			p.unique, p.fks = map[string]bool{}, map[string][]sluice.TableName{}
		}
		p.catalog[ident] = nil
		b.Queue(catalogSQL, ident).Query(func(rows pgx.Rows) error {
			var schema, relname string
			var cols []targetColumn
			for rows.Next() {
				c, err := scanColumn(rows, &schema, &relname)
				if err != nil {
					return err
				}
				cols = append(cols, c)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			p.catalog[ident] = cols
			p.names[ident] = [2]string{schema, relname}
			return nil
		})
		b.Queue(uniqueKeysSQL, ident).QueryRow(func(r pgx.Row) error {
			var has bool
			err := r.Scan(&has)
			p.unique[ident] = has
			return err
		})
		b.Queue(foreignKeysSQL, ident).Query(func(rows pgx.Rows) error {
			fks, err := scanTableNames(rows)
			p.fks[ident] = fks
			return err
		})
	}
	b.Queue(txTimeoutSQL).Query(func(rows pgx.Rows) error {
		d, what, err := scanTxTimeout(rows)
		if err == nil {
			p.txTimeout = &txLimit{d, what}
		}
		return err
	})
}

// takeCatalog returns the prefetched catalog rows of ident, once.
func (t *Target) takeCatalog(ident string) (cols []targetColumn, schema, relname string, ok bool) {
	if t.pre == nil {
		return nil, "", "", false
	}
	cols, ok = t.pre.catalog[ident]
	if !ok {
		return nil, "", "", false
	}
	delete(t.pre.catalog, ident)
	n := t.pre.names[ident]
	return cols, n[0], n[1], true
}

// ForgetTables drops what the setup round trip read of the stream's
// tables (columns, unique keys, foreign keys) and the checks made with it:
// sluice changed their schema since (it created them, or their indexes),
// so the next requests read the catalog.
func (t *Target) ForgetTables() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pre != nil {
		t.pre.catalog, t.pre.names, t.pre.unique, t.pre.fks = nil, nil, nil, nil
	}
	clear(t.tables)
}
