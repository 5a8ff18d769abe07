package apicheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestPublicPackagesLinkNoLoggingOrMetricsLibrary asks the go command for
// the dependencies of every public package (what a program importing it
// links) and fails when one of them is a package of backends, naming the
// import chain that pulls it in.
func TestPublicPackagesLinkNoLoggingOrMetricsLibrary(t *testing.T) {
	g := depGraph(t, public...)
	for _, root := range public {
		for _, p := range g.reachable(root) {
			if isBackend(p) {
				t.Errorf("%s links %s: %s", root, p, strings.Join(g.chain(root, p), " → "))
				break // one chain per package is enough to act on
			}
		}
	}
}

// TestDepsCheckSeesBackends keeps the check above honest: the packages
// that exist to plug AX into Prometheus and zerolog must be found linking
// them, through the graph the go command reports.
func TestDepsCheckSeesBackends(t *testing.T) {
	g := depGraph(t, "github.com/ax-run/ax/orchestrator/promorch", "github.com/ax-run/ax/internal/cli")
	for root, want := range map[string]string{
		"github.com/ax-run/ax/orchestrator/promorch": "github.com/prometheus/client_golang/prometheus",
		"github.com/ax-run/ax/internal/cli":          "github.com/rs/zerolog",
	} {
		deps := g.reachable(root)
		if !slices.Contains(deps, want) || !isBackend(want) {
			t.Errorf("%s: %s not found among its %d dependencies as a backend", root, want, len(deps))
			continue
		}
		if c := g.chain(root, want); len(c) < 2 || c[0] != root || c[len(c)-1] != want {
			t.Errorf("%s: chain to %s is %v", root, want, c)
		}
	}
}

// graph is the import graph the go command reports (test files excluded:
// they are not linked into a user's program).
type graph map[string][]string

// depGraph runs go list -deps on roots and returns their import graph.
func depGraph(t *testing.T, roots ...string) graph {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs the go command to list dependencies; put go on PATH: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"list", "-deps", "-json=ImportPath,Imports"}, roots...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.String())
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		g[p.ImportPath] = p.Imports
	}
	for _, r := range roots {
		if _, ok := g[r]; !ok {
			t.Fatalf("go list did not report %s", r)
		}
	}
	return g
}

// reachable lists the packages root imports, directly or not, sorted.
func (g graph) reachable(root string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, q := range g[p] {
			if !seen[q] {
				seen[q] = true
				walk(q)
			}
		}
	}
	walk(root)
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// chain is a shortest import chain from root to target (nil: none).
func (g graph) chain(root, target string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var c []string
			for ; p != ""; p = prev[p] {
				c = append(c, p)
			}
			slices.Reverse(c)
			return c
		}
		for _, q := range g[p] {
			if _, ok := prev[q]; !ok {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}
