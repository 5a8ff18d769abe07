package task

import "testing"

// A dead letter keeps the last KeepAttempts failures: its attempt count is
// the last attempt's number, not how many it kept.
func TestDeadLetterLastAttempt(t *testing.T) {
	var kept []AttemptError
	for a := 2; a <= 6; a++ {
		kept = append(kept, AttemptError{Attempt: a, Error: "boom"})
	}
	for _, c := range []struct {
		d    DeadLetter
		want int
	}{
		{DeadLetter{Attempts: kept}, 6},
		{DeadLetter{Attempts: kept[:1]}, 2},
		{DeadLetter{}, 0},
	} {
		if got := c.d.LastAttempt(); got != c.want {
			t.Errorf("LastAttempt of %d kept errors = %d, want %d", len(c.d.Attempts), got, c.want)
		}
	}
}
