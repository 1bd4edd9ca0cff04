package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
)

// Check runs the validations Open runs (log_bin, binlog_format,
// binlog_row_image and the other settings, replication privileges, every
// table's existence and primary key, and the start position) without
// starting a binlog dump. The binlog reader installs nothing on the
// source, so Check only reads.
func Check(ctx context.Context, dsnOrURL string, cfg Config) (source.Report, error) {
	var rep source.Report
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.Tables) == 0 {
		return rep, rep.Fail("configuration", errors.New("binlog: no tables to stream"))
	}
	dcfg, err := parseConn(dsnOrURL)
	if err != nil {
		return rep, rep.Fail("source connection", err)
	}
	ci, err := connOf(dcfg)
	if err != nil {
		return rep, rep.Fail("source connection", err)
	}
	dcfg.ParseTime = false
	if dcfg.Params == nil {
		dcfg.Params = map[string]string{}
	}
	dcfg.Params["time_zone"] = "'+00:00'"
	db, err := sql.Open("mysql", dcfg.FormatDSN())
	if err != nil {
		return rep, rep.Fail("source connection", fmt.Errorf("binlog: open %s: %w", ci.host, err))
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	r := &Reader{cfg: cfg, log: cfg.Logger.With("source", "binlog"), db: db, conn: ci, repl: map[string]*sluice.Table{}}
	obj := fmt.Sprintf("source %s:%d", ci.host, ci.port)
	info, err := r.preflight(ctx)
	if err != nil {
		return rep, rep.Fail(obj, err)
	}
	rep.Pass(obj, fmt.Sprintf("%s; log_bin, binlog_format=ROW, binlog_row_image=FULL; replication privileges of %s", info.version, ci.user))
	r.cfg.Tables = make([]sluice.TableName, len(cfg.Tables))
	for i, t := range cfg.Tables {
		if t.Schema == "" {
			if ci.dbName == "" {
				return rep, rep.Fail("table "+t.Name, fmt.Errorf("binlog: table %s has no database and the connection names none: write it as db.table", t.Name))
			}
			t.Schema = ci.dbName
		}
		r.cfg.Tables[i] = t
	}
	if err := r.loadCollations(ctx); err != nil {
		return rep, rep.Fail(obj, err)
	}
	if err := r.describe(ctx); err != nil {
		return rep, rep.Fail("tables "+tableList(r.cfg.Tables), err)
	}
	for _, t := range r.tables {
		rep.Tables = append(rep.Tables, t)
		rep.Pass("table "+t.Name.String(), fmt.Sprintf("%d columns, primary key (%s)", len(t.Columns), strings.Join(t.KeyNames(), ", ")))
	}
	start, err := r.startPosition(ctx, info, sluice.Position{})
	if err != nil {
		return rep, rep.Fail("binlog position", err)
	}
	rep.Pass("binlog position", "would start at "+start.token())
	return rep, nil
}

func tableList(tables []sluice.TableName) string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}
