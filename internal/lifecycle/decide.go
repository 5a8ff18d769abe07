package lifecycle

import (
	"fmt"
	"strings"
	"time"

	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Verdict is what the orchestrator does with a Decision.
type Verdict uint8

// The verdicts.
const (
	// Ignore: nothing to write (the event is superseded, handled, or not
	// this task's).
	Ignore Verdict = iota
	// Apply: write Decision.Next with a compare-and-set, then apply its
	// Effects.
	Apply
	// Replay: the event was applied already; make sure the current
	// record's effects happened.
	Replay
	// Stale: the record read is older than the event (a stream leader that
	// was behind answered); read again. Decision.Err says why.
	Stale
	// Refuse: the event asks for what the record does not allow;
	// Decision.Err says why, for its sender.
	Refuse
)

var verdictNames = [...]string{"ignore", "apply", "replay", "stale", "refuse"}

// String names the verdict, such as "apply".
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Decision is a transition decided: with Apply, Next is the record to
// write (Next.State its target) and Reason the transition's reason.
type Decision struct {
	Verdict Verdict
	Next    task.Task
	Reason  string
	// Err says why, for Stale and Refuse.
	Err error
	// Warning, when set, is something about the event worth an operator's
	// eye (a report refused for the objects it names), logged by the
	// orchestrator.
	Warning string
}

// Env is what decisions read besides the record and the event.
type Env struct {
	// Now is the orchestrator's clock.
	Now time.Time
	// RetryDelay is the backoff before the retry of a failed attempt n.
	RetryDelay func(attempt int) time.Duration
	// MaxShards bounds a planner's shards; MaxShardsFlag names where a
	// bound below task.MaxShards was configured.
	MaxShards     int
	MaxShardsFlag string
	// NewExecutionID names a new execution.
	NewExecutionID func() string
}

func apply(next task.Task, reason string) Decision {
	return Decision{Verdict: Apply, Next: next, Reason: reason}
}

// Ready is t made ready for attempt under a new execution, not dispatched
// yet, at now.
func Ready(t task.Task, attempt int, now time.Time, executionID string) task.Task {
	t.State = task.Ready
	t.Attempt = attempt
	t.ExecutionID = executionID
	t.Executor = ""
	t.RetryAt = nil
	t.StartedAt = nil
	t.FinishedAt = nil
	t.ReadyAt = &now
	t.Dispatches = 1
	t.Takeovers = 0
	t.DispatchRevision = 0 // a new execution, not dispatched yet
	return t
}

// Finished is t moved to the final state at now.
func Finished(t task.Task, state task.State, now time.Time) task.Task {
	t.State = state
	t.FinishedAt = &now
	return t
}

// Report decides what an attempt's report (r, checked for its token and
// subject) does to the task's record t read at rev.
func Report(t task.Task, rev uint64, r task.Report, env Env) Decision {
	switch {
	case rev < max(r.DispatchRevision, r.ClaimRevision):
		return Decision{Verdict: Stale, Err: fmt.Errorf("report of %s: read revision %d, older than its attempt's at %d (a stale read); trying again",
			r.ID, rev, max(r.DispatchRevision, r.ClaimRevision))}
	case t.ExecutionID != r.ExecutionID:
		return Decision{Verdict: Ignore, Reason: "the result of a superseded attempt"}
	case r.Type != t.Type:
		return Decision{Verdict: Ignore, Reason: "the report names another task type than its task's",
			Warning: fmt.Sprintf("a report of %s names type %q; the task's is %q", t.ID, r.Type, t.Type)}
	case t.State != task.Running && t.State != task.Ready:
		// Ready under the report's execution is an attempt that ended
		// before anything marked it running (executors do not write
		// records). Any other state: the report was applied already (a
		// redelivery) or the task was cancelled meanwhile.
		return Decision{Verdict: Replay}
	}
	return Outcome(t, r, env)
}

// Outcome computes a running (or ready) task's next record from its
// attempt's report.
func Outcome(t task.Task, r task.Report, env Env) Decision {
	// A report comes from outside: its error and inline result are bounded
	// here too, whatever the executor did.
	r.Error = task.TruncateError(r.Error)
	if r.Status == task.OutcomeSucceeded && len(r.Result) > task.InlineResultLimit {
		r.Status, r.Permanent, r.Result = task.OutcomeFailed, true, nil
		r.Error = fmt.Sprintf("the report's inline result is over the %d-byte limit (executors store larger results in %s)",
			task.InlineResultLimit, subject.ObjectBucket(t.Capability))
	}
	var warning string
	if why := objectsProblem(t, r); why != "" {
		warning = "refusing a report whose objects are not its attempt's: " + why
		r.Status, r.Permanent, r.Error = task.OutcomeFailed, true, why
		r.Result, r.ResultObject, r.ResultBucket, r.ResultDigest, r.Plan = nil, "", "", "", nil
	}
	d := outcome(t, r, env)
	d.Warning = warning
	return d
}

func outcome(t task.Task, r task.Report, env Env) Decision {
	now := env.Now
	t.UpdatedAt = now
	t.DispatchRevision = 0 // its dispatch was delivered: the attempt ended
	if t.StartedAt == nil && !r.StartedAt.IsZero() {
		t.StartedAt = &r.StartedAt
	}
	if t.Executor == "" {
		t.Executor = r.Executor
	}
	switch r.Status {
	case task.OutcomeCancelled:
		reason := fmt.Sprintf("cancelled by its handler in attempt %d", t.Attempt)
		if r.Error != "" {
			reason += ": " + r.Error
		}
		return apply(Finished(t, task.Cancelled, now), reason)
	case task.OutcomeSnoozed:
		if t.Snoozes < task.MaxSnoozes {
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
			return apply(t, fmt.Sprintf("attempt %d snoozed for %s (snooze %d of at most %d)", t.Attempt+1, delay.Round(time.Millisecond), t.Snoozes, task.MaxSnoozes))
		}
		r.Status = task.OutcomeFailed
		r.Error = fmt.Sprintf("snoozed %d times in this attempt series; the limit is %d", t.Snoozes, task.MaxSnoozes)
	case task.OutcomeSucceeded:
		if t.Shardable && t.Phase != task.PhaseAggregate {
			return planned(t, r, env)
		}
		t.ResultObject = r.ResultObject
		t.ResultBucket, t.ResultDigest = r.ResultBucket, r.ResultDigest
		t.Result = r.Result
		return apply(Finished(t, task.Succeeded, now), fmt.Sprintf("attempt %d succeeded", t.Attempt))
	}
	t.AddError(task.AttemptError{Attempt: t.Attempt, ExecutionID: r.ExecutionID, Executor: r.Executor, Error: r.Error, At: now})
	switch {
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		return apply(Finished(t, task.Expired, now), fmt.Sprintf("deadline %s passed while running", t.ExpiresAt.Format(time.RFC3339Nano)))
	case r.Permanent:
		return apply(Finished(t, task.Failed, now), fmt.Sprintf("attempt %d failed permanently: %s", t.Attempt, r.Error))
	case t.Attempt > t.RetryLimit():
		return apply(Finished(t, task.Failed, now), fmt.Sprintf("retries exhausted after %d attempts: %s", t.Attempt, r.Error))
	}
	delay := env.RetryDelay(t.Attempt)
	if r.RetryAfter != nil && *r.RetryAfter > 0 {
		delay = r.RetryAfter.Std()
	}
	at := now.Add(delay)
	t.State = task.Retrying
	t.RetryAt = &at
	return apply(t, fmt.Sprintf("attempt %d failed: %s; retry in %s", t.Attempt, r.Error, delay.Round(time.Millisecond)))
}

// planned is a shardable task's planner succeeding: it waits for its
// shards, or fails when the plan is unusable.
func planned(t task.Task, r task.Report, env Env) Decision {
	fail := func(why string) Decision {
		t.AddError(task.AttemptError{Attempt: t.Attempt, ExecutionID: r.ExecutionID, Executor: r.Executor, Error: why, At: env.Now})
		return apply(Finished(t, task.Failed, env.Now), "plan rejected: "+why)
	}
	switch {
	case r.Plan == nil:
		return fail("the planner reported no plan (is the type registered with executor.HandleShards on " + r.Executor + "?)")
	case r.Plan.Shards < 0 || r.Plan.Shards > env.MaxShards:
		src := ""
		if env.MaxShards < task.MaxShards && env.MaxShardsFlag != "" {
			src = " (" + env.MaxShardsFlag + ")"
		}
		return fail(fmt.Sprintf("the planner returned %d shards; the limit is %d%s", r.Plan.Shards, env.MaxShards, src))
	}
	t.State = task.Waiting
	t.Phase = task.PhaseShards
	t.Sharding = &task.Sharding{PlanRef: *r.Plan, PlannedAt: env.Now}
	return apply(t, fmt.Sprintf("attempt %d planned %d shards", t.Attempt, r.Plan.Shards))
}

// objectsProblem says what is wrong with the objects a successful report
// names: its result object and its plan must be its attempt's, in its
// capability's object store (or the legacy one) with a valid digest.
func objectsProblem(t task.Task, r task.Report) string {
	if r.Status != task.OutcomeSucceeded {
		return ""
	}
	if r.ResultObject != "" {
		if why := ObjectRefProblem("result object", r.ResultObject, task.ResultObjectName(t.ID, r.ExecutionID), r.ResultBucket, r.ResultDigest, t.Capability); why != "" {
			return why
		}
	}
	if r.Plan != nil {
		return ObjectRefProblem("plan", r.Plan.Object, task.PlanObject(t.ID, r.ExecutionID), r.Plan.Bucket, r.Plan.Digest, t.Capability)
	}
	return ""
}

// ObjectRefProblem says what is wrong with one object a report names (""
// when nothing is): want is the attempt's own name for it.
func ObjectRefProblem(what, name, want, bucket, digest, capability string) string {
	switch own := subject.ObjectBucket(capability); {
	case name != want:
		return fmt.Sprintf("the report's %s %q is not this attempt's (%s)", what, name, want)
	case bucket == "" && digest != "" && !object.ValidDigest(digest):
		return fmt.Sprintf("the report's %s %s has an invalid digest %q", what, name, digest)
	case bucket == "":
		return "" // in the legacy AX_OBJECTS
	case bucket != own:
		return fmt.Sprintf("the report's %s %s is in %s, not in %s (the object store of the task's capability)", what, name, bucket, own)
	case !object.ValidDigest(digest):
		return fmt.Sprintf("the report's %s %s has no valid digest (%q)", what, name, digest)
	}
	return ""
}

// RetryDue decides a retry timer for attempt firing on t: ready for the
// next attempt (a snooze's end runs the same attempt again).
func RetryDue(t task.Task, attempt int, env Env) Decision {
	switch {
	case t.State == task.Retrying && t.Attempt == attempt:
	case t.State == task.Ready && t.Attempt == attempt+1:
		return Decision{Verdict: Replay} // applied before a crash: dispatch it
	case !t.State.Terminal() && t.Attempt <= attempt:
		// Older than the retrying record that armed this timer: a stale
		// leader answered. Ignoring the timer would strand the task.
		return Decision{Verdict: Stale, Err: fmt.Errorf("retry of %s: read %s at attempt %d, before the retry of attempt %d (a stale read); trying again",
			t.ID, t.State, t.Attempt, attempt)}
	default:
		return Decision{Verdict: Ignore} // cancelled, re-driven or handled already
	}
	next := Ready(t, t.Attempt+1, env.Now, env.NewExecutionID())
	if t.Snoozed {
		next.Snoozed = false
		return apply(next, fmt.Sprintf("snooze %d over; attempt %d runs again", t.Snoozes, next.Attempt))
	}
	return apply(next, fmt.Sprintf("retry %d of %d", attempt, t.RetryLimit()))
}

// deadlineSlack is how early a deadline timer may fire (the server's
// schedule precision) and still expire its task.
const deadlineSlack = time.Second

// DeadlinePassed decides a deadline timer firing on t: expired, wherever
// it is (a running handler is told to stop by the effects).
func DeadlinePassed(t task.Task, env Env) Decision {
	switch {
	case t.State == task.Expired:
		return Decision{Verdict: Replay} // applied before a crash
	case t.State.Terminal():
		return Decision{Verdict: Ignore}
	case t.ExpiresAt == nil || t.ExpiresAt.After(env.Now.Add(deadlineSlack)):
		return Decision{Verdict: Ignore} // not this task's deadline (a stale timer)
	}
	return apply(Finished(t, task.Expired, env.Now), fmt.Sprintf("deadline %s passed while %s", t.ExpiresAt.Format(time.RFC3339Nano), t.State))
}

// NotStarted decides a dispatch timer of executionID firing on t: no
// executor started it in time, so it is dispatched again under a new
// execution, or after MaxDispatches fails naming the capability nobody
// served.
func NotStarted(t task.Task, executionID string, env Env) Decision {
	if t.State != task.Ready || t.ExecutionID != executionID {
		return Decision{Verdict: Ignore} // started, or dispatched again already
	}
	if t.Dispatches < t.MaxDispatches {
		next := Ready(t, t.Attempt, env.Now, env.NewExecutionID())
		next.Dispatches = t.Dispatches + 1
		return apply(next, fmt.Sprintf("not started within %s; dispatch %d of %d", t.DispatchTimeout.Std(), next.Dispatches, t.MaxDispatches))
	}
	next := Finished(t, task.Failed, env.Now)
	reason := fmt.Sprintf("not started after %d dispatches of %s each: no executor took capability %q", t.Dispatches, t.DispatchTimeout.Std(), t.Capability)
	next.AddError(task.AttemptError{Attempt: t.Attempt, ExecutionID: t.ExecutionID, Error: reason, At: env.Now})
	return apply(next, reason)
}

// Cancel decides a cancel request: an unfinished task ends cancelled (its
// handler, if one runs, is told to stop by the effects).
func Cancel(t task.Task, reason string, env Env) Decision {
	if t.State.Terminal() {
		return Decision{Verdict: Refuse, Err: fmt.Errorf("task %s is already %s", t.ID, t.State)}
	}
	return apply(Finished(t, task.Cancelled, env.Now), reason)
}

// Redispatch decides the reconciler's finding that the dispatch of
// executionID is lost (gone from its level, or held by an orchestrator
// that died): dispatched again under a new execution, so that an executor
// holding an old copy cannot report it. The dispatches counted stay.
func Redispatch(t task.Task, executionID, reason string, env Env) Decision {
	if t.State != task.Ready || t.ExecutionID != executionID {
		return Decision{Verdict: Ignore} // moved on meanwhile
	}
	next := Ready(t, t.Attempt, env.Now, env.NewExecutionID())
	next.Dispatches = t.Dispatches
	return apply(next, reason)
}

// Redrive decides an operator's re-drive of a failed task: a fresh attempt
// series. withDependents asks to re-open the dependents its failure
// cancelled too (the caller does that): a task re-driven before is then
// left as it is, so the request re-opens only. A ready task re-driven
// before is a replayed request: its dispatch is made sure of first.
func Redrive(t task.Task, withDependents bool, reason string, env Env) Decision {
	switch {
	case t.IsShard():
		// Whatever its state: a shard's own end (failed, or cancelled by a
		// sibling's failure) is its parent's to re-plan.
		return Decision{Verdict: Refuse, Err: fmt.Errorf("task %s is a shard of %s; shards run again only with their parent", t.ID, t.Parent)}
	case withDependents && t.Redrives > 0 && t.State != task.Failed:
		return Decision{Verdict: Ignore}
	case t.State != task.Failed:
		return Decision{Verdict: Refuse, Err: fmt.Errorf("task %s is %s, only failed tasks can be re-driven", t.ID, t.State)}
	case t.Phase == task.PhaseShards:
		return Decision{Verdict: Refuse, Err: fmt.Errorf("task %s failed in its shard phase (%s); submit it again under a new id to re-plan", t.ID, t.Reason)}
	}
	next := Ready(t, 1, env.Now, env.NewExecutionID())
	next.Errors = nil
	next.Result = nil
	next.Redrives++
	next.Snoozes, next.Snoozed = 0, false
	return apply(next, reason)
}

// Reopen decides the re-drive (with dependents) of upstream reaching a
// dependent t that upstream's failure cancelled: it waits again for its
// dependencies. A record cancelled before CancelledBy existed names the
// upstream in its reason.
func Reopen(t task.Task, upstream, origin string, env Env) Decision {
	if !ReopenedBy(t, upstream) {
		return Decision{Verdict: Ignore}
	}
	t.State = task.Waiting
	t.FinishedAt = nil
	t.CancelledBy = ""
	return apply(t, "re-opened by "+origin)
}

// ReopenedBy reports whether a re-drive of upstream with its dependents
// re-opens t: t was cancelled by upstream's failure.
func ReopenedBy(t task.Task, upstream string) bool {
	return t.State == task.Cancelled && (t.CancelledBy == upstream ||
		t.CancelledBy == "" && strings.HasPrefix(t.Reason, "upstream "+upstream+" is "))
}
