package lifecycle

import (
	"slices"
	"testing"
	"time"

	"github.com/ax-run/ax/task"
)

// TestEventTaskLifecycle: an event task never becomes ready: created or
// released, it waits for its event (registered, expiring at its wait_for
// timeout or its earlier deadline, effect MatchEvent); the event makes it
// succeed with its data once (the same event again is a replay, another
// ignored); an ended task ignores events.
func TestEventTaskLifecycle(t *testing.T) {
	e := env()
	spec := task.Spec{ID: "w", Type: "pay", WaitFor: &task.EventWait{Subject: "payment.received", Match: "o1", Timeout: task.Duration(time.Hour)}}
	spec.Normalize()
	d := Create(&task.Task{Spec: spec, SubmittedAt: e.Now}, "", "", func() bool { t.Fatal("admission asked"); return false }, e)
	w := d.Next
	if d.Verdict != Apply || w.State != task.Waiting || w.EventWaitSince == nil || !w.ExpiresAt.Equal(e.Now.Add(time.Hour)) || w.ExecutionID != "" {
		t.Fatalf("created: %+v", w)
	}
	if got := Effects(nil, &w, e.Now); !slices.Contains(got, MatchEvent) || slices.Contains(got, ResolveWaiting) {
		t.Fatalf("effects %v", got)
	}

	// Released by its upstream: waits, its earlier deadline kept.
	dl := e.Now.Add(time.Minute)
	dep := task.Task{Spec: spec, State: task.Waiting, ExpiresAt: &dl}
	dep.DependsOn = []string{"up"}
	r := Resolve(&dep, task.VerdictRun, "up", task.Succeeded, e)
	if r.Verdict != Apply || !AwaitingEvent(&r.Next) || !r.Next.ExpiresAt.Equal(dl) || r.Next.State != task.Waiting {
		t.Fatalf("released: %+v", r.Next)
	}

	a := EventArrived(&w, 7, []byte(`{"ok":true}`), e)
	if a.Verdict != Apply || a.Next.State != task.Succeeded || string(a.Next.Result) != `{"ok":true}` || a.Next.EventSeq != 7 {
		t.Fatalf("arrived: %+v", a)
	}
	if !task.CanTransition(w.State, a.Next.State) {
		t.Fatalf("%s > %s not in the table", w.State, a.Next.State)
	}
	if v := EventArrived(&a.Next, 7, nil, e).Verdict; v != Replay {
		t.Fatalf("same event again: %v", v)
	}
	if v := EventArrived(&a.Next, 8, nil, e).Verdict; v != Ignore {
		t.Fatalf("another event: %v", v)
	}
	if got := EventArrived(&w, 9, []byte("not json"), e).Next.Result; string(got) != `"not json"` {
		t.Fatalf("non-JSON data: %s", got)
	}
	if got := EventArrived(&w, 9, nil, e).Next.Result; string(got) != `null` {
		t.Fatalf("no data: %s", got)
	}
	// Not registered yet (waiting for its upstream): ignored.
	if v := EventArrived(&dep, 9, nil, e).Verdict; v != Ignore {
		t.Fatalf("unregistered: %v", v)
	}
}

// TestCancelOnEffects: a task with a cancel_on has WatchCancel last in
// every unfinished state but running (registered at creation, looked at
// again at each change), and none once it ended.
func TestCancelOnEffects(t *testing.T) {
	e := env()
	spec := task.Spec{ID: "c", Type: "work", CancelOn: &task.EventCancel{Subject: "order.cancelled", Match: "o1"}}
	spec.Normalize()
	for _, st := range []task.State{task.Waiting, task.Ready, task.Retrying, task.Running, task.Succeeded, task.Cancelled} {
		rt := task.Task{Spec: spec, State: st}
		if st == task.Retrying {
			at := e.Now
			rt.RetryAt = &at
		}
		got := Effects(nil, &rt, e.Now)
		want := !st.Terminal() && st != task.Running
		if has := len(got) > 0 && got[len(got)-1] == WatchCancel; has != want || countOf(got, WatchCancel) > 1 {
			t.Errorf("%s: effects %v", st, got)
		}
	}
	ev := task.Task{Spec: spec, State: task.Waiting}
	ev.WaitFor = &task.EventWait{Subject: "pay", Match: "o1", Timeout: task.Duration(time.Hour)}
	ev.EventWaitSince = &e.Now
	if got := Effects(nil, &ev, e.Now); !slices.Equal(got, []Effect{ArmWatch, MatchEvent, WatchCancel}) {
		t.Errorf("event task: %v", got)
	}
}

func countOf(es []Effect, e Effect) (n int) {
	for _, x := range es {
		if x == e {
			n++
		}
	}
	return n
}
