package orchestrator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ax-run/ax/task"
)

func specs(ids ...string) []task.Spec {
	var out []task.Spec
	for _, id := range ids {
		name, deps, _ := strings.Cut(id, "<")
		s := task.Spec{ID: name}
		if deps != "" {
			s.DependsOn = strings.Split(deps, ",")
		}
		out = append(out, s)
	}
	return out
}

func ids(level []task.Spec) []string {
	var out []string
	for _, s := range level {
		out = append(out, s.ID)
	}
	return out
}

func TestGraphLevels(t *testing.T) {
	// Sorted as task.Graph.Sorted sorts: each after its upstreams; "x" is
	// outside the graph.
	sorted := specs("a", "b<x", "c<a", "d<a,b", "e<c,d", "f<x")
	var got [][]string
	for _, l := range graphLevels(sorted, inGraph(sorted)) {
		got = append(got, ids(l))
	}
	want := [][]string{{"a", "b", "f"}, {"c", "d"}, {"e"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("levels %v, want %v", got, want)
	}
}

// creator records the creations a createGraph asks for and fails those
// listed.
type creator struct {
	mu      sync.Mutex
	called  []string
	fail    map[string]error
	waitFor chan struct{} // when set, a failing creation waits until it is closed
}

func (c *creator) create(_ context.Context, s task.Spec) error {
	c.mu.Lock()
	c.called = append(c.called, s.ID)
	err := c.fail[s.ID]
	c.mu.Unlock()
	if err != nil && c.waitFor != nil {
		<-c.waitFor
	}
	return err
}

func (c *creator) calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.called))
}

func inGraph(sorted []task.Spec) map[string]bool {
	m := map[string]bool{}
	for _, s := range sorted {
		m[s.ID] = true
	}
	return m
}

// TestCreateGraphTriesEveryTaskOfALevel: a task after graphFailures failing
// ones in the same level is still created in the same delivery (one by one,
// the fourth failure stopped the rest); the next level waits for the
// redelivery.
func TestCreateGraphTriesEveryTaskOfALevel(t *testing.T) {
	down := errors.New("no response from stream")
	last := make(chan struct{})
	c := &creator{fail: map[string]error{}, waitFor: last}
	var names []string
	for i := range graphFailures {
		id := "u" + string(rune('0'+i))
		names = append(names, id)
		c.fail[id] = down
	}
	names = append(names, "z", "e<z")
	create := func(ctx context.Context, s task.Spec) error {
		if s.ID == "z" {
			close(last) // the failures come back after z started
		}
		return c.create(ctx, s)
	}
	sorted := specs(names...)
	rejected, err := createGraph(context.Background(), graphLevels(sorted, inGraph(sorted)), create)
	if rejected != nil || !errors.Is(err, down) {
		t.Fatalf("rejected %v, error %v; want the first failure", rejected, err)
	}
	if got, want := c.calls(), append(slices.Clone(names[:graphFailures]), "z"); !slices.Equal(got, want) {
		t.Fatalf("created %v, want %v", got, want)
	}
}

// TestCreateGraphSkipsOnlyTheFailedTasksDependents: below graphFailures
// failures the next levels are created, but for the failed tasks'
// dependents, direct or not.
func TestCreateGraphSkipsOnlyTheFailedTasksDependents(t *testing.T) {
	down := errors.New("no response from stream")
	c := &creator{fail: map[string]error{"u": down}}
	sorted := specs("u", "z", "d<u", "e<z", "f<d,e", "g<e")
	rejected, err := createGraph(context.Background(), graphLevels(sorted, inGraph(sorted)), c.create)
	if rejected != nil || !errors.Is(err, down) {
		t.Fatalf("rejected %v, error %v; want u's failure", rejected, err)
	}
	if got, want := c.calls(), []string{"e", "g", "u", "z"}; !slices.Equal(got, want) {
		t.Fatalf("created %v, want %v (d and f wait for u)", got, want)
	}
}

// TestCreateGraphStopsAfterFailures: once graphFailures creations failed,
// no new one starts; those already started finish.
func TestCreateGraphStopsAfterFailures(t *testing.T) {
	down := errors.New("timeout")
	c := &creator{fail: map[string]error{}}
	var names []string
	for i := range 10 * graphWorkers {
		id := "t" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		names = append(names, id)
		c.fail[id] = down
	}
	rejected, err := createGraph(context.Background(), graphLevels(specs(names...), nil), c.create)
	if rejected != nil || !errors.Is(err, down) {
		t.Fatalf("rejected %v, error %v; want the first failure", rejected, err)
	}
	// The first graphWorkers start at once; each later one starts after
	// a failure, and none after the graphFailures-th.
	if n := len(c.calls()); n < graphFailures || n > graphWorkers+graphFailures-1 {
		t.Fatalf("%d creations tried, want %d to %d", n, graphFailures, graphWorkers+graphFailures-1)
	}
}

// TestCreateGraphRejects: a task rejected rejects the graph, whatever else
// failed.
func TestCreateGraphRejects(t *testing.T) {
	c := &creator{fail: map[string]error{"a": errors.New("timeout"), "b": errRejected{errors.New("type not allowed")}}}
	sorted := specs("a", "b", "c<a")
	rejected, err := createGraph(context.Background(), graphLevels(sorted, inGraph(sorted)), c.create)
	if rejected == nil || !strings.Contains(rejected.Error(), `task "b": type not allowed`) || err != nil {
		t.Fatalf("rejected %v, error %v; want b's rejection", rejected, err)
	}
}

// TestCreateGraphAllCreated: a graph whose tasks are all created returns
// no error, each level after the one before.
func TestCreateGraphAllCreated(t *testing.T) {
	sorted := specs("a", "b", "c<a,b", "d<c")
	var mu sync.Mutex
	done := map[string]bool{}
	create := func(_ context.Context, s task.Spec) error {
		mu.Lock()
		defer mu.Unlock()
		for _, dep := range s.DependsOn {
			if !done[dep] {
				t.Errorf("%s created before its upstream %s", s.ID, dep)
			}
		}
		done[s.ID] = true
		return nil
	}
	rejected, err := createGraph(context.Background(), graphLevels(sorted, inGraph(sorted)), create)
	if rejected != nil || err != nil || len(done) != 4 {
		t.Fatalf("rejected %v, error %v, created %v", rejected, err, done)
	}
}
