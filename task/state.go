package task

import "fmt"

// State is where a task is in its life. The zero value is not a valid state.
type State string

// The states a task moves through. See Transitions for the allowed moves.
const (
	// Waiting: accepted, waiting for its dependencies to succeed.
	Waiting State = "waiting"
	// Ready: dispatched on task.ready.<capability>.p<N>, not yet started.
	Ready State = "ready"
	// Running: claimed by an executor that runs its handler.
	Running State = "running"
	// Retrying: an attempt failed; a durable timer will make it ready again.
	Retrying State = "retrying"
	// Succeeded: an attempt succeeded. Terminal.
	Succeeded State = "succeeded"
	// Failed: the last allowed attempt failed, or it failed permanently; a
	// dead-letter entry holds it. Terminal unless re-driven.
	Failed State = "failed"
	// Cancelled: cancelled by a user or because an upstream dependency did
	// not succeed. Terminal, unless the upstream whose failure cancelled it
	// is re-driven with its dependents (it is then re-opened: waiting).
	Cancelled State = "cancelled"
	// Expired: its deadline passed before it finished. Terminal.
	Expired State = "expired"
)

// states lists every state in life-cycle order.
var states = [...]State{Waiting, Ready, Running, Retrying, Succeeded, Failed, Cancelled, Expired}

// States returns every state in life-cycle order (a new slice each call).
func States() []State { return append([]State(nil), states[:]...) }

// Terminal reports whether no further transition is expected (a failed task
// can still be re-driven by an operator, and a task its failure cancelled
// re-opened with it).
func (s State) Terminal() bool {
	switch s {
	case Succeeded, Failed, Cancelled, Expired:
		return true
	}
	return false
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	for _, v := range states {
		if s == v {
			return true
		}
	}
	return false
}

// transitions is the explicit transition table: transitions[from] lists the
// states a task in from may move to.
var transitions = map[State][]State{
	// Waiting → Succeeded/Failed: a sharded task's shards ended (no aggregator, or the policy failed it).
	Waiting: {Ready, Waiting, Succeeded, Failed, Cancelled, Expired},
	// Ready → Succeeded/Retrying/Waiting/Failed: an executor's report of an
	// attempt that ended before anything marked it running (executors do
	// not write records; see Running).
	Ready: {Running, Ready, Succeeded, Retrying, Waiting, Failed, Cancelled, Expired},
	// Running → Waiting: a shardable task's planner succeeded; it waits for its shards.
	Running:   {Succeeded, Retrying, Failed, Running, Waiting, Cancelled, Expired},
	Retrying:  {Ready, Retrying, Cancelled, Expired},
	Failed:    {Ready},
	Succeeded: nil,
	// Cancelled → Waiting: re-opened by a re-drive with dependents of the
	// upstream whose failure cancelled it (Task.CancelledBy).
	Cancelled: {Waiting},
	Expired:   nil,
}

// initialStates are the states a task may be created in: Waiting, Ready,
// Cancelled (an upstream dependency already did not succeed) or Expired (a
// deadline that had passed at submission).
var initialStates = []State{Waiting, Ready, Cancelled, Expired}

// Transitions returns the states a task in from may move to, from the
// transition table (a new slice each call; nil for a terminal state other
// than Failed, or an unknown one). An empty from means the task is being
// created: a new task starts in Waiting, Ready, Cancelled (an upstream
// dependency already did not succeed) or Expired (its deadline had passed).
func Transitions(from State) []State {
	if from == "" {
		return append([]State(nil), initialStates...)
	}
	return append([]State(nil), transitions[from]...)
}

// CanTransition reports whether from → to is allowed. An empty from means the
// task is being created.
func CanTransition(from, to State) bool {
	allowed := initialStates
	if from != "" {
		allowed = transitions[from]
	}
	for _, s := range allowed {
		if s == to {
			return true
		}
	}
	return false
}

// ErrInvalidTransition is returned when a transition is not in the table.
type ErrInvalidTransition struct {
	// From is the task's state ("" when it was being created); To the
	// state it was asked to move to.
	From, To State
}

// Error names the refused move, such as "invalid transition succeeded -> ready".
func (e *ErrInvalidTransition) Error() string {
	from := string(e.From)
	if from == "" {
		from = "(new)"
	}
	return fmt.Sprintf("invalid transition %s -> %s", from, e.To)
}
