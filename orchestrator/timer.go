package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// timerFire is the body of a timer's message (ax.timer.<kind>.<id>, and the
// copy delivered on ax.fire.<kind>.<id>).
type timerFire struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
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
	data, err := json.Marshal(f)
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

// cancelTimer removes a pending timer of a task, if any.
func (o *Orchestrator) cancelTimer(ctx context.Context, kind subject.TimerKind, id string) error {
	if err := o.timers.Purge(ctx, jetstream.WithPurgeSubject(subject.Timer(kind, id))); err != nil {
		return fmt.Errorf("cancel %s timer of %s: %w", kind, id, err)
	}
	return nil
}

// handleFire acts on a fired timer.
func (o *Orchestrator) handleFire(ctx context.Context, msg jetstream.Msg) error {
	var f timerFire
	if err := json.Unmarshal(msg.Data(), &f); err != nil {
		o.log.Warn().Err(err).Str("subject", msg.Subject()).Msg("dropping malformed timer message")
		return nil
	}
	switch subject.TimerKind(f.Kind) {
	case subject.TimerRetry:
		return o.fireRetry(ctx, f)
	default:
		o.log.Warn().Str("kind", f.Kind).Str("task_id", f.ID).Msg("dropping timer of unknown kind")
		return nil
	}
}

// fireRetry makes a retrying task ready for its next attempt.
func (o *Orchestrator) fireRetry(ctx context.Context, f timerFire) error {
	for range maxCASRetries {
		t, rev, err := o.store.Get(ctx, f.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case t.State == task.Retrying && t.Attempt == f.Attempt:
		case t.State == task.Ready && t.Attempt == f.Attempt+1:
			return o.dispatch(ctx, t, rev) // replay after a crash
		default:
			return nil // cancelled, re-driven or already handled
		}
		next := o.readyNext(t, t.Attempt+1)
		newRev, err := o.write(ctx, t, rev, next, fmt.Sprintf("retry %d of %d", f.Attempt, t.MaxRetries))
		if err == nil {
			return o.dispatch(ctx, next, newRev)
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("retry %s: too many concurrent changes", f.ID)
}
