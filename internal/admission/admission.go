// Package admission is the contract between the orchestrator's state
// machine and what decides when a ready task may be dispatched: key
// limits (concurrency slots, rates), fairness between keys, and whatever
// comes next. The state machine (package internal/lifecycle) makes a task
// ready; its Dispatch effect asks the admission Chain; each Admitter that
// applies to the task admits it, holds it (it waits, ready, with a reason
// and a trigger that asks again) or queues it (the admitter dispatches it
// in turn). An admitter owns its state and its triggers; the state machine
// knows none of them.
//
// Pauses and circuit breakers are not admitters yet: they hold a task
// before it is made ready (at its release or retry), so that a held task
// has no execution (the orchestrator's gate.go).
package admission

import (
	"context"
	"fmt"

	"github.com/ax-run/ax/task"
)

// Verdict is an admitter's answer.
type Verdict uint8

// The verdicts.
const (
	// Admit: the task may be dispatched now (as far as this admitter is
	// concerned).
	Admit Verdict = iota
	// Hold: the task waits, ready; the admitter recorded why (its
	// record's reason) and armed the durable trigger that asks again.
	Hold
	// Queue: the admitter keeps the task and dispatches it in turn; the
	// task's durable trigger is the admitter's too.
	Queue
)

var verdictNames = [...]string{"admit", "hold", "queue"}

// String names the verdict, such as "hold".
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Ticket is a ready task on its way to its dispatch: its record and the
// revision it was read at. An admitter may change both (a task that
// waited is let go with a new reason and ready time, which its dispatch
// records).
type Ticket struct {
	Task task.Task
	Rev  uint64
}

// Admitter is one kind of admission.
type Admitter interface {
	// Name names it in errors and logs, such as "key limits".
	Name() string
	// Applies reports whether it has a say over t at all; a task no
	// admitter applies to is dispatched with the write that makes it
	// ready.
	Applies(t *task.Task) bool
	// Admit decides tk's dispatch.
	Admit(ctx context.Context, tk *Ticket) (Verdict, error)
}

// Chain asks its admitters in order.
type Chain []Admitter

// Applies reports whether any admitter has a say over t.
func (c Chain) Applies(t *task.Task) bool {
	for _, a := range c {
		if a.Applies(t) {
			return true
		}
	}
	return false
}

// Admit asks each admitter that applies to tk's task, in order: the first
// that holds or queues it decides; Admit when all admit. An error stops
// the chain (the task's trigger asks again).
func (c Chain) Admit(ctx context.Context, tk *Ticket) (Verdict, error) {
	for _, a := range c {
		if !a.Applies(&tk.Task) {
			continue
		}
		v, err := a.Admit(ctx, tk)
		if err != nil {
			return v, fmt.Errorf("%s: %w", a.Name(), err)
		}
		if v != Admit {
			return v, nil
		}
	}
	return Admit, nil
}
