package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Operator actions beyond the orchestrator's commands, for consoles and
// tools that act on an operator's behalf: a re-drive with a reason (who and
// why, kept in the task's history), a forced re-run of a finished task, a
// schedule fired by hand, and audit events naming the operator.

// AuditOperator is the kind of the audit events that record an operator's
// action (ax.audit.operator.<key>); Actor names the operator.
const AuditOperator = "operator"

// maxReruns bounds the re-run ids tried for one task.
const maxReruns = 1000

// RedriveWithReason is Redrive with a reason recorded in the task's history,
// e.g. who re-drove it.
func (c *Client) RedriveWithReason(ctx context.Context, id, reason string, opts ...RedriveOption) (*task.Task, error) {
	return c.command(ctx, subject.CommandRedrive, id, reason, opts...)
}

// Rerun forces a new execution of a finished task's spec: it submits the
// same spec (payload, priority, dependencies…) under the id "<id>-rerun-<n>"
// (the first n not taken) and returns that id. The original task and its
// history are untouched, so a succeeded task's handler runs again without
// any idempotency check standing in the way. Shards cannot be re-run alone.
func (c *Client) Rerun(ctx context.Context, id string) (string, error) {
	t, err := c.Get(ctx, id)
	if err != nil {
		return "", err
	}
	switch {
	case !t.State.Terminal():
		return "", fmt.Errorf("rerun %s: task is %s; only a finished task can be re-run", id, t.State)
	case t.IsShard():
		return "", fmt.Errorf("rerun %s: task is shard %d of %s; re-run its parent", id, t.ShardIndex, t.Parent)
	}
	spec := t.Spec
	// Delays and deadlines were relative to the first submission.
	spec.RunAt, spec.Deadline = nil, nil
	for n := 1; n <= maxReruns; n++ {
		spec.ID = id + "-rerun-" + strconv.Itoa(n)
		if _, err := c.Get(ctx, spec.ID); errors.Is(err, ErrNotFound) {
			return c.Submit(ctx, spec)
		} else if err != nil && !isRejected(err) {
			return "", err
		}
	}
	return "", fmt.Errorf("rerun %s: %d re-runs exist already", id, maxReruns)
}

func isRejected(err error) bool {
	var rej *RejectedError
	return errors.As(err, &rej)
}

// TriggerSchedule fires a schedule now, outside its cron: it submits the
// schedule's template under the id "<name>-manual-<now as
// 20060102T150405Z>" — or its graph, each id prefixed with that — and
// returns that id (a graph's: its last task's). The schedule's own firings
// are not changed (its next firing stays as it was).
func (c *Client) TriggerSchedule(ctx context.Context, name string, now time.Time) (string, error) {
	s, err := c.Schedule(ctx, name)
	if err != nil {
		return "", err
	}
	id := name + "-manual-" + now.UTC().Format("20060102T150405Z")
	if len(s.Graph) > 0 {
		ids, err := c.SubmitGraph(ctx, task.ScheduledGraph(id, s.Graph))
		if err != nil {
			return "", err
		}
		sorted, err := task.Graph{Tasks: task.ScheduledGraph(id, s.Graph)}.Sorted(c.MaxPayload)
		if err != nil || len(ids) == 0 {
			return "", err
		}
		return sorted[len(sorted)-1].ID, nil
	}
	spec := s.Template
	spec.ID = id
	return c.Submit(ctx, spec)
}

// RecordAudit publishes an audit event on ax.audit.<kind>.<key> (AX_AUDIT),
// where AuditEvents finds it; At is set when zero.
func (c *Client) RecordAudit(ctx context.Context, ev task.AuditEvent) error {
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode audit event: %w", err)
	}
	if _, err := c.js.Publish(ctx, subject.Audit(ev.Kind, ev.Key), data); err != nil {
		return fmt.Errorf("record audit event %s %s: %w", ev.Kind, ev.Key, err)
	}
	return nil
}

// ApproveOptions are the choices of an Approve.
type ApproveOptions struct {
	// Reject rejects instead of approving.
	Reject bool
	// Reason is recorded with the decision (the approval's "reason", or
	// the rejection's error "rejected by <who>: <reason>").
	Reason string
	// By names who decides when a tool acts for someone (the console:
	// "console:<user>"); the orchestrator records it after the client's
	// Caller, which the server vouches for ("<caller> for <by>").
	By string
}

// Approve decides an event task (task.Spec.WaitFor) that is waiting for
// its event, as a person's approval in place of the event: approved, it
// succeeds with the result {"approved": true, "by", "reason", "at"}
// (task.Approval), which its dependents read as their input; with
// opts.Reject, it fails for good with the error "rejected by <who>:
// <reason>" (not retried: its all_succeeded dependents are cancelled and
// its any_failed ones run). Who decided is the client's Caller (and
// opts.By). It returns the task as the decision left it.
//
// A task that is not an event task, is not waiting for its event yet (its
// dependencies or start time hold it) or has ended is refused with a
// *CommandError matching ErrConflict saying which; an unknown id with
// ErrNotFound. Deciding the same way again (a retried call) returns the
// task as the first decision left it.
func (c *Client) Approve(ctx context.Context, id string, opts ApproveOptions) (*task.Task, error) {
	kind := subject.CommandApprove
	if opts.Reject {
		kind = subject.CommandReject
	}
	return c.command(ctx, kind, id, opts.Reason, By(opts.By))
}
