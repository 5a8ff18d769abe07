package orchestrator_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/executor/promexec"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/orchestrator/promorch"
	"github.com/ax-run/ax/task"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	reg := prometheus.NewRegistry()
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Metrics: promorch.New(reg)})
	ex := testenv.Executor(t, srv.URL(), executor.Config{Metrics: promexec.New(reg)})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 20*time.Second)
	for _, id := range []string{"m1", "m2", "m3"} {
		if _, err := c.Submit(ctx, newSpec(id, "ok")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	publishRaw(t, c.Conn(), "task.submit.ok", []byte(`{"id":"m4","type":"ok","priority":7}`))
	testenv.Eventually(t, 10*time.Second, "rejection counted", func() bool {
		return value(t, reg, "ax_submissions_rejected_total", nil) == 1
	})
	if got := value(t, reg, "ax_transitions_total", map[string]string{"to": string(task.Succeeded)}); got != 3 {
		t.Fatalf("ax_transitions_total{to=succeeded} = %v, want 3", got)
	}
	if got := value(t, reg, "ax_executor_attempts_total", map[string]string{"outcome": "succeeded"}); got != 3 {
		t.Fatalf("ax_executor_attempts_total{outcome=succeeded} = %v, want 3", got)
	}
	if got := value(t, reg, "ax_executor_in_flight_cost", nil); got != 0 {
		t.Fatalf("in-flight cost %v after all tasks ended", got)
	}
}
