package sdk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// DiscardDeadLetter removes a task's dead letter from AX_DLQ for good
// (`ax dlq rm`): the orchestrator purges it and records an audit event of
// kind "dlq" naming who asked (Caller) and reason. The task's record stays
// failed, so it can still be re-driven. A task without a dead letter is an
// error matching ErrNotFound.
func (c *Client) DiscardDeadLetter(ctx context.Context, id, reason string) error {
	if !task.ValidID(id) {
		return fmt.Errorf("%s: %w task id %q", subject.CommandDLQDelete, ErrInvalid, id)
	}
	body, _ := json.Marshal(task.CommandRequest{Reason: reason})
	rep, err := c.send(ctx, subject.CommandDLQDelete, id, body)
	if err != nil {
		return err
	}
	if !rep.OK {
		return refused(subject.CommandDLQDelete, id, rep)
	}
	return nil
}
