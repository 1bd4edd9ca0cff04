package main

import (
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/urfave/cli/v2"
)

func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", EnvVars: env("CONFIG"), Usage: "TOML file of settings and a [[stream]] list: runs every stream in it; flags and SLUICE_* variables given too apply to every stream and win over the file"}
}

// resolveStreams merges --config's file with the flags and SLUICE_*
// variables: flag > environment > the stream's key > the file's top level
// > the flag's default.
func resolveStreams(c *cli.Context) ([]config.Stream, error) {
	var f *config.File
	if path := c.String("config"); path != "" {
		var err error
		if f, err = config.Load(path); err != nil {
			return nil, usageErr(err)
		}
	}
	streams, err := config.Resolve(f, c)
	if err != nil {
		return nil, usageErr(err)
	}
	return streams, nil
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "work with the configuration file",
		Subcommands: []*cli.Command{
			{
				Name:  "check",
				Usage: "validate a config file and print each stream's effective settings (flags and SLUICE_* variables included), passwords masked",
				Flags: syncStartFlags(),
				Action: func(c *cli.Context) error {
					if c.String("config") == "" {
						return usageErr(fmt.Errorf("config check needs --config FILE"))
					}
					streams, err := resolveStreams(c)
					if err != nil {
						return err
					}
					w := c.App.Writer
					fmt.Fprintf(w, "# %s: %d stream(s), OK\n", c.String("config"), len(streams))
					for _, s := range streams {
						srcFrom, tgtFrom, err := s.ApplySecrets()
						if err != nil {
							return usageErr(err)
						}
						if _, err := streamOptions(s); err != nil {
							return err
						}
						fmt.Fprintf(w, "\n[[stream]]  # source password %s; target password %s\n", orURL(srcFrom), orURL(tgtFrom))
						fmt.Fprintln(w, strings.Join(s.Masked(endpoint.MaskURL), "\n"))
					}
					return nil
				},
			},
		},
	}
}
