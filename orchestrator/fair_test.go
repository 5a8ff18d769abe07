package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// fairRun submits 200 tasks of tenant a, then 5 of tenant b, to one
// executor running one at a time, each 5 ms. It returns how many of a's
// started after b's last task was ready and before it started (ahead), and
// how many of a's had not started by then (left). Counting from b's
// readiness, not its submission, leaves out the time b's intake takes
// (long under the race detector), which fairness does not order.
func fairRun(t *testing.T, window int, weights ...task.KeyLimit) (ahead, left int) {
	t.Helper()
	return fairRunOf(t, window, 200, 5*time.Millisecond, weights...)
}

// fairRunOf is fairRun with aTasks of tenant a, each handled in handle.
func fairRunOf(t *testing.T, window, aTasks int, handle time.Duration, weights ...task.KeyLimit) (ahead, left int) {
	t.Helper()
	_, ex, c := testenv.Stack(t, orchestrator.Config{Retry: fastRetry, FairWindow: window, KeyLimits: weights},
		executor.Config{Capacity: 1})
	var mu sync.Mutex
	var aStarts []time.Time
	var bLast time.Time
	ex.HandleFunc("job", func(_ context.Context, j *executor.Job) (any, error) {
		tenant, _, _ := strings.Cut(j.ID, "-")
		mu.Lock()
		if tenant == "a" {
			aStarts = append(aStarts, time.Now())
		} else {
			bLast = time.Now()
		}
		mu.Unlock()
		time.Sleep(handle)
		return nil, nil
	})
	ctx := testenv.Context(t, 2*time.Minute)
	var specs []task.Spec
	for i := range aTasks {
		s := newSpec(fmt.Sprint("a-", i), "job")
		s.FairnessKey = "a"
		specs = append(specs, s)
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	// b submits once a's backlog is in.
	testenv.Eventually(t, time.Minute, "a's tasks accepted", func() bool {
		got, err := c.Get(ctx, fmt.Sprint("a-", aTasks-1))
		return err == nil && got.State != ""
	})
	var bs []task.Spec
	for i := range 5 {
		s := newSpec(fmt.Sprint("b-", i), "job")
		s.FairnessKey = "b"
		bs = append(bs, s)
	}
	if _, err := c.SubmitMany(ctx, bs); err != nil {
		t.Fatal(err)
	}
	var bReady time.Time
	for _, s := range append(specs, bs...) {
		got, err := c.Wait(ctx, s.ID)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", s.ID, got, err)
		}
		if strings.HasPrefix(s.ID, "b-") && got.ReadyAt != nil && got.ReadyAt.After(bReady) {
			bReady = *got.ReadyAt
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, at := range aStarts {
		switch {
		case at.After(bLast):
		case at.After(bReady):
			ahead++
		}
		if at.After(bReady) {
			left++
		}
	}
	return ahead, left
}

// TestFairnessKeysTakeTurns: behind tenant a's backlog, tenant b's tasks
// wait for the window and a few turns, not for a's whole backlog — and
// without fairness they wait for all of it.
func TestFairnessKeysTakeTurns(t *testing.T) {
	t.Parallel()
	ahead, left := fairRun(t, 8)
	// b's 5 tasks go in turn with a's: behind the window (8) and one of
	// a's per turn, about 13 (on a loaded machine b's way from ready to
	// its queue takes longer; still far from a's whole backlog).
	if ahead > left/2 {
		t.Errorf("with fairness, %d of a's tasks (of %d waiting) started after b's last task was ready and before it started", ahead, left)
	}
	unfairAhead, unfairLeft := fairRun(t, -1)
	if unfairLeft < 50 || unfairAhead < unfairLeft-10 {
		t.Errorf("without fairness, %d of a's %d waiting tasks started before b's last: b should wait for (nearly) all of them", unfairAhead, unfairLeft)
	}
	t.Logf("a's tasks started after b's last task was ready and before it started: %d of %d waiting with fairness, %d of %d without", ahead, left, unfairAhead, unfairLeft)
}

// TestFairnessWeights: with weight 4 for tenant a and 1 for b, a gets
// about 4 turns for each of b's while both wait.
func TestFairnessWeights(t *testing.T) {
	t.Parallel()
	ahead, left := fairRun(t, 8, task.KeyLimit{Key: "a", Weight: 4})
	// The window (8), then 4 of a's per turn of b's: about 28 (more on a
	// loaded machine, never a's whole backlog; fewer than 14 would be
	// weight 1's turns).
	if ahead > left*3/4 || ahead < 14 {
		t.Errorf("with weights 4:1, %d of a's tasks (of %d waiting) started after b's last task was ready and before it started; want about 8 + 4×5", ahead, left)
	}
	t.Logf("with weights 4:1, %d of a's tasks started after b's last task was ready and before it started", ahead)
}

// TestFairnessWindowFollowsTheDrain: with the default window (1,024) and
// handlers of 20 ms on one slot (about 50 tasks a second), b's tasks wait
// behind about a second of a's work, not behind a's whole backlog of 300
// that a fixed window of 1,024 let through to the level at once.
func TestFairnessWindowFollowsTheDrain(t *testing.T) {
	t.Parallel()
	ahead, left := fairRunOf(t, 0, 300, 20*time.Millisecond)
	// About 50 (a second of work) and a turn; under the race detector
	// fewer (the handlers are slower, the window follows). A fixed window
	// would let all of a's waiting tasks (left) go first.
	if left < 150 || ahead > left/3 {
		t.Errorf("with the default window, %d of a's tasks (of %d waiting) started after b's last task was ready and before it started; want about a second of work (50)", ahead, left)
	}
	t.Logf("with the default window and 20-ms handlers, %d of a's %d waiting tasks started after b's last task was ready and before it started", ahead, left)
}

// TestGoneOrchestratorsFairQueueIsTakenOver: an orchestrator holding 40
// tasks queued for their fairness key's turn loses its connection (as in
// a kill -9); another orchestrator takes them over within seconds —
// dispatched again under new executions — instead of when their looks
// come due (ten minutes here), and every task runs once.
func TestGoneOrchestratorsFairQueueIsTakenOver(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	cfg := orchestrator.Config{Retry: fastRetry, FairWindow: 1, ReconcileInterval: 10 * time.Minute, ReconcileMaxInterval: time.Hour}
	cfg.Logger = testenv.SlogLogger(t)
	ncA, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	a, err := orchestrator.New(ncA, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Stop(ctx) // its connection is closed: what it holds is lost
	})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 3*time.Minute)
	var specs []task.Spec
	for i := range 40 {
		s := newSpec(fmt.Sprint("q-", i), "job")
		s.FairnessKey = "a"
		specs = append(specs, s)
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	// No executor: one dispatch waits in the level (the window), the
	// others queue in a, each with its look in a sweep naming a.
	js, _ := jetstream.New(c.Conn())
	testenv.Eventually(t, time.Minute, "the tasks ready and queued", func() bool {
		for _, s := range specs {
			if got, err := c.Get(ctx, s.ID); err != nil || got.State != task.Ready {
				return false
			}
		}
		st, err := js.Stream(ctx, subject.StreamTimers)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject.OwnedSweepsAll))
		return err == nil && len(info.State.Subjects) > 0
	})
	testenv.Orchestrator(t, srv.URL(), cfg)
	gone := time.Now()
	ncA.Close()
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	var mu sync.Mutex
	runs := map[string]int{}
	ex.HandleFunc("job", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil, nil
	})
	testenv.Start(t, ex)
	takenOver := 0
	for _, s := range specs {
		if succeededWithReason(ctx, t, c, s.ID, "reconciler: the orchestrator that queued it for its fairness key's turn is gone") {
			takenOver++
		}
	}
	t.Logf("%d of 40 tasks taken over from the gone orchestrator; all succeeded %s after it went", takenOver, time.Since(gone).Round(time.Millisecond))
	if takenOver < 30 {
		t.Errorf("%d of the 40 tasks were taken over from the gone orchestrator; want the queued ones (all but the window's)", takenOver)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
}
