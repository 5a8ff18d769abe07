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
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// eventSpec is an event task waiting for <subj>.<match>.
func eventSpec(id, subj, match string, timeout time.Duration, deps ...string) task.Spec {
	s := newSpec(id, "order.payment", deps...)
	s.WaitFor = &task.EventWait{Subject: subj, Match: match, Timeout: task.Duration(timeout)}
	return s
}

// waitResult waits for id to end and checks it succeeded with want.
func waitResult(ctx context.Context, t *testing.T, c *sdk.Client, id, want string) *task.Task {
	t.Helper()
	got, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if got.State != task.Succeeded || string(got.Result) != want || got.EventSeq == 0 || got.Attempt != 0 {
		t.Fatalf("%s: %s %q result %s (event %d, attempt %d); want succeeded with %s", id, got.State, got.Reason, got.Result, got.EventSeq, got.Attempt, want)
	}
	return got
}

// awaiting waits until id's wait for its event is registered.
func awaiting(ctx context.Context, t *testing.T, c *sdk.Client, id string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, id+" waiting for its event", func() bool {
		got, err := c.Get(ctx, id)
		return err == nil && got.State == task.Waiting && got.EventWaitSince != nil
	})
}

// TestEventTasks: against a real orchestrator, an event task succeeds with
// the data of the event on <subject>.<match> whether the event was
// published before its wait was registered (before its submission, or
// before its upstream ended), after it, or at the same time; exactly once
// (a later event changes nothing); its dependents read the data as their
// input; with no event it expires at its timeout; and events published
// while no orchestrator runs are matched after a restart, for tasks that
// waited before and tasks submitted meanwhile.
func TestEventTasks(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	url := srv.URL()
	orch := testenv.Orchestrator(t, url, orchestrator.Config{})
	ex := testenv.Executor(t, url, executor.Config{})
	ex.HandleFunc("order.ship", func(ctx context.Context, j *executor.Job) (any, error) {
		var paid struct{ Amount int }
		if err := j.UpstreamResult(ctx, j.DependsOn[0], &paid); err != nil {
			return nil, err
		}
		return map[string]int{"shipped": paid.Amount}, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, url)
	ctx := testenv.Context(t, 3*time.Minute)

	// Before: the event is stored before the task exists.
	if _, err := c.Signal(ctx, "payment.received.o-before", map[string]int{"amount": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, eventSpec("before", "payment.received", "o-before", time.Hour)); err != nil {
		t.Fatal(err)
	}
	first := waitResult(ctx, t, c, "before", `{"amount":1}`)

	// After: the task waits, then the event arrives; a dependent reads it.
	if _, err := c.SubmitGraph(ctx, []task.Spec{eventSpec("after", "payment.received", "o-after", time.Hour),
		newSpec("ship-after", "order.ship", "after")}); err != nil {
		t.Fatal(err)
	}
	awaiting(ctx, t, c, "after")
	if _, err := c.Signal(ctx, "payment.received.o-after", json.RawMessage(`{"amount":2}`)); err != nil {
		t.Fatal(err)
	}
	waitResult(ctx, t, c, "after", `{"amount":2}`)
	if got, err := c.Wait(ctx, "ship-after"); err != nil || got.State != task.Succeeded || string(got.Result) != `{"shipped":2}` {
		t.Fatalf("ship-after: %+v %v", got, err)
	}

	// Before registration, in a DAG: the event comes while the event
	// task still waits for its upstream.
	hold := newSpec("gate", "order.gate")
	if _, err := c.SubmitGraph(ctx, []task.Spec{hold, eventSpec("dag", "payment.received", "o-dag", time.Hour, "gate")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Signal(ctx, "payment.received.o-dag", 3); err != nil {
		t.Fatal(err)
	}
	ex.HandleFunc("order.gate", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	waitResult(ctx, t, c, "dag", `3`)

	// During: submissions and events interleaved.
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := c.Submit(ctx, eventSpec(fmt.Sprint("during-", i), "payment.received", fmt.Sprint("o-", i), time.Hour))
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := c.Signal(ctx, fmt.Sprint("payment.received.o-", i), i)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		waitResult(ctx, t, c, fmt.Sprint("during-", i), fmt.Sprint(i))
	}

	// Exactly once: a second event on a subject changes no ended task.
	if _, err := c.Signal(ctx, "payment.received.o-before", map[string]int{"amount": 9}); err != nil {
		t.Fatal(err)
	}
	// Timeout: no event, expired.
	if _, err := c.Submit(ctx, eventSpec("timeout", "payment.received", "o-never", time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "timeout"); err != nil || got.State != task.Expired {
		t.Fatalf("timeout: %+v %v", got, err)
	}
	if got, err := c.Get(ctx, "before"); err != nil || got.EventSeq != first.EventSeq || string(got.Result) != `{"amount":1}` {
		t.Fatalf("before, after a second event: %+v %v", got, err)
	}

	// Restart: a waiting task, and one submitted while no orchestrator
	// runs, get the events published meanwhile.
	if _, err := c.Submit(ctx, eventSpec("restart-waiting", "payment.received", "o-r1", time.Hour)); err != nil {
		t.Fatal(err)
	}
	awaiting(ctx, t, c, "restart-waiting")
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := orch.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, eventSpec("restart-late", "payment.received", "o-r2", time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"o-r1", "o-r2"} {
		if _, err := c.Signal(ctx, "payment.received."+m, m); err != nil {
			t.Fatal(err)
		}
	}
	if srv, err = srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testenv.Orchestrator(t, url, orchestrator.Config{})
	waitResult(ctx, t, c, "restart-waiting", `"o-r1"`)
	waitResult(ctx, t, c, "restart-late", `"o-r2"`)
}

// TestEventSpecValidation: wait_for's subject, match and timeout are
// checked at submission.
func TestEventSpecValidation(t *testing.T) {
	for _, w := range []task.EventWait{
		{Subject: "", Match: "a", Timeout: task.Duration(time.Second)},
		{Subject: "a.b", Match: "x.y", Timeout: task.Duration(time.Second)},
		{Subject: "a.b", Match: "", Timeout: task.Duration(time.Second)},
		{Subject: "a.*", Match: "x", Timeout: task.Duration(time.Second)},
		{Subject: "a.b", Match: "x", Timeout: 0},
		{Subject: "a.b.c.d.e.f.g.h", Match: "x", Timeout: task.Duration(time.Second)},
	} {
		s := eventSpec("v", w.Subject, w.Match, w.Timeout.Std())
		s.Normalize()
		if err := s.Validate(0); err == nil {
			t.Errorf("%+v accepted", w)
		}
	}
	s := eventSpec("v", "a.b.c.d.e.f.g", "x", time.Second)
	if err := s.Validate(0); err != nil {
		t.Errorf("7 tokens: %v", err)
	}
	if !task.ValidEventSubject("a.b.c.d.e.f.g.x") || task.ValidEventSubject("a") || task.ValidEventSubject("a.b.c.d.e.f.g.h.x") {
		t.Error("ValidEventSubject")
	}
}

// cancelOn gives s a cancel_on <subj>.<match>.
func cancelOn(s task.Spec, subj, match string) task.Spec {
	s.CancelOn = &task.EventCancel{Subject: subj, Match: match}
	return s
}

// waitCancelled waits for id to end and checks an event on es cancelled it.
func waitCancelled(ctx context.Context, t *testing.T, c *sdk.Client, id, es string) *task.Task {
	t.Helper()
	got, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if got.State != task.Cancelled || !strings.HasPrefix(got.Reason, "cancelled by event "+es+" (sequence ") {
		t.Fatalf("%s: %s %q; want cancelled by event %s", id, got.State, got.Reason, es)
	}
	return got
}

// markerGone waits until no marker of id on es is left in AX_HELD.
func markerGone(ctx context.Context, t *testing.T, js jetstream.JetStream, es, id string) {
	t.Helper()
	held, err := js.Stream(ctx, "AX_HELD")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the marker of "+id+" removed", func() bool {
		_, err := held.GetLastMsgForSubject(ctx, "ax.eventwait."+es+"."+id)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
}

// TestCancelOnEvent: against a real orchestrator and executor, an event
// on a task's cancel_on subject cancels it wherever it is — waiting for an
// upstream (its dependent is cancelled with it), running (its handler's
// context is cancelled and what it returns then is ignored), an event
// task waiting for its own event — with a reason naming the event; an
// event stored before the task was accepted does not cancel it (the task
// succeeds with its own event); a task that ended first is unaffected and
// its marker is removed.
func TestCancelOnEvent(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	url := srv.URL()
	testenv.Orchestrator(t, url, orchestrator.Config{})
	ex := testenv.Executor(t, url, executor.Config{})
	started := make(chan string, 4)
	stopped := make(chan string, 4)
	ex.HandleFunc("order.work", func(ctx context.Context, j *executor.Job) (any, error) {
		started <- j.ID
		<-ctx.Done()
		stopped <- j.ID
		return "late", nil // after the cancellation: ignored
	})
	ex.HandleFunc("order.quick", func(context.Context, *executor.Job) (any, error) { return "done", nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, url)
	ctx := testenv.Context(t, 3*time.Minute)
	js, err := jetstream.New(testenv.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}

	// Waiting for an upstream that never runs; its dependent goes too.
	if _, err := c.SubmitGraph(ctx, []task.Spec{newSpec("never", "order.nobody"),
		cancelOn(newSpec("waiting", "order.quick", "never"), "order.cancelled", "o1"),
		newSpec("after-waiting", "order.quick", "waiting")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Signal(ctx, "order.cancelled.o1", "stop"); err != nil {
		t.Fatal(err)
	}
	waitCancelled(ctx, t, c, "waiting", "order.cancelled.o1")
	if got, err := c.Wait(ctx, "after-waiting"); err != nil || got.State != task.Cancelled {
		t.Fatalf("after-waiting: %+v %v", got, err)
	}
	markerGone(ctx, t, js, "order.cancelled.o1", "waiting")

	// Running: the handler's context is cancelled, its result ignored.
	if _, err := c.Submit(ctx, cancelOn(newSpec("running", "order.work"), "order.cancelled", "o2")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the handler did not start")
	}
	if _, err := c.Signal(ctx, "order.cancelled.o2", nil); err != nil {
		t.Fatal(err)
	}
	waitCancelled(ctx, t, c, "running", "order.cancelled.o2")
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the handler's context was not cancelled")
	}

	// An event task: its cancel event ends it, its own event then does not.
	if _, err := c.Submit(ctx, cancelOn(eventSpec("event", "payment.received", "o3", time.Hour), "order.cancelled", "o3")); err != nil {
		t.Fatal(err)
	}
	awaiting(ctx, t, c, "event")
	if _, err := c.Signal(ctx, "order.cancelled.o3", nil); err != nil {
		t.Fatal(err)
	}
	waitCancelled(ctx, t, c, "event", "order.cancelled.o3")
	markerGone(ctx, t, js, "payment.received.o3", "event")
	markerGone(ctx, t, js, "order.cancelled.o3", "event")

	// An event stored before the task was accepted does not cancel it.
	if _, err := c.Signal(ctx, "order.cancelled.o4", "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, cancelOn(eventSpec("old", "payment.received", "o4", time.Hour), "order.cancelled", "o4")); err != nil {
		t.Fatal(err)
	}
	awaiting(ctx, t, c, "old")
	if _, err := c.Signal(ctx, "payment.received.o4", 4); err != nil {
		t.Fatal(err)
	}
	waitResult(ctx, t, c, "old", "4")

	// Ended first: unaffected, its marker gone.
	if _, err := c.Submit(ctx, cancelOn(newSpec("ended", "order.quick"), "order.cancelled", "o5")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "ended"); err != nil || got.State != task.Succeeded {
		t.Fatalf("ended: %+v %v", got, err)
	}
	markerGone(ctx, t, js, "order.cancelled.o5", "ended")
	if _, err := c.Signal(ctx, "order.cancelled.o5", nil); err != nil {
		t.Fatal(err)
	}
	// The event's delivery is over once a later event's is (one consumer,
	// in order): a task waiting for that one has it.
	if _, err := c.Submit(ctx, eventSpec("later", "payment.received", "o5", time.Hour)); err != nil {
		t.Fatal(err)
	}
	awaiting(ctx, t, c, "later")
	if _, err := c.Signal(ctx, "payment.received.o5", 5); err != nil {
		t.Fatal(err)
	}
	waitResult(ctx, t, c, "later", "5")
	if got, err := c.Get(ctx, "ended"); err != nil || got.State != task.Succeeded || string(got.Result) != `"done"` {
		t.Fatalf("ended, after its cancel event: %+v %v", got, err)
	}
	if got, err := c.Get(ctx, "running"); err != nil || got.State != task.Cancelled || len(got.Result) != 0 {
		t.Fatalf("running, after its handler returned: %+v %v", got, err)
	}
}
