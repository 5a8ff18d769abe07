package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// handleReport applies an executor's report of an attempt stored on
// task.completed.<type>: one it did not send as a request, or whose request
// no orchestrator confirmed (serveDirect).
func (o *Orchestrator) handleReport(ctx context.Context, msg jetstream.Msg) error {
	return o.acceptReport(ctx, subject.TypeFromCompleted(msg.Subject()), msg.Subject(), msg.Data())
}

// acceptReport decodes and checks a report received on a subject of
// taskType (its completed or its report subject), then applies it. A nil
// error means applied, or dropped with a logged reason.
func (o *Orchestrator) acceptReport(ctx context.Context, taskType, subj string, data []byte) error {
	var r task.Report
	if err := json.Unmarshal(data, &r); err != nil || r.ID == "" || r.ExecutionID == "" {
		o.log.Warn("dropping malformed report", slog.Any("error", err), slog.String("subject", subj))
		return nil
	}
	if r.Type != taskType {
		// Executors may publish only the report subjects of the types
		// they serve (deploy/security): the subject, not the body, says
		// which type a report may be about.
		o.log.Warn("dropping a report whose task type is not its subject's", slog.String("task_id", r.ID),
			slog.String("type", r.Type), slog.String("subject", subj))
		return nil
	}
	if !o.validToken(r.ID, r.ExecutionID, r.Token) {
		o.log.Warn("dropping a report without its execution's token (only the executor dispatched the execution may report it)",
			slog.String("task_id", r.ID), slog.String("execution_id", r.ExecutionID), slog.String("executor", r.Executor))
		return nil
	}
	return o.applyReport(ctx, r)
}

// validToken reports whether token proves a dispatch of the task's
// execution: signed by the orchestrators' key, or absent while
// Config.AcceptTokenless.
func (o *Orchestrator) validToken(id, executionID, token string) bool {
	if token == "" {
		return o.cfg.AcceptTokenless
	}
	return o.tokens.Valid(id, executionID, token)
}

// applyReport moves a running task on by the outcome of its attempt (an
// executor's report, or the reconciler's "lease expired").
func (o *Orchestrator) applyReport(ctx context.Context, r task.Report) error {
	if r.Status != task.OutcomeSucceeded && r.Status != task.OutcomeFailed && r.Status != task.OutcomeSnoozed && r.Status != task.OutcomeCancelled {
		o.log.Warn("dropping report with unknown status", slog.String("task_id", r.ID), slog.String("status", string(r.Status)))
		return nil
	}
	// Fast path: the attempt ran on exactly the dispatch remembered here and
	// nothing marked it running, so the record is that dispatch's, at its
	// revision. The compare-and-set below verifies it: if anything else
	// happened to the task, the write fails and the slow path reads it.
	t, rev, known := o.dispatchedFromCache(r)
	for range maxCASRetries {
		var err error
		if !known {
			t, rev, err = o.store.Get(ctx, r.ID)
		}
		known = false
		if errors.Is(err, store.ErrNotFound) {
			o.log.Warn("dropping report for unknown task", slog.String("task_id", r.ID))
			return nil
		}
		if err != nil {
			return err
		}
		if seen := max(r.DispatchRevision, r.ClaimRevision); rev < seen {
			// The attempt was dispatched (or claimed) at a later revision
			// than the one read: the read was served by a stream leader
			// that was behind (one cut off by a partition, not yet aware it
			// lost leadership). Ignoring the report on it would strand the
			// task: read again.
			return fmt.Errorf("report of %s: read revision %d, older than its attempt's at %d (a stale read); trying again", r.ID, rev, seen)
		}
		if t.ExecutionID != r.ExecutionID {
			o.log.Info("ignoring result of a superseded attempt", slog.String("task_id", r.ID), slog.String("execution_id", r.ExecutionID), slog.String("current_execution_id", t.ExecutionID))
			return nil
		}
		if r.Type != t.Type {
			o.log.Warn("ignoring a report naming another task type than its task's", slog.String("task_id", r.ID),
				slog.String("report_type", r.Type), slog.String("type", t.Type))
			return nil
		}
		// Ready under the report's execution: an attempt that ended before
		// anything marked it running (executors do not write records).
		if t.State != task.Running && t.State != task.Ready {
			// Already applied (a redelivered report) or the task was
			// cancelled meanwhile: make sure the effects happened.
			return o.ensureEffects(ctx, t, rev)
		}
		next, reason := o.outcome(t, r)
		if next.State == task.Retrying {
			at, err := o.allocateRetry(ctx, t.Type, retryHolder(t), *next.RetryAt)
			if err != nil {
				return err
			}
			if at.After(*next.RetryAt) {
				reason += fmt.Sprintf("; moved to %s by the retry budget of %s", at.Format(time.RFC3339Nano), t.Type)
				next.RetryAt = &at
			}
		}
		newRev, err := o.write(ctx, t, rev, &next, reason)
		if err == nil {
			if countsForBreaker(r.Status) && !o.adaptiveAbsorbs(t, r) {
				o.recordOutcome(ctx, t.Type, r.Status == task.OutcomeSucceeded)
			}
			return o.tracedOutcome(ctx, t, next, newRev)
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("apply report of %s: too many concurrent changes", r.ID)
}

func (o *Orchestrator) dispatchedFromCache(r task.Report) (task.Task, uint64, bool) {
	d, ok := o.dispatchCache.take(r.ID)
	if !ok || r.DispatchRevision == 0 || r.ClaimRevision != 0 || d.revision != r.DispatchRevision || d.task.ExecutionID != r.ExecutionID {
		return task.Task{}, 0, false
	}
	return d.task, d.revision, true
}

// outcome computes a running task's next record from a report.
func (o *Orchestrator) outcome(t task.Task, r task.Report) (task.Task, string) {
	now := o.now()
	// A report comes from outside: its error and inline result are bounded
	// here too, whatever the executor did.
	r.Error = task.TruncateError(r.Error)
	if r.Status == task.OutcomeSucceeded && len(r.Result) > task.InlineResultLimit {
		r.Status, r.Permanent, r.Result = task.OutcomeFailed, true, nil
		r.Error = fmt.Sprintf("the report's inline result is over the %d-byte limit (executors store larger results in %s)",
			task.InlineResultLimit, subject.ObjectBucket(t.Capability))
	}
	r = o.checkObjects(t, r) // objects.go
	t.UpdatedAt = now
	t.DispatchRevision = 0 // its dispatch was delivered: the attempt ended
	if t.StartedAt == nil && !r.StartedAt.IsZero() {
		t.StartedAt = &r.StartedAt
	}
	if t.Executor == "" {
		t.Executor = r.Executor
	}
	if r.Status == task.OutcomeSnoozed || r.Status == task.OutcomeCancelled {
		var reason string
		var ok bool
		if t, reason, r, ok = o.handlerOutcome(t, r, now); ok {
			return t, reason
		}
	}
	if r.Status == task.OutcomeSucceeded && t.Shardable && t.Phase != task.PhaseAggregate {
		return o.planned(t, r)
	}
	if r.Status == task.OutcomeSucceeded {
		t.State = task.Succeeded
		t.ResultObject = r.ResultObject
		t.ResultBucket, t.ResultDigest = r.ResultBucket, r.ResultDigest
		t.Result = r.Result
		t.FinishedAt = &now
		return t, fmt.Sprintf("attempt %d succeeded", t.Attempt)
	}
	t.AddError(task.AttemptError{Attempt: t.Attempt, ExecutionID: r.ExecutionID, Executor: r.Executor, Error: r.Error, At: now})
	switch {
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		t.State = task.Expired
		t.FinishedAt = &now
		return t, fmt.Sprintf("deadline %s passed while running", t.ExpiresAt.Format(time.RFC3339Nano))
	case r.Permanent:
		t.State = task.Failed
		t.FinishedAt = &now
		return t, fmt.Sprintf("attempt %d failed permanently: %s", t.Attempt, r.Error)
	case t.Attempt > t.RetryLimit():
		t.State = task.Failed
		t.FinishedAt = &now
		return t, fmt.Sprintf("retries exhausted after %d attempts: %s", t.Attempt, r.Error)
	}
	delay := o.cfg.Retry.Delay(t.Attempt, o.cfg.Random())
	if r.RetryAfter != nil && *r.RetryAfter > 0 {
		delay = r.RetryAfter.Std()
	}
	at := now.Add(delay)
	t.State = task.Retrying
	t.RetryAt = &at
	return t, fmt.Sprintf("attempt %d failed: %s; retry in %s", t.Attempt, r.Error, delay.Round(time.Millisecond))
}
