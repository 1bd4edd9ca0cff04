package verify

import (
	"context"
	"fmt"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// Open opens a side from a connection string in any form sluice takes
// (see connstr). role ("--source", "--target") names it in errors, which
// never echo the string.
func Open(ctx context.Context, role, raw string) (Side, error) {
	f, err := connstr.FormOf(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", role, connstr.Mask(raw), err)
	}
	switch f.Engine() {
	case "postgres":
		s, err := OpenPostgres(ctx, raw, "")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		return s, nil
	case "mysql":
		cfg, err := connstr.ParseMySQL(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		s, err := OpenMySQL(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("%s %s: not a PostgreSQL or MySQL connection string", role, connstr.Mask(raw))
}

// Covers compares positions of the readers sluice has: whether a target
// at checkpoint p holds every change up to source position c.
func Covers(p, c sluice.Position) (bool, error) {
	if p.Kind != c.Kind {
		return false, fmt.Errorf("positions %s and %s are of different readers", p, c)
	}
	var covers func(p, c sluice.Position) (bool, bool, error)
	switch p.Kind {
	case pglogical.Kind:
		covers = pglogical.Covers
	case binlog.Kind:
		covers = binlog.Covers
	case mytrigger.Kind:
		covers = mytrigger.Covers
	case pgtrigger.Kind:
		covers = pgtrigger.Covers
	default:
		return false, fmt.Errorf("position %s: verify cannot compare positions of reader %q", p, p.Kind)
	}
	ok, _, err := covers(p, c)
	return ok, err
}
