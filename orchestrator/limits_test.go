package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// waitRejected waits for id's rejection and returns its reason.
func waitRejected(t *testing.T, ctx context.Context, c *sdk.Client, id string) string {
	t.Helper()
	var rej *sdk.RejectedError
	testenv.Eventually(t, 30*time.Second, id+" rejected", func() bool {
		_, err := c.Get(ctx, id)
		return errors.As(err, &rej)
	})
	return rej.Rejection.Reason
}

// waitCreated waits until id is a task (in any state).
func waitCreated(t *testing.T, ctx context.Context, c *sdk.Client, id string) *task.Task {
	t.Helper()
	var got *task.Task
	testenv.Eventually(t, 30*time.Second, id+" created", func() bool {
		var err error
		got, err = c.Get(ctx, id)
		var rej *sdk.RejectedError
		if errors.As(err, &rej) {
			t.Fatalf("%s rejected: %s", id, rej.Rejection.Reason)
		}
		return err == nil
	})
	return got
}

func waitSucceeded(t *testing.T, ctx context.Context, c *sdk.Client, id string) {
	t.Helper()
	waitCreated(t, ctx, c, id)
	got, err := c.Wait(ctx, id)
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("%s: %+v %v", id, got, err)
	}
}

func wantReason(t *testing.T, id, reason string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(reason, p) {
			t.Errorf("%s: reason %q does not say %q", id, reason, p)
		}
	}
}

// TestConfiguredLimits: each limit configured low rejects a submission
// over it, saying which limit and its value, and accepts one at it; a
// planner over the shard limit fails its task.
func TestConfiguredLimits(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{MaxPayload: 64, Retry: fastRetry,
		Limits: orchestrator.Limits{MaxGraphTasks: 3, MaxDependencies: 2, MaxShards: 2}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	for _, n := range []int{2, 3} {
		ex.HandleShards(fmt.Sprintf("split%d", n), executor.Sharded{
			Plan:  numbers(n),
			Shard: func(context.Context, *executor.Job) (any, error) { return nil, nil },
		})
	}
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	submit := func(s task.Spec) {
		t.Helper()
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatalf("submit %s: %v", s.ID, err)
		}
	}

	// Dependencies: 2 pass, 3 are one too many.
	for _, id := range []string{"up-a", "up-b", "up-c"} {
		submit(newSpec(id, "ok"))
	}
	submit(newSpec("deps-at", "ok", "up-a", "up-b"))
	submit(newSpec("deps-over", "ok", "up-a", "up-b", "up-c"))

	// Payload: 64 bytes pass, 65 do not.
	payload := func(id string, n int) task.Spec {
		s, _ := task.New("ok", json.RawMessage(`"`+strings.Repeat("x", n-2)+`"`))
		s.ID = id
		return s
	}
	submit(payload("payload-at", 64))
	submit(payload("payload-over", 65))

	// Graphs: 3 tasks pass, 4 do not, nor 3 with a task over the
	// dependency limit; none of a rejected graph's tasks is created.
	graph := func(prefix string, n int) []task.Spec {
		var specs []task.Spec
		for i := range n {
			s := newSpec(fmt.Sprintf("%s-%d", prefix, i), "ok")
			if i > 0 {
				s.DependsOn = []string{fmt.Sprintf("%s-%d", prefix, i-1)}
			}
			specs = append(specs, s)
		}
		return specs
	}
	if _, err := c.SubmitGraph(ctx, graph("g-at", 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitGraph(ctx, graph("g-over", 4)); err != nil {
		t.Fatal(err)
	}
	wide := graph("g-deps", 2)
	wide[1].DependsOn = []string{"g-deps-0", "up-a", "up-b"}
	if _, err := c.SubmitGraph(ctx, wide); err != nil {
		t.Fatal(err)
	}

	// Shards: a plan of 2 runs, one of 3 fails its task.
	for _, id := range []string{"split2", "split3"} {
		s, _ := task.New(id, nil)
		s.ID, s.Shardable = "plan-"+id, true
		submit(s)
	}

	for _, id := range []string{"deps-at", "payload-at", "g-at-0", "g-at-1", "g-at-2", "plan-split2"} {
		waitSucceeded(t, ctx, c, id)
	}
	wantReason(t, "deps-over", waitRejected(t, ctx, c, "deps-over"),
		"depends_on: 3 dependencies exceed the limit of 2", "--max-dependencies")
	wantReason(t, "payload-over", waitRejected(t, ctx, c, "payload-over"),
		"payload: 65 bytes exceeds the limit of 64", "--max-payload")
	for _, id := range []string{"g-over-0", "g-over-3"} {
		wantReason(t, id, waitRejected(t, ctx, c, id), "graph rejected: tasks: 4 tasks exceed the limit of 3", "--max-graph-tasks")
	}
	wantReason(t, "g-deps-0", waitRejected(t, ctx, c, "g-deps-0"),
		`graph rejected: task "g-deps-1": depends_on: 3 dependencies exceed the limit of 2`)
	got, err := c.Wait(ctx, "plan-split3")
	if err != nil || got.State != task.Failed {
		t.Fatalf("plan-split3: %+v %v", got, err)
	}
	wantReason(t, "plan-split3", got.Reason, "the planner returned 3 shards; the limit is 2 (ax orchestrator --max-shards)")
	if got.Attempt != 1 {
		t.Errorf("plan-split3 failed after %d attempts, want 1", got.Attempt)
	}
}

// TestLimitsAboveTheirCeilingsAreRefused: a limit may be lowered, not
// raised past what the SDK and executors check.
func TestLimitsAboveTheirCeilingsAreRefused(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc := testenv.Conn(t, srv.URL())
	for _, l := range []orchestrator.Limits{
		{MaxGraphTasks: task.MaxGraphTasks + 1},
		{MaxDependencies: task.MaxDependencies + 1},
		{MaxShards: task.MaxShards + 1},
		{MaxShards: -1},
		{MaxTaskTypes: -1},
	} {
		if _, err := orchestrator.New(nc, orchestrator.Config{Limits: l}); err == nil {
			t.Errorf("limits %+v accepted", l)
		}
	}
	at := orchestrator.Limits{MaxGraphTasks: task.MaxGraphTasks, MaxDependencies: task.MaxDependencies, MaxShards: task.MaxShards, MaxTaskTypes: 1 << 20}
	if _, err := orchestrator.New(nc, orchestrator.Config{Limits: at}); err != nil {
		t.Errorf("limits at their ceilings: %v", err)
	}
}

// typesRecorded is the number of types in AX_TYPES.
func typesRecorded(t *testing.T, ctx context.Context, url string) uint64 {
	t.Helper()
	js, _ := jetstream.New(testenv.Conn(t, url))
	st, err := js.Stream(ctx, subject.StreamTypes)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestMaxTaskTypesHoldsAcrossRestart: with a limit of two types, a third
// is rejected (single, in a graph, as a schedule's template), known types
// are accepted, and after the orchestrator is replaced the new one holds
// the same line.
func TestMaxTaskTypesHoldsAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	cfg := orchestrator.Config{Limits: orchestrator.Limits{MaxTaskTypes: 2}, Logger: testenv.SlogLogger(t)}
	o1, err := orchestrator.New(testenv.Conn(t, srv.URL()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 60*time.Second)
	if err := o1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c := testenv.Client(t, srv.URL())
	submit := func(id, typ string) {
		t.Helper()
		if _, err := c.Submit(ctx, newSpec(id, typ)); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	const why = "this cluster accepts tasks of at most 2 types, the limit of ax orchestrator --max-task-types"
	submit("a1", "mail.send")
	waitCreated(t, ctx, c, "a1")
	submit("b1", "report")
	waitCreated(t, ctx, c, "b1")
	submit("c1", "resize")
	wantReason(t, "c1", waitRejected(t, ctx, c, "c1"), `type: new task type "resize": `+why)
	submit("a2", "mail.send")
	waitCreated(t, ctx, c, "a2")
	if _, err := c.SubmitGraph(ctx, []task.Spec{newSpec("ga", "mail.send"), newSpec("gb", "report", "ga")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitGraph(ctx, []task.Spec{newSpec("gx", "mail.send"), newSpec("gy", "resize", "gx"), newSpec("gz", "thumb", "gx")}); err != nil {
		t.Fatal(err)
	}
	waitCreated(t, ctx, c, "gb")
	wantReason(t, "gx", waitRejected(t, ctx, c, "gx"), `graph rejected: type: new task types "resize", "thumb": `+why)
	tmpl := newSpec("", "resize")
	_, err = c.CreateSchedule(ctx, task.Schedule{Name: "nightly", Cron: "@daily", Template: tmpl})
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Fatalf("schedule of a third type: %v", err)
	}
	if _, err := c.CreateSchedule(ctx, task.Schedule{Name: "hourly", Cron: "@hourly", Template: newSpec("", "report")}); err != nil {
		t.Fatalf("schedule of a known type: %v", err)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o1.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	// The replacement reads the accepted types back.
	cfg.NodeID = "o2"
	testenv.Orchestrator(t, srv.URL(), cfg)
	submit("c2", "thumb")
	submit("a3", "mail.send")
	submit("b3", "report")
	wantReason(t, "c2", waitRejected(t, ctx, c, "c2"), `new task type "thumb": `+why)
	waitCreated(t, ctx, c, "a3")
	waitCreated(t, ctx, c, "b3")
	if n := typesRecorded(t, ctx, srv.URL()); n != 2 {
		t.Fatalf("%d types recorded, want 2", n)
	}
}

// TestMaxTaskTypesBetweenOrchestrators: two orchestrators take
// submissions of many new types at once (in every intake lane): exactly
// the limit's worth of types is accepted, every other submission rejected.
func TestMaxTaskTypesBetweenOrchestrators(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	const limit, types, perType = 3, 12, 3
	for _, node := range []string{"o1", "o2"} {
		testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: node, Limits: orchestrator.Limits{MaxTaskTypes: limit}})
	}
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	var wg sync.WaitGroup
	for i := range types {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perType {
				s := newSpec(fmt.Sprintf("t%d-%d", i, k), fmt.Sprintf("type%d", i))
				s.Priority = new(k % task.Levels)
				if _, err := c.Submit(ctx, s); err != nil {
					t.Errorf("submit %s: %v", s.ID, err)
				}
			}
		}()
	}
	wg.Wait()
	accepted := map[string]int{}
	rejected := 0
	for i := range types {
		for k := range perType {
			id := fmt.Sprintf("t%d-%d", i, k)
			testenv.Eventually(t, 30*time.Second, id+" handled", func() bool {
				got, err := c.Get(ctx, id)
				var rej *sdk.RejectedError
				switch {
				case err == nil:
					accepted[got.Type]++
					return true
				case errors.As(err, &rej):
					wantReason(t, id, rej.Rejection.Reason, "at most 3 types")
					rejected++
					return true
				}
				return false
			})
		}
	}
	if len(accepted) != limit {
		t.Fatalf("tasks of %d types accepted, limit %d: %v", len(accepted), limit, accepted)
	}
	for typ, n := range accepted {
		if n != perType {
			t.Errorf("type %s: %d of %d tasks accepted", typ, n, perType)
		}
	}
	if rejected != (types-limit)*perType {
		t.Errorf("%d rejected, want %d", rejected, (types-limit)*perType)
	}
	if n := typesRecorded(t, ctx, srv.URL()); n != limit {
		t.Fatalf("%d types recorded, want %d", n, limit)
	}
}
