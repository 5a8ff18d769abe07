// Package e2e runs AX's fault tests against the real binaries: an `ax server`
// (embedded NATS with JetStream), `ax orchestrator` and `ax worker` processes
// that the tests start, kill -9 and restart, while a Go SDK client submits
// work and inspects the task histories.
//
// TestMain builds ./cmd/ax once per `go test` run. With -short the package
// builds nothing and every test skips.
//
// Environment knobs for investigating a failure:
//
//	AX_E2E_SEED=N               replay the random workload and fault moments
//	AX_E2E_LOG_LEVEL=debug      log level of orchestrators and workers (default warn)
//	AX_E2E_LOGDIR=DIR           keep every process log under DIR/<test>/
//	AX_E2E_TERMINAL_TIMEOUT=7m  wait longer for all tasks to end
//	AX_RELEASE_ALL=1            TestReleaseBinaries builds all four platforms (default: this one)
//	AX_IMAGE_RUNNER=buildah     TestImages runs containers with buildah run only (or podman only)
package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// axBin is the path of the ax binary built for this run ("" with -short).
var axBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if testing.Short() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "ax-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ax")
	if err := buildAx(bin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build ax:", err)
		return 1
	}
	axBin = bin
	return m.Run()
}

// buildAx compiles ./cmd/ax from the module root into bin.
func buildAx(bin string) error {
	goTool := goBinary()
	root, err := moduleRoot(goTool)
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool, "build", "-o", bin, "./cmd/ax")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build ./cmd/ax in %s: %w\n%s", root, err, out)
	}
	return nil
}

func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// moduleRoot is the directory of go.mod, from `go env GOMOD` or else "..".
func moduleRoot(goTool string) (string, error) {
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err == nil {
		if mod := strings.TrimSpace(string(out)); mod != "" && mod != os.DevNull {
			return filepath.Dir(mod), nil
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("cannot find the module root: %w", err)
	}
	return root, nil
}
