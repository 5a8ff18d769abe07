package lifecycle

import (
	"encoding/json"
	"fmt"

	"github.com/ax-run/ax/task"
)

// Approve decides an operator's approval (a.Approved) or rejection of an
// event task waiting for its event (a.By and a.Reason set; its time is
// env.Now). Approved, the task succeeds with the approval as its result;
// rejected, it fails for good (no retry) with a.RejectionError(), so its
// all_succeeded dependents are cancelled and its any_failed ones run. A
// task that is not an event task, is not waiting for its event yet (its
// dependencies or start time hold it) or has ended is refused, saying
// which; the same decision applied already (a command delivered again) is
// a Replay.
func Approve(t *task.Task, a task.Approval, env *Env) (d Decision) {
	switch {
	case t.Approval != nil && t.Approval.Approved == a.Approved && t.Approval.By == a.By && t.Approval.Reason == a.Reason && t.State.Terminal():
		return Decision{Verdict: Replay}
	case t.WaitFor == nil:
		return Decision{Verdict: Refuse, Err: fmt.Errorf("task %s is not an event task (it has no wait_for): only a task waiting for an event can be approved or rejected", t.ID)}
	case t.State.Terminal():
		why := t.Reason
		if t.Approval != nil {
			why = approvalReason(*t.Approval)
		}
		return Decision{Verdict: Refuse, Err: fmt.Errorf("task %s is already %s: %s", t.ID, t.State, why)}
	case !AwaitingEvent(t):
		return Decision{Verdict: Refuse, Err: fmt.Errorf("task %s is %s and not waiting for its event yet (its dependencies or start time hold it): it can be approved or rejected once it waits for %s", t.ID, t.State, t.WaitFor.EventSubject())}
	}
	a.At = env.Now
	d.Next = *t
	n := &d.Next
	n.Approval = &a
	if a.Approved {
		n.Result, _ = json.Marshal(a)
		finish(n, task.Succeeded, env.Now)
		return d.applied(approvalReason(a))
	}
	why := a.RejectionError()
	failWith(n, why, env.Now)
	return d.applied(why)
}

// approvalReason is the reason of a's transition: "approved by <by>:
// <reason>", or its rejection's error.
func approvalReason(a task.Approval) string {
	if !a.Approved {
		return a.RejectionError()
	}
	s := "approved"
	if a.By != "" {
		s += " by " + a.By
	}
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return s
}
