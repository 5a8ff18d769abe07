package orchestrator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// A schedule can fire a whole graph: each firing creates the pipeline
// with its ids prefixed by the firing's id, dependencies and all, and the
// steps run in order.
func TestScheduleFiresAGraph(t *testing.T) {
	t.Parallel()
	_, ex, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, time.Minute)
	order := make(chan string, 16)
	step := func(_ context.Context, j *executor.Job) (any, error) { order <- j.Type; return nil, nil }
	ex.HandleFunc("etl.extract", step)
	ex.HandleFunc("etl.load", step)
	graph := []task.Spec{
		{ID: "load", Type: "etl.load", DependsOn: []string{"extract"}},
		{ID: "extract", Type: "etl.extract"},
	}
	s, err := c.CreateSchedule(ctx, task.Schedule{Name: "etl", Cron: "@every 1s", Graph: graph})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Graph) != 2 || s.Template.Type != "" {
		t.Fatalf("stored schedule: %+v", s)
	}
	var fired *task.Schedule
	testenv.Eventually(t, 30*time.Second, "a firing", func() bool {
		fired, err = c.Schedule(ctx, "etl")
		return err == nil && fired.LastTaskID != ""
	})
	if _, err := c.PauseSchedule(ctx, "etl"); err != nil && !errors.Is(err, sdk.ErrConflict) {
		t.Fatal(err)
	}
	last := fired.LastTaskID
	if !strings.HasPrefix(last, "etl-") || !strings.HasSuffix(last, "-load") {
		t.Fatalf("last task of the firing %q, want etl-<slot>-load", last)
	}
	extract := strings.TrimSuffix(last, "-load") + "-extract"
	for _, id := range []string{extract, last} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v, %v", id, got, err)
		}
	}
	if got, _ := c.Get(ctx, last); len(got.DependsOn) != 1 || got.DependsOn[0] != extract {
		t.Fatalf("the load step depends on %v, want %s", got.DependsOn, extract)
	}
	if first, second := <-order, <-order; first != "etl.extract" || second != "etl.load" {
		t.Fatalf("ran %s then %s", first, second)
	}
	// Fired by hand: the same graph under a manual id.
	id, err := c.TriggerSchedule(ctx, "etl", time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC))
	if err != nil || id != "etl-manual-20261202T080000Z-load" {
		t.Fatalf("trigger: %q, %v", id, err)
	}
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
		t.Fatalf("manual firing: %+v, %v", got, err)
	}
	// A graph whose step depends outside it, or with a template too, is refused.
	for _, bad := range []task.Schedule{
		{Name: "bad1", Cron: "@hourly", Graph: []task.Spec{{ID: "a", Type: "x", DependsOn: []string{"elsewhere"}}}},
		{Name: "bad2", Cron: "@hourly", Graph: []task.Spec{{ID: "a", Type: "x"}}, Template: task.Spec{Type: "y"}},
		{Name: "bad3", Cron: "@hourly", Graph: []task.Spec{{Type: "x"}}},
	} {
		if _, err := c.CreateSchedule(ctx, bad); err == nil {
			t.Errorf("schedule %s accepted", bad.Name)
		}
	}
}
