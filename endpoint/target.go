package endpoint

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	mysqltarget "github.com/sluice-cdc/sluice/apply/mysql"
	"github.com/sluice-cdc/sluice/apply/postgres"
	"github.com/sluice-cdc/sluice/apply/typemap"
	"github.com/sluice-cdc/sluice/stream"
)

// TargetOptions say how to open a target.
type TargetOptions struct {
	URL string
	// Mode is the apply mode: "pipelined" ("" too) or "per-row".
	Mode string
	// SourceEngine is the source's engine: a target is wrapped in the
	// cross-engine type map where NeedsTypeMap says. "": not wrapped.
	SourceEngine Engine
	// MultiStatements is "auto", "on" or "off" (MySQL targets).
	MultiStatements string
	// AllowCollationMerge accepts target key columns whose collation holds
	// as equal values the source keeps apart.
	AllowCollationMerge bool
	Logger              *slog.Logger
	// Prefetch is what the target reads in its setup round trip.
	Prefetch apply.Prefetch
	// CheckOnly opens the target for its checks alone: sluice's tables
	// (the checkpoint table) are not created.
	CheckOnly bool
	// Dial, when set, makes the target's connections (diagnose measures
	// through a delaying proxy).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Target is an opened target, as OpenTarget returns it.
type Target interface {
	HasUniqueKeys(ctx context.Context, name sluice.TableName) (bool, error)
	// TxTimeout is the target's limit on a transaction's time, and what
	// sets it; zero when it has none.
	TxTimeout(ctx context.Context) (time.Duration, string, error)
	// OldestTransaction describes the oldest open transaction on the
	// target besides the applier's, for a stall's diagnosis.
	OldestTransaction(ctx context.Context) (string, error)
	stream.Target
	Preflight(ctx context.Context, tables []*sluice.Table) error
	ReadCheckpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error)
	ReadCheckpoints(ctx context.Context, stream string) ([]sluice.Checkpoint, error)
	ForeignKeys(ctx context.Context, name sluice.TableName) ([]sluice.TableName, error)
	Close(ctx context.Context) error
}

// crossTarget is a target the cross-engine type map can wrap.
type crossTarget interface {
	Target
	ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error)
}

// NeedsTypeMap is the wrap rule: a target is written through the
// cross-engine type map when the source's engine differs, and for every
// MySQL target (it names tables without the source's schema).
func NeedsTypeMap(src, dst Engine) bool {
	return src != dst || dst == EngineMySQL
}

// OpenTarget opens the target o.URL names, wrapped in the cross-engine
// type map where NeedsTypeMap says (when o.SourceEngine is set).
func OpenTarget(ctx context.Context, o TargetOptions) (Target, error) {
	eng, err := EngineOf(o.URL)
	if err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	mode, err := apply.ParseMode(o.Mode)
	if err != nil {
		return nil, fmt.Errorf("--apply-mode: %w", err)
	}
	var tgt crossTarget
	switch eng {
	case EnginePostgres:
		t, err := postgres.Open(ctx, o.URL, postgres.Config{Mode: mode, AllowCollationMerge: o.AllowCollationMerge, Logger: o.Logger,
			Prefetch: o.Prefetch, CheckOnly: o.CheckOnly, Dial: o.Dial})
		if err != nil {
			return nil, err
		}
		tgt = t
	case EngineMySQL:
		cfg := mysqltarget.Config{Mode: mode, AllowCollationMerge: o.AllowCollationMerge, Logger: o.Logger,
			Prefetch: o.Prefetch, CheckOnly: o.CheckOnly, Dial: o.Dial}
		switch o.MultiStatements {
		case "", "auto":
		case "on", "off":
			on := o.MultiStatements == "on"
			cfg.MultiStatements = &on
		default:
			return nil, fmt.Errorf("--multi-statements %q: want auto, on or off", o.MultiStatements)
		}
		t, err := mysqltarget.Open(ctx, o.URL, cfg)
		if err != nil {
			return nil, err
		}
		tgt = t
	default:
		return nil, fmt.Errorf("--target: %s targets are not supported", eng)
	}
	if o.SourceEngine != "" && NeedsTypeMap(o.SourceEngine, eng) {
		return typemap.Wrap(tgt, typemap.Engine(o.SourceEngine), typemap.Engine(eng)), nil
	}
	return tgt, nil
}
