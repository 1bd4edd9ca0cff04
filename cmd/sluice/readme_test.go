package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// The manual (README.md and docs/*.md; the flag tables live in
// docs/operating.md and docs/verify.md) marks each flag table with an HTML
// comment on a line of its own before the table, naming the command (or commands, comma-separated,
// that share the table) whose flags it lists:
//
//	<!-- flags: sync start, config check -->
//	| flag | env | default | meaning |
//	|---|---|---|---|
//	| `--source URL` | `SLUICE_SOURCE` | required | … |
//
// The app's own (global) flags use the name "sluice". The first cell of
// each row starts with the flag in backquotes; an "env" column, where the
// table has one, names the flag's environment variables.

var (
	flagsComment = regexp.MustCompile(`^<!--\s*flags:\s*(.+?)\s*-->\s*$`)
	rowFlag      = regexp.MustCompile("^`--([a-z0-9][a-z0-9-]*)")
	rowEnv       = regexp.MustCompile(`SLUICE_[A-Z0-9_]+`)
)

// readmeRow is one row of a flag table.
type readmeRow struct {
	line  int
	flag  string // without the dashes
	envs  []string
	hasEv bool // the table has an env column
}

// readmeTable is one flag table and the commands it documents.
type readmeTable struct {
	file     string // the manual's file that holds it, e.g. docs/operating.md
	line     int
	commands []string
	rows     []readmeRow
}

// splitRow splits a Markdown table row into its cells; `\|` is a pipe
// inside a cell.
func splitRow(line string) []string {
	s := strings.TrimSpace(line)
	s = strings.TrimPrefix(s, "|")
	s = strings.TrimSuffix(s, "|")
	s = strings.ReplaceAll(s, `\|`, "\x00")
	cells := strings.Split(s, "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|"))
	}
	return cells
}

// parseFlagTables reads the marked flag tables of one file of the manual
// (name is its path, for the problems) and reports, as problems, rows with
// the wrong number of cells, rows without a flag, markers without a table
// and flag tables without a marker.
func parseFlagTables(name, text string) ([]readmeTable, []string) {
	var tables []readmeTable
	var problems []string
	lines := strings.Split(text, "\n")
	inFence := false
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		m := flagsComment.FindStringSubmatch(l)
		if m == nil {
			// A flag table nobody marked would escape the check.
			if strings.HasPrefix(l, "|") && (i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "|")) {
				if h := splitRow(l); len(h) > 0 && strings.EqualFold(h[0], "flag") {
					problems = append(problems, fmt.Sprintf("%s:%d: a flag table without a `<!-- flags: COMMAND -->` line before it", name, i+1))
				}
			}
			continue
		}
		t := readmeTable{file: name, line: i + 1}
		for _, c := range strings.Split(m[1], ",") {
			t.commands = append(t.commands, strings.Join(strings.Fields(c), " "))
		}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[j]), "|") {
			problems = append(problems, fmt.Sprintf("%s:%d: %q is not followed by a table", name, i+1, l))
			continue
		}
		header := splitRow(lines[j])
		envCol := -1
		for k, h := range header {
			if strings.EqualFold(h, "env") {
				envCol = k
			}
		}
		j += 2 // the header and the |---| line
		for ; j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), "|"); j++ {
			cells := splitRow(lines[j])
			if len(cells) != len(header) {
				problems = append(problems, fmt.Sprintf("%s:%d: row has %d cells, the table (%s) has %d: %s",
					name, j+1, len(cells), strings.Join(header, " | "), len(header), strings.TrimSpace(lines[j])))
				continue
			}
			fm := rowFlag.FindStringSubmatch(cells[0])
			if fm == nil {
				problems = append(problems, fmt.Sprintf("%s:%d: first cell %q does not start with a flag in backquotes (`--name …`)", name, j+1, cells[0]))
				continue
			}
			r := readmeRow{line: j + 1, flag: fm[1], hasEv: envCol >= 0}
			if envCol >= 0 {
				r.envs = rowEnv.FindAllString(cells[envCol], -1)
			}
			t.rows = append(t.rows, r)
		}
		tables = append(tables, t)
		i = j - 1
	}
	return tables, problems
}

// appFlags maps each command path ("sync start"; "sluice" for the app's
// own) to its flags, leaving out --help.
func appFlags(app *cli.App) map[string][]cli.Flag {
	out := map[string][]cli.Flag{}
	add := func(path string, flags []cli.Flag) {
		for _, f := range flags {
			if f.Names()[0] == "help" {
				continue
			}
			out[path] = append(out[path], f)
		}
	}
	add("sluice", app.Flags)
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			path := strings.TrimSpace(prefix + " " + c.Name)
			add(path, c.Flags)
			walk(path, c.Subcommands)
		}
	}
	walk("", app.Commands)
	return out
}

// suggestRow is the README row to add for a flag, built from its --help
// text so that the merger has only to tidy the wording.
func suggestRow(f cli.Flag, withEnv bool) string {
	name := "`--" + f.Names()[0]
	def := "off"
	usage := ""
	var envs []string
	if d, ok := f.(cli.DocGenerationFlag); ok {
		if d.TakesValue() {
			name += " V"
			def = d.GetDefaultText()
			if def == "" {
				def = d.GetValue()
			}
			if def == "" {
				def = "none"
			} else {
				def = "`" + strings.Trim(def, `"`) + "`"
			}
		}
		usage = d.GetUsage()
		envs = d.GetEnvVars()
	}
	name += "`"
	env := ""
	if len(envs) > 0 {
		env = "`" + strings.Join(envs, "`, `") + "`"
	}
	if withEnv {
		return fmt.Sprintf("| %s | %s | %s | %s |", name, env, def, usage)
	}
	return fmt.Sprintf("| %s | %s | %s |", name, def, usage)
}

// manualFile is one file of the manual and its text.
type manualFile struct {
	name, text string
}

// checkFlagTables checks the flag tables of a manual that is one file,
// README.md.
func checkFlagTables(app *cli.App, readme string) []string {
	return checkManualFlagTables(app, []manualFile{{"README.md", readme}})
}

// checkManualFlagTables checks the flag tables of every file of the manual
// together: a command's table may be in any of them.
func checkManualFlagTables(app *cli.App, files []manualFile) []string {
	var tables []readmeTable
	var problems []string
	for _, f := range files {
		ts, ps := parseFlagTables(f.name, f.text)
		tables = append(tables, ts...)
		problems = append(problems, ps...)
	}
	flags := appFlags(app)
	documented := map[string]bool{}
	// A command's flags may be spread over several tables (flags common to
	// sync start and preflight in one, each one's own in another): the
	// union must be complete, with no flag twice.
	seenBy := map[string]map[string]bool{}
	firstTable := map[string]readmeTable{}
	for _, t := range tables {
		for _, cmd := range t.commands {
			fs, ok := flags[cmd]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s:%d: `<!-- flags: %s -->`: sluice has no command %q (or it has no flags); fix the name or drop the table", t.file, t.line, cmd, cmd))
				continue
			}
			documented[cmd] = true
			byName := map[string]cli.Flag{}
			for _, f := range fs {
				byName[f.Names()[0]] = f
			}
			seen := seenBy[cmd]
			if seen == nil {
				seen = map[string]bool{}
				seenBy[cmd] = seen
				firstTable[cmd] = t
			}
			for _, r := range t.rows {
				if seen[r.flag] {
					problems = append(problems, fmt.Sprintf("%s:%d: --%s is listed twice for `%s`", t.file, r.line, r.flag, cmd))
				}
				seen[r.flag] = true
				f, ok := byName[r.flag]
				if !ok {
					problems = append(problems, fmt.Sprintf("%s:%d: `%s` has no flag --%s (see `sluice %s --help`); delete the row", t.file, r.line, cmd, r.flag, cmd))
					continue
				}
				if !r.hasEv {
					continue
				}
				var want []string
				if d, ok := f.(cli.DocGenerationFlag); ok {
					want = d.GetEnvVars()
				}
				if got := strings.Join(r.envs, ","); got != strings.Join(want, ",") {
					problems = append(problems, fmt.Sprintf("%s:%d: --%s of `%s` reads environment %q, the row says %q", t.file, r.line, r.flag, cmd, want, r.envs))
				}
			}
		}
	}
	for cmd, seen := range seenBy {
		t := firstTable[cmd]
		withEnv := len(t.rows) == 0 || t.rows[0].hasEv
		for _, f := range flags[cmd] {
			if !seen[f.Names()[0]] {
				problems = append(problems, fmt.Sprintf("%s:%d: the `%s` table lacks --%s; add the row\n\t%s",
					t.file, t.line, cmd, f.Names()[0], suggestRow(f, withEnv)))
			}
		}
	}
	sort.Strings(problems)
	var cmds []string
	for cmd := range flags {
		cmds = append(cmds, cmd)
	}
	sort.Strings(cmds)
	for _, cmd := range cmds {
		if documented[cmd] || len(flags[cmd]) == 0 {
			continue
		}
		var rows []string
		for _, f := range flags[cmd] {
			rows = append(rows, "\t"+suggestRow(f, true))
		}
		problems = append(problems, fmt.Sprintf("the manual (README.md, docs/*.md): `%s` has flags but no table; add, under its description (docs/operating.md),\n\t<!-- flags: %s -->\n\t| flag | env | default | meaning |\n\t|---|---|---|---|\n%s",
			cmd, cmd, strings.Join(rows, "\n")))
	}
	return problems
}

// TestREADMEFlagTables keeps the manual's flag tables (README.md and
// docs/*.md) true to the commands' flags: every flag documented for the
// command that has it, none that it lacks, the right environment
// variables, and every row whole.
func TestREADMEFlagTables(t *testing.T) {
	paths, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	paths = append([]string{"../../README.md"}, paths...)
	var files []manualFile
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("read the manual: %v", err)
		}
		files = append(files, manualFile{name: strings.TrimPrefix(p, "../../"), text: string(b)})
	}
	if len(files) < 2 {
		t.Fatalf("found no docs/*.md beside README.md; the flag tables live in docs/operating.md")
	}
	for _, p := range checkManualFlagTables(newApp(), files) {
		t.Error(p)
	}
}

// TestCheckFlagTables shows that the README check catches each kind of
// drift.
func TestCheckFlagTables(t *testing.T) {
	app := &cli.App{Name: "sluice", Commands: []*cli.Command{{
		Name: "sync",
		Subcommands: []*cli.Command{{
			Name: "status",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "state-dir", EnvVars: []string{"SLUICE_STATE_DIR"}, Value: "./s", Usage: "state"},
				&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			},
		}},
	}}}
	good := "<!-- flags: sync status -->\n| flag | env | default | meaning |\n|---|---|---|---|\n" +
		"| `--state-dir DIR` | `SLUICE_STATE_DIR` | `./s` | state |\n| `--json` | | off | JSON |\n"
	tests := []struct {
		name   string
		readme string
		want   []string // substrings, one per expected problem
	}{
		{"good", good, nil},
		{"missing row", strings.Replace(good, "| `--json` | | off | JSON |\n", "", 1),
			[]string{"lacks --json; add the row\n\t| `--json` |  | off | print JSON |"}},
		{"extra row", good + "| `--source-password-file F` | `SLUICE_SOURCE_PASSWORD_FILE` | none | x |\n",
			[]string{"has no flag --source-password-file"}},
		{"wrong cell count", good + "| `--json` | | off | dup | extra |\n",
			[]string{"row has 5 cells, the table (flag | env | default | meaning) has 4"}},
		{"wrong env", strings.Replace(good, "`SLUICE_STATE_DIR`", "`SLUICE_STATE`", 1),
			[]string{"reads environment"}},
		{"no table", "text\n", []string{"`sync status` has flags but no table"}},
		{"unmarked table", good + "\n| flag | meaning |\n|---|---|\n| `--x` | y |\n",
			[]string{"a flag table without a `<!-- flags: COMMAND -->`"}},
		{"unknown command", good + "\n<!-- flags: sync strat -->\n| flag | meaning |\n|---|---|\n| `--x` | y |\n",
			[]string{"sluice has no command \"sync strat\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkFlagTables(app, tt.readme)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
