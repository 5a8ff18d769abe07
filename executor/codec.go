package executor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/task"
)

// decodePayload returns t's payload as its handler sees it: decoded with
// Config.Codec when one is set. A payload that does not decode (a key this
// executor lacks, an altered payload, or one submitted without the codec)
// fails the attempt permanently: running it again cannot fix it, and the
// dead letter says why. An empty payload stays empty.
func (e *Executor) decodePayload(ctx context.Context, t task.Task) (json.RawMessage, error) {
	if e.cfg.Codec == nil || len(t.Payload) == 0 {
		return t.Payload, nil
	}
	p, err := codec.DecodePayload(ctx, e.cfg.Codec, t.Payload)
	if err != nil {
		return nil, Permanent(fmt.Errorf("task %s: executor %s: %w", t.ID, e.cfg.ID, err))
	}
	return p, nil
}

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
