package pgtrigger

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice/source"
)

// Check runs the validations Open runs (every table's existence and
// primary key) and reports which capture objects are installed and which
// sync start would install, reading only the catalog: it creates no
// schema, table, function or trigger.
func Check(ctx context.Context, connString string, cfg Config) (source.Report, error) {
	var rep source.Report
	schema := cfg.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	pcfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return rep, rep.Fail("source connection", fmt.Errorf("parse the source connection string: %w", err))
	}
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return rep, rep.Fail("source connection", fmt.Errorf("connect to PostgreSQL source at %s:%d as %s: %w", pcfg.Host, pcfg.Port, pcfg.User, err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rep.Pass(fmt.Sprintf("source %s:%d", pcfg.Host, pcfg.Port), "connected as "+pcfg.User+" to database "+pcfg.Database)
	tables := normalize(cfg.Tables)
	for _, t := range tables {
		info, err := lookupTable(ctx, conn, pcfg.Database, t)
		if err != nil {
			return rep, rep.Fail("table "+t.String(), err)
		}
		rep.Tables = append(rep.Tables, info.table)
		detail := fmt.Sprintf("%d columns, primary key (%s)", len(info.table.Columns), strings.Join(info.keyNames(), ", "))
		if info.partitioned {
			detail += fmt.Sprintf(", partitioned: %d partitions, captured through the table's cloned trigger", len(info.parts))
		}
		rep.Pass("table "+t.String(), detail)
	}
	missing, err := missingObjects(ctx, conn, schema, tables)
	if err != nil {
		return rep, rep.Fail("capture in schema "+schema, err)
	}
	if len(missing) == 0 {
		rep.Pass("capture in schema "+schema, "installed on "+source.TableList(tables))
		return rep, nil
	}
	if !cfg.Install {
		return rep, rep.Fail("capture in schema "+schema, fmt.Errorf("trigger capture is not installed (missing: %s): run sluice source install", strings.Join(missing, "; ")))
	}
	rep.Pass("capture in schema "+schema, "would install capture on tables "+source.TableList(tables)+": "+strings.Join(missing, "; "))
	return rep, nil
}
