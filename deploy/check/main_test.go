package check

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// repo is AX's repository root, relative to this module.
const repo = "../.."

// binaries are ax and nats-server built from AX's module (the go.mod
// version of nats-server), once per test run.
var binaries struct {
	once      sync.Once
	dir       string
	ax, nats  string
	buildErr  error
	buildLogs string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

// build returns the paths of ax and nats-server.
func build(t *testing.T) (ax, natsServer string) {
	t.Helper()
	binaries.once.Do(func() {
		dir, err := os.MkdirTemp("", "ax-deploy-check-")
		if err != nil {
			binaries.buildErr = err
			return
		}
		binaries.dir = dir
		root, _ := filepath.Abs(repo)
		for _, b := range []struct{ out, pkg string }{
			{filepath.Join(dir, "ax"), "./cmd/ax"},
			{filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2"},
		} {
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				binaries.buildErr = fmt.Errorf("go build %s in %s: %w\n%s", b.pkg, root, err, out)
				return
			}
		}
		binaries.ax, binaries.nats = filepath.Join(dir, "ax"), filepath.Join(dir, "nats-server")
	})
	if binaries.buildErr != nil {
		t.Fatal(binaries.buildErr)
	}
	return binaries.ax, binaries.nats
}

// axAccepts checks that ax accepts args — its command, subcommand, flags
// and their values — by running them with --help, which parses every flag
// and starts nothing.
func axAccepts(t *testing.T, where string, args []string) {
	t.Helper()
	ax, _ := build(t)
	out, err := exec.Command(ax, append(append([]string{}, args...), "--help")...).CombinedOutput()
	if err != nil {
		t.Errorf("%s: ax %s is refused: %v\n%s", where, strings.Join(args, " "), err, out)
	}
}

// axHelp is every help text of ax's commands (the names of the
// environment variables it reads appear in them).
func axHelp(t *testing.T, commands ...string) string {
	t.Helper()
	ax, _ := build(t)
	var b strings.Builder
	for _, c := range append([]string{""}, commands...) {
		out, err := exec.Command(ax, strings.Fields(c+" --help")...).CombinedOutput()
		if err != nil {
			t.Fatalf("ax %s --help: %v\n%s", c, err, out)
		}
		b.Write(out)
	}
	return b.String()
}
