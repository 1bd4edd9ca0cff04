package mytrigger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/source/internal/myfk"
)

// Check runs the validations Open runs (every table's existence and
// primary key) and reports which capture objects are installed and which
// sync start would install, reading only information_schema: it creates
// no changelog table and no trigger.
func Check(ctx context.Context, dsnOrURL string, cfg Config) (source.Report, error) {
	var rep source.Report
	mcfg, err := connstr.ParseMySQL(dsnOrURL)
	if err != nil {
		return rep, rep.Fail("source connection", err)
	}
	connector, err := mysql.NewConnector(mcfg)
	if err != nil {
		return rep, rep.Fail("source connection", err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	conn, logDB, err := session(ctx, db)
	if err != nil {
		return rep, rep.Fail("source "+mcfg.Addr, fmt.Errorf("connect to MySQL source at %s as %s: %w", mcfg.Addr, mcfg.User, err))
	}
	defer conn.Close()
	rep.Pass("source "+mcfg.Addr, "connected as "+mcfg.User+" to database "+logDB)
	tables := normalize(cfg.Tables, logDB)
	var missing []string
	for _, name := range []string{ChangelogTable, ConsumerTable, PrunedTable} {
		ok, err := tableExists(ctx, conn, logDB, name)
		if err != nil {
			return rep, rep.Fail("table "+logDB+"."+name, err)
		}
		if !ok {
			missing = append(missing, "table "+logDB+"."+name)
		}
	}
	for _, t := range tables {
		info, err := lookupTable(ctx, conn, t)
		if err != nil {
			return rep, rep.Fail("table "+t.String(), err)
		}
		rep.Tables = append(rep.Tables, info.table)
		rep.Pass("table "+t.String(), fmt.Sprintf("%d columns, primary key (%s)", len(info.table.Columns), strings.Join(info.keyNames(), ", ")))
		have, err := lookupTriggers(ctx, conn, t)
		if err != nil {
			return rep, rep.Fail("triggers on "+t.String(), err)
		}
		for _, e := range events {
			tr, ok := have[e.suffix]
			if !current(tr, ok, logDB, info, e) {
				missing = append(missing, "trigger "+triggerName(t.Name, e)+" on "+t.String())
			}
		}
	}
	if rep.ForeignKeys, err = myfk.Read(ctx, conn, tables); err != nil {
		return rep, rep.Fail("foreign keys of "+source.TableList(tables), err)
	}
	obj := "capture in database " + logDB
	if len(missing) == 0 {
		rep.Pass(obj, "installed on "+source.TableList(tables))
		return rep, nil
	}
	if !cfg.Install {
		return rep, rep.Fail(obj, fmt.Errorf("trigger capture is not installed (missing: %s): run sluice source install", strings.Join(missing, "; ")))
	}
	rep.Pass(obj, "would install capture on tables "+source.TableList(tables)+": "+strings.Join(missing, "; "))
	return rep, nil
}
