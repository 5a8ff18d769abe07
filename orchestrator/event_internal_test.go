package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// startInternal starts an orchestrator on a server of its own with cfg and
// returns it with a client.
func startInternal(t *testing.T, cfg Config) (*Orchestrator, *sdk.Client, context.Context) {
	t.Helper()
	nc := internalConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	o := startOn(ctx, t, nc, cfg)
	c, err := sdk.New(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	return o, c, ctx
}

// startOn starts an orchestrator on nc with cfg, stopped when the test ends.
func startOn(ctx context.Context, t *testing.T, nc *nats.Conn, cfg Config) *Orchestrator {
	t.Helper()
	o, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = o.Stop(ctx)
	})
	return o
}

// TestCancelEventBetweenAcceptanceAndRegistration: an event stored after a
// task was accepted (its first record holds the last event sequence of
// then) but before its cancel marker was stored — an orchestrator that
// stopped between the two, say — cancels it when its effects run.
func TestCancelEventBetweenAcceptanceAndRegistration(t *testing.T) {
	t.Parallel()
	o, c, ctx := startInternal(t, Config{})
	after, err := o.eventAcceptance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := task.New("order.nobody", nil)
	spec.ID = "between"
	spec.CancelOn = &task.EventCancel{Subject: "order.cancelled", Match: "b1"}
	spec.Normalize()
	rec := task.Task{Spec: spec, State: task.Waiting, SubmittedAt: o.now(), CancelOnAfter: after}
	at := o.now().Add(time.Hour)
	rec.StartAt = &at // waits; no executor takes it meanwhile
	rev, err := o.write(ctx, task.Task{}, 0, &rec, "submitted")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Signal(ctx, "order.cancelled.b1", nil); err != nil {
		t.Fatal(err)
	}
	if err := o.ensureEffects(ctx, rec, rev); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "between")
	if err != nil || got.State != task.Cancelled || !strings.HasPrefix(got.Reason, "cancelled by event order.cancelled.b1") {
		t.Fatalf("between: %+v %v", got, err)
	}
}

// TestEventDeliveryContinues: an event with more waiters than one message
// handles (5 here) reaches them all through its continuations, the
// reconciler's looks far away (an hour): every event task succeeds, every
// task cancelled by the same subject is cancelled, and the subject's
// waiter count is gone with its last marker.
func TestEventDeliveryContinues(t *testing.T) {
	t.Parallel()
	o, c, ctx := startInternal(t, Config{eventsPerMessage: 5, ReconcileInterval: time.Hour})
	const waiters, cancels = 23, 7
	var specs []task.Spec
	for i := range waiters {
		s, _ := task.New("order.payment", nil)
		s.ID = fmt.Sprint("w", i)
		s.WaitFor = &task.EventWait{Subject: "pay", Match: "all", Timeout: task.Duration(time.Hour)}
		specs = append(specs, s)
	}
	for i := range cancels {
		s, _ := task.New("order.nobody", nil)
		s.ID = fmt.Sprint("c", i)
		s.CancelOn = &task.EventCancel{Subject: "pay", Match: "all"}
		s.Delay = task.Duration(time.Hour)
		specs = append(specs, s)
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	// Every marker stored before the event: its delivery alone must find them.
	held, err := o.js.Stream(ctx, subject.StreamHeld)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		n, err := o.countEventWaiters(ctx, "pay.all")
		if err != nil {
			t.Fatal(err)
		}
		if n == waiters+cancels {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d markers registered", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c.Signal(ctx, "pay.all", "paid"); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		got, err := c.Wait(ctx, s.ID)
		switch {
		case err != nil:
			t.Fatalf("%s: %v", s.ID, err)
		case s.WaitFor != nil && (got.State != task.Succeeded || string(got.Result) != `"paid"`):
			t.Fatalf("%s: %s %q", s.ID, got.State, got.Reason)
		case s.CancelOn != nil && got.State != task.Cancelled:
			t.Fatalf("%s: %s %q", s.ID, got.State, got.Reason)
		}
	}
	counts, err := o.js.Stream(ctx, subject.StreamCounts)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, err := held.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject.EventWaiters("pay.all")))
		_, lerr := counts.GetLastMsgForSubject(ctx, subject.EventWaitCount("pay.all"))
		if errors.Is(err, jetstream.ErrMsgNotFound) && errors.Is(lerr, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("markers or their count left: %v, %v", err, lerr)
		}
	}
}

// TestEventWaitersBound: a subject takes at most
// Limits.MaxEventWaitersPerSubject waiters; the registration past it
// fails its task, naming the bound and its flag; a waiter that ends makes
// room again (its removal is counted off).
func TestEventWaitersBound(t *testing.T) {
	t.Parallel()
	_, c, ctx := startInternal(t, Config{Limits: Limits{MaxEventWaitersPerSubject: 3}})
	submit := func(id string) *task.Task {
		t.Helper()
		s, _ := task.New("order.payment", nil)
		s.ID = id
		s.WaitFor = &task.EventWait{Subject: "pay", Match: "b", Timeout: task.Duration(time.Hour)}
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		for {
			got, err := c.Get(ctx, id)
			if err == nil && (got.State.Terminal() || got.EventWaitSince != nil) {
				return got
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %v", id, ctx.Err())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, id := range []string{"b0", "b1", "b2"} {
		submit(id)
	}
	over, err := c.Wait(ctx, submit("b3").ID)
	if err != nil || over.State != task.Failed || !strings.Contains(over.Reason, "more than 3 tasks wait for events on pay.b (ax orchestrator --max-event-waiters-per-subject)") {
		t.Fatalf("b3: %+v %v", over, err)
	}
	if _, err := c.Cancel(ctx, "b0", "room"); err != nil {
		t.Fatal(err)
	}
	if got := submit("b4"); got.State.Terminal() {
		t.Fatalf("b4 after b0 ended: %s %q", got.State, got.Reason)
	}
	if _, err := c.Signal(ctx, "pay.b", 1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b1", "b2", "b4"} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
	}
}
