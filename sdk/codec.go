package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/task"
)

// encodeSpec encodes a validated spec's payload with the client's codec
// and checks the encoded payload against MaxPayload, as the orchestrator
// will. Without a codec it does nothing.
func (c *Client) encodeSpec(ctx context.Context, s *task.Spec) error {
	if c.Codec == nil || len(s.Payload) == 0 {
		return nil
	}
	enc, err := codec.EncodePayload(ctx, c.Codec, s.Payload)
	if err != nil {
		return fmt.Errorf("task %s: %w", s.ID, err)
	}
	s.Payload = enc
	if err := s.Validate(c.MaxPayload); err != nil {
		return fmt.Errorf("invalid task %s once its payload is encoded: %w", s.ID, err)
	}
	return nil
}

// decodeSpec decodes a spec's payload read back from AX with the client's
// codec. A payload the codec did not encode (submitted in clear) is left
// as it is; one that does not decode is an error naming the task.
func (c *Client) decodeSpec(ctx context.Context, s *task.Spec) error {
	if c.Codec == nil || len(s.Payload) == 0 {
		return nil
	}
	dec, err := codec.DecodePayload(ctx, c.Codec, s.Payload)
	switch {
	case errors.Is(err, codec.ErrNotEncoded):
		return nil
	case err != nil:
		return fmt.Errorf("task %s: %w", s.ID, err)
	}
	s.Payload = dec
	return nil
}

// decodeTask decodes a task record's payload (see decodeSpec).
func (c *Client) decodeTask(ctx context.Context, t *task.Task) error {
	return c.decodeSpec(ctx, &t.Spec)
}
