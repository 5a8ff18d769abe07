package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// LatencyBuckets are the buckets of AX's latency histograms, in seconds:
// 1 ms to about 1.2 h (×4 steps), so a P0 target of 100 ms or 1 s falls on
// a bucket edge's neighbourhood and hours-long waits are still counted.
var LatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Flow is the orchestrator's view of tasks moving through it: observed
// when it writes a transition, so every change is counted once whatever
// the number of orchestrators (sum the series over them).
type Flow struct {
	// Attempts counts attempts that ended, by task type and outcome
	// (succeeded, failed, cancelled).
	Attempts *prometheus.CounterVec
	// Retries counts retries scheduled (running → retrying), by task type.
	Retries *prometheus.CounterVec
	// DeadLetters counts tasks that ended failed (each has a dead letter),
	// by task type.
	DeadLetters *prometheus.CounterVec
	// SchedulingDelay observes ready → running: how long a dispatched
	// attempt waited for an executor, by priority (observed when the
	// attempt's outcome is applied).
	SchedulingDelay *prometheus.HistogramVec
	// SubmitToStart observes submission → first attempt's start, by priority.
	SubmitToStart *prometheus.HistogramVec
	// SubmitToFinish observes submission → success, by priority.
	SubmitToFinish *prometheus.HistogramVec
	// Redeliveries counts messages an orchestrator consumer received more
	// than once, by consumer.
	Redeliveries *prometheus.CounterVec
}

// NewFlow registers the flow metrics on reg (nil: unregistered).
func NewFlow(reg prometheus.Registerer) *Flow {
	m := &Flow{
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_attempts_total",
			Help: "Attempts that ended, by task type and outcome (succeeded, failed, cancelled)."}, []string{"type", "outcome"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_retries_total",
			Help: "Retries scheduled after a failed attempt, by task type."}, []string{"type"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dead_letters_total",
			Help: "Tasks that ended failed (written to the dead-letter queue), by task type."}, []string{"type"}),
		SchedulingDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ax_scheduling_delay_seconds",
			Help:    "Ready to running: how long a dispatched attempt waited for an executor, by priority (observed when its outcome is applied).",
			Buckets: LatencyBuckets}, []string{"priority"}),
		SubmitToStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ax_submit_to_start_seconds",
			Help:    "Submission to the start of the first attempt (includes waiting for dependencies and delays), by priority.",
			Buckets: LatencyBuckets}, []string{"priority"}),
		SubmitToFinish: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ax_submit_to_finish_seconds",
			Help:    "Submission to success (all attempts and waits included), by priority.",
			Buckets: LatencyBuckets}, []string{"priority"}),
		Redeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_redeliveries_total",
			Help: "Messages an orchestrator consumer received again (a handler failed or an orchestrator died holding them), by consumer."}, []string{"consumer"}),
	}
	register(reg, m.Attempts, m.Retries, m.DeadLetters, m.SchedulingDelay, m.SubmitToStart, m.SubmitToFinish, m.Redeliveries)
	return m
}

// Cluster is AX's state as read from JetStream every few seconds by each
// orchestrator: the same values from every orchestrator (aggregate with
// max, not sum).
type Cluster struct {
	// Backlog is the dispatches not yet delivered to an executor, by
	// capability and priority.
	Backlog *prometheus.GaugeVec
	// BacklogOldest is the age of the oldest undelivered dispatch, by
	// capability and priority (0 when empty).
	BacklogOldest *prometheus.GaugeVec
	// InHand is the dispatches delivered to executors and not yet
	// acknowledged (running, or about to), by capability.
	InHand *prometheus.GaugeVec
	// ConsumerPending is the messages an orchestrator consumer has not
	// acknowledged yet (undelivered plus in hand), by consumer.
	ConsumerPending *prometheus.GaugeVec
	// TimersPending is the messages on AX_TIMERS: armed timers plus fired
	// ones not yet handled.
	TimersPending prometheus.Gauge
	// DeadLetters is the dead letters stored on AX_DLQ.
	DeadLetters prometheus.Gauge
	// Poison is the poison messages stored on AX_POISON.
	Poison prometheus.Gauge
	// SampleErrors counts samples that failed (JetStream unavailable).
	SampleErrors prometheus.Counter
	// LastSample is the Unix time of the last complete sample.
	LastSample prometheus.Gauge
}

// NewCluster registers the sampled cluster gauges on reg (nil: unregistered).
func NewCluster(reg prometheus.Registerer) *Cluster {
	m := &Cluster{
		Backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_backlog_tasks",
			Help: "Dispatched tasks not yet delivered to an executor, by capability and priority (sampled; same on every orchestrator)."}, []string{"capability", "priority"}),
		BacklogOldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_backlog_oldest_seconds",
			Help: "Age of the oldest undelivered dispatch, by capability and priority (0 when empty)."}, []string{"capability", "priority"}),
		InHand: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_dispatches_in_hand",
			Help: "Dispatches delivered to executors and not yet acknowledged (running or about to), by capability."}, []string{"capability"}),
		ConsumerPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_consumer_pending_messages",
			Help: "Messages an orchestrator consumer has not acknowledged yet (undelivered plus in hand), by consumer."}, []string{"consumer"}),
		TimersPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_timers_pending",
			Help: "Messages on AX_TIMERS: armed durable timers plus fired ones not yet handled."}),
		DeadLetters: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_dead_letters",
			Help: "Dead letters stored on AX_DLQ (ax dlq list)."}),
		Poison: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_poison_messages",
			Help: "Poison messages stored on AX_POISON (ax poison list)."}),
		SampleErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_sample_errors_total",
			Help: "Samples of JetStream state (backlog, timers, dead letters) that failed."}),
		LastSample: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_last_sample_timestamp_seconds",
			Help: "Unix time of the last complete sample of JetStream state."}),
	}
	register(reg, m.Backlog, m.BacklogOldest, m.InHand, m.ConsumerPending, m.TimersPending, m.DeadLetters, m.Poison, m.SampleErrors, m.LastSample)
	return m
}

// Gate metric descriptions: collected from an orchestrator's copy of the
// AX_CONTROL bucket at scrape time.
var (
	// BreakerStateDesc is ax_breaker_state{type}: 0 closed, 1 half-open, 2 open.
	BreakerStateDesc = prometheus.NewDesc("ax_breaker_state",
		"Circuit breaker of a task type: 0 closed, 1 half-open, 2 open (types whose breaker ever changed).", []string{"type"}, nil)
	// PausedDesc is ax_paused{type,retries_only}: 1 per pause in force
	// (type "all" for a pause of every type).
	PausedDesc = prometheus.NewDesc("ax_paused",
		"1 for each pause in force (ax pause), by type (\"all\" for every type) and whether it holds retries only.", []string{"type", "retries_only"}, nil)
)

// Register registers extra collectors on reg (nil: nothing).
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) { register(reg, cs...) }
