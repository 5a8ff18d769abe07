package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Event tasks (task.Spec.WaitFor). A task that would become ready
// registers its wait instead (lifecycle: waiting, EventWaitSince set) and
// its effect MatchEvent, in this order: stores its marker
// ax.eventwait.<event subject>.<id> in AX_HELD, arms its deadline timer
// (its wait_for timeout), then reads the latest event of its subject in
// AX_EVENTS (a leader read) and, if there is one, succeeds with it.
//
// An event is stored in AX_EVENTS before the orchestrators' consumer
// (ConsumerEvents) delivers it; its handler then lists the markers of its
// subject and matches each waiter. Either the marker was stored before
// that listing (the handler finds the waiter) or the event was stored
// before the marker and so before the registration's read (which finds
// the event): no event is lost between the two. A read that may be stale
// (a leader change) only delays a match: the waiting task's watch looks
// again and runs MatchEvent again.

// maxEventWaitersPerDelivery bounds the waiters one delivery of an event
// matches; the rest are matched by their own watches.
const maxEventWaitersPerDelivery = 1000

// matchEvent is the effect MatchEvent of an event task t at rev.
func (o *Orchestrator) matchEvent(ctx context.Context, t task.Task, rev uint64) error {
	es := t.WaitFor.EventSubject()
	if _, err := o.js.Publish(ctx, subject.EventWait(es, t.ID), nil); err != nil {
		return fmt.Errorf("register the wait of %s for %s: %w", t.ID, es, err)
	}
	if err := o.armDeadline(ctx, t); err != nil {
		return err
	}
	m, err := o.events.GetLastMsgForSubject(ctx, subject.Event(es))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // not yet: the event's delivery finds the marker
	}
	if err != nil {
		return fmt.Errorf("look for the event %s of %s: %w", es, t.ID, err)
	}
	now, err := o.transitionFrom(ctx, t, rev, func(cur task.Task) (*task.Task, string) {
		d := lifecycle.EventArrived(&cur, m.Sequence, m.Data, o.env())
		if d.Verdict != lifecycle.Apply {
			return nil, ""
		}
		return &d.Next, d.Reason
	})
	if err == nil && now.State.Terminal() {
		// Ended by someone else meanwhile: the marker stored above goes.
		return o.forgetEventWait(ctx, now)
	}
	return err
}

// forgetEventWait removes an ended event task's marker.
func (o *Orchestrator) forgetEventWait(ctx context.Context, t task.Task) error {
	if t.WaitFor == nil || t.EventWaitSince == nil {
		return nil
	}
	err := o.held.Purge(ctx, jetstream.WithPurgeSubject(subject.EventWait(t.WaitFor.EventSubject(), t.ID)))
	if err != nil {
		return fmt.Errorf("remove the event wait marker of %s: %w", t.ID, err)
	}
	return nil
}

// handleEvent matches an event stored in AX_EVENTS with the tasks waiting
// for it: at most maxEventWaitersPerDelivery of them, their markers in the
// order they were stored.
func (o *Orchestrator) handleEvent(ctx context.Context, msg jetstream.Msg) error {
	es, ok := subject.ParseEvent(msg.Subject())
	if !ok || !task.ValidEventSubject(es) {
		o.log.Warn("ignoring an event on a subject no task can wait for", slog.String("subject", msg.Subject()))
		return nil
	}
	filter := subject.EventWaiters(es)
	seq := uint64(1)
	for range maxEventWaitersPerDelivery {
		m, err := o.held.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list the waiters of event %s: %w", es, err)
		}
		seq = m.Sequence + 1
		id, ok := subject.EventWaitID(m.Subject)
		if !ok {
			continue
		}
		if err := o.matchWaiter(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// matchWaiter runs the effects of a task whose marker an event's
// delivery found: a task still waiting for its event looks for it (and
// finds it); a task that ended has its marker removed.
func (o *Orchestrator) matchWaiter(ctx context.Context, id string) error {
	t, rev, err := o.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // forgotten
	}
	if err != nil {
		return err
	}
	if lifecycle.AwaitingEvent(&t) {
		return o.matchEvent(ctx, t, rev)
	}
	if t.State.Terminal() {
		return o.forgetEventWait(ctx, t)
	}
	return nil
}
