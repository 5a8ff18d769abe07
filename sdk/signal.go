package sdk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Signal publishes an event on eventSubject: every task whose wait_for is
// {subject, match} with "<subject>.<match>" equal to eventSubject
// (task.EventWait) succeeds with data as its result — tasks waiting now,
// and tasks that register their wait later, within AX_EVENTS' retention
// (7 days). The event is the latest value of its subject: a later Signal
// on the same subject replaces it for tasks that have not received it yet.
//
// data is marshalled to JSON (a []byte or json.RawMessage is sent as it
// is; nil is JSON null) and may be at most task.MaxEventData bytes. It
// returns the event's sequence in AX_EVENTS once stored.
func (c *Client) Signal(ctx context.Context, eventSubject string, data any) (uint64, error) {
	if !task.ValidEventSubject(eventSubject) {
		return 0, fmt.Errorf("signal %q: not an event subject (<subject>.<match>: 2-8 dot-separated tokens of [A-Za-z0-9_-])", eventSubject)
	}
	var body []byte
	switch d := data.(type) {
	case nil:
		body = []byte("null")
	case json.RawMessage:
		body = d
	case []byte:
		body = d
	default:
		b, err := json.Marshal(d)
		if err != nil {
			return 0, fmt.Errorf("signal %s: encode data: %w", eventSubject, err)
		}
		body = b
	}
	if len(body) > task.MaxEventData {
		return 0, fmt.Errorf("signal %s: %d bytes of data exceed the limit of %d", eventSubject, len(body), task.MaxEventData)
	}
	ack, err := c.js.Publish(ctx, subject.Event(eventSubject), body)
	if err != nil {
		return 0, fmt.Errorf("signal %s: %w", eventSubject, err)
	}
	return ack.Sequence, nil
}
