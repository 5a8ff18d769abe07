package orchestrator

import (
	"testing"
	"time"

	"github.com/ax-run/ax/task"
)

// TestFairWindowFollowsTheRate: counted every 10 ms, a level delivering
// 50 dispatches a second gets a window of about 50 after a few seconds; one
// delivering 4 a second the smallest window; one delivering 100,000 a
// second the largest; and a level that runs dry with tasks queued doubles
// its window at each count.
func TestFairWindowFollowsTheRate(t *testing.T) {
	run := func(perSecond float64, seconds int, waiting int) *fairLevel {
		lv := &fairLevel{window: fairMinWindow}
		now := time.Unix(0, 0)
		var delivered float64
		for range seconds * 100 {
			now = now.Add(10 * time.Millisecond)
			delivered += perSecond / 100
			lv.adapt(waiting, uint64(delivered), now, 1024)
		}
		return lv
	}
	if lv := run(50, 5, 10); lv.window < 45 || lv.window > 52 {
		t.Errorf("50 deliveries a second: window %d (rate %.1f), want about 50", lv.window, lv.rate)
	}
	if lv := run(4, 5, 10); lv.window != fairMinWindow {
		t.Errorf("4 deliveries a second: window %d, want the smallest, %d", lv.window, fairMinWindow)
	}
	if lv := run(100_000, 5, 10); lv.window != 1024 {
		t.Errorf("100,000 deliveries a second: window %d, want the largest, 1024", lv.window)
	}

	lv := &fairLevel{window: fairMinWindow, queued: 1}
	now := time.Unix(0, 0)
	var got []int
	for i := range 4 {
		now = now.Add(10 * time.Millisecond)
		lv.adapt(0, uint64(i), now, 1024)
		got = append(got, lv.window)
	}
	if got[0] != 2*fairMinWindow || got[3] != 16*fairMinWindow {
		t.Errorf("ran dry with tasks queued: windows %v, want doubling from %d", got, fairMinWindow)
	}
	if lv.adapt(0, 4, now.Add(10*time.Millisecond), 8); lv.window != 8 {
		t.Errorf("window %d above the configured 8", lv.window)
	}
}

// A fairness queue holds a task under one execution: once the task moved
// to another (an orchestrator that took this one for gone dispatched it
// again), the entry is not the task's, and a look must not leave the task
// to this queue.
func TestFairQueueHoldsOneExecution(t *testing.T) {
	q := newFairQueue(nil, 1)
	queued := func(id, execution string) task.Task {
		t := task.Task{ExecutionID: execution}
		t.ID, t.Type, t.Capability, t.FairnessKey = id, "job", "default", "a"
		return t
	}
	first := queued("first", "e0")
	if q.queue(first, 1) {
		t.Fatal("the level's first task was queued; want it dispatched at once (the window holds one)")
	}
	x := queued("x", "e1")
	if !q.queue(x, 2) {
		t.Fatal("a task behind a full window was not queued")
	}
	for _, c := range []struct {
		execution string
		want      bool
	}{{"e1", true}, {"", true}, {"e2", false}} {
		if got := q.has("x", c.execution); got != c.want {
			t.Errorf("has(x, %q) = %v, want %v", c.execution, got, c.want)
		}
	}
	x.ExecutionID = "e2"
	if !q.queue(x, 3) || !q.has("x", "e2") || q.has("x", "e1") || q.queued() != 1 {
		t.Errorf("queued again under e2: has e2 %v, has e1 %v, %d queued; want the entry updated in place", q.has("x", "e2"), q.has("x", "e1"), q.queued())
	}
}
