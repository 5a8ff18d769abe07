package task

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Limits of dynamic sharding.
const (
	// MaxShards bounds the shards one planner may return.
	MaxShards = 100_000
	// MaxShardableIDLen bounds a shardable task's id so its shard ids
	// (<id>/shard/<n>) stay within the 128-character id limit.
	MaxShardableIDLen = 100
	// InlineResultLimit is the largest result kept inside task records and
	// fan-in markers; a larger one is stored in the object store of its
	// task's capability (AX_OBJECTS_<capability>) and referenced by
	// result_object, result_bucket and result_digest.
	InlineResultLimit = 16 << 10
	// WideFanIn is the number of dependencies above which a waiting task
	// counts its succeeded upstreams with fan-in markers instead of
	// re-reading every upstream on each completion.
	WideFanIn = 16
)

// Phases of a shardable task (Task.Phase).
const (
	// PhasePlan: its planner runs (the first step; "" means the same).
	PhasePlan = "plan"
	// PhaseShards: it waits in state waiting for its shards to end.
	PhaseShards = "shards"
	// PhaseAggregate: its aggregator runs over the shards' outcomes.
	PhaseAggregate = "aggregate"
)

// ShardSpec is one entry of a planner's result. Zero fields inherit the
// parent's priority, capability and estimated cost.
type ShardSpec struct {
	// Payload is the shard's own payload.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Priority overrides the parent's priority. Nil: the parent's.
	Priority *int `json:"priority,omitempty"`
	// Capability overrides the parent's capability. Empty: the parent's.
	Capability string `json:"capability,omitempty"`
	// EstimatedCost is the shard's weight against an executor's capacity.
	// Zero: DefaultEstimatedCost.
	EstimatedCost float64 `json:"estimated_cost,omitempty"`
}

// Plan is a planner's result as stored in the object store.
type Plan struct {
	// Shards are the planned shards; shard n is Shards[n].
	Shards []ShardSpec `json:"shards"`
}

// PlanRef is what a planner's report carries: where its plan is stored.
type PlanRef struct {
	// Object is the plan's name in the object store Bucket: it must be
	// PlanObject(task id, execution id).
	Object string `json:"object"`
	// Shards is the number of shards in the plan.
	Shards int `json:"shards"`
	// Aggregate says whether an aggregator runs once the shards ended;
	// without one the parent succeeds with a summary.
	Aggregate bool `json:"aggregate"`
	// Bucket is the object store holding the plan: that of the task's
	// capability (AX_OBJECTS_<capability>). Empty: the legacy AX_OBJECTS
	// (plans written before per-capability stores).
	Bucket string `json:"bucket,omitempty"`
	// Digest is the plan object's SHA-256 ("SHA-256=<base64url>"),
	// required with a Bucket; the orchestrator refuses a plan whose bytes
	// do not match it.
	Digest string `json:"digest,omitempty"`
}

// Sharding is a shardable task's fan-out state, set when its plan is applied.
type Sharding struct {
	PlanRef
	// PlannedAt is when the plan was applied: the task has waited for its
	// shards since.
	PlannedAt time.Time `json:"planned_at"`
	// Registered is set once every shard task exists.
	Registered bool `json:"registered,omitempty"`
	// EndedBy is the shard whose end moved the task out of its shard
	// phase (a replay of that shard's end re-ensures the move's effects).
	EndedBy string `json:"ended_by,omitempty"`
}

// ShardSummary is a sharded parent's result when it has no aggregator, and
// what its aggregator is told about the shards.
type ShardSummary struct {
	// Shards is the number of shards.
	Shards int `json:"shards"`
	// Succeeded is the number of shards that succeeded.
	Succeeded int `json:"succeeded"`
	// NotOK is the number of shards that failed, were cancelled or expired.
	NotOK int `json:"not_succeeded"`
}

// MemberOutcome is a fan-in marker on ax.fanin.<waiter>.<member>.<state>:
// how one shard (or one upstream of a wide fan-in) ended.
type MemberOutcome struct {
	// Index is the shard's index (shards only).
	Index int `json:"index"`
	// ID is the member task's id.
	ID string `json:"id"`
	// State is the final state the member ended in.
	State State `json:"state"`
	// Result is the member's result when it is at most InlineResultLimit.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultObject names the result in the object store when it is larger.
	ResultObject string `json:"result_object,omitempty"`
	// Error is why a member did not succeed.
	Error string `json:"error,omitempty"`
	// ResultBucket is the object store holding ResultObject (the member's
	// capability's; empty: the legacy AX_OBJECTS).
	ResultBucket string `json:"result_bucket,omitempty"`
	// ResultDigest is ResultObject's SHA-256 as recorded in the member's
	// record (empty: unchecked).
	ResultDigest string `json:"result_digest,omitempty"`
}

// ShardSeparator joins a sharded task's id and a shard's index in the
// shard's id. Submitted ids may not contain it: those ids are the shards'.
const ShardSeparator = "/shard/"

// ShardID is the id of shard n of parent.
func ShardID(parent string, n int) string { return parent + ShardSeparator + strconv.Itoa(n) }

// IsShard reports whether t is a shard of a sharded parent.
func (t *Task) IsShard() bool { return t.Parent != "" }

// PlanObject is the object-store name of a planner's result.
func PlanObject(id, executionID string) string { return "plans/" + id + "/" + executionID }

// ResultObjectName is the object-store name of a large result.
func ResultObjectName(id, executionID string) string {
	return "results/" + id + "/" + executionID
}

// Validate checks a plan read back against its reference.
func (p Plan) Validate(ref PlanRef) error {
	switch {
	case len(p.Shards) != ref.Shards:
		return fmt.Errorf("plan %s holds %d shards, its report said %d", ref.Object, len(p.Shards), ref.Shards)
	case len(p.Shards) > MaxShards:
		return fmt.Errorf("plan %s holds %d shards; the limit is %d", ref.Object, len(p.Shards), MaxShards)
	}
	for i, s := range p.Shards {
		switch {
		case s.Priority != nil && (*s.Priority < 0 || *s.Priority > MaxPriority):
			return fmt.Errorf("shard %d: priority %d is out of range 0..%d", i, *s.Priority, MaxPriority)
		case s.Capability != "" && !ValidCapability(s.Capability):
			return fmt.Errorf("shard %d: capability %q is not one token of [A-Za-z0-9_-]", i, s.Capability)
		case s.EstimatedCost < 0 || s.EstimatedCost > 1e9:
			return fmt.Errorf("shard %d: estimated_cost %v is out of range", i, s.EstimatedCost)
		case len(s.Payload) > 0 && !json.Valid(s.Payload):
			return fmt.Errorf("shard %d: payload is not valid JSON", i)
		}
	}
	return nil
}
