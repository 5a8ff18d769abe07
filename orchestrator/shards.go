package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/fanin"
	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/task"
)

// shardWorkers bounds the concurrent writes while registering or
// cancelling the shards of one parent.
const shardWorkers = 32

// A sharded task moves through three phases:
//
//	running (plan) → waiting (shards) → ready/running (aggregate) → succeeded…
//
// Its planner's report moves it to waiting with the plan's reference. The
// effects of that state register the shards idempotently (each shard is a
// compare-and-set creation of <parent>/shard/<n>), then mark the parent
// registered. Each shard that ends writes one fan-in marker and asks the
// parent's counting consumer how many ended (internal/fanin): the shard
// that completes the set moves the parent on. A parent that ends any other
// way cancels its unfinished shards.

// ensureShards registers a planned parent's shards unless done, then
// checks whether they all ended already.
func (o *Orchestrator) ensureShards(ctx context.Context, parent task.Task) error {
	if !parent.Sharding.Registered {
		if ok, err := o.registerShards(ctx, parent); !ok || err != nil {
			return err
		}
		cur, err := o.markRegistered(ctx, parent.ID)
		if err != nil {
			return err
		}
		if cur.State.Terminal() && cur.State != task.Succeeded {
			// It ended while its shards were being created: cancel any
			// created after its cancellation swept past them.
			return o.cancelShards(ctx, cur)
		}
		parent = cur
	}
	return o.checkFanIn(ctx, parent, "", countMarkers)
}

// registerShards creates every shard of the parent's plan; existing ones
// (a replay after a crash) have the effects of their state ensured. A plan
// that cannot be used fails the parent (ok false).
func (o *Orchestrator) registerShards(ctx context.Context, parent task.Task) (ok bool, err error) {
	ref := parent.Sharding.PlanRef
	data, err := o.objects.Get(ctx, ref.Bucket, ref.Object, ref.Digest)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrBucketNotFound):
		return false, o.failParent(ctx, parent.ID, "", fmt.Sprintf("its plan %s is missing from %s", ref.Object, object.Bucket(ref.Bucket)))
	case errors.Is(err, object.ErrDigestMismatch) || errors.Is(err, object.ErrNotObjectStore):
		// Overwritten after its planner reported it: not the plan.
		return false, o.failParent(ctx, parent.ID, "", "its plan cannot be used: "+err.Error())
	case err != nil:
		return false, fmt.Errorf("read plan %s of %s: %w", ref.Object, parent.ID, err)
	}
	var plan task.Plan
	if err := json.Unmarshal(data, &plan); err != nil {
		return false, o.failParent(ctx, parent.ID, "", fmt.Sprintf("its plan %s is not valid JSON: %v", parent.Sharding.Object, err))
	}
	if err := plan.Validate(parent.Sharding.PlanRef); err != nil {
		return false, o.failParent(ctx, parent.ID, "", "its plan is invalid: "+err.Error())
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(shardWorkers)
	for n, s := range plan.Shards {
		g.Go(func() error { return o.createShard(gctx, parent, n, s) })
	}
	if err := g.Wait(); err != nil {
		var foreign errForeignShard
		if errors.As(err, &foreign) {
			return false, o.failParent(ctx, parent.ID, "", "its shards cannot be registered: "+foreign.Error())
		}
		return false, fmt.Errorf("register shards of %s: %w", parent.ID, err)
	}
	o.log.Debug("shards registered", slog.String("task_id", parent.ID), slog.Int("shards", len(plan.Shards)))
	return true, nil
}

// createShard creates shard n of parent, or ensures the effects of its
// state if it exists.
func (o *Orchestrator) createShard(ctx context.Context, parent task.Task, n int, s task.ShardSpec) error {
	spec := task.Spec{ID: task.ShardID(parent.ID, n), Type: parent.Type, Payload: s.Payload,
		Priority: new(parent.PriorityLevel()), Capability: parent.Capability, MaxRetries: new(parent.RetryLimit()),
		Timeout: parent.Timeout, EstimatedCost: task.DefaultEstimatedCost,
		DispatchTimeout: parent.DispatchTimeout, MaxDispatches: parent.MaxDispatches,
		FairnessKey: parent.FairnessKey, ConcurrencyKey: parent.ConcurrencyKey}
	if s.Priority != nil {
		spec.Priority = new(*s.Priority)
	}
	if s.Capability != "" {
		spec.Capability = s.Capability
	}
	if s.EstimatedCost > 0 {
		spec.EstimatedCost = s.EstimatedCost
	}
	t := task.Task{Spec: spec, SubmittedAt: o.now(), Parent: parent.ID, ShardIndex: n, TraceParent: parent.TraceParent}
	reason := fmt.Sprintf("shard %d of %s", n, parent.ID)
	switch {
	case parent.MaxParallelShards > 0 && n >= parent.MaxParallelShards:
		t.State, t.Parked = task.Waiting, true
		reason += fmt.Sprintf("; waits for a free slot (max_parallel_shards %d)", parent.MaxParallelShards)
	case o.gateOpen(o.now(), spec.Type):
		t = o.readyNext(t, 1)
	default:
		t.State = task.Waiting // its effects hold it
	}
	rev, err := o.write(ctx, task.Task{}, 0, &t, reason)
	if errors.Is(err, store.ErrConflict) {
		t, rev, err = o.store.Get(ctx, spec.ID)
		if err == nil && (t.Parent != parent.ID || t.ShardIndex != n) {
			// Shard ids are reserved at submission; one that exists and is
			// not this parent's (from an older version) must not be waited
			// for as if it were.
			return errForeignShard{id: spec.ID}
		}
	}
	if err != nil {
		return fmt.Errorf("create shard %s: %w", spec.ID, err)
	}
	return o.ensureEffects(ctx, t, rev)
}

// errForeignShard: a task with a shard's id exists and is not that shard.
type errForeignShard struct{ id string }

func (e errForeignShard) Error() string {
	return fmt.Sprintf("task %s exists and is not a shard of this task", e.id)
}

// markRegistered records that every shard of a parent exists and returns
// the parent's record.
func (o *Orchestrator) markRegistered(ctx context.Context, id string) (task.Task, error) {
	for range maxCASRetries {
		t, rev, err := o.store.Get(ctx, id)
		if err != nil {
			return t, err
		}
		if t.State != task.Waiting || t.Phase != task.PhaseShards || t.Sharding.Registered {
			return t, nil
		}
		sh := *t.Sharding
		sh.Registered = true
		t.Sharding = &sh
		t.UpdatedAt = o.now()
		ev := task.Event{Kind: task.KindShardsRegistered, From: t.State, To: t.State, At: t.UpdatedAt,
			Actor: o.cfg.NodeID, Reason: fmt.Sprintf("%d shards registered", sh.Shards), Task: t}
		if _, err = o.store.Write(ctx, ev, rev); err == nil {
			return t, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return t, err
		}
	}
	return task.Task{}, fmt.Errorf("mark shards of %s registered: %w", id, consume.ErrContended)
}

// shardEnded is the effect of a shard reaching a final state: its fan-in
// marker, the release of the next parked shard, and the parent's progress.
func (o *Orchestrator) shardEnded(ctx context.Context, t task.Task) error {
	out, count, err := o.markShard(ctx, t)
	if err != nil {
		return err
	}
	parent, prev, err := o.store.Get(ctx, t.Parent)
	if err != nil {
		return fmt.Errorf("shard %s: parent: %w", t.ID, err)
	}
	if parent.State != task.Waiting || parent.Phase != task.PhaseShards {
		if parent.Sharding != nil && parent.Sharding.EndedBy == t.ID {
			// This shard moved the parent on; a crash may have cut the
			// effects of that move (this is the replay).
			return o.ensureEffects(ctx, parent, prev)
		}
		return nil
	}
	if l := parent.MaxParallelShards; l > 0 && t.ShardIndex+l < parent.Sharding.Shards {
		if err := o.releaseSlot(ctx, task.ShardID(parent.ID, t.ShardIndex+l)); err != nil {
			return err
		}
	}
	if t.State != task.Succeeded && parent.MinShardSuccess == 0 {
		return o.failParent(ctx, parent.ID, t.ID, fmt.Sprintf("shard %s is %s: %s", t.ID, t.State, out.Error))
	}
	return o.checkFanIn(ctx, parent, t.ID, count)
}

// markShard writes a finished shard's fan-in marker (once) and returns its
// parent's count of ended shards after it.
func (o *Orchestrator) markShard(ctx context.Context, t task.Task) (task.MemberOutcome, int, error) {
	out := task.MemberOutcome{Index: t.ShardIndex, ID: t.ID, State: t.State, Result: t.Result, ResultObject: t.ResultObject,
		ResultBucket: t.ResultBucket, ResultDigest: t.ResultDigest}
	if t.State != task.Succeeded {
		out.Error = t.Reason
		if n := len(t.Errors); n > 0 && t.State == task.Failed {
			out.Error = t.Errors[n-1].Error
		}
	}
	n, err := o.fanin.Mark(ctx, t.Parent, strconv.Itoa(t.ShardIndex), out)
	return out, n, err
}

// checkSlot is the effect of a parked shard: it is released if the shard
// whose slot it waits for (index - max_parallel_shards) already ended. With
// shardEnded, which marks before it releases, one of the two always sees
// the other.
func (o *Orchestrator) checkSlot(ctx context.Context, t task.Task) error {
	parent, _, err := o.store.Get(ctx, t.Parent)
	if err != nil {
		return fmt.Errorf("shard %s: parent: %w", t.ID, err)
	}
	if parent.State != task.Waiting || parent.Phase != task.PhaseShards || parent.MaxParallelShards <= 0 {
		return nil
	}
	ended, err := o.fanin.Ended(ctx, parent.ID, strconv.Itoa(t.ShardIndex-parent.MaxParallelShards))
	if err != nil || !ended {
		return err
	}
	return o.releaseSlot(ctx, t.ID)
}

// releaseSlot un-parks a shard; its effects then make it ready. A shard
// released before has its effects ensured: a crash may have cut them.
func (o *Orchestrator) releaseSlot(ctx context.Context, id string) error {
	for range maxCASRetries {
		t, rev, err := o.store.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil // not registered yet: its registration checks the slot
		}
		if err != nil {
			return err
		}
		switch {
		case t.State == task.Waiting && t.Parked:
		case t.State == task.Waiting, t.State == task.Ready:
			return o.ensureEffects(ctx, t, rev)
		default:
			return nil
		}
		next := t
		next.Parked = false
		newRev, err := o.write(ctx, t, rev, &next, "a shard slot is free")
		if err == nil {
			return o.ensureEffects(ctx, next, newRev)
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("release shard %s: %w", id, consume.ErrContended)
}

// countMarkers, as checkFanIn's count, asks it to count the markers.
const countMarkers = -1

// checkFanIn moves a parent on once every shard ended: to its aggregator,
// or straight to succeeded without one, or to failed when too few shards
// succeeded.
// parent is a record read after the end being applied (the move itself is
// a compare-and-set on a fresh read); by names the shard whose end is being
// applied ("" from registration or the reconciler). count is the parent's
// counter after that end, or countMarkers: the markers are then counted by
// state, in one read of the stream leader's subject index, as they are to
// confirm a counter that reached the total (see package fanin). The
// decision rests on that one read, never on counts read apart.
func (o *Orchestrator) checkFanIn(ctx context.Context, parent task.Task, by string, count int) error {
	if parent.State != task.Waiting || parent.Phase != task.PhaseShards {
		return nil
	}
	id, total := parent.ID, parent.Sharding.Shards
	if count != countMarkers && count < total {
		return nil // the last shard's end moves it on (or the reconciler)
	}
	// The counter reached the total (a hint: see package fanin): count
	// the markers by state, in one leader read.
	counts, err := o.fanin.Counts(ctx, id)
	if err != nil {
		return err
	}
	if fanin.Total(counts) < total {
		return nil // the last shard's end moves it on (or the reconciler)
	}
	succeeded := counts[task.Succeeded]
	_, err = o.transition(ctx, id, func(t task.Task, rev uint64) (*task.Task, string, error) {
		return o.decided(ctx, t, rev, lifecycle.ShardsEnded(&t, succeeded, total, by, o.env()))
	})
	return err
}

// failParent fails a parent still in its shard phase; by names the shard
// that failed it, if any.
func (o *Orchestrator) failParent(ctx context.Context, id, by, why string) error {
	_, err := o.transition(ctx, id, func(t task.Task, rev uint64) (*task.Task, string, error) {
		return o.decided(ctx, t, rev, lifecycle.ShardsFailed(&t, by, why, o.env()))
	})
	return err
}

// cancelShards cancels every unfinished shard of a parent that ended
// without its shards (cancelled, expired, failed fast).
func (o *Orchestrator) cancelShards(ctx context.Context, parent task.Task) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(shardWorkers)
	reason := fmt.Sprintf("parent %s is %s", parent.ID, parent.State)
	for n := range parent.Sharding.Shards {
		g.Go(func() error {
			ended := false
			t, err := o.transition(gctx, task.ShardID(parent.ID, n), func(t task.Task, _ uint64) (*task.Task, string, error) {
				d := lifecycle.Cancel(&t, reason, o.env())
				if ended = d.Verdict == lifecycle.Refuse; ended {
					return nil, "", nil
				}
				return &d.Next, d.Reason, nil
			})
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err == nil && ended {
				// Ended earlier (or cancelled by a sweep a crash cut short):
				// make sure its marker exists so the counts add up.
				_, _, err = o.markShard(gctx, t)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("cancel shards of %s: %w", parent.ID, err)
	}
	return nil
}

// fireFanIn is a re-count timer armed by versions that counted fan-ins
// with a consumer per waiter; none is armed now. It counts the markers: a
// sharded parent moves on if every shard ended; a wide fan-in task is
// released if every upstream succeeded. A parent that already moved on has
// the effects of its move ensured.
func (o *Orchestrator) fireFanIn(ctx context.Context, f timerFire) error {
	t, rev, err := o.store.Get(ctx, f.ID)
	if err != nil {
		return ignoreNotFound(err)
	}
	switch {
	case t.Sharding != nil && t.State == task.Waiting && t.Phase == task.PhaseShards:
		return o.checkFanIn(ctx, t, "", countMarkers)
	case t.Sharding != nil:
		return o.ensureEffects(ctx, t, rev)
	case t.State == task.Waiting && len(t.DependsOn) > task.WideFanIn:
		return o.resolveWaiting(ctx, t, rev, false)
	}
	return nil
}
