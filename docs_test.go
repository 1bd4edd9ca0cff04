package sluice_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The manual is README.md (the front page) and docs/*.md. Its sections link
// to each other by relative paths and #anchors; a section renamed or moved
// between files leaves a link that GitHub renders and nobody follows until
// a reader does. These tests resolve every relative link.

var (
	// mdLink is an inline link or image: [text](target). The text may run
	// over a line break, as the manual's wrapped paragraphs do.
	mdLink = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)
	// mdHeading is an ATX heading.
	mdHeading = regexp.MustCompile(`(?m)^(#{1,6})[ \t]+(.+?)[ \t#]*$`)
	// mdFence opens or closes a fenced code block.
	mdFence = regexp.MustCompile("^\\s*(```|~~~)")
)

// stripCode blanks fenced code blocks and inline code spans (a run of n
// backquotes up to the next run of exactly n), which hold text that looks
// like links and headings but is neither. Line breaks are kept, so that
// positions still count lines.
func stripCode(text string) string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, l := range lines {
		if mdFence.MatchString(l) {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	s := []rune(strings.Join(lines, "\n"))
	run := func(i int) int {
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		return n
	}
	for i := 0; i < len(s); {
		n := run(i)
		if n == 0 {
			i++
			continue
		}
		// Find the closing run of the same length.
		end := -1
		for j := i + n; j < len(s); {
			if m := run(j); m > 0 {
				if m == n {
					end = j
					break
				}
				j += m
				continue
			}
			j++
		}
		if end < 0 {
			i += n // a lone run of backquotes is literal text
			continue
		}
		for k := i; k < end+n; k++ {
			if s[k] != '\n' {
				s[k] = ' '
			}
		}
		i = end + n
	}
	return string(s)
}

// headingAnchor is the anchor GitHub gives a heading: lower case, every
// character but letters, digits, spaces, hyphens and underscores dropped,
// spaces as hyphens.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors is the set of anchors of a Markdown text's headings; a repeated
// heading gets -1, -2, … as on GitHub.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(stripCodeFences(text), -1) {
		a := headingAnchor(m[2])
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// stripCodeFences blanks fenced code blocks only: a heading's own text may
// hold inline code, which its anchor keeps (without the backquotes).
func stripCodeFences(text string) string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, l := range lines {
		if mdFence.MatchString(l) {
			inFence = !inFence
			lines[i] = ""
		} else if inFence {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// checkLinks reports every relative link of the files (paths relative to
// the repository's root, slash-separated) whose file or #anchor does not
// exist. read returns a file's text, or an error when it does not exist;
// isDir tells whether a path is a directory.
func checkLinks(files []string, read func(string) (string, error), isDir func(string) bool) []string {
	var problems []string
	texts := map[string]string{}
	get := func(p string) (string, error) {
		if t, ok := texts[p]; ok {
			return t, nil
		}
		t, err := read(p)
		if err == nil {
			texts[p] = t
		}
		return t, err
	}
	for _, f := range files {
		text, err := get(f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		body := stripCode(text)
		for _, loc := range mdLink.FindAllStringSubmatchIndex(body, -1) {
			target := body[loc[4]:loc[5]]
			line := 1 + strings.Count(body[:loc[0]], "\n")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue // not the manual's to check
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := f
			if file != "" {
				dest = path.Clean(path.Join(path.Dir(f), file))
			}
			if strings.HasPrefix(dest, "../") {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q leaves the repository", f, line, target))
				continue
			}
			if file != "" && isDir(dest) {
				if anchor != "" {
					problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s is a directory, which has no #%s", f, line, target, dest, anchor))
				}
				continue
			}
			destText, err := get(dest)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s does not exist; fix the path (relative to %s)", f, line, target, dest, path.Dir(f)))
				continue
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: an #anchor into %s, which is not Markdown", f, line, target, dest))
				continue
			}
			if !anchors(destText)[anchor] {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s has no heading whose anchor is #%s; fix the anchor or the heading", f, line, target, dest, anchor))
			}
		}
	}
	return problems
}

// TestManualLinks resolves every relative link (file and #anchor) in
// README.md and docs/*.md.
func TestManualLinks(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md: the README links into docs/")
	}
	files := append([]string{"README.md"}, docs...)
	for i, f := range files {
		files[i] = filepath.ToSlash(f)
	}
	read := func(p string) (string, error) {
		b, err := os.ReadFile(filepath.FromSlash(p))
		return string(b), err
	}
	isDir := func(p string) bool {
		st, err := os.Stat(filepath.FromSlash(p))
		return err == nil && st.IsDir()
	}
	links := 0
	for _, f := range files {
		text, err := read(f)
		if err != nil {
			t.Fatal(err)
		}
		links += len(mdLink.FindAllString(stripCode(text), -1))
	}
	if links == 0 {
		t.Fatal("found no links in the manual; the link pattern is broken")
	}
	for _, p := range checkLinks(files, read, isDir) {
		t.Error(p)
	}
}

// TestCheckLinks shows that the link check catches each kind of broken
// link, and passes what GitHub resolves.
func TestCheckLinks(t *testing.T) {
	base := map[string]string{
		"README.md": "# sluice\n\n## Two commands\n\n### Quickstart for an operator\n",
		"docs/a.md": "# A\n\n## Chaos: `make chaos`\n\n## Run as a service\n\n## Notes\n\n## Notes\n\n" +
			"```sh\n# not a heading\n```\n\nMariaDB's `` `price` * `qty` `` prints.\n",
		"packaging/x.service": "[Unit]\n",
	}
	dirs := map[string]bool{"docs": true, "packaging": true}
	isDir := func(p string) bool { return dirs[p] }
	tests := []struct {
		name string
		file string
		text string
		want []string // substrings, one per expected problem
	}{
		{"good", "docs/b.md", "See [Chaos](a.md#chaos-make-chaos), [the\nservice](a.md#run-as-a-service), " +
			"[the second Notes](a.md#notes-1), [quickstart](../README.md#quickstart-for-an-operator), " +
			"[this](#top), [unit](../packaging/x.service), [packaging](../packaging/), " +
			"[web](https://example.org/x#y).\n\n## Top\n", nil},
		{"missing file", "README.md", "see [ops](docs/operating.md)\n", []string{"docs/operating.md does not exist"}},
		{"missing anchor", "README.md", "see [svc](docs/a.md#run-as-service)\n", []string{"has no heading whose anchor is #run-as-service"}},
		{"anchor in this file", "README.md", "# R\n\nsee [x](#two-command)\n", []string{"README.md has no heading whose anchor is #two-command"}},
		{"heading in a code block", "README.md", "see [x](docs/a.md#not-a-heading)\n", []string{"#not-a-heading"}},
		{"third of a repeated heading", "README.md", "see [x](docs/a.md#notes-2)\n", []string{"#notes-2"}},
		{"wrong relative base", "docs/b.md", "see [ops](docs/a.md)\n", []string{"docs/docs/a.md does not exist"}},
		{"leaves the repository", "README.md", "see [x](../elsewhere.md)\n", []string{"leaves the repository"}},
		{"anchor into a directory", "README.md", "see [x](packaging/#unit)\n", []string{"is a directory"}},
		{"link inside code is not a link", "README.md", "`[x](nowhere.md)` and\n```\n[y](nowhere.md)\n```\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := map[string]string{tt.file: tt.text}
			for p, text := range base {
				if p != tt.file {
					fs[p] = text
				}
			}
			read := func(p string) (string, error) {
				text, ok := fs[p]
				if !ok {
					return "", os.ErrNotExist
				}
				return text, nil
			}
			got := checkLinks([]string{tt.file}, read, isDir)
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

// TestHeadingAnchor pins the anchors GitHub gives the manual's kinds of
// heading.
func TestHeadingAnchor(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Chaos: `make chaos`", "chaos-make-chaos"},
		{"Binlog source (MySQL/MariaDB)", "binlog-source-mysqlmariadb"},
		{"Start-up overlap", "start-up-overlap"},
		{"The source's log during the copy", "the-sources-log-during-the-copy"},
		{"The way back: `--reverse`", "the-way-back---reverse"},
		{"Checking equality: `sluice verify`", "checking-equality-sluice-verify"},
		{"What stops, and why", "what-stops-and-why"},
	}
	for _, tt := range tests {
		if got := headingAnchor(tt.heading); got != tt.want {
			t.Errorf("headingAnchor(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}
