package lifecycle

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ax-run/ax/task"
)

// awaitEvent is where an event task goes instead of ready: waiting, its
// wait registered at now (the effect MatchEvent stores its marker and
// looks for its event), expiring at its wait_for timeout unless its
// deadline or ttl ends it earlier.
func awaitEvent(t *task.Task, now time.Time) {
	t.State = task.Waiting
	t.EventWaitSince = &now
	t.Parked = false
	end := now.Add(t.WaitFor.Timeout.Std())
	if t.ExpiresAt == nil || end.Before(*t.ExpiresAt) {
		t.ExpiresAt = &end
	}
}

// AwaitingEvent reports whether t is an event task whose wait is
// registered and not over.
func AwaitingEvent(t *task.Task) bool {
	return t.State == task.Waiting && t.WaitFor != nil && t.EventWaitSince != nil
}

// EventArrived decides the event seq (its data data) found for t: an
// event task waiting for it succeeds with the data as its result.
func EventArrived(t *task.Task, seq uint64, data []byte, env *Env) (d Decision) {
	switch {
	case t.State == task.Succeeded && t.EventSeq == seq && seq != 0:
		return Decision{Verdict: Replay}
	case !AwaitingEvent(t):
		return Decision{Verdict: Ignore}
	}
	d.Next = *t
	d.Next.Result = json.RawMessage(task.EventResult(data))
	d.Next.EventSeq = seq
	finish(&d.Next, task.Succeeded, env.Now)
	return d.applied(fmt.Sprintf("event %s (sequence %d) arrived", t.WaitFor.EventSubject(), seq))
}
