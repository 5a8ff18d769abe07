package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// Durable steps and sleeps. A step's result is stored in the task's
// record by the orchestrator (a step is a report of status "step", sent as
// a direct request and answered once the record holds it); the record
// travels with every later dispatch (and a take-over's claim), so a later
// attempt finds it without reading anything.

// ErrAttemptLost is returned (wrapped) by Job.Step when the orchestrator
// refused to store the step because the attempt is no longer this
// executor's: it was taken over by another executor (this one was thought
// dead), superseded or ended. The handler should return: its outcome is
// not reported (the attempt's current executor reports it).
var ErrAttemptLost = errors.New("the attempt is no longer this executor's")

// jobSteps is a job's view of its task's steps: those its record held at
// the start of the attempt and those stored since.
type jobSteps struct {
	e          *Executor
	capability string
	base       task.Report // the attempt's identity: id, type, execution, token, revisions, takeovers
	// claimRev reads the revision of the orchestrator's running mark,
	// which a heartbeat may write while the handler runs.
	claimRev func() uint64
	// lost is called when the orchestrator says the attempt is no longer
	// this executor's.
	lost func()

	mu      sync.Mutex
	stored  map[string]task.Step
	count   int    // steps and sleeps stored
	inline  int    // bytes of inline results stored
	lastRev uint64 // the revision after this attempt's last step
	sleeps  int    // Job.Sleep calls so far in this run
	running map[string]bool
	isLost  atomic.Bool
}

func newJobSteps(e *Executor, t task.Task, base task.Report, claimRev func() uint64, lost func()) *jobSteps {
	s := &jobSteps{e: e, capability: t.Capability, base: base, claimRev: claimRev, lost: lost}
	if len(t.Steps) > 0 {
		s.stored = make(map[string]task.Step, len(t.Steps))
		for _, st := range t.Steps {
			s.stored[st.Name] = st
			s.inline += len(st.Result)
		}
	}
	s.count = len(t.Steps)
	return s
}

// stepRevision is the revision after the attempt's last stored step.
func (s *jobSteps) stepRevision() uint64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastRev
}

// Step runs fn once per task and stores its result durably: the first
// time the task's handler reaches the step named name, fn runs and its
// result (JSON) is stored in the task's record by the orchestrator before
// Step returns it; in every later attempt of the task — a retry, a
// take-over after this executor died, a re-drive, the resumption after a
// Sleep — Step returns the stored result without running fn.
//
// Guarantees: fn runs at least once, and once its result is stored it
// never runs again for that task. If the executor dies (or the attempt
// fails) after fn returned but before the orchestrator acknowledged the
// store, fn runs again in the next attempt: make it idempotent, or let it
// tolerate a second run. The first result stored stands.
//
// fn's error is returned as is and nothing is stored: the step runs again
// on the next call (usually the task's next attempt, if the handler returns
// the error). Names must be unique within the task (1–128 bytes of UTF-8,
// no control characters, not starting with "ax:"); the handler must reach
// its steps under the same names in every attempt. A task stores at most
// task.MaxSteps steps and sleeps; a result up to task.StepInlineLimit is
// kept in the record, a larger one (up to task.MaxStepResult) in the
// object store of the task's capability. Breaking a limit is a permanent
// error. When the orchestrator says the attempt is no longer this
// executor's (ErrAttemptLost), the handler's context is cancelled and its
// outcome is not reported. A Job not made by an executor (a unit test's)
// runs fn every time.
func (j *Job) Step(ctx context.Context, name string, fn func(ctx context.Context) (any, error)) (json.RawMessage, error) {
	if err := task.ValidateStepName(name, false); err != nil {
		return nil, Permanent(fmt.Errorf("step of %s: %w", j.ID, err))
	}
	s := j.steps
	if s == nil {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return encodeResult(v)
	}
	s.mu.Lock()
	if st, ok := s.stored[name]; ok {
		s.mu.Unlock()
		return s.result(ctx, st)
	}
	switch {
	case s.running[name]:
		s.mu.Unlock()
		return nil, fmt.Errorf("step %q of %s: already running in this attempt (steps need unique names)", name, j.ID)
	case s.count+len(s.running) >= task.MaxSteps:
		s.mu.Unlock()
		return nil, Permanent(fmt.Errorf("step %q of %s: the task has %d steps and sleeps; the limit is %d", name, j.ID, s.count, task.MaxSteps))
	}
	if s.running == nil {
		s.running = map[string]bool{}
	}
	s.running[name] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, name)
		s.mu.Unlock()
	}()

	v, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := encodeResult(v)
	if err != nil {
		return nil, Permanent(fmt.Errorf("step %q of %s: %w", name, j.ID, err))
	}
	return s.store(ctx, name, raw)
}

// Step is Job.Step with a typed result: fn's result is stored as JSON,
// and a stored one is decoded into a T (a result that does not decode is
// a permanent error). It is a function because Go methods cannot have
// type parameters.
func Step[T any](ctx context.Context, job *Job, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var out T
	raw, err := job.Step(ctx, name, func(ctx context.Context) (any, error) { return fn(ctx) })
	if err != nil {
		return out, err
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return out, Permanent(fmt.Errorf("step %q of %s: decode its stored result into %T: %w", name, job.ID, out, err))
		}
	}
	return out, nil
}

// store has the orchestrator store a step's result: inline or, when over
// the record's share, as an object first. It asks until the orchestrator
// answers stored or refused, or ctx ends.
func (s *jobSteps) store(ctx context.Context, name string, raw json.RawMessage) (json.RawMessage, error) {
	id := s.base.ID
	if len(raw) > task.MaxStepResult {
		return nil, Permanent(fmt.Errorf("step %q of %s: its result is %d bytes; the limit is %d", name, id, len(raw), task.MaxStepResult))
	}
	r := s.base
	r.Status, r.Step, r.Result = task.OutcomeStep, name, raw
	s.mu.Lock()
	asObject := len(raw) > task.StepInlineLimit || s.inline+len(raw) > task.StepsInlineTotal
	s.mu.Unlock()
	if asObject {
		r.Result = nil
		r.ResultObject, r.ResultBucket = task.StepObjectName(id, r.ExecutionID, name), subject.ObjectBucket(s.capability)
		digest, err := s.e.putObject(ctx, r.ResultBucket, r.ResultObject, raw)
		if err != nil {
			return nil, fmt.Errorf("step %q of %s: store its result (%d bytes) as %s: %w", name, id, len(raw), r.ResultObject, err)
		}
		r.ResultDigest = digest
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.Multiplier = 2 // as subjects.md says: 100 ms doubling to 2 s (jittered)
	bo.MaxInterval = 2 * time.Second
	bo.MaxElapsedTime = 0
	for {
		r.ClaimRevision = s.claimRev()
		r.StepRevision = s.stepRevision()
		r.FinishedAt = s.e.cfg.Now().UTC()
		rep, err := s.ask(ctx, &r)
		switch {
		case err == nil && rep.Step != nil:
			s.mu.Lock()
			if s.stored == nil {
				s.stored = map[string]task.Step{}
			}
			if _, had := s.stored[name]; !had {
				s.stored[name] = *rep.Step
				s.count++
				s.inline += len(rep.Step.Result)
			}
			s.lastRev = max(s.lastRev, rep.Revision)
			s.mu.Unlock()
			switch {
			case rep.Step.ResultObject == "":
				return rep.Step.Result, nil // ours, or one stored before (its first result stands)
			case rep.Step.ResultObject == r.ResultObject && rep.Step.ResultDigest == r.ResultDigest:
				return raw, nil // ours, as an object
			}
			return s.result(ctx, *rep.Step)
		case err == nil && rep.Lost:
			if s.isLost.CompareAndSwap(false, true) && s.lost != nil {
				s.lost()
			}
			return nil, fmt.Errorf("step %q of %s not stored: %s: %w", name, id, rep.Refused, ErrAttemptLost)
		case err == nil && rep.Refused != "":
			return nil, Permanent(fmt.Errorf("step %q of %s not stored: %s", name, id, rep.Refused))
		case err == nil:
			err = errors.New(rep.Error)
		}
		wait := bo.NextBackOff()
		s.e.log.Debug("step not stored yet; asking again", "task_id", id, "step", name, "error", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("step %q of %s not stored (%v): %w", name, id, err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// ask sends one step request (a direct request on the task type's report
// subject, which the executor may publish already) and reads the answer.
func (s *jobSteps) ask(ctx context.Context, r *task.Report) (task.StepReply, error) {
	data, err := wirejson.Marshal(r)
	if err != nil {
		return task.StepReply{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := s.e.nc.RequestWithContext(rctx, subject.Direct(subject.Completed(r.Type)), data)
	if err != nil {
		return task.StepReply{}, err
	}
	var rep task.StepReply
	if err := wirejson.Unmarshal(msg.Data, &rep); err != nil {
		return task.StepReply{}, fmt.Errorf("unreadable reply: %w", err)
	}
	return rep, nil
}

// result is a stored step's result, read from the object store when it
// is stored there (checked against its digest).
func (s *jobSteps) result(ctx context.Context, st task.Step) (json.RawMessage, error) {
	if st.ResultObject == "" {
		return st.Result, nil
	}
	data, err := s.e.objects.Get(ctx, st.ResultBucket, st.ResultObject, st.ResultDigest)
	if err != nil {
		return nil, fmt.Errorf("step %q of %s: read its stored result: %w", st.Name, s.base.ID, err)
	}
	return data, nil
}

// SleepError ends the attempt in a durable sleep: returned by Job.Sleep,
// it must be returned by the handler (wrapped or not). Its task waits,
// retrying (not failed: no attempt is spent, nothing is counted against
// max_retries), and its handler runs again after Delay, where the steps it
// stored return their results and this Sleep returns nil.
type SleepError struct {
	// Name is the sleep's name in the task's steps ("ax:sleep:<n>").
	Name string
	// Delay is how long the task sleeps.
	Delay time.Duration
}

// Error says how long the sleep is.
func (e *SleepError) Error() string { return fmt.Sprintf("sleep for %s (%s)", e.Delay, e.Name) }

// Sleep is a durable sleep: it returns a *SleepError that the handler
// returns, which ends the attempt without spending one, frees the
// executor's capacity, and runs the handler again after d (on a durable
// timer: an orchestrator's restart does not lose it). In that run the
// steps stored before return their results without running, and this
// Sleep returns nil, as it does in every later attempt.
//
//	if err := job.Sleep(ctx, time.Hour); err != nil {
//		return nil, err
//	}
//
// Sleeps are told apart by their order in the handler's run (the n-th
// call is "ax:sleep:<n>", listed among the task's steps with its end):
// the handler must reach them in the same order in every run. A d of 0 or
// less returns nil and sleeps not at all; one over task.MaxSleep is a
// permanent error, as is a sleep beyond task.MaxSteps steps and sleeps.
// The sleep counts from when the orchestrator records it. A Job not made
// by an executor (a unit test's) waits d in place and returns nil.
func (j *Job) Sleep(ctx context.Context, d time.Duration) error {
	s := j.steps
	if s == nil {
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sleeps++
	name := task.SleepName(s.sleeps)
	if _, ok := s.stored[name]; ok {
		return nil // slept already
	}
	switch {
	case d <= 0:
		return nil
	case d > task.MaxSleep:
		return Permanent(fmt.Errorf("sleep of %s for %s: the limit is %s", j.ID, d, task.MaxSleep))
	case s.count+len(s.running) >= task.MaxSteps:
		return Permanent(fmt.Errorf("sleep of %s: the task has %d steps and sleeps; the limit is %d", j.ID, s.count, task.MaxSteps))
	}
	return &SleepError{Name: name, Delay: d}
}

// Steps returns the steps and sleeps the task had stored when this attempt
// started and those it stored since, in no particular order.
func (j *Job) Steps() []task.Step {
	if j.steps == nil {
		return nil
	}
	j.steps.mu.Lock()
	defer j.steps.mu.Unlock()
	out := make([]task.Step, 0, len(j.steps.stored))
	for _, st := range j.steps.stored {
		out = append(out, st)
	}
	return out
}
