package orchestrator

import (
	"github.com/ax-run/ax/task"
)

// countsForBreaker reports whether an outcome says anything about the
// health of its type: a snooze or a handler's cancel does not.
func countsForBreaker(s task.Outcome) bool {
	return s == task.OutcomeSucceeded || s == task.OutcomeFailed
}
