package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// State is Get through an orchestrator, for a producer whose NATS user may
// submit only some task types (deploy/security): such a user may not read
// the task streams, only ask for the state of tasks of its types. It
// returns the task if it has type taskType (with its dependents), a
// *RejectedError if a submission of that id and type was refused, or
// ErrNotFound, also for a task of another type. It needs a running
// orchestrator; "no responders" is returned as is.
func (c *Client) State(ctx context.Context, taskType, id string) (*task.Task, error) {
	if !task.ValidType(taskType) {
		return nil, fmt.Errorf("state of %s: invalid task type %q", id, taskType)
	}
	if !task.ValidID(id) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	msg, err := c.nc.RequestWithContext(ctx, subject.State(id, taskType), nil)
	if err != nil {
		return nil, fmt.Errorf("state of %s: %w", id, err)
	}
	var rep task.StateReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return nil, fmt.Errorf("state of %s: decode reply: %w", id, err)
	}
	switch {
	case rep.Error != "":
		return nil, fmt.Errorf("state of %s: %w: %s", id, errStateRead, rep.Error)
	case rep.Task != nil:
		if err := c.decodeTask(ctx, rep.Task); err != nil {
			return nil, err
		}
		return rep.Task, nil
	case rep.Rejection != nil:
		return nil, &RejectedError{*rep.Rejection}
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
}

// errStateRead marks an orchestrator's failure to read a state: WaitState
// asks again.
var errStateRead = errors.New("not read")

// WaitState is Wait through State: it asks for the task's state until it
// is terminal (succeeded, failed, cancelled, expired), every 50 ms at
// first, backing off to every second. A task not found yet is asked for
// again (its submission may still be queued); a rejection ends the wait
// with a *RejectedError.
func (c *Client) WaitState(ctx context.Context, taskType, id string) (*task.Task, error) {
	every := 50 * time.Millisecond
	for {
		t, err := c.State(ctx, taskType, id)
		switch {
		case err == nil && t.State.Terminal():
			return t, nil
		case err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, errStateRead) &&
			!errors.Is(err, nats.ErrNoResponders) && !consume.Unavailable(err):
			return nil, err
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return nil, fmt.Errorf("%w (last answer: %w)", ctx.Err(), err)
			}
			return nil, ctx.Err()
		case <-time.After(every):
		}
		every = min(2*every, time.Second)
	}
}

// denied explains err, a read of the task streams that got no answer, when
// the server refused the request: the client's NATS user may not read
// them (a producer limited to task types reads through State). The result
// wraps nats.ErrPermissionViolation. Other errors are returned as they are.
func (c *Client) denied(err error) error {
	last := c.nc.LastError()
	if err == nil || !consume.Unavailable(err) || !errors.Is(last, nats.ErrPermissionViolation) ||
		!strings.Contains(last.Error(), "$JS.API") || !strings.Contains(last.Error(), subject.StreamTasks) {
		return err
	}
	return fmt.Errorf("%w (this NATS user may not read %s: a producer limited to task types reads its tasks with State and WaitState)",
		last, subject.StreamTasks)
}
