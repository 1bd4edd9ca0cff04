// Command sluice applies a source database's row changes to a target
// database continuously, resuming after any stop without losing or
// duplicating a change.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/urfave/cli/v2"
)

// version and commit are set at build time with
// -ldflags "-X main.version=… -X main.commit=…".
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	stopProfile := cpuProfile(os.Getenv("SLUICE_CPU_PROFILE"), os.Stderr)
	stopHeap := heapProfile(os.Getenv("SLUICE_HEAP_PROFILE"), os.Stderr)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stopHeap()
	stopProfile()
	stop()
	os.Exit(code)
}

// cpuProfile writes a Go CPU profile of the whole process to path (the
// environment's SLUICE_CPU_PROFILE: a developer's tool, to see where a
// bench run's CPU went) until the returned function is called. An empty
// path profiles nothing; a path that cannot be created is reported and
// ignored, since the profile must never stop the stream. "%p" in path
// becomes the process id, so that runs one after another keep theirs.
func cpuProfile(path string, stderr io.Writer) func() {
	if path == "" {
		return func() {}
	}
	path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice: SLUICE_CPU_PROFILE %s: %v; running without a profile\n", path, err)
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// heapProfile writes a Go heap profile to path (the environment's
// SLUICE_HEAP_PROFILE: a developer's tool, to see what holds memory at a
// run's peak) each time the heap in use passes its previous peak by a
// tenth, sampled twice a second, so the file left is the one nearest the
// peak. Like cpuProfile: "%p" becomes the process id, and a failure is
// reported once and never stops the stream.
func heapProfile(path string, stderr io.Writer) func() {
	if path == "" {
		return func() {}
	}
	path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var peak uint64
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse <= peak+peak/10 {
				continue
			}
			peak = ms.HeapInuse
			f, err := os.Create(path)
			if err == nil {
				err = pprof.Lookup("heap").WriteTo(f, 0)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				fmt.Fprintf(stderr, "sluice: SLUICE_HEAP_PROFILE %s: %v; running without a heap profile\n", path, err)
				return
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// run runs the command line and returns the exit status (see
// daemon.ExitCode); the error, if any, is printed once to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runApp(ctx, newApp(), args, stdout, stderr)
}

func runApp(ctx context.Context, app *cli.App, args []string, stdout, stderr io.Writer) (code int) {
	secrets := knownSecrets(args, os.Environ())
	defer func() {
		// A panic in the command's goroutine: its value may quote a
		// connection string, so it is printed redacted, with the stack
		// (which holds no string contents), and exit 70.
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "sluice: internal error (a bug in sluice; please report it with this output): %s\n%s",
				connstr.Redact(fmt.Sprint(r), secrets...), debug.Stack())
			code = daemon.ExitInternal
		}
	}()
	app.Writer, app.ErrWriter = stdout, stderr
	err := app.RunContext(ctx, args)
	if err == nil {
		return daemon.ExitOK
	}
	fmt.Fprintln(stderr, "sluice:", connstr.Redact(err.Error(), secrets...))
	return daemon.ExitCode(err)
}

// knownSecrets are the passwords the command line and the environment
// hold (in connection strings and SLUICE_*_PASSWORD variables): the last
// line of defence redacts them from whatever main prints, should a driver
// error quote one.
func knownSecrets(args, env []string) []string {
	var out []string
	add := func(s string) {
		if pw, ok := connstr.Password(s); ok && pw != "" {
			out = append(out, pw)
		}
	}
	for _, a := range args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
			a = v
		}
		add(a)
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "SLUICE_") {
			continue
		}
		if strings.HasSuffix(k, "_PASSWORD") && len(v) >= 4 {
			out = append(out, v)
			continue
		}
		add(v)
	}
	return out
}

// usageErr tags an error in the command line or the configuration: exit 2.
func usageErr(err error) error { return daemon.Fail(daemon.ExitUsage, err) }

func versionString() string { return version + " (commit " + commit + ")" }

func newApp() *cli.App {
	app := &cli.App{
		Name:    "sluice",
		Usage:   "pipelined change-data-capture applier: keep a target database in sync with a source across a slow link",
		Version: versionString(),
		Commands: []*cli.Command{
			syncCommand(),
			preflightCommand(),
			schemaCommand(),
			configCommand(),
			sourceCommand(),
			diagnoseCommand(),
			verifyCommand(),
			cutoverCommand(),
			{
				Name:  "version",
				Usage: "print sluice's version and commit",
				Action: func(c *cli.Context) error {
					fmt.Fprintln(c.App.Writer, "sluice", versionString())
					return nil
				},
			},
		},
		HideHelpCommand: true,
		// Errors are printed and mapped to exit codes by run, not by
		// urfave/cli (which would exit 3 for an unknown help topic).
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
		Action:         unknownCommand,
	}
	for _, c := range app.Commands {
		setUsageHandling(c)
	}
	return app
}

// setUsageHandling gives every command one-line usage errors and a
// did-you-mean for a mistyped subcommand.
func setUsageHandling(c *cli.Command) {
	c.OnUsageError = onUsageError
	if len(c.Subcommands) > 0 && c.Action == nil {
		c.Action = unknownCommand
	}
	for _, s := range c.Subcommands {
		setUsageHandling(s)
	}
}

// unknownCommand is the action of the app and of each command group: with
// no argument it shows the help; with one it names the mistyped command.
func unknownCommand(c *cli.Context) error {
	if !c.Args().Present() {
		return cli.ShowSubcommandHelp(c)
	}
	name := c.Args().First()
	var names []string
	cmds := c.App.Commands
	path := c.App.Name
	if c.Command != nil && c.Command.Name != "" {
		cmds = c.Command.Subcommands
		path = c.Command.HelpName
	}
	for _, sc := range cmds {
		if !sc.Hidden && sc.Name != "help" {
			names = append(names, sc.Names()...)
		}
	}
	hint := ""
	if best := config.Closest(name, names); best != "" {
		hint = fmt.Sprintf(": did you mean %q?", best)
	}
	return usageErr(fmt.Errorf("%s: unknown command %q%s (commands: %s; see %s --help)", path, name, hint, strings.Join(names, ", "), path))
}

var (
	badValueRe = regexp.MustCompile(`^invalid value "(.*)" for flag -+([\w-]+): (.*)$`)
	badEnvRe   = regexp.MustCompile(`^could not parse "(.*)" as .* from (?:env var|environment variable) "(\w+)" for flag ([\w-]+): (.*)$`)
	undefRe    = regexp.MustCompile(`^flag provided but not defined: -+([\w-]+)$`)
)

// onUsageError turns a flag parsing error into one line naming the flag
// with its two dashes, the value and a hint, without the help text.
func onUsageError(c *cli.Context, err error, _ bool) error {
	msg := err.Error()
	var flags []cli.Flag
	if c.Command != nil {
		flags = c.Command.Flags
	}
	if len(flags) == 0 {
		flags = c.App.Flags
	}
	isDuration := func(name string) bool {
		for _, f := range flags {
			if _, ok := f.(*cli.DurationFlag); ok && f.Names()[0] == name {
				return true
			}
		}
		return false
	}
	hint := func(name, value string) string {
		if isDuration(name) {
			if config.IsBareNumber(value) {
				return fmt.Sprintf("a duration needs its unit: write %ss (or ms, m, h)", value)
			}
			return "want a duration such as 5s, 200ms or 2m"
		}
		return ""
	}
	if m := badValueRe.FindStringSubmatch(msg); m != nil {
		h := hint(m[2], m[1])
		if h == "" {
			h = m[3]
		}
		return usageErr(fmt.Errorf("--%s %q: %s", m[2], m[1], h))
	}
	if m := badEnvRe.FindStringSubmatch(msg); m != nil {
		h := hint(m[3], m[1])
		if h == "" {
			h = m[4]
		}
		return usageErr(fmt.Errorf("$%s (--%s) %q: %s", m[2], m[3], m[1], h))
	}
	if m := undefRe.FindStringSubmatch(msg); m != nil {
		var names []string
		for _, f := range flags {
			names = append(names, f.Names()...)
		}
		h := fmt.Sprintf(" (see %s --help)", c.Command.HelpName)
		if best := config.Closest(m[1], names); best != "" {
			h = fmt.Sprintf(": did you mean --%s?", best)
		}
		return usageErr(fmt.Errorf("unknown flag --%s%s", m[1], h))
	}
	return usageErr(err)
}

// requireFlags refuses, in one line, a command run without flags it needs
// (urfave/cli's Required would print the whole help).
func requireFlags(c *cli.Context, names ...string) error {
	var missing []string
	for _, n := range names {
		if !c.IsSet(n) {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return usageErr(fmt.Errorf("%s needs %s (see %s --help)", c.Command.HelpName, strings.Join(missing, " and "), c.Command.HelpName))
}
