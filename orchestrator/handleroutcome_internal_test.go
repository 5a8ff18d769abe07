package orchestrator

import (
	"testing"

	"github.com/ax-run/ax/task"
)

func TestSnoozesAndCancelsDoNotCountForTheBreaker(t *testing.T) {
	t.Parallel()
	for _, s := range []task.Outcome{task.OutcomeSnoozed, task.OutcomeCancelled} {
		if countsForBreaker(s) {
			t.Fatalf("%s must not count for the circuit breaker", s)
		}
	}
}
