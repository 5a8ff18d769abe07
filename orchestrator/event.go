package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/leaderget"
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
//
// Cancel events (task.Spec.CancelOn) use the same markers and the same
// order. When the orchestrator accepts such a task it records the last
// sequence of AX_EVENTS (Task.CancelOnAfter, a leader's stream info) in
// its first record; its effect WatchCancel (in every state but running:
// at its creation, then at each change and reconciler look) stores its
// marker for the cancel_on subject, then reads the subject's latest event:
// one with a greater sequence was stored after the task was accepted and
// cancels it, through the operator's cancel path. An event stored before
// acceptance never counts, however long AX_EVENTS keeps it; one stored
// between acceptance and the marker is found by the read; one stored
// after the marker is delivered to it. One marker serves a task that
// waits for and is cancelled by the same subject; each delivery reads the
// task's record and does what its spec says for that subject.
//
// Bounds. One message handles at most eventsPerMessage markers: an
// event's delivery that finds more arms a continuation (an events timer
// firing at once, ax.timer.events.<event subject>.<event sequence>) that
// goes on from the next marker, and so on: every waiter is matched within
// seconds, each message doing bounded work. A subject has at most
// Limits.MaxEventWaitersPerSubject markers: the registration that would
// pass the bound fails its task instead (tooManyWaiters).

// eventWaitersPerMessage is the default number of markers one message (an
// event's delivery, or its continuation) handles.
const eventWaitersPerMessage = 1000

// matchEvent is the effect MatchEvent of an event task t at rev.
func (o *Orchestrator) matchEvent(ctx context.Context, t task.Task, rev uint64) error {
	es := t.WaitFor.EventSubject()
	switch reg, err := o.registerEventMarker(ctx, t, es); {
	case err != nil, reg == markerEnded:
		return err
	case reg == markerOver:
		return o.tooManyWaiters(ctx, t, es)
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

// watchCancel is the effect WatchCancel of an unfinished task t with a
// cancel_on: its marker, then a look for an event stored since it was
// accepted. ended says the task ended here.
func (o *Orchestrator) watchCancel(ctx context.Context, t task.Task) (ended bool, err error) {
	es := t.CancelOn.EventSubject()
	switch reg, err := o.registerEventMarker(ctx, t, es); {
	case err != nil:
		return false, err
	case reg == markerEnded:
		return true, nil
	case reg == markerOver:
		return true, o.tooManyWaiters(ctx, t, es)
	}
	m, err := o.events.GetLastMsgForSubject(ctx, subject.Event(es))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil // not yet: the event's delivery finds the marker
	}
	if err != nil {
		return false, fmt.Errorf("look for the cancel event %s of %s: %w", es, t.ID, err)
	}
	return o.cancelByEvent(ctx, t, es, m.Sequence)
}

// cancelByEvent cancels t, as an operator's cancel does, for the event
// seq on its cancel_on subject es, if that event was stored after t was
// accepted and t has not finished. ended says the task has ended.
func (o *Orchestrator) cancelByEvent(ctx context.Context, t task.Task, es string, seq uint64) (ended bool, err error) {
	if seq <= t.CancelOnAfter {
		return false, nil // stored before the task was accepted
	}
	_, err = o.cancel(ctx, t.ID, fmt.Sprintf("cancelled by event %s (sequence %d)", es, seq), "")
	if errors.Is(err, errCommand) {
		return true, nil // ended meanwhile (its markers went with its end), or forgotten
	}
	return err == nil, err
}

// eventAcceptance is the last sequence of AX_EVENTS, read from its leader
// when a task with a cancel_on is accepted: only later events cancel it.
func (o *Orchestrator) eventAcceptance(ctx context.Context) (uint64, error) {
	info, err := o.events.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the last event sequence: %w", err)
	}
	return info.State.LastSeq, nil
}

// markerOutcome is what registerEventMarker did.
type markerOutcome uint8

const (
	// markerStored: the marker is there (stored now, or before).
	markerStored markerOutcome = iota
	// markerOver: stored, and the subject has more markers than
	// Limits.MaxEventWaitersPerSubject: the task must fail.
	markerOver
	// markerEnded: stored, but the task ended meanwhile (its end's
	// removal of its markers ran first): the marker was removed again.
	markerEnded
)

// registerEventMarker stores t's marker for the events of es, once: a
// marker stored before (a replay, a look again, a task waiting for and
// cancelled by es) is left as it is. A new marker is counted in es's
// counter (a hint: past Limits.MaxEventWaitersPerSubject the markers are
// counted), and the task is read again: one that ended while its marker
// was being stored (a short handler's report applied before its
// creation's effects ran) has its markers removed, so none is left
// behind.
func (o *Orchestrator) registerEventMarker(ctx context.Context, t task.Task, es string) (markerOutcome, error) {
	subj := subject.EventWait(es, t.ID)
	_, err := o.js.Publish(ctx, subj, nil, jetstream.WithExpectLastSequenceForSubject(0, subj))
	if store.IsConflict(err) {
		return markerStored, nil // registered before
	}
	if err != nil {
		return markerStored, fmt.Errorf("register the wait of %s for %s: %w", t.ID, es, err)
	}
	n, err := o.addEventWaiters(ctx, es, 1)
	if err != nil {
		return markerStored, err
	}
	cur, _, err := o.store.Get(ctx, t.ID)
	if err != nil {
		return markerStored, err
	}
	if cur.State.Terminal() {
		return markerEnded, o.forgetEventWait(ctx, cur)
	}
	bound := o.cfg.Limits.MaxEventWaitersPerSubject
	if bound < 0 || n <= int64(bound) {
		return markerStored, nil
	}
	exact, err := o.countEventWaiters(ctx, es)
	if err != nil {
		return markerStored, err
	}
	if exact != n {
		// Put the hint right (a crash between a marker's removal and its
		// count's, say).
		if _, err := o.addEventWaiters(ctx, es, exact-n); err != nil {
			return markerStored, err
		}
	}
	if exact > int64(bound) {
		return markerOver, nil
	}
	return markerStored, nil
}

// tooManyWaiters fails an unfinished task whose registration for es
// passed Limits.MaxEventWaitersPerSubject; its end removes its markers. A
// handler already running is stopped (its execution revoked).
func (o *Orchestrator) tooManyWaiters(ctx context.Context, t task.Task, es string) error {
	why := fmt.Sprintf("more than %d tasks wait for events on %s (ax orchestrator --max-event-waiters-per-subject)", o.cfg.Limits.MaxEventWaitersPerSubject, es)
	o.log.Warn("event task refused: too many waiters on its subject", slog.String("task_id", t.ID), slog.String("event", es))
	now, err := o.transition(ctx, t.ID, func(cur task.Task, rev uint64) (*task.Task, string, error) {
		if cur.State.Terminal() {
			return nil, "", nil
		}
		next := o.finished(cur, task.Failed)
		next.AddError(task.AttemptError{Attempt: cur.Attempt, ExecutionID: cur.ExecutionID, Error: why, At: o.now()})
		return next, why, nil
	})
	if err != nil {
		return ignoreNotFound(err)
	}
	if now.State == task.Failed && now.Reason == why {
		return o.revoke(ctx, now)
	}
	if now.State.Terminal() {
		return o.forgetEventWait(ctx, now)
	}
	return nil
}

// addEventWaiters adds delta to es's waiter counter and returns its value.
func (o *Orchestrator) addEventWaiters(ctx context.Context, es string, delta int64) (int64, error) {
	msg := nats.NewMsg(subject.EventWaitCount(es))
	msg.Header.Set("Nats-Incr", strconv.FormatInt(delta, 10))
	ack, err := o.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("count the waiters of %s: %w", es, err)
	}
	n, err := strconv.ParseInt(ack.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("count the waiters of %s: counter value %q: %w", es, ack.Value, err)
	}
	return n, nil
}

// countEventWaiters counts es's markers, from one read of AX_HELD's
// subject index (stream info with a subject filter, paged, answered by
// the stream leader): exact, at a cost that grows with the markers.
func (o *Orchestrator) countEventWaiters(ctx context.Context, es string) (int64, error) {
	info, err := o.held.Info(ctx, jetstream.WithSubjectFilter(subject.EventWaiters(es)))
	if err != nil {
		return 0, fmt.Errorf("count the waiters of %s: %w", es, err)
	}
	return int64(len(info.State.Subjects)), nil
}

// forgetEventWait removes an ended task's markers (of its wait_for and
// its cancel_on), each one's removal counted off its subject's counter.
func (o *Orchestrator) forgetEventWait(ctx context.Context, t task.Task) error {
	var subjects [2]string
	n := 0
	if t.WaitFor != nil && t.EventWaitSince != nil {
		subjects[n] = t.WaitFor.EventSubject()
		n++
	}
	if t.CancelOn != nil && (n == 0 || subjects[0] != t.CancelOn.EventSubject()) {
		subjects[n] = t.CancelOn.EventSubject()
		n++
	}
	for _, es := range subjects[:n] {
		purged, err := o.purgeCounted(ctx, subject.StreamHeld, subject.EventWait(es, t.ID))
		if err != nil {
			return fmt.Errorf("remove the event wait marker of %s: %w", t.ID, err)
		}
		if purged == 0 {
			continue // removed before (a replay), or never stored
		}
		left, err := o.addEventWaiters(ctx, es, -int64(purged))
		if err != nil {
			return err
		}
		if left <= 0 {
			// The last waiter of es: its counter goes, so that subjects
			// used once leave nothing behind. A registration racing with
			// this loses its count (a count short of the markers only
			// delays the bound).
			if _, err := o.purgeCounted(ctx, subject.StreamCounts, subject.EventWaitCount(es)); err != nil {
				return fmt.Errorf("remove the waiter count of %s: %w", es, err)
			}
		}
	}
	return nil
}

// purgeCounted purges subj from stream and returns how many messages went
// (jetstream.Stream.Purge does not say).
func (o *Orchestrator) purgeCounted(ctx context.Context, stream, subj string) (uint64, error) {
	req, _ := json.Marshal(struct {
		Filter string `json:"filter"`
	}{subj})
	msg, err := o.nc.RequestWithContext(ctx, leaderget.APIPrefix(o.js.Options())+"STREAM.PURGE."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("purge %s from %s: %w", subj, stream, err)
	}
	var resp struct {
		Error  *jetstream.APIError `json:"error,omitempty"`
		Purged uint64              `json:"purged"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge %s from %s: %w", subj, stream, err)
	}
	if resp.Error != nil {
		return 0, fmt.Errorf("purge %s from %s: %w", subj, stream, resp.Error)
	}
	return resp.Purged, nil
}

// handleEvent matches an event stored in AX_EVENTS with the tasks waiting
// for it or cancelled by it.
func (o *Orchestrator) handleEvent(ctx context.Context, msg jetstream.Msg) error {
	es, ok := subject.ParseEvent(msg.Subject())
	if !ok || !task.ValidEventSubject(es) {
		o.log.Warn("ignoring an event on a subject no task can wait for", slog.String("subject", msg.Subject()))
		return nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("event %s: %w", es, err)
	}
	return o.deliverEvent(ctx, es, md.Sequence.Stream, 1)
}

// fireEvents continues the delivery of an event (an events timer).
func (o *Orchestrator) fireEvents(ctx context.Context, f timerFire) error {
	if !task.ValidEventSubject(f.Event) || f.EventSeq == 0 {
		o.log.Warn("dropping a malformed event continuation", slog.String("id", f.ID))
		return nil
	}
	return o.deliverEvent(ctx, f.Event, f.EventSeq, f.From)
}

// deliverEvent matches the event seq on es with the tasks whose markers
// are stored at or after the AX_HELD sequence from, in their order: at
// most eventsPerMessage of them. When that many were handled it arms the
// continuation from the next marker on before it returns (its message is
// acknowledged after), so the rest follow at once, each message doing
// bounded work.
func (o *Orchestrator) deliverEvent(ctx context.Context, es string, seq, from uint64) error {
	filter := subject.EventWaiters(es)
	for range o.cfg.eventsPerMessage {
		m, err := o.held.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list the waiters of event %s: %w", es, err)
		}
		from = m.Sequence + 1
		id, ok := subject.EventWaitID(m.Subject)
		if !ok {
			continue
		}
		if err := o.matchWaiter(ctx, id, es, seq); err != nil {
			return err
		}
	}
	o.log.Info("event delivery continues in a message of its own", slog.String("event", es),
		slog.Uint64("event_seq", seq), slog.Uint64("from", from))
	return o.armTimer(ctx, subject.TimerEvents, timerFire{ID: es + "." + strconv.FormatUint(seq, 10),
		Event: es, EventSeq: seq, From: from, At: o.now()})
}

// matchWaiter runs what the event seq on es does to the task id whose
// marker its delivery found: a task waiting for es looks for its event
// (and finds it); a task cancelled by es is cancelled, if the event came
// after its acceptance; a task that ended has its markers removed.
func (o *Orchestrator) matchWaiter(ctx context.Context, id, es string, seq uint64) error {
	t, rev, err := o.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // forgotten
	}
	if err != nil {
		return err
	}
	if t.State.Terminal() {
		return o.forgetEventWait(ctx, t)
	}
	if t.WaitFor != nil && t.WaitFor.EventSubject() == es && lifecycle.AwaitingEvent(&t) {
		if err := o.matchEvent(ctx, t, rev); err != nil {
			return err
		}
	}
	if t.CancelOn != nil && t.CancelOn.EventSubject() == es {
		_, err := o.cancelByEvent(ctx, t, es, seq)
		return err
	}
	return nil
}
