package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// objectsEnv is a server and an orchestrator, with the means to run an
// attempt by hand, as an executor of a capability nobody serves would.
type objectsEnv struct {
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
	st  *store.Store
	c   *sdk.Client
	ctx context.Context
}

func newObjectsEnv(t *testing.T) *objectsEnv {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	e := &objectsEnv{url: srv.URL(), nc: testenv.Conn(t, srv.URL()), c: testenv.Client(t, srv.URL()), ctx: testenv.Context(t, 60*time.Second)}
	e.js, _ = jetstream.New(e.nc)
	var err error
	if e.st, err = store.New(e.ctx, e.js); err != nil {
		t.Fatal(err)
	}
	return e
}

// handAttempt submits s, waits until it is dispatched and marks its attempt
// running by hand; it returns a report of that attempt to fill in.
func (e *objectsEnv) handAttempt(t *testing.T, s task.Spec) task.Report {
	t.Helper()
	if _, err := e.c.Submit(e.ctx, s); err != nil {
		t.Fatal(err)
	}
	var ready task.Task
	var rev uint64
	testenv.Eventually(t, 10*time.Second, s.ID+" ready", func() bool {
		var err error
		ready, rev, err = e.st.Get(e.ctx, s.ID)
		return err == nil && ready.State == task.Ready
	})
	now := time.Now().UTC()
	claimRev, err := e.st.Write(e.ctx, task.Event{Kind: task.KindTransition, From: task.Ready, To: task.Running, At: now,
		Actor: "hand", Task: ready.Claimed("hand", now)}, rev)
	if err != nil {
		t.Fatal(err)
	}
	return task.Report{ID: s.ID, Type: s.Type, ExecutionID: ready.ExecutionID, Attempt: 1, Status: task.OutcomeSucceeded,
		Executor: "hand", StartedAt: now, FinishedAt: now, DispatchRevision: rev, ClaimRevision: claimRev,
		Token: testenv.Token(t, e.c.Conn(), s.ID, ready.ExecutionID)}
}

func (e *objectsEnv) report(t *testing.T, r task.Report) {
	t.Helper()
	data, _ := json.Marshal(r)
	publishRaw(t, e.nc, subject.Completed(r.Type), data)
}

// put stores data in bucket and returns its digest.
func (e *objectsEnv) put(t *testing.T, bucket, name string, data []byte) string {
	t.Helper()
	obs, err := e.js.ObjectStore(e.ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(e.ctx, name, data); err != nil {
		t.Fatal(err)
	}
	return object.Digest(data)
}

func (e *objectsEnv) wait(t *testing.T, id string, want task.State) *task.Task {
	t.Helper()
	got, err := e.c.Wait(e.ctx, id)
	if err != nil || got.State != want {
		t.Fatalf("%s: %+v, %v; want %s", id, got, err, want)
	}
	return got
}

// An object overwritten after its executor reported it is refused by
// every reader with an error naming it: a dependent's handler, the SDK, an
// aggregator, and the orchestrator reading a plan.
func TestTamperedObjectsAreRefused(t *testing.T) {
	t.Parallel()
	e := newObjectsEnv(t)
	ex := testenv.Executor(t, e.url, executor.Config{Capacity: 8})
	big := strings.Repeat("x", task.InlineResultLimit+1)
	ex.HandleFunc("large", func(context.Context, *executor.Job) (any, error) { return part{N: 1, Pad: big}, nil })
	ex.HandleFunc("read", func(ctx context.Context, j *executor.Job) (any, error) {
		err := j.UpstreamResult(ctx, "large", nil)
		switch {
		case err == nil:
			return nil, executor.Permanent(errors.New("read the tampered bytes"))
		case !errors.Is(err, executor.ErrDigestMismatch):
			return nil, executor.Permanent(fmt.Errorf("not a digest mismatch: %w", err))
		}
		return nil, executor.Permanent(err)
	})
	release := make(chan struct{})
	ex.HandleShards("split", executor.Sharded{
		Plan: numbers(2),
		Shard: func(ctx context.Context, j *executor.Job) (any, error) {
			if j.ShardIndex == 1 {
				return big, nil
			}
			select { // until shard 1's object was tampered with
			case <-release:
			case <-ctx.Done():
			}
			return "small", nil
		},
		Aggregate: func(ctx context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			_, err := s.Result(ctx, 1)
			if err == nil || !errors.Is(err, executor.ErrDigestMismatch) {
				return nil, executor.Permanent(fmt.Errorf("not a digest mismatch: %v", err))
			}
			return nil, executor.Permanent(err)
		},
	})
	testenv.Start(t, ex)

	// An upstream's large result.
	if _, err := e.c.Submit(e.ctx, newSpec("large", "large")); err != nil {
		t.Fatal(err)
	}
	large := e.wait(t, "large", task.Succeeded)
	e.put(t, large.ResultBucket, large.ResultObject, []byte(`{"n":1000000}`))
	_, err := e.c.Result(e.ctx, "large")
	if !errors.Is(err, sdk.ErrDigestMismatch) || !strings.Contains(err.Error(), large.ResultObject) {
		t.Fatalf("the SDK reading a tampered result: %v; want a digest mismatch naming %s", err, large.ResultObject)
	}
	read := newSpec("read", "read", "large")
	read.MaxRetries = new(0)
	if _, err := e.c.Submit(e.ctx, read); err != nil {
		t.Fatal(err)
	}
	got := e.wait(t, "read", task.Failed)
	if !strings.Contains(got.Reason, "digest mismatch") || !strings.Contains(got.Reason, large.ResultObject) {
		t.Fatalf("the dependent's failure: %q; want a digest mismatch naming %s", got.Reason, large.ResultObject)
	}

	// A shard's large result, read by the aggregator.
	s, _ := task.New("split", nil)
	s.ID, s.Shardable, s.MaxRetries = "split", true, new(0)
	if _, err := e.c.Submit(e.ctx, s); err != nil {
		t.Fatal(err)
	}
	shard := e.wait(t, task.ShardID("split", 1), task.Succeeded)
	e.put(t, shard.ResultBucket, shard.ResultObject, []byte(`"forged"`))
	close(release)
	got = e.wait(t, "split", task.Failed)
	if !strings.Contains(got.Reason, "digest mismatch") || !strings.Contains(got.Reason, shard.ResultObject) {
		t.Fatalf("the aggregator's failure: %q; want a digest mismatch naming %s", got.Reason, shard.ResultObject)
	}

	// A plan, replaced between its report and the orchestrator's read.
	p, _ := task.New("split", nil)
	p.ID, p.Shardable, p.Capability = "planned", true, "planners"
	r := e.handAttempt(t, p)
	plan, _ := json.Marshal(task.Plan{Shards: []task.ShardSpec{{Payload: json.RawMessage(`1`)}}})
	forged, _ := json.Marshal(task.Plan{Shards: []task.ShardSpec{{Payload: json.RawMessage(`2`), Capability: "elsewhere"}}})
	ref := task.PlanRef{Object: task.PlanObject(p.ID, r.ExecutionID), Shards: 1, Bucket: subject.ObjectBucket("planners")}
	ref.Digest = e.put(t, ref.Bucket, ref.Object, plan)
	e.put(t, ref.Bucket, ref.Object, forged)
	r.Plan = &ref
	e.report(t, r)
	got = e.wait(t, "planned", task.Failed)
	if !strings.Contains(got.Reason, "digest mismatch") || !strings.Contains(got.Reason, ref.Object) {
		t.Fatalf("the planned task's failure: %q; want a digest mismatch naming %s", got.Reason, ref.Object)
	}
	if _, err := e.c.Get(e.ctx, task.ShardID("planned", 0)); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("a shard of the forged plan: %v; want none created", err)
	}
}

// A report may name only its own attempt's objects, in its task's
// capability's store, with a digest: anything else fails the attempt
// permanently, saying why, and the object is not recorded.
func TestReportsNameOnlyTheirOwnObjects(t *testing.T) {
	t.Parallel()
	e := newObjectsEnv(t)
	own := subject.ObjectBucket("hand")
	data := []byte(`"` + strings.Repeat("v", task.InlineResultLimit+1) + `"`)
	for _, c := range []struct {
		name, why string
		shardable bool
		mod       func(r *task.Report)
	}{
		{"other-task", "is not this attempt's", false, func(r *task.Report) {
			r.ResultObject, r.ResultBucket = task.ResultObjectName("victim", r.ExecutionID), own
		}},
		{"other-execution", "is not this attempt's", false, func(r *task.Report) {
			r.ResultObject, r.ResultBucket = task.ResultObjectName(r.ID, "an-earlier-execution"), own
		}},
		{"other-store", "not in " + own, false, func(r *task.Report) {
			r.ResultObject, r.ResultBucket = task.ResultObjectName(r.ID, r.ExecutionID), subject.ObjectBucket("pdf")
		}},
		{"no-digest", "has no valid digest", false, func(r *task.Report) {
			r.ResultObject, r.ResultBucket = task.ResultObjectName(r.ID, r.ExecutionID), own
			r.ResultDigest = ""
		}},
		{"other-plan", "is not this attempt's", true, func(r *task.Report) {
			r.Plan = &task.PlanRef{Object: task.PlanObject("victim", r.ExecutionID), Shards: 1, Bucket: own, Digest: object.Digest(data)}
		}},
		{"plan-other-store", "not in " + own, true, func(r *task.Report) {
			r.Plan = &task.PlanRef{Object: task.PlanObject(r.ID, r.ExecutionID), Shards: 1, Bucket: subject.ObjectBucket("pdf"), Digest: object.Digest(data)}
		}},
	} {
		s, _ := task.New("any", nil)
		s.ID, s.Capability, s.Shardable = c.name, "hand", c.shardable
		r := e.handAttempt(t, s)
		r.ResultDigest = object.Digest(data)
		c.mod(&r)
		e.report(t, r)
		got := e.wait(t, c.name, task.Failed)
		if !strings.Contains(got.Reason, "failed permanently") || !strings.Contains(got.Reason, c.why) {
			t.Errorf("%s: reason %q; want a permanent failure saying %q", c.name, got.Reason, c.why)
		}
		if got.ResultObject != "" || got.Sharding != nil {
			t.Errorf("%s: recorded %q %+v", c.name, got.ResultObject, got.Sharding)
		}
	}
}

// Records written before per-capability stores and digests name their
// objects in AX_OBJECTS without a digest (and an executor of that time
// reports them so): they are still read, by the SDK and by a dependent.
func TestLegacyObjectsAreRead(t *testing.T) {
	t.Parallel()
	e := newObjectsEnv(t)
	ex := testenv.Executor(t, e.url, executor.Config{})
	ex.HandleFunc("use", func(ctx context.Context, j *executor.Job) (any, error) {
		var p part
		if err := j.UpstreamResult(ctx, "legacy", &p); err != nil {
			return nil, executor.Permanent(err)
		}
		return p.N, nil
	})
	testenv.Start(t, ex)
	s, _ := task.New("old", nil)
	s.ID, s.Capability = "legacy", "hand"
	r := e.handAttempt(t, s)
	data, _ := json.Marshal(part{N: 7, Pad: strings.Repeat("o", task.InlineResultLimit)})
	r.ResultObject = task.ResultObjectName(r.ID, r.ExecutionID)
	e.put(t, subject.BucketObjects, r.ResultObject, data)
	e.report(t, r)
	got := e.wait(t, "legacy", task.Succeeded)
	if got.ResultObject != r.ResultObject || got.ResultBucket != "" || got.ResultDigest != "" {
		t.Fatalf("legacy record: %q %q %q", got.ResultObject, got.ResultBucket, got.ResultDigest)
	}
	if res, err := e.c.Result(e.ctx, "legacy"); err != nil || string(res) != string(data) {
		t.Fatalf("the SDK reading a legacy result: %d bytes, %v", len(res), err)
	}
	if ins, err := e.c.Inputs(e.ctx, "legacy"); err != nil || len(ins) != 0 {
		t.Fatalf("inputs: %+v, %v", ins, err)
	}
	if _, err := e.c.Submit(e.ctx, newSpec("use", "use", "legacy")); err != nil {
		t.Fatal(err)
	}
	if got := e.wait(t, "use", task.Succeeded); string(got.Result) != "7" {
		t.Fatalf("the dependent read %s, want 7", got.Result)
	}
}
