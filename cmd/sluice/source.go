package main

import (
	"database/sql"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
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
	eng, err := daemon.EngineOf(u)
	if err != nil {
		return fmt.Errorf("--source: %w", err)
	}
	verb, prep := "installed capture triggers on", "of"
	if !install {
		verb, prep = "removed capture triggers from", "of"
	}
	switch eng {
	case daemon.EnginePostgres:
		conn, err := daemon.ConnectPostgres(c.Context, u)
		if err != nil {
			return err
		}
		defer conn.Close(c.Context)
		if install {
			err = pgtrigger.Install(c.Context, conn, pgtrigger.DefaultSchema, tables)
		} else {
			err = pgtrigger.Uninstall(c.Context, conn, pgtrigger.DefaultSchema, tables)
		}
		if err != nil {
			return err
		}
	case daemon.EngineMySQL:
		cfg, err := mytrigger.ParseDSN(u)
		if err != nil {
			return err
		}
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return fmt.Errorf("--source: %w", err)
		}
		db := sql.OpenDB(connector)
		defer db.Close()
		if install {
			err = mytrigger.Install(c.Context, db, tables)
		} else {
			err = mytrigger.Uninstall(c.Context, db, tables)
		}
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(c.App.Writer, "%s %d table(s) %s %s\n", verb, len(tables), prep, daemon.MaskURL(u))
	return nil
}
