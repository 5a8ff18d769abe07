// Package promexec exports an executor's measurements to Prometheus: set
// executor.Config.Metrics to New(registerer). Only programs that import
// this package link the Prometheus client.
//
// Metrics: ax_executor_in_flight_cost (gauge), ax_executor_attempts_total
// {outcome} (counter) and ax_executor_handler_seconds (histogram).
package promexec

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/metrics"
)

// Metrics implements executor.Metrics with Prometheus collectors.
type Metrics struct {
	executor.NopMetrics
	m *metrics.Executor
}

// New registers the executor metrics on reg (nil: created but not
// registered) and returns them for executor.Config.Metrics. Register one
// executor's metrics per registerer: the names are fixed.
func New(reg prometheus.Registerer) *Metrics {
	return &Metrics{m: metrics.NewExecutor(reg)}
}

// InFlightCostChanged moves ax_executor_in_flight_cost by delta.
func (p *Metrics) InFlightCostChanged(delta float64) { p.m.InFlightCost.Add(delta) }

// AttemptFinished counts the attempt by outcome and observes its run time.
func (p *Metrics) AttemptFinished(a executor.AttemptMetrics) {
	p.m.Attempts.WithLabelValues(a.Outcome).Inc()
	p.m.Duration.Observe(a.Duration.Seconds())
}
