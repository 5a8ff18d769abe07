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

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Fairness. A level's dispatches (one capability and priority) are
// delivered in the order they were stored, so a key that readied 100,000
// tasks would put them all ahead of another key's next one. While fewer
// than the level's window of dispatches wait to be delivered, a ready task
// with a fairness key is dispatched at once as any other. Beyond, it
// queues in this orchestrator, one queue per key, and a pump dispatches
// the queues in turn (deficit round robin: each key Weight tasks per turn,
// KeyLimit.Weight, default 1) as the level drains back below the window. A
// key's task then waits behind at most the window and a turn of the other
// keys, not behind another key's backlog.
//
// The window follows the level's drain: it holds about fairWait of what
// the executors take (the dispatches delivered per second, averaged over
// about a second), at least fairMinWindow and at most Config.FairWindow. A
// fixed window would hold a second of no-op tasks but minutes of slow
// ones. It doubles whenever the level ran dry while tasks were queued (the
// executors take more than it holds), so a level's start is not held back
// by a rate not yet measured.
//
// A queued task is ready (its record unchanged: to a user it waits for an
// executor as if it were in AX_READY). Its durable trace is the sweep
// entry every dispatch has, which names this orchestrator's instance (the
// owner) instead of a dispatch: a queued task costs no stored message of
// its own. When the sweep — or the watch it arms — looks at a ready task
// its owner held, it asks the owner (its ax.fairowner subject) whether it
// still does; with no responders (the orchestrator is gone: a new instance
// at every start) the task is taken over: dispatched again under a new
// execution, so that a copy the dead orchestrator may have published
// after all is dropped by the executor that gets it (fairTakeOver). Stop
// dispatches what is queued.

const (
	// fairTick is how often the pump counts the busy levels and refills
	// them.
	fairTick = 10 * time.Millisecond
	// fairMaxTasks and fairMaxBytes bound what one orchestrator queues;
	// beyond, tasks are dispatched at once (fairness degrades, nothing
	// waits longer).
	fairMaxTasks = 200_000
	fairMaxBytes = 256 << 20
	// fairEntryOverhead is a queued task's memory besides its payload.
	fairEntryOverhead = 1024
	// fairWait is the executors' work a level's window holds: about how
	// long a key's task waits behind the dispatches of other keys.
	fairWait = time.Second
	// fairMinWindow is the smallest window (or Config.FairWindow if
	// smaller): enough that an executor's next pull finds work.
	fairMinWindow = 4
	// fairRateTau is the time constant of the drain rate's moving average.
	fairRateTau = time.Second
)

// fairQueue is an orchestrator's queues of ready tasks by level and key.
type fairQueue struct {
	o      *Orchestrator
	window int

	mu     sync.Mutex
	levels map[string]*fairLevel
	ids    map[string]*fairEntry
	bytes  int64
	closed bool
	warned time.Time
}

type fairLevel struct {
	capability string
	priority   int
	waiting    int // dispatches waiting for delivery when last counted
	sent       int // dispatched since
	queued     int
	counted    time.Time // when last chosen to be counted
	keys       map[string]*fairKey
	ring       []string // keys with queued tasks, in turn order

	window    int       // dispatches that may wait for delivery
	rate      float64   // dispatches delivered per second, moving average
	rateAt    time.Time // when the deliveries were counted
	delivered uint64    // the consumer's deliveries then
}

// adapt sets the level's window from a count at now of its waiting
// dispatches and of its consumer's deliveries: those since the last count
// (by any orchestrator, of any key) update the drain rate, and the window
// holds fairWait of it, between fairMinWindow and maxWindow. The caller
// holds the queue's lock.
func (lv *fairLevel) adapt(waiting int, delivered uint64, now time.Time, maxWindow int) {
	if dt := now.Sub(lv.rateAt).Seconds(); !lv.rateAt.IsZero() && dt > 0 && delivered >= lv.delivered {
		a := 1 - math.Exp(-dt/fairRateTau.Seconds())
		lv.rate += a * (float64(delivered-lv.delivered)/dt - lv.rate)
	}
	lv.rateAt, lv.delivered = now, delivered
	w := int(math.Ceil(lv.rate * fairWait.Seconds()))
	if waiting == 0 && lv.queued > 0 {
		// Ran dry with tasks held back: the executors take more than
		// the window holds, faster than the average shows yet.
		w = max(w, 2*lv.window)
	}
	lv.window = min(max(w, fairMinWindow), maxWindow)
}

type fairKey struct {
	entries []*fairEntry
	credit  int // tasks left in the key's current turn
}

type fairEntry struct {
	t    task.Task
	rev  uint64
	size int64
}

// fairSendWorkers bounds the dispatches a pump publishes at once.
const fairSendWorkers = 32

func newFairQueue(o *Orchestrator, window int) *fairQueue {
	return &fairQueue{o: o, window: window, levels: map[string]*fairLevel{}, ids: map[string]*fairEntry{}}
}

// queue decides whether t waits for its turn (true: queued here) or is
// dispatched at once. A task queued already is updated in place. The
// caller stores the queued task's sweep entry, naming this orchestrator.
func (q *fairQueue) queue(t task.Task, rev uint64) bool {
	if !q.wait(t, rev) {
		return false
	}
	return q.add(t, rev)
}

// wait decides whether t must wait for its turn; a task queued already is
// updated in place (and waits).
func (q *fairQueue) wait(t task.Task, rev uint64) bool {
	level := subject.Ready(t.Capability, t.PriorityLevel())
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.ids[t.ID]; ok {
		e.t, e.rev = t, rev
		return true
	}
	lv := q.levels[level]
	if lv == nil {
		lv = &fairLevel{capability: t.Capability, priority: t.PriorityLevel(), keys: map[string]*fairKey{},
			window: min(fairMinWindow, q.window)}
		q.levels[level] = lv
	}
	size := int64(len(t.Payload)) + fairEntryOverhead
	switch {
	case q.closed || (lv.queued == 0 && lv.waiting+lv.sent < lv.window):
	case len(q.ids) >= fairMaxTasks || q.bytes+size > fairMaxBytes:
		if time.Since(q.warned) > time.Minute {
			q.warned = time.Now()
			q.o.log.Warn("the fairness queues are full: tasks are dispatched at once, in arrival order", slog.Int("queued", len(q.ids)), slog.Int64("bytes", q.bytes))
		}
	default:
		return true
	}
	lv.sent++
	return false
}

// add queues t; false when the queue closed meanwhile (the caller
// dispatches it).
func (q *fairQueue) add(t task.Task, rev uint64) bool {
	level := subject.Ready(t.Capability, t.PriorityLevel())
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.ids[t.ID]; ok {
		e.t, e.rev = t, rev
		return true
	}
	lv := q.levels[level]
	if q.closed || lv == nil {
		if lv != nil {
			lv.sent++
		}
		return false
	}
	e := &fairEntry{t: t, rev: rev, size: int64(len(t.Payload)) + fairEntryOverhead}
	q.ids[t.ID] = e
	q.bytes += e.size
	k := lv.keys[t.FairnessKey]
	if k == nil {
		k = &fairKey{}
		lv.keys[t.FairnessKey] = k
		lv.ring = append(lv.ring, t.FairnessKey)
	}
	k.entries = append(k.entries, e)
	lv.queued++
	return true
}

// has reports whether a task is queued here under its execution
// executionID ("": under any). An entry of an earlier execution is stale:
// another orchestrator took the task over (it took this one for gone, in
// a reconnection) and wrote a new execution, which this queue does not
// hold — the entry's dispatch would find the task moved on and drop it. A
// look that took the stale entry for the task's (and left the task to
// this queue) left it undispatched until its next look, a minute later
// (a chaos run).
func (q *fairQueue) has(id, executionID string) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.ids[id]
	return ok && (executionID == "" || e.t.ExecutionID == executionID)
}

// queued returns how many tasks are queued here.
func (q *fairQueue) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ids)
}

// pop takes the next task of lv in turn; the caller holds q.mu.
func (q *fairQueue) pop(lv *fairLevel) *fairEntry {
	if len(lv.ring) == 0 {
		return nil
	}
	key := lv.ring[0]
	k := lv.keys[key]
	if k.credit <= 0 {
		k.credit = q.weight(key)
	}
	e := k.entries[0]
	k.entries[0] = nil
	k.entries = k.entries[1:]
	k.credit--
	lv.queued--
	switch {
	case len(k.entries) == 0:
		delete(lv.keys, key)
		lv.ring = lv.ring[1:]
	case k.credit == 0:
		lv.ring = append(lv.ring[1:], key)
	}
	delete(q.ids, e.t.ID)
	q.bytes -= e.size
	return e
}

// weight is a fairness key's tasks per turn.
func (q *fairQueue) weight(key string) int {
	if l, ok := q.o.limits.match(key, "weight"); ok {
		return l.Weight
	}
	return 1
}

// run is the pump: every fairTick it counts the levels that dispatched or
// queued since the last count and dispatches, in turn, as many queued
// tasks as the window has room for. At ctx's end it dispatches what is
// queued and closes the queue.
func (q *fairQueue) run(ctx context.Context) {
	defer q.o.bg.Done()
	tick := time.NewTicker(fairTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			q.drain()
			return
		case <-tick.C:
		}
		q.o.metrics.FairQueued(q.queued())
		for _, lv := range q.busy() {
			q.refill(ctx, lv)
		}
	}
}

// fairRecount is how often a level that queues nothing is counted while
// it dispatches fewer than half its window between counts.
const fairRecount = 250 * time.Millisecond

// busy lists the levels to count: every tick those that queue tasks, less
// often those that dispatch without queueing. Idle ones are forgotten.
func (q *fairQueue) busy() []*fairLevel {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*fairLevel
	now := time.Now()
	for name, lv := range q.levels {
		switch {
		case lv.queued == 0 && lv.sent == 0:
			delete(q.levels, name)
		case lv.queued > 0, lv.sent >= lv.window/2, now.Sub(lv.counted) >= fairRecount:
			lv.counted = now
			out = append(out, lv)
		}
	}
	return out
}

// refill counts a level's waiting dispatches, adapts its window and
// dispatches its queued tasks in turn into the room left below it.
func (q *fairQueue) refill(ctx context.Context, lv *fairLevel) {
	n, delivered, err := q.o.levelDrain(ctx, lv.capability, lv.priority)
	if err != nil {
		return // counted again at the next tick
	}
	waiting := int(min(n, math.MaxInt32))
	q.mu.Lock()
	lv.adapt(waiting, delivered, time.Now(), q.window)
	lv.waiting, lv.sent = waiting, 0
	var out []*fairEntry
	for room := lv.window - waiting; room > 0; room-- {
		e := q.pop(lv)
		if e == nil {
			break
		}
		out = append(out, e)
	}
	lv.sent = len(out)
	q.mu.Unlock()
	q.send(ctx, out)
}

// send dispatches popped tasks, fairSendWorkers at a time; one whose
// dispatch fails goes back to its queue.
func (q *fairQueue) send(ctx context.Context, out []*fairEntry) {
	inTurn(len(out), fairSendWorkers, func(i int) {
		e := out[i]
		err := q.o.publishDispatch(ctx, e.t, e.rev, false)
		q.o.log.Debug("dispatched from the fairness queue", slog.String("task_id", e.t.ID), slog.Any("error", err))
		if err != nil && ctx.Err() == nil {
			q.o.log.Warn("a task queued for fairness was not dispatched; queued again", slog.String("task_id", e.t.ID), slog.Any("error", err))
			if !q.add(e.t, e.rev) {
				q.o.log.Warn("a task queued for fairness was not dispatched at the stop; the reconciler dispatches it", slog.String("task_id", e.t.ID))
			}
		}
	})
}

// serveOwner answers, until ctx ends, whether this orchestrator still
// holds a task queued (FairOwner): {"queued": true|false}.
func (q *fairQueue) serveOwner(ctx context.Context) error {
	sub, err := q.o.nc.Subscribe(subject.FairOwner(q.o.instance), func(m *nats.Msg) {
		// "<id> <execution id>", or an id alone (an orchestrator of
		// an earlier version asking): ids and execution ids hold no space.
		id, executionID, _ := strings.Cut(string(m.Data), " ")
		data, _ := json.Marshal(fairOwnerReply{Queued: q.has(id, executionID)})
		_ = m.Respond(data)
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", subject.FairOwner(q.o.instance), err)
	}
	q.o.bg.Add(1)
	go func() {
		defer q.o.bg.Done()
		<-ctx.Done()
		_ = sub.Unsubscribe()
	}()
	return nil
}

type fairOwnerReply struct {
	Queued bool `json:"queued"`
}

// fairTakeOver is the look at a ready task that the orchestrator instance
// owner held queued for its fairness key's turn (its sweep entry or watch
// says so), when this orchestrator does not hold it: taken true when it
// was handled here (left to its live owner, with a watch naming it, or
// taken over from a dead one), false for the usual look (its owner
// dispatched it).
func (o *Orchestrator) fairTakeOver(ctx context.Context, t task.Task, owner string) (taken bool, err error) {
	if owner == o.instance || t.DispatchRevision != 0 {
		return false, nil // not queued any more: dispatched
	}
	// An owner the orphan scan found gone (orphans.go) is not asked; one
	// with no responders now is taken for gone for this task only (it may
	// be reconnecting: the scan decides for the rest of its queue).
	gone := o.gone.has(owner)
	var reply *nats.Msg
	if !gone {
		reply, err = o.nc.RequestWithContext(ctx, subject.FairOwner(owner), []byte(t.ID+" "+t.ExecutionID))
		gone = errors.Is(err, nats.ErrNoResponders)
	}
	switch {
	case gone:
		// Its owner is gone: dispatch it again under a new execution
		// (of several orchestrators looking, one does).
		moved := false
		_, err := o.transition(ctx, t.ID, func(cur task.Task, rev uint64) (*task.Task, string, error) {
			d := lifecycle.Redispatch(&cur, t.ExecutionID, "reconciler: the orchestrator that queued it for its fairness key's turn is gone; readied again under a new execution (it had not been dispatched)", o.env())
			moved = d.Verdict == lifecycle.Apply
			return o.decided(ctx, cur, rev, d)
		})
		if moved && err == nil {
			o.repaired(repairFairLost, t)
		}
		return true, ignoreNotFound(err)
	case err != nil:
		return false, fmt.Errorf("ask the orchestrator that queued %s: %w", t.ID, err)
	}
	var r fairOwnerReply
	_ = json.Unmarshal(reply.Data, &r)
	o.log.Debug("asked the owner of a task queued for fairness", slog.String("task_id", t.ID), slog.String("owner", owner), slog.Bool("queued", r.Queued))
	if r.Queued {
		return true, o.armFairWatch(ctx, t, owner)
	}
	return false, nil
}

// armFairWatch arms the next look at a ready task that owner holds queued
// for its fairness key's turn, which asks the owner again: an entry in a
// sweep naming owner, so that the task is found at once should owner go.
func (o *Orchestrator) armFairWatch(ctx context.Context, t task.Task, owner string) error {
	return o.sweeps.add(ctx, t, owner, o.watchTime(t), nil)
}

// drain dispatches every queued task at the orchestrator's stop and
// closes the queue: later tasks are dispatched at once.
func (q *fairQueue) drain() {
	q.mu.Lock()
	q.closed = true
	var out []*fairEntry
	for _, lv := range q.levels {
		for e := q.pop(lv); e != nil; e = q.pop(lv) {
			out = append(out, e)
		}
	}
	q.mu.Unlock()
	if len(out) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q.send(ctx, out)
	q.o.log.Info("dispatched the tasks queued for fairness before stopping", slog.Int("tasks", len(out)))
}
