package lifecycle

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
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

// A Decision holds the next record by value (a task record is most of a
// kilobyte): the functions here build it in place, in the caller's
// result, and never copy a record more than once. The records they are
// given are read, not changed.

// applied makes d an Apply with its reason.
func (d *Decision) applied(reason string) Decision {
	d.Verdict, d.Reason = Apply, reason
	return *d
}

// Ready is t made ready for attempt under a new execution, not dispatched
// yet, at now.
func Ready(t task.Task, attempt int, now time.Time, executionID string) task.Task {
	ready(&t, attempt, now, executionID)
	return t
}

func ready(t *task.Task, attempt int, now time.Time, executionID string) {
	if t.WaitFor != nil {
		awaitEvent(t, now)
		return
	}
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
}

// Finished is t moved to the final state at now.
func Finished(t task.Task, state task.State, now time.Time) task.Task {
	finish(&t, state, now)
	return t
}

func finish(t *task.Task, state task.State, now time.Time) {
	t.State = state
	t.FinishedAt = &now
}

// Report decides what an attempt's report (r, checked for its token and
// subject) does to the task's record t read at rev.
func Report(t *task.Task, rev uint64, r *task.Report, env *Env) Decision {
	switch {
	case rev < max(r.DispatchRevision, r.ClaimRevision, r.StepRevision):
		return Decision{Verdict: Stale, Err: fmt.Errorf("report of %s: read revision %d, older than its attempt's at %d (a stale read); trying again",
			r.ID, rev, max(r.DispatchRevision, r.ClaimRevision, r.StepRevision))}
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
	return outcome(t, r, env)
}

// outcome computes a running (or ready) task's next record from its
// attempt's report.
func outcome(t *task.Task, r *task.Report, env *Env) (d Decision) {
	d.Next = *t
	o := outcomeOf(r)
	// A report comes from outside: its error and inline result are bounded
	// here too, whatever the executor did.
	o.err = task.TruncateError(o.err)
	if o.status == task.OutcomeSucceeded && len(r.Result) > task.InlineResultLimit {
		o.fail(fmt.Sprintf("the report's inline result is over the %d-byte limit (executors store larger results in %s)",
			task.InlineResultLimit, subject.ObjectBucket(t.Capability)))
	}
	if o.status == task.OutcomeSucceeded {
		if why := objectsProblem(t, r); why != "" {
			d.Warning = "refusing a report whose objects are not its attempt's: " + why
			o.fail(why)
		}
	}
	d.apply(r, o, env)
	return d
}

// reported is what outcome uses of a report, after the checks that may
// turn it into a permanent failure.
type reported struct {
	status    task.Outcome
	permanent bool
	err       string
}

func outcomeOf(r *task.Report) reported {
	return reported{status: r.Status, permanent: r.Permanent, err: r.Error}
}

// fail turns the outcome into a permanent failure saying why (a refused
// result is not recorded).
func (o *reported) fail(why string) {
	o.status, o.permanent, o.err = task.OutcomeFailed, true, why
}

func (d *Decision) apply(r *task.Report, o reported, env *Env) {
	now := env.Now
	t := &d.Next
	t.UpdatedAt = now
	t.DispatchRevision = 0 // its dispatch was delivered: the attempt ended
	if t.StartedAt == nil && !r.StartedAt.IsZero() {
		at := r.StartedAt
		t.StartedAt = &at
	}
	if t.Executor == "" {
		t.Executor = r.Executor
	}
	switch o.status {
	case task.OutcomeCancelled:
		reason := fmt.Sprintf("cancelled by its handler in attempt %d", t.Attempt)
		if o.err != "" {
			reason += ": " + o.err
		}
		finish(t, task.Cancelled, now)
		d.applied(reason)
		return
	case task.OutcomeSleeping:
		why, ok := d.sleep(r, env)
		if ok {
			return
		}
		o.status, o.permanent, o.err = task.OutcomeFailed, true, why
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
			d.applied(fmt.Sprintf("attempt %d snoozed for %s (snooze %d of at most %d)", t.Attempt+1, delay.Round(time.Millisecond), t.Snoozes, task.MaxSnoozes))
			return
		}
		o.status = task.OutcomeFailed
		o.err = fmt.Sprintf("snoozed %d times in this attempt series; the limit is %d", t.Snoozes, task.MaxSnoozes)
	case task.OutcomeSucceeded:
		if t.Shardable && t.Phase != task.PhaseAggregate {
			d.planned(r, env)
			return
		}
		t.ResultObject = r.ResultObject
		t.ResultBucket, t.ResultDigest = r.ResultBucket, r.ResultDigest
		t.Result = r.Result
		finish(t, task.Succeeded, now)
		d.applied(fmt.Sprintf("attempt %d succeeded", t.Attempt))
		return
	}
	t.AddError(task.AttemptError{Attempt: t.Attempt, ExecutionID: r.ExecutionID, Executor: r.Executor, Error: o.err, At: now})
	switch {
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		finish(t, task.Expired, now)
		d.applied(fmt.Sprintf("deadline %s passed while running", t.ExpiresAt.Format(time.RFC3339Nano)))
		return
	case o.permanent:
		finish(t, task.Failed, now)
		d.applied(fmt.Sprintf("attempt %d failed permanently: %s", t.Attempt, o.err))
		return
	case t.Attempt > t.RetryLimit():
		finish(t, task.Failed, now)
		d.applied(fmt.Sprintf("retries exhausted after %d attempts: %s", t.Attempt, o.err))
		return
	}
	delay := env.RetryDelay(t.Attempt)
	if r.RetryAfter != nil && *r.RetryAfter > 0 {
		delay = r.RetryAfter.Std()
	}
	at := now.Add(delay)
	t.State = task.Retrying
	t.RetryAt = &at
	d.applied(fmt.Sprintf("attempt %d failed: %s; retry in %s", t.Attempt, o.err, delay.Round(time.Millisecond)))
}

// planned is a shardable task's planner succeeding: it waits for its
// shards, or fails when the plan is unusable.
func (d *Decision) planned(r *task.Report, env *Env) {
	t := &d.Next
	fail := func(why string) {
		t.AddError(task.AttemptError{Attempt: t.Attempt, ExecutionID: r.ExecutionID, Executor: r.Executor, Error: why, At: env.Now})
		finish(t, task.Failed, env.Now)
		d.applied("plan rejected: " + why)
	}
	switch {
	case r.Plan == nil:
		fail("the planner reported no plan (is the type registered with executor.HandleShards on " + r.Executor + "?)")
		return
	case r.Plan.Shards < 0 || r.Plan.Shards > env.MaxShards:
		src := ""
		if env.MaxShards < task.MaxShards && env.MaxShardsFlag != "" {
			src = " (" + env.MaxShardsFlag + ")"
		}
		fail(fmt.Sprintf("the planner returned %d shards; the limit is %d%s", r.Plan.Shards, env.MaxShards, src))
		return
	}
	t.State = task.Waiting
	t.Phase = task.PhaseShards
	t.Sharding = &task.Sharding{PlanRef: *r.Plan, PlannedAt: env.Now}
	d.applied(fmt.Sprintf("attempt %d planned %d shards", t.Attempt, r.Plan.Shards))
}

// objectsProblem says what is wrong with the objects a successful report
// names: its result object and its plan must be its attempt's, in its
// capability's object store (or the legacy one) with a valid digest.
func objectsProblem(t *task.Task, r *task.Report) string {
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
func RetryDue(t *task.Task, attempt int, env *Env) (d Decision) {
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
	d.Next = *t
	ready(&d.Next, t.Attempt+1, env.Now, env.NewExecutionID())
	if t.Snoozed {
		d.Next.Snoozed = false
		if n := len(t.Steps); n > 0 && t.Steps[n-1].IsSleep() && t.RetryAt != nil && t.Steps[n-1].SleepUntil != nil && t.Steps[n-1].SleepUntil.Equal(*t.RetryAt) {
			return d.applied(fmt.Sprintf("%s over; attempt %d runs again", t.Steps[n-1].Name, d.Next.Attempt))
		}
		return d.applied(fmt.Sprintf("snooze %d over; attempt %d runs again", t.Snoozes, d.Next.Attempt))
	}
	return d.applied(fmt.Sprintf("retry %d of %d", attempt, t.RetryLimit()))
}

// deadlineSlack is how early a deadline timer may fire (the server's
// schedule precision) and still expire its task.
const deadlineSlack = time.Second

// DeadlinePassed decides a deadline timer firing on t: expired, wherever
// it is (a running handler is told to stop by the effects).
func DeadlinePassed(t *task.Task, env *Env) (d Decision) {
	switch {
	case t.State == task.Expired:
		return Decision{Verdict: Replay} // applied before a crash
	case t.State.Terminal():
		return Decision{Verdict: Ignore}
	case t.ExpiresAt == nil || t.ExpiresAt.After(env.Now.Add(deadlineSlack)):
		return Decision{Verdict: Ignore} // not this task's deadline (a stale timer)
	}
	d.Next = *t
	finish(&d.Next, task.Expired, env.Now)
	return d.applied(fmt.Sprintf("deadline %s passed while %s", t.ExpiresAt.Format(time.RFC3339Nano), t.State))
}

// NotStarted decides a dispatch timer of executionID firing on t: no
// executor started it in time, so it is dispatched again under a new
// execution, or after MaxDispatches fails naming the capability nobody
// served.
func NotStarted(t *task.Task, executionID string, env *Env) (d Decision) {
	if t.State != task.Ready || t.ExecutionID != executionID {
		return Decision{Verdict: Ignore} // started, or dispatched again already
	}
	d.Next = *t
	if t.Dispatches < t.MaxDispatches {
		ready(&d.Next, t.Attempt, env.Now, env.NewExecutionID())
		d.Next.Dispatches = t.Dispatches + 1
		return d.applied(fmt.Sprintf("not started within %s; dispatch %d of %d", t.DispatchTimeout.Std(), d.Next.Dispatches, t.MaxDispatches))
	}
	finish(&d.Next, task.Failed, env.Now)
	reason := fmt.Sprintf("not started after %d dispatches of %s each: no executor took capability %q", t.Dispatches, t.DispatchTimeout.Std(), t.Capability)
	d.Next.AddError(task.AttemptError{Attempt: t.Attempt, ExecutionID: t.ExecutionID, Error: reason, At: env.Now})
	return d.applied(reason)
}

// Cancel decides a cancel request: an unfinished task ends cancelled (its
// handler, if one runs, is told to stop by the effects).
func Cancel(t *task.Task, reason string, env *Env) (d Decision) {
	if t.State.Terminal() {
		return Decision{Verdict: Refuse, Err: fmt.Errorf("task %s is already %s", t.ID, t.State)}
	}
	d.Next = *t
	finish(&d.Next, task.Cancelled, env.Now)
	return d.applied(reason)
}

// Redispatch decides the reconciler's finding that the dispatch of
// executionID is lost (gone from its level, or held by an orchestrator
// that died): dispatched again under a new execution, so that an executor
// holding an old copy cannot report it. The dispatches counted stay.
func Redispatch(t *task.Task, executionID, reason string, env *Env) (d Decision) {
	if t.State != task.Ready || t.ExecutionID != executionID {
		return Decision{Verdict: Ignore} // moved on meanwhile
	}
	d.Next = *t
	ready(&d.Next, t.Attempt, env.Now, env.NewExecutionID())
	d.Next.Dispatches = t.Dispatches
	return d.applied(reason)
}

// Redrive decides an operator's re-drive of a failed task: a fresh attempt
// series. withDependents asks to re-open the dependents its failure
// cancelled too (the caller does that): a task re-driven before is then
// left as it is, so the request re-opens only.
func Redrive(t *task.Task, withDependents bool, reason string, env *Env) (d Decision) {
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
	d.Next = *t
	ready(&d.Next, 1, env.Now, env.NewExecutionID())
	d.Next.Errors = nil
	d.Next.Result = nil
	d.Next.Approval = nil // a rejected event task waits again, for an event or an approval
	d.Next.Redrives++
	d.Next.Snoozes, d.Next.Snoozed = 0, false
	return d.applied(reason)
}

// Reopen decides the re-drive (with dependents) of upstream reaching a
// dependent t that upstream's failure cancelled: it waits again for its
// dependencies.
func Reopen(t *task.Task, upstream, origin string) (d Decision) {
	if !ReopenedBy(t, upstream) {
		return Decision{Verdict: Ignore}
	}
	d.Next = *t
	d.Next.State = task.Waiting
	d.Next.FinishedAt = nil
	d.Next.CancelledBy = ""
	return d.applied("re-opened by " + origin)
}

// ReopenedBy reports whether a re-drive of upstream with its dependents
// re-opens t: t was cancelled by upstream's failure. A record cancelled
// before CancelledBy existed names the upstream in its reason.
func ReopenedBy(t *task.Task, upstream string) bool {
	return t.State == task.Cancelled && (t.CancelledBy == upstream ||
		t.CancelledBy == "" && strings.HasPrefix(t.Reason, "upstream "+upstream+" is "))
}

// reasonNoneFailed is the reason of an any_failed dependent cancelled
// because all its upstreams ended and none failed.
const reasonNoneFailed = "trigger rule any_failed: no upstream failed"

// CancelledByCascade reports whether t was cancelled by the end of its
// upstream: by that upstream alone (ReopenedBy), or by all its upstreams
// together under its trigger rule.
func CancelledByCascade(t *task.Task, upstream string) bool {
	return ReopenedBy(t, upstream) ||
		t.State == task.Cancelled && t.CancelledBy == "" && t.Reason == reasonNoneFailed && slices.Contains(t.DependsOn, upstream)
}

// Resolve decides a waiting task t by its trigger rule's verdict over its
// upstreams (task.TriggerRule): cancelled (naming decider, the upstream
// whose end decided it alone, in state deciderState; "" for a rule decided
// by all of them), or released for its first attempt — unless its start
// time is still ahead (its start timer releases it then). Any other
// verdict leaves it waiting. Pauses and breakers hold a release after this
// decision (admission).
func Resolve(t *task.Task, verdict task.Verdict, decider string, deciderState task.State, env *Env) (d Decision) {
	if t.State != task.Waiting {
		return Decision{Verdict: Ignore}
	}
	switch {
	case verdict == task.VerdictCancel && decider == "":
		d.Next = *t
		finish(&d.Next, task.Cancelled, env.Now)
		return d.applied(reasonNoneFailed)
	case verdict == task.VerdictCancel:
		return UpstreamEnded(t, decider, deciderState, env)
	case verdict == task.VerdictRun && t.StartAt != nil && t.StartAt.After(env.Now):
		return Decision{Verdict: Ignore} // its start timer releases it
	case verdict == task.VerdictRun:
		d.Next = *t
		ready(&d.Next, 1, env.Now, env.NewExecutionID())
		return d.applied(releaseReason(t, decider, deciderState))
	}
	return Decision{Verdict: Ignore}
}

// releaseReason says why a waiting task is released under its trigger
// rule; decider is the upstream whose end released it alone, if one did.
func releaseReason(t *task.Task, decider string, deciderState task.State) string {
	switch {
	case len(t.DependsOn) == 0:
		return "start time reached"
	case decider != "":
		return fmt.Sprintf("upstream %s is %s (trigger rule %s)", decider, deciderState, t.Trigger())
	case t.Trigger() == task.TriggerAllEnded:
		return "dependencies ended (trigger rule all_ended)"
	}
	return "dependencies succeeded"
}

// UpstreamEnded decides an unfinished dependent t whose upstream ended in
// state without succeeding, under a rule that needs it to succeed: t is
// cancelled, naming the upstream (a re-drive of the upstream with its
// dependents re-opens it: Reopen).
func UpstreamEnded(t *task.Task, upstream string, state task.State, env *Env) (d Decision) {
	if t.State.Terminal() {
		return Decision{Verdict: Ignore}
	}
	d.Next = *t
	finish(&d.Next, task.Cancelled, env.Now)
	d.Next.CancelledBy = upstream
	return d.applied(fmt.Sprintf("upstream %s is %s", upstream, state))
}

// UpstreamMissing decides a waiting task whose upstream missing still does
// not exist after the dependency timeout (from its submission): cancelled,
// naming it.
func UpstreamMissing(t *task.Task, missing string, timeout time.Duration, env *Env) (d Decision) {
	if t.State != task.Waiting {
		return Decision{Verdict: Ignore}
	}
	d.Next = *t
	finish(&d.Next, task.Cancelled, env.Now)
	return d.applied(fmt.Sprintf("depends_on: task %q does not exist (waited %s, the dependency timeout)", missing, timeout))
}

// ShardsEnded decides a sharded parent t in its shard phase once all total
// shards ended, succeeded of them successfully (by names the shard whose
// end was the last): it fails when fewer succeeded than its
// min_shard_success asks (all, without one), runs its aggregator when it
// has one, or succeeds with a summary.
func ShardsEnded(t *task.Task, succeeded, total int, by string, env *Env) (d Decision) {
	if t.State != task.Waiting || t.Phase != task.PhaseShards || t.Sharding == nil {
		return Decision{Verdict: Ignore}
	}
	summary := fmt.Sprintf("%d of %d shards succeeded", succeeded, total)
	d.Next = *t
	endedBy(&d.Next, by)
	switch {
	case succeeded < total && (t.MinShardSuccess == 0 || succeeded < MinSucceeded(t.MinShardSuccess, total)):
		failWith(&d.Next, summary+fmt.Sprintf(", below min_shard_success %v", t.MinShardSuccess), env.Now)
		return d.applied(summary + "; too few")
	case t.Sharding.Aggregate:
		ready(&d.Next, 1, env.Now, env.NewExecutionID())
		d.Next.Phase = task.PhaseAggregate
		d.Next.Errors = nil
		return d.applied(summary + "; aggregating")
	}
	finish(&d.Next, task.Succeeded, env.Now)
	d.Next.Result, _ = json.Marshal(task.ShardSummary{Shards: total, Succeeded: succeeded, NotOK: total - succeeded})
	return d.applied(summary)
}

// MinSucceeded is how many of total shards must succeed under a
// min_shard_success fraction (rounded up; 0.7 of 10 is 7, not 7.000…1).
func MinSucceeded(fraction float64, total int) int {
	return int(math.Ceil(fraction*float64(total) - 1e-9))
}

// ShardsFailed decides a sharded parent t still in its shard phase that
// its shards' failures fail (why; by names the shard, if one did).
func ShardsFailed(t *task.Task, by, why string, env *Env) (d Decision) {
	if t.State != task.Waiting || t.Phase != task.PhaseShards || t.Sharding == nil {
		return Decision{Verdict: Ignore}
	}
	d.Next = *t
	endedBy(&d.Next, by)
	failWith(&d.Next, why, env.Now)
	return d.applied(why)
}

// endedBy records the shard that ends t's shard phase.
func endedBy(t *task.Task, shard string) {
	sh := *t.Sharding
	sh.EndedBy = shard
	t.Sharding = &sh
}

// failWith fails t for a reason that is not an attempt's error.
func failWith(t *task.Task, why string, now time.Time) {
	finish(t, task.Failed, now)
	t.AddError(task.AttemptError{Attempt: t.Attempt, ExecutionID: t.ExecutionID, Error: why, At: now})
}

// Create decides a new task's first record from t (its spec and times
// set, no state yet): cancelled when another task holds its unique key
// (duplicateOf, saying why in duplicateReason), expired when its deadline
// had passed, ready for its first attempt when nothing holds it back and
// admit agrees (asked only then: a half-open breaker's probe is spent only
// on a dispatch), else waiting (for its dependencies, its start time, or
// its admission, which its effects decide).
func Create(t *task.Task, duplicateOf, duplicateReason string, admit func() bool, env *Env) (d Decision) {
	d.Next = *t
	n := &d.Next
	delayed := t.StartAt != nil && t.StartAt.After(env.Now)
	switch {
	case duplicateOf != "":
		// Recorded, never run.
		finish(n, task.Cancelled, env.Now)
		n.DuplicateOf = duplicateOf
		return d.applied(duplicateReason)
	case t.ExpiresAt != nil && !env.Now.Before(*t.ExpiresAt):
		finish(n, task.Expired, env.Now)
		return d.applied(fmt.Sprintf("deadline %s had passed at submission", t.ExpiresAt.Format(time.RFC3339Nano)))
	case len(t.DependsOn) == 0 && !delayed && t.WaitFor != nil:
		// An event task runs nothing: no admission to ask.
		awaitEvent(n, env.Now)
		return d.applied("submitted")
	case len(t.DependsOn) == 0 && !delayed && admit():
		ready(n, 1, env.Now, env.NewExecutionID())
		return d.applied("submitted")
	case delayed:
		n.State = task.Waiting
		return d.applied("submitted; scheduled for " + t.StartAt.Format(time.RFC3339Nano))
	}
	n.State = task.Waiting
	return d.applied("submitted")
}
