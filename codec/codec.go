package codec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Codec turns a task's payload into its encoded form and back. Encode runs
// in the producer (the SDK) and Decode in the executor, so what travels and
// is stored in between is the encoded form.
//
// Encode is given a payload as JSON and must return valid JSON (task specs
// require their payload to be JSON): a JSON object with an "ax_codec"
// member naming the codec, as AESGCM writes, lets every reader tell an
// encoded payload from a clear one. Decode reverses Encode; given a
// payload it did not encode it returns an error wrapping ErrNotEncoded.
// Both must be safe for concurrent use; ctx bounds work such as a call to
// a key service.
type Codec interface {
	// Encode returns the encoded form of payload.
	Encode(ctx context.Context, payload []byte) ([]byte, error)
	// Decode returns the payload an Encode turned into encoded.
	Decode(ctx context.Context, encoded []byte) ([]byte, error)
}

// EncodePayload encodes a payload with c, checking that the result is
// JSON. A nil c or an empty payload returns payload unchanged.
func EncodePayload(ctx context.Context, c Codec, payload json.RawMessage) (json.RawMessage, error) {
	if c == nil || len(payload) == 0 {
		return payload, nil
	}
	out, err := c.Encode(ctx, payload)
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	if !json.Valid(out) {
		return nil, fmt.Errorf("encode payload: the codec (%T) returned invalid JSON", c)
	}
	return out, nil
}

// DecodePayload decodes a payload with c. A nil c or an empty payload
// returns payload unchanged.
func DecodePayload(ctx context.Context, c Codec, payload json.RawMessage) (json.RawMessage, error) {
	if c == nil || len(payload) == 0 {
		return payload, nil
	}
	out, err := c.Decode(ctx, payload)
	if err != nil {
		return nil, fmt.Errorf("decode payload: %w", err)
	}
	return out, nil
}

// AcceptClear returns c with a Decode that passes a payload c did not
// encode (ErrNotEncoded) through unchanged; other errors stay errors. Give
// it to executors while producers are being switched to the codec, so
// tasks submitted in clear before the switch still run; afterwards use c
// itself, so a clear payload (a producer without the codec) fails loudly.
func AcceptClear(c Codec) Codec { return acceptClear{c} }

type acceptClear struct{ Codec }

func (a acceptClear) Decode(ctx context.Context, encoded []byte) ([]byte, error) {
	out, err := a.Codec.Decode(ctx, encoded)
	if errors.Is(err, ErrNotEncoded) {
		return encoded, nil
	}
	return out, err
}
