package promorch_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/orchestrator/promorch"
	"github.com/ax-run/ax/task"
)

// An orchestrator's metrics on a Prometheus registry (serve it with
// promhttp.HandlerFor at /metrics, as `ax orchestrator --metrics-addr`
// does): New for Config.Metrics, Watch once the orchestrator exists for
// its breakers and pauses.
func ExampleNew() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := promorch.New(reg)
	env, err := axtest.New(ctx, &axtest.Options{Orchestrator: orchestrator.Config{Metrics: m}})
	if err != nil {
		panic(err)
	}
	defer env.Close(ctx)
	m.Watch(env.Orchestrator)

	env.Executor.HandleFunc("greet", func(context.Context, *executor.Job) (any, error) { return "hello", nil })
	spec, _ := task.New("greet", nil)
	if _, err := env.Run(ctx, spec); err != nil {
		panic(err)
	}
	// A transition is counted just after it is written: a client that saw
	// the task end may look a moment before the count.
	for deadline := time.Now().Add(time.Minute); succeeded(reg, "greet") < 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println(`ax_attempts_total{type="greet",outcome="succeeded"}`, succeeded(reg, "greet"))
	// Output: ax_attempts_total{type="greet",outcome="succeeded"} 1
}

// succeeded reads ax_attempts_total{type=taskType,outcome="succeeded"}.
func succeeded(reg *prometheus.Registry, taskType string) float64 {
	fams, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range fams {
		if f.GetName() != "ax_attempts_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["type"] == taskType && labels["outcome"] == "succeeded" {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}
