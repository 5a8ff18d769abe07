// Package promexec exports an executor's measurements to Prometheus. Only
// programs that import this package link the Prometheus client:
//
//	m := promexec.New(reg)
//	ex, _ := executor.New(nc, executor.Config{Metrics: m, Hooks: []executor.AttemptHook{m.Hook}})
//	m.Watch(ex)
//
// Series (names in internal/metrics, documented in deploy/metrics.md):
// through executor.Config.Metrics, ax_executor_in_flight_cost (gauge),
// ax_executor_attempts_total{outcome} (counter) and
// ax_executor_handler_seconds (histogram); through Hook,
// ax_executor_running_tasks{capability}; through Watch,
// ax_executor_capacity and ax_executor_serving{capability}.
package promexec

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/metrics"
)

// Metrics implements executor.Metrics with Prometheus collectors. Create
// them with New.
type Metrics struct {
	executor.NopMetrics
	reg     prometheus.Registerer
	m       *metrics.Executor
	running *prometheus.GaugeVec
}

// New registers the executor metrics on reg (nil: created but not
// registered) and returns them for executor.Config.Metrics. Register one
// executor's metrics per registerer: the names are fixed.
func New(reg prometheus.Registerer) *Metrics {
	return &Metrics{reg: reg, m: metrics.NewExecutor(reg), running: metrics.ExecutorRunning(reg)}
}

// InFlightCostChanged moves ax_executor_in_flight_cost by delta.
func (p *Metrics) InFlightCostChanged(delta float64) { p.m.InFlightCost.Add(delta) }

// AttemptFinished counts the attempt by outcome and observes its run time.
func (p *Metrics) AttemptFinished(a executor.AttemptMetrics) {
	p.m.Attempts.WithLabelValues(a.Outcome).Inc()
	p.m.Duration.Observe(a.Duration.Seconds())
}

// Hook is an executor.AttemptHook that counts the attempts running now by
// capability (ax_executor_running_tasks) while their handler runs. Add it
// to executor.Config.Hooks next to Config.Metrics.
func (p *Metrics) Hook(ctx context.Context, job *executor.Job, run func(ctx context.Context) error) error {
	running := p.running.WithLabelValues(job.Capability)
	running.Inc()
	defer running.Dec()
	return run(ctx)
}

// Watch registers ex's capacity (ax_executor_capacity) and one
// ax_executor_serving{capability} = 1 per capability it serves.
func (p *Metrics) Watch(ex *executor.Executor) {
	metrics.RegisterExecutorInfo(p.reg, ex.Capacity(), ex.Capabilities())
}

var (
	_ executor.Metrics     = (*Metrics)(nil)
	_ executor.AttemptHook = (&Metrics{}).Hook
)
