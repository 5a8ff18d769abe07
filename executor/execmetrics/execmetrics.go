// Package execmetrics serves an executor's Prometheus metrics through its
// AttemptHook, so a program that embeds an executor and wants no metrics
// never links this package (nor, once the executor's built-in
// Config.Metrics goes, the Prometheus client).
//
//	m := execmetrics.New(reg)
//	ex, _ := executor.New(nc, executor.Config{Hooks: []executor.AttemptHook{m.Hook}})
//	m.Watch(ex)
//
// Series (names in internal/metrics, documented in deploy/metrics.md):
// ax_executor_in_flight_cost, ax_executor_running_tasks{capability},
// ax_executor_attempts_total{outcome}, ax_executor_handler_seconds,
// ax_executor_capacity and ax_executor_serving{capability}.
package execmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/metrics"
	"github.com/ax-run/ax/task"
)

// Metrics are one executor's metrics. Create them with New.
type Metrics struct {
	reg     prometheus.Registerer
	m       *metrics.Executor
	running *prometheus.GaugeVec
	now     func() time.Time
}

// New registers an executor's metrics on reg (nil: kept, not exported).
func New(reg prometheus.Registerer) *Metrics {
	return &Metrics{reg: reg, m: metrics.NewExecutor(reg), running: metrics.ExecutorRunning(reg), now: time.Now}
}

// Hook is an executor.AttemptHook that counts every attempt: running
// tasks and their cost while the handler runs, then its outcome and run time.
func (m *Metrics) Hook(ctx context.Context, job *executor.Job, run func(ctx context.Context) error) error {
	cost := job.EstimatedCost
	if cost <= 0 {
		cost = task.DefaultEstimatedCost
	}
	running := m.running.WithLabelValues(job.Capability)
	running.Inc()
	m.m.InFlightCost.Add(cost)
	start := m.now()
	err := run(ctx)
	m.m.Duration.Observe(m.now().Sub(start).Seconds())
	m.m.InFlightCost.Sub(cost)
	running.Dec()
	outcome := task.OutcomeSucceeded
	if err != nil {
		outcome = task.OutcomeFailed
	}
	m.m.Attempts.WithLabelValues(string(outcome)).Inc()
	return err
}

// Watch registers ex's capacity and the capabilities it serves.
func (m *Metrics) Watch(ex *executor.Executor) {
	metrics.RegisterExecutorInfo(m.reg, ex.Capacity(), ex.Capabilities())
}

var _ executor.AttemptHook = (&Metrics{}).Hook
