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

// TestDispatchIsTheRecord: a dispatch is written on its own subject
// (ax.task.<id>.d.<capability>.p<N>.<type>) with its token in a header, and
// it is the record: the task's last message, read with its revision as its
// DispatchRevision. Writes on either subject check one revision (the
// task's last message on any of them): a stale write after a dispatch is
// refused.
func TestDispatchIsTheRecord(t *testing.T) {
	t.Parallel()
	st, js := newStoreJS(t)
	ctx := testenv.Context(t, 30*time.Second)
	rev, err := st.Write(ctx, event("", task.Waiting), 0)
	if err != nil {
		t.Fatal(err)
	}
	ready := event(task.Waiting, task.Ready)
	ready.Task.ExecutionID, ready.Task.Capability = "e1", "gpu"
	drev, err := st.Dispatch(ctx, ready, rev, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tasks.GetMsg(ctx, drev)
	if err != nil {
		t.Fatal(err)
	}
	if want := subject.TaskDispatch("t1", "gpu", task.DefaultPriority, "x"); raw.Subject != want || raw.Header.Get(subject.HeaderToken) != "tok" {
		t.Fatalf("dispatch stored on %q with token %q, want %q with its token", raw.Subject, raw.Header.Get(subject.HeaderToken), want)
	}
	got, grev, err := st.Get(ctx, "t1")
	if err != nil || grev != drev || got.State != task.Ready || got.DispatchRevision != drev {
		t.Fatalf("record after the dispatch: %+v at %d (%v), want ready at %d with its dispatch revision", got, grev, err, drev)
	}
	// A write from before the dispatch loses; one after it wins.
	if _, err := st.Write(ctx, event(task.Waiting, task.Cancelled), rev); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a write at the revision before the dispatch: %v, want a conflict", err)
	}
	if _, err := st.Dispatch(ctx, ready, rev, "tok", ""); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second dispatch at the revision before: %v, want a conflict", err)
	}
	cancelled := event(task.Ready, task.Cancelled)
	crev, err := st.Write(ctx, cancelled, drev)
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.History(ctx, "t1")
	if err != nil || len(h) != 3 || h[1].Event.To != task.Ready || h[1].Event.Task.DispatchRevision != drev || h[2].Revision != crev {
		t.Fatalf("history: %+v %v", h, err)
	}
	if _, err := st.Dispatch(ctx, event(task.Waiting, task.Waiting), crev, "", ""); err == nil {
		t.Fatal("a dispatch of a record that is not ready was written")
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
