package main

import (
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/urfave/cli/v2"
)

func sourceCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "source", EnvVars: env("SOURCE"), Usage: "source database URL (required)"},
		&cli.StringSliceFlag{Name: "tables", EnvVars: env("TABLES"), Usage: "tables, comma-separated (required)"},
		&cli.StringFlag{Name: "source-mode", Value: "trigger", EnvVars: env("SOURCE_MODE"), Usage: "trigger: changelog table and capture triggers; logical: the stream's PostgreSQL publication and replication slot (binlog needs nothing installed)"},
		streamIDFlag(),
	}
	return &cli.Command{
		Name:  "source",
		Usage: "prepare or clean up a source: capture triggers, or a stream's publication and replication slot",
		Subcommands: []*cli.Command{
			{
				Name:  "install",
				Usage: "create sluice's changelog table and capture triggers on the tables (idempotent; sync start also does it)",
				Flags: flags,
				Action: func(c *cli.Context) error {
					return sourceAdmin(c, true)
				},
			},
			{
				Name:  "uninstall",
				Usage: "remove the capture triggers from the tables, and the changelog once no table uses it",
				Flags: flags,
				Action: func(c *cli.Context) error {
					return sourceAdmin(c, false)
				},
			},
		},
	}
}

func sourceAdmin(c *cli.Context, install bool) error {
	if err := requireFlags(c, "source", "tables"); err != nil {
		return err
	}
	tables, err := endpoint.ParseTables(c.StringSlice("tables"))
	if err != nil {
		return usageErr(err)
	}
	u := c.String("source")
	// Checked before anything connects or installs, as sync start does.
	if err := errors.Join(config.CheckConn("source", u), config.CheckStreamID(c.String("stream-id")), config.CheckSourceMode(c.String("source-mode"), false)); err != nil {
		return usageErr(err)
	}
	var verb string
	switch mode := c.String("source-mode"); mode {
	case endpoint.ModeTrigger:
		verb = "installed capture triggers on"
		err = daemon.InstallCapture(c.Context, u, tables)
		if !install {
			verb = "removed stream " + c.String("stream-id") + "'s changelog consumer and the capture triggers from"
			err = daemon.UninstallCapture(c.Context, u, c.String("stream-id"), tables)
		}
	case endpoint.ModeLogical:
		verb = "set up publication and replication slot of stream " + c.String("stream-id") + " for"
		err = daemon.SetupLogical(c.Context, u, c.String("stream-id"), tables)
		if !install {
			verb = "dropped replication slot and publication of stream " + c.String("stream-id") + " for"
			err = daemon.UninstallLogical(c.Context, u, c.String("stream-id"), tables)
		}
	case endpoint.ModeBinlog:
		return usageErr(fmt.Errorf("--source-mode binlog: nothing to install; the binary log needs binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL and a user with REPLICATION SLAVE, REPLICATION CLIENT"))
	default:
		return usageErr(fmt.Errorf("--source-mode %q: want trigger or logical", mode))
	}
	if err != nil {
		return daemon.Fail(daemon.ExitSource, err)
	}
	fmt.Fprintf(c.App.Writer, "%s %d table(s) of %s\n", verb, len(tables), endpoint.MaskURL(u))
	return nil
}
