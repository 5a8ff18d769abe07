package lifecycle

import (
	"fmt"
	"time"

	"github.com/ax-run/ax/task"
)

// StepDecision is a step report decided. With Apply, Next is the record to
// write (the step appended, nothing else changed) and Step the step
// stored. With Ignore the step is stored already (Step is the record's).
// With Refuse, Err says why it never will be for this attempt; with Stale,
// read again.
type StepDecision struct {
	Verdict Verdict
	Next    task.Task
	Step    task.Step
	Reason  string
	Err     error
	// Lost, with Refuse: the attempt is no longer the reporting
	// executor's (rather than a step breaking a limit).
	Lost bool
}

// Step decides an executor's report r of a step (status task.OutcomeStep,
// checked for its token and subject) on the task's record t read at rev.
// The step is stored only for the attempt that runs now, on the executor
// that runs it: the record's execution, its takeovers and (once one is
// named) its executor must be the report's, so an executor whose attempt
// was taken over cannot store a step any more, and whatever it stored
// before the take-over the new executor finds (and uses) instead of
// running the step. A step stored already is returned as stored: its
// first result stands.
func Step(t *task.Task, rev uint64, r *task.Report, env *Env) StepDecision {
	refuse := func(format string, args ...any) StepDecision {
		return StepDecision{Verdict: Refuse, Err: fmt.Errorf(format, args...)}
	}
	lost := func(format string, args ...any) StepDecision {
		return StepDecision{Verdict: Refuse, Lost: true, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case rev < max(r.DispatchRevision, r.ClaimRevision, r.StepRevision):
		return StepDecision{Verdict: Stale, Err: fmt.Errorf("step of %s: read revision %d, older than its attempt's at %d (a stale read); trying again",
			r.ID, rev, max(r.DispatchRevision, r.ClaimRevision, r.StepRevision))}
	case r.Type != t.Type:
		return refuse("the step names type %q; task %s is of type %q", r.Type, t.ID, t.Type)
	case t.ExecutionID != r.ExecutionID:
		return lost("attempt %d (execution %s) of %s is no longer current (now execution %s, %s)", r.Attempt, r.ExecutionID, t.ID, t.ExecutionID, t.State)
	case t.State != task.Running && t.State != task.Ready:
		return lost("task %s is %s", t.ID, t.State)
	case t.Takeovers != r.Takeovers || t.Executor != "" && t.Executor != r.Executor:
		return lost("the attempt of %s was taken over by %s (take-over %d); %s no longer runs it", t.ID, t.Executor, t.Takeovers, r.Executor)
	}
	if s, ok := t.FindStep(r.Step); ok {
		return StepDecision{Verdict: Ignore, Step: s}
	}
	if why := stepProblem(t, r); why != "" {
		return refuse("%s", why)
	}
	d := StepDecision{Verdict: Apply, Next: *t}
	d.Step = task.Step{Name: r.Step, Result: r.Result, ResultObject: r.ResultObject, ResultBucket: r.ResultBucket,
		ResultDigest: r.ResultDigest, Attempt: t.Attempt, ExecutionID: t.ExecutionID, Executor: r.Executor, At: env.Now}
	d.Next.Steps = append(t.Steps[:len(t.Steps):len(t.Steps)], d.Step) // never shares t's array
	d.Next.UpdatedAt = env.Now
	where := "inline"
	if r.ResultObject != "" {
		where = r.ResultObject
	}
	d.Reason = fmt.Sprintf("step %q stored by %s in attempt %d (%d bytes, %s)", r.Step, r.Executor, t.Attempt, len(r.Result), where)
	return d
}

// stepProblem says what is wrong with a new step (or sleep) for t ("" when
// nothing is): its name, the number of steps, its result's size and where
// it is stored.
func stepProblem(t *task.Task, r *task.Report) string {
	sleep := r.Status == task.OutcomeSleeping
	if err := task.ValidateStepName(r.Step, sleep); err != nil {
		return err.Error()
	}
	if len(t.Steps) >= task.MaxSteps {
		return fmt.Sprintf("task %s has %d steps and sleeps stored; the limit is %d (step %q not stored)", t.ID, len(t.Steps), task.MaxSteps, r.Step)
	}
	if sleep {
		return ""
	}
	switch {
	case len(r.Result) > task.StepInlineLimit:
		return fmt.Sprintf("step %q: its inline result is %d bytes; the limit is %d (executors store larger ones as objects)", r.Step, len(r.Result), task.StepInlineLimit)
	case len(r.Result)+t.StepsInlineBytes() > task.StepsInlineTotal:
		return fmt.Sprintf("step %q: the task's inline step results would take %d bytes; the limit is %d (executors store the rest as objects)",
			r.Step, len(r.Result)+t.StepsInlineBytes(), task.StepsInlineTotal)
	case r.ResultObject != "" && len(r.Result) > 0:
		return fmt.Sprintf("step %q has both an inline result and an object", r.Step)
	case r.ResultObject != "" && r.ResultBucket == "":
		return fmt.Sprintf("step %q: its object %s names no object store", r.Step, r.ResultObject)
	case r.ResultObject != "":
		return ObjectRefProblem("step object", r.ResultObject, task.StepObjectName(t.ID, r.ExecutionID, r.Step), r.ResultBucket, r.ResultDigest, t.Capability)
	}
	return ""
}

// sleep applies a sleeping report to d.Next (the attempt's record): the
// task waits as retrying (snoozed: the same attempt runs again under its
// number, no failure counted, no snooze spent) until the sleep ends, and
// the sleep is stored among its steps. A sleep that breaks a limit fails
// the attempt permanently instead (ok false, why says which).
func (d *Decision) sleep(r *task.Report, env *Env) (why string, ok bool) {
	t := &d.Next
	var delay time.Duration
	if r.RetryAfter != nil && *r.RetryAfter > 0 {
		delay = r.RetryAfter.Std()
	}
	if delay > task.MaxSleep {
		return fmt.Sprintf("sleep %q of %s is over the limit of %s", r.Step, delay, task.MaxSleep), false
	}
	until := env.Now.Add(delay)
	if s, found := t.FindStep(r.Step); found {
		if !s.IsSleep() {
			return fmt.Sprintf("sleep %q has the name of a step", r.Step), false
		}
		// Begun again (the executor did not know it was stored: a sleep's
		// report applied twice is replayed, not decided, so this is a
		// handler asking again): its new end stands.
		steps := append([]task.Step(nil), t.Steps...)
		for i := range steps {
			if steps[i].Name == r.Step {
				steps[i].SleepUntil = &until
			}
		}
		t.Steps = steps
	} else {
		if why := stepProblem(t, r); why != "" {
			return why, false
		}
		t.Steps = append(t.Steps[:len(t.Steps):len(t.Steps)], task.Step{Name: r.Step, SleepUntil: &until,
			Attempt: t.Attempt, ExecutionID: r.ExecutionID, Executor: r.Executor, At: env.Now})
	}
	t.Snoozed = true
	// The next dispatch runs this attempt again under its number.
	t.Attempt--
	t.State = task.Retrying
	t.RetryAt = &until
	d.applied(fmt.Sprintf("attempt %d sleeping for %s until %s (%s); no attempt spent", t.Attempt+1, delay.Round(time.Millisecond),
		until.Format(time.RFC3339Nano), r.Step))
	return "", true
}
