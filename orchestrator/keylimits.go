package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
//     attempt ending wakes the first waiters, p0 first.
//   - Rate: a dispatch takes a start in its key's window of Per (the
//     retry budget's windows, on AX_RETRY_WINDOWS); over the rate it
//     waits, ready with a reason, for the window with room (its watch
//     fires then).
//   - Adaptive: the slots' record carries the limit's current value,
//     lowered ×0.8 (at most once per attempt's duration) when an attempt
//     fails to be retried or a success takes longer than TargetLatency,
//     raised by 1/limit per other success, between MinConcurrency and
//     Concurrency. The change is written with the freed slot: one write.

// Reason prefixes of ready tasks held by a key limit.
const (
	slotHeldPrefix = "held: concurrency limit of key "
	rateHeldPrefix = "held: rate limit of key "
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

// slotLimit is how many slots l allows now: its adaptive value's integer
// part, or its concurrency.
func slotLimit(l task.KeyLimit, s task.Slots) int {
	if !l.Adaptive || s.Limit <= 0 {
		return l.Concurrency
	}
	return max(l.Floor(), min(l.Concurrency, int(s.Limit)))
}

// readSlots reads a key's slots (a leader read: AX_SLOTS has no direct
// gets) and its revision, 0 when the key has none.
func (o *Orchestrator) readSlots(ctx context.Context, key string) (task.Slots, uint64, error) {
	var s task.Slots
	e, err := o.slotsKV.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return s, 0, nil
	case err != nil:
		return s, 0, fmt.Errorf("read slots of key %s: %w", key, err)
	}
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return s, 0, fmt.Errorf("slots of key %s hold %q: %w", key, e.Value(), err)
	}
	return s, e.Revision(), nil
}

// writeSlots stores a key's slots against rev (0: create), deleting the key
// when nothing holds a slot and no adaptive value is kept.
func (o *Orchestrator) writeSlots(ctx context.Context, key string, s task.Slots, rev uint64) error {
	data, _ := json.Marshal(s)
	var err error
	switch {
	case rev == 0:
		_, err = o.slotsKV.Create(ctx, key, data)
	case len(s.Holders) == 0 && s.Limit == 0:
		err = o.slotsKV.Delete(ctx, key, jetstream.LastRevision(rev))
	default:
		_, err = o.slotsKV.Update(ctx, key, data, rev)
	}
	return err
}

// msgGone reports whether a message delete found no message: deleted
// already (jetstream answers "message deletion unsuccessful: no message
// found", not ErrMsgNotFound).
func msgGone(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) ||
		(errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "no message found"))
}

// casConflict reports whether a KV write lost a compare-and-set.
func casConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// Slot changes of one key are combined: every change waiting while one
// is written goes in the next read-and-write of the key's record (a
// compare-and-set), as a group commit does, so a busy key costs a write per
// round trip, not per change, and this orchestrator's changes do not lose
// compare-and-sets to each other (another orchestrator's still may; they
// are redone on the fresh record).

// slotOp is one change to a key's slots and, once done is closed, its
// result.
type slotOp struct {
	take    bool // take a slot for t; else give t's back
	t       task.Task
	l       task.KeyLimit
	limited bool // l is in force (a free with no limit clears an adaptive value)

	ok          bool // take: t holds a slot; free: t held one, given back
	inUse, free int  // after the change: slots in use; free slots for waiters (the first free of a batch only)
	limit       int  // the slots allowed
	err         error
	done        chan struct{}
}

// slotBatches queues the changes waiting per key.
type slotBatches struct {
	mu      sync.Mutex
	pending map[string][]*slotOp
	busy    map[string]bool
}

// changeSlots applies op with the other changes of its key waiting: the
// first caller of a key writes for everyone queued behind it until none
// waits.
func (o *Orchestrator) changeSlots(ctx context.Context, op *slotOp) {
	key := op.t.ConcurrencyKey
	op.done = make(chan struct{})
	b := &o.slotBatches
	b.mu.Lock()
	if b.pending == nil {
		b.pending, b.busy = map[string][]*slotOp{}, map[string]bool{}
	}
	b.pending[key] = append(b.pending[key], op)
	if b.busy[key] {
		b.mu.Unlock()
		select {
		case <-op.done:
		case <-ctx.Done():
			// The writer finishes it; this caller stops waiting (its
			// message is redelivered and asks again: idempotent).
		}
		return
	}
	b.busy[key] = true
	b.mu.Unlock()
	for {
		b.mu.Lock()
		ops := b.pending[key]
		delete(b.pending, key)
		if len(ops) == 0 {
			delete(b.busy, key)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		o.writeSlotOps(ctx, key, ops)
		for _, op := range ops {
			close(op.done)
		}
	}
}

// writeSlotOps applies ops to key's record in one compare-and-set, redone
// on the fresh record after a conflict.
func (o *Orchestrator) writeSlotOps(ctx context.Context, key string, ops []*slotOp) {
	fail := func(err error) {
		for _, op := range ops {
			op.err = err
		}
	}
	for range maxCASRetries {
		s, rev, err := o.readSlots(ctx, key)
		if err != nil {
			fail(err)
			return
		}
		changed := false
		for _, op := range ops {
			_, held := s.Holders[op.t.ID]
			op.ok, op.free = false, 0
			switch {
			case op.take && held:
				op.ok = true
			case op.take && len(s.Holders) < slotLimit(op.l, s):
				if s.Holders == nil {
					s.Holders = map[string]time.Time{}
				}
				s.Holders[op.t.ID] = o.now()
				if op.l.Adaptive && s.Limit == 0 {
					s.Limit = float64(op.l.Concurrency)
				}
				op.ok, changed = true, true
			case !op.take && held:
				inUse := len(s.Holders)
				delete(s.Holders, op.t.ID)
				if op.limited && op.l.Adaptive {
					o.adapt(&s, op.l, op.t, inUse)
				} else {
					s.Limit = 0
				}
				op.ok, changed = true, true
			}
			op.inUse, op.limit = len(s.Holders), slotLimit(op.l, s)
		}
		if changed {
			err = o.writeSlots(ctx, key, s, rev)
			if casConflict(err) {
				continue
			}
			if err != nil {
				fail(fmt.Errorf("change the slots of key %s: %w", key, err))
				return
			}
		}
		first := true
		for _, op := range ops {
			if !op.take && op.ok && first {
				op.free, first = 1, false
				if op.limited {
					op.free = slotLimit(op.l, s) - len(s.Holders)
				}
			}
			if op.limited {
				o.noteSlots(key, s, op.l)
			}
		}
		return
	}
	fail(fmt.Errorf("change the slots of key %s: too many concurrent changes", key))
}

// takeSlot takes a slot of t's concurrency key for t under l, or finds the
// one t holds. It returns whether t holds one, and the slots in use and
// allowed when it does not.
func (o *Orchestrator) takeSlot(ctx context.Context, t task.Task, l task.KeyLimit) (ok bool, inUse, limit int, err error) {
	op := &slotOp{take: true, t: t, l: l, limited: true}
	o.changeSlots(ctx, op)
	if err := waitSlotOp(ctx, op); err != nil {
		return false, 0, 0, err
	}
	return op.ok, op.inUse, op.limit, nil
}

// waitSlotOp returns op's error once it is done, or ctx's.
func waitSlotOp(ctx context.Context, op *slotOp) error {
	select {
	case <-op.done:
		return op.err
	default:
		return ctx.Err()
	}
}

// freeSlot gives back the slot t holds (none held: nothing happens),
// adapting the key's limit by t's outcome, and wakes as many of the key's
// waiters as there are free slots after it. Idempotent: a second call
// finds no slot.
func (o *Orchestrator) freeSlot(ctx context.Context, t task.Task) error {
	l, limited := o.limits.match(t.ConcurrencyKey, "concurrency")
	op := &slotOp{t: t, l: l, limited: limited}
	o.changeSlots(ctx, op)
	if err := waitSlotOp(ctx, op); err != nil {
		return err
	}
	if !op.limited && op.ok {
		op.free = 16 // the limit went: let waiters go
	}
	if op.free > 0 {
		o.wakeLater(t.ConcurrencyKey, op.free)
	}
	return nil
}

// wakeLater wakes up to n waiters of key in the background, one goroutine
// per key at a time (later wake-ups add to its count): the report that
// freed the slot is applied without waiting for them, and a wake-up lost
// to a crash or an error is made good by the waiters' watches.
func (o *Orchestrator) wakeLater(key string, n int) {
	w := &o.slotWakes
	w.mu.Lock()
	if w.due == nil {
		w.due = map[string]int{}
	}
	_, running := w.due[key]
	w.due[key] = min(w.due[key]+n, 16)
	w.mu.Unlock()
	if running {
		return
	}
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		for {
			w.mu.Lock()
			n := w.due[key]
			if n == 0 || o.runCtx.Err() != nil {
				delete(w.due, key)
				w.mu.Unlock()
				return
			}
			w.due[key] = 0
			w.mu.Unlock()
			if err := o.wakeSlotWaiters(o.runCtx, key, n); err != nil && o.runCtx.Err() == nil {
				o.log.Warn("waking tasks waiting for a slot failed; their watches look again", slog.String("key", key), slog.Any("error", err))
			}
		}
	}()
}

// slotWakes counts the wake-ups due per key while one runs.
type slotWakes struct {
	mu  sync.Mutex
	due map[string]int
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

// adaptDecrease is the factor an adaptive limit is lowered by.
const adaptDecrease = 0.8

// adapt moves an adaptive limit by the outcome of t's attempt (AIMD): down
// by adaptDecrease when it failed and will be retried, or succeeded slower
// than the target, at most once per round of attempts (the moving average
// of the successes' durations: the failures of one round lower it once);
// up by 1/limit per other success, so one slot per round — while the key
// uses at least half its limit (inUse, with t's slot): a limit nobody
// reaches is not raised, or it would drift to the ceiling while the
// downstream is never tested.
func (o *Orchestrator) adapt(s *task.Slots, l task.KeyLimit, t task.Task, inUse int) {
	if s.Limit <= 0 {
		s.Limit = float64(l.Concurrency)
	}
	now := o.now()
	took := time.Duration(0)
	if t.StartedAt != nil {
		end := now
		if t.FinishedAt != nil {
			end = *t.FinishedAt
		}
		took = max(0, end.Sub(*t.StartedAt))
	}
	round := 50 * time.Millisecond
	if s.Latency > 0 {
		round = max(10*time.Millisecond, time.Duration(s.Latency*float64(time.Millisecond)))
	}
	slow := t.State == task.Succeeded && l.TargetLatency > 0 && took > l.TargetLatency.Std()
	if t.State == task.Succeeded {
		ms := float64(took) / float64(time.Millisecond)
		if s.Latency == 0 {
			s.Latency = ms
		} else {
			s.Latency = 0.8*s.Latency + 0.2*ms
		}
	}
	switch {
	case t.State == task.Retrying || slow:
		if now.Sub(s.Lowered) > round {
			s.Limit *= adaptDecrease
			s.Lowered = now
		}
	case t.State == task.Succeeded && float64(inUse)*2 >= s.Limit:
		s.Limit += 1 / s.Limit
	}
	s.Limit = math.Max(float64(l.Floor()), math.Min(float64(l.Concurrency), s.Limit))
}

// wakeSlotWaiters dispatches up to n tasks waiting for a slot of key, the
// highest priority first, oldest first. Each goes through dispatch again
// (and waits again if another task took the slot meanwhile).
func (o *Orchestrator) wakeSlotWaiters(ctx context.Context, key string, n int) error {
	if n <= 0 {
		return nil
	}
	st, err := o.js.Stream(ctx, subject.StreamHeld)
	if err != nil {
		return fmt.Errorf("wake waiters of key %s: %w", key, err)
	}
	woken := 0
	for woken < n {
		// The oldest waiter of any priority, then any of a higher
		// priority before it: one request when nobody waits.
		msg, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject.SlotWaitAnyPriority(key)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("wake waiters of key %s: %w", key, err)
		}
		prio, _ := subject.SlotWaitPriority(msg.Subject)
		for p := 0; p < prio; p++ {
			first, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject.SlotWaitKey(p, key)))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("wake waiters of key %s: %w", key, err)
			}
			msg = first
			break
		}
		// The marker goes first: deleting it is the wake-up's claim (of
		// two orchestrators waking the key, one deletes it), and a task
		// that waits again (another took the slot) stores a new one.
		if err := st.DeleteMsg(ctx, msg.Sequence); err != nil {
			if msgGone(err) {
				continue
			}
			return fmt.Errorf("wake waiters of key %s: %w", key, err)
		}
		if _, id, ok := subject.ParseSlotWait(msg.Subject); ok {
			waited, err := o.wakeSlotWaiter(ctx, id)
			if err != nil {
				return err // its watch looks again
			}
			if waited {
				woken++
			}
		}
	}
	return nil
}

// wakeSlotWaiter dispatches a task that waited for a slot, if it still
// does (its marker is written after its reason: a marker whose task does
// not say it waits is one left behind by a task that got a slot at its
// second try, or that ended).
func (o *Orchestrator) wakeSlotWaiter(ctx context.Context, id string) (bool, error) {
	t, rev, err := o.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if t.State != task.Ready || !strings.HasPrefix(t.Reason, slotHeldPrefix) {
		return false, nil
	}
	return true, o.dispatch(ctx, t, rev)
}

// admitKey applies t's key limits before its dispatch: it returns held
// when t must wait (it then waits, with a reason and a trigger), else the
// record to dispatch — rewritten when t had waited, so its history says
// when it was let go.
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
		next := t
		now := o.now()
		next.ReadyAt = &now
		newRev, err := o.write(ctx, t, rev, &next, "let go by the limits of key "+key+": dispatched")
		if errors.Is(err, store.ErrConflict) {
			return true, t, rev, nil // moved on: whoever moved it dispatches it
		}
		if err != nil {
			return true, t, rev, err
		}
		return false, next, newRev, nil
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
	if !again {
		o.metrics.DispatchHeld()
		next := t
		newRev, err := o.write(ctx, t, rev, &next, why)
		if errors.Is(err, store.ErrConflict) {
			return true, t, rev, nil // moved on: whoever moved it owns it
		}
		if err != nil {
			return true, t, rev, err
		}
		t, rev = next, newRev
	}
	if err := o.markSlotWait(ctx, t, again); err != nil {
		return true, t, rev, err
	}
	got, _, _, err := o.takeSlot(ctx, t, l)
	if err != nil || got {
		return !got, t, rev, err
	}
	return true, t, rev, o.armTimer(ctx, subject.TimerWatch, timerFire{ID: t.ID, At: o.now().Add(o.cfg.ReconcileInterval)})
}

// markSlotWait stores t's marker for its key's next freed slot. A task
// that waited already (its watch looking again) keeps its marker, and so
// its place, when the marker is still there.
func (o *Orchestrator) markSlotWait(ctx context.Context, t task.Task, again bool) error {
	subj := subject.SlotWait(t.PriorityLevel(), t.ConcurrencyKey, t.ID)
	if again {
		st, err := o.js.Stream(ctx, subject.StreamHeld)
		if err != nil {
			return fmt.Errorf("wait for a slot of key %s: %w", t.ConcurrencyKey, err)
		}
		_, err = st.GetLastMsgForSubject(ctx, subj)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("wait for a slot of key %s: %w", t.ConcurrencyKey, err)
		}
	}
	data, _ := json.Marshal(heldMarker{ID: t.ID})
	if _, err := o.js.Publish(ctx, subj, data); err != nil {
		return fmt.Errorf("wait for a slot of key %s: %w", t.ConcurrencyKey, err)
	}
	return nil
}

// holdReady records why a ready task is not dispatched yet (unless its
// record says so already) and arms its watch for at, which dispatches it
// again (fireWatch).
func (o *Orchestrator) holdReady(ctx context.Context, t task.Task, rev uint64, why string, at time.Time) error {
	o.metrics.DispatchHeld()
	if !sameHold(t.Reason, why) {
		next := t
		if _, err := o.write(ctx, t, rev, &next, why); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return nil // moved on: whoever moved it owns it
			}
			return err
		}
	}
	return o.armTimer(ctx, subject.TimerWatch, timerFire{ID: t.ID, At: at})
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

// auditSlots is the reconciler's pass over the concurrency slots: a slot
// whose task is no longer ready or running (or gone) was not freed when
// its attempt ended — an orchestrator died between the two — and is freed
// now. Slots taken less than RunGrace ago are left alone (their task may
// be about to be dispatched). One leader read per slot held.
func (o *Orchestrator) auditSlots(ctx context.Context) error {
	lister, err := o.slotsKV.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil
		}
		return fmt.Errorf("list concurrency keys: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	for key := range lister.Keys() {
		s, _, err := o.readSlots(ctx, key)
		if err != nil {
			return err
		}
		for id, since := range s.Holders {
			if o.now().Sub(since) < o.cfg.RunGrace {
				continue
			}
			t, _, err := o.store.Get(ctx, id)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if err == nil && (t.State == task.Ready || t.State == task.Running) {
				continue
			}
			if errors.Is(err, store.ErrNotFound) {
				t = task.Task{Spec: task.Spec{ID: id, ConcurrencyKey: key}}
			}
			o.repaired(repairSlotFreed, t)
			if err := o.freeSlot(ctx, t); err != nil {
				return err
			}
		}
		// A key with free slots may still have waiters (a raised limit,
		// a wake-up lost to a crash): wake them. (A key whose slots all
		// freed has no record: its waiters' watches wake them.)
		if l, ok := o.limits.match(key, "concurrency"); ok {
			if s, _, err = o.readSlots(ctx, key); err != nil {
				return err
			}
			if free := slotLimit(l, s) - len(s.Holders); free > 0 {
				if err := o.wakeSlotWaiters(ctx, key, min(free, 16)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// slotAuditLoop runs auditSlots every ReconcileInterval until ctx ends.
func (o *Orchestrator) slotAuditLoop(ctx context.Context) {
	defer o.bg.Done()
	t := time.NewTicker(o.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := o.auditSlots(ctx); err != nil && ctx.Err() == nil {
			o.log.Warn("the pass over concurrency slots stopped early; the next one goes on", slog.Any("error", err))
		}
	}
}

// setLimit stores a run-time key limit (a limit-set command) and records
// it in the audit trail; a limit raised or set may free slots, so the
// waiters of the keys it matches are looked at by the next slot pass.
func (o *Orchestrator) setLimit(ctx context.Context, id string, req task.CommandRequest) error {
	pattern, ok := subject.ParseLimitID(id)
	if !ok || req.Limit == nil || req.Limit.Key != pattern {
		return fmt.Errorf("%w: a limit-set command carries a limit whose key is its id's pattern", errCommand)
	}
	l := *req.Limit
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errCommand, err)
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
		return fmt.Errorf("%w: %q is not a limit id", errCommand, id)
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

// wakeAfterLimitChange wakes, in the background, the waiters of the keys
// a changed limit matches: a raised or removed limit frees slots.
func (o *Orchestrator) wakeAfterLimitChange(pattern string) {
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		ctx := o.runCtx
		st, err := o.js.Stream(ctx, subject.StreamHeld)
		if err != nil {
			return
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject.SlotWaitAll))
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
			n := 16
			if l, ok := o.limits.match(key, "concurrency"); ok {
				s, _, err := o.readSlots(ctx, key)
				if err != nil {
					continue
				}
				n = min(n, slotLimit(l, s)-len(s.Holders))
			}
			if err := o.wakeSlotWaiters(ctx, key, n); err != nil {
				o.log.Warn("waking the tasks waiting for slots after a limit change stopped early", slog.Any("error", err), slog.String("key", key))
			}
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

// maxSlotMetrics bounds the concurrency keys whose slots are exported.
const maxSlotMetrics = 1000

// noteSlots exports a key's slots in use and limit in force, for at most
// maxSlotMetrics keys (the first seen).
func (o *Orchestrator) noteSlots(key string, s task.Slots, l task.KeyLimit) {
	o.slotKeysMu.Lock()
	_, known := o.slotKeys[key]
	if !known && len(o.slotKeys) < maxSlotMetrics {
		if o.slotKeys == nil {
			o.slotKeys = map[string]struct{}{}
		}
		o.slotKeys[key] = struct{}{}
		known = true
	}
	o.slotKeysMu.Unlock()
	if !known {
		return
	}
	limit := float64(l.Concurrency)
	if l.Adaptive && s.Limit > 0 {
		limit = s.Limit
	}
	o.metrics.KeySlots(key, len(s.Holders), limit)
}
