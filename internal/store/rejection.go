package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Rejection is the last rejection of a submission with that id (AX_REJECTED),
// or nil when there is none.
func Rejection(ctx context.Context, js jetstream.JetStream, id string) (*task.Rejection, error) {
	if !task.ValidID(id) {
		return nil, nil
	}
	st, err := js.Stream(ctx, subject.StreamRejected)
	if err != nil {
		return nil, fmt.Errorf("bind rejections: %w", err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, subject.Rejected(id, ""))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get rejection of %s: %w", id, err)
	}
	var r task.Rejection
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("decode rejection of %s: %w", id, err)
	}
	return &r, nil
}
