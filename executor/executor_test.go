package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// queueReady submits specs and waits until the orchestrator has dispatched
// all of them (no executor runs yet).
func queueReady(t *testing.T, c *sdk.Client, nc *nats.Conn, specs []task.Spec) {
	t.Helper()
	ctx := testenv.Context(t, 5*time.Minute)
	for i := 0; i < len(specs); i += 2000 {
		if _, err := c.SubmitMany(ctx, specs[i:min(i+2000, len(specs))]); err != nil {
			t.Fatal(err)
		}
	}
	js, _ := jetstream.New(nc)
	testenv.Eventually(t, 5*time.Minute, "all tasks dispatched", func() bool {
		n, err := queue.ReadyDepth(ctx, js)
		return err == nil && n >= uint64(len(specs))
	})
}

func spec(t *testing.T, id, typ string, prio int, capability string) task.Spec {
	s, err := task.New(typ, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.ID, s.Priority, s.Capability = id, new(prio), capability
	return s
}

func TestPriorityShareFollowsWeights(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	const perLevel = 600
	var specs []task.Spec
	for lvl := range task.Levels {
		for i := range perLevel {
			specs = append(specs, spec(t, fmt.Sprintf("p%d-%d", lvl, i), "work", lvl, "default"))
		}
	}
	queueReady(t, c, c.Conn(), specs)

	var mu sync.Mutex
	var order []int
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 10})
	ex.HandleFunc("work", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		order = append(order, j.Priority)
		mu.Unlock()
		return nil, nil
	})
	testenv.Start(t, ex)
	const sample = 1000 // p0 (40 %) is not exhausted before 1,500 starts
	testenv.Eventually(t, time.Minute, "1000 starts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) >= sample
	})
	mu.Lock()
	counts := make([]int, task.Levels)
	for _, lvl := range order[:sample] {
		counts[lvl]++
	}
	mu.Unlock()
	for lvl, w := range executor.DefaultWeights() {
		share := 100 * float64(counts[lvl]) / sample
		if math.Abs(share-float64(w)) > 5 {
			t.Errorf("p%d: %.1f%% of starts, weight %d%% (±5): counts %v", lvl, share, w, counts)
		}
	}
}

func TestP0BehindP5BacklogStartsNextRound(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	const backlog = 20000 // far more than a round: seconds of work behind the p0
	specs := make([]task.Spec, backlog)
	for i := range specs {
		specs[i] = spec(t, fmt.Sprintf("bulk-%d", i), "work", 5, "default")
	}
	queueReady(t, c, c.Conn(), specs)

	const capacity = 8
	var started atomic.Int64
	var mu sync.Mutex
	var bulkStarts []time.Time // when each p5 handler started
	var urgentStart time.Time
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: capacity})
	ex.HandleFunc("work", func(ctx context.Context, j *executor.Job) (any, error) {
		started.Add(1)
		mu.Lock()
		if j.Priority == 0 {
			urgentStart = time.Now()
		} else {
			bulkStarts = append(bulkStarts, time.Now())
		}
		mu.Unlock()
		if j.Priority != 0 {
			time.Sleep(2 * time.Millisecond)
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	testenv.Eventually(t, time.Minute, "backlog being worked", func() bool { return started.Load() > 200 })

	ctx := testenv.Context(t, time.Minute)
	id, err := c.Submit(ctx, spec(t, "urgent", "work", 0, "default"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
		t.Fatalf("urgent: %+v %v", got, err)
	}
	h, err := c.History(ctx, id)
	if err != nil || len(h) != 2 || h[0].Event.To != task.Ready {
		t.Fatalf("history %+v %v", h, err)
	}
	// Count the other tasks whose handlers started between the P0's
	// dispatch and its own start (one process, one clock).
	readyAt := h[0].Event.At
	mu.Lock()
	behind := 0
	for _, at := range bulkStarts {
		if at.After(readyAt) && at.Before(urgentStart) {
			behind++
		}
	}
	mu.Unlock()
	t.Logf("%d other tasks started between the P0's dispatch and its start", behind)
	// At most the round in flight (≤ capacity) and the round that finds it.
	if behind > 2*capacity {
		t.Fatalf("P0 started after %d other starts; want within the next pull round (≤ %d)", behind, 2*capacity)
	}
	if started.Load() >= backlog {
		t.Fatal("the backlog drained first; the test proved nothing")
	}
}

func TestIdleExecutorDoesNotPoll(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{IdleProbe: time.Hour})
	ex.HandleFunc("work", func(context.Context, *executor.Job) (any, error) { return "done", nil })
	testenv.Start(t, ex)

	// Count pull requests to the ready consumers while the executor idles.
	pulls := countPulls(t, srv.URL())
	// Settle: the first empty rounds (slow under the race detector on a
	// loaded machine) arm the doorbell; wait for a quiet half second.
	testenv.Eventually(t, 30*time.Second, "the executor idle", func() bool {
		pulls.Store(0)
		time.Sleep(500 * time.Millisecond)
		return pulls.Load() == 0
	})
	pulls.Store(0)
	time.Sleep(2 * time.Second)
	if n := pulls.Load(); n != 0 {
		t.Fatalf("idle executor sent %d pull requests in 2s", n)
	}
	// With the idle probe at an hour, only the doorbell can wake it.
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 20*time.Second)
	id, err := c.Submit(ctx, spec(t, "wake", "work", 3, "default"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
		t.Fatalf("idle executor did not wake for new work: %+v %v", got, err)
	}
}

func TestCapabilityRouting(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	handler := func(_ context.Context, j *executor.Job) (any, error) { return nil, nil }
	cpu := testenv.Executor(t, srv.URL(), executor.Config{ID: "cpu-1", Capabilities: []string{"cpu"}})
	gpu := testenv.Executor(t, srv.URL(), executor.Config{ID: "gpu-1", Capabilities: []string{"gpu"}})
	for _, ex := range []*executor.Executor{cpu, gpu} {
		ex.HandleFunc("work", handler)
		testenv.Start(t, ex)
	}
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	var specs []task.Spec
	for i := range 20 {
		capability := []string{"cpu", "gpu"}[i%2]
		specs = append(specs, spec(t, fmt.Sprintf("%s-%d", capability, i), "work", i%6, capability))
	}
	specs = append(specs, spec(t, "nobody", "work", 0, "tpu"))
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs[:20] {
		got, err := c.Wait(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := s.Capability + "-1"; got.State != task.Succeeded || got.Executor != want {
			t.Fatalf("%s ran on %q (%s), want %s", s.ID, got.Executor, got.State, want)
		}
	}
	got, err := c.Get(ctx, "nobody")
	if err != nil || got.State != task.Ready || got.Executor != "" {
		t.Fatalf("task for an unserved capability: %+v %v; want it waiting in ready", got, err)
	}
}

func TestCostAwareCapacity(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	specs := []task.Spec{}
	big := spec(t, "big", "work", 1, "default")
	big.EstimatedCost = 50
	specs = append(specs, big)
	for i := range 50 {
		specs = append(specs, spec(t, fmt.Sprintf("small-%d", i), "work", 1, "default"))
	}
	queueReady(t, c, c.Conn(), specs)

	var mu sync.Mutex
	var inFlight, peak float64
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 50})
	ex.HandleFunc("work", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		inFlight += j.EstimatedCost
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		inFlight -= j.EstimatedCost
		mu.Unlock()
		return nil, nil
	})
	testenv.Start(t, ex)
	ctx := testenv.Context(t, time.Minute)
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", s.ID, got, err)
		}
	}
	if peak > 50 {
		t.Fatalf("in-flight cost peaked at %v, capacity 50", peak)
	}
}

func TestTimeoutFailsAttemptAndRetries(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("slow-once", func(ctx context.Context, j *executor.Job) (any, error) {
		if j.Attempt == 1 {
			<-ctx.Done() // honours the execution timeout
			return nil, ctx.Err()
		}
		return "fast", nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	s := spec(t, "t1", "slow-once", 2, "default")
	s.Timeout = task.Duration(200 * time.Millisecond)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.Succeeded || got.Attempt != 2 || len(got.Errors) != 1 || !strings.Contains(got.Errors[0].Error, "timed out after 200ms") {
		t.Fatalf("got %+v", got)
	}
}

func TestCancelRunningCancelsHandler(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	entered := make(chan struct{})
	sawCancel := make(chan error, 1)
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("block", func(ctx context.Context, j *executor.Job) (any, error) {
		close(entered)
		<-ctx.Done()
		sawCancel <- ctx.Err()
		return nil, ctx.Err()
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := c.Submit(ctx, spec(t, "long", "block", 2, "default")); err != nil {
		t.Fatal(err)
	}
	<-entered
	got, err := c.Cancel(ctx, "long", "operator changed their mind")
	if err != nil || got.State != task.Cancelled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if err := <-sawCancel; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want cancelled", err)
	}
	final, _ := c.Get(ctx, "long")
	if final.State != task.Cancelled || final.Reason != "operator changed their mind" {
		t.Fatalf("final %+v", final)
	}
}

func TestPermanentErrorAndRetryAfter(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("perm", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.Permanent(errors.New("invalid account"))
	})
	ex.HandleFunc("snooze", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.RetryAfter(time.Hour, errors.New("rate limited"))
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := c.Submit(ctx, spec(t, "p", "perm", 2, "default")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "p")
	if err != nil || got.State != task.Failed || got.Attempt != 1 || !strings.Contains(got.Reason, "permanently") {
		t.Fatalf("permanent: %+v %v", got, err)
	}
	if _, err := c.Submit(ctx, spec(t, "s", "snooze", 2, "default")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "retrying", func() bool {
		got, err = c.Get(ctx, "s")
		return err == nil && got.State == task.Retrying
	})
	if d := got.RetryAt.Sub(got.UpdatedAt); d != time.Hour {
		t.Fatalf("retry in %v, want the handler's 1h", d)
	}
	if got, err := c.Cancel(ctx, "s", ""); err != nil || got.State != task.Cancelled {
		t.Fatalf("cancel retrying: %+v %v", got, err)
	}
}

// TestCrashLoopIsFailedNotRunForever: a task whose executors keep dying
// while running it (connection lost mid-handler) is taken over at most
// MaxTakeovers times, then its attempt fails and it is dead-lettered. The
// first loss of an attempt that never outlived a heartbeat is not a
// takeover anyone saw (executors write nothing when they start; the
// redelivery may follow a hand-back): counting starts with the run that
// the orchestrator claimed, so one more executor is lost.
func TestCrashLoopIsFailedNotRunForever(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s := spec(t, "poison", "poison", 2, "default")
	s.MaxRetries = new(0)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	for i := range executor.DefaultMaxTakeovers + 3 {
		got, err := c.Get(ctx, "poison")
		if err == nil && got.State.Terminal() {
			break
		}
		nc := testenv.Conn(t, srv.URL())
		ex, err := executor.New(nc, executor.Config{ID: fmt.Sprint("doomed-", i), AckWait: time.Second,
			IdleProbe: 100 * time.Millisecond, Logger: testenv.SlogLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		entered := make(chan struct{}, 1)
		ex.HandleFunc("poison", func(ctx context.Context, _ *executor.Job) (any, error) {
			entered <- struct{}{}
			<-ctx.Done() // "crashes": its connection is gone below
			return nil, ctx.Err()
		})
		if err := ex.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Its handler cannot report any more: do not wait for it.
			sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_ = ex.Stop(sctx)
		})
		// The last one does not run the handler: it reports the failure.
		testenv.Eventually(t, 15*time.Second, "handler entered or task failed", func() bool {
			select {
			case <-entered:
				nc.Close() // the executor is lost: no heartbeat, no report
				return true
			default:
			}
			got, err := c.Get(ctx, "poison")
			return err == nil && got.State.Terminal()
		})
	}
	got, err := c.Wait(ctx, "poison")
	if err != nil || got.State != task.Failed || !strings.Contains(got.Reason, "lost 4 times") || got.Takeovers != 4 {
		t.Fatalf("%+v %v", got, err)
	}
}

// A copy of a dispatch (a re-publish after the de-duplication window, or
// consumer state lost in a server crash) redelivered while the task runs on
// a live executor does not take it over: the executor's heartbeats keep a
// lease it checks first.
func TestDispatchCopyDoesNotTakeOverLiveExecutor(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	nc := testenv.Conn(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	ex := testenv.Executor(t, srv.URL(), executor.Config{AckWait: 2 * time.Second, IdleProbe: 100 * time.Millisecond})
	var runs atomic.Int32
	running := make(chan struct{}, 1)
	ex.HandleFunc("long", func(ctx context.Context, _ *executor.Job) (any, error) {
		runs.Add(1)
		running <- struct{}{}
		select {
		case <-time.After(7 * time.Second): // several ack waits
			return "done", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	testenv.Start(t, ex)
	if _, err := c.Submit(ctx, spec(t, "long-1", "long", 2, "default")); err != nil {
		t.Fatal(err)
	}
	<-running
	// Copies are told from the run by its running mark, made at its first
	// heartbeat (a copy of a shorter run is not told: see Executor.claim).
	testenv.Eventually(t, 30*time.Second, "marked running", func() bool {
		got, err := c.Get(ctx, "long-1")
		return err == nil && got.State == task.Running
	})
	h, err := c.History(ctx, "long-1")
	if err != nil {
		t.Fatal(err)
	}
	var d task.Dispatch
	for _, ev := range h {
		if ev.Event.To == task.Ready {
			d = task.Dispatch{Task: ev.Event.Task, Revision: ev.Revision, Token: testenv.Token(t, nc, "long-1", ev.Event.Task.ExecutionID)}
		}
	}
	// Another executor that was delivered the same dispatch again (its
	// redelivery) asks to take it over: refused while the running one's
	// lease lives.
	data, _ := json.Marshal(task.ClaimRequest{ID: d.ID, ExecutionID: d.ExecutionID, Revision: d.Revision,
		Executor: "other", StartedAt: time.Now(), Delivered: 2, Token: d.Token})
	msg, err := nc.RequestWithContext(ctx, subject.Claim("default"), data)
	if err != nil {
		t.Fatal(err)
	}
	var rep task.ClaimReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Status != task.ClaimRunningElsewhere {
		t.Fatalf("a redelivery's claim while the execution runs on a live executor: %s %+v %v", msg.Data, rep, err)
	}
	got, err := c.Wait(ctx, "long-1")
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("%+v, %v", got, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if got.Takeovers != 0 {
		t.Fatalf("%d take-overs of a live executor", got.Takeovers)
	}
}

// TestDeletedReadyConsumerIsRecreated: an executor whose ready consumer was
// deleted (by hand, or lost) creates it again instead of idling for ever,
// and a dispatch stored while it was missing (a consumer created again
// delivers only what comes after it) is found by the reconciler and
// dispatched again.
func TestDeletedReadyConsumerIsRecreated(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{ReconcileInterval: 500 * time.Millisecond, RunGrace: time.Second},
		executor.Config{IdleProbe: 200 * time.Millisecond})
	ctx := testenv.Context(t, time.Minute)
	warm, _ := task.New("ok", nil)
	warm.ID = "before-consumer-deleted"
	if got, err := c.Wait(ctx, mustSubmit(t, c, warm)); err != nil || got.State != task.Succeeded {
		t.Fatalf("%s: %+v %v", warm.ID, got, err)
	}
	js, _ := jetstream.New(c.Conn())
	for lvl := range task.Levels {
		if err := js.DeleteConsumer(ctx, subject.StreamTasks, subject.ReadyConsumer(task.DefaultCapability, lvl)); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := task.New("ok", nil)
	s.ID = "after-consumer-deleted"
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
		t.Fatalf("%s: %v", s.ID, err)
	}
}

// TestTrickleCostsFewPulls: tasks arriving one at a time wake the executor
// through its doorbell, and each wake-up fetches the level it rang for
// rather than probing every level: a few pull requests per task (every
// level probed after each task was about 13).
func TestTrickleCostsFewPulls(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{IdleProbe: time.Hour})
	ex.HandleFunc("work", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	if got, err := c.Wait(ctx, mustSubmit(t, c, spec(t, "warm", "work", 3, "default"))); err != nil || got.State != task.Succeeded {
		t.Fatalf("warm-up: %+v %v", got, err)
	}

	pulls := countPulls(t, srv.URL())
	const n = 60
	for i := range n {
		id := mustSubmit(t, c, spec(t, fmt.Sprintf("trickle-%d", i), "work", i%task.Levels, "default"))
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
	}
	if per := float64(pulls.Load()) / n; per > 5 {
		t.Fatalf("%.1f pull requests per task arriving one at a time; want at most 5", per)
	} else {
		t.Logf("%.1f pull requests per task", per)
	}
}

// TestRedeliveryFoundWhileTheDoorbellRings: a redelivered dispatch rings
// no doorbell. While other tasks keep waking the executor through it (so
// it never idles into its probe), the level the redelivery is on is still
// probed, and the task runs.
func TestRedeliveryFoundWhileTheDoorbellRings(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	nc := testenv.Conn(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)

	// Queue a p0 task and take its dispatch away from executors for a while,
	// as an executor that hands it back with a delay would.
	queueReady(t, c, nc, []task.Spec{spec(t, "urgent", "work", 0, "default")})
	js, _ := jetstream.New(nc)
	cons, err := js.Consumer(ctx, subject.StreamTasks, subject.ReadyConsumer("default", 0))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var held jetstream.Msg
	for m := range batch.Messages() {
		held = m
	}
	if held == nil {
		t.Fatal("the p0 dispatch was not delivered to the test")
	}

	ex := testenv.Executor(t, srv.URL(), executor.Config{IdleProbe: time.Hour})
	ex.HandleFunc("work", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	// A trickle of p5 tasks keeps the doorbell ringing.
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := c.Submit(ctx, spec(t, fmt.Sprintf("bulk-%d", i), "work", 5, "default")); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); <-trickled }()
	testenv.Eventually(t, 30*time.Second, "the executor busy with the trickle", func() bool {
		got, err := c.Get(ctx, "bulk-3")
		return err == nil && got.State == task.Succeeded
	})
	if err := held.NakWithDelay(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "urgent"); err != nil || got.State != task.Succeeded {
		t.Fatalf("redelivered p0 task: %+v %v", got, err)
	}
}

func mustSubmit(t *testing.T, c *sdk.Client, s task.Spec) string {
	t.Helper()
	id, err := c.Submit(testenv.Context(t, 30*time.Second), s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// countPulls counts the pull requests to the ready consumers from now on.
func countPulls(t *testing.T, url string) *atomic.Int64 {
	t.Helper()
	spy := testenv.Conn(t, url)
	var pulls atomic.Int64
	sub, err := spy.Subscribe("$JS.API.CONSUMER.MSG.NEXT."+subject.StreamTasks+".ax-ready-*", func(*nats.Msg) { pulls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	return &pulls
}

// TestDoorbellCarriesNoPayload: idle executors are woken by an empty
// doorbell, not by a copy of every dispatch, and read no record before
// running one. Four idle executors and twenty tasks of 100 KiB each: the
// executors together receive about what was submitted (each dispatch once,
// to the executor that runs it), not four copies more (the doorbell
// subscribed to the dispatch subjects, and every dispatch's record was read
// again: about six times what was submitted).
func TestDoorbellCarriesNoPayload(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	var conns []*nats.Conn
	for i := range 4 {
		nc := testenv.Conn(t, srv.URL())
		ex, err := executor.New(nc, executor.Config{ID: fmt.Sprintf("idle-%d", i), IdleProbe: time.Hour, Logger: testenv.SlogLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ex.HandleFunc("work", func(context.Context, *executor.Job) (any, error) { return nil, nil })
		testenv.Start(t, ex)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = ex.Stop(ctx)
		})
		conns = append(conns, nc)
	}
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	received := func() (n uint64) {
		for _, nc := range conns {
			n += nc.Stats().InBytes
		}
		return n
	}
	blob := `"` + strings.Repeat("x", 100<<10) + `"`
	before := received()
	const tasks = 20
	for i := range tasks {
		s := spec(t, fmt.Sprintf("big-%d", i), "work", 2, "default")
		s.Payload = json.RawMessage(blob)
		if got, err := c.Wait(ctx, mustSubmit(t, c, s)); err != nil || got.State != task.Succeeded {
			t.Fatalf("task %d: %+v %v", i, got, err)
		}
	}
	submitted := uint64(tasks * len(blob))
	got := received() - before
	t.Logf("submitted %d KiB, executors received %d KiB", submitted>>10, got>>10)
	if got > submitted*3/2 {
		t.Fatalf("executors received %d KiB for %d KiB submitted: idle executors get copies of the dispatches", got>>10, submitted>>10)
	}
}
