package orchestrator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/orchestrator/promorch"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// fastReconcile makes the reconciler look at stalled tasks within a second.
var fastReconcile = orchestrator.Config{ReconcileInterval: 200 * time.Millisecond, ReconcileMaxInterval: time.Second, RunGrace: 2 * time.Second}

// reconciling starts a server and an orchestrator whose reconciler looks
// within a second (fastReconcile), with its metrics on the returned
// registry, and a client.
func reconciling(t *testing.T) (*natsserver.Server, *prometheus.Registry, *sdk.Client) {
	t.Helper()
	srv := testenv.NATS(t)
	reg := prometheus.NewRegistry()
	cfg := fastReconcile
	m := promorch.New(reg)
	cfg.Metrics = m
	m.Watch(testenv.Orchestrator(t, srv.URL(), cfg))
	return srv, reg, testenv.Client(t, srv.URL())
}

// loseDispatch waits until the dispatch of a task on a capability and
// priority is stored, then loses it as a ready consumer losing its state
// would: the level's consumer is deleted and created again (a consumer
// delivers what is stored after its creation), so nobody is delivered it.
func loseDispatch(t *testing.T, ctx context.Context, c *sdk.Client, capability string, prio int) {
	t.Helper()
	js, _ := jetstream.New(c.Conn())
	testenv.Eventually(t, 20*time.Second, "the dispatch stored", func() bool {
		n, err := levelPending(ctx, js, capability, prio)
		return err == nil && n == 1
	})
	tasks, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if err := tasks.DeleteConsumer(ctx, subject.ReadyConsumer(capability, prio)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the new consumer is created surely after the dispatch (clocks)
	if _, err := tasks.CreateConsumer(ctx, topology.ReadyConsumer(capability, prio, 0)); err != nil {
		t.Fatal(err)
	}
}

// levelPending is how many dispatches of a level wait (to be delivered or
// acknowledged).
func levelPending(ctx context.Context, js jetstream.JetStream, capability string, prio int) (uint64, error) {
	levels, err := queue.ReadyLevels(ctx, js, time.Now())
	if err != nil {
		return 0, err
	}
	for _, lv := range levels {
		if lv.Capability == capability && lv.Priority == prio {
			return lv.Pending + lv.InHand, nil
		}
	}
	return 0, nil
}

// TestChainSubmittedLinkByLink: each link's submission is acknowledged
// before the next is published, and handled concurrently with it: a link
// whose upstream is not created yet waits for it instead of being rejected.
func TestChainSubmittedLinkByLink(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	var mu sync.Mutex
	runs := map[string]int{}
	var order []string
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 8})
	ex.HandleFunc("link", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		runs[j.ID]++
		order = append(order, j.ID)
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 3*time.Minute)
	const n = 200
	for i := range n {
		s := newSpec(fmt.Sprintf("link-%03d", i), "link")
		if i > 0 {
			s.DependsOn = []string{fmt.Sprintf("link-%03d", i-1)}
		}
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	last, err := c.Wait(ctx, fmt.Sprintf("link-%03d", n-1))
	if err != nil || last.State != task.Succeeded {
		t.Fatalf("last link: %+v %v", last.State, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("link-%03d", i)
		if runs[id] != 1 {
			t.Errorf("%s ran %d times", id, runs[id])
		}
		if i < len(order) && order[i] != id {
			t.Fatalf("run %d was %s, want %s: links ran out of order", i, order[i], id)
		}
	}
}

// TestMissingDependencyTimesOut: an upstream that never appears cancels its
// dependent after the dependency timeout, naming the missing id.
func TestMissingDependencyTimesOut(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s := newSpec("orphan", "ok", "ghost")
	s.DependencyTimeout = task.Duration(time.Second)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "orphan")
	if err != nil || got.State != task.Cancelled {
		t.Fatalf("orphan: %s %v", got.State, err)
	}
	if !strings.Contains(got.Reason, `"ghost"`) || !strings.Contains(got.Reason, "dependency timeout") {
		t.Fatalf("reason %q does not name the missing upstream and the timeout", got.Reason)
	}
	// A graph whose outside dependency appears late is released by it.
	late := newSpec("late-child", "ok", "late-up")
	if _, err := c.Submit(ctx, late); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "late-child waiting for its unknown upstream", func() bool {
		got, err := c.Get(ctx, "late-child")
		return err == nil && strings.Contains(got.Reason, "does not exist yet")
	})
	okExecutorStarted(t, srv.URL())
	if _, err := c.Submit(ctx, newSpec("late-up", "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "late-child"); err != nil || got.State != task.Succeeded {
		t.Fatalf("late-child: %s %v", got.State, err)
	}
}

func okExecutorStarted(t *testing.T, url string) {
	ex := okExecutor(t, url, executor.Config{})
	testenv.Start(t, ex)
}

// TestDeadlinePassedAtSubmission: such a task ends expired at creation and
// never runs.
func TestDeadlinePassedAtSubmission(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	var ran atomic.Int32
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("late", func(context.Context, *executor.Job) (any, error) { ran.Add(1); return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	past := time.Now().Add(-time.Second)
	s := newSpec("too-late", "late")
	s.Deadline = &past
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, newSpec("after-late", "late")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "after-late"); err != nil || got.State != task.Succeeded {
		t.Fatalf("after-late: %s %v", got.State, err)
	}
	got, err := c.Wait(ctx, "too-late")
	if err != nil || got.State != task.Expired {
		t.Fatalf("too-late: %s %v", got.State, err)
	}
	if tr := transitions(t, c, "too-late"); len(tr) != 1 || tr[0] != ">expired" {
		t.Fatalf("too-late history %v, want created expired", tr)
	}
	if ran.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1 (after-late only)", ran.Load())
	}
}

// TestCancelRevokesQueuedAndRunning: executors run a dispatch without
// reading its record, so a task cancelled while its dispatch waits has its
// execution revoked (AX_REVOKED): the executor that gets the dispatch later
// does not run it, and a handler running when its task is cancelled is
// cancelled.
func TestCancelRevokesQueuedAndRunning(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	queued := newSpec("queued-then-cancelled", "work")
	if _, err := c.Submit(ctx, queued); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "queued", func() bool {
		got, err := c.Get(ctx, queued.ID)
		return err == nil && got.State == task.Ready && got.DispatchRevision != 0
	})
	if _, err := c.Cancel(ctx, queued.ID, "test"); err != nil {
		t.Fatal(err)
	}
	var ran sync.Map
	started := make(chan struct{}, 1)
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("work", func(ctx context.Context, j *executor.Job) (any, error) {
		ran.Store(j.ID, true)
		if j.ID == "long" {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	// A task queued after it, on the same level: once it ran, the cancelled
	// one's dispatch was delivered before it.
	if _, err := c.Submit(ctx, newSpec("after", "work")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "after"); err != nil || got.State != task.Succeeded {
		t.Fatalf("after: %+v %v", got, err)
	}
	if _, ok := ran.Load(queued.ID); ok {
		t.Fatal("the dispatch of a task cancelled while it waited ran")
	}
	if _, err := c.Submit(ctx, newSpec("long", "work")); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := c.Cancel(ctx, "long", "test"); err != nil {
		t.Fatal(err)
	}
	// The handler returns when its context is cancelled; its outcome is not
	// reported, and the task stays cancelled.
	testenv.Eventually(t, 20*time.Second, "the running handler cancelled", func() bool {
		return ex.InFlight() == 0
	})
	if got, err := c.Get(ctx, "long"); err != nil || got.State != task.Cancelled {
		t.Fatalf("long: %+v %v", got, err)
	}
}

// TestLostRunningTaskIsFailedByReconciler: a task claimed by an executor
// that vanished after its dispatch was gone (acknowledged, dropped) has no
// redelivery to move it; the reconciler fails the attempt with "lease
// expired" past start + timeout + grace, and the retry policy applies.
func TestLostRunningTaskIsFailedByReconciler(t *testing.T) {
	t.Parallel()
	_, reg, c := reconciling(t)
	ctx := testenv.Context(t, time.Minute)
	s := newSpec("lost", "ok")
	s.Capability = "vanishing"
	s.MaxRetries = new(0)
	s.Timeout = task.Duration(time.Second)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "lost ready", func() bool {
		got, err := c.Get(ctx, "lost")
		return err == nil && got.State == task.Ready
	})
	// A "executor" claims it, and its dispatch disappears.
	js, _ := jetstream.New(c.Conn())
	st, err := store.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	cur, rev, err := st.Get(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	next := cur.Claimed("vanished-executor", time.Now().UTC())
	if _, err := st.Write(ctx, task.Event{Kind: task.KindTransition, From: task.Ready, To: task.Running, At: next.UpdatedAt, Actor: "vanished-executor", Task: next}, rev); err != nil {
		t.Fatal(err)
	}
	loseDispatch(t, ctx, c, "vanishing", s.PriorityLevel())
	got, err := c.Wait(ctx, "lost")
	if err != nil || got.State != task.Failed {
		t.Fatalf("lost: %s %v", got.State, err)
	}
	if len(got.Errors) != 1 || !strings.Contains(got.Errors[0].Error, "lease expired") {
		t.Fatalf("errors %+v, want one 'lease expired'", got.Errors)
	}
	if n := value(t, reg, "ax_reconciler_repairs_total", map[string]string{"reason": "lease_expired"}); n != 1 {
		t.Fatalf("lease_expired repairs %v, want 1", n)
	}
}

// TestReadyTaskWithoutDispatchIsRedispatched: a ready task whose dispatch
// was lost is dispatched again under a new execution id.
func TestReadyTaskWithoutDispatchIsRedispatched(t *testing.T) {
	t.Parallel()
	srv, reg, c := reconciling(t)
	ctx := testenv.Context(t, time.Minute)
	s := newSpec("undispatched", "ok")
	s.Capability = "late-executor"
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	var first string
	testenv.Eventually(t, 20*time.Second, "ready", func() bool {
		got, err := c.Get(ctx, "undispatched")
		if err != nil {
			return false
		}
		first = got.ExecutionID
		return got.State == task.Ready
	})
	loseDispatch(t, ctx, c, "late-executor", s.PriorityLevel())
	ex := okExecutor(t, srv.URL(), executor.Config{Capabilities: []string{"late-executor"}})
	testenv.Start(t, ex)
	got, err := c.Wait(ctx, "undispatched")
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("undispatched: %s %v", got.State, err)
	}
	if got.ExecutionID == first {
		t.Fatal("re-dispatched under the same execution id")
	}
	if n := value(t, reg, "ax_reconciler_repairs_total", map[string]string{"reason": "ready_not_dispatched"}); n < 1 {
		t.Fatalf("ready_not_dispatched repairs %v, want ≥ 1", n)
	}
}

// TestHealthyRunHasNoRepairs: a workload of chains, retries and fan-in with
// nothing lost makes the reconciler look but repair nothing.
func TestHealthyRunHasNoRepairs(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	reg := prometheus.NewRegistry()
	cfg := fastReconcile
	// Looks at tasks standing still for 3 s, with a 10 s grace for late
	// timers: a healthy run's tasks move sooner, even on a loaded machine
	// with the race detector. (A look that coincides with the normal
	// release of a waiting task — a window of milliseconds — would count
	// as a repair: the metric can be off by such coincidences, never miss
	// a stuck task.)
	cfg.ReconcileInterval = 3 * time.Second
	cfg.RunGrace = 10 * time.Second
	cfg.Metrics = promorch.New(reg)
	cfg.Retry = fastRetry
	cfg.Breaker.Threshold = 1 // every task fails once: not a storm
	testenv.Orchestrator(t, srv.URL(), cfg)
	ex := okExecutor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("flaky", func(_ context.Context, j *executor.Job) (any, error) {
		if j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	var specs []task.Spec
	for i := range 20 {
		id := fmt.Sprintf("h-%d", i)
		s := newSpec(id, "flaky")
		if i > 0 {
			s.DependsOn = []string{fmt.Sprintf("h-%d", i-1)}
		}
		specs = append(specs, s)
	}
	if _, err := c.SubmitGraph(ctx, specs); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "h-19"); err != nil || got.State != task.Succeeded {
		t.Fatalf("h-19: %s %v", got.State, err)
	}
	repaired := map[string]float64{}
	for _, r := range []string{"lease_expired", "ready_not_dispatched", "waiting_resolved", "shards_ended", "retry_overdue"} {
		if n := value(t, reg, "ax_reconciler_repairs_total", map[string]string{"reason": r}); n > 0 {
			repaired[r] = n
		}
	}
	if len(repaired) > 0 {
		t.Fatalf("repairs in a healthy run: %v", repaired)
	}
}

// TestHugeErrorDoesNotStallTask: a handler's 1 MiB error is truncated; the
// task fails normally instead of looping on a write that cannot fit.
func TestHugeErrorDoesNotStallTask(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("loud", func(context.Context, *executor.Job) (any, error) {
		return nil, errors.New(strings.Repeat("é", 512<<10))
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	s := newSpec("loud", "loud")
	s.MaxRetries = new(0)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "loud")
	if err != nil || got.State != task.Failed {
		t.Fatalf("loud: %s %v", got.State, err)
	}
	if e := got.Errors[0].Error; len(e) > task.MaxErrorBytes || !strings.Contains(e, "truncated") {
		t.Fatalf("error of %d bytes kept, want ≤ %d and marked truncated", len(e), task.MaxErrorBytes)
	}
}

// TestDeletedConsumerIsRecreated: a consume loop that ends (its consumer
// deleted) is recreated, and the work goes on.
func TestDeletedConsumerIsRecreated(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	reg := prometheus.NewRegistry()
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Metrics: promorch.New(reg)})
	okExecutorStarted(t, srv.URL())
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	if _, err := c.Submit(ctx, newSpec("before-delete", "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "before-delete"); err != nil || got.State != task.Succeeded {
		t.Fatalf("before-delete: %s %v", got.State, err)
	}
	js, _ := jetstream.New(c.Conn())
	if err := js.DeleteConsumer(ctx, subject.StreamCompleted, subject.ConsumerCompleted); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 45*time.Second, "completed consumer recreated", func() bool {
		return value(t, reg, "ax_consumer_restarts_total", map[string]string{"consumer": subject.ConsumerCompleted}) >= 1
	})
	if _, err := c.Submit(ctx, newSpec("after-delete", "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "after-delete"); err != nil || got.State != task.Succeeded {
		t.Fatalf("after-delete: %s %v", got.State, err)
	}
}

// TestSmallCapacityDrainsBacklog: an executor of capacity 1 started after
// tasks were queued takes them one after another, not one per idle probe.
func TestSmallCapacityDrainsBacklog(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	var specs []task.Spec
	for i := range 300 {
		s := newSpec(fmt.Sprintf("backlog-%d", i), "ok")
		s.Priority = new(5)
		if i%50 == 0 {
			s.Priority = new(3)
		}
		specs = append(specs, s)
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "backlog ready", func() bool {
		got, err := c.Get(ctx, "backlog-299")
		return err == nil && got.State == task.Ready
	})
	// An idle probe far longer than the test: only pulling can drain it.
	ex := okExecutor(t, srv.URL(), executor.Config{Capacity: 1, IdleProbe: time.Hour})
	testenv.Start(t, ex)
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %s %v", s.ID, got.State, err)
		}
	}
}

// TestStartWaitsOutJetStream: an orchestrator started while JetStream does
// not answer keeps retrying, saying so, and starts once it does.
func TestStartWaitsOutJetStream(t *testing.T) {
	t.Parallel()
	cfg := natsserver.Config{StoreDir: t.TempDir()}
	srv, err := natsserver.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL()
	cfg.Port = srv.Addr().(*net.TCPAddr).Port
	nc := testenv.Conn(t, url)
	srv.Stop()
	var logs syncBuffer
	l := zerolog.New(&logs)
	o, err := orchestrator.New(nc, orchestrator.Config{Logger: slog.New(zerolog.NewSlogHandler(l))})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- o.Start(context.Background()) }()
	testenv.Eventually(t, 30*time.Second, "a retry logged", func() bool { return strings.Contains(logs.String(), "retrying") })
	select {
	case err := <-started:
		t.Fatalf("Start returned during the outage: %v", err)
	default:
	}
	if srv, err = natsserver.Start(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if err := <-started; err != nil {
		t.Fatalf("Start after the outage: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = o.Stop(ctx)
	})
	okExecutorStarted(t, url)
	c := testenv.Client(t, url)
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := c.Submit(ctx, newSpec("after-outage", "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "after-outage"); err != nil || got.State != task.Succeeded {
		t.Fatalf("after-outage: %s %v", got.State, err)
	}
}

// TestStartServesWhileTheTopologyLags: an orchestrator whose streams all
// exist serves even when one of them cannot be brought to its
// configuration (here AX_DLQ recreated in memory, a storage JetStream
// will not change; in a cluster, a stream without a leader answers
// nothing until it has one), and keeps trying that update in the
// background. Before, Start waited on that stream for as long as it took.
func TestStartServesWhileTheTopologyLags(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 60*time.Second)
	var dlq jetstream.StreamConfig
	for _, cfg := range topology.Streams(topology.Options{}) {
		if cfg.Name == subject.StreamDLQ {
			dlq = cfg
		}
	}
	if err := js.DeleteStream(ctx, subject.StreamDLQ); err != nil {
		t.Fatal(err)
	}
	dlq.Storage = jetstream.MemoryStorage
	if _, err := js.CreateStream(ctx, dlq); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Logger: slog.New(zerolog.NewSlogHandler(zerolog.New(&logs)))})
	if !strings.Contains(logs.String(), "serving before AX's topology is up to date") {
		t.Fatalf("started without saying the topology lags; logs:\n%s", logs.String())
	}
	okExecutorStarted(t, srv.URL())
	c := testenv.Client(t, srv.URL())
	if _, err := c.Submit(ctx, newSpec("while-lagging", "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "while-lagging"); err != nil || got.State != task.Succeeded {
		t.Fatalf("while-lagging: %s %v", got.State, err)
	}
	testenv.Eventually(t, 30*time.Second, "the update tried again in the background", func() bool {
		return strings.Contains(logs.String(), "cannot bring AX's topology up to date yet")
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCascadeCostsEdgesNotPaths: cancelling the root of a ladder of depth 30
// (each layer two tasks depending on both of the layer before: 2^31 paths)
// and of a 10-stage × 10-wide all-to-all pipeline cancels everything with a
// number of task reads proportional to the edges, each task's own event
// driving its own cascade.
func TestCascadeCostsEdgesNotPaths(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	o := testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 3*time.Minute)
	type shape struct {
		root          string
		stages, width int
	}
	for _, sh := range []shape{{"ladder", 30, 2}, {"pipeline", 10, 10}} {
		root := newSpec(sh.root, "ok")
		root.Capability = "nobody" // stays ready until cancelled
		specs := []task.Spec{root}
		prev := []string{sh.root}
		edges := 0
		for st := range sh.stages {
			var layer []string
			for w := range sh.width {
				id := fmt.Sprintf("%s-%d-%d", sh.root, st, w)
				specs = append(specs, newSpec(id, "ok", prev...))
				edges += len(prev)
				layer = append(layer, id)
			}
			prev = layer
		}
		if _, err := c.SubmitGraph(ctx, specs); err != nil {
			t.Fatal(err)
		}
		last := specs[len(specs)-1].ID
		testenv.Eventually(t, time.Minute, last+" created", func() bool {
			got, err := c.Get(ctx, last)
			return err == nil && got.State == task.Waiting
		})
		before := o.StoreReads()
		if _, err := c.Cancel(ctx, sh.root, "test"); err != nil {
			t.Fatal(err)
		}
		for _, s := range specs {
			if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Cancelled {
				t.Fatalf("%s: %v", s.ID, err)
			}
		}
		reads := o.StoreReads() - before
		t.Logf("%s: %d tasks, %d edges, %d task reads to cancel them all", sh.root, len(specs), edges, reads)
		if limit := uint64(3 * (edges + len(specs))); reads > limit {
			t.Fatalf("%s: %d reads for %d edges and %d tasks (limit %d): the cascade walks paths", sh.root, reads, edges, len(specs), limit)
		}
	}
}

// TestShardIDsAreReserved: a submission may not squat a shard's id (its
// parent would wait for a shard that is not its own).
func TestShardIDsAreReserved(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	s := newSpec("victim/shard/0", "ok")
	if _, err := c.Submit(ctx, s); err == nil || !strings.Contains(err.Error(), "reserved for the shards") {
		t.Fatalf("SDK submit of a shard id: %v", err)
	}
	publishRaw(t, c.Conn(), subject.Submit("ok"), []byte(`{"id":"victim/shard/1","type":"ok"}`))
	var rej *sdk.RejectedError
	testenv.Eventually(t, 20*time.Second, "rejected", func() bool {
		_, err := c.Get(ctx, "victim/shard/1")
		return errors.As(err, &rej)
	})
	if !strings.Contains(rej.Rejection.Reason, "reserved for the shards") {
		t.Fatalf("reason %q", rej.Rejection.Reason)
	}
}

// TestRetentionKeepsUnfinishedTasks: with a history max age, a finished
// task's history goes once it is that old, while a task waiting longer than
// the max age keeps its state and runs.
func TestRetentionKeepsUnfinishedTasks(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	cfg := orchestrator.Config{}
	cfg.Topology.TaskHistoryMaxAge = 2 * time.Second
	testenv.Orchestrator(t, srv.URL(), cfg)
	okExecutorStarted(t, srv.URL())
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	late := newSpec("waits-past-max-age", "ok")
	late.Delay = task.Duration(5 * time.Second)
	if _, err := c.SubmitMany(ctx, []task.Spec{late, newSpec("finishes-at-once", "ok")}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "finishes-at-once"); err != nil || got.State != task.Succeeded {
		t.Fatalf("finishes-at-once: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "the finished history removed", func() bool {
		_, err := c.Get(ctx, "finishes-at-once")
		return errors.Is(err, sdk.ErrNotFound)
	})
	got, err := c.Wait(ctx, "waits-past-max-age")
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("waits-past-max-age: %v", err)
	}
	if h := transitions(t, c, "waits-past-max-age"); len(h) < 3 || h[0] != ">waiting" {
		t.Fatalf("history of the delayed task %v lost its beginning", h)
	}
}

// TestCascadeRetriesAStaleRead: a cascade continuation that reads its task
// at a revision older than the end it continues (what a stream leader cut
// off by a partition answers) is tried again — here until its delivery
// limit keeps it as poison — instead of being dropped as "re-driven since";
// one that reads the end itself goes on and is acknowledged.
func TestCascadeRetriesAStaleRead(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{MaxDeliveries: 3}, executor.Config{})
	ctx := testenv.Context(t, 2*time.Minute)
	if _, err := c.Submit(ctx, newSpec("casc-up", "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "casc-up"); err != nil || got.State != task.Succeeded {
		t.Fatalf("casc-up: %v %v", got, err)
	}
	js, _ := jetstream.New(c.Conn())
	fire := func(rev uint64) {
		body := fmt.Sprintf(`{"id":"casc-up","kind":"cascade","at":%q,"revision":%d}`, time.Now().UTC().Format(time.RFC3339Nano), rev)
		if _, err := js.Publish(ctx, subject.Fire(subject.TimerCascade, "casc-up"), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	poison, err := js.Stream(ctx, subject.StreamPoison)
	if err != nil {
		t.Fatal(err)
	}
	kept := func() uint64 {
		info, err := poison.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	fire(1) // the end is at a later revision: a current read
	fire(1 << 40)
	testenv.Eventually(t, time.Minute, "the stale continuation kept after its delivery limit", func() bool { return kept() == 1 })
	msg, err := poison.GetLastMsgForSubject(ctx, "ax.poison.>")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg.Data), `"revision":1099511627776`) || !strings.Contains(msg.Header.Get(subject.HeaderPoisonReason), "stale read") {
		t.Fatalf("kept %s (%s), want the stale continuation", msg.Data, msg.Header.Get(subject.HeaderPoisonReason))
	}
}

// TestFreshReadyTaskDispatchedByItsWatch: a task made ready whose dispatch
// was never published (the handler that wrote "ready" failed to dispatch
// and its message came back) is dispatched by its next look, under the
// same execution id, not left to the reconciler's repair a grace later. A
// chaos run left one ready for 8 minutes: its watch handler wrote "ready",
// its dispatch timed out, and the redelivery, seeing a task ready for
// seconds, trusted its dispatch to be on its way.
func TestFreshReadyTaskDispatchedByItsWatch(t *testing.T) {
	t.Parallel()
	// The default grace (1 min): within it a look used to wait.
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, time.Minute)
	s := newSpec("fresh-ready", "ok", "fresh-ready-missing-upstream")
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(c.Conn())
	st, err := store.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var rec task.Task
	var rev uint64
	testenv.Eventually(t, 20*time.Second, "waiting", func() bool {
		rec, rev, err = st.Get(ctx, s.ID)
		return err == nil && rec.State == task.Waiting
	})
	// What a handler writes before it dispatches, with no dispatch after.
	now := time.Now().UTC()
	ready := rec
	ready.State, ready.Attempt, ready.ExecutionID, ready.ReadyAt, ready.Dispatches = task.Ready, 1, "fresh-ready-exec", &now, 1
	ready.UpdatedAt = now
	if _, err := st.Write(ctx, task.Event{Kind: task.KindTransition, From: task.Waiting, To: task.Ready, At: now,
		Actor: "test", Reason: "made ready, not dispatched", Task: ready}, rev); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"id":%q,"kind":"watch","at":%q}`, s.ID, now.Format(time.RFC3339Nano))
	if _, err := js.Publish(ctx, subject.Fire(subject.TimerWatch, s.ID), []byte(body)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got, err := c.Wait(wctx, s.ID)
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("%s: %s %v, want it dispatched by its look and run", s.ID, got.State, err)
	}
	if got.ExecutionID != "fresh-ready-exec" {
		t.Fatalf("ran under execution %s, want the one made ready (dispatched, not repaired)", got.ExecutionID)
	}
}

// TestLostDispatchInBusyLevelIsRedispatched: a ready task whose dispatch
// was lost, on a level that never empties (new tasks keep arriving faster
// than they run), is dispatched again once the level's consumer delivered
// past where its dispatch would be — not when the level is empty at last.
func TestLostDispatchInBusyLevelIsRedispatched(t *testing.T) {
	t.Parallel()
	srv, reg, c := reconciling(t)
	ctx := testenv.Context(t, 2*time.Minute)
	victim := newSpec("victim", "slow")
	victim.Capability = "busy"
	if _, err := c.Submit(ctx, victim); err != nil {
		t.Fatal(err)
	}
	var first string
	testenv.Eventually(t, 20*time.Second, "ready", func() bool {
		got, err := c.Get(ctx, "victim")
		if err == nil {
			first = got.ExecutionID
		}
		return err == nil && got.State == task.Ready
	})
	loseDispatch(t, ctx, c, "busy", victim.PriorityLevel())
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capabilities: []string{"busy"}, Capacity: 2})
	ex.HandleFunc("slow", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	// The load: at least 50 dispatches always waiting on the level, for
	// at most a minute (then it stops, and the level drains).
	js, _ := jetstream.New(c.Conn())
	stop := make(chan struct{})
	var ranOut atomic.Bool
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		end := time.After(time.Minute)
		for i := 0; ; {
			select {
			case <-stop:
				return
			case <-end:
				ranOut.Store(true)
				return
			case <-time.After(50 * time.Millisecond):
			}
			if n, err := levelPending(ctx, js, "busy", victim.PriorityLevel()); err != nil || n >= 50 {
				continue
			}
			var specs []task.Spec
			for range 20 {
				s := newSpec(fmt.Sprint("load-", i), "slow")
				s.Capability = "busy"
				specs = append(specs, s)
				i++
			}
			if _, err := c.SubmitMany(ctx, specs); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	got, err := c.Wait(ctx, "victim")
	close(stop)
	<-loadDone
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("victim: %+v %v", got, err)
	}
	if ranOut.Load() {
		t.Fatal("the lost dispatch was repaired only once its level's load stopped")
	}
	if got.ExecutionID == first {
		t.Fatal("re-dispatched under the same execution id")
	}
	if n := value(t, reg, "ax_reconciler_repairs_total", map[string]string{"reason": "ready_not_dispatched"}); n < 1 {
		t.Fatalf("ready_not_dispatched repairs %v, want ≥ 1", n)
	}
}

// TestDependentMissedByItsUpstreamsEnd: a dependent whose upstream's end
// does not find it — here its edge is purged before the end; in a cluster,
// a read answered by a stream leader cut off by a partition — is released
// by its first look, about dependencyLook after it registered, not an
// interval (an hour here) later.
func TestDependentMissedByItsUpstreamsEnd(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	reg := prometheus.NewRegistry()
	cfg := orchestrator.Config{ReconcileInterval: time.Hour, RunGrace: 2 * time.Second, Metrics: promorch.New(reg)}
	testenv.Orchestrator(t, srv.URL(), cfg)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	up := newSpec("missed-up", "ok")
	up.Capability = "missed-later"
	if _, err := c.Submit(ctx, up); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, newSpec("missed-child", "ok", "missed-up")); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(c.Conn())
	edges, err := js.Stream(ctx, subject.StreamEdges)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the child's edge stored", func() bool {
		_, err := edges.GetLastMsgForSubject(ctx, subject.Edge("missed-up", "missed-child"))
		return err == nil
	})
	if err := edges.Purge(ctx, jetstream.WithPurgeSubject(subject.EdgesOf("missed-up"))); err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, okExecutor(t, srv.URL(), executor.Config{Capabilities: []string{"default", "missed-later"}}))
	if got, err := c.Wait(ctx, "missed-child"); err != nil || got.State != task.Succeeded {
		t.Fatalf("missed-child: %+v %v", got, err)
	}
	// The look either found the upstream ended and released the child (a
	// repair), or — the machine slow enough that the upstream had not
	// ended by then — registered the child's edge again, which the
	// upstream's end then followed. Either way the look, not an interval,
	// freed it.
	n := value(t, reg, "ax_reconciler_repairs_total", map[string]string{"reason": "waiting_resolved"})
	_, edgeErr := edges.GetLastMsgForSubject(ctx, subject.Edge("missed-up", "missed-child"))
	if n != 1 && !(n <= 0 && edgeErr == nil) {
		t.Fatalf("waiting_resolved repairs %v (want 1), the child's edge registered again: %v", n, edgeErr == nil)
	}
}

// TestGraphTaskFailingDoesNotHoldTheOthers: a graph one of whose tasks
// cannot be created (its unique key's stream is gone) still creates and
// runs the tasks that do not depend on it in the same delivery; the failing
// task's dependent waits for it, and the redelivered graph completes the
// set once the stream is back.
func TestGraphTaskFailingDoesNotHoldTheOthers(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, time.Minute)
	js, _ := jetstream.New(c.Conn())
	if err := js.DeleteStream(ctx, subject.StreamUnique); err != nil {
		t.Fatal(err)
	}
	u := newSpec("gf-u", "ok")
	u.UniqueKey, u.UniqueWindow = "gf", task.Duration(time.Minute)
	// Created in this order: gf-a, gf-u (fails), gf-d (after gf-u), gf-z.
	if _, err := c.SubmitGraph(ctx, []task.Spec{newSpec("gf-a", "ok"), u, newSpec("gf-d", "ok", "gf-u"), newSpec("gf-z", "ok")}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gf-a", "gf-z"} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v, want it run while gf-u cannot be created", id, got, err)
		}
	}
	for _, id := range []string{"gf-u", "gf-d"} {
		if got, err := c.Get(ctx, id); !errors.Is(err, sdk.ErrNotFound) {
			t.Fatalf("%s: %+v %v, want not created yet", id, got, err)
		}
	}
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gf-u", "gf-d"} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v, want it created by the graph's redelivery and run", id, got, err)
		}
	}
}
