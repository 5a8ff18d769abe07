package queue_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestReadyLevelsCountOnlyWhatCanRun: the dispatches of cancelled tasks
// on a level nobody pulls stay stored (each is its task's history entry),
// but the backlog does not count them, and its age is the oldest dispatch
// that can still run.
func TestReadyLevelsCountOnlyWhatCanRun(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	level := func() queue.Level {
		t.Helper()
		levels, err := queue.ReadyLevels(ctx, js, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, lv := range levels {
			if lv.Capability == "nobody" && lv.Priority == 0 {
				return lv
			}
		}
		t.Fatalf("no level nobody p0 in %+v", levels)
		return queue.Level{}
	}
	var ids []string
	for range 3 {
		id, err := c.Submit(ctx, task.Spec{Type: "x", Capability: "nobody", Priority: new(0)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	testenv.Eventually(t, 30*time.Second, "three dispatches", func() bool { return level().Pending == 3 })
	// A dependent added to the head's task is an event after its
	// dispatch, of the same execution: the dispatch still counts.
	if _, err := c.Submit(ctx, task.Spec{ID: "child", Type: "x", Capability: "nobody", DependsOn: []string{ids[0]}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the dependent recorded", func() bool {
		h, err := c.History(ctx, ids[0])
		return err == nil && len(h) > 0 && h[len(h)-1].Event.Kind == task.KindDependentAdded
	})
	if lv := level(); lv.Pending != 3 {
		t.Fatalf("a dependent added to a waiting task: %+v; want 3 pending", lv)
	}
	for _, id := range ids[:2] { // the head of the level
		if _, err := c.Cancel(ctx, id, "not needed"); err != nil {
			t.Fatal(err)
		}
	}
	live, err := c.Get(ctx, ids[2])
	if err != nil {
		t.Fatal(err)
	}
	if lv := level(); lv.Pending != 1 || lv.Oldest < time.Since(*live.ReadyAt)-time.Second || lv.Oldest > time.Since(*live.ReadyAt) {
		t.Fatalf("two of three cancelled: %+v; want 1 pending, as old as the live one (ready %v ago)", lv, time.Since(*live.ReadyAt))
	}
	if _, err := c.Cancel(ctx, ids[2], "not needed"); err != nil {
		t.Fatal(err)
	}
	if lv := level(); lv.Pending != 0 || lv.Oldest != 0 {
		t.Fatalf("all cancelled: %+v; want an empty backlog", lv)
	}
	if n, err := queue.ReadyDepth(ctx, js); err != nil || n != 0 {
		t.Fatalf("ready depth %d, %v; want 0", n, err)
	}
}
