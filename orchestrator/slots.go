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

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/swrr"
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
// found", or the API error 10043 "sequence N not found" on a replicated
// stream — not ErrMsgNotFound).
func msgGone(err error) bool {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true
	}
	// The answer's error is in the text only.
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) &&
		(strings.Contains(msg, "no message found") || strings.Contains(msg, "err_code=10043"))
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
//
// A freed slot is handed over: the compare-and-set that frees it gives it
// to the first task waiting for one (the highest priority, then the
// oldest: the markers on ax.slotwait), which is then dispatched holding
// it. A task arriving later finds every slot held, and waits behind: no
// waiter is overtaken by newer tasks, however busy the key.

// slotKind is what a slotOp does.
type slotKind int

const (
	opTake   slotKind = iota // take a slot for t
	opFree                   // give t's slot back (its attempt ended)
	opRevoke                 // give back a slot handed to t, which no longer waits (no adaptation)
	opSettle                 // hand the free slots over to the waiters
)

// slotOp is one change to a key's slots and, once done is closed, its
// result.
type slotOp struct {
	kind    slotKind
	key     string
	t       task.Task
	l       task.KeyLimit
	limited bool // l is in force (a free with no limit clears an adaptive value)

	ok           bool // take: t holds a slot; free: t held one, given back
	inUse, limit int  // after the change: slots in use, slots allowed
	err          error
	done         chan struct{}
}

// slotBatches queues the changes waiting per key.
type slotBatches struct {
	mu      sync.Mutex
	pending map[string][]*slotOp
	busy    map[string]bool
}

// changeSlots applies op with the other changes of its key waiting, and
// returns once it is done or ctx ends. One writer per key, in the
// background, writes for everyone queued until none waits: no caller's
// handler is held writing for the others (under a store outage, or on a
// busy key, that could last as long as ops keep coming), and a caller
// whose ctx ends does not fail the changes queued behind its own.
func (o *Orchestrator) changeSlots(ctx context.Context, op *slotOp) {
	key := op.key
	op.done = make(chan struct{})
	b := &o.slotBatches
	b.mu.Lock()
	if b.pending == nil {
		b.pending, b.busy = map[string][]*slotOp{}, map[string]bool{}
	}
	b.pending[key] = append(b.pending[key], op)
	if !b.busy[key] {
		b.busy[key] = true
		o.bg.Add(1)
		go o.slotWriter(key)
	}
	b.mu.Unlock()
	select {
	case <-op.done:
	case <-ctx.Done():
		// The writer finishes it; this caller stops waiting (its
		// message is redelivered and asks again: idempotent).
	}
}

// slotWriter writes key's queued changes, a batch at a time, until none
// waits. It runs under the orchestrator's run context (bg owns it).
func (o *Orchestrator) slotWriter(key string) {
	defer o.bg.Done()
	ctx := o.runCtx
	if ctx == nil {
		ctx = context.Background() // not started (internal tests)
	}
	b := &o.slotBatches
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

// maxHandOver bounds the waiters one compare-and-set hands slots to (more
// free slots: the next pass, in the background, hands the rest).
const maxHandOver = 16

// writeSlotOps applies ops to key's record in one compare-and-set, redone
// on the fresh record after a conflict: the frees first, then the
// hand-over of the free slots to the waiters, then the takes — a slot
// freed goes to the tasks that waited for one before any taking one now.
func (o *Orchestrator) writeSlotOps(ctx context.Context, key string, ops []*slotOp) {
	fail := func(err error) {
		for _, op := range ops {
			op.err = err
		}
	}
	var l task.KeyLimit
	limited, handOver := false, false
	for _, op := range ops {
		if op.limited {
			l, limited = op.l, true
		}
		handOver = handOver || op.kind == opFree || op.kind == opRevoke || op.kind == opSettle
	}
	handOver = handOver && limited
	var waiters []slotWaiter
	asked, read := 0, false
	var readErr error // reading the waiters failed: another pass, after a pause
	for range maxCASRetries {
		s, rev, err := o.readSlots(ctx, key)
		if err != nil {
			fail(err)
			return
		}
		if s.Holders == nil {
			s.Holders = map[string]time.Time{}
		}
		changed := false
		for _, op := range ops {
			if op.kind != opFree && op.kind != opRevoke {
				continue
			}
			_, held := s.Holders[op.t.ID]
			op.ok = held
			if !held {
				continue
			}
			inUse := len(s.Holders)
			delete(s.Holders, op.t.ID)
			switch {
			case op.kind == opRevoke:
			case op.limited && op.l.Adaptive:
				o.adapt(&s, op.l, op.t, inUse)
			default:
				s.Limit = 0
			}
			changed = true
		}
		var handed []slotWaiter
		room := 0
		if handOver {
			room = slotLimit(l, s) - len(s.Holders)
			if room > 0 && !read {
				asked, read = min(room, maxHandOver), true
				if waiters, err = o.slotWaiters(ctx, key, asked); err != nil {
					readErr = err
					waiters = nil
				}
			}
			for i := range waiters {
				w := &waiters[i]
				_, w.stale = s.Holders[w.id]
				if w.stale || room <= 0 {
					continue
				}
				s.Holders[w.id] = o.now()
				handed = append(handed, *w)
				room--
				changed = true
			}
		}
		for _, op := range ops {
			if op.kind != opTake {
				continue
			}
			_, op.ok = s.Holders[op.t.ID]
			if !op.ok && len(s.Holders) < slotLimit(op.l, s) {
				s.Holders[op.t.ID] = o.now()
				if op.l.Adaptive && s.Limit == 0 {
					s.Limit = float64(op.l.Concurrency)
				}
				op.ok, changed = true, true
			}
		}
		for _, op := range ops {
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
		if limited {
			o.noteSlots(key, s, l)
		}
		// More may wait than were read, or the read failed: another pass.
		again := handOver && room > 0 && (len(waiters) == asked || readErr != nil)
		if !again {
			readErr = nil
		}
		o.handedOver(key, waiters, handed, again, readErr)
		return
	}
	fail(fmt.Errorf("change the slots of key %s: %w", key, consume.ErrContended))
}

// slotWaiter is a task waiting for a slot, by its marker.
type slotWaiter struct {
	id    string
	seq   uint64 // its marker's
	stale bool   // it holds a slot already: the marker is left over
}

// slotWaiters reads up to n tasks waiting for a slot of key, in the order
// they get one: by priority — each pick a level by smooth weighted round
// robin with the executors' pull weights (swrr.PriorityWeights: the higher
// first most of the time, a lower one never starved while higher ones
// keep arriving) among the levels with waiters — and the oldest first
// within a level. Every level's waiters are no older than the oldest of
// all, so each level is read from there: one request when nobody waits,
// else one per waiter and per level found empty.
func (o *Orchestrator) slotWaiters(ctx context.Context, key string, n int) ([]slotWaiter, error) {
	first, err := o.held.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject.SlotWaitAnyPriority(key)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the waiters of key %s: %w", key, err)
	}
	var empty [task.Levels]bool
	var next [task.Levels]uint64
	for p := range next {
		next[p] = first.Sequence
	}
	var out []slotWaiter
	for len(out) < n {
		p := o.slotPickers.next(key, func(p int) bool { return !empty[p] })
		if p < 0 {
			break
		}
		m, err := o.held.GetMsg(ctx, next[p], jetstream.WithGetMsgSubject(subject.SlotWaitKey(p, key)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			empty[p] = true
			continue
		}
		if err != nil {
			return out, fmt.Errorf("read the waiters of key %s: %w", key, err)
		}
		next[p] = m.Sequence + 1
		if _, id, ok := subject.ParseSlotWait(m.Subject); ok && !o.slotWakes.handing(m.Sequence) {
			out = append(out, slotWaiter{id: id, seq: m.Sequence})
		}
	}
	return out, nil
}

// maxSlotPickers bounds the keys whose priority turns are remembered
// (beyond, they start afresh).
const maxSlotPickers = 10_000

// slotPickers are the priority turns of the concurrency keys' hand-overs.
type slotPickers struct {
	mu sync.Mutex
	m  map[string]*swrr.Picker
}

// next picks key's next priority level among the eligible ones (-1:
// none).
func (s *slotPickers) next(key string, eligible func(int) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.m[key]
	if !ok {
		if s.m == nil || len(s.m) >= maxSlotPickers {
			s.m = map[string]*swrr.Picker{}
		}
		w := swrr.PriorityWeights()
		p = swrr.New(w[:])
		s.m[key] = p
	}
	return p.Next(eligible)
}

// handedOver finishes a hand-over once written, in the background: the
// markers of the waiters handed a slot (and of those found holding one
// already) are deleted, and the waiters handed one dispatched. Until its
// marker is deleted, a waiter handed a slot is skipped by this
// orchestrator's next reads of the waiters (another orchestrator finds it
// holding a slot: stale). A crash before then leaves the markers (found
// stale later) and the waiters' watches, which dispatch them.
func (o *Orchestrator) handedOver(key string, waiters, handed []slotWaiter, again bool, readErr error) {
	var due []slotWake
	for _, w := range waiters {
		switch {
		case slices.ContainsFunc(handed, func(h slotWaiter) bool { return h.id == w.id }):
			due = append(due, slotWake{id: w.id, seq: w.seq})
		case w.stale:
			due = append(due, slotWake{seq: w.seq})
		}
	}
	if len(due) > 0 || again {
		o.wakeLater(key, due, again, readErr)
	}
}

// takeSlot takes a slot of t's concurrency key for t under l, or finds the
// one t holds (handed over, or taken before). It returns whether t holds
// one, and the slots in use and allowed when it does not.
func (o *Orchestrator) takeSlot(ctx context.Context, t task.Task, l task.KeyLimit) (ok bool, inUse, limit int, err error) {
	op := &slotOp{kind: opTake, key: t.ConcurrencyKey, t: t, l: l, limited: true}
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
// adapting the key's limit by t's outcome, and hands it over to the first
// waiter. Idempotent: a second call finds no slot.
func (o *Orchestrator) freeSlot(ctx context.Context, t task.Task) error {
	return o.giveBack(ctx, t, opFree)
}

// giveBack frees t's slot (kind opFree or opRevoke).
func (o *Orchestrator) giveBack(ctx context.Context, t task.Task, kind slotKind) error {
	l, limited := o.limits.match(t.ConcurrencyKey, "concurrency")
	op := &slotOp{kind: kind, key: t.ConcurrencyKey, t: t, l: l, limited: limited}
	o.changeSlots(ctx, op)
	if err := waitSlotOp(ctx, op); err != nil {
		return err
	}
	if !limited && op.ok {
		o.wakeLater(t.ConcurrencyKey, nil, true, nil) // the limit went: let the waiters go
	}
	return nil
}

// settleSlots hands key's free slots over to its waiters (a limit raised,
// a hand-over cut short), or, when the key has no limit any more, lets its
// waiters go. It reports whether more may be left to do.
func (o *Orchestrator) settleSlots(ctx context.Context, key string) (bool, error) {
	l, limited := o.limits.match(key, "concurrency")
	if !limited {
		const n = 256
		woken, err := o.wakeSlotWaiters(ctx, key, n)
		return woken == n, err
	}
	op := &slotOp{kind: opSettle, key: key, l: l, limited: true}
	o.changeSlots(ctx, op)
	return false, waitSlotOp(ctx, op)
}

// slotWakeWorkers bounds the tasks handed a slot of one key that are
// dispatched at once.
const slotWakeWorkers = 16

// wakeLater, in the background, deletes the markers of the waiters handed
// a slot of key (or found holding one) and dispatches those handed one,
// slotWakeWorkers at a time, and with settle then settles key's slots: one
// goroutine per key at a time (later calls add to its work). The report
// that freed a slot is applied without waiting, and a wake-up lost to a
// crash or an error is made good by the waiters' watches.
//
// readErr, with settle, says the hand-over that asked for it could not read
// the waiters (the store is out): the settling waits first, 100 ms doubling
// to slotSettlePauseMax while that goes on, so an outage does not turn the
// hand-over into a loop of failing reads.
func (o *Orchestrator) wakeLater(key string, due []slotWake, settle bool, readErr error) {
	w := &o.slotWakes
	w.mu.Lock()
	if w.due == nil {
		w.due, w.seqs = map[string]*slotWakeDue{}, map[uint64]bool{}
	}
	for _, d := range due {
		w.seqs[d.seq] = true
	}
	k, running := w.due[key]
	if !running {
		k = &slotWakeDue{}
		w.due[key] = k
	}
	k.wakes = append(k.wakes, due...)
	k.settle = k.settle || settle
	if settle && readErr != nil {
		k.readErr = readErr
	}
	w.mu.Unlock()
	if running {
		return
	}
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		ctx := o.runCtx
		var pause time.Duration // before the next settling, while the waiters cannot be read
		for {
			w.mu.Lock()
			due, settle, readErr := k.wakes, k.settle, k.readErr
			k.wakes, k.settle, k.readErr = nil, false, nil
			if (len(due) == 0 && !settle) || ctx.Err() != nil {
				delete(w.due, key)
				for _, d := range due {
					delete(w.seqs, d.seq)
				}
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			inTurn(len(due), slotWakeWorkers, func(i int) { o.wake(ctx, key, due[i]) })
			if settle && readErr != nil {
				if pause == 0 {
					o.log.Warn("cannot read the tasks waiting for a slot; handing the slot over again shortly", slog.String("key", key), slog.Any("error", readErr))
				}
				pause = min(max(2*pause, 100*time.Millisecond), slotSettlePauseMax)
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			} else if settle {
				pause = 0
			}
			if settle {
				more, err := o.settleSlots(ctx, key)
				if err != nil && ctx.Err() == nil {
					o.log.Warn("handing free slots to waiting tasks failed; their watches look again", slog.String("key", key), slog.Any("error", err))
				}
				if more {
					w.mu.Lock()
					k.settle = true
					w.mu.Unlock()
				}
			}
		}
	}()
}

// wake deletes the marker of d and dispatches d's task if it was handed a
// slot.
func (o *Orchestrator) wake(ctx context.Context, key string, d slotWake) {
	err := o.held.DeleteMsg(ctx, d.seq)
	if err != nil && !msgGone(err) && ctx.Err() == nil {
		o.log.Warn("cannot delete the marker of a task handed a slot; it is found stale later", slog.String("key", key), slog.String("task", d.id), slog.Any("error", err))
	}
	o.slotWakes.handed(d.seq)
	if d.id == "" {
		return
	}
	if err := o.wakeHanded(ctx, key, d.id); err != nil && ctx.Err() == nil {
		// It holds its slot: its watch, a second ahead, dispatches it.
		o.log.Warn("dispatching a task handed a slot failed; its watch does", slog.String("key", key), slog.String("task", d.id), slog.Any("error", err))
		_ = o.armTimer(ctx, subject.TimerEffects, timerFire{ID: d.id, At: o.now().Add(time.Second)})
	}
}

// slotWakes holds the wake-ups due per key while one runs, and the markers
// of waiters handed a slot whose deletion is due.
type slotWakes struct {
	mu   sync.Mutex
	due  map[string]*slotWakeDue
	seqs map[uint64]bool
}

// handing reports whether the marker at seq is one of a waiter handed a
// slot, to be deleted.
func (w *slotWakes) handing(seq uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seqs[seq]
}

// handed forgets a marker deleted.
func (w *slotWakes) handed(seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.seqs, seq)
}

// slotWakeDue is the work due for a key: markers to delete and tasks
// handed a slot, and a settle.
type slotWakeDue struct {
	wakes   []slotWake
	settle  bool
	readErr error // why the last hand-over could not read the waiters
}

// slotSettlePauseMax bounds the pause before settling a key's slots again
// while its waiters cannot be read.
const slotSettlePauseMax = 2 * time.Second

// slotWake is a marker to delete (seq) and, when id is set, the task
// handed a slot to dispatch.
type slotWake struct {
	id  string
	seq uint64
}

// wakeHanded dispatches a task handed a slot of key. A task that no longer
// waits (it ended, was cancelled or is gone) gives the slot back, which
// hands it to the next waiter; one running already keeps it.
func (o *Orchestrator) wakeHanded(ctx context.Context, key, id string) error {
	t, rev, err := o.store.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return o.giveBack(ctx, task.Task{Spec: task.Spec{ID: id, ConcurrencyKey: key}}, opRevoke)
	case err != nil:
		return err
	case t.State == task.Ready:
		return o.dispatch(ctx, t, rev)
	case t.State == task.Running:
		return nil
	}
	return o.giveBack(ctx, t, opRevoke)
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

// wakeSlotWaiters dispatches up to n tasks waiting for a slot of key whose
// limit went, the highest priority first, oldest first, and returns how
// many it dispatched.
func (o *Orchestrator) wakeSlotWaiters(ctx context.Context, key string, n int) (int, error) {
	woken := 0
	for woken < n {
		ws, err := o.slotWaiters(ctx, key, 1)
		if err != nil || len(ws) == 0 {
			return woken, err
		}
		// The marker goes first: deleting it is the wake-up's claim (of
		// two orchestrators waking the key, one deletes it).
		if err := o.held.DeleteMsg(ctx, ws[0].seq); err != nil {
			if msgGone(err) {
				continue
			}
			return woken, fmt.Errorf("wake waiters of key %s: %w", key, err)
		}
		waited, err := o.wakeSlotWaiter(ctx, ws[0].id)
		if err != nil {
			// Its marker is gone: have its watch look again soon
			// (a second, not the next ReconcileInterval).
			_ = o.armTimer(ctx, subject.TimerEffects, timerFire{ID: ws[0].id, At: o.now().Add(time.Second)})
			return woken, err
		}
		if waited {
			woken++
		}
	}
	return woken, nil
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
		// a hand-over cut short by a crash): hand the slots over. (A key
		// whose slots all freed has no record: its waiters' watches take
		// them.)
		if l, ok := o.limits.match(key, "concurrency"); ok {
			if s, _, err = o.readSlots(ctx, key); err != nil {
				return err
			}
			if slotLimit(l, s) > len(s.Holders) {
				if _, err := o.settleSlots(ctx, key); err != nil {
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
