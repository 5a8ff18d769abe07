package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/clip"
	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// handleCommand runs an operator command and answers the requester, if any.
func (o *Orchestrator) handleCommand(ctx context.Context, msg jetstream.Msg) error {
	caller, kind, id, ok := subject.ParseCommand(msg.Subject())
	var req task.CommandRequest
	if len(msg.Data()) > 0 && ok && kind != subject.CommandScheduleCreate {
		if err := json.Unmarshal(msg.Data(), &req); err != nil {
			return o.reply(msg, task.CommandReply{Error: "malformed command: " + err.Error()})
		}
		// A reason lands in records and audit events: bounded like an error.
		req.Reason = task.TruncateError(req.Reason)
	}
	req.By = commandBy(caller, req.By)
	var t task.Task
	var sched *task.Schedule
	var err error
	switch {
	case !ok:
		err = fmt.Errorf("%w: malformed command subject %q", errInvalid, msg.Subject())
	case kind == subject.CommandScheduleCreate:
		sched, err = o.createSchedule(ctx, id, msg.Data())
	case kind == subject.CommandSchedulePause, kind == subject.CommandScheduleResume:
		sched, err = o.pauseSchedule(ctx, id, kind == subject.CommandSchedulePause)
	case kind == subject.CommandScheduleDelete:
		err = o.deleteSchedule(ctx, id)
	case kind == subject.CommandPause, kind == subject.CommandResume:
		err = o.pause(ctx, id, kind == subject.CommandPause, req)
	case kind == subject.CommandCancel:
		t, err = o.cancel(ctx, id, req.Reason, req.By)
		if errors.Is(err, errNotFound) {
			// Perhaps submitted just before and still queued: look again
			// once every submission sent before this command is in.
			if err = o.awaitIntake(ctx, commandSent(msg)); err == nil {
				t, err = o.cancel(ctx, id, req.Reason, req.By)
			}
		}
	case kind == subject.CommandRedrive:
		t, err = o.redrive(ctx, id, req)
	case kind == subject.CommandLimitSet:
		err = o.setLimit(ctx, id, req)
	case kind == subject.CommandLimitDelete:
		err = o.deleteLimit(ctx, id, req)
	case kind == subject.CommandDLQDelete:
		err = o.discardDeadLetter(ctx, id, req) // dlq.go
	case kind == subject.CommandApprove, kind == subject.CommandReject:
		t, err = o.approve(ctx, id, kind == subject.CommandApprove, req)
	default:
		err = fmt.Errorf("%w: unknown command %q", errInvalid, kind)
	}
	if err != nil && !errors.Is(err, errCommand) {
		return err // transient: retry
	}
	if err == nil && strings.HasPrefix(kind, "schedule-") {
		o.audit(ctx, task.AuditEvent{Kind: "schedule", Key: id, To: strings.TrimPrefix(kind, "schedule-"), Reason: strings.TrimPrefix(byline(req.By), " ")})
	}
	rep := task.CommandReply{OK: err == nil}
	if err != nil {
		rep.Error, rep.Code = err.Error(), replyCode(err)
	}
	if t.ID != "" {
		rep.Task = &t
	}
	rep.Schedule = sched
	return o.reply(msg, rep)
}

// commandBy is who a command is recorded as sent by: the caller its subject
// names (ax.cmd.as.<caller>.…, which per-user permissions vouch for),
// followed by the name its body gives when that differs (the console's
// "console:<user>", say); the body's name alone for a command without one.
func commandBy(caller, claimed string) string {
	switch {
	case caller == "":
		return claimed
	case claimed == "" || claimed == caller:
		return caller
	default:
		return caller + " for " + claimed
	}
}

// byline is " (by <who>)", or "" when nobody is named.
func byline(by string) string {
	if by == "" {
		return ""
	}
	return " (by " + by + ")"
}

// errCommand marks a command that cannot be carried out (as opposed to a
// transient failure, which is retried).
var errCommand = errors.New("command refused")

// errInvalid marks a command refused because it is malformed (its reply's
// code is task.ReplyInvalid); it is an errCommand.
var errInvalid = fmt.Errorf("%w: invalid", errCommand)

// replyCode is the code of a refused command's reply: what it names does
// not exist, it is malformed, or what it names is in no state for it.
func replyCode(err error) string {
	switch {
	case errors.Is(err, errNotFound):
		return task.ReplyNotFound
	case errors.Is(err, errInvalid):
		return task.ReplyInvalid
	}
	return task.ReplyConflict
}

func (o *Orchestrator) reply(msg jetstream.Msg, rep task.CommandReply) error {
	to := msg.Headers().Get(subject.HeaderReplyTo)
	if to == "" {
		return nil
	}
	if !subject.ReplyToAllowed(to) {
		o.log.Warn("command reply not sent: its Ax-Reply-To is not an inbox", "reply_to", to, "command", msg.Subject())
		return nil
	}
	data, _ := json.Marshal(rep)
	if err := o.nc.Publish(to, data); err != nil {
		o.log.Warn("command reply not sent", slog.Any("error", err))
	}
	return nil
}

// cancel ends a task that has not finished. A running task's handler is
// told to stop through the cancel signal.
func (o *Orchestrator) cancel(ctx context.Context, id, reason, by string) (task.Task, error) {
	if reason == "" {
		reason = "cancelled by request"
	}
	reason += byline(by)
	return o.command(ctx, id, func(t *task.Task, _ uint64) (lifecycle.Decision, error) {
		return lifecycle.Cancel(t, reason, o.env()), nil
	})
}

// command applies an operator command's decision to task id with a
// compare-and-set, and its effects: a refusal is the command's error, a
// task that does not exist is errNotFound.
func (o *Orchestrator) command(ctx context.Context, id string, decide func(t *task.Task, rev uint64) (lifecycle.Decision, error)) (task.Task, error) {
	t, err := o.transition(ctx, id, func(t task.Task, rev uint64) (*task.Task, string, error) {
		d, err := decide(&t, rev)
		if err != nil {
			return nil, "", err
		}
		if d.Verdict == lifecycle.Refuse {
			return nil, "", fmt.Errorf("%w: %w", errCommand, d.Err)
		}
		return o.decided(ctx, t, rev, d)
	})
	if errors.Is(err, store.ErrNotFound) {
		return t, fmt.Errorf("%w: task %s %w", errCommand, id, errNotFound)
	}
	return t, err
}

// approve decides an event task waiting for its event: approved, it
// succeeds with the approval as its result; rejected, it fails for good
// (lifecycle.Approve). Its effects remove its wait marker and timeout,
// release or cancel its dependents, and dead-letter a rejection.
func (o *Orchestrator) approve(ctx context.Context, id string, approved bool, req task.CommandRequest) (task.Task, error) {
	// Who and why land in the record several times over: bounded.
	a := task.Approval{Approved: approved, By: clip.Bytes(req.By, maxApprovalBy), Reason: req.Reason}
	return o.command(ctx, id, func(t *task.Task, _ uint64) (lifecycle.Decision, error) {
		return lifecycle.Approve(t, a, o.env()), nil
	})
}

// maxApprovalBy bounds the name an approval records (a caller is at most
// 64 bytes; the body's name is a tool's claim, such as "console:<user>").
const maxApprovalBy = 256

// errNotFound: a command names a task that has no record.
var errNotFound = errors.New("not found")

// commandSent is when the command was stored (now if the metadata is
// unreadable, which only makes the intake check stricter).
func commandSent(msg jetstream.Msg) time.Time {
	if md, err := msg.Metadata(); err == nil {
		return md.Timestamp
	}
	return time.Now()
}

// redrive starts a fresh attempt series for a failed task and removes its
// dead-letter entry. Dependents cancelled by the failure stay cancelled
// unless req.WithDependents, which re-opens them (see reopen.go); a task
// re-driven before without them may be asked again with them.
func (o *Orchestrator) redrive(ctx context.Context, id string, req task.CommandRequest) (task.Task, error) {
	reason := req.Reason
	if reason == "" {
		reason = "re-driven from the dead-letter queue"
	}
	if req.WithDependents {
		reason += " with its dependents"
	}
	reason += byline(req.By)
	t, err := o.command(ctx, id, func(t *task.Task, rev uint64) (lifecycle.Decision, error) {
		if t.State == task.Ready && t.Redrives > 0 {
			// A replayed redrive: make sure the dispatch happened.
			if err := o.dispatch(ctx, *t, rev); err != nil {
				return lifecycle.Decision{}, err
			}
		}
		return lifecycle.Redrive(t, req.WithDependents, reason, o.env()), nil
	})
	if err != nil {
		return t, err
	}
	if req.WithDependents {
		if err := o.reopenDependents(ctx, t, timerFire{ID: t.ID, Reopen: redriveOrigin(id, req)}); err != nil {
			return t, err
		}
	}
	dlq, err := o.js.Stream(ctx, subject.StreamDLQ)
	if err == nil {
		err = dlq.Purge(ctx, jetstream.WithPurgeSubject(subject.DLQ(id)))
	}
	if err != nil {
		o.log.Warn("re-driven, but its dead-letter entry was not removed", slog.Any("error", err), slog.String("task_id", id))
	}
	return t, nil
}

// pause sets or clears a pause switch (scope "all" or "type=<type>"); a
// resume releases the tasks held meanwhile.
func (o *Orchestrator) pause(ctx context.Context, scope string, on bool, req task.CommandRequest) error {
	taskType, ok := subject.ParsePauseScope(scope)
	if !ok || (taskType != "" && !task.ValidType(taskType)) {
		return fmt.Errorf("%w: pause scope %q is not \"all\" or \"type=<task type>\"", errInvalid, scope)
	}
	key := subject.ControlPauseAll
	if taskType != "" {
		key = subject.ControlPauseType(taskType)
	}
	auditKey := taskType
	if auditKey == "" {
		auditKey = "all"
	}
	if on {
		data, _ := json.Marshal(task.Pause{RetriesOnly: req.RetriesOnly, Reason: req.Reason, At: o.now()})
		if _, err := o.control.Put(ctx, key, data); err != nil {
			return fmt.Errorf("pause %s: %w", scope, err)
		}
		if e, err := o.control.Get(ctx, key); err == nil {
			o.gate.apply(e) // at once: the watch may lag behind the reply
		}
		to := "paused"
		if req.RetriesOnly {
			to = "retries paused"
		}
		o.audit(ctx, task.AuditEvent{Kind: "pause", Key: auditKey, From: "running", To: to, Reason: req.Reason + byline(req.By)})
		return nil
	}
	if err := o.control.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("resume %s: %w", scope, err)
	}
	// Apply it here at once: the watch may lag, and the release must see it.
	if e, err := o.control.Get(ctx, key); errors.Is(err, jetstream.ErrKeyDeleted) || errors.Is(err, jetstream.ErrKeyNotFound) {
		o.gate.mu.Lock()
		delete(o.gate.pauses, taskType)
		o.gate.mu.Unlock()
	} else if err == nil {
		o.gate.apply(e)
	}
	o.audit(ctx, task.AuditEvent{Kind: "pause", Key: auditKey, From: "paused", To: "running", Reason: req.Reason + byline(req.By)})
	o.releaseHeld(ctx, taskType, 0)
	return nil
}
