package orchestrator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// TestTriggerReleaseDoesNotRecurse: an upstream's end moves its direct
// dependents only; a dependent it ends continues through its own trigger.
// Here the upstream succeeds, its any_failed children are cancelled ("no
// upstream failed"), and their any_failed grandchildren may then run: the
// upstream's effects write the children alone (the grandchildren used to
// be moved inside the same handler: 256 children × 256 grandchildren was
// about 65,000 writes for one message), and every grandchild is still
// released, by its parent's own message.
func TestTriggerReleaseDoesNotRecurse(t *testing.T) {
	t.Parallel()
	o, c, ctx := startInternal(t, Config{})
	nc := o.nc
	const children, grandchildren = 8, 8
	spec := func(id string, rule task.TriggerRule, deps ...string) task.Spec {
		s, _ := task.New("work", nil)
		s.ID, s.Capability, s.DependsOn = id, "nobody", deps
		if len(deps) > 0 {
			s.TriggerRule = rule
		}
		return s
	}
	graph := []task.Spec{spec("up", "")}
	for i := range children {
		child := fmt.Sprintf("child-%d", i)
		graph = append(graph, spec(child, task.TriggerAnyFailed, "up"))
		for j := range grandchildren {
			graph = append(graph, spec(fmt.Sprintf("grand-%d-%d", i, j), task.TriggerAnyFailed, child))
		}
	}
	if _, err := c.SubmitGraph(ctx, graph); err != nil {
		t.Fatal(err)
	}
	last := graph[len(graph)-1].ID
	waitForTask(ctx, t, o, last, "the graph was not created", func(g task.Task) bool { return g.State == task.Waiting })
	// The upstream's outcome, as its report would write it, then its
	// effects, applied by an orchestrator of its own (set up, not consuming)
	// so that its writes are the upstream's handler's alone: the running
	// one handles the messages those effects arm.
	h := handlerOnly(ctx, t, nc)
	up, rev, err := h.store.Get(ctx, "up")
	if err != nil {
		t.Fatal(err)
	}
	next := h.finished(up, task.Succeeded)
	newRev, err := h.write(ctx, up, rev, next, "attempt 1 succeeded")
	if err != nil {
		t.Fatal(err)
	}
	before := h.store.Writes()
	if err := h.ensureEffects(ctx, *next, newRev); err != nil {
		t.Fatal(err)
	}
	if n := h.store.Writes() - before; n > children {
		t.Fatalf("the upstream's effects wrote %d records; want at most its %d direct dependents", n, children)
	}
	for i := range children {
		for j := range grandchildren {
			id := fmt.Sprintf("grand-%d-%d", i, j)
			waitForTask(ctx, t, o, id, "not released after its parent was cancelled", func(g task.Task) bool { return g.State == task.Ready })
		}
	}
}

// TestRepeatedCascadeStepRearmsTheCancelledDependentsMessage: an
// upstream's failure cancels its dependent x, whose own message then
// cancels x's dependent y. A fault between writing x's cancellation and
// arming x's message (the store out, the orchestrator killed) fails the
// step; when the upstream's effects run again they find x already
// cancelled, and must arm x's message again, or y waits for its
// reconciler's look (a chaos run: 2 minutes).
func TestRepeatedCascadeStepRearmsTheCancelledDependentsMessage(t *testing.T) {
	t.Parallel()
	o, c, ctx := startInternal(t, Config{})
	nc := o.nc
	spec := func(id string, deps ...string) task.Spec {
		s, _ := task.New("work", nil)
		s.ID, s.Capability, s.DependsOn = id, "nobody", deps
		return s
	}
	if _, err := c.SubmitGraph(ctx, []task.Spec{spec("f"), spec("x", "f"), spec("y", "x")}); err != nil {
		t.Fatal(err)
	}
	waitForTask(ctx, t, o, "y", "the graph was not created", func(g task.Task) bool { return g.State == task.Waiting })
	// Nothing consumes the timers from here on: what the repeated step
	// arms stays in AX_TIMERS to be seen.
	if err := o.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h := handlerOnly(ctx, t, nc)

	// The first try of f's cascade step: x's cancellation written, its
	// message lost.
	x, xRev, err := h.store.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	d := lifecycle.UpstreamEnded(&x, "f", task.Failed, h.env())
	if _, err := h.write(ctx, x, xRev, &d.Next, d.Reason); err != nil {
		t.Fatal(err)
	}
	timers, err := h.js.Stream(ctx, subject.StreamTimers)
	if err != nil {
		t.Fatal(err)
	}
	xMessage := func() bool {
		_, err := timers.GetLastMsgForSubject(ctx, subject.Fire(subject.TimerEffects, "x"))
		return err == nil
	}
	if xMessage() {
		t.Fatal("x's message is there before the repeated step")
	}
	// f's end and its effects, run again.
	f, fRev, err := h.store.Get(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	next := h.finished(f, task.Failed)
	newRev, err := h.write(ctx, f, fRev, next, "attempt 1 failed")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ensureEffects(ctx, *next, newRev); err != nil {
		t.Fatal(err)
	}
	if !xMessage() {
		t.Fatal("f's repeated cascade step found x cancelled and did not arm x's message again")
	}

	// An orchestrator takes x's message and cancels y.
	o2 := startOn(ctx, t, nc, Config{})
	waitForTask(ctx, t, o2, "y", "not cancelled by x", func(y task.Task) bool { return y.State == task.Cancelled && y.CancelledBy == "x" })
}

// handlerOnly returns an orchestrator set up but not consuming, so that the
// writes a test makes through it are its handler's alone; a running one
// handles the messages its effects arm.
func handlerOnly(ctx context.Context, t *testing.T, nc *nats.Conn) *Orchestrator {
	t.Helper()
	h, err := New(nc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.runCtx = ctx
	if err := h.setup(ctx, h.loops()); err != nil {
		t.Fatal(err)
	}
	h.sweeps = newSweepBatcher(h)
	h.bg.Add(1)
	go h.sweeps.run(ctx)
	return h
}

// waitForTask waits until the record of id, read through o, satisfies ok.
func waitForTask(ctx context.Context, t *testing.T, o *Orchestrator, id, what string, ok func(task.Task) bool) {
	t.Helper()
	for {
		got, _, err := o.store.Get(ctx, id)
		if err == nil && ok(got) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s: %+v %v", id, what, got, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
