package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/testenv"
)

// readme returns the repository's README.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The README says how to install ax: go install of this module's cmd/ax,
// which builds and runs.
func TestReadmeInstallsAx(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`(?m)^module (\S+)`).FindSubmatch(mod)
	m := regexp.MustCompile("(?m)^go install (\\S+)@latest").FindStringSubmatch(readme(t))
	if m == nil || module == nil || m[1] != string(module[1])+"/cmd/ax" {
		t.Fatalf("the README has no `go install %s/cmd/ax@latest` line (found %v)", module[1], m)
	}
	// In a clone, the same package installs from the work tree.
	gobin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "go", "install", "./cmd/ax")
	install.Dir = "../.."
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/ax: %v\n%s", err, out)
	}
	var out bytes.Buffer
	run := exec.CommandContext(ctx, filepath.Join(gobin, "ax"), "--help")
	run.Stdout = &out
	if err := run.Run(); err != nil || !strings.Contains(out.String(), "ax workers") && !strings.Contains(out.String(), "workers") {
		t.Fatalf("the installed ax --help: %v\n%s", err, out.String())
	}
}

// TestReadmeOperateSection runs the README's "Operate AX" section top to
// bottom as a newcomer would: every `ax` line of its code blocks, in
// order, against the `ax dev` it starts. Shell forms it uses: VAR=$(ax …)
// captures a command's output, $VAR uses it, a trailing & runs a command
// in the background until `kill %N`. Adjusted for a test machine only:
// `ax dev` (in a terminal of its own, the section says) runs in the
// background, with a free port and a temporary store, and so every other
// command gets --context with the context ax dev saved (what the section
// says to do when 4222 is taken); a fixed console address becomes a free one.
func TestReadmeOperateSection(t *testing.T) {
	t.Parallel()
	md := readme(t)
	start := strings.Index(md, "## Operate AX")
	if start < 0 {
		t.Fatal(`the README has no "## Operate AX" section`)
	}
	section := md[start:]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	var lines []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for _, l := range strings.Split(strings.TrimSpace(block[1]), "\n") {
			if l = stripComment(l); l != "" {
				lines = append(lines, l)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	saved := filepath.Join(t.TempDir(), "ax-dev.json")
	vars := map[string]string{}
	// Background jobs by job number, numbered as a shell does: one more
	// than the highest running, 1 when none runs.
	background := map[int]func(){}
	defer func() {
		for _, stop := range background {
			stop()
		}
	}()
	// What some lines must show (a human reads it; the test waits for it
	// as a human would run the command again).
	shows := map[string]func() []string{
		"ax status $id":                        func() []string { return []string{"Running on", "executor-cpu"} },
		"ax workers":                           func() []string { return []string{"executor-cpu", "executor-gpu", vars["id"]} },
		"ax dlq list":                          func() []string { return []string{vars["bad"], "retries exhausted after 2 attempts"} },
		"ax workers --capability extra":        func() []string { return []string{"op-worker"} },
		"ax status no-such-task -o json":       func() []string { return []string{`"code": "not_found"`} },
		"ax dlq rm --type demo.fail --dry-run": func() []string { return []string{"would discard " + vars["bad"]} },
	}
	exits := map[string]int{"ax status no-such-task -o json": 1}
	ran := 0
	for _, line := range lines {
		if strings.HasPrefix(line, "go install") {
			continue // TestReadmeInstallsAx
		}
		if n, ok := strings.CutPrefix(line, "kill %"); ok {
			i, err := strconv.Atoi(n)
			if err != nil || background[i] == nil {
				t.Fatalf("%q: no such background job", line)
			}
			background[i]()
			delete(background, i)
			continue
		}
		capture, cmdline, bg := "", line, false
		if m := regexp.MustCompile(`^(\w+)=\$\((.*)\)$`).FindStringSubmatch(line); m != nil {
			capture, cmdline = m[1], m[2]
		}
		if c, ok := strings.CutSuffix(cmdline, "&"); ok {
			cmdline, bg = strings.TrimSpace(c), true
		}
		devLine := strings.HasPrefix(cmdline, "ax dev")
		words, err := shellWords(cmdline, vars)
		if err != nil || len(words) < 2 || words[0] != "ax" {
			t.Fatalf("%q: not an ax command this test can run (%v)", line, err)
		}
		args := words[1:]
		switch args[0] {
		case "dev":
			args = append(args, "--port", "0", "--store", t.TempDir(), "--save-context", saved, "--console-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
		default:
			for i, a := range args {
				if a == "127.0.0.1:8081" {
					args[i] = "127.0.0.1:0"
				}
			}
			args = append(args, "--context", saved)
		}
		ran++
		if devLine {
			// "In a terminal of its own": here, in the background (not a
			// job of the section's kill %N), until the test ends.
			out := &syncBuffer{}
			dctx, stop := context.WithCancel(ctx)
			done := make(chan int, 1)
			go func() { done <- Run(dctx, args, out, out) }()
			defer func() {
				stop()
				if code := <-done; code != 0 {
					t.Errorf("ax dev exited %d:\n%s", code, out.String())
				}
			}()
			testenv.Eventually(t, 2*time.Minute, "ax dev to start its demo", func() bool { return strings.Contains(out.String(), "Submitted ") })
			continue
		}
		if bg {
			out := &syncBuffer{}
			bctx, stop := context.WithCancel(ctx)
			done := make(chan int, 1)
			go func() { done <- Run(bctx, args, out, out) }()
			if args[0] == "console" {
				// One opens it in a browser: it serves the pages the
				// section names.
				var url string
				testenv.Eventually(t, time.Minute, "the console's address", func() bool {
					m := regexp.MustCompile(`AX console at (\S+)`).FindStringSubmatch(out.String())
					if m != nil {
						url = m[1]
					}
					return m != nil
				})
				for _, page := range []string{"", "workers", "tasks", "dlq", "schedules"} {
					resp, err := http.Get(url + page)
					if err != nil || resp.StatusCode != http.StatusOK {
						t.Fatalf("console page /%s: %v %v", page, resp, err)
					}
					resp.Body.Close()
				}
			}
			job := 1
			for n := range background {
				job = max(job, n+1)
			}
			background[job] = func() {
				stop()
				if code := <-done; code != 0 {
					t.Errorf("%q (in the background) exited %d:\n%s", line, code, out.String())
				}
			}
			continue
		}
		want := exits[line]
		var out string
		check := func() bool {
			var o, e bytes.Buffer
			code := Run(ctx, args, &o, &e)
			out = o.String()
			if code != want {
				t.Logf("%q exited %d, want %d: %s%s", line, code, want, e.String(), out)
				return false
			}
			for _, s := range shows[line]() {
				if !strings.Contains(out, s) {
					t.Logf("%q does not show %q yet:\n%s", line, s, out)
					return false
				}
			}
			return true
		}
		if shows[line] == nil {
			shows[line] = func() []string { return nil }
		}
		testenv.Eventually(t, time.Minute, fmt.Sprintf("%q to work and show %v", line, shows[line]()), check)
		if capture != "" {
			vars[capture] = strings.TrimSpace(out)
		}
	}
	if ran < 20 {
		t.Fatalf("ran %d commands of the section: it lost its code blocks?", ran)
	}
}

// stripComment drops a line's trailing "  # comment" (a # after two
// spaces, outside quotes) and trims it.
func stripComment(l string) string {
	quote := rune(0)
	for i, r := range l {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '\'' || r == '"'):
			quote = r
		case quote == 0 && r == '#' && (i == 0 || strings.HasSuffix(l[:i], "  ")):
			return strings.TrimSpace(l[:i])
		}
	}
	return strings.TrimSpace(l)
}

// shellWords splits a command line as sh would for the README's forms:
// words, single and double quotes, $VAR from vars.
func shellWords(s string, vars map[string]string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	expand := func(rest string) (string, int) {
		m := regexp.MustCompile(`^\$(\w+)`).FindStringSubmatch(rest)
		if m == nil {
			return "$", 1
		}
		return vars[m[1]], len(m[0])
	}
	for i := 0; i < len(s); {
		r := rune(s[i])
		switch {
		case quote == '\'' && r != '\'', quote == '"' && r != '"' && r != '$':
			cur.WriteRune(r)
			i++
		case quote != 0 && r == quote:
			quote = 0
			i++
		case r == '$':
			v, n := expand(s[i:])
			cur.WriteString(v)
			in = true
			i += n
		case quote == 0 && (r == '\'' || r == '"'):
			quote, in = r, true
			i++
		case quote == 0 && (r == ' ' || r == '\t'):
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
			i++
		default:
			cur.WriteRune(r)
			in = true
			i++
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote")
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
