package executor_test

import (
	"context"
	"maps"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
)

// recordingMetrics is a user's own metrics hook.
type recordingMetrics struct {
	executor.NopMetrics // stays compatible when methods are added
	mu                  sync.Mutex
	inFlight            float64
	outcomes            map[string]int
}

func (m *recordingMetrics) InFlightCostChanged(d float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inFlight += d
}

func (m *recordingMetrics) AttemptFinished(a executor.AttemptMetrics) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outcomes[a.TaskType+" "+a.Outcome]++
}

func TestMetricsHook(t *testing.T) {
	t.Parallel()
	m := &recordingMetrics{outcomes: map[string]int{}}
	env := axtest.Start(t, &axtest.Options{Executor: executor.Config{Metrics: m}})
	var mu sync.Mutex
	runs := 0
	env.Executor.HandleFunc("metered", func(context.Context, *executor.Job) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		if runs++; runs == 1 {
			return nil, executor.Snooze(time.Millisecond)
		}
		return nil, nil
	})
	axtest.RequireSucceeded(t, env.RunTask(t, "metered", nil))
	if got := m.snapshot(); got["metered snoozed"] != 1 || got["metered succeeded"] != 1 || len(got) != 2 {
		t.Fatalf("outcomes %v, want one snoozed and one succeeded", got)
	}
	// The in-flight cost is back to 0 once the last run returned (its
	// release follows the report, so it may trail the task's end a little).
	deadline := time.Now().Add(10 * time.Second)
	for m.cost() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("in-flight cost %v, want 0", m.cost())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (m *recordingMetrics) snapshot() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.outcomes)
}

func (m *recordingMetrics) cost() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inFlight
}

// Embedding the executor or the sdk must not pull in a logging or a
// metrics library.
func TestNoLoggingOrMetricsLibraryInTheAPI(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/ax-run/ax/executor", "github.com/ax-run/ax/sdk").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/prometheus/", "github.com/rs/zerolog"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("executor or sdk depends on %s", dep)
			}
		}
	}
}
