package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// eventWaiter is one task of TestEventWaiters and what it must end as.
type eventWaiter struct {
	spec  task.Spec
	event string          // the wait_for event subject, or the cancel_on one for want cancelled
	data  json.RawMessage // the data of its event (want succeeded)
	want  task.State
}

// TestEventWaiters: N event tasks (AX_E2E_EVENT_WAITERS, default 300;
// 10,000 for the full proof) against real binaries — two orchestrators
// and a worker — killed with -9 and restarted in the middle:
//
//   - a fifth share one subject, whose single event is published while
//     they are being submitted (in the 10,000 run, 2,000 waiters: more
//     than one message handles, so its delivery continues);
//   - a fifth get an event published before their submission (each of
//     them also has a cancel_on whose event was published before its
//     submission too: an old event, which must not cancel it);
//   - a fifth get their events while they are being submitted, with an
//     orchestrator killed -9 and restarted meanwhile;
//   - a fifth get their events after everything was submitted and the
//     other orchestrator was killed -9 and restarted;
//   - a tenth get no event and expire at their timeout;
//   - a tenth are cancelled by a cancel_on event while they wait;
//
// and N/100 (at least 5) running handlers (demo.sleep, 5 minutes) are
// cancelled by their cancel_on events after their worker was killed -9 and
// another took them over. Every waiter that was given an event succeeds
// exactly once (one succeeded event in its history) with that event's
// data; the others expire or are cancelled by their events; nothing stays
// unfinished.
func TestEventWaiters(t *testing.T) {
	n := envInt(t, "AX_E2E_EVENT_WAITERS", 300)
	begin := time.Now()
	c := newCluster(t)
	c.startServer()
	_, cl := c.connect()
	orchA := c.startOrchestrator("orch-a", noBreakers...)
	orchB := c.startOrchestrator("orch-b", noBreakers...)
	w1 := c.startWorker("w1", "--ack-wait", "2s", "--capacity", "256")
	warmUp(t, cl, "default")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	var all []*eventWaiter
	group := func(name string, k int, mk func(i int) *eventWaiter) []*eventWaiter {
		out := make([]*eventWaiter, k)
		for i := range k {
			w := mk(i)
			w.spec.ID = fmt.Sprintf("%s-%05d", name, i)
			out[i] = w
		}
		all = append(all, out...)
		return out
	}
	waiter := func(subj, match string, timeout time.Duration) task.Spec {
		s, err := task.New("order.payment", nil)
		if err != nil {
			t.Fatal(err)
		}
		s.WaitFor = &task.EventWait{Subject: subj, Match: match, Timeout: task.Duration(timeout)}
		return s
	}
	data := func(group string, i int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"group":%q,"i":%d}`, group, i))
	}
	fifth, tenth := n/5, n/10
	hot := group("hot", fifth, func(int) *eventWaiter {
		return &eventWaiter{spec: waiter("pay.hot", "all", time.Hour), event: "pay.hot.all", data: data("hot", -1), want: task.Succeeded}
	})
	before := group("before", fifth, func(i int) *eventWaiter {
		s := waiter("pay.before", fmt.Sprint("o", i), time.Hour)
		s.CancelOn = &task.EventCancel{Subject: "stop.before", Match: fmt.Sprint("o", i)}
		return &eventWaiter{spec: s, event: "pay.before." + fmt.Sprint("o", i), data: data("before", i), want: task.Succeeded}
	})
	during := group("during", fifth, func(i int) *eventWaiter {
		return &eventWaiter{spec: waiter("pay.during", fmt.Sprint("o", i), time.Hour), event: "pay.during." + fmt.Sprint("o", i), data: data("during", i), want: task.Succeeded}
	})
	after := group("after", fifth, func(i int) *eventWaiter {
		return &eventWaiter{spec: waiter("pay.after", fmt.Sprint("o", i), time.Hour), event: "pay.after." + fmt.Sprint("o", i), data: data("after", i), want: task.Succeeded}
	})
	expiring := group("timeout", tenth, func(i int) *eventWaiter {
		return &eventWaiter{spec: waiter("pay.never", fmt.Sprint("o", i), 10*time.Second), want: task.Expired}
	})
	cancelled := group("cancel", n-4*fifth-tenth, func(i int) *eventWaiter {
		s := waiter("pay.cancel", fmt.Sprint("o", i), time.Hour)
		s.CancelOn = &task.EventCancel{Subject: "stop.cancel", Match: fmt.Sprint("o", i)}
		return &eventWaiter{spec: s, event: "stop.cancel." + fmt.Sprint("o", i), want: task.Cancelled}
	})
	running := group("running", max(5, n/100), func(i int) *eventWaiter {
		s, err := task.New(demo.TypeSleep, demo.Params{Sleep: "5m"})
		if err != nil {
			t.Fatal(err)
		}
		s.CancelOn = &task.EventCancel{Subject: "stop.running", Match: fmt.Sprint("r", i)}
		s.Timeout = task.Duration(10 * time.Minute)
		return &eventWaiter{spec: s, event: "stop.running." + fmt.Sprint("r", i), want: task.Cancelled}
	})

	signal := func(subj string, d json.RawMessage) {
		retryOp(t, time.Minute, "signal "+subj, func(ctx context.Context) error {
			_, err := cl.Signal(ctx, subj, d)
			return err
		})
	}
	submit := func(ws []*eventWaiter) {
		specs := make([]task.Spec, len(ws))
		for i, w := range ws {
			specs[i] = w.spec
		}
		for i := 0; i < len(specs); i += 500 {
			part := specs[i:min(i+500, len(specs))]
			retryOp(t, 2*time.Minute, "submit", func(ctx context.Context) error {
				_, err := cl.SubmitMany(ctx, part)
				return err
			})
		}
	}
	// accepted waits until every task of ws has a record: a cancel event
	// counts only once its task was accepted.
	accepted := func(ws []*eventWaiter, state task.State) {
		for _, w := range ws {
			eventually(t, 5*time.Minute, w.spec.ID+" accepted", func() (bool, string) {
				got, err := cl.Get(ctx, w.spec.ID)
				if err != nil {
					return false, err.Error()
				}
				return state == "" || got.State == state, string(got.State)
			})
		}
	}

	// Running handlers first, each waiting for its cancel event.
	submit(running)
	accepted(running, task.Running)

	// Before: their events (and old cancel events) are stored first.
	for i, w := range before {
		signal(w.event, w.data)
		signal("stop.before.o"+fmt.Sprint(i), json.RawMessage(`"too early"`))
	}
	submit(before)
	submit(expiring)
	submit(cancelled)
	submit(after)

	// Hot: one event while its waiters are being submitted.
	submit(hot[:3*len(hot)/4])
	signal("pay.hot.all", data("hot", -1))
	submit(hot[3*len(hot)/4:])

	// During: submissions and events at once; an orchestrator killed -9
	// and restarted in the middle.
	var wg sync.WaitGroup
	for _, w := range during {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := retry(time.Minute, func(ctx context.Context) error {
				_, err := cl.Signal(ctx, w.event, w.data)
				return err
			}); err != nil {
				t.Errorf("signal %s: %v", w.event, err)
			}
		}()
	}
	half := len(during) / 2
	submit(during[:half])
	orchA.kill9()
	t.Logf("killed orch-a with -9")
	orchA.start()
	submit(during[half:])
	wg.Wait()

	// The worker running the cancel_on handlers killed -9; another takes
	// them over; then their cancel events. The other orchestrator too.
	w1.kill9()
	t.Logf("killed w1 with -9")
	c.startWorker("w2", "--ack-wait", "2s", "--capacity", "256")
	orchB.kill9()
	t.Logf("killed orch-b with -9")
	orchB.start()
	accepted(cancelled, "")
	for _, w := range running {
		signal(w.event, nil)
	}
	for _, w := range cancelled {
		signal(w.event, nil)
	}
	for _, w := range after {
		signal(w.event, w.data)
	}

	lastEvent := time.Now()

	// Every task ends as it must, once.
	counts := map[task.State]int{}
	var lastMatch time.Time // the last success or cancellation
	for _, w := range all {
		got, err := cl.Wait(ctx, w.spec.ID)
		if err != nil {
			t.Fatalf("wait %s: %v", w.spec.ID, err)
		}
		counts[got.State]++
		if got.State != task.Expired && got.FinishedAt != nil && got.FinishedAt.After(lastMatch) {
			lastMatch = *got.FinishedAt
		}
		checkWaiter(t, cl, w, got)
	}
	t.Logf("%d event waiters (%d on one subject, %d with an old cancel event, %d with no event) and %d cancel_on handlers: %v; submitted and signalled in %s, the last match %s after the last event; %s in all",
		len(all)-len(running), len(hot), len(before), len(expiring), len(running), counts,
		lastEvent.Sub(begin).Round(100*time.Millisecond), lastMatch.Sub(lastEvent).Round(10*time.Millisecond), time.Since(begin).Round(time.Second))
}

// checkWaiter checks how one task of TestEventWaiters ended.
func checkWaiter(t *testing.T, cl *sdk.Client, w *eventWaiter, got *task.Task) {
	t.Helper()
	id := w.spec.ID
	if got.State != w.want {
		t.Errorf("%s ended %s (%s), want %s", id, got.State, got.Reason, w.want)
		return
	}
	switch w.want {
	case task.Succeeded:
		if string(got.Result) != string(w.data) || got.EventSeq == 0 {
			t.Errorf("%s: result %s (event %d), want %s", id, got.Result, got.EventSeq, w.data)
		}
		succeeded := 0
		for _, h := range history(t, cl, id) {
			if h.Event.To == task.Succeeded {
				succeeded++
				if string(h.Event.Task.Result) != string(w.data) {
					t.Errorf("%s: succeeded with %s, want %s", id, h.Event.Task.Result, w.data)
				}
			}
		}
		if succeeded != 1 {
			t.Errorf("%s: %d succeeded events in its history, want 1", id, succeeded)
		}
	case task.Cancelled:
		if want := "cancelled by event " + w.event + " (sequence "; len(got.Reason) < len(want) || got.Reason[:len(want)] != want {
			t.Errorf("%s: cancelled with %q, want %q…", id, got.Reason, want)
		}
		if len(got.Result) != 0 {
			t.Errorf("%s: cancelled with a result %s", id, got.Result)
		}
	case task.Expired:
		if got.EventSeq != 0 {
			t.Errorf("%s: expired with event %d", id, got.EventSeq)
		}
	}
}
