package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/internal/admission"
	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// maxCASRetries bounds compare-and-set loops on one task.
const maxCASRetries = 50

// write records the transition cur → next (next.State is the target) with a
// compare-and-set against rev and returns the new revision.
//
// The event's time is next.UpdatedAt when the caller set it (so times derived
// from it, such as a retry time, agree with the event), otherwise now.
//
// It sets next's reason and update time, so the caller's record is the one
// written. A record made ready under a new execution that needs no
// admission (dispatchesOnWrite) is written as the task's dispatch: the
// one message that records it and hands it to an executor; next's
// DispatchRevision is then its revision.
func (o *Orchestrator) write(ctx context.Context, cur task.Task, rev uint64, next *task.Task, reason string) (uint64, error) {
	next.Reason = reason
	return o.writeEvent(ctx, cur, rev, next, task.KindTransition, reason)
}

// writeEvent is write for an event of any kind; the record's reason is
// next's own (a step, say, leaves the state and its reason as they are).
func (o *Orchestrator) writeEvent(ctx context.Context, cur task.Task, rev uint64, next *task.Task, kind task.EventKind, reason string) (uint64, error) {
	if !next.UpdatedAt.After(cur.UpdatedAt) {
		next.UpdatedAt = o.now()
	}
	now := next.UpdatedAt
	ev := task.Event{Kind: kind, From: cur.State, To: next.State, At: now, Actor: o.cfg.NodeID, Reason: reason, Task: *next}
	if rev == 0 {
		ev.From = ""
	}
	var newRev uint64
	var err error
	if o.dispatchesOnWrite(cur, *next) {
		if err := o.ensureObjects(ctx, next.Capability); err != nil {
			return 0, fmt.Errorf("dispatch %s: %w", next.ID, err)
		}
		tp, span := o.startDispatch(ctx, *next)
		newRev, err = o.store.Dispatch(ctx, ev, rev, o.tokens.Sign(next.ID, next.ExecutionID), tp)
		span.End()
		if err == nil {
			next.DispatchRevision = newRev
		}
	} else {
		newRev, err = o.store.Write(ctx, ev, rev)
	}
	if err == nil {
		o.obs.wrote(cur, next)
	}
	return newRev, err
}

// dispatchesOnWrite reports whether writing next (from cur) is the
// dispatch of a new execution: next is ready under an execution not
// dispatched yet, and its admission needs nothing but the gate it passed
// already (no concurrency key, whose slot is taken first; no fairness key
// to queue by). Other ready records are written as events, and dispatched
// by their effects once admitted (dispatch).
func (o *Orchestrator) dispatchesOnWrite(cur, next task.Task) bool {
	return next.State == task.Ready && next.DispatchRevision == 0 && next.ExecutionID != "" &&
		(cur.State != task.Ready || cur.ExecutionID != next.ExecutionID) &&
		!o.admission.Applies(&next)
}

// transition reads a task, lets decide choose its next record and the
// reason, and writes it with compare-and-set; after a conflict it decides
// again on the fresh record. After a write it ensures the new state's
// effects. decide returns a nil record when no transition is needed. The
// result is the record written, or the one read when nothing was written;
// a missing task gives store.ErrNotFound.
func (o *Orchestrator) transition(ctx context.Context, id string, decide func(t task.Task, rev uint64) (*task.Task, string, error)) (task.Task, error) {
	for range maxCASRetries {
		t, rev, err := o.store.Get(ctx, id)
		if err != nil {
			return t, err
		}
		next, reason, err := decide(t, rev)
		if err != nil || next == nil {
			return t, err
		}
		newRev, err := o.write(ctx, t, rev, next, reason)
		if err == nil {
			return *next, o.ensureEffects(ctx, *next, newRev)
		}
		if !errors.Is(err, store.ErrConflict) {
			return t, err
		}
	}
	return task.Task{}, fmt.Errorf("change task %s: %w", id, consume.ErrContended)
}

// finished returns t moved to a final state now.
func (o *Orchestrator) finished(t task.Task, state task.State) *task.Task {
	next := lifecycle.Finished(t, state, o.now())
	return &next
}

// decided turns a decision on t (read at rev) into what transition's
// decide returns: the record to write, nothing (after making sure of the
// effects on a replay), or the decision's error.
func (o *Orchestrator) decided(ctx context.Context, t task.Task, rev uint64, d lifecycle.Decision) (*task.Task, string, error) {
	switch d.Verdict {
	case lifecycle.Apply:
		return &d.Next, d.Reason, nil
	case lifecycle.Replay:
		return nil, "", o.ensureEffects(ctx, t, rev)
	}
	return nil, "", d.Err
}

// env is what the transition table's decisions read of this orchestrator.
func (o *Orchestrator) env() *lifecycle.Env {
	return &lifecycle.Env{
		Now:            o.now(),
		RetryDelay:     o.retryDelay,
		MaxShards:      o.cfg.Limits.MaxShards,
		MaxShardsFlag:  "ax orchestrator --max-shards",
		NewExecutionID: nuid.Next,
	}
}

// retryDelay is the backoff before the retry of a failed attempt n.
func (o *Orchestrator) retryDelay(n int) time.Duration {
	return o.cfg.Retry.Delay(n, o.cfg.Random())
}

// ensureEffects makes sure everything that follows from a task being in its
// current state has happened: the effects lifecycle.Effects lists, in
// order. Every one is idempotent.
func (o *Orchestrator) ensureEffects(ctx context.Context, t task.Task, rev uint64) error {
	var buf [8]lifecycle.Effect
	for _, e := range lifecycle.Effects(buf[:0], &t, o.now()) {
		if err := o.applyEffect(ctx, e, t, rev); err != nil {
			return err
		}
	}
	return nil
}

// applyEffect applies one effect of t's record at rev.
func (o *Orchestrator) applyEffect(ctx context.Context, e lifecycle.Effect, t task.Task, rev uint64) error {
	switch e {
	case lifecycle.DisarmTimers:
		return o.disarmTimers(ctx, t)
	case lifecycle.ArmForget:
		return o.armForget(ctx, t)
	case lifecycle.EndFanIn:
		return o.endedFanIn(ctx, t)
	case lifecycle.FreeSlot:
		return o.freeSlot(ctx, t)
	case lifecycle.ArmWatch:
		return o.armWatch(ctx, t)
	case lifecycle.EnsureShards:
		return o.ensureShards(ctx, t)
	case lifecycle.CheckSlot:
		return o.checkSlot(ctx, t)
	case lifecycle.ArmStart:
		return o.armTimer(ctx, subject.TimerStart, timerFire{ID: t.ID, At: *t.StartAt})
	case lifecycle.ResolveWaiting:
		return o.resolveWaiting(ctx, t, rev, true)
	case lifecycle.Dispatch:
		return o.dispatch(ctx, t, rev)
	case lifecycle.ArmRetry:
		return o.armRetry(ctx, t)
	case lifecycle.ReleaseDependents:
		return o.releaseDependents(ctx, t, rev)
	case lifecycle.DeadLetter:
		return o.deadLetter(ctx, t)
	case lifecycle.CancelDependents:
		return o.cancelDependents(ctx, t, rev)
	case lifecycle.Revoke:
		return o.revoke(ctx, t)
	case lifecycle.MatchEvent:
		return o.matchEvent(ctx, t, rev)
	case lifecycle.WatchCancel:
		_, err := o.watchCancel(ctx, t)
		return err
	}
	return fmt.Errorf("task %s: unknown effect %v", t.ID, e)
}

// revoke records that t's execution no longer runs (AX_REVOKED), when it
// had one: executors watching its capability do not run its dispatch if it
// is still queued, and cancel its handler if it runs. A put of the same
// value again (a replay) changes nothing an executor does.
func (o *Orchestrator) revoke(ctx context.Context, t task.Task) error {
	if t.ExecutionID == "" {
		return nil // never dispatched
	}
	data, err := json.Marshal(task.Revocation{ID: t.ID, ExecutionID: t.ExecutionID, State: t.State, At: o.now()})
	if err != nil {
		return fmt.Errorf("encode the revocation of %s: %w", t.ID, err)
	}
	if _, err := o.revoked.Put(ctx, subject.RevokedKey(t.Capability, t.ID), data); err != nil {
		return fmt.Errorf("revoke the execution of %s: %w", t.ID, err)
	}
	return nil
}

// endedFanIn is the fan-in side of a task's end: a shard reports to its
// parent; a sharded parent that did not succeed cancels its unfinished
// shards; a fan-in waiter's counter is removed.
func (o *Orchestrator) endedFanIn(ctx context.Context, t task.Task) error {
	if t.IsShard() {
		if err := o.shardEnded(ctx, t); err != nil {
			return err
		}
	}
	if t.Sharding != nil && t.Phase == task.PhaseShards && t.State != task.Succeeded {
		if err := o.cancelShards(ctx, t); err != nil {
			return err
		}
	}
	if t.Sharding != nil || len(t.DependsOn) > task.WideFanIn {
		return o.fanin.Forget(ctx, t.ID)
	}
	return nil
}

// disarmTimers removes the pending timers a finished task may still have.
func (o *Orchestrator) disarmTimers(ctx context.Context, t task.Task) error {
	kinds := []subject.TimerKind{}
	if t.RetryAt != nil || len(t.Errors) > 0 {
		kinds = append(kinds, subject.TimerRetry)
	}
	if t.StartAt != nil && t.StartAt.After(o.now()) {
		kinds = append(kinds, subject.TimerStart)
	}
	if t.ExpiresAt != nil && t.ExpiresAt.After(o.now()) {
		kinds = append(kinds, subject.TimerDeadline)
	}
	if t.DispatchTimeout > 0 {
		kinds = append(kinds, subject.TimerDispatch)
	}
	if mayBeWatched(t) {
		kinds = append(kinds, subject.TimerWatch)
	}
	for _, k := range kinds {
		if err := o.cancelTimer(ctx, k, t.ID); err != nil {
			return err
		}
	}
	return o.forgetEventWait(ctx, t)
}

// mayBeWatched reports whether a finished task may have a watch timer of
// its own to cancel: one armed while it waited or retried. A dispatched
// task's look is a sweep entry, which nothing cancels. A watch missed here
// (a task held at creation, one the reconciler looked at while it ran)
// fires once, finds the task ended and only re-ensures its effects.
func mayBeWatched(t task.Task) bool {
	return len(t.DependsOn) > 0 || t.StartAt != nil || t.Attempt > 1 || t.Phase != "" || t.IsShard() ||
		t.Redrives > 0 || t.Dispatches > 1 || t.Takeovers > 0 || len(t.Errors) > 0
}

// dispatch makes sure a ready task is dispatched: its record written as
// its dispatch (subject.TaskDispatch), which executors of its capability
// consume, with its sweep entry (the reconciler's look, shared with the
// dispatches going out at the same time: see sweep.go) and its timers.
// Most dispatches are written with the transition that made the task
// ready (write): then only the sweep entry and timers are ensured here.
// The capability's object store and ready consumers exist before its
// first dispatch (ensureObjects: nothing to do after that).
//
// A task not dispatched yet passes admission first: one with a
// concurrency key takes its key's slot (keylimits.go), and one with a
// fairness key may queue in this orchestrator while its level is busy
// (fair.go); then its record is written again, as its dispatch.
func (o *Orchestrator) dispatch(ctx context.Context, t task.Task, rev uint64) error {
	if t.DispatchRevision != 0 {
		return o.dispatched(ctx, t, t.DispatchRevision, true)
	}
	if err := o.ensureObjects(ctx, t.Capability); err != nil {
		return fmt.Errorf("dispatch %s: %w", t.ID, err)
	}
	tk := admission.Ticket{Task: t, Rev: rev}
	if v, err := o.admission.Admit(ctx, &tk); v != admission.Admit || err != nil {
		o.log.Debug("admission", slog.String("task_id", t.ID), slog.String("verdict", v.String()), slog.Any("error", err))
		if err != nil {
			return fmt.Errorf("dispatch %s: %w", t.ID, err)
		}
		return nil
	}
	return o.publishDispatch(ctx, tk.Task, tk.Rev, true)
}

// publishDispatch writes t, ready and admitted but not dispatched yet, at
// rev, as its dispatch (a ready → ready event on its dispatch subject),
// then ensures what follows it (dispatched); with sweep, that includes
// its sweep entry (a task queued for fairness has one already). A record
// that moved on meanwhile is read again: dispatched already, or no longer
// ready under t's execution, there is nothing to do.
func (o *Orchestrator) publishDispatch(ctx context.Context, t task.Task, rev uint64, sweep bool) error {
	for range maxCASRetries {
		ev := task.Event{Kind: task.KindTransition, From: task.Ready, To: task.Ready, At: o.now(), Actor: o.cfg.NodeID, Task: t}
		ev.Task.UpdatedAt, ev.Task.Reason = ev.At, dispatchedReason(t)
		ev.Reason = ev.Task.Reason
		tp, span := o.startDispatch(ctx, t)
		newRev, err := o.store.Dispatch(ctx, ev, rev, o.tokens.Sign(t.ID, t.ExecutionID), tp)
		span.End()
		if err == nil {
			next := ev.Task
			next.DispatchRevision = newRev
			o.obs.wrote(t, &next)
			return o.dispatched(ctx, next, newRev, sweep)
		}
		if !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("dispatch %s: %w", t.ID, err)
		}
		cur, curRev, err := o.store.Get(ctx, t.ID)
		if err != nil {
			return ignoreNotFound(err)
		}
		if cur.State != task.Ready || cur.ExecutionID != t.ExecutionID {
			return nil // moved on: its own effects follow from its own write
		}
		if cur.DispatchRevision != 0 {
			return o.dispatched(ctx, cur, cur.DispatchRevision, sweep)
		}
		t, rev = cur, curRev
	}
	return fmt.Errorf("dispatch %s: %w", t.ID, consume.ErrContended)
}

// dispatchedReason is the reason a dispatch written after admission
// records: the task's reason, unless it said why it was held back.
func dispatchedReason(t task.Task) string {
	if t.Reason == "" || strings.HasPrefix(t.Reason, "held:") || strings.HasPrefix(t.Reason, "queued") {
		return "dispatched"
	}
	return t.Reason
}

// dispatched ensures what follows a task's dispatch at revision rev: the
// report's fast path remembers it, the level's idle executors are woken,
// and (with sweep) its sweep entry and its dispatch timeout are armed.
func (o *Orchestrator) dispatched(ctx context.Context, t task.Task, rev uint64, sweep bool) error {
	o.dispatchCache.add(&dispatched{task: t, revision: rev})
	o.bells.ring(t.Capability, t.PriorityLevel())
	if sweep {
		if err := o.sweeps.add(ctx, t, "", time.Time{}, o.sweepMemo.dispatched(t.ExecutionID)); err != nil {
			return fmt.Errorf("dispatch %s: sweep: %w", t.ID, err)
		}
	}
	if t.DispatchTimeout > 0 {
		at := o.now().Add(t.DispatchTimeout.Std())
		if t.ReadyAt != nil {
			at = t.ReadyAt.Add(t.DispatchTimeout.Std())
		}
		return o.armTimer(ctx, subject.TimerDispatch, timerFire{ID: t.ID, ExecutionID: t.ExecutionID, At: at})
	}
	return nil
}

// readyNext returns t prepared for a new dispatch (attempt n).
func (o *Orchestrator) readyNext(t task.Task, attempt int) task.Task {
	return lifecycle.Ready(t, attempt, o.now(), nuid.Next())
}

// resolveWaiting decides a waiting task by its trigger rule: cancel it or
// release it when its upstreams' states decide it, leave it otherwise (see
// task.TriggerRule). With register, it first records itself as a dependent
// of each upstream: that write and the upstream's own completion are
// compare-and-sets on the same subject, so one of them always sees the
// other and the task is never forgotten.
func (o *Orchestrator) resolveWaiting(ctx context.Context, t task.Task, rev uint64, register bool) error {
	return o.resolveWaitingAfter(ctx, t, rev, register, "")
}

// resolveWaitingAfter is resolveWaiting reading the upstream first first:
// the one whose end asks for it, so an end that decides the task alone
// (an any_failed task's failed upstream) is not hidden behind an upstream
// still running, at which a release check stops. With first set it runs in
// that upstream's effects: a task it ends continues through its own
// trigger (an immediate watch), not inside the upstream's handler.
func (o *Orchestrator) resolveWaitingAfter(ctx context.Context, t task.Task, rev uint64, register bool, first string) error {
	rule := t.Trigger()
	deps := t.DependsOn
	if first != "" && len(deps) > 1 && deps[0] != first && slices.Contains(deps, first) {
		deps = append([]string{first}, slices.DeleteFunc(slices.Clone(deps), func(d string) bool { return d == first })...)
	}
	for range maxCASRetries {
		allCounted := true
		var decider string
		var deciderState task.State
		verdict := task.VerdictWait
		var counted []task.MemberOutcome
		var missing []string
		for _, dep := range deps {
			var st task.State
			var err error
			if register {
				st, err = o.registerDependent(ctx, dep, t.ID)
			} else {
				var up task.Task
				up, _, err = o.store.Get(ctx, dep)
				st = up.State
			}
			if register && errors.Is(err, store.ErrNotFound) {
				// Its submission may still be in flight: wait for it.
				missing = append(missing, dep)
				allCounted = false
				continue
			}
			if err != nil {
				return fmt.Errorf("resolve %s: upstream %s: %w", t.ID, dep, err)
			}
			switch v := rule.Upstream(st); v {
			case task.VerdictCount:
				counted = append(counted, task.MemberOutcome{ID: dep, State: st})
			case task.VerdictRun, task.VerdictCancel:
				decider, deciderState, verdict = dep, st, v
			default:
				allCounted = false
			}
			// Registering must visit every upstream; a release check can
			// stop at the first that has not ended (its own end asks
			// again).
			if decider != "" || (!allCounted && !register) {
				break
			}
		}
		if decider == "" && allCounted {
			verdict = rule.AllCounted()
		}
		var next task.Task
		var reason string
		switch {
		case decider == "" && len(missing) > 0:
			return o.waitForMissing(ctx, t, rev, missing)
		case verdict == task.VerdictCancel || verdict == task.VerdictRun:
			d := lifecycle.Resolve(&t, verdict, decider, deciderState, o.env())
			if d.Verdict != lifecycle.Apply {
				return nil // its start timer releases it
			}
			if d.Next.State == task.Ready {
				if ok, why := o.gate.check(o.now(), t.Type, false); !ok {
					if held, err := o.hold(ctx, t, rev, why, false); held || err != nil {
						return err
					}
				}
			}
			next, reason = d.Next, d.Reason
		case register && len(t.DependsOn) > task.WideFanIn:
			// A wide fan-in counts its ended upstreams with markers;
			// those that ended before it registered are marked here.
			all, err := o.countUpstreams(ctx, t, counted...)
			if err != nil || !all {
				return err
			}
			register = false
			continue // all counted: confirm by reading them once
		default:
			return nil
		}
		newRev, err := o.write(ctx, t, rev, &next, reason)
		if err == nil && first != "" && next.State.Terminal() {
			// Moved by an upstream's end (this runs in that upstream's
			// effects): its own effects — its dependents — run from its own
			// message, so one message never walks the DAG below it.
			return o.armTimer(ctx, subject.TimerEffects, timerFire{ID: next.ID, At: o.now()})
		}
		if err == nil {
			return o.ensureEffects(ctx, next, newRev)
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		// Someone else moved it: re-read and act on what it is now.
		if t, rev, err = o.store.Get(ctx, t.ID); err != nil {
			return err
		}
		if t.State != task.Waiting {
			if t.State == task.Ready {
				return o.dispatch(ctx, t, rev)
			}
			return nil
		}
		register = false
	}
	return fmt.Errorf("resolve %s: %w", t.ID, consume.ErrContended)
}

// waitForMissing handles a waiting task whose upstreams in missing do not
// exist: within the dependency timeout (from its submission) the reconciler
// looks again soon — an upstream submitted just before may not be created
// yet, and registering there is what releases it; after it the task is
// cancelled naming the first missing id.
func (o *Orchestrator) waitForMissing(ctx context.Context, t task.Task, rev uint64, missing []string) error {
	timeout := o.cfg.DependencyTimeout
	if t.DependencyTimeout > 0 {
		timeout = t.DependencyTimeout.Std()
	}
	now := o.now()
	giveUp := t.SubmittedAt.Add(timeout)
	if !now.Before(giveUp) {
		_, err := o.transitionFrom(ctx, t, rev, func(cur task.Task) (*task.Task, string) {
			d := lifecycle.UpstreamMissing(&cur, missing[0], timeout, o.env())
			if d.Verdict != lifecycle.Apply {
				return nil, ""
			}
			return &d.Next, d.Reason
		})
		return err
	}
	why := fmt.Sprintf("waiting for upstream %q, which does not exist yet (cancelled at %s unless it appears)", missing[0], giveUp.Format(time.RFC3339))
	if t.Reason != why {
		next := t
		if _, err := o.write(ctx, t, rev, &next, why); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	// Look again at a fraction of the time waited so far: soon for an
	// upstream in flight, rarely for one that never comes.
	again := min(max(now.Sub(t.SubmittedAt)/2, 100*time.Millisecond), 30*time.Second)
	at := now.Add(again)
	if at.After(giveUp) {
		at = giveUp
	}
	return o.armTimer(ctx, subject.TimerEffects, timerFire{ID: t.ID, At: at})
}

// transitionFrom is transition starting from a record already read.
func (o *Orchestrator) transitionFrom(ctx context.Context, t task.Task, rev uint64, decide func(cur task.Task) (*task.Task, string)) (task.Task, error) {
	for range maxCASRetries {
		next, reason := decide(t)
		if next == nil {
			return t, nil
		}
		newRev, err := o.write(ctx, t, rev, next, reason)
		if err == nil {
			return *next, o.ensureEffects(ctx, *next, newRev)
		}
		if !errors.Is(err, store.ErrConflict) {
			return t, err
		}
		if t, rev, err = o.store.Get(ctx, t.ID); err != nil {
			return t, err
		}
	}
	return t, fmt.Errorf("change task %s: %w", t.ID, consume.ErrContended)
}

// countUpstreams marks how upstreams of a wide fan-in waiter ended (those
// its trigger rule counts) and reports whether all its upstreams may now be
// counted (a hint the caller confirms by reading them: see package fanin).
func (o *Orchestrator) countUpstreams(ctx context.Context, waiter task.Task, upstreams ...task.MemberOutcome) (all bool, err error) {
	n := 0
	for _, up := range upstreams {
		if n, err = o.fanin.Mark(ctx, waiter.ID, up.ID, up); err != nil {
			return false, err
		}
	}
	if len(upstreams) == 0 {
		if n, err = o.fanin.Count(ctx, waiter.ID); err != nil {
			return false, err
		}
	}
	return n >= len(waiter.DependsOn), nil
}

// registerDependent records that child depends on up and returns up's
// state at that moment. The edge is written first; then, unless up's record
// already says it has dependents, that flag is set with a compare-and-set on
// up's subject. up's own end is a compare-and-set on the same subject and
// lists its edges after it, so either the end's record carries the flag and
// its listing finds this edge, or the flag's write conflicts with the end
// and the re-read here sees up ended: the child is never forgotten. The
// record is written once per upstream, not once per dependent.
func (o *Orchestrator) registerDependent(ctx context.Context, up, child string) (task.State, error) {
	// The edge first: once up's record says it has dependents, its end
	// lists the edges, and must find this one.
	if err := o.edges.Add(ctx, up, child); err != nil {
		return "", err
	}
	for range maxCASRetries {
		t, rev, err := o.store.Get(ctx, up)
		if err != nil {
			return "", err
		}
		if t.HasDependents || t.State.Terminal() || slices.Contains(t.Dependents, child) {
			return t.State, nil
		}
		t.HasDependents = true
		t.UpdatedAt = o.now()
		ev := task.Event{Kind: task.KindDependentAdded, From: t.State, To: t.State, At: t.UpdatedAt,
			Actor: o.cfg.NodeID, Reason: "has dependents (first: " + child + ")", Task: t}
		_, err = o.store.Write(ctx, ev, rev)
		if err == nil {
			return t.State, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return "", err
		}
	}
	return "", fmt.Errorf("register dependent %s on %s: %w", child, up, consume.ErrContended)
}

// dependentsOf lists the tasks that depend on t: its edges, and the list a
// record written by an earlier version may carry.
func (o *Orchestrator) dependentsOf(ctx context.Context, t task.Task) ([]string, error) {
	if !t.HasDependents {
		return slices.Sorted(slices.Values(t.Dependents)), nil
	}
	ids, err := o.edges.Dependents(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	for _, id := range t.Dependents {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// releaseDependents re-evaluates the waiting dependents of a succeeded task.
func (o *Orchestrator) releaseDependents(ctx context.Context, t task.Task, rev uint64) error {
	return o.forDependents(ctx, t, rev, "", o.releaseDependent)
}

// dependentsStep bounds the dependents one message's handler moves: a task
// with more hands the rest on, in steps, to its cascade timer.
const dependentsStep = 256

// forDependents applies each to t's dependents after the id after (all of
// them when after is ""), at most dependentsStep of them; when more remain,
// it arms t's cascade timer, whose message continues after the last one
// done. Each step is idempotent, so a crash mid-way repeats a step at most.
func (o *Orchestrator) forDependents(ctx context.Context, t task.Task, rev uint64, after string, each func(context.Context, task.Task, string) error) error {
	return o.forDependentsFrom(ctx, t, timerFire{ID: t.ID, After: after, Revision: rev}, each)
}

// forDependentsFrom is forDependents continuing from, and handing on, a
// cascade timer's message from (its After, and what else it carries).
func (o *Orchestrator) forDependentsFrom(ctx context.Context, t task.Task, from timerFire, each func(context.Context, task.Task, string) error) error {
	after := from.After
	ids, err := o.dependentsOf(ctx, t)
	if err != nil {
		return fmt.Errorf("dependents of %s: %w", t.ID, err)
	}
	start := 0
	if after != "" {
		start, _ = slices.BinarySearch(ids, after)
		if start < len(ids) && ids[start] == after {
			start++
		}
	}
	end := min(start+dependentsStep, len(ids))
	for _, id := range ids[start:end] {
		if err := each(ctx, t, id); err != nil {
			return err
		}
	}
	if end < len(ids) {
		next := from
		next.ID, next.At, next.After = t.ID, o.now(), ids[end-1]
		return o.armTimer(ctx, subject.TimerCascade, next)
	}
	return nil
}

// fireCascade continues an ended task's release or cancellation of its
// dependents.
//
// The cascade was armed from the ended record at f.Revision: a read that is
// older (or finds nothing) came from a stream leader that is behind (one
// cut off by a partition), and dropping the continuation on it would leave
// dependents waiting; it is tried again instead. A record past f.Revision
// that is not ended was re-driven since: its new end cascades again.
func (o *Orchestrator) fireCascade(ctx context.Context, f timerFire) error {
	t, rev, err := o.store.Get(ctx, f.ID)
	if errors.Is(err, store.ErrNotFound) && f.Revision > 0 {
		return fmt.Errorf("cascade of %s: not found, though it ended at revision %d (a stale read); trying again", f.ID, f.Revision)
	}
	if err != nil {
		return ignoreNotFound(err)
	}
	if rev < f.Revision {
		return fmt.Errorf("cascade of %s: read revision %d, older than its end at %d (a stale read); trying again", f.ID, rev, f.Revision)
	}
	if f.Reopen != "" {
		return o.reopenDependents(ctx, t, f)
	}
	switch t.State {
	case task.Succeeded:
		return o.forDependents(ctx, t, rev, f.After, o.releaseDependent)
	case task.Failed, task.Cancelled, task.Expired:
		return o.forDependents(ctx, t, rev, f.After, o.cancelDependent)
	}
	return nil // re-driven since: its new end cascades again
}

// releaseDependent re-evaluates one waiting dependent of an ended task
// (any dependent of a succeeded one; one whose trigger rule is not
// all_succeeded of one that did not succeed).
func (o *Orchestrator) releaseDependent(ctx context.Context, t task.Task, id string) error {
	child, rev, err := o.store.Get(ctx, id)
	if err == nil {
		return o.upstreamEnded(ctx, t, child, rev)
	}
	if errors.Is(err, store.ErrNotFound) {
		// Listed by its graph but not created yet (the graph's creation
		// was interrupted): its creation resolves it against this task.
		return nil
	}
	if err != nil {
		return fmt.Errorf("release dependent %s of %s: %w", id, t.ID, err)
	}
	return nil
}

// upstreamEnded re-evaluates child, read at rev, after its upstream t ended.
func (o *Orchestrator) upstreamEnded(ctx context.Context, t, child task.Task, rev uint64) error {
	id := child.ID
	switch child.State {
	case task.Waiting:
		v := child.Trigger().Upstream(t.State)
		if v == task.VerdictCount && len(child.DependsOn) > task.WideFanIn {
			// Count instead of re-reading every upstream each time.
			all, err := o.countUpstreams(ctx, child, task.MemberOutcome{ID: t.ID, State: t.State})
			if err != nil {
				return fmt.Errorf("release dependent %s of %s: %w", id, t.ID, err)
			}
			if !all {
				return nil
			}
		}
		return o.resolveWaitingAfter(ctx, child, rev, false, t.ID)
	case task.Ready:
		// Released earlier; its dispatch may not have been published.
		return o.dispatch(ctx, child, rev)
	}
	if child.State.Terminal() {
		return o.endedBy(ctx, child, t)
	}
	return nil
}

// endedBy is a cascade step finding a dependent already ended. One this
// upstream's end cancelled gets its effects' message again: the step that
// cancelled it wrote the record, then armed that message, and a fault in
// between (the store out, the orchestrator killed) failed the step, whose
// retry now finds the record ended. Without the message its own dependents
// waited for their reconciler's look, backed off to minutes (a chaos run:
// a graph's grandchild 2 minutes after its parent was cancelled). A
// dependent ended otherwise has its own trigger. Re-arming replaces the
// message (one per task and kind) and costs one publish; it happens when a
// step is repeated, or when an any_failed dependent's upstreams end at
// once (each upstream's step at most once), never per path of the DAG.
func (o *Orchestrator) endedBy(ctx context.Context, child, up task.Task) error {
	if !lifecycle.CancelledByCascade(&child, up.ID) {
		return nil
	}
	return o.armTimer(ctx, subject.TimerEffects, timerFire{ID: child.ID, At: o.now()})
}

// cancelDependents cancels the direct dependents of a task that did not
// succeed. Each cancelled dependent's own effects — cancelling its own
// dependents — run from its own message (an immediate watch fire), so one
// handler does O(direct dependents) work whatever the DAG's depth, and the
// whole cascade costs O(edges): a dependent already ended is not walked
// through again (its own effects were, or will be, ensured by its own
// message or its watch).
func (o *Orchestrator) cancelDependents(ctx context.Context, t task.Task, rev uint64) error {
	return o.forDependents(ctx, t, rev, "", o.cancelDependent)
}

func (o *Orchestrator) cancelDependent(ctx context.Context, up task.Task, id string) error {
	return o.cancelBecauseUpstream(ctx, id, up)
}

func (o *Orchestrator) cancelBecauseUpstream(ctx context.Context, id string, up task.Task) error {
	for range maxCASRetries {
		child, rev, err := o.store.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil // not created yet: its creation sees the upstream's state
		}
		if err != nil {
			return fmt.Errorf("cancel dependent %s of %s: %w", id, up.ID, err)
		}
		if child.State.Terminal() {
			return o.endedBy(ctx, child, up)
		}
		if child.Trigger() != task.TriggerAllSucceeded {
			// Its rule lets it run after an upstream that did not succeed.
			return o.upstreamEnded(ctx, up, child, rev)
		}
		d := lifecycle.UpstreamEnded(&child, up.ID, up.State, o.env())
		_, err = o.write(ctx, child, rev, &d.Next, d.Reason)
		if err == nil {
			// Its effects, from its own message.
			return o.armTimer(ctx, subject.TimerEffects, timerFire{ID: id, At: o.now()})
		}
		if !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("cancel dependent %s of %s: %w", id, up.ID, err)
		}
	}
	return fmt.Errorf("cancel dependent %s of %s: %w", id, up.ID, consume.ErrContended)
}

// deadLetter writes the dead-letter entry of a failed task (one per task:
// the DLQ stream keeps one message per subject, so a replay overwrites).
func (o *Orchestrator) deadLetter(ctx context.Context, t task.Task) error {
	at := o.now()
	if t.FinishedAt != nil {
		at = *t.FinishedAt
	}
	data, err := json.Marshal(task.DeadLetter{Spec: t.Spec, Attempts: t.Errors, Reason: t.Reason, FailedAt: at, Redrives: t.Redrives})
	if err != nil {
		return fmt.Errorf("encode dead letter of %s: %w", t.ID, err)
	}
	if _, err := o.js.Publish(ctx, subject.DLQ(t.ID), data, o.deadLetterTTL(t.Type)...); err != nil {
		return fmt.Errorf("dead-letter %s: %w", t.ID, err)
	}
	return nil
}
