package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// The concurrency slots of the key limits (keylimits.go): one record per
// key in AX_SLOTS, changed by compare-and-set, the adaptive limit kept
// with it; the wake-up of the tasks waiting for a slot, and the
// reconciler's pass that frees the slots of ended tasks.

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
				// Its marker is gone: have its watch look again soon
				// (a second, not the next ReconcileInterval), which
				// dispatches it.
				_ = o.armTimer(ctx, subject.TimerWatch, timerFire{ID: id, At: o.now().Add(time.Second)})
				return err
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
