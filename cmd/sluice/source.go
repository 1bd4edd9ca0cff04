package main

import (
	"fmt"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/urfave/cli/v2"
)

func sourceCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "source", Required: true, EnvVars: env("SOURCE"), Usage: "source database URL"},
		&cli.StringSliceFlag{Name: "tables", Required: true, EnvVars: env("TABLES"), Usage: "tables, comma-separated"},
	}
	return &cli.Command{
		Name:  "source",
		Usage: "prepare or clean up a source for trigger-based capture",
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
	tables, err := daemon.ParseTables(c.StringSlice("tables"))
	if err != nil {
		return err
	}
	u := c.String("source")
	verb := "installed capture triggers on"
	err = daemon.InstallCapture(c.Context, u, tables)
	if !install {
		verb = "removed capture triggers from"
		err = daemon.UninstallCapture(c.Context, u, tables)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%s %d table(s) of %s\n", verb, len(tables), daemon.MaskURL(u))
	return nil
}
