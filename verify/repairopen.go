package verify

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluice-cdc/sluice/apply"
	mysqltarget "github.com/sluice-cdc/sluice/apply/mysql"
	"github.com/sluice-cdc/sluice/apply/postgres"
	"github.com/sluice-cdc/sluice/apply/typemap"
	"github.com/sluice-cdc/sluice/connstr"
)

// RepairOptions are the stream's target settings a repair writes with.
type RepairOptions struct {
	AllowCollationMerge bool
}

// OpenRepair opens the target at targetRaw for a repair, as sync start
// opens it (through the cross-engine type map where sync start would go
// through it, without creating sluice's tables), and reads the source
// (sourceRaw, opened as source) for it. close closes the target.
func OpenRepair(ctx context.Context, sourceRaw, targetRaw string, source Side, o RepairOptions) (rc RepairConfig, closeTarget func(), err error) {
	f, err := connstr.FormOf(targetRaw)
	if err != nil {
		return RepairConfig{}, nil, fmt.Errorf("--target %s: %w", connstr.Mask(targetRaw), err)
	}
	from, to := typemap.Postgres, typemap.Engine(f.Engine())
	if source.Dialect() == MySQL {
		from = typemap.MySQL
	}
	log := slog.New(slog.DiscardHandler)
	var inner typemap.Inner
	switch f.Engine() {
	case "postgres":
		inner, err = postgres.Open(ctx, targetRaw, postgres.Config{Mode: apply.Pipelined, AllowCollationMerge: o.AllowCollationMerge, Logger: log, CheckOnly: true})
	case "mysql":
		inner, err = mysqltarget.Open(ctx, targetRaw, mysqltarget.Config{Mode: apply.Pipelined,
			AllowCollationMerge: o.AllowCollationMerge, Logger: log, CheckOnly: true})
	default:
		return RepairConfig{}, nil, fmt.Errorf("--target %s: not a PostgreSQL or MySQL connection string", connstr.Mask(targetRaw))
	}
	if err != nil {
		return RepairConfig{}, nil, fmt.Errorf("--target: %w", err)
	}
	closeTarget = func() { inner.Close(context.WithoutCancel(ctx)) }
	// As daemon.openTarget: the type map between engines, and for every
	// MySQL target (it names tables without the source's schema).
	var tgt RepairTarget
	if from != to || to == typemap.MySQL {
		tgt = typemap.Wrap(inner, from, to)
	} else if r, ok := inner.(RepairTarget); ok {
		tgt = r
	} else {
		closeTarget()
		return RepairConfig{}, nil, fmt.Errorf("--target: the %s target cannot write a repair", to)
	}
	return RepairConfig{Target: tgt, OpenRows: OpenRows(sourceRaw, source)}, closeTarget, nil
}
