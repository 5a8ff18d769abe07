package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Dead letters leave AX_DLQ when their task is re-driven, when an operator
// discards them (a dlq-delete command: ax dlq rm, the console), or when
// their retention ends: the stream's max age (TopologyOptions.DLQMaxAge)
// or their type's shorter one (Config.DeadLetterRetention, a TTL on each).
// Either way the task's record stays failed.

// deadLetterTTL is the publish option giving a dead letter of taskType
// its type's retention, none without one.
func (o *Orchestrator) deadLetterTTL(taskType string) []jetstream.PublishOpt {
	d, ok := o.cfg.DeadLetterRetention[taskType]
	if !ok || d <= 0 {
		return nil
	}
	// Message TTLs are whole seconds, at least one.
	return []jetstream.PublishOpt{jetstream.WithMsgTTL(max(time.Second, d.Truncate(time.Second)))}
}

// discardDeadLetter removes a task's dead letter (a dlq-delete command)
// and records it in the audit trail (kind "dlq"): not_found when it has
// none.
func (o *Orchestrator) discardDeadLetter(ctx context.Context, id string, req task.CommandRequest) error {
	if !task.ValidID(id) {
		return fmt.Errorf("%w: %q is not a task id", errInvalid, id)
	}
	dlq, err := o.bind(ctx, subject.StreamDLQ)
	if err != nil {
		return fmt.Errorf("discard dead letter %s: %w", id, err)
	}
	if _, err := dlq.GetLastMsgForSubject(ctx, subject.DLQ(id)); errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("%w: task %s has no dead letter: %w", errCommand, id, errNotFound)
	} else if err != nil {
		return fmt.Errorf("discard dead letter %s: %w", id, err)
	}
	if err := dlq.Purge(ctx, jetstream.WithPurgeSubject(subject.DLQ(id))); err != nil {
		return fmt.Errorf("discard dead letter %s: %w", id, err)
	}
	reason := req.Reason
	if reason == "" {
		reason = "discarded"
	}
	o.audit(ctx, task.AuditEvent{Kind: auditDLQ, Key: id, From: "dead letter", To: "discarded", Reason: reason + byline(req.By)})
	return nil
}

// auditDLQ is the audit kind of a discarded dead letter.
const auditDLQ = "dlq"
