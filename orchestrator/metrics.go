package orchestrator

import (
	"time"

	"github.com/ax-run/ax/task"
)

// Metrics receives an orchestrator's measurements, so any metrics backend
// can record them and embedding the orchestrator pulls in none: package
// orchestrator/promorch exports them to Prometheus under the names listed
// in deploy/metrics.md.
//
// Methods are called from many goroutines, some on the orchestrator's hot
// path: they must be safe for concurrent use, fast, and must not block.
// Embed NopMetrics in an implementation to stay compatible when methods
// are added.
type Metrics interface {
	// TransitionWritten is called after every task record this
	// orchestrator wrote, whether or not the write changed the state.
	TransitionWritten(t Transition)
	// SubmissionRejected is called for every submission refused (see
	// `ax rejected`).
	SubmissionRejected()
	// DispatchHeld is called for every dispatch held back by a pause or
	// an open circuit breaker.
	DispatchHeld()
	// DirectAnswered is called for every direct request answered
	// (subjects.md, ax.direct): kind is "submission", "graph" or
	// "report"; outcome is "applied", "busy" (no room or no time: its
	// sender stores it), "failed" (not applied: stored too) or "stopping".
	DirectAnswered(kind, outcome string)
	// RecordsCommitted is called, with group commit on
	// (TopologyOptions.GroupCommit), for every group of n task record
	// writes published together: how is "batch" (one atomic batch, one
	// fsync), "single" (each on its own: too few queued to pay for a
	// batch) or "refused" (a batch the server refused or did not answer,
	// then each on its own).
	RecordsCommitted(n int, how string)
	// ConsumerStarted is called when the consume loop of an orchestrator
	// consumer starts; restart is true when it had run before (it ended
	// for a reason other than Stop and was recreated).
	ConsumerStarted(consumer string, restart bool)
	// ConsumerStopped is called when the consume loop of a consumer ends.
	ConsumerStopped(consumer string)
	// MessageRedelivered is called for every message a consumer receives
	// again (a handler failed, or an orchestrator died holding it).
	MessageRedelivered(consumer string)
	// MessagePoisoned is called for every message kept on AX_POISON after
	// its delivery limit.
	MessagePoisoned(consumer string)
	// ReconcilerChecked is called for every look of the reconciler at a
	// task (its watch timer firing), with the task's state.
	ReconcilerChecked(state task.State)
	// ReconcilerRepaired is called when the reconciler moved a stalled
	// task on, with the repair's reason.
	ReconcilerRepaired(reason string)
	// OldestUnfinished is called with the age since submission of the
	// oldest unfinished task in a state that the reconciler looked at
	// within its last max interval, when that changes.
	OldestUnfinished(state task.State, age time.Duration)
	// BreakersInMemory is called with the number of task types whose
	// circuit breaker this orchestrator keeps in memory (closed breakers
	// idle for a window are forgotten).
	BreakersInMemory(n int)
	// FairQueued is called every few milliseconds with the ready tasks this
	// orchestrator queues for their fairness key's turn.
	FairQueued(n int)
	// KeySlots is called when a concurrency key's slots change, with the
	// slots in use and the limit in force (an adaptive limit's current
	// value), for at most 1,000 keys.
	KeySlots(key string, inUse int, limit float64)
	// Sampled is called every Config.SampleInterval with AX's state as
	// read from JetStream. Every orchestrator reads the same values:
	// aggregate them with max, not sum.
	Sampled(s Sample)
	// SampleFailed is called when a sample could not be read (JetStream
	// unavailable).
	SampleFailed(err error)
}

// Transition describes one task record an orchestrator wrote.
type Transition struct {
	// Type is the task's type.
	Type string
	// Priority is the task's priority level (task.Task.PriorityLevel).
	Priority int
	// From is the state before the write.
	From task.State
	// To is the state written; it equals From when the write changed no
	// state, and then the fields below are empty.
	To task.State
	// AttemptOutcome is set when the write ends an attempt (From is
	// running, or ready for an attempt that ran without a running mark:
	// task.Event.EndsAttempt): "succeeded" (a planner that moves to waiting succeeded),
	// "failed" (a retry scheduled is a failed attempt), "cancelled", or
	// the state written otherwise; "" when no attempt ended.
	AttemptOutcome string
	// SchedulingDelay is how long the attempt that ended waited from
	// ready to running; negative when not measured (no attempt ended, the
	// attempt was taken over, or a timestamp is missing).
	SchedulingDelay time.Duration
	// SubmitToStart is submission to the start of the task's first
	// attempt, measured when that attempt ends; negative otherwise (a
	// later attempt, a re-drive, a take-over).
	SubmitToStart time.Duration
	// SubmitToFinish is submission to success, measured when To is
	// succeeded; negative otherwise.
	SubmitToFinish time.Duration
}

// Sample is AX's state as one orchestrator read it from JetStream: a few
// requests per non-empty capability and priority, whatever the number of
// tasks.
type Sample struct {
	// At is when the sample was complete.
	At time.Time
	// Backlogs are the dispatch levels: every ready consumer (a
	// capability's priority level that executors serve), the levels with
	// dispatches and no consumer, and, with zero values, the levels seen
	// before that have neither any more.
	Backlogs []Backlog
	// InHand is the dispatches delivered to executors and not yet
	// acknowledged (running, or about to), by capability, for every
	// capability with a ready consumer or undelivered dispatches.
	InHand map[string]int
	// ConsumerPending is the messages each orchestrator consumer has not
	// acknowledged yet (undelivered plus in hand), by consumer.
	ConsumerPending map[string]uint64
	// TimersPending is the messages on AX_TIMERS: armed durable timers
	// plus fired ones not yet handled.
	TimersPending uint64
	// DeadLetters is the dead letters stored on AX_DLQ.
	DeadLetters uint64
	// Poison is the poison messages stored on AX_POISON.
	Poison uint64
}

// Backlog is one capability's priority level of dispatches.
type Backlog struct {
	// Capability is the capability the dispatches need.
	Capability string
	// Priority is the priority level.
	Priority int
	// Pending is the dispatches not yet delivered to an executor.
	Pending uint64
	// Oldest is the age of the oldest undelivered dispatch (0 when none).
	Oldest time.Duration
}

// NopMetrics records nothing; it is the default of Config.Metrics.
type NopMetrics struct{}

// TransitionWritten does nothing.
func (NopMetrics) TransitionWritten(Transition) {}

// SubmissionRejected does nothing.
func (NopMetrics) SubmissionRejected() {}

// DispatchHeld does nothing.
func (NopMetrics) DispatchHeld() {}

// DirectAnswered does nothing.
func (NopMetrics) DirectAnswered(string, string) {}

// RecordsCommitted does nothing.
func (NopMetrics) RecordsCommitted(int, string) {}

// ConsumerStarted does nothing.
func (NopMetrics) ConsumerStarted(string, bool) {}

// ConsumerStopped does nothing.
func (NopMetrics) ConsumerStopped(string) {}

// MessageRedelivered does nothing.
func (NopMetrics) MessageRedelivered(string) {}

// MessagePoisoned does nothing.
func (NopMetrics) MessagePoisoned(string) {}

// ReconcilerChecked does nothing.
func (NopMetrics) ReconcilerChecked(task.State) {}

// ReconcilerRepaired does nothing.
func (NopMetrics) ReconcilerRepaired(string) {}

// OldestUnfinished does nothing.
func (NopMetrics) OldestUnfinished(task.State, time.Duration) {}

// BreakersInMemory does nothing.
func (NopMetrics) BreakersInMemory(int) {}

// FairQueued does nothing.
func (NopMetrics) FairQueued(int) {}

// KeySlots does nothing.
func (NopMetrics) KeySlots(string, int, float64) {}

// Sampled does nothing.
func (NopMetrics) Sampled(Sample) {}

// SampleFailed does nothing.
func (NopMetrics) SampleFailed(error) {}

var _ Metrics = NopMetrics{}

// BreakerState is a circuit breaker's state.
type BreakerState string

// Circuit breaker states.
const (
	// BreakerClosed lets every task through.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen lets no task through until its cooldown has passed.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen lets a limited number of probe tasks through.
	BreakerHalfOpen BreakerState = "half_open"
)

// Gates is an orchestrator's copy of the pauses and circuit breakers
// shared on the AX_CONTROL bucket.
type Gates struct {
	// Breakers is the state of each task type's circuit breaker, for the
	// types whose breaker ever changed.
	Breakers map[string]BreakerState
	// Pauses are the pauses in force by task type ("" is every type).
	Pauses map[string]task.Pause
}

// Gates returns this orchestrator's copy of the pauses and circuit
// breakers (what package orchestrator/promorch exports as ax_breaker_state
// and ax_paused).
func (o *Orchestrator) Gates() Gates {
	g := o.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	out := Gates{Breakers: make(map[string]BreakerState, len(g.shared)), Pauses: make(map[string]task.Pause, len(g.pauses))}
	for typ, st := range g.shared {
		out.Breakers[typ] = BreakerState(st)
	}
	for typ, p := range g.pauses {
		out.Pauses[typ] = p
	}
	return out
}
