package apicheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// documented are the packages whose exported names must all have a doc
// comment: every public package.
var documented = append(slices.Clone(public),
	"github.com/ax-run/ax/executor/promexec",
	"github.com/ax-run/ax/executor/exectrace",
	"github.com/ax-run/ax/orchestrator/promorch",
)

// withProgram are the packages whose doc.go holds a complete program.
var withProgram = []string{
	"github.com/ax-run/ax/sdk",
	"github.com/ax-run/ax/executor",
	"github.com/ax-run/ax/orchestrator",
	"github.com/ax-run/ax/task",
}

// TestPackageDocExamplesCompile builds the complete program in the package
// documentation of withProgram, so the example a reader copies from
// pkg.go.dev compiles.
func TestPackageDocExamplesCompile(t *testing.T) {
	for _, path := range withProgram {
		out, err := exec.Command("go", "list", "-f", "{{.Dir}}", path).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", path, err)
		}
		doc, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "doc.go"))
		if err != nil {
			t.Fatal(err)
		}
		program := docProgram(string(doc))
		if program == "" {
			t.Errorf("%s: the package documentation has no complete program (an indented block starting with package main)", path)
			continue
		}
		file := filepath.Join(t.TempDir(), "main.go")
		if err := os.WriteFile(file, []byte(program), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", "build", "-o", os.DevNull, file)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: the package documentation's program does not build: %v\n%s\n%s", path, err, msg, program)
		}
	}
}

// docProgram returns the code block of a doc comment that starts with
// "package main", without the comment markers and the block's indentation.
func docProgram(doc string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "//\tpackage main"):
			in = true
		case in && !strings.HasPrefix(line, "//\t") && strings.TrimSpace(line) != "//":
			return b.String()
		}
		if in {
			b.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "//"), "\t"))
			b.WriteString("\n")
		}
	}
	return b.String()
}
