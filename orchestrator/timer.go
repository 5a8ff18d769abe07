package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// timerFire is the body of a timer's message (ax.timer.<kind>.<id>, and the
// copy delivered on ax.fire.<kind>.<id>).
type timerFire struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Attempt     int       `json:"attempt,omitempty"`
	ExecutionID string    `json:"execution_id,omitempty"`
	At          time.Time `json:"at"`
	// After is where a cascade continues: the last dependent done.
	After string `json:"after,omitempty"`
	// Revision is the revision of the ended record a cascade continues
	// (0 in cascades armed by earlier versions).
	Revision uint64 `json:"revision,omitempty"`
	// Reopen marks a cascade that re-opens the dependents the task's
	// failure cancelled: it says which re-drive asked (see reopen.go).
	Reopen string `json:"reopen,omitempty"`
	// Tasks are a sweep's dispatched tasks (ID is then the batch's id).
	Tasks []sweepEntry `json:"tasks,omitempty"`
	// Mark is, in a ready task's watch, the last stream sequence of its
	// level at the previous look, for its dispatch ExecutionID: once the
	// level's consumer delivered past it, a dispatch still unclaimed is
	// lost (see dispatchPresent).
	Mark uint64 `json:"mark,omitempty"`
	// Owner is, in a watch of a ready task queued for its fairness key's
	// turn, the orchestrator instance holding it (with ExecutionID).
	Owner string `json:"owner,omitempty"`
	// Event, EventSeq and From are an event delivery's continuation (an
	// events timer): the event subject, the event's AX_EVENTS sequence
	// and the AX_HELD sequence of the next marker to handle.
	Event    string `json:"event,omitempty"`
	EventSeq uint64 `json:"event_seq,omitempty"`
	From     uint64 `json:"from,omitempty"`
}

// armRetry makes sure a retrying task has its durable timer: a JetStream
// message schedule that delivers onto ax.fire.retry.<id> at RetryAt. One
// schedule per subject, so arming twice replaces rather than duplicates.
func (o *Orchestrator) armRetry(ctx context.Context, t task.Task) error {
	if t.RetryAt == nil {
		return fmt.Errorf("arm retry of %s: no retry time", t.ID)
	}
	return o.armTimer(ctx, subject.TimerRetry, timerFire{ID: t.ID, Kind: string(subject.TimerRetry), Attempt: t.Attempt, At: *t.RetryAt})
}

func (o *Orchestrator) armTimer(ctx context.Context, kind subject.TimerKind, f timerFire) error {
	f.Kind = string(kind)
	data, err := wirejson.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode timer of %s: %w", f.ID, err)
	}
	msg := nats.NewMsg(subject.Fire(kind, f.ID))
	msg.Data = data
	// A due time already past fires at once: publish straight to the target.
	if f.At.After(o.now().Add(50 * time.Millisecond)) {
		msg.Subject = subject.Timer(kind, f.ID)
		// The server parses RFC 3339 with fractions; nats.go's WithScheduleAt
		// truncates to whole seconds and fires early, so set the header here.
		msg.Header.Set(subject.HeaderSchedule, "@at "+f.At.UTC().Format(time.RFC3339Nano))
		msg.Header.Set(subject.HeaderScheduleTarget, subject.Fire(kind, f.ID))
	}
	if _, err := o.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("arm %s timer of %s: %w", kind, f.ID, err)
	}
	return nil
}

// cancelTimer removes a pending timer of a task, if any: a plain message on
// the timer's subject replaces the schedule (one message per subject) and
// expires itself a second later. A publish, not a purge: purges are
// JetStream API requests, served one at a time, and every task ends with
// one.
func (o *Orchestrator) cancelTimer(ctx context.Context, kind subject.TimerKind, id string) error {
	if _, err := o.js.Publish(ctx, subject.Timer(kind, id), nil, jetstream.WithMsgTTL(time.Second)); err != nil {
		return fmt.Errorf("cancel %s timer of %s: %w", kind, id, err)
	}
	return nil
}

// handleFire acts on a fired timer.
func (o *Orchestrator) handleFire(ctx context.Context, msg jetstream.Msg) error {
	var f timerFire
	if err := wirejson.Unmarshal(msg.Data(), &f); err != nil {
		o.log.Warn("dropping malformed timer message", slog.Any("error", err), slog.String("subject", msg.Subject()))
		return nil
	}
	switch subject.TimerKind(f.Kind) {
	case subject.TimerRetry:
		return o.fireRetry(ctx, f)
	case subject.TimerStart:
		return o.fireStart(ctx, f)
	case subject.TimerDeadline:
		return o.fireDeadline(ctx, f)
	case subject.TimerDispatch:
		return o.fireDispatch(ctx, f)
	case subject.TimerSchedule:
		return o.fireSchedule(ctx, f)
	case subject.TimerFanIn:
		return o.fireFanIn(ctx, f)
	case subject.TimerWatch, subject.TimerEffects:
		return o.fireWatch(ctx, f)
	case subject.TimerSweep:
		return o.fireSweep(ctx, f)
	case subject.TimerCascade:
		return o.fireCascade(ctx, f)
	case subject.TimerForget:
		return o.fireForget(ctx, f)
	case subject.TimerEvents:
		return o.fireEvents(ctx, f)
	default:
		o.log.Warn("dropping timer of unknown kind", slog.String("kind", f.Kind), slog.String("task_id", f.ID))
		return nil
	}
}

// fireRetry makes a retrying task ready for its next attempt.
func (o *Orchestrator) fireRetry(ctx context.Context, f timerFire) error {
	_, err := o.transition(ctx, f.ID, func(t task.Task, rev uint64) (*task.Task, string, error) {
		d := lifecycle.RetryDue(&t, f.Attempt, o.env())
		switch d.Verdict {
		case lifecycle.Replay:
			return nil, "", o.dispatch(ctx, t, rev) // made ready before a crash
		case lifecycle.Apply:
		default:
			return nil, "", d.Err
		}
		if ok, why := o.gate.check(o.now(), t.Type, true); !ok {
			if held, err := o.hold(ctx, t, rev, why, true); held || err != nil {
				return nil, "", err
			}
		}
		return &d.Next, d.Reason, nil
	})
	return ignoreNotFound(err)
}

func ignoreNotFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// armDeadline makes sure an unfinished task with a deadline has its timer.
func (o *Orchestrator) armDeadline(ctx context.Context, t task.Task) error {
	if t.ExpiresAt == nil || t.State.Terminal() {
		return nil
	}
	return o.armTimer(ctx, subject.TimerDeadline, timerFire{ID: t.ID, At: *t.ExpiresAt})
}

// fireStart releases a delayed task whose start time has come (if its
// dependencies allow).
func (o *Orchestrator) fireStart(ctx context.Context, f timerFire) error {
	t, rev, err := o.store.Get(ctx, f.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if t.State != task.Waiting {
		return nil
	}
	if t.StartAt != nil {
		// A timer that fires before the start time (clock steps, or the
		// server's schedule precision) must not be lost: wait out a short
		// gap, re-arm a long one.
		switch wait := t.StartAt.Sub(o.now()); {
		case wait > startTimerSlack:
			return o.armTimer(ctx, subject.TimerStart, timerFire{ID: t.ID, At: *t.StartAt})
		case wait > 0:
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return o.resolveWaiting(ctx, t, rev, false)
}

// startTimerSlack is the longest a start timer that fired early is waited
// out in place rather than re-armed.
const startTimerSlack = 250 * time.Millisecond

// fireDeadline expires a task that has not finished by its deadline,
// wherever it is; a running handler is told to stop.
func (o *Orchestrator) fireDeadline(ctx context.Context, f timerFire) error {
	_, err := o.transition(ctx, f.ID, func(t task.Task, rev uint64) (*task.Task, string, error) {
		return o.decided(ctx, t, rev, lifecycle.DeadlinePassed(&t, o.env()))
	})
	return ignoreNotFound(err)
}

// fireDispatch handles a dispatch that no executor started in time: it is
// dispatched again with a new execution id, or after MaxDispatches the task
// fails naming the capability nobody served.
func (o *Orchestrator) fireDispatch(ctx context.Context, f timerFire) error {
	_, err := o.transition(ctx, f.ID, func(t task.Task, rev uint64) (*task.Task, string, error) {
		return o.decided(ctx, t, rev, lifecycle.NotStarted(&t, f.ExecutionID, o.env()))
	})
	return ignoreNotFound(err)
}
