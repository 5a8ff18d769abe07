package promorch_test

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/orchestrator/promorch"
	"github.com/ax-run/ax/task"
)

// gathered renders every series of reg as name{label=value,…} value (a
// histogram's value is its sample count), sorted.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			default:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestEveryHookFeedsItsSeries calls every orchestrator.Metrics method and
// checks the series each one feeds, by name and labels: the names the alert
// rules and the dashboard in deploy/ query.
func TestEveryHookFeedsItsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := promorch.New(reg)
	const no = time.Duration(-1)
	// A first attempt that succeeded, measured.
	m.TransitionWritten(orchestrator.Transition{Type: "email", Priority: 1, From: task.Running, To: task.Succeeded,
		AttemptOutcome: "succeeded", SchedulingDelay: time.Second, SubmitToStart: 2 * time.Second, SubmitToFinish: 3 * time.Second})
	// A failed attempt that is retried: not the first, not measured.
	m.TransitionWritten(orchestrator.Transition{Type: "email", Priority: 1, From: task.Running, To: task.Retrying,
		AttemptOutcome: "failed", SchedulingDelay: no, SubmitToStart: no, SubmitToFinish: no})
	// A last failed attempt: a dead letter.
	m.TransitionWritten(orchestrator.Transition{Type: "email", Priority: 1, From: task.Running, To: task.Failed,
		AttemptOutcome: "failed", SchedulingDelay: 0, SubmitToStart: no, SubmitToFinish: no})
	// A write that changed no state counts as a transition only.
	m.TransitionWritten(orchestrator.Transition{Type: "email", Priority: 1, From: task.Ready, To: task.Ready,
		SchedulingDelay: no, SubmitToStart: no, SubmitToFinish: no})
	m.SubmissionRejected()
	m.DispatchHeld()
	m.DispatchHeld()
	m.DirectAnswered("report", "applied")
	m.DirectAnswered("report", "applied")
	m.DirectAnswered("submission", "busy")
	m.RecordsCommitted(20, "batch")
	m.RecordsCommitted(12, "batch")
	m.RecordsCommitted(3, "single")
	m.RecordsCommitted(9, "refused")
	m.ConsumerStarted("ax-orchestrator-submit", false)
	m.ConsumerStopped("ax-orchestrator-submit")
	m.ConsumerStarted("ax-orchestrator-submit", true)
	m.ConsumerStarted("ax-orchestrator-timers", false)
	m.ConsumerStopped("ax-orchestrator-timers")
	m.MessageRedelivered("ax-orchestrator-submit")
	m.MessagePoisoned("ax-orchestrator-submit")
	m.ReconcilerChecked(task.Running)
	m.ReconcilerRepaired("ready_not_dispatched")
	m.OldestUnfinished(task.Running, 90*time.Second)
	m.BreakersInMemory(3)
	m.FairQueued(40)
	m.KeySlots("customer.42", 4, 5)
	m.Sampled(orchestrator.Sample{At: time.Unix(1700000000, 0),
		Backlogs: []orchestrator.Backlog{{Capability: "gpu", Priority: 0, Pending: 7, Oldest: 4 * time.Second}, {Capability: "gpu", Priority: 2}},
		InHand:   map[string]int{"gpu": 2}, ConsumerPending: map[string]uint64{"ax-orchestrator-submit": 5},
		TimersPending: 11, DeadLetters: 1, Poison: 1})
	m.SampleFailed(errors.New("jetstream unavailable"))

	want := map[string]float64{
		"ax_transitions_total{to=succeeded}":                            1,
		"ax_transitions_total{to=retrying}":                             1,
		"ax_transitions_total{to=failed}":                               1,
		"ax_transitions_total{to=ready}":                                1,
		"ax_attempts_total{outcome=succeeded,type=email}":               1,
		"ax_attempts_total{outcome=failed,type=email}":                  2,
		"ax_retries_total{type=email}":                                  1,
		"ax_dead_letters_total{type=email}":                             1,
		"ax_scheduling_delay_seconds{priority=1}":                       2,
		"ax_submit_to_start_seconds{priority=1}":                        1,
		"ax_submit_to_finish_seconds{priority=1}":                       1,
		"ax_submissions_rejected_total{}":                               1,
		"ax_dispatches_held_total{}":                                    2,
		"ax_direct_requests_total{kind=report,outcome=applied}":         2,
		"ax_direct_requests_total{kind=submission,outcome=busy}":        1,
		"ax_record_writes_total{how=batch}":                             32,
		"ax_record_writes_total{how=single}":                            3,
		"ax_record_writes_total{how=refused}":                           9,
		"ax_record_batches_total{}":                                     2,
		"ax_consumer_up{consumer=ax-orchestrator-submit}":               1,
		"ax_consumer_up{consumer=ax-orchestrator-timers}":               0,
		"ax_consumer_restarts_total{consumer=ax-orchestrator-submit}":   1,
		"ax_consumer_restarts_total{consumer=ax-orchestrator-timers}":   0,
		"ax_redeliveries_total{consumer=ax-orchestrator-submit}":        1,
		"ax_redeliveries_total{consumer=ax-orchestrator-timers}":        0,
		"ax_poison_messages_total{consumer=ax-orchestrator-submit}":     1,
		"ax_poison_messages_total{consumer=ax-orchestrator-timers}":     0,
		"ax_reconciler_checks_total{state=running}":                     1,
		"ax_reconciler_repairs_total{reason=ready_not_dispatched}":      1,
		"ax_reconciler_oldest_unfinished_seconds{state=running}":        90,
		"ax_orchestrator_breakers{}":                                    3,
		"ax_fair_queued_tasks{}":                                        40,
		"ax_key_slots_in_use{key=customer.42}":                          4,
		"ax_key_concurrency_limit{key=customer.42}":                     5,
		"ax_backlog_tasks{capability=gpu,priority=0}":                   7,
		"ax_backlog_tasks{capability=gpu,priority=2}":                   0,
		"ax_backlog_oldest_seconds{capability=gpu,priority=0}":          4,
		"ax_backlog_oldest_seconds{capability=gpu,priority=2}":          0,
		"ax_dispatches_in_hand{capability=gpu}":                         2,
		"ax_consumer_pending_messages{consumer=ax-orchestrator-submit}": 5,
		"ax_timers_pending{}":                                           11,
		"ax_dead_letters{}":                                             1,
		"ax_poison_messages{}":                                          1,
		"ax_sample_errors_total{}":                                      1,
		"ax_last_sample_timestamp_seconds{}":                            1700000000,
	}
	got := gathered(t, reg)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s = %v", k, v)
		}
	}
}
