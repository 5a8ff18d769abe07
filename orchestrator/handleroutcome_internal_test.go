package orchestrator

import (
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/task"
)

func TestHandlerOutcome(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	running := task.Task{Spec: task.Spec{ID: "t"}, State: task.Running, Attempt: 2}
	d := task.Duration(time.Minute)
	o := &Orchestrator{}

	next, reason, _, ok := o.handlerOutcome(running, task.Report{Status: task.OutcomeSnoozed, RetryAfter: &d}, now)
	if !ok || next.State != task.Retrying || next.Attempt != 1 || next.Snoozes != 1 || !next.Snoozed ||
		!next.RetryAt.Equal(now.Add(time.Minute)) || len(next.Errors) != 0 || !strings.Contains(reason, "attempt 2 snoozed for 1m0s") {
		t.Fatalf("snooze: ok %v, %+v, %q", ok, next, reason)
	}

	capped := running
	capped.Snoozes = task.MaxSnoozes
	_, _, r, ok := o.handlerOutcome(capped, task.Report{Status: task.OutcomeSnoozed, RetryAfter: &d}, now)
	if ok || r.Status != task.OutcomeFailed || !strings.Contains(r.Error, "the limit is 100") {
		t.Fatalf("snooze over the cap: ok %v, report %+v", ok, r)
	}

	next, reason, _, ok = o.handlerOutcome(running, task.Report{Status: task.OutcomeCancelled, Error: "order withdrawn"}, now)
	if !ok || next.State != task.Cancelled || next.FinishedAt == nil || reason != "cancelled by its handler in attempt 2: order withdrawn" {
		t.Fatalf("cancel: ok %v, %+v, %q", ok, next, reason)
	}

	for _, s := range []task.Outcome{task.OutcomeSnoozed, task.OutcomeCancelled} {
		if countsForBreaker(s) {
			t.Fatalf("%s must not count for the circuit breaker", s)
		}
	}
}
