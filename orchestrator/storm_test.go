package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/window"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestRetryStormIsSpreadByTheBudget: 3,000 tasks of one type fail at once;
// their retries start at most Limit per window, spread over the windows
// that follow, and all of them finish.
func TestRetryStormIsSpreadByTheBudget(t *testing.T) {
	t.Parallel()
	const n = 3000
	budget := orchestrator.RetryBudget{Limit: 100, Width: 100 * time.Millisecond}
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry,
		RetryBudgetByType: map[string]orchestrator.RetryBudget{"storm": budget},
		Breaker:           orchestrator.BreakerConfig{Threshold: 1}}) // every first attempt fails: the breaker would hold them all
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 256})
	ex.HandleFunc("storm", func(_ context.Context, j *executor.Job) (any, error) {
		if j.Attempt == 1 {
			return nil, errors.New("downstream outage")
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 8*time.Minute)
	specs := make([]task.Spec, n)
	for i := range specs {
		specs[i] = newSpec(fmt.Sprintf("storm-%d", i), "storm")
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 7*time.Minute, "all retried and succeeded", func() bool {
		got, err := c.Get(ctx, specs[n-1].ID)
		return err == nil && got.State == task.Succeeded && len(testenv.Events(t, c.Conn())) >= 4*n-10
	})
	perWindow := map[int64]int{}
	started := map[int64]int{}
	succeeded := 0
	for _, ev := range testenv.Events(t, c.Conn()) {
		switch {
		case ev.Event.To == task.Retrying:
			perWindow[window.Policy(budget).Window(*ev.Event.Task.RetryAt)]++
		case ev.Event.From == task.Retrying && ev.Event.To == task.Ready:
			started[window.Policy(budget).Window(ev.Event.At)]++
		case ev.Event.To == task.Succeeded:
			succeeded++
		}
	}
	total, peak := 0, 0
	for _, k := range perWindow {
		total += k
		peak = max(peak, k)
	}
	if succeeded != n || total != n {
		t.Fatalf("%d succeeded, %d retries allocated; want %d", succeeded, total, n)
	}
	if peak > budget.Limit {
		t.Fatalf("a window got %d retry starts, budget %d", peak, budget.Limit)
	}
	if len(perWindow) < n/budget.Limit {
		t.Fatalf("retries spread over %d windows, want at least %d", len(perWindow), n/budget.Limit)
	}
	peakStarted := 0
	for _, k := range started {
		peakStarted = max(peakStarted, k)
	}
	t.Logf("retry start times allocated over %d windows of %s (peak %d); timers fired into %d windows (peak %d: fire precision is ~250ms)",
		len(perWindow), budget.Width, peak, len(started), peakStarted)
}
