package verify

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/endpoint"
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
	if _, err := endpoint.EngineOf(targetRaw); err != nil {
		return RepairConfig{}, nil, fmt.Errorf("--target: %w", err)
	}
	from := endpoint.EnginePostgres
	if source.Dialect() == MySQL {
		from = endpoint.EngineMySQL
	}
	t, err := endpoint.OpenTarget(ctx, endpoint.TargetOptions{URL: targetRaw, SourceEngine: from,
		AllowCollationMerge: o.AllowCollationMerge, Logger: slog.New(slog.DiscardHandler), CheckOnly: true})
	if err != nil {
		return RepairConfig{}, nil, fmt.Errorf("--target: %w", err)
	}
	closeTarget = func() { t.Close(context.WithoutCancel(ctx)) }
	tgt, ok := t.(RepairTarget)
	if !ok {
		closeTarget()
		return RepairConfig{}, nil, fmt.Errorf("--target %s: the target cannot write a repair", connstr.Mask(targetRaw))
	}
	return RepairConfig{Target: tgt, OpenRows: OpenRows(sourceRaw, source)}, closeTarget, nil
}
