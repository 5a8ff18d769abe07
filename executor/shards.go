package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Shard is one piece of work returned by a planner. Zero fields inherit
// the parent task's priority and capability; the estimated cost defaults to 1.
type Shard struct {
	// Payload is marshalled to JSON (a []byte or json.RawMessage is used as is).
	Payload any
	// Priority overrides the parent's priority when not nil.
	Priority *int
	// Capability overrides the parent's capability when not empty.
	Capability string
	// EstimatedCost is the shard's cost against executor capacity. Default 1.
	EstimatedCost float64
}

// Sharded handles a shardable task type (spec shardable: true) as map →
// shards → reduce:
//
//   - Plan runs as the task's first step and returns its shards (any number
//     up to task.MaxShards, including none). Each becomes a child task
//     <id>/shard/<n>, retried and audited like any task.
//   - Shard runs one shard; its Job has Parent and ShardIndex set.
//   - Aggregate, optional, runs once every shard ended, with their outcomes;
//     its result is the task's result. Without it the task succeeds with a
//     task.ShardSummary.
type Sharded struct {
	// Plan returns the task's shards. Required.
	Plan func(ctx context.Context, job *Job) ([]Shard, error)
	// Shard runs one shard. Required.
	Shard HandlerFunc
	// Aggregate combines the shards' outcomes into the task's result.
	// Optional.
	Aggregate func(ctx context.Context, job *Job, shards *ShardOutcomes) (any, error)
}

// ShardOutcome is how one shard ended, as handed to an aggregator.
type ShardOutcome struct {
	// Index is the shard's place in the plan.
	Index int
	// ID is the shard task's id, <parent>/shard/<index>.
	ID string
	// State is how the shard ended: succeeded, failed, cancelled or expired.
	State task.State
	// Result is the shard's result when it is at most
	// task.InlineResultLimit bytes; read a larger one with
	// ShardOutcomes.Result.
	Result json.RawMessage
	// ResultObject names a larger result in the object store ResultBucket.
	ResultObject string
	// Error says why a shard did not succeed.
	Error string
	// ResultBucket is the object store holding ResultObject: the shard's
	// capability's (empty: the legacy AX_OBJECTS).
	ResultBucket string
	// ResultDigest is ResultObject's SHA-256 as its executor reported it;
	// ShardOutcomes.Result checks the object against it.
	ResultDigest string
}

// ShardOutcomes are the outcomes of every shard of a task, by index.
type ShardOutcomes struct {
	// Shards holds every shard's outcome, by index.
	Shards []ShardOutcome
	// Succeeded counts the shards that succeeded.
	Succeeded int
	objects   *object.Stores
}

// Failed returns the shards that did not succeed (failed, cancelled or
// expired): what an aggregator under a min_shard_success policy reports on.
func (s *ShardOutcomes) Failed() []ShardOutcome {
	var out []ShardOutcome
	for _, o := range s.Shards {
		if o.State != task.Succeeded {
			out = append(out, o)
		}
	}
	return out
}

// Result returns shard i's result (i indexes Shards), reading it from the
// object store when it was too large to keep inline. An object whose bytes
// are not those its executor reported is an error wrapping
// ErrDigestMismatch.
func (s *ShardOutcomes) Result(ctx context.Context, i int) (json.RawMessage, error) {
	o := s.Shards[i]
	if o.ResultObject == "" {
		return o.Result, nil
	}
	if s.objects == nil {
		return nil, fmt.Errorf("read result %s of shard %s: the outcomes were not made by an executor", o.ResultObject, o.ID)
	}
	data, err := s.objects.Get(ctx, o.ResultBucket, o.ResultObject, o.ResultDigest)
	if err != nil {
		return nil, fmt.Errorf("read result %s of shard %s: %w", o.ResultObject, o.ID, err)
	}
	return data, nil
}

// HandleShards registers the planner, shard handler and optional
// aggregator of a shardable task type. It panics if Plan or Shard is nil.
func (e *Executor) HandleShards(taskType string, s Sharded) {
	if s.Plan == nil || s.Shard == nil {
		panic("executor: HandleShards of " + taskType + " needs Plan and Shard")
	}
	e.Handle(taskType, &shardedHandler{s})
}

// shardedHandler runs the shards of a sharded type as its Handler and
// keeps its planner and aggregator.
type shardedHandler struct{ Sharded }

func (h *shardedHandler) Handle(ctx context.Context, job *Job) (any, error) { return h.Shard(ctx, job) }

// callSharded runs the step of a shardable task or shard that t is at.
func (e *Executor) callSharded(ctx context.Context, h Handler, t task.Task, job *Job) (any, *task.PlanRef, error) {
	sh, ok := h.(*shardedHandler)
	switch {
	case !ok:
		return nil, nil, Permanent(fmt.Errorf("task type %q is shardable, but executor %s registered it with Handle, not HandleShards", t.Type, e.cfg.ID))
	case t.Phase == task.PhaseAggregate:
		res, err := e.aggregate(ctx, sh, t, job)
		return res, nil, err
	default:
		return e.plan(ctx, sh, t, job)
	}
}

// plan runs the planner and stores its shards in the object store.
func (e *Executor) plan(ctx context.Context, h *shardedHandler, t task.Task, job *Job) (any, *task.PlanRef, error) {
	shards, err := h.Plan(ctx, job)
	if err != nil {
		return nil, nil, err
	}
	if len(shards) > task.MaxShards {
		return nil, nil, Permanent(fmt.Errorf("the planner returned %d shards; the limit is %d", len(shards), task.MaxShards))
	}
	plan := task.Plan{Shards: make([]task.ShardSpec, len(shards))}
	for i, s := range shards {
		spec := task.ShardSpec{Priority: s.Priority, Capability: s.Capability, EstimatedCost: s.EstimatedCost}
		if spec.Payload, err = encodeResult(s.Payload); err != nil {
			return nil, nil, Permanent(fmt.Errorf("shard %d: payload: %w", i, err))
		}
		plan.Shards[i] = spec
	}
	ref := task.PlanRef{Object: task.PlanObject(t.ID, t.ExecutionID), Shards: len(shards), Aggregate: h.Aggregate != nil,
		Bucket: subject.ObjectBucket(t.Capability)}
	if err := plan.Validate(ref); err != nil {
		return nil, nil, Permanent(fmt.Errorf("the planner's result is invalid: %w", err))
	}
	data, err := json.Marshal(plan)
	if err != nil {
		return nil, nil, fmt.Errorf("encode plan: %w", err)
	}
	if ref.Digest, err = e.putObject(ctx, ref.Bucket, ref.Object, data); err != nil {
		return nil, nil, fmt.Errorf("store plan %s: %w", ref.Object, err)
	}
	return nil, &ref, nil
}

// aggregate reads the shards' outcomes once and runs the aggregator.
func (e *Executor) aggregate(ctx context.Context, h *shardedHandler, t task.Task, job *Job) (any, error) {
	if h.Aggregate == nil {
		return nil, errors.New("no aggregator registered for this type on this executor")
	}
	want := 0
	if t.Sharding != nil {
		want = t.Sharding.Shards
	}
	markers, err := e.fanin.Outcomes(ctx, t.ID, want)
	if err != nil {
		return nil, err
	}
	outs := &ShardOutcomes{Shards: make([]ShardOutcome, len(markers)), objects: e.objects}
	for i, m := range markers {
		outs.Shards[i] = ShardOutcome{Index: m.Index, ID: m.ID, State: m.State, Result: m.Result, ResultObject: m.ResultObject, Error: m.Error,
			ResultBucket: m.ResultBucket, ResultDigest: m.ResultDigest}
		if m.State == task.Succeeded {
			outs.Succeeded++
		}
	}
	return h.Aggregate(ctx, job, outs)
}

// storeLargeResult moves a report's result over task.InlineResultLimit
// into the object store of the task's capability, and points the report at
// it (name, store and digest) instead. The result leaves the report either
// way.
func (e *Executor) storeLargeResult(ctx context.Context, t task.Task, r *task.Report) error {
	name, bucket, result := task.ResultObjectName(t.ID, t.ExecutionID), subject.ObjectBucket(t.Capability), r.Result
	r.Result = nil
	digest, err := e.putObject(ctx, bucket, name, result)
	if err != nil {
		return fmt.Errorf("store result (%d bytes) as %s: %w", len(result), name, err)
	}
	r.ResultObject, r.ResultBucket, r.ResultDigest = name, bucket, digest
	return nil
}

// putObject stores an object in bucket and returns its digest, riding out
// a NATS outage (no responders, a leader election) for up to
// putObjectPatience: an infrastructure error is not the handler's failure
// and should not use up the task's retries. A store that keeps failing
// longer fails the attempt instead, so its retry (a new execution, a new
// object name) runs soon rather than the task sitting "running" until its
// timeout while this executor heart-beats. (A cluster run saw three
// planners stuck that way after a partition.) A capability's store is
// created by the orchestrator before the capability's first dispatch; one
// missing (removed by hand, or a task dispatched by an orchestrator older
// than per-capability stores) fails the attempt at once, and its retry's
// dispatch creates it.
func (e *Executor) putObject(ctx context.Context, bucket, name string, data []byte) (string, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	bo.MaxElapsedTime = putObjectPatience
	tries := 0
	var digest string
	err := backoff.Retry(func() error {
		// Each try has its own deadline: a chunk's acknowledgement lost in
		// a partition would otherwise hold the put until the attempt's
		// timeout.
		tctx, cancel := context.WithTimeout(ctx, putObjectTry)
		var err error
		digest, err = e.objects.Put(tctx, bucket, name, data)
		cancel()
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return backoff.Permanent(err)
		}
		if err != nil {
			tries++
			e.log.Warn("storing an object failed; retrying", "object", name, "bucket", bucket, "tries", tries, "error", err)
		}
		return err
	}, backoff.WithContext(bo, ctx))
	return digest, err
}

// putObjectPatience bounds how long putObject retries one object, and
// putObjectTry one try.
const (
	putObjectPatience = time.Minute
	putObjectTry      = 15 * time.Second
)
