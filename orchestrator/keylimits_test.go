package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// meter counts the handlers running per key and the most seen at once.
type meter struct {
	mu         sync.Mutex
	now, peaks map[string]int
}

func newMeter() *meter { return &meter{now: map[string]int{}, peaks: map[string]int{}} }

func (m *meter) enter(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now[key]++
	m.peaks[key] = max(m.peaks[key], m.now[key])
}

func (m *meter) leave(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now[key]--
}

func (m *meter) peak(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peaks[key]
}

// keyedSpec is a task of type typ under a concurrency key.
func keyedSpec(id, typ, key string) task.Spec {
	s := newSpec(id, typ)
	s.ConcurrencyKey = key
	s.Payload = []byte(fmt.Sprintf("%q", key))
	return s
}

// TestConcurrencyLimitPerKey: 50 executors, a limit of 5 per tenant, 1,000
// tasks of one tenant and 100 of another: the
// handlers of one tenant never run more than 5 at once, through executors
// dying mid-run and the orchestrator restarting; every task finishes, the
// waiting ones say why, and no slot is left taken.
func TestConcurrencyLimitPerKey(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	ocfg := orchestrator.Config{Retry: fastRetry, RunGrace: 2 * time.Second, ReconcileInterval: time.Second,
		KeyLimits: []task.KeyLimit{{Key: "tenant.*", Concurrency: 5}}}
	orch := testenv.Orchestrator(t, srv.URL(), ocfg)
	m := newMeter()
	var done atomic.Int64
	var conns []*nats.Conn
	for range 50 {
		nc := testenv.Conn(t, srv.URL())
		ex, err := executor.New(nc, executor.Config{Capacity: 4, AckWait: 2 * time.Second, Logger: testenv.SlogLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ex.HandleFunc("work", func(ctx context.Context, j *executor.Job) (any, error) {
			key := strings.Trim(string(j.Payload), `"`)
			m.enter(key)
			defer m.leave(key)
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
			done.Add(1)
			return nil, nil
		})
		testenv.Start(t, ex)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = ex.Stop(ctx)
		})
		conns = append(conns, nc)
	}
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 4*time.Minute)
	var specs []task.Spec
	for i := range 1000 {
		specs = append(specs, keyedSpec(fmt.Sprint("a-", i), "work", "tenant.a"))
		if i < 100 {
			specs = append(specs, keyedSpec(fmt.Sprint("b-", i), "work", "tenant.b"))
		}
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "a third of the tasks ran", func() bool { return done.Load() >= 360 })
	// Executors die mid-run (their connections cut: no report, no
	// heartbeat), and the orchestrator restarts.
	for _, nc := range conns[:10] {
		nc.Close()
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := orch.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	testenv.Orchestrator(t, srv.URL(), ocfg)
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", s.ID, got, err)
		}
	}
	for _, key := range []string{"tenant.a", "tenant.b"} {
		if p := m.peak(key); p > 5 || p < 2 {
			t.Errorf("key %s ran %d at once; the limit is 5", key, p)
		}
	}
	// Tenant a's tasks over the limit waited for a slot, visibly (the
	// first found is enough: a history read each is slow under the race
	// detector, and this ran out of its time reading all 1,000).
	held := ""
	for i := 0; i < 1000 && held == ""; i++ {
		h, err := c.History(ctx, fmt.Sprint("a-", i))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range h {
			if ev.Event.To == task.Ready && strings.HasPrefix(ev.Event.Reason, "held: concurrency limit of key tenant.a reached") {
				held = fmt.Sprint("a-", i)
				break
			}
		}
	}
	if held == "" {
		t.Error("no task of tenant a waited visibly for a slot")
	}
	t.Logf("%s waited for a slot, visibly", held)
	// Every slot was given back.
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	kv, err := js.KeyValue(ctx, subject.BucketSlots)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "no slot left taken", func() bool {
		for _, key := range []string{"tenant.a", "tenant.b"} {
			if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return false
			}
		}
		return true
	})
}

// TestRateLimitPerKey: a rate of 5 starts per 400ms: 20 tasks take at
// least three more windows, the excess waits (visibly) and none is
// dropped.
func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	srv, ex, c := testenv.Stack(t, orchestrator.Config{Retry: fastRetry,
		KeyLimits: []task.KeyLimit{{Key: "api", Rate: 5, Per: task.Duration(400 * time.Millisecond)}}}, executor.Config{})
	_ = srv
	var mu sync.Mutex
	var starts []time.Time
	ex.HandleFunc("call", func(context.Context, *executor.Job) (any, error) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil, nil
	})
	ctx := testenv.Context(t, time.Minute)
	var specs []task.Spec
	for i := range 20 {
		specs = append(specs, keyedSpec(fmt.Sprint("call-", i), "call", "api"))
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	heldOnes := 0
	for _, s := range specs {
		if succeededWithReason(ctx, t, c, s.ID, "held: rate limit of key api (5 per 400ms)") {
			heldOnes++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	first, last := starts[0], starts[0]
	for _, s := range starts {
		first, last = minTime(first, s), maxTime(last, s)
	}
	// 20 starts at 5 per window span at least 4 windows: the last starts
	// at least 3 windows after the first window began.
	if span := last.Sub(first); span < 800*time.Millisecond {
		t.Errorf("20 starts at 5 per 400ms took %s", span)
	}
	if heldOnes < 10 {
		t.Errorf("%d tasks waited for the rate visibly; at least 10 had to", heldOnes)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// limitSeen records the lowest adaptive limit an orchestrator reported.
type limitSeen struct {
	orchestrator.NopMetrics
	mu     sync.Mutex
	lowest float64
}

func (l *limitSeen) KeySlots(_ string, _ int, limit float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lowest == 0 || limit < l.lowest {
		l.lowest = limit
	}
}

// TestAdaptiveLimitFollowsTheDownstream: a downstream that takes 4 calls
// at once and answers "retry after" beyond: an adaptive limit of 16 comes
// down towards 4, and every task succeeds.
func TestAdaptiveLimitFollowsTheDownstream(t *testing.T) {
	t.Parallel()
	seen := &limitSeen{}
	_, ex, c := testenv.Stack(t, orchestrator.Config{Retry: fastRetry, Metrics: seen,
		KeyLimits: []task.KeyLimit{{Key: "down", Concurrency: 16, Adaptive: true}}}, executor.Config{Capacity: 32})
	var inFlight, refused atomic.Int64
	ex.HandleFunc("call", func(ctx context.Context, _ *executor.Job) (any, error) {
		if inFlight.Add(1) > 4 {
			inFlight.Add(-1)
			refused.Add(1)
			return nil, executor.RetryAfter(50*time.Millisecond, errors.New("429 too many requests"))
		}
		defer inFlight.Add(-1)
		time.Sleep(20 * time.Millisecond)
		return nil, nil
	})
	ctx := testenv.Context(t, 2*time.Minute)
	var specs []task.Spec
	for i := range 200 {
		s := keyedSpec(fmt.Sprint("down-", i), "call", "down")
		s.MaxRetries = new(100)
		specs = append(specs, s)
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			cur, _ := c.Get(context.Background(), s.ID)
			var holders []string
			if ls, err := c.Limits(context.Background()); err == nil {
				for _, l := range ls {
					for _, k := range l.Keys {
						holders = append(holders, fmt.Sprintf("%s: %d in use of %d (%.1f)", k.Key, k.InUse, k.Limit, k.Adaptive))
					}
				}
			}
			t.Fatalf("%s: %v; now %s: %s; slots %v", s.ID, err, cur.State, cur.Reason, holders)
		}
	}
	seen.mu.Lock()
	lowest := seen.lowest
	seen.mu.Unlock()
	if lowest > 8 {
		t.Errorf("the adaptive limit went no lower than %.1f with a downstream of 4", lowest)
	}
	t.Logf("lowest adaptive limit %.1f; %d calls refused by the downstream for 200 tasks", lowest, refused.Load())
	if math.IsNaN(lowest) {
		t.Fatal("NaN limit")
	}
}

// slotQueue is a key "k" limited to one slot whose first task, "first",
// holds it until release closes, with the order its tasks started in.
type slotQueue struct {
	c       *sdk.Client
	ctx     context.Context
	release chan struct{}

	mu      sync.Mutex
	started []string
}

// newSlotQueue starts a server, an orchestrator whose watches look only
// every minute (an order seen comes from the hand-over, not from the
// waiters' watches), and an executor, and submits "first" (priority 2)
// once the executor runs it.
func newSlotQueue(t *testing.T) *slotQueue {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{ReconcileInterval: time.Minute,
		KeyLimits: []task.KeyLimit{{Key: "k", Concurrency: 1}}})
	q := &slotQueue{release: make(chan struct{})}
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 4})
	ex.HandleFunc("work", func(ctx context.Context, j *executor.Job) (any, error) {
		q.mu.Lock()
		q.started = append(q.started, j.ID)
		q.mu.Unlock()
		if j.ID == "first" {
			select {
			case <-q.release:
			case <-ctx.Done():
			}
		}
		time.Sleep(5 * time.Millisecond)
		return nil, nil
	})
	testenv.Start(t, ex)
	q.c = testenv.Client(t, srv.URL())
	q.ctx = testenv.Context(t, 2*time.Minute)
	if _, err := q.c.Submit(q.ctx, q.spec("first", 2)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "first started", func() bool { return len(q.starts()) == 1 })
	return q
}

// spec is a task of key k at a priority.
func (q *slotQueue) spec(id string, prio int) task.Spec {
	s := keyedSpec(id, "work", "k")
	s.Priority = &prio
	return s
}

// waits waits until a task waits for the slot, visibly.
func (q *slotQueue) waits(t *testing.T, id string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, id+" waits for the slot", func() bool {
		got, err := q.c.Get(q.ctx, id)
		return err == nil && got.State == task.Ready && strings.HasPrefix(got.Reason, "held: concurrency limit of key k")
	})
}

// succeed waits until every task succeeded.
func (q *slotQueue) succeed(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if got, err := q.c.Wait(q.ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
	}
}

// starts returns the tasks started so far, in order.
func (q *slotQueue) starts() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.started)
}

// TestSlotWaitersStartInOrder: under a limit of 1, the tasks waiting for
// the slot get it in priority order, then in the order they began to
// wait, and tasks arriving while they wait — a stream of them, one every
// few milliseconds, the slot freeing all the while — never overtake them.
func TestSlotWaitersStartInOrder(t *testing.T) {
	t.Parallel()
	q := newSlotQueue(t)
	want := []string{"first", "urgent"}
	for i := range 5 {
		id := fmt.Sprint("w", i)
		if _, err := q.c.Submit(q.ctx, q.spec(id, 2)); err != nil {
			t.Fatal(err)
		}
		q.waits(t, id)
		want = append(want, id)
	}
	if _, err := q.c.Submit(q.ctx, q.spec("urgent", 0)); err != nil {
		t.Fatal(err)
	}
	q.waits(t, "urgent")
	// Newcomers keep arriving while the waiters take their turns.
	var newcomers []string
	arrived := make(chan struct{})
	go func() {
		defer close(arrived)
		for i := range 30 {
			id := fmt.Sprint("n", i)
			newcomers = append(newcomers, id)
			if _, err := q.c.Submit(q.ctx, q.spec(id, 2)); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	close(q.release)
	<-arrived
	q.succeed(t, append(want, newcomers...)...)
	started := q.starts()
	if len(started) != len(want)+len(newcomers) {
		t.Fatalf("%d starts, want %d (one each): %v", len(started), len(want)+len(newcomers), started)
	}
	if got := started[:len(want)]; !slices.Equal(got, want) {
		t.Errorf("started %v first, want %v: the waiters by priority, then in the order they waited, before any newcomer", got, want)
	}
}

// TestSlotWaitersLowerPriorityGetsShare: the freed slots of a key go to
// its waiters' priorities by the executors' pull weights (40 … 4), not
// strictly: behind 40 waiting p0 tasks, a waiting p5 task gets about one
// slot in eleven instead of waiting for every p0 task.
func TestSlotWaitersLowerPriorityGetsShare(t *testing.T) {
	t.Parallel()
	q := newSlotQueue(t)
	var specs []task.Spec
	var ids []string
	for i := range 5 {
		specs = append(specs, q.spec(fmt.Sprint("low-", i), 5))
	}
	for i := range 40 {
		specs = append(specs, q.spec(fmt.Sprint("high-", i), 0))
	}
	if _, err := q.c.SubmitMany(q.ctx, specs); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		q.waits(t, s.ID)
		ids = append(ids, s.ID)
	}
	close(q.release)
	q.succeed(t, ids...)
	started := q.starts()
	firstLow, lastHigh := -1, -1
	for i, id := range started {
		switch {
		case strings.HasPrefix(id, "low-") && firstLow < 0:
			firstLow = i
		case strings.HasPrefix(id, "high-"):
			lastHigh = i
		}
	}
	// 40:4 — the first p5 task goes with about the eleventh slot.
	if firstLow < 0 || firstLow > 20 || firstLow > lastHigh {
		t.Errorf("the first p5 task started %dth (the last p0 %dth): %v", firstLow, lastHigh, started)
	}
	t.Logf("the first p5 task started %dth of %d; the last p0 %dth", firstLow, len(started), lastHigh)
}
