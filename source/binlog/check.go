package binlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/source/internal/myfk"
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
	db, ci, err := openDB(dsnOrURL)
	if err != nil {
		return rep, rep.Fail("source connection", err)
	}
	defer db.Close()
	r := &Reader{cfg: cfg, log: cfg.Logger.With("source", "binlog"), db: db, conn: ci, repl: map[string]*sluice.Table{}}
	obj := fmt.Sprintf("source %s:%d", ci.host, ci.port)
	info, err := r.preflight(ctx)
	if err != nil {
		return rep, rep.Fail(obj, err)
	}
	rep.Pass(obj, fmt.Sprintf("%s; log_bin, binlog_format=ROW, binlog_row_image=FULL; replication privileges of %s", info.version, ci.user))
	if t, err := r.qualifyTables(); err != nil {
		return rep, rep.Fail("table "+t.Name, err)
	}
	if err := r.loadCollations(ctx); err != nil {
		return rep, rep.Fail(obj, err)
	}
	if err := r.describe(ctx); err != nil {
		return rep, rep.Fail("tables "+source.TableList(r.cfg.Tables), err)
	}
	for _, t := range r.tables {
		rep.Tables = append(rep.Tables, t)
		rep.Pass("table "+t.Name.String(), fmt.Sprintf("%d columns, primary key (%s)", len(t.Columns), strings.Join(t.KeyNames(), ", ")))
	}
	if rep.ForeignKeys, err = myfk.Read(ctx, db, r.cfg.Tables); err != nil {
		return rep, rep.Fail("foreign keys of "+source.TableList(r.cfg.Tables), err)
	}
	start, err := r.startPosition(ctx, info, sluice.Position{})
	if err != nil {
		return rep, rep.Fail("binlog position", err)
	}
	rep.Pass("binlog position", "would start at "+start.token())
	return rep, nil
}
