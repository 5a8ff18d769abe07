package executor

import "time"

// Metrics receives an executor's measurements, so any metrics backend can
// record them and embedding the executor pulls in none: package
// executor/promexec exports them to Prometheus.
//
// Methods are called from many goroutines, on the executor's hot path:
// they must be safe for concurrent use and fast. Embed NopMetrics in an
// implementation to stay compatible when methods are added.
type Metrics interface {
	// InFlightCostChanged is called with the change (positive when a task
	// is taken, negative when its handler returns) of the summed estimated
	// cost of the tasks this executor runs.
	InFlightCostChanged(delta float64)
	// AttemptFinished is called once for every attempt this executor ran
	// to an outcome it reports, as the report is sent (before it is
	// stored, so it never trails the task's end as producers see it).
	AttemptFinished(a AttemptMetrics)
}

// AttemptMetrics describes one finished attempt.
type AttemptMetrics struct {
	// TaskType is the task's type.
	TaskType string
	// Outcome is "succeeded", "failed", "snoozed" or "cancelled".
	Outcome string
	// Duration is the handler's run time.
	Duration time.Duration
}

// NopMetrics records nothing; it is the default of Config.Metrics.
type NopMetrics struct{}

// InFlightCostChanged does nothing.
func (NopMetrics) InFlightCostChanged(float64) {}

// AttemptFinished does nothing.
func (NopMetrics) AttemptFinished(AttemptMetrics) {}
