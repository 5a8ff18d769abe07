package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Sweeps: the reconciler's look at dispatched tasks, one timer per batch.
//
// Every dispatch needs a durable trigger that looks at its task should the
// dispatch be lost (see reconcile.go). A watch timer per task costs two
// stored messages on the hot path (the schedule, and its cancellation when
// the task ends). Instead, dispatches going out together share one sweep
// timer, ax.timer.sweep.<batch id>, listing their tasks: a group commit,
// so a busy orchestrator stores one timer for hundreds of dispatches, and
// nothing cancels it. When it fires, each listed task is read (a leader
// read): an ended one is left alone, an unfinished one gets the look its
// watch would have given it (fireWatch), which arms a per-task watch if it
// is still fine — only tasks still unfinished after ReconcileInterval cost
// more than one read.
//
// A dispatch's handler returns only once its sweep entry is stored, so the
// message that caused the dispatch is acknowledged after it, as with a
// per-task watch.
//
// The orchestrator that stored a sweep skips, when it fires there, the
// tasks whose end it wrote itself (sweepMemo): a long run's sweeps then
// read only the tasks that did not end, or ended elsewhere.

// sweepMax bounds the tasks in one sweep timer (its message stays small).
const sweepMax = 500

// sweepEntry names one dispatched task in a sweep.
type sweepEntry struct {
	ID          string `json:"id"`
	ExecutionID string `json:"execution_id,omitempty"`
	// Owner is, for a task queued for its fairness key's turn instead of
	// dispatched, the orchestrator instance holding it (fair.go).
	Owner string `json:"owner,omitempty"`
}

// sweepBatcher groups sweep entries into timers.
type sweepBatcher struct {
	o    *Orchestrator
	kick chan struct{}

	mu      sync.Mutex
	pending []sweepReq
	stopped bool
}

type sweepReq struct {
	e sweepEntry
	// at is when the entry's look is due (zero: ReconcileInterval after
	// its timer is stored).
	at time.Time
	// slot, when set, is marked if the entry's execution ends here
	// (sweepMemo).
	slot *sweepSlot
	done chan error
}

func newSweepBatcher(o *Orchestrator) *sweepBatcher {
	return &sweepBatcher{o: o, kick: make(chan struct{}, 1)}
}

// add stores t's entry in a sweep timer (owner: the instance holding t
// queued for fairness, or "") and returns once it is stored. The look is
// due at (zero: ReconcileInterval from now). After the batcher stopped it
// arms a per-task watch instead.
func (b *sweepBatcher) add(ctx context.Context, t task.Task, owner string, at time.Time, slot *sweepSlot) error {
	done := make(chan error, 1)
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return b.o.armTimer(ctx, subject.TimerWatch, timerFire{ID: t.ID, At: b.o.watchTime(t), ExecutionID: t.ExecutionID, Owner: owner})
	}
	b.pending = append(b.pending, sweepReq{e: sweepEntry{ID: t.ID, ExecutionID: t.ExecutionID, Owner: owner}, at: at, slot: slot, done: done})
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run publishes pending entries, as many per timer as arrived while the
// previous timer was being stored, until ctx ends.
func (b *sweepBatcher) run(ctx context.Context) {
	defer b.o.bg.Done()
	for {
		select {
		case <-ctx.Done():
			b.mu.Lock()
			b.stopped = true
			left := b.pending
			b.pending = nil
			b.mu.Unlock()
			for _, r := range left {
				r.done <- errors.New("orchestrator stopping")
			}
			return
		case <-b.kick:
		}
		for {
			b.mu.Lock()
			n := min(len(b.pending), sweepMax)
			batch := b.pending[:n:n]
			b.pending = b.pending[n:]
			b.mu.Unlock()
			if n == 0 {
				break
			}
			b.flush(ctx, batch)
		}
	}
}

// sweepGroup is what one sweep timer holds: the entries of one owner due
// at about one time.
type sweepGroup struct {
	owner string
	at    time.Time
}

// flush stores batch's entries, one timer per owner and due time (rounded
// up to a sixth of ReconcileInterval, so that the looks of tasks queued
// about together share a timer), and answers each entry's caller. A timer
// of tasks queued for fairness names their owner (subject.OwnedSweep): if
// it goes, the others find them at once (takeOverOrphans).
func (b *sweepBatcher) flush(ctx context.Context, batch []sweepReq) {
	o := b.o
	now := o.now()
	round := max(o.cfg.ReconcileInterval/6, time.Millisecond)
	groups := map[sweepGroup][]sweepReq{}
	for _, r := range batch {
		g := sweepGroup{owner: r.e.Owner, at: now.Add(o.cfg.ReconcileInterval)}
		if !r.at.IsZero() {
			g.at = r.at
		}
		if t := g.at.Truncate(round); t.Before(g.at) {
			g.at = t.Add(round)
		}
		groups[g] = append(groups[g], r)
	}
	for g, reqs := range groups {
		entries := make([]sweepEntry, len(reqs))
		slots := make([]*sweepSlot, len(reqs))
		for i, r := range reqs {
			entries[i], slots[i] = r.e, r.slot
		}
		id := nuid.Next()
		if g.owner != "" {
			id = subject.OwnedSweep(g.owner, id)
		}
		err := o.armTimer(ctx, subject.TimerSweep, timerFire{ID: id, At: g.at, Tasks: entries})
		if err == nil {
			o.sweepMemo.stored(id, g.at, slots, now)
		}
		for _, r := range reqs {
			r.done <- err
		}
	}
}

// sweepWorkers bounds the concurrent reads of one sweep.
const sweepWorkers = 4

// fireSweep looks at each task of a sweep.
func (o *Orchestrator) fireSweep(ctx context.Context, f timerFire) error {
	// A failing look does not stop the others (the first error is
	// returned, and the sweep tried again): under faults one task's
	// failure must not hold the rest back. Several failing say JetStream
	// itself is out of reach: the rest are not tried this time.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var failed atomic.Int32
	var g errgroup.Group
	g.SetLimit(sweepWorkers)
	ended := o.sweepMemo.fired(f.ID, len(f.Tasks))
	for i, e := range f.Tasks {
		if ended != nil && ended[i] != nil && ended[i].ended.Load() {
			continue // its end was written here: the read would find it
		}
		g.Go(func() error {
			err := o.sweepLook(ctx, f, e)
			if err != nil && failed.Add(1) >= sweepFailures {
				stop()
			}
			return err
		})
	}
	return g.Wait()
}

// sweepFailures is how many of a sweep's looks (or of a gone owner's
// sweeps) may fail before the rest wait for the next try.
const sweepFailures = 4

// sweepLook is a sweep's look at one of its tasks.
func (o *Orchestrator) sweepLook(ctx context.Context, f timerFire, e sweepEntry) error {
	t, _, err := o.store.Get(ctx, e.ID)
	if err != nil {
		return ignoreNotFound(err)
	}
	if t.State.Terminal() {
		return nil // its own message ensured its effects
	}
	if err := o.fireWatch(ctx, timerFire{ID: e.ID, Kind: string(subject.TimerWatch), At: f.At, ExecutionID: e.ExecutionID, Owner: e.Owner}); err != nil {
		return fmt.Errorf("sweep: %s: %w", e.ID, err)
	}
	return nil
}
