package pglogical

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice/source"
)

// Check runs the validations Open runs (server settings, the role's
// privileges, every table's existence, primary key and replica identity)
// and reports the publication's and the slot's state, reading only: it
// creates no publication and no slot. It returns the first failure as its
// error, with the report so far.
func Check(ctx context.Context, connString string, cfg Config) (source.Report, error) {
	var rep source.Report
	cfg, err := cfg.withDefaults()
	if err != nil {
		return rep, rep.Fail("configuration", err)
	}
	conn, err := connectSQL(ctx, connString)
	if err != nil {
		return rep, rep.Fail("source connection", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	addr := addrOf(conn.Config().Host, conn.Config().Port)
	rep.Pass("source "+addr, "connected as "+conn.Config().User+" to database "+conn.Config().Database)
	slot, err := lookupSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return rep, rep.Fail("replication slot "+cfg.Slot, err)
	}
	if err := preflight(ctx, conn, cfg, !slot.exists); err != nil {
		return rep, rep.Fail("source "+addr+" settings", err)
	}
	rep.Pass("source "+addr+" settings", "wal_level=logical, role may replicate, a WAL sender and a slot are free")
	db := conn.Config().Database
	for _, t := range cfg.Tables {
		info, err := describe(ctx, conn, db, t)
		if err != nil {
			return rep, rep.Fail("table "+t.String(), err)
		}
		rep.Tables = append(rep.Tables, info.table)
		detail := fmt.Sprintf("%d columns, primary key (%s)", len(info.table.Columns), joinKeys(info.table.KeyNames()))
		if info.leaves != nil {
			detail += fmt.Sprintf(", partitioned: %d leaf partitions, streamed through the table", len(info.leaves))
		}
		rep.Pass("table "+t.String(), detail)
	}
	infos, err := describeAll(ctx, conn, db, cfg.Tables)
	if err != nil {
		return rep, rep.Fail("table list", err)
	}
	if err := checkPublication(ctx, conn, cfg, infos, &rep); err != nil {
		return rep, err
	}
	switch {
	case !slot.exists:
		rep.Pass("replication slot "+cfg.Slot, "would create slot "+cfg.Slot+" (pgoutput)")
	case slot.plugin != "pgoutput" || slot.database != db:
		return rep, rep.Fail("replication slot "+cfg.Slot, fmt.Errorf("replication slot %s exists but belongs to database %q with plugin %q, not database %q with pgoutput: choose another slot name or drop it (SELECT pg_drop_replication_slot('%s'))",
			cfg.Slot, slot.database, slot.plugin, db, cfg.Slot))
	default:
		rep.Pass("replication slot "+cfg.Slot, "slot "+cfg.Slot+" exists at LSN "+slot.confirmed.String())
	}
	return rep, nil
}

// checkPublication reports what ensurePublication would do, reading only.
func checkPublication(ctx context.Context, conn *pgx.Conn, cfg Config, infos []*tableInfo, rep *source.Report) error {
	obj := "publication " + cfg.Publication
	var all bool
	err := conn.QueryRow(ctx, `SELECT puballtables FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&all)
	if errors.Is(err, pgx.ErrNoRows) {
		rep.Pass(obj, fmt.Sprintf("would create publication %s for %d tables", cfg.Publication, len(cfg.Tables)))
		return nil
	}
	if err != nil {
		return rep.Fail(obj, fmt.Errorf("look up publication %s: %w", cfg.Publication, err))
	}
	missing, err := unpublished(ctx, conn, cfg, infos)
	if err != nil {
		return rep.Fail(obj, err)
	}
	if all {
		rep.Pass(obj, "exists FOR ALL TABLES")
		return nil
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, in := range missing {
			names[i] = in.table.Name.String()
		}
		rep.Pass(obj, "exists; would add tables "+joinKeys(names))
		return nil
	}
	rep.Pass(obj, "exists with every table")
	return nil
}

func joinKeys(s []string) string {
	out := ""
	for i, k := range s {
		if i > 0 {
			out += ", "
		}
		out += k
	}
	return out
}
