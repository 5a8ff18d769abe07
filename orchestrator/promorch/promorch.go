// Package promorch exports an orchestrator's measurements to Prometheus.
// Only programs that import this package link the Prometheus client:
//
//	m := promorch.New(reg)
//	o, _ := orchestrator.New(nc, orchestrator.Config{Metrics: m})
//	m.Watch(o)
//
// Series (names in internal/metrics, documented in deploy/metrics.md, used
// by the alert rules in deploy/prometheus and the dashboard in
// deploy/grafana): through orchestrator.Config.Metrics, the tasks moving —
// ax_transitions_total{to}, ax_attempts_total{type,outcome},
// ax_retries_total{type}, ax_dead_letters_total{type}, the latency
// histograms ax_scheduling_delay_seconds, ax_submit_to_start_seconds and
// ax_submit_to_finish_seconds{priority}, ax_submissions_rejected_total,
// ax_dispatches_held_total, ax_direct_requests_total{kind,outcome},
// ax_record_writes_total{how}, ax_record_batches_total,
// ax_redeliveries_total{consumer},
// ax_poison_messages_total{consumer}, ax_consumer_up{consumer},
// ax_consumer_restarts_total{consumer}, the reconciler's
// ax_reconciler_checks_total{state}, ax_reconciler_repairs_total{reason}
// and ax_reconciler_oldest_unfinished_seconds{state},
// ax_orchestrator_breakers — and AX's state sampled from JetStream —
// ax_backlog_tasks and ax_backlog_oldest_seconds{capability,priority},
// ax_dispatches_in_hand{capability}, ax_consumer_pending_messages{consumer},
// ax_timers_pending, ax_dead_letters, ax_poison_messages,
// ax_sample_errors_total and ax_last_sample_timestamp_seconds; through
// Watch, read at scrape time, ax_breaker_state{type} and
// ax_paused{type,retries_only}.
package promorch

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-run/ax/internal/metrics"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// Metrics implements orchestrator.Metrics with Prometheus collectors.
// Create them with New.
type Metrics struct {
	orchestrator.NopMetrics
	reg     prometheus.Registerer
	m       *metrics.Orchestrator
	flow    *metrics.Flow
	cluster *metrics.Cluster
}

// New registers the orchestrator metrics on reg (nil: created but not
// registered) and returns them for orchestrator.Config.Metrics. Register
// one orchestrator's metrics per registerer: the names are fixed.
func New(reg prometheus.Registerer) *Metrics {
	return &Metrics{reg: reg, m: metrics.NewOrchestrator(reg), flow: metrics.NewFlow(reg), cluster: metrics.NewCluster(reg)}
}

// TransitionWritten counts the write by target state and, when it changed
// the state, the attempt that ended, the retry or dead letter, and
// observes the latencies it measured.
func (p *Metrics) TransitionWritten(t orchestrator.Transition) {
	p.m.Transitions.WithLabelValues(string(t.To)).Inc()
	if t.From == t.To {
		return
	}
	if t.AttemptOutcome != "" {
		p.flow.Attempts.WithLabelValues(t.Type, t.AttemptOutcome).Inc()
	}
	switch {
	case t.AttemptOutcome != "" && t.To == task.Retrying:
		p.flow.Retries.WithLabelValues(t.Type).Inc()
	case t.To == task.Failed:
		p.flow.DeadLetters.WithLabelValues(t.Type).Inc()
	}
	prio := strconv.Itoa(t.Priority)
	observe(p.flow.SchedulingDelay, prio, t.SchedulingDelay)
	observe(p.flow.SubmitToStart, prio, t.SubmitToStart)
	observe(p.flow.SubmitToFinish, prio, t.SubmitToFinish)
}

// observe observes d unless the transition did not measure it (negative).
func observe(h *prometheus.HistogramVec, prio string, d time.Duration) {
	if d >= 0 {
		h.WithLabelValues(prio).Observe(d.Seconds())
	}
}

// SubmissionRejected counts ax_submissions_rejected_total.
func (p *Metrics) SubmissionRejected() { p.m.Rejections.Inc() }

// DispatchHeld counts ax_dispatches_held_total.
func (p *Metrics) DispatchHeld() { p.m.Held.Inc() }

// DirectAnswered counts ax_direct_requests_total{kind,outcome}.
func (p *Metrics) DirectAnswered(kind, outcome string) {
	p.m.Direct.WithLabelValues(kind, outcome).Inc()
}

// RecordsCommitted counts ax_record_writes_total{how} and, for a batch,
// ax_record_batches_total.
func (p *Metrics) RecordsCommitted(n int, how string) {
	p.m.RecordWrites.WithLabelValues(how).Add(float64(n))
	if how == "batch" {
		p.m.RecordBatches.Inc()
	}
}

// ConsumerStarted sets ax_consumer_up{consumer} to 1 and counts a restart
// in ax_consumer_restarts_total{consumer}. It creates the consumer's
// counters at 0, so rate() and increase() see their first change.
func (p *Metrics) ConsumerStarted(consumer string, restart bool) {
	p.m.ConsumerUp.WithLabelValues(consumer).Set(1)
	restarts := p.m.ConsumerRestarts.WithLabelValues(consumer)
	if restart {
		restarts.Inc()
	}
	p.m.Poisoned.WithLabelValues(consumer)
	p.flow.Redeliveries.WithLabelValues(consumer)
}

// ConsumerStopped sets ax_consumer_up{consumer} to 0.
func (p *Metrics) ConsumerStopped(consumer string) {
	p.m.ConsumerUp.WithLabelValues(consumer).Set(0)
}

// MessageRedelivered counts ax_redeliveries_total{consumer}.
func (p *Metrics) MessageRedelivered(consumer string) {
	p.flow.Redeliveries.WithLabelValues(consumer).Inc()
}

// MessagePoisoned counts ax_poison_messages_total{consumer}.
func (p *Metrics) MessagePoisoned(consumer string) {
	p.m.Poisoned.WithLabelValues(consumer).Inc()
}

// ReconcilerChecked counts ax_reconciler_checks_total{state}.
func (p *Metrics) ReconcilerChecked(state task.State) {
	p.m.Checks.WithLabelValues(string(state)).Inc()
}

// ReconcilerRepaired counts ax_reconciler_repairs_total{reason}.
func (p *Metrics) ReconcilerRepaired(reason string) {
	p.m.Repairs.WithLabelValues(reason).Inc()
}

// OldestUnfinished sets ax_reconciler_oldest_unfinished_seconds{state}.
func (p *Metrics) OldestUnfinished(state task.State, age time.Duration) {
	p.m.OldestUnfinished.WithLabelValues(string(state)).Set(age.Seconds())
}

// BreakersInMemory sets ax_orchestrator_breakers.
func (p *Metrics) BreakersInMemory(n int) { p.m.Breakers.Set(float64(n)) }

// FairQueued sets ax_fair_queued_tasks.
func (p *Metrics) FairQueued(n int) { p.m.FairQueued.Set(float64(n)) }

// KeySlots sets ax_key_slots_in_use and ax_key_concurrency_limit.
func (p *Metrics) KeySlots(key string, inUse int, limit float64) {
	p.m.KeySlotsInUse.WithLabelValues(key).Set(float64(inUse))
	p.m.KeyLimit.WithLabelValues(key).Set(limit)
}

// Sampled sets the sampled gauges and ax_last_sample_timestamp_seconds.
func (p *Metrics) Sampled(s orchestrator.Sample) {
	c := p.cluster
	for _, b := range s.Backlogs {
		prio := strconv.Itoa(b.Priority)
		c.Backlog.WithLabelValues(b.Capability, prio).Set(float64(b.Pending))
		c.BacklogOldest.WithLabelValues(b.Capability, prio).Set(b.Oldest.Seconds())
	}
	for capability, n := range s.InHand {
		c.InHand.WithLabelValues(capability).Set(float64(n))
	}
	for consumer, n := range s.ConsumerPending {
		c.ConsumerPending.WithLabelValues(consumer).Set(float64(n))
	}
	c.TimersPending.Set(float64(s.TimersPending))
	c.DeadLetters.Set(float64(s.DeadLetters))
	c.Poison.Set(float64(s.Poison))
	c.LastSample.Set(float64(s.At.Unix()))
}

// SampleFailed counts ax_sample_errors_total.
func (p *Metrics) SampleFailed(error) { p.cluster.SampleErrors.Inc() }

// Watch registers a collector that exports o's copy of the circuit
// breakers (ax_breaker_state{type}: 0 closed, 1 half-open, 2 open) and
// pauses (ax_paused{type,retries_only} = 1, type "all" for a pause of
// every type) at scrape time.
func (p *Metrics) Watch(o *orchestrator.Orchestrator) {
	metrics.Register(p.reg, gateCollector{o})
}

// gateCollector exports an orchestrator's gates at scrape time.
type gateCollector struct{ o *orchestrator.Orchestrator }

func (gc gateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- metrics.BreakerStateDesc
	ch <- metrics.PausedDesc
}

func (gc gateCollector) Collect(ch chan<- prometheus.Metric) {
	g := gc.o.Gates()
	for typ, st := range g.Breakers {
		v := 0.0
		switch st {
		case orchestrator.BreakerHalfOpen:
			v = 1
		case orchestrator.BreakerOpen:
			v = 2
		}
		ch <- prometheus.MustNewConstMetric(metrics.BreakerStateDesc, prometheus.GaugeValue, v, typ)
	}
	for typ, pause := range g.Pauses {
		if typ == "" {
			typ = "all"
		}
		ch <- prometheus.MustNewConstMetric(metrics.PausedDesc, prometheus.GaugeValue, 1, typ, strconv.FormatBool(pause.RetriesOnly))
	}
}

var _ orchestrator.Metrics = (*Metrics)(nil)
