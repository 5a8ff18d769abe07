package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
