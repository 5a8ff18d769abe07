package store_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/task"
)

func newStore(t *testing.T) *store.Store {
	t.Helper()
	st, _ := newStoreJS(t)
	return st
}

// newStoreJS is newStore with its JetStream context.
func newStoreJS(t *testing.T) (*store.Store, jetstream.JetStream) {
	t.Helper()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 30*time.Second)
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return st, js
}

func event(from, to task.State) task.Event {
	return task.Event{Kind: task.KindTransition, From: from, To: to, At: time.Now(), Actor: "test",
		Task: task.Task{Spec: task.Spec{ID: "t1", Type: "x"}, State: to}}
}

// TestCompareAndSet: of many writers racing from the same revision exactly
// one wins; a create happens once; the table is enforced; the history keeps
// every event in order.
func TestCompareAndSet(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testenv.Context(t, 30*time.Second)
	if _, _, err := st.Get(ctx, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get of a missing task: %v", err)
	}
	rev, err := st.Write(ctx, event("", task.Ready), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(ctx, event("", task.Ready), 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: %v, want a conflict", err)
	}
	var wins, conflicts int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.Write(ctx, event(task.Ready, task.Running), rev)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, store.ErrConflict):
				conflicts++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != 15 {
		t.Fatalf("%d writers won and %d conflicted, want 1 and 15", wins, conflicts)
	}
	var bad *task.ErrInvalidTransition
	if _, err := st.Write(ctx, event(task.Succeeded, task.Running), 0); !errors.As(err, &bad) {
		t.Fatalf("invalid transition accepted: %v", err)
	}
	got, last, err := st.Get(ctx, "t1")
	if err != nil || got.State != task.Running || last <= rev {
		t.Fatalf("get: %+v %d %v", got, last, err)
	}
	h, err := st.History(ctx, "t1")
	if err != nil || len(h) != 2 || h[0].Event.To != task.Ready || h[1].Event.To != task.Running || h[1].Revision != last {
		t.Fatalf("history %+v %v", h, err)
	}
}

// TestPeekReadsStateAndExecution: Peek gives the current record's state,
// execution id and revision (what an executor checks), and not found for a
// task that has no history.
func TestPeekReadsStateAndExecution(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testenv.Context(t, 30*time.Second)
	if _, _, _, err := st.Peek(ctx, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("peek of a missing task: %v", err)
	}
	ev := event("", task.Ready)
	ev.Task.ExecutionID = "e1"
	ev.Task.Payload = []byte(`{"skipped":"by Peek"}`)
	rev, err := st.Write(ctx, ev, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := event(task.Ready, task.Cancelled)
	next.Task.ExecutionID = "e1"
	rev2, err := st.Write(ctx, next, rev)
	if err != nil {
		t.Fatal(err)
	}
	state, exec, got, err := st.Peek(ctx, "t1")
	if err != nil || state != task.Cancelled || exec != "e1" || got != rev2 {
		t.Fatalf("peek: %s %s %d %v, want cancelled e1 %d", state, exec, got, err, rev2)
	}
}

// TestReadsFollowDirectGetsBeingTurnedOff: a single-replica AX_TASKS allows
// direct gets; a store bound then keeps reading after the stream stops
// allowing them (given replicas), instead of failing with no responders.
func TestReadsFollowDirectGetsBeingTurnedOff(t *testing.T) {
	t.Parallel()
	st, js := newStoreJS(t)
	ctx := testenv.Context(t, 30*time.Second)
	tasks, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if !tasks.CachedInfo().Config.AllowDirect {
		t.Fatal("a single-replica AX_TASKS does not allow direct gets")
	}
	rev, err := st.Write(ctx, event("", task.Ready), 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tasks.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, got, err := st.Get(ctx, "t1"); err != nil || got != rev {
			t.Fatalf("read after direct gets were turned off: revision %d, %v", got, err)
		}
	}
}
