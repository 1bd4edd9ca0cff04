package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/diagnose"
	"github.com/urfave/cli/v2"
)

func diagnoseTargetFlag() cli.Flag {
	return &cli.StringFlag{Name: "target", EnvVars: env("TARGET"),
		Usage: "(required) target database: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or user:pass@tcp(host:3306)/db"}
}

func diagnoseCommand() *cli.Command {
	return &cli.Command{
		Name:  "diagnose",
		Usage: "measure the link to a target and what a batch costs on it",
		Subcommands: []*cli.Command{
			{
				Name:  "static-batch",
				Usage: "apply fixed-size batches per apply mode to a scratch table and tell whether the apply path is round-trip-bound",
				Description: "Creates a scratch table on the target (id bigint primary key, v varchar(100), n bigint; refused if the\n" +
					"name exists), measures the RTT, then for each mode and batch size applies batches of new rows with\n" +
					"sluice's own target code, counting round trips and timing each transaction, and drops the table at the\n" +
					"end (also on error or Ctrl-C). A cell predicted to take longer than --max-time is skipped. The verdict\n" +
					"fits t(n) = R(n)·RTT + n·s per mode and says whether throughput can rise with the batch size, and the\n" +
					"largest batch that fits --kill-budget. Opening a target also creates sluice's checkpoint table if it is\n" +
					"missing, as sync start does.",
				Flags: []cli.Flag{
					diagnoseTargetFlag(),
					&cli.StringFlag{Name: "sizes", Value: "1,10,100,1000,10000", EnvVars: env("DIAGNOSE_SIZES"), Usage: "batch sizes to measure, comma-separated"},
					&cli.StringFlag{Name: "modes", Value: "per-row,pipelined", EnvVars: env("DIAGNOSE_MODES"), Usage: "apply modes to measure, comma-separated: per-row, pipelined"},
					&cli.StringFlag{Name: "table", EnvVars: env("DIAGNOSE_TABLE"), Usage: "scratch table, table or schema.table; it must not exist (default: sluice_diag_<pid> in the connection's schema or database)"},
					&cli.DurationFlag{Name: "kill-budget", Value: 5 * time.Second, EnvVars: env("KILL_BUDGET"), Usage: "longest a transaction may take: the verdict names the largest batch predicted to fit it (a quarter of Vitess's 20 s is 5 s)"},
					&cli.DurationFlag{Name: "max-time", Value: 60 * time.Second, EnvVars: env("DIAGNOSE_MAX_TIME"), Usage: "skip a batch predicted to take longer than this"},
				},
				Action: diagnoseStaticBatch,
			},
			{
				Name:  "rtt",
				Usage: "ping the target over one connection and print the round-trip distribution",
				Flags: []cli.Flag{
					diagnoseTargetFlag(),
					&cli.IntFlag{Name: "count", Value: 20, EnvVars: env("DIAGNOSE_COUNT"), Usage: "number of pings"},
					&cli.DurationFlag{Name: "interval", Value: 200 * time.Millisecond, EnvVars: env("DIAGNOSE_INTERVAL"), Usage: "pause between pings"},
				},
				Action: diagnoseRTT,
			},
		},
	}
}

func diagnoseStaticBatch(c *cli.Context) error {
	if err := requireFlags(c, "target"); err != nil {
		return err
	}
	if err := config.CheckConn("target", c.String("target")); err != nil {
		return usageErr(err)
	}
	sizes, err := diagnose.ParseSizes(c.String("sizes"))
	if err != nil {
		return usageErr(err)
	}
	modes, err := diagnose.ParseModes(c.String("modes"))
	if err != nil {
		return usageErr(err)
	}
	w := c.App.Writer
	const row = "%-10s %9s %12s %10s %12s  %s\n"
	rep, err := diagnose.StaticBatch(c.Context, diagnose.StaticBatchOptions{
		Target:     c.String("target"),
		Sizes:      sizes,
		Modes:      modes,
		Table:      c.String("table"),
		KillBudget: c.Duration("kill-budget"),
		MaxTime:    c.Duration("max-time"),
		OnStart: func(r *diagnose.StaticBatchReport) {
			fmt.Fprintf(w, "target:  %s (%s)\n", r.Target, r.Server)
			fmt.Fprintf(w, "table:   %s, scratch (id bigint primary key, v varchar(100), n bigint), dropped at the end\n", r.Table)
			fmt.Fprintf(w, "batch:   %s\n", r.Workload)
		},
		OnRTT: func(s diagnose.RTTStats) {
			fmt.Fprintf(w, "RTT:     %d pings: min %s, median %s, p95 %s\n\n", len(s.Samples),
				diagnose.FormatDuration(s.Min), diagnose.FormatDuration(s.P50), diagnose.FormatDuration(s.P95))
			fmt.Fprintf(w, row, "MODE", "BATCH", "ROUND TRIPS", "TX TIME", "CHANGES/S", "")
		},
		OnCell: func(cell diagnose.Cell) {
			size := diagnose.FormatCount(float64(cell.Size))
			switch cell.Status {
			case diagnose.Skipped:
				fmt.Fprintf(w, row, cell.Mode, size, "-", "-", "-", "skipped (predicted "+diagnose.FormatDuration(cell.Predicted)+")")
			case diagnose.Failed:
				fmt.Fprintf(w, row, cell.Mode, size, "-", "-", "-", "failed: "+oneLine(cell.Err.Error()))
			default:
				runs := ""
				if cell.Runs > 1 {
					runs = fmt.Sprintf("median of %d", cell.Runs)
				}
				fmt.Fprintf(w, row, cell.Mode, size, diagnose.FormatCount(float64(cell.RoundTrips)),
					diagnose.FormatDuration(cell.TxTime), diagnose.FormatCount(rate(cell.Rate)), runs)
			}
		},
	})
	if rep != nil && len(rep.Verdict) > 0 {
		fmt.Fprintln(w, "\nverdict:")
		for _, line := range rep.Verdict {
			wrap(w, line, "  - ", "    ", 100)
		}
	}
	if rep != nil && rep.Table != "" && rep.Dropped {
		fmt.Fprintf(w, "\nscratch table %s dropped.\n", rep.Table)
	}
	if err != nil && errors.Is(err, context.Canceled) && c.Context.Err() != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	return err
}

// rate rounds a throughput for the table: to 3 significant digits below
// 100 changes/s, to whole changes above.
func rate(x float64) float64 {
	if x >= 100 {
		return float64(int64(x + 0.5))
	}
	return x
}

func diagnoseRTT(c *cli.Context) error {
	if err := requireFlags(c, "target"); err != nil {
		return err
	}
	if err := config.CheckConn("target", c.String("target")); err != nil {
		return usageErr(err)
	}
	w := c.App.Writer
	rep, err := diagnose.RTT(c.Context, diagnose.RTTOptions{
		Target:   c.String("target"),
		Count:    c.Int("count"),
		Interval: c.Duration("interval"),
	})
	if rep == nil {
		return err
	}
	fmt.Fprintf(w, "target:  %s (%s)\n", rep.Target, rep.Server)
	trips := "round trips"
	if rep.ConnectRoundTrips == 1 {
		trips = "round trip"
	}
	fmt.Fprintf(w, "connect: %s (TCP handshake, then %d %s: authentication, session setup)\n",
		diagnose.FormatDuration(rep.Connect), rep.ConnectRoundTrips, trips)
	s := rep.RTT
	if len(s.Samples) > 0 {
		fmt.Fprintf(w, "pings:   %d, %s apart, %s round trip each\n", len(s.Samples), c.Duration("interval"), diagnose.FormatCount(rep.RoundTripsPerPing))
		fmt.Fprintf(w, "RTT:     min %s  p50 %s  p90 %s  p99 %s  max %s  (mean %s, jitter %s)\n\n",
			diagnose.FormatDuration(s.Min), diagnose.FormatDuration(s.P50), diagnose.FormatDuration(s.P90),
			diagnose.FormatDuration(s.P99), diagnose.FormatDuration(s.Max), diagnose.FormatDuration(s.Mean),
			diagnose.FormatDuration(s.Jitter))
		hist := s.Histogram(8)
		most := 0
		for _, b := range hist {
			most = max(most, b.Count)
		}
		for _, b := range hist {
			bar := strings.Repeat("#", (b.Count*40+most-1)/most)
			fmt.Fprintf(w, "  %9s – %-9s %-40s %d\n", diagnose.FormatDuration(b.Lo), diagnose.FormatDuration(b.Hi), bar, b.Count)
		}
	}
	return err
}

// wrap prints s in lines of at most width columns, the first prefixed with
// first and the others with rest.
func wrap(w io.Writer, s, first, rest string, width int) {
	prefix := first
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len([]rune(prefix+line+" "+word)) > width {
			fmt.Fprintln(w, prefix+line)
			prefix, line = rest, ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		fmt.Fprintln(w, prefix+line)
	}
}
