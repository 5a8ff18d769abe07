package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// The reconciler — the design notes' fallback scan — is durable timers
// rather than a scan of history: every waiting or retrying task has a watch
// timer (ax.timer.watch.<id>), armed with the effects of its state and
// cancelled when it ends; every dispatched task is listed in a sweep timer
// shared with the dispatches that went out with it (sweep.go), which looks
// at it as its watch would. When a task has not moved
// for longer than its state allows, its watch fires and fireWatch looks at
// it (a leader read), re-ensures its effects through the normal
// compare-and-set paths, and arms the next look. The cost is one timer per
// unfinished task; the work queue hands each fire to one orchestrator.
//
// Looks back off with the time the task has not moved (ReconcileInterval
// doubling up to ReconcileMaxInterval), so a long backlog costs a few looks
// per task, and repairs are rare in a healthy system: each one is counted
// in ax_reconciler_repairs_total by reason.

// Repair reasons (the reason label of ax_reconciler_repairs_total).
const (
	repairLeaseExpired  = "lease_expired"
	repairNotDispatched = "ready_not_dispatched"
	repairWaiting       = "waiting_resolved"
	repairShards        = "shards_ended"
	repairRetryOverdue  = "retry_overdue"
	repairSlotFreed     = "slot_freed"
	repairFairLost      = "fair_queue_lost"
)

// dependencyLook is how soon the reconciler first looks at a dependent
// still waiting after it registered: past the 10 s a JetStream stream
// leader cut off from its peers keeps answering reads before it steps
// down (raft's lost-quorum interval).
const dependencyLook = 12 * time.Second

// armWatch (re)arms the reconciler's look at an unfinished task.
func (o *Orchestrator) armWatch(ctx context.Context, t task.Task) error {
	return o.armTimer(ctx, subject.TimerWatch, timerFire{ID: t.ID, At: o.watchTime(t)})
}

// lookAgain has the reconciler look at a task a second from now: after a
// write lost its compare-and-set. The record moved on — whoever moved it
// may have failed right after (two deliveries of one message handled at
// once: the one that lost acknowledges it) — or our own write landed with
// its answer lost (a group-commit batch). Either way the look re-reads the
// record and carries on from it, so the task keeps a trigger.
func (o *Orchestrator) lookAgain(ctx context.Context, id string) error {
	return o.armTimer(ctx, subject.TimerEffects, timerFire{ID: id, At: o.now().Add(time.Second)})
}

// dispatchDedupWindow is AX_READY's de-duplication window: a dispatch
// published again within it, under the same execution id, is not stored
// twice.
func (o *Orchestrator) dispatchDedupWindow() time.Duration {
	return cmp.Or(o.cfg.Topology.DuplicateWindow, DefaultDuplicateWindow)
}

// watchTime is when the reconciler should look at t if it has not moved.
func (o *Orchestrator) watchTime(t task.Task) time.Time {
	now := o.now()
	switch {
	case t.State == task.Running && t.StartedAt != nil:
		if due := t.StartedAt.Add(t.Timeout.Std() + o.cfg.RunGrace); due.After(now) {
			return due
		}
	case t.State == task.Retrying && t.RetryAt != nil:
		if due := t.RetryAt.Add(o.cfg.RunGrace); due.After(now) {
			return due
		}
	case t.State == task.Waiting && t.StartAt != nil:
		if due := t.StartAt.Add(o.cfg.RunGrace); due.After(now) {
			return due
		}
	case t.State == task.Waiting && t.Phase == task.PhaseShards:
		// A sharded parent is moved on by its shards' ends, which decide
		// on a count that faults can leave short (a lost increment, a
		// leader cut off by a partition answering from behind); a look
		// counts the markers in one leader read. Looks at the interval,
		// not backing off with the time it stood still, so a parent whose
		// shards all ended during faults moves on within an interval of
		// their healing (a chaos run saw one wait 8 minutes: its looks
		// fell in the faults and backed off to 4 minutes).
		return now.Add(o.cfg.ReconcileInterval)
	case t.State == task.Waiting && len(t.DependsOn) > 0 && now.Sub(t.UpdatedAt) < dependencyLook/2:
		// A dependent just registered decided to wait on reads: of its
		// upstreams' records, and — when one ends — of its edges. Either
		// read may come from a stream leader cut off by a partition,
		// which answers from behind until it steps down; then the
		// upstream's end and the dependent's registration each miss the
		// other. The first look comes when such a leader is gone, not
		// an interval later (a chaos run saw a dependent created as its
		// upstream ended wait 70 s for it).
		return now.Add(min(dependencyLook, o.cfg.ReconcileInterval))
	}
	still := now.Sub(t.UpdatedAt)
	if t.State == task.Ready && t.ReadyAt != nil {
		still = now.Sub(*t.ReadyAt)
	}
	return now.Add(min(max(still, o.cfg.ReconcileInterval), o.cfg.ReconcileMaxInterval))
}

// fireWatch is the reconciler's look at one task.
func (o *Orchestrator) fireWatch(ctx context.Context, f timerFire) error {
	t, rev, err := o.store.Get(ctx, f.ID)
	if err != nil {
		// Not found (a leader read): the watch was armed for a task whose
		// creation did not happen; its submission, if any, arms a new one.
		return ignoreNotFound(err)
	}
	o.metrics.ReconcilerChecked(t.State)
	o.oldest.note(o, t)
	if t.State.Terminal() {
		// A task's end is applied by a message acknowledged only once its
		// effects are ensured, so this is a watch armed by a late
		// re-ensure of an earlier state (after a crash, say), or a
		// cascade's: ensuring them again is cheap and idempotent, and not
		// counted as a repair.
		return o.ensureEffects(ctx, t, rev)
	}
	if t.CancelOn != nil {
		// Its cancel event may have been missed by a read that was stale
		// (a leader change) when its marker was stored.
		if ended, err := o.watchCancel(ctx, t); ended || err != nil {
			return err
		}
	}
	if keyHeld(t) {
		// Waiting for its key's limits: try again (it waits again, with
		// a new watch, if they still hold it).
		return o.dispatch(ctx, t, rev)
	}
	if t.State == task.Ready && o.fair.has(t.ID, t.ExecutionID) {
		return o.armFairWatch(ctx, t, o.instance) // queued here for its turn
	}
	if t.State == task.Ready && f.Owner != "" && f.ExecutionID == t.ExecutionID {
		// Queued for its turn by another orchestrator, or dispatched.
		if taken, err := o.fairTakeOver(ctx, t, f.Owner); taken || err != nil {
			return err
		}
	}
	if strings.HasPrefix(t.Reason, "held:") {
		return o.armWatch(ctx, t) // a pause or breaker holds it; its gate releases it
	}
	now := o.now()
	switch t.State {
	case task.Running:
		return o.watchRunning(ctx, t)
	case task.Ready:
		if t.DispatchRevision == 0 {
			// Ready, its execution not dispatched, and not waiting for
			// admission (above): the handler that made it ready stopped
			// before its dispatch. Dispatch it (a compare-and-set: done
			// once however often it is asked).
			if now.Sub(*readyAt(t)) >= o.cfg.RunGrace {
				o.repaired(repairNotDispatched, t)
			}
			if err := o.ensureEffects(ctx, t, rev); err != nil {
				return err
			}
			return o.armWatch(ctx, t)
		}
		if now.Sub(*readyAt(t)) < o.cfg.RunGrace {
			return o.armWatch(ctx, t)
		}
		pending, err := o.dispatchPending(ctx, t)
		if err != nil {
			return err
		}
		if pending {
			return o.armWatch(ctx, t)
		}
		// Its dispatch is gone (removed by hand, or stored while its level
		// had no consumer), or was taken and acknowledged with no report
		// to follow: nobody will run this execution. Dispatch again under
		// a new execution id, so an executor holding an old copy cannot
		// report it.
		o.repaired(repairNotDispatched, t)
		_, err = o.transition(ctx, t.ID, func(cur task.Task, rev uint64) (*task.Task, string, error) {
			why := "reconciler: its dispatch was not taken " + now.Sub(*readyAt(cur)).Round(time.Second).String() + " after it became ready; dispatched again"
			return o.decided(ctx, cur, rev, lifecycle.Redispatch(&cur, t.ExecutionID, why, o.env()))
		})
		return ignoreNotFound(err)
	case task.Retrying:
		if t.RetryAt != nil && t.RetryAt.Add(o.cfg.RunGrace).After(now) {
			return o.armWatch(ctx, t)
		}
		o.repaired(repairRetryOverdue, t)
		return o.fireRetry(ctx, timerFire{ID: t.ID, Attempt: t.Attempt})
	case task.Waiting:
		if t.StartAt != nil && t.StartAt.Add(o.cfg.RunGrace).After(now) {
			return o.armWatch(ctx, t)
		}
		reason := repairWaiting
		if t.Phase == task.PhaseShards {
			reason = repairShards
		}
		if err := o.ensureEffects(ctx, t, rev); err != nil {
			return err
		}
		// ensureEffects re-armed the watch; say whether the task moved.
		if cur, curRev, err := o.store.Get(ctx, t.ID); err == nil && curRev != rev && cur.State != task.Waiting {
			o.repaired(reason, t)
		}
		return nil
	}
	return o.armWatch(ctx, t)
}

// watchRunning fails the attempt of a running task whose executor is gone:
// past start + timeout + grace, with no live lease for its execution. The
// dispatch's redelivery normally does this; this catches the cases where
// the dispatch is gone (acknowledged, dropped, or its consumer lost).
func (o *Orchestrator) watchRunning(ctx context.Context, t task.Task) error {
	now := o.now()
	if t.StartedAt == nil || t.StartedAt.Add(t.Timeout.Std()+o.cfg.RunGrace).After(now) {
		return o.armWatch(ctx, t)
	}
	live, err := o.leased(ctx, t)
	if err != nil {
		return err
	}
	if live {
		return o.armWatch(ctx, t) // a handler overrunning its timeout, still heart-beating
	}
	o.repaired(repairLeaseExpired, t)
	return o.applyReport(ctx, task.Report{ID: t.ID, Type: t.Type, ExecutionID: t.ExecutionID, Attempt: t.Attempt,
		Executor: t.Executor, StartedAt: *t.StartedAt, FinishedAt: now, Status: task.OutcomeFailed,
		Error: fmt.Sprintf("lease expired: running since %s (timeout %s) with no live lease from executor %q",
			t.StartedAt.Format(time.RFC3339Nano), t.Timeout.Std(), t.Executor)})
}

// leased reports whether an executor holds a live lease on t's execution.
func (o *Orchestrator) leased(ctx context.Context, t task.Task) (bool, error) {
	msg, err := o.leases.GetLastMsgForSubject(ctx, subject.Lease(t.Capability, t.ID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// An executor of an earlier version keeps it under the task id.
		msg, err = o.leases.GetLastMsgForSubject(ctx, subject.LegacyLease(t.ID))
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("read lease of %s: %w", t.ID, err)
	}
	var l task.Lease
	if err := wirejson.Unmarshal(msg.Data, &l); err != nil || l.ExecutionID != t.ExecutionID {
		return false, nil
	}
	if !o.validToken(t.ID, l.ExecutionID, l.Token) {
		o.log.Warn("ignoring a lease without its execution's token", slog.String("task_id", t.ID),
			slog.String("execution_id", l.ExecutionID), slog.String("executor", l.Executor))
		return false, nil
	}
	return true, nil
}

// dispatchPending reports whether t's dispatch (at t.DispatchRevision)
// may still be run: stored and not yet delivered by its level's ready
// consumer, delivered and not yet acknowledged (an executor holds it: a
// dead one's is delivered again after the ack wait), or acknowledged with
// its report still on its way (reports wait to be applied). Not pending: it
// is no longer stored, its level's consumer was created after it (and so
// never delivers it), or it was acknowledged and no report waits.
//
// A level's consumer is read at most once per busyLevelMemory for all the
// looks at its tasks. A stale answer either way is safe: "pending" only
// delays the next look, and a second dispatch gets a new execution id (the
// first is withdrawn, and an executor holding it cannot report it).
func (o *Orchestrator) dispatchPending(ctx context.Context, t task.Task) (bool, error) {
	msg, err := o.tasks.GetMsg(ctx, t.DispatchRevision)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the dispatch of %s: %w", t.ID, err)
	}
	lv, err := o.levelState(ctx, t.Capability, t.PriorityLevel())
	if err != nil {
		return false, err
	}
	switch {
	case lv.missing || msg.Time.Before(lv.created.Add(-time.Second)):
		return false, nil
	case t.DispatchRevision > lv.delivered, t.DispatchRevision > lv.ackFloor:
		return true, nil
	}
	return o.reportsWaiting(ctx)
}

// reportsWaiting reports whether stored reports wait to be applied (the
// report of an acknowledged dispatch may be one of them).
func (o *Orchestrator) reportsWaiting(ctx context.Context) (bool, error) {
	st, err := o.js.Stream(ctx, subject.StreamCompleted)
	if err != nil {
		return false, fmt.Errorf("bind %s: %w", subject.StreamCompleted, err)
	}
	c, err := st.Consumer(ctx, subject.ConsumerCompleted)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", subject.ConsumerCompleted, err)
	}
	ci := c.CachedInfo()
	return ci.NumPending+uint64(max(ci.NumAckPending, 0)) > 0, nil
}

// levelState is what the reconciler reads of a ready level's consumer.
type levelState struct {
	at        time.Time
	missing   bool      // the level has no consumer (deleted by hand)
	created   time.Time // when its consumer was created
	delivered uint64    // the stream sequence of the last delivered
	ackFloor  uint64    // every dispatch at or below it is acknowledged
}

// levelState reads a ready level's consumer, or returns what was read of
// it less than busyLevelMemory ago. A missing consumer is created again
// (it delivers what is stored after it).
func (o *Orchestrator) levelState(ctx context.Context, capability string, priority int) (levelState, error) {
	name := subject.ReadyConsumer(capability, priority)
	now := o.now()
	if lv, ok := o.levels.recent(name, now); ok {
		return lv, nil
	}
	lv := levelState{at: now}
	c, err := o.tasks.Consumer(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		lv.missing = true
		o.buckets.forget(capability)
		if err := o.ensureObjects(ctx, capability); err != nil {
			return lv, err
		}
	case err != nil:
		return lv, fmt.Errorf("read ready consumer %s: %w", name, err)
	default:
		ci := c.CachedInfo()
		lv.created, lv.delivered, lv.ackFloor = ci.Created, ci.Delivered.Stream, ci.AckFloor.Stream
	}
	o.levels.saw(name, lv)
	return lv, nil
}

// levelDrain is what a level's consumer says of its dispatches: how many
// wait to be delivered to an executor (those delivered run: executors pull
// only what they have room for) and how many deliveries it made in all
// (zeros without a consumer: nothing is dispatched on the level yet).
func (o *Orchestrator) levelDrain(ctx context.Context, capability string, priority int) (waiting, delivered uint64, err error) {
	c, err := o.tasks.Consumer(ctx, subject.ReadyConsumer(capability, priority))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("count dispatches of %s p%d: %w", capability, priority, err)
	}
	ci := c.CachedInfo()
	return ci.NumPending, ci.Delivered.Consumer, nil
}

// busyLevels remembers what was read of ready levels' consumers lately.
type busyLevels struct {
	mu   sync.Mutex
	seen map[string]levelState
}

// busyLevelMemory is how long what was read of a level's consumer is used
// for the looks at its tasks.
const busyLevelMemory = 5 * time.Second

func (b *busyLevels) recent(subj string, now time.Time) (levelState, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lv, ok := b.seen[subj]
	return lv, ok && now.Sub(lv.at) < busyLevelMemory
}

func (b *busyLevels) saw(subj string, lv levelState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil || len(b.seen) >= 10_000 {
		b.seen = make(map[string]levelState) // a bound: capabilities are chosen by submitters
	}
	b.seen[subj] = lv
}

func readyAt(t task.Task) *time.Time {
	if t.ReadyAt != nil {
		return t.ReadyAt
	}
	return &t.UpdatedAt
}

func (o *Orchestrator) repaired(reason string, t task.Task) {
	o.metrics.ReconcilerRepaired(reason)
	o.log.Warn("reconciler: task had stalled; moving it on", slog.String("task_id", t.ID), slog.String("state", string(t.State)), slog.String("repair", reason), slog.Time("updated_at", t.UpdatedAt))
}

// oldestSeen keeps, per state, the oldest unfinished task the reconciler
// looked at within its last max interval (ax_reconciler_oldest_unfinished_seconds).
type oldestSeen struct {
	mu    sync.Mutex
	byAge map[task.State]struct {
		age  time.Duration
		seen time.Time
	}
}

func (s *oldestSeen) note(o *Orchestrator, t task.Task) {
	now := o.now()
	age := now.Sub(t.SubmittedAt)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byAge == nil {
		s.byAge = make(map[task.State]struct {
			age  time.Duration
			seen time.Time
		})
	}
	cur, ok := s.byAge[t.State]
	if ok && age < cur.age && now.Sub(cur.seen) < o.cfg.ReconcileMaxInterval {
		return
	}
	cur.age, cur.seen = age, now
	s.byAge[t.State] = cur
	o.metrics.OldestUnfinished(t.State, age)
}
