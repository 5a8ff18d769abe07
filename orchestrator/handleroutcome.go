package orchestrator

import (
	"fmt"
	"time"

	"github.com/ax-run/ax/task"
)

// handlerOutcome applies the outcomes a handler asks for besides success
// and failure: a snooze (the same attempt again later, not counted as a
// failure, up to task.MaxSnoozes per attempt series) and a cancel. It
// returns ok=false with the report turned into a failure when a snooze is
// over the limit.
func (o *Orchestrator) handlerOutcome(t task.Task, r task.Report, now time.Time) (task.Task, string, task.Report, bool) {
	switch r.Status {
	case task.OutcomeCancelled:
		t.State = task.Cancelled
		t.FinishedAt = &now
		reason := fmt.Sprintf("cancelled by its handler in attempt %d", t.Attempt)
		if r.Error != "" {
			reason += ": " + r.Error
		}
		return t, reason, r, true
	case task.OutcomeSnoozed:
		if t.Snoozes >= task.MaxSnoozes {
			r.Status = task.OutcomeFailed
			r.Error = fmt.Sprintf("snoozed %d times in this attempt series; the limit is %d", t.Snoozes, task.MaxSnoozes)
			return t, "", r, false
		}
		var delay time.Duration
		if r.RetryAfter != nil && *r.RetryAfter > 0 {
			delay = r.RetryAfter.Std()
		}
		at := now.Add(delay)
		t.Snoozes++
		t.Snoozed = true
		// The next dispatch runs this attempt again under its number.
		t.Attempt--
		t.State = task.Retrying
		t.RetryAt = &at
		return t, fmt.Sprintf("attempt %d snoozed for %s (snooze %d of at most %d)", t.Attempt+1, delay.Round(time.Millisecond), t.Snoozes, task.MaxSnoozes), r, true
	}
	return t, "", r, false
}

// countsForBreaker reports whether an outcome says anything about the
// health of its type: a snooze or a handler's cancel does not.
func countsForBreaker(s task.Outcome) bool {
	return s == task.OutcomeSucceeded || s == task.OutcomeFailed
}
