package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/fanin"
	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// shardEnv is an orchestrator, an executor and a client on a fresh server.
type shardEnv struct {
	url string
	ex  *executor.Executor
	c   *sdk.Client
	ctx context.Context
}

func newShardEnv(t *testing.T, cfg executor.Config) *shardEnv {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	if cfg.Capacity == 0 {
		cfg.Capacity = 64
	}
	return &shardEnv{url: srv.URL(), ex: testenv.Executor(t, srv.URL(), cfg), c: testenv.Client(t, srv.URL()),
		ctx: testenv.Context(t, 60*time.Second)}
}

// numbers plans n shards whose payloads are 0…n-1.
func numbers(n int) func(context.Context, *executor.Job) ([]executor.Shard, error) {
	return func(context.Context, *executor.Job) ([]executor.Shard, error) {
		out := make([]executor.Shard, n)
		for i := range out {
			out[i].Payload = i
		}
		return out, nil
	}
}

func payloadInt(t *testing.T, j *executor.Job) int {
	var n int
	if err := json.Unmarshal(j.Payload, &n); err != nil {
		t.Errorf("shard payload %s: %v", j.Payload, err)
	}
	return n
}

func submitSharded(t *testing.T, e *shardEnv, id string, mod func(*task.Spec)) {
	t.Helper()
	s, _ := task.New("split", nil)
	s.ID, s.Shardable = id, true
	if mod != nil {
		mod(&s)
	}
	if _, err := e.c.Submit(e.ctx, s); err != nil {
		t.Fatal(err)
	}
}

func waitState(t *testing.T, e *shardEnv, id string, want task.State) *task.Task {
	t.Helper()
	got, err := e.c.Wait(e.ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	if got.State != want {
		t.Fatalf("%s is %s (%s), want %s", id, got.State, got.Reason, want)
	}
	return got
}

func TestShardsPlanRunAggregate(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	var aggregations, downstream atomic.Int32
	var parentDoneBeforeDownstream atomic.Bool
	e.ex.HandleShards("split", executor.Sharded{
		Plan: numbers(50),
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			if j.Parent != "job" || j.ID != task.ShardID("job", j.ShardIndex) {
				t.Errorf("shard job %+v", j)
			}
			return payloadInt(t, j) * 2, nil
		},
		Aggregate: func(_ context.Context, j *executor.Job, s *executor.ShardOutcomes) (any, error) {
			aggregations.Add(1)
			if j.Phase != task.PhaseAggregate || len(s.Shards) != 50 || s.Succeeded != 50 {
				return nil, fmt.Errorf("aggregate got phase %q, %d shards, %d succeeded", j.Phase, len(s.Shards), s.Succeeded)
			}
			sum := 0
			for i, o := range s.Shards {
				var v int
				if o.Index != i || json.Unmarshal(o.Result, &v) != nil {
					return nil, fmt.Errorf("shard %d: %+v", i, o)
				}
				sum += v
			}
			return sum, nil
		},
	})
	e.ex.HandleFunc("after", func(ctx context.Context, _ *executor.Job) (any, error) {
		downstream.Add(1)
		p, err := e.c.Get(ctx, "job")
		parentDoneBeforeDownstream.Store(err == nil && p.State == task.Succeeded)
		return nil, nil
	})
	testenv.Start(t, e.ex)
	parent, _ := task.New("split", nil)
	parent.ID, parent.Shardable = "job", true
	after := newSpec("after", "after", "job")
	if _, err := e.c.SubmitGraph(e.ctx, []task.Spec{parent, after}); err != nil {
		t.Fatal(err)
	}
	got := waitState(t, e, "job", task.Succeeded)
	if string(got.Result) != "2450" || aggregations.Load() != 1 {
		t.Fatalf("result %s after %d aggregations", got.Result, aggregations.Load())
	}
	waitState(t, e, "after", task.Succeeded)
	if downstream.Load() != 1 || !parentDoneBeforeDownstream.Load() {
		t.Fatal("the dependent did not wait for the aggregate")
	}
	sh, err := e.c.Get(e.ctx, task.ShardID("job", 7))
	if err != nil || sh.State != task.Succeeded || sh.Parent != "job" || sh.ShardIndex != 7 || sh.PriorityLevel() != parent.PriorityLevel() {
		t.Fatalf("shard 7: %+v, %v", sh, err)
	}
	p, err := e.c.Shards(e.ctx, "job")
	if err != nil || p.Total != 50 || !p.Registered || p.Ended[task.Succeeded] != 50 || p.Unfinished != 0 {
		t.Fatalf("progress %+v, %v", p, err)
	}
	if path := transitions(t, e.c, "job"); strings.Join(path, " ") != ">ready ready>waiting waiting>ready ready>succeeded" {
		t.Fatalf("parent history %v", path)
	}
}

func TestShardsZeroOrWithoutAggregator(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	e.ex.HandleShards("split", executor.Sharded{
		Plan: func(_ context.Context, j *executor.Job) ([]executor.Shard, error) {
			var n int
			_ = json.Unmarshal(j.Payload, &n)
			return numbers(n)(nil, j)
		},
		Shard: func(context.Context, *executor.Job) (any, error) { return nil, nil },
	})
	testenv.Start(t, e.ex)
	for _, n := range []int{0, 3} {
		submitSharded(t, e, fmt.Sprintf("n%d", n), func(s *task.Spec) { s.Payload = []byte(fmt.Sprint(n)) })
	}
	for _, n := range []int{0, 3} {
		got := waitState(t, e, fmt.Sprintf("n%d", n), task.Succeeded)
		var sum task.ShardSummary
		if err := json.Unmarshal(got.Result, &sum); err != nil || sum.Shards != n || sum.Succeeded != n {
			t.Fatalf("n=%d: summary %s, %v", n, got.Result, err)
		}
	}
}

func TestShardsPlanErrors(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	e.ex.HandleShards("split", executor.Sharded{
		Plan:  numbers(task.MaxShards + 1),
		Shard: func(context.Context, *executor.Job) (any, error) { return nil, nil },
	})
	e.ex.HandleFunc("plain", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, e.ex)
	submitSharded(t, e, "huge", nil)
	got := waitState(t, e, "huge", task.Failed)
	if !strings.Contains(got.Reason, "100001 shards; the limit is 100000") || got.Attempt != 1 {
		t.Fatalf("reason %q after %d attempts", got.Reason, got.Attempt)
	}
	// A shardable task whose type has a plain handler fails with a clear error.
	s, _ := task.New("plain", nil)
	s.ID, s.Shardable = "misregistered", true
	if _, err := e.c.Submit(e.ctx, s); err != nil {
		t.Fatal(err)
	}
	got = waitState(t, e, "misregistered", task.Failed)
	if !strings.Contains(got.Reason, "not HandleShards") {
		t.Fatalf("reason %q", got.Reason)
	}
	// Bad policies are refused at submission.
	bad, _ := task.New("split", nil)
	bad.MaxParallelShards = 3
	if _, err := e.c.Submit(e.ctx, bad); err == nil || !strings.Contains(err.Error(), "only for shardable tasks") {
		t.Fatalf("submit max_parallel_shards without shardable: %v", err)
	}
	bad.Shardable, bad.MinShardSuccess = true, 1.5
	if _, err := e.c.Submit(e.ctx, bad); err == nil || !strings.Contains(err.Error(), "min_shard_success") {
		t.Fatalf("submit min_shard_success 1.5: %v", err)
	}
}

func TestShardsMaxParallel(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	var mu sync.Mutex
	running, peak, ran := 0, 0, 0
	e.ex.HandleShards("split", executor.Sharded{
		Plan: numbers(40),
		Shard: func(context.Context, *executor.Job) (any, error) {
			mu.Lock()
			running++
			ran++
			peak = max(peak, running)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil, nil
		},
	})
	testenv.Start(t, e.ex)
	submitSharded(t, e, "limited", func(s *task.Spec) { s.MaxParallelShards = 3 })
	waitState(t, e, "limited", task.Succeeded)
	mu.Lock()
	defer mu.Unlock()
	if peak > 3 || ran != 40 {
		t.Fatalf("peak %d shards at once (limit 3), %d runs", peak, ran)
	}
	parked, err := e.c.Get(e.ctx, task.ShardID("limited", 39))
	if err != nil || parked.Parked || parked.State != task.Succeeded {
		t.Fatalf("last shard %+v, %v", parked, err)
	}
}

func TestShardsFailFastCancelsTheRest(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	var aggregated atomic.Bool
	e.ex.HandleShards("split", executor.Sharded{
		Plan: numbers(20),
		Shard: func(ctx context.Context, j *executor.Job) (any, error) {
			if j.ShardIndex == 0 {
				return nil, executor.Permanent(errors.New("bad range"))
			}
			<-ctx.Done() // the rest run until cancelled
			return nil, ctx.Err()
		},
		Aggregate: func(context.Context, *executor.Job, *executor.ShardOutcomes) (any, error) {
			aggregated.Store(true)
			return nil, nil
		},
	})
	testenv.Start(t, e.ex)
	submitSharded(t, e, "ff", func(s *task.Spec) { s.MaxParallelShards = 5 })
	got := waitState(t, e, "ff", task.Failed)
	if !strings.Contains(got.Reason, "shard ff/shard/0 is failed: bad range") {
		t.Fatalf("reason %q", got.Reason)
	}
	testenv.Eventually(t, 20*time.Second, "every other shard cancelled", func() bool {
		p, err := e.c.Shards(e.ctx, "ff")
		return err == nil && p.Ended[task.Cancelled] == 19 && p.Unfinished == 0
	})
	if aggregated.Load() {
		t.Fatal("the aggregator ran for a failed parent")
	}
}

func TestShardsMinSuccessAggregatesFailures(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	e.ex.HandleShards("split", executor.Sharded{
		Plan: numbers(10),
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			if j.ShardIndex%5 == 4 {
				return nil, executor.Permanent(fmt.Errorf("shard %d broken", j.ShardIndex))
			}
			return j.ShardIndex, nil
		},
		Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			var failed []string
			for _, f := range s.Failed() {
				failed = append(failed, f.Error)
			}
			return map[string]any{"succeeded": s.Succeeded, "failed": failed}, nil
		},
	})
	testenv.Start(t, e.ex)
	submitSharded(t, e, "tolerant", func(s *task.Spec) { s.MinShardSuccess = 0.8 })
	submitSharded(t, e, "strict", func(s *task.Spec) { s.MinShardSuccess = 0.9 })
	got := waitState(t, e, "tolerant", task.Succeeded)
	if want := `{"failed":["shard 4 broken","shard 9 broken"],"succeeded":8}`; string(got.Result) != want {
		t.Fatalf("aggregate %s, want %s", got.Result, want)
	}
	got = waitState(t, e, "strict", task.Failed)
	if !strings.Contains(got.Reason, "8 of 10 shards succeeded") {
		t.Fatalf("reason %q", got.Reason)
	}
}

func TestShardsCancelOrExpireParent(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	var started, stopped atomic.Int32
	e.ex.HandleShards("split", executor.Sharded{
		Plan: numbers(30),
		Shard: func(ctx context.Context, _ *executor.Job) (any, error) {
			started.Add(1)
			<-ctx.Done()
			stopped.Add(1)
			return nil, ctx.Err()
		},
	})
	testenv.Start(t, e.ex)
	submitSharded(t, e, "doomed", func(s *task.Spec) { s.MaxParallelShards = 10 })
	submitSharded(t, e, "late", func(s *task.Spec) { s.TTL = task.Duration(2 * time.Second) })
	testenv.Eventually(t, 20*time.Second, "shards running", func() bool { return started.Load() >= 10 })
	if _, err := e.c.Cancel(e.ctx, "doomed", "test"); err != nil {
		t.Fatal(err)
	}
	waitState(t, e, "late", task.Expired)
	for _, id := range []string{"doomed", "late"} {
		testenv.Eventually(t, 20*time.Second, "shards of "+id+" cancelled", func() bool {
			p, err := e.c.Shards(e.ctx, id)
			return err == nil && p.Total == 30 && p.Ended[task.Cancelled] == 30
		})
	}
	testenv.Eventually(t, 10*time.Second, "running handlers told to stop", func() bool {
		return stopped.Load() == started.Load()
	})
	if n := started.Load(); n > 40 {
		t.Fatalf("%d shards started; the parked ones must not run", n)
	}
}

// A shard's large result is stored in the object store of the shard's
// capability and the plan in the parent's, each with its digest; the
// aggregator and the SDK read them.
func TestShardsLargeResultsByReference(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{Capabilities: []string{task.DefaultCapability, "maps"}})
	big := strings.Repeat("x", task.InlineResultLimit+1)
	e.ex.HandleShards("split", executor.Sharded{
		Plan: func(ctx context.Context, j *executor.Job) ([]executor.Shard, error) {
			shards, err := numbers(3)(ctx, j)
			shards[1].Capability = "maps"
			return shards, err
		},
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			if j.ShardIndex == 1 {
				return big, nil
			}
			return "small", nil
		},
		Aggregate: func(ctx context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			if s.Shards[1].ResultObject == "" || s.Shards[1].Result != nil || string(s.Shards[0].Result) != `"small"` {
				return nil, fmt.Errorf("outcomes %+v", s.Shards)
			}
			if s.Shards[1].ResultBucket != subject.ObjectBucket("maps") || !object.ValidDigest(s.Shards[1].ResultDigest) {
				return nil, fmt.Errorf("shard 1's store and digest: %q %q", s.Shards[1].ResultBucket, s.Shards[1].ResultDigest)
			}
			r, err := s.Result(ctx, 1)
			if err != nil {
				return nil, err
			}
			return len(r), nil
		},
	})
	testenv.Start(t, e.ex)
	submitSharded(t, e, "big", nil)
	got := waitState(t, e, "big", task.Succeeded)
	if string(got.Result) != fmt.Sprint(len(big)+2) {
		t.Fatalf("aggregate %s", got.Result)
	}
	r, err := e.c.Result(e.ctx, task.ShardID("big", 1))
	if err != nil || len(r) != len(big)+2 {
		t.Fatalf("shard result: %d bytes, %v", len(r), err)
	}
	// The plan: in the parent's capability's store, with its digest.
	ref := got.Sharding.PlanRef
	if ref.Bucket != subject.ObjectBucket(task.DefaultCapability) || !strings.HasPrefix(ref.Object, "plans/big/") {
		t.Fatalf("plan reference %+v", ref)
	}
	js, _ := jetstream.New(testenv.Conn(t, e.url))
	obs, err := js.ObjectStore(e.ctx, ref.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := obs.GetBytes(e.ctx, ref.Object); err != nil || object.Digest(data) != ref.Digest {
		t.Fatalf("plan %s in %s: %v; want the digest recorded (%s)", ref.Object, ref.Bucket, err, ref.Digest)
	}
}

// A wide static fan-in counts its upstreams with markers: the sink is
// released once, after the last upstream.
func TestWideFanInGraph(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	var sinkRuns atomic.Int32
	e.ex.HandleFunc("leaf", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	e.ex.HandleFunc("sink", func(context.Context, *executor.Job) (any, error) { sinkRuns.Add(1); return nil, nil })
	e.ex.HandleFunc("fail", func(context.Context, *executor.Job) (any, error) { return nil, errors.New("upstream broke") })
	testenv.Start(t, e.ex)
	const width = 60
	var specs []task.Spec
	var leaves []string
	for i := range width {
		id := fmt.Sprintf("leaf-%d", i)
		leaves = append(leaves, id)
		specs = append(specs, newSpec(id, "leaf"))
	}
	specs = append(specs, newSpec("sink", "sink", leaves...))
	if _, err := e.c.SubmitGraph(e.ctx, specs); err != nil {
		t.Fatal(err)
	}
	waitState(t, e, "sink", task.Succeeded)
	if sinkRuns.Load() != 1 {
		t.Fatalf("sink ran %d times", sinkRuns.Load())
	}
	if path := transitions(t, e.c, "sink"); strings.Join(path, " ") != ">waiting waiting>ready ready>succeeded" {
		t.Fatalf("sink history %v", path)
	}
	// A wide fan-in whose upstream fails is cancelled.
	specs = specs[:0]
	leaves = leaves[:0]
	for i := range width {
		id := fmt.Sprintf("b-leaf-%d", i)
		leaves = append(leaves, id)
		typ := "leaf"
		if i == width/2 {
			typ = "fail"
		}
		s := newSpec(id, typ)
		s.MaxRetries = new(0)
		specs = append(specs, s)
	}
	specs = append(specs, newSpec("b-sink", "sink", leaves...))
	if _, err := e.c.SubmitGraph(e.ctx, specs); err != nil {
		t.Fatal(err)
	}
	waitState(t, e, "b-sink", task.Cancelled)
}

// A planner's report delivered twice registers one set of shards, each run
// once, and one aggregate.
func TestShardsPlanReportTwice(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	o := testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	nc := testenv.Conn(t, srv.URL())
	js, _ := jetstream.New(nc)
	st, err := store.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}

	// Plan the parent by hand, as an executor of capability "planners" would.
	s, _ := task.New("split", nil)
	s.ID, s.Shardable, s.Capability = "twice", true, "planners"
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	var ready task.Task
	var rev uint64
	testenv.Eventually(t, 10*time.Second, "parent ready", func() bool {
		ready, rev, err = st.Get(ctx, "twice")
		return err == nil && ready.State == task.Ready
	})
	now := time.Now().UTC()
	claimed := ready.Claimed("hand", now)
	claimRev, err := st.Write(ctx, task.Event{Kind: task.KindTransition, From: task.Ready, To: task.Running, At: now, Actor: "hand", Task: claimed}, rev)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	plan := task.Plan{Shards: make([]task.ShardSpec, n)}
	for i := range plan.Shards {
		plan.Shards[i] = task.ShardSpec{Payload: json.RawMessage(fmt.Sprint(i)), Capability: "default"}
	}
	ref := task.PlanRef{Object: task.PlanObject("twice", ready.ExecutionID), Shards: n, Aggregate: true}
	obs, err := js.ObjectStore(ctx, subject.BucketObjects)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(plan)
	if _, err := obs.PutBytes(ctx, ref.Object, data); err != nil {
		t.Fatal(err)
	}
	report, _ := json.Marshal(task.Report{ID: "twice", Type: "split", ExecutionID: ready.ExecutionID, Attempt: 1,
		Status: task.OutcomeSucceeded, Executor: "hand", StartedAt: now, FinishedAt: now,
		DispatchRevision: rev, ClaimRevision: claimRev, Plan: &ref, Token: testenv.Token(t, nc, "twice", ready.ExecutionID)})
	for i := range 2 {
		publishRaw(t, nc, subject.Completed("split"), report, jetstream.WithMsgID(fmt.Sprint("copy-", i)))
	}

	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 64, Capabilities: []string{"default", "planners"}})
	var runs sync.Map
	var aggregations atomic.Int32
	ex.HandleShards("split", executor.Sharded{
		Plan: numbers(1),
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			v, _ := runs.LoadOrStore(j.ID, new(atomic.Int32))
			v.(*atomic.Int32).Add(1)
			return nil, nil
		},
		Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			aggregations.Add(1)
			return s.Succeeded, nil
		},
	})
	readsBefore := o.StoreReads()
	testenv.Start(t, ex)
	got, err := c.Wait(ctx, "twice")
	if err != nil || got.State != task.Succeeded || string(got.Result) != fmt.Sprint(n) {
		sh, _ := c.Get(context.Background(), task.ShardID("twice", 0))
		p, _ := c.Get(context.Background(), "twice")
		t.Fatalf("parent %+v, %v; parent now %+v; shard 0 %+v", got, err, p, sh)
	}
	if aggregations.Load() != 1 {
		t.Fatalf("%d aggregations", aggregations.Load())
	}
	distinct := 0
	runs.Range(func(k, v any) bool {
		distinct++
		if c := v.(*atomic.Int32).Load(); c != 1 {
			t.Errorf("%s ran %d times", k, c)
		}
		return true
	})
	ids, err := c.TaskIDs(ctx, "twice/shard/")
	if distinct != n || err != nil || len(ids) != n {
		t.Fatalf("%d shards ran, %d exist (%v), want %d", distinct, len(ids), err, n)
	}
	// Completing a shard reads a bounded number of records (itself, its
	// parent), never its siblings: total reads stay linear in the shards.
	if perShard := float64(o.StoreReads()-readsBefore) / n; perShard > 6 {
		t.Fatalf("%.1f task reads per shard", perShard)
	}
}

// A parent whose aggregator failed is re-driven into a fresh aggregate run;
// one that failed in its shard phase is refused (its shards already ran).
func TestShardsRedrive(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{})
	var aggregatorBroken atomic.Bool
	aggregatorBroken.Store(true)
	var shardRuns atomic.Int32
	e.ex.HandleShards("split", executor.Sharded{
		Plan: numbers(5),
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			shardRuns.Add(1)
			if j.Parent == "ff" {
				return nil, executor.Permanent(errors.New("bad"))
			}
			return 1, nil
		},
		Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			if aggregatorBroken.Load() {
				return nil, executor.Permanent(errors.New("aggregator bug"))
			}
			return s.Succeeded, nil
		},
	})
	testenv.Start(t, e.ex)
	submitSharded(t, e, "agg", nil)
	submitSharded(t, e, "ff", nil)
	waitState(t, e, "agg", task.Failed)
	waitState(t, e, "ff", task.Failed)
	runsBefore := shardRuns.Load()
	aggregatorBroken.Store(false)
	if _, err := e.c.Redrive(e.ctx, "agg"); err != nil {
		t.Fatal(err)
	}
	got := waitState(t, e, "agg", task.Succeeded)
	if string(got.Result) != "5" || shardRuns.Load() != runsBefore {
		t.Fatalf("after redrive: result %s, %d shard runs (before %d)", got.Result, shardRuns.Load(), runsBefore)
	}
	if _, err := e.c.Redrive(e.ctx, "ff"); err == nil || !strings.Contains(err.Error(), "failed in its shard phase") {
		t.Fatalf("redrive of a parent failed in its shard phase: %v", err)
	}
	if _, err := e.c.Redrive(e.ctx, task.ShardID("ff", 0)); err == nil || !strings.Contains(err.Error(), "is a shard of ff") {
		t.Fatalf("redrive of a shard: %v", err)
	}
}

// Shards inherit the parent's priority and capability unless the planner
// sets them, and carry their own estimated cost.
func TestShardsPlannerOverrides(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t, executor.Config{Capabilities: []string{"default", "gpu"}})
	p0 := 0
	e.ex.HandleShards("split", executor.Sharded{
		Plan: func(context.Context, *executor.Job) ([]executor.Shard, error) {
			return []executor.Shard{
				{Payload: "inherit"},
				{Payload: "urgent", Priority: &p0},
				{Payload: "gpu", Capability: "gpu", EstimatedCost: 4},
			}, nil
		},
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			return map[string]any{"priority": j.Priority, "capability": j.Capability, "cost": j.EstimatedCost}, nil
		},
	})
	testenv.Start(t, e.ex)
	submitSharded(t, e, "mixed", func(s *task.Spec) { s.Priority, s.EstimatedCost = new(3), 2 })
	waitState(t, e, "mixed", task.Succeeded)
	want := []string{
		`{"capability":"default","cost":1,"priority":3}`,
		`{"capability":"default","cost":1,"priority":0}`,
		`{"capability":"gpu","cost":4,"priority":3}`,
	}
	for i, w := range want {
		sh, err := e.c.Get(e.ctx, task.ShardID("mixed", i))
		if err != nil || string(sh.Result) != w {
			t.Errorf("shard %d ran as %s (%v), want %s", i, sh.Result, err, w)
		}
	}
}

// The fast fan-in count can read a member short; a re-count timer counts
// exactly. Here every marker exists but no completion moved the parent on:
// the re-count does.
func TestFanInRecountMovesStuckParent(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	nc := testenv.Conn(t, srv.URL())
	js, _ := jetstream.New(nc)
	st, err := store.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	markers, err := fanin.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := task.New("split", nil)
	s.ID, s.Shardable = "stuck", true
	now := time.Now().UTC()
	parent := task.Task{Spec: s, State: task.Waiting, Phase: task.PhaseShards, SubmittedAt: now, UpdatedAt: now,
		Sharding: &task.Sharding{PlanRef: task.PlanRef{Object: "plans/stuck/x", Shards: 3}, Registered: true}}
	if _, err := st.Write(ctx, task.Event{Kind: task.KindTransition, To: task.Waiting, At: now, Actor: "test", Task: parent}, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := markers.Mark(ctx, "stuck", fmt.Sprint(i), task.MemberOutcome{Index: i, ID: task.ShardID("stuck", i), State: task.Succeeded}); err != nil {
			t.Fatal(err)
		}
	}
	fire, _ := json.Marshal(map[string]any{"id": "stuck", "kind": "fanin", "at": now})
	publishRaw(t, nc, subject.Fire(subject.TimerFanIn, "stuck"), fire)
	got, err := c.Wait(ctx, "stuck")
	if err != nil || got.State != task.Succeeded || string(got.Result) != `{"shards":3,"succeeded":3,"not_succeeded":0}` {
		t.Fatalf("%+v, %v", got, err)
	}
}
