package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
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
	if err := wirejson.Unmarshal(data, &r); err != nil || r.ID == "" || r.ExecutionID == "" {
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
	if r.Status == task.OutcomeStep {
		// Stored (not sent as a request): its executor gave up waiting
		// for it; store it all the same if its attempt still runs.
		rep := o.storeStep(ctx, r)
		if rep.Error != "" {
			return errors.New(rep.Error)
		}
		if rep.Refused != "" {
			o.log.Info("step not stored: "+rep.Refused, slog.String("task_id", r.ID), slog.String("step", r.Step))
		}
		return nil
	}
	if r.Status != task.OutcomeSucceeded && r.Status != task.OutcomeFailed && r.Status != task.OutcomeSnoozed &&
		r.Status != task.OutcomeCancelled && r.Status != task.OutcomeSleeping {
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
		d := lifecycle.Report(&t, rev, &r, o.env())
		switch d.Verdict {
		case lifecycle.Stale:
			// Ignoring the report on a read older than its attempt would
			// strand the task: read again.
			return d.Err
		case lifecycle.Ignore:
			if d.Warning != "" {
				o.log.Warn("ignoring a report: "+d.Warning, slog.String("task_id", r.ID))
			} else {
				o.log.Info("ignoring a report: "+d.Reason, slog.String("task_id", r.ID), slog.String("execution_id", r.ExecutionID), slog.String("current_execution_id", t.ExecutionID))
			}
			return nil
		case lifecycle.Replay:
			return o.ensureEffects(ctx, t, rev)
		}
		if d.Warning != "" {
			o.log.Warn(d.Warning, slog.String("task_id", t.ID), slog.String("execution_id", r.ExecutionID), slog.String("executor", r.Executor))
		}
		next, reason := d.Next, d.Reason
		if next.State == task.Retrying && r.Status != task.OutcomeSleeping {
			// A sleep ends on time: the retry budget holds back retries,
			// and a sleep is none.
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
			if next.State.Terminal() {
				o.sweepMemo.ended(r.ExecutionID)
			}
			if countsForBreaker(r.Status) && !o.adaptiveAbsorbs(t, r) {
				o.recordOutcome(ctx, t.Type, r.Status == task.OutcomeSucceeded)
			}
			return o.tracedOutcome(ctx, t, next, newRev)
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("apply report of %s: %w", r.ID, consume.ErrContended)
}

func (o *Orchestrator) dispatchedFromCache(r task.Report) (task.Task, uint64, bool) {
	d, ok := o.dispatchCache.take(r.ID)
	if !ok || r.DispatchRevision == 0 || r.ClaimRevision != 0 || r.StepRevision != 0 || d.revision != r.DispatchRevision || d.task.ExecutionID != r.ExecutionID {
		return task.Task{}, 0, false
	}
	return d.task, d.revision, true
}

// storeStep stores a step of a running attempt in its task's record (a
// compare-and-set, its own event of kind step) if the attempt is still
// the task's current one on the reporting executor (lifecycle.Step), and
// answers with the step as the record holds it.
func (o *Orchestrator) storeStep(ctx context.Context, r task.Report) task.StepReply {
	for range maxCASRetries {
		t, rev, err := o.store.Get(ctx, r.ID)
		if errors.Is(err, store.ErrNotFound) {
			return task.StepReply{Refused: "task " + r.ID + " not found", Lost: true}
		}
		if err != nil {
			return task.StepReply{Error: err.Error()}
		}
		d := lifecycle.Step(&t, rev, &r, o.env())
		switch d.Verdict {
		case lifecycle.Stale:
			return task.StepReply{Error: d.Err.Error()}
		case lifecycle.Refuse:
			return task.StepReply{Refused: d.Err.Error(), Lost: d.Lost}
		case lifecycle.Ignore:
			return task.StepReply{Step: &d.Step, Revision: rev}
		}
		newRev, err := o.writeEvent(ctx, t, rev, &d.Next, task.KindStep, d.Reason)
		if err == nil {
			return task.StepReply{Step: &d.Step, Revision: newRev}
		}
		if !errors.Is(err, store.ErrConflict) {
			return task.StepReply{Error: err.Error()}
		}
	}
	return task.StepReply{Error: fmt.Sprintf("store step of %s: %v", r.ID, consume.ErrContended)}
}

// isStepReport reports whether a report's body is a step's (status
// "step"): one answered with a task.StepReply. Most reports are not, and
// are told apart without decoding them twice.
func isStepReport(data []byte) bool {
	if !bytes.Contains(data, []byte(`"step"`)) {
		return false
	}
	var r struct {
		Status task.Outcome `json:"status"`
	}
	return wirejson.Unmarshal(data, &r) == nil && r.Status == task.OutcomeStep
}

// answerStep decodes and checks a step's report received as a direct
// request on a subject of taskType, stores the step and answers what the
// executor needs to know: stored (the step as stored), refused, or not
// decided (ask again).
func (o *Orchestrator) answerStep(ctx context.Context, taskType string, data []byte) task.StepReply {
	var r task.Report
	switch err := wirejson.Unmarshal(data, &r); {
	case err != nil || r.ID == "" || r.ExecutionID == "":
		return task.StepReply{Refused: fmt.Sprintf("malformed step report (id and execution_id are required): %v", err)}
	case r.Type != taskType:
		return task.StepReply{Refused: fmt.Sprintf("the step names type %q, not its subject's %q", r.Type, taskType)}
	case !o.validToken(r.ID, r.ExecutionID, r.Token):
		o.log.Warn("refusing a step without its execution's token (only the executor dispatched the execution may store its steps)",
			slog.String("task_id", r.ID), slog.String("execution_id", r.ExecutionID), slog.String("executor", r.Executor))
		return task.StepReply{Refused: "the step has no valid execution token"}
	}
	rep := o.storeStep(ctx, r)
	if rep.Refused != "" {
		o.log.Info("step refused: "+rep.Refused, slog.String("task_id", r.ID), slog.String("step", r.Step), slog.String("executor", r.Executor))
	}
	return rep
}
