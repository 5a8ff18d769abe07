package sdk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ax-run/ax/internal/fanin"
	"github.com/ax-run/ax/task"
)

// ShardProgress is how far the shards of a sharded task got.
type ShardProgress struct {
	// Phase is the parent's step: plan, shards or aggregate.
	Phase string `json:"phase"`
	// Total is the number of shards its planner returned (0 before it ran).
	Total int `json:"total"`
	// Registered says every shard task exists.
	Registered bool `json:"registered"`
	// Ended counts the shards in each final state; Unfinished the rest
	// (waiting, ready, running or retrying).
	Ended      map[task.State]int `json:"ended"`
	Unfinished int                `json:"unfinished"`
}

// Shards returns the shard progress of a shardable task. Counting costs a
// few requests whatever the number of shards.
func (c *Client) Shards(ctx context.Context, parent string) (*ShardProgress, error) {
	t, err := c.Get(ctx, parent)
	if err != nil {
		return nil, err
	}
	if !t.Shardable {
		return nil, fmt.Errorf("task %s is not shardable", parent)
	}
	p := &ShardProgress{Phase: t.Phase, Ended: map[task.State]int{}}
	if p.Phase == "" {
		p.Phase = task.PhasePlan
	}
	if t.Sharding == nil {
		return p, nil
	}
	p.Total, p.Registered = t.Sharding.Shards, t.Sharding.Registered
	m, err := fanin.New(ctx, c.js)
	if err != nil {
		return nil, err
	}
	if p.Ended, err = m.Counts(ctx, parent); err != nil {
		return nil, err
	}
	p.Unfinished = p.Total
	for _, n := range p.Ended {
		p.Unfinished -= n
	}
	return p, nil
}

// Result returns a succeeded task's result, reading it from the object
// store its record names (its capability's, AX_OBJECTS_<capability>; the
// legacy AX_OBJECTS for older records) when it was too large to keep in
// the task record. An object whose bytes are not those its executor
// reported (overwritten since) is an error wrapping ErrDigestMismatch.
func (c *Client) Result(ctx context.Context, id string) (json.RawMessage, error) {
	t, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.State != task.Succeeded {
		return nil, fmt.Errorf("task %s is %s, not succeeded", id, t.State)
	}
	if t.ResultObject == "" {
		return t.Result, nil
	}
	data, err := c.objects.Get(ctx, t.ResultBucket, t.ResultObject, t.ResultDigest)
	if err != nil {
		return nil, fmt.Errorf("read result %s of %s: %w", t.ResultObject, id, err)
	}
	return data, nil
}
