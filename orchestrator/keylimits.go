package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/window"
	"github.com/ax-run/ax/task"
)

// Key limits (task.KeyLimit) bound the tasks of one concurrency key:
//
//   - Concurrency: a ready task takes one of its key's slots before its
//     dispatch goes out, and gives it back when the attempt ends (its
//     state leaves ready and running: report, lease expiry, cancel,
//     reconciler). The slots are one record per key in AX_SLOTS, changed
//     by compare-and-set, naming the tasks that hold them: taking a slot
//     again for the same task takes none, and the reconciler's pass frees
//     the slots of tasks that ended without freeing them. A task finding
//     no slot stays ready with a reason ("held: concurrency …"), a marker
//     on ax.slotwait.p<priority>.<key>.<id> in AX_HELD and a watch; an
//     attempt ending hands its slot to the first waiter, by weighted
//     priority, then the oldest (slots.go), and tasks arriving later wait
//     behind.
//   - Rate: a dispatch takes a start in its key's window of Per (the
//     retry budget's windows, on AX_RETRY_WINDOWS); over the rate it
//     waits, ready with a reason, for the window with room (its watch
//     fires then).
//   - Adaptive: the slots' record carries the limit's current value,
//     lowered ×0.8 (at most once per attempt's duration) when an attempt
//     fails to be retried or a success takes longer than TargetLatency,
//     raised by 1/limit per other success, between MinConcurrency and
//     Concurrency. The change is written with the freed slot: one write.
//
// Reason prefixes of ready tasks held by a key limit.
const (
	slotHeldPrefix = "held: concurrency limit of key "
	rateHeldPrefix = "held: rate limit of key "
	// letGoPrefix begins the reason of the dispatch of a task that waited.
	letGoPrefix = "let go by the limits of key "
)

// maxRuntimeLimits bounds the limits set at run time.
const maxRuntimeLimits = 10_000

// keyLimits is the limits in force: configuration's, replaced pattern by
// pattern by those set at run time (the AX_CONTROL bucket, watched).
type keyLimits struct {
	mu      sync.RWMutex
	static  []task.KeyLimit
	runtime map[string]task.KeyLimit
	merged  []task.KeyLimit
}

func newKeyLimits(static []task.KeyLimit) *keyLimits {
	k := &keyLimits{static: slices.Clone(static), runtime: map[string]task.KeyLimit{}}
	k.merge()
	return k
}

// merge rebuilds merged; the caller holds mu (or owns k).
func (k *keyLimits) merge() {
	merged := make([]task.KeyLimit, 0, len(k.static)+len(k.runtime))
	for _, l := range k.static {
		if _, replaced := k.runtime[l.Key]; !replaced {
			merged = append(merged, l)
		}
	}
	for _, l := range k.runtime {
		merged = append(merged, l)
	}
	k.merged = merged
}

// set puts (l non-nil) or removes a run-time limit.
func (k *keyLimits) set(pattern string, l *task.KeyLimit) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l == nil {
		delete(k.runtime, pattern)
	} else {
		k.runtime[pattern] = *l
	}
	k.merge()
}

// runtimeLimit returns the run-time limit of a pattern.
func (k *keyLimits) runtimeLimit(pattern string) (task.KeyLimit, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	l, ok := k.runtime[pattern]
	return l, ok
}

func (k *keyLimits) runtimeCount() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.runtime)
}

// match returns the limit in force for key that sets has (see
// task.MatchLimit).
func (k *keyLimits) match(key, has string) (task.KeyLimit, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return task.MatchLimit(k.merged, key, has)
}

// applyLimit updates the limits from a control bucket entry.
func (k *keyLimits) apply(pattern string, e jetstream.KeyValueEntry) {
	var l task.KeyLimit
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &l) != nil || l.Validate() != nil || l.Key != pattern {
		k.set(pattern, nil)
		return
	}
	k.set(pattern, &l)
}

// adaptiveAbsorbs reports whether a failed attempt is a "slow down" (a
// handler's RetryAfter: an HTTP 429, say) of a task under an adaptive
// limit: the limit answers it by lowering the key's concurrency, so it
// does not count towards the type's circuit breaker, which would hold
// every task of the type instead.
func (o *Orchestrator) adaptiveAbsorbs(t task.Task, r task.Report) bool {
	if r.Status != task.OutcomeFailed || r.RetryAfter == nil || r.Permanent || t.ConcurrencyKey == "" {
		return false
	}
	l, ok := o.limits.match(t.ConcurrencyKey, "concurrency")
	return ok && l.Adaptive
}

// admitKey applies t's key limits before its dispatch: it returns held
// when t must wait (it then waits, with a reason and a trigger), else the
// record to dispatch — when t had waited, with the reason and ready time
// its dispatch records, so its history says when it was let go.
func (o *Orchestrator) admitKey(ctx context.Context, t task.Task, rev uint64) (held bool, _ task.Task, _ uint64, _ error) {
	key := t.ConcurrencyKey
	if l, ok := o.limits.match(key, "concurrency"); ok {
		got, inUse, limit, err := o.takeSlot(ctx, t, l)
		if err != nil {
			return true, t, rev, err
		}
		if !got {
			held, next, nextRev, err := o.waitForSlot(ctx, t, rev, l, inUse, limit)
			if held || err != nil {
				return true, t, rev, err
			}
			t, rev = next, nextRev
		}
	}
	if l, ok := o.limits.match(key, "rate"); ok {
		p := window.Policy{Limit: l.Rate, Width: l.Window()}
		now := o.now()
		at, err := p.AllocateFor(ctx, o.retrySlots, "rate="+key, t.ID+"#"+t.ExecutionID, now, int(time.Hour/p.Width))
		if errors.Is(err, window.ErrExhausted) {
			at, err = now.Add(time.Hour), nil
		}
		if err != nil {
			return true, t, rev, fmt.Errorf("rate limit of key %s: %w", key, err)
		}
		if at.After(now.Add(time.Millisecond)) {
			why := fmt.Sprintf("%s%s (%d per %s): dispatched at %s", rateHeldPrefix, key, l.Rate, l.Window(), at.Format(time.RFC3339Nano))
			return true, t, rev, o.holdReady(ctx, t, rev, why, at)
		}
	}
	if strings.HasPrefix(t.Reason, slotHeldPrefix) || strings.HasPrefix(t.Reason, rateHeldPrefix) {
		// It waited: its dispatch says when it was let go (one write, not
		// a record of the release and then the dispatch).
		now := o.now()
		t.ReadyAt = &now
		t.Reason = letGoPrefix + key + ": dispatched"
	}
	return false, t, rev, nil
}

// waitForSlot makes t wait for a slot of its key: a reason, then a marker
// its key's next freed slot finds, and a watch. It takes a slot once more
// after the marker is stored (one freed between the first try and the
// marker would find no marker) and returns held false, with the record
// as it now is, when it got one. The reason is written before the marker,
// so whoever finds the marker finds the task waiting.
func (o *Orchestrator) waitForSlot(ctx context.Context, t task.Task, rev uint64, l task.KeyLimit, inUse, limit int) (bool, task.Task, uint64, error) {
	why := fmt.Sprintf("%s%s reached (%d of %d dispatched or running): dispatched when a slot frees", slotHeldPrefix, t.ConcurrencyKey, inUse, limit)
	again := sameHold(t.Reason, why)
	o.log.Debug("held for a slot of its concurrency key", slog.String("task_id", t.ID), slog.Bool("again", again))
	if !again {
		o.metrics.DispatchHeld()
		next := t
		newRev, err := o.write(ctx, t, rev, &next, why)
		if errors.Is(err, store.ErrConflict) {
			return true, t, rev, o.lookAgain(ctx, t.ID) // moved on, or our write landed unanswered
		}
		if err != nil {
			return true, t, rev, err
		}
		t, rev = next, newRev
	}
	seq, err := o.markSlotWait(ctx, t, again)
	if err != nil {
		return true, t, rev, err
	}
	got, _, _, err := o.takeSlot(ctx, t, l)
	if err != nil || got {
		if got {
			// Its marker is left over: no hand-over needs to find it.
			if err := o.held.DeleteMsg(ctx, seq); err != nil && !msgGone(err) {
				o.log.Debug("cannot delete a left-over slot marker; found stale later", slog.String("task", t.ID), slog.Any("error", err))
			}
		}
		return !got, t, rev, err
	}
	return true, t, rev, o.armTimer(ctx, subject.TimerWatch, timerFire{ID: t.ID, At: o.now().Add(o.cfg.ReconcileInterval)})
}

// markSlotWait stores t's marker for its key's next freed slot and returns
// its sequence. A task that waited already (its watch looking again)
// keeps its marker, and so its place, when the marker is still there.
func (o *Orchestrator) markSlotWait(ctx context.Context, t task.Task, again bool) (uint64, error) {
	subj := subject.SlotWait(t.PriorityLevel(), t.ConcurrencyKey, t.ID)
	if again {
		m, err := o.held.GetLastMsgForSubject(ctx, subj)
		if err == nil {
			return m.Sequence, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, fmt.Errorf("wait for a slot of key %s: %w", t.ConcurrencyKey, err)
		}
	}
	data, _ := json.Marshal(heldMarker{ID: t.ID})
	ack, err := o.js.Publish(ctx, subj, data)
	if err != nil {
		return 0, fmt.Errorf("wait for a slot of key %s: %w", t.ConcurrencyKey, err)
	}
	return ack.Sequence, nil
}

// holdReady records why a ready task is not dispatched yet (unless its
// record says so already) and arms its effects timer for at, which
// dispatches it again (fireWatch).
func (o *Orchestrator) holdReady(ctx context.Context, t task.Task, rev uint64, why string, at time.Time) error {
	o.metrics.DispatchHeld()
	if !sameHold(t.Reason, why) {
		next := t
		if _, err := o.write(ctx, t, rev, &next, why); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return o.lookAgain(ctx, t.ID) // moved on, or our write landed unanswered
			}
			return err
		}
	}
	return o.armTimer(ctx, subject.TimerEffects, timerFire{ID: t.ID, At: at})
}

// sameHold reports whether a record's reason already says why (the counts
// in a slot wait's reason change without news).
func sameHold(reason, why string) bool {
	if strings.HasPrefix(why, slotHeldPrefix) {
		cut := func(s string) string { s, _, _ = strings.Cut(s, " ("); return s }
		return cut(reason) == cut(why)
	}
	return reason == why
}

// keyHeld reports whether a ready task waits for its key's limits.
func keyHeld(t task.Task) bool {
	return t.State == task.Ready && (strings.HasPrefix(t.Reason, slotHeldPrefix) || strings.HasPrefix(t.Reason, rateHeldPrefix))
}

// setLimit stores a run-time key limit (a limit-set command) and records
// it in the audit trail; a limit raised or set may free slots, so the
// waiters of the keys it matches are looked at by the next slot pass.
func (o *Orchestrator) setLimit(ctx context.Context, id string, req task.CommandRequest) error {
	pattern, ok := subject.ParseLimitID(id)
	if !ok || req.Limit == nil || req.Limit.Key != pattern {
		return fmt.Errorf("%w: a limit-set command carries a limit whose key is its id's pattern", errInvalid)
	}
	l := *req.Limit
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	key := subject.ControlLimit(pattern)
	before, known := o.limits.runtimeLimit(pattern)
	if _, err := o.control.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) && o.limits.runtimeCount() >= maxRuntimeLimits {
		return fmt.Errorf("%w: %d limits are set already (the most kept)", errCommand, maxRuntimeLimits)
	}
	l.Reason, l.By, l.At = req.Reason, req.By, o.now()
	data, _ := json.Marshal(l)
	if _, err := o.control.Put(ctx, key, data); err != nil {
		return fmt.Errorf("set limit %s: %w", pattern, err)
	}
	o.limits.set(pattern, &l) // at once: the watch may lag behind the reply
	from := ""
	if known {
		from = describeLimit(before)
	}
	o.audit(ctx, task.AuditEvent{Kind: "limit", Key: pattern, From: from, To: describeLimit(l), Reason: req.Reason + byline(req.By)})
	o.wakeAfterLimitChange(pattern)
	return nil
}

// deleteLimit removes a run-time key limit (a limit-delete command).
func (o *Orchestrator) deleteLimit(ctx context.Context, id string, req task.CommandRequest) error {
	pattern, ok := subject.ParseLimitID(id)
	if !ok {
		return fmt.Errorf("%w: %q is not a limit id", errInvalid, id)
	}
	key := subject.ControlLimit(pattern)
	from := ""
	if e, err := o.control.Get(ctx, key); err == nil {
		var l task.KeyLimit
		if json.Unmarshal(e.Value(), &l) == nil {
			from = describeLimit(l)
		}
	}
	if err := o.control.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("remove limit %s: %w", pattern, err)
	}
	o.limits.set(pattern, nil)
	o.audit(ctx, task.AuditEvent{Kind: "limit", Key: pattern, From: from, To: "removed", Reason: req.Reason + byline(req.By)})
	o.wakeAfterLimitChange(pattern)
	return nil
}

// wakeAfterLimitChange settles, in the background, the slots of the keys
// a changed limit matches: a raised limit hands more slots over, a removed
// one lets the waiters go.
func (o *Orchestrator) wakeAfterLimitChange(pattern string) {
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		ctx := o.runCtx
		info, err := o.held.Info(ctx, jetstream.WithSubjectFilter(subject.SlotWaitAll))
		if err != nil {
			o.log.Warn("cannot list the tasks waiting for slots after a limit change; the slot pass wakes them", slog.Any("error", err))
			return
		}
		keys := map[string]bool{}
		for subj := range info.State.Subjects {
			if key, _, ok := subject.ParseSlotWait(subj); ok && task.MatchKey(pattern, key) {
				keys[key] = true
			}
		}
		for key := range keys {
			o.wakeLater(key, nil, true, nil)
		}
	}()
}

// describeLimit says what a limit sets, for the audit trail.
func describeLimit(l task.KeyLimit) string {
	var parts []string
	if l.Concurrency > 0 {
		s := fmt.Sprintf("concurrency %d", l.Concurrency)
		if l.Adaptive {
			s += fmt.Sprintf(" adaptive from %d", l.Floor())
			if l.TargetLatency > 0 {
				s += fmt.Sprintf(" target %s", l.TargetLatency.Std())
			}
		}
		parts = append(parts, s)
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %d per %s", l.Rate, l.Window()))
	}
	if l.Weight > 0 {
		parts = append(parts, fmt.Sprintf("weight %d", l.Weight))
	}
	return strings.Join(parts, ", ")
}
