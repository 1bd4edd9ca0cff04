package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// defaultTxTimeout is the transaction time limit assumed of a target that
// sets none.
const defaultTxTimeout = 60 * time.Second

// killBudget works out the stream's kill budget: --kill-budget when set,
// otherwise a quarter of the target's transaction time limit, which is
// --target-tx-timeout when set, otherwise detected from the target
// (Vitess/PlanetScale: 20 s; a limit the target's settings impose),
// otherwise 60 s. A quarter leaves room for a prediction that is off by 2×
// and a retry before the target's killer fires.
func killBudget(ctx context.Context, log *slog.Logger, o StreamOptions, tgt target) (time.Duration, error) {
	limit, limitFrom := o.TargetTxTimeout, "--target-tx-timeout"
	if limit <= 0 {
		d, what, err := tgt.TxTimeout(ctx)
		if err != nil {
			return 0, fmt.Errorf("%w (set --target-tx-timeout, or --kill-budget, to skip the detection)", err)
		}
		limit, limitFrom = d, what
		if d <= 0 {
			limit, limitFrom = defaultTxTimeout, "none found on the target: assumed"
		}
	}
	budget, budgetFrom := o.KillBudget, "--kill-budget"
	if budget <= 0 {
		budget, budgetFrom = limit/4, "a quarter of the target's transaction time limit"
	}
	if budget >= limit {
		log.Warn("the kill budget is not under the target's transaction time limit: a batch that takes its budget is killed; lower --kill-budget",
			"stream", o.ID, "kill_budget", budget.String(), "target_tx_timeout", limit.String(), "limit_from", limitFrom)
	}
	log.Info("kill budget", "stream", o.ID, "kill_budget", budget.String(), "budget_from", budgetFrom,
		"target_tx_timeout", limit.String(), "limit_from", limitFrom)
	return budget, nil
}
