package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/task"
)

// decodePayload returns t's payload as its handler sees it: decoded with
// Config.Codec when one is set. A payload that does not decode (a key this
// executor lacks, an altered payload, or one submitted without the codec)
// fails the attempt permanently: running it again cannot fix it, and the
// dead letter says why. So does an encoded payload on an executor without
// a codec, naming its key: its handler never sees the ciphertext as the
// payload. An empty payload stays empty.
func (e *Executor) decodePayload(ctx context.Context, t task.Task) (json.RawMessage, error) {
	if len(t.Payload) == 0 {
		return t.Payload, nil
	}
	if e.cfg.Codec == nil {
		if name, key, ok := codec.Encoded(t.Payload); ok {
			return nil, Permanent(fmt.Errorf("task %s: executor %s: the payload is encoded by codec %q with key %q and this executor has no codec (executor.Config.Codec; ax worker --codec-key-file): not run: %w",
				t.ID, e.cfg.ID, name, key, ErrNoCodec))
		}
		return t.Payload, nil
	}
	p, err := codec.DecodePayload(ctx, e.cfg.Codec, t.Payload)
	if err != nil {
		return nil, Permanent(fmt.Errorf("task %s: executor %s: %w", t.ID, e.cfg.ID, err))
	}
	return p, nil
}

// ErrNoCodec is returned (wrapped, as a permanent failure) for a task
// whose payload is encoded (codec.Encoded) on an executor without
// Config.Codec: the task fails at once, naming the codec and key id, and
// its handler is not run.
var ErrNoCodec = errors.New("encoded payload on an executor without a codec")

// encodeShards returns h with its planner's shard payloads encoded with
// Config.Codec, when h is a sharded handler and a codec is set: a shard's
// payload goes into the plan object and the shard's record, which the
// orchestrator reads, and comes back to an executor as any payload does.
func (e *Executor) encodeShards(h Handler) Handler {
	sh, ok := h.(*shardedHandler)
	if !ok || e.cfg.Codec == nil {
		return h
	}
	plan := sh.Plan
	w := *sh
	w.Plan = func(ctx context.Context, job *Job) ([]Shard, error) {
		shards, err := plan(ctx, job)
		if err != nil || len(shards) > task.MaxShards {
			return shards, err // the caller reports a plan over the limit
		}
		out := make([]Shard, len(shards))
		for i, s := range shards {
			raw, err := encodeResult(s.Payload)
			if err != nil {
				return nil, Permanent(fmt.Errorf("shard %d: payload: %w", i, err))
			}
			enc, err := codec.EncodePayload(ctx, e.cfg.Codec, raw)
			if err != nil {
				return nil, Permanent(fmt.Errorf("shard %d: %w", i, err))
			}
			s.Payload = enc
			out[i] = s
		}
		return out, nil
	}
	return &w
}
