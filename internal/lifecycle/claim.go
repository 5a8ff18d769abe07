package lifecycle

import (
	"fmt"
	"time"

	"github.com/ax-run/ax/task"
)

// ClaimDecision is a claim decided. With Apply, Next is the record to
// write (running on the claiming executor) and the reply is granted; when
// TakeOver is set, only if the running attempt's lease lapsed (otherwise
// the reply is running elsewhere). With Replay the execution ended: its
// effects are made sure of before the reply (Status). Otherwise Status is
// the reply, with Err for a refusal or a stale read.
type ClaimDecision struct {
	Verdict  Verdict
	Status   task.ClaimStatus
	TakeOver bool
	Next     task.Task
	Reason   string
	Err      error
}

// Claim decides an executor's claim req, asked on capability's claim
// subject, of the task's record t read at rev: mark the attempt running
// if it is ready under the same execution; grant again a mark asked again
// by the executor it runs on; take over from an executor whose lease
// lapsed when req is a redelivery. An executor may claim only tasks of the
// capability it asks for.
func Claim(t *task.Task, rev uint64, capability string, req *task.ClaimRequest, env *Env) ClaimDecision {
	switch {
	case rev < req.Revision:
		// The stream leader answered behind the dispatch (one cut off by a
		// partition): deciding on it could end a live attempt.
		return ClaimDecision{Verdict: Stale, Err: fmt.Errorf("read revision %d of %s, older than its dispatch at %d (a stale read); ask again", rev, req.ID, req.Revision)}
	case t.Capability != capability:
		return ClaimDecision{Verdict: Refuse, Status: task.ClaimEnded, Err: fmt.Errorf("task %s is of capability %q, not %q", req.ID, t.Capability, capability)}
	case t.ExecutionID == req.ExecutionID && t.State != task.Ready && t.State != task.Running:
		// This execution's attempt ended (or the task was cancelled), and
		// its dispatch is still delivered: its executor may have died
		// between the outcome's write and its effects. The dispatch is
		// then the effects' last trigger.
		return ClaimDecision{Verdict: Replay, Status: task.ClaimEnded}
	case t.ExecutionID != req.ExecutionID:
		return ClaimDecision{Verdict: Ignore, Status: task.ClaimEnded}
	case t.State == task.Running && req.Mark && t.Executor == req.Executor:
		return ClaimDecision{Verdict: Ignore, Status: task.ClaimGranted}
	case t.State == task.Running && req.Mark:
		return ClaimDecision{Verdict: Ignore, Status: task.ClaimRunningElsewhere} // taken over: a mark takes nothing
	case t.State == task.Running && req.Delivered > 1:
		next := t.Claimed(req.Executor, claimStart(req, env.Now))
		next.Takeovers = t.Takeovers + 1
		return ClaimDecision{Verdict: Apply, Status: task.ClaimGranted, TakeOver: true, Next: next,
			Reason: fmt.Sprintf("taken over by %s from %s (delivery %d)", req.Executor, t.Executor, req.Delivered)}
	case t.State == task.Running:
		return ClaimDecision{Verdict: Ignore, Status: task.ClaimRunningElsewhere}
	}
	next := t.Claimed(req.Executor, claimStart(req, env.Now)) // ready under this execution
	return ClaimDecision{Verdict: Apply, Status: task.ClaimGranted, Next: next, Reason: next.Reason}
}

// claimStart is when the claimed attempt started: the executor's time,
// unless it is missing or ahead of the orchestrator's clock.
func claimStart(req *task.ClaimRequest, now time.Time) time.Time {
	if req.StartedAt.IsZero() || req.StartedAt.After(now) {
		return now
	}
	return req.StartedAt.UTC()
}
