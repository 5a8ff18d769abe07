// Package metrics defines every Prometheus metric AX exports, with its name
// and labels, and serves them. The public packages pull in no metrics
// backend: the orchestrator and the executor report through their Metrics
// hooks, which orchestrator/promorch and executor/promexec feed into these
// collectors; the mirror and the relay (commands of ax) register theirs
// here directly.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ax-run/ax/internal/health"
)

// Orchestrator metrics.
type Orchestrator struct {
	// Transitions counts state changes written, by target state.
	Transitions *prometheus.CounterVec
	// Rejections counts refused submissions.
	Rejections prometheus.Counter
	// Held counts dispatches held back by a pause or an open breaker.
	Held prometheus.Counter
	// Direct counts direct requests answered, by kind and outcome.
	Direct *prometheus.CounterVec
	// RecordWrites counts task record writes through group commit, by how
	// they were published; RecordBatches counts the atomic batches.
	RecordWrites  *prometheus.CounterVec
	RecordBatches prometheus.Counter
	// ConsumerUp is 1 while a consume loop runs, 0 while it is being
	// recreated, by consumer.
	ConsumerUp *prometheus.GaugeVec
	// ConsumerRestarts counts consume loops that ended and were recreated.
	ConsumerRestarts *prometheus.CounterVec
	// Poisoned counts messages kept as poison after their delivery limit,
	// by consumer.
	Poisoned *prometheus.CounterVec
	// Repairs counts unfinished tasks the reconciler moved on, by reason.
	Repairs *prometheus.CounterVec
	// Checks counts the reconciler's looks at unfinished tasks, by state.
	Checks *prometheus.CounterVec
	// OldestUnfinished is the age of the oldest unfinished task the
	// reconciler looked at recently, by state.
	OldestUnfinished *prometheus.GaugeVec
	// Breakers is the number of task types whose circuit breaker this
	// orchestrator keeps in memory (idle closed ones are forgotten).
	Breakers prometheus.Gauge
	// FairQueued is the ready tasks queued for their fairness key's turn.
	FairQueued prometheus.Gauge
	// KeySlotsInUse and KeyLimit are a concurrency key's slots in use and
	// its limit in force (an adaptive limit's current value), by key.
	KeySlotsInUse, KeyLimit *prometheus.GaugeVec
}

// NewOrchestrator registers the orchestrator's metrics on reg (nil: unregistered).
func NewOrchestrator(reg prometheus.Registerer) *Orchestrator {
	m := &Orchestrator{
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_transitions_total",
			Help: "Task state changes written by this orchestrator, by target state."}, []string{"to"}),
		Rejections: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_submissions_rejected_total",
			Help: "Submissions refused (see ax rejected)."}),
		Held: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_dispatches_held_total",
			Help: "Dispatches held back by a pause or an open circuit breaker."}),
		Direct: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_direct_requests_total",
			Help: "Submissions, graphs and reports handed to this orchestrator directly, by kind and outcome (applied; busy, failed, stopping: stored by their sender instead)."}, []string{"kind", "outcome"}),
		RecordWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_record_writes_total",
			Help: "Task record writes with group commit on, by how they were published: batch (in an atomic batch), single (on their own), refused (a batch refused or unanswered, then on their own)."}, []string{"how"}),
		RecordBatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_record_batches_total",
			Help: "Atomic batches of task record writes committed with group commit on."}),
		ConsumerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_consumer_up",
			Help: "1 while the orchestrator's consume loop of a consumer runs, 0 while it is being recreated."}, []string{"consumer"}),
		ConsumerRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_consumer_restarts_total",
			Help: "Consume loops that ended for a reason other than Stop and were recreated."}, []string{"consumer"}),
		Poisoned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_poison_messages_total",
			Help: "Messages an orchestrator could not apply after their delivery limit, kept on AX_POISON (ax poison list)."}, []string{"consumer"}),
		Repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_reconciler_repairs_total",
			Help: "Unfinished tasks the reconciler found stalled and moved on, by reason (rare in a healthy system)."}, []string{"reason"}),
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_reconciler_checks_total",
			Help: "Reconciler looks at unfinished tasks (their watch timers firing), by state."}, []string{"state"}),
		OldestUnfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_reconciler_oldest_unfinished_seconds",
			Help: "Age since submission of the oldest unfinished task the reconciler looked at in its last max interval, by state."}, []string{"state"}),
		Breakers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_orchestrator_breakers",
			Help: "Task types whose circuit breaker this orchestrator keeps in memory (closed breakers idle for a window are forgotten)."}),
		FairQueued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_fair_queued_tasks",
			Help: "Ready tasks this orchestrator queues for their fairness key's turn while their level holds Config.FairWindow dispatches."}),
		KeySlotsInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_key_slots_in_use",
			Help: "Concurrency slots in use per concurrency key (tasks dispatched or running), as this orchestrator last changed them (at most 1,000 keys)."}, []string{"key"}),
		KeyLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_key_concurrency_limit",
			Help: "Concurrency limit in force per concurrency key: an adaptive limit's current value (at most 1,000 keys)."}, []string{"key"}),
	}
	register(reg, m.Transitions, m.Rejections, m.Held, m.Direct, m.RecordWrites, m.RecordBatches, m.ConsumerUp, m.ConsumerRestarts, m.Poisoned, m.Repairs, m.Checks, m.OldestUnfinished, m.Breakers,
		m.FairQueued, m.KeySlotsInUse, m.KeyLimit)
	return m
}

// Executor metrics.
type Executor struct {
	// InFlightCost is the summed estimated cost of running tasks.
	InFlightCost prometheus.Gauge
	// Attempts counts finished attempts by outcome (succeeded, failed).
	Attempts *prometheus.CounterVec
	// Duration observes handler run times.
	Duration prometheus.Histogram
}

// NewExecutor registers an executor's metrics on reg (nil: unregistered).
func NewExecutor(reg prometheus.Registerer) *Executor {
	m := &Executor{
		InFlightCost: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_executor_in_flight_cost",
			Help: "Summed estimated_cost of the tasks this executor runs now."}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_executor_attempts_total",
			Help: "Attempts this executor finished, by outcome."}, []string{"outcome"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ax_executor_handler_seconds",
			Help: "Handler run time.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
	}
	register(reg, m.InFlightCost, m.Attempts, m.Duration)
	return m
}

// Mirror metrics.
type Mirror struct {
	// LagSeconds is the age of the oldest event not yet mirrored (0: caught up).
	LagSeconds prometheus.Gauge
	// Pending is the number of events not yet mirrored.
	Pending prometheus.Gauge
	// Written counts events this process wrote to MySQL.
	Written prometheus.Gauge
	// DBDown is 1 while writes to MySQL fail.
	DBDown prometheus.Gauge
}

// NewMirror registers the mirror's metrics on reg (nil: unregistered).
func NewMirror(reg prometheus.Registerer) *Mirror {
	m := &Mirror{
		LagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_mirror_lag_seconds",
			Help: "Age of the oldest task event not yet written to MySQL (0 when caught up)."}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_mirror_pending_events",
			Help: "Task events not yet written to MySQL (all mirror processes)."}),
		Written: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_mirror_written_events",
			Help: "Task events this mirror process wrote."}),
		DBDown: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_mirror_db_down",
			Help: "1 while writes to MySQL fail."}),
	}
	register(reg, m.LagSeconds, m.Pending, m.Written, m.DBDown)
	return m
}

func register(reg prometheus.Registerer, cs ...prometheus.Collector) {
	if reg == nil {
		return
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(fmt.Sprintf("register metric: %v", err)) // a programming error: duplicate names
			}
		}
	}
}

// Serve serves reg's metrics on addr at /metrics until ctx ends.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, mounts ...func(*http.ServeMux)) error {
	_, err := Listen(ctx, addr, reg, mounts...)
	return err
}

// Listen is Serve returning the address it listens on (addr may have port 0).
// Each mount adds more paths beside /metrics (the health probes).
func Listen(ctx context.Context, addr string, reg *prometheus.Registry, mounts ...func(*http.ServeMux)) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for _, m := range mounts {
		m(mux)
	}
	health.Serve(ctx, ln, mux)
	return ln.Addr().String(), nil
}
