// Command sluice applies a source database's row changes to a target
// database continuously, resuming after any stop without losing or
// duplicating a change.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newApp().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "sluice",
		Usage: "pipelined change-data-capture applier: keep a target database in sync with a source across a slow link",
		Commands: []*cli.Command{
			syncCommand(),
			preflightCommand(),
			configCommand(),
			sourceCommand(),
			diagnoseCommand(),
			{
				Name:  "version",
				Usage: "print sluice's version",
				Action: func(c *cli.Context) error {
					fmt.Fprintln(c.App.Writer, "sluice", version)
					return nil
				},
			},
		},
		HideHelpCommand: true,
	}
}
