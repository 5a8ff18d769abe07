package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
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

var fastRetry = orchestrator.RetryPolicy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}

func newSpec(id, typ string, deps ...string) task.Spec {
	s, _ := task.New(typ, nil)
	s.ID, s.DependsOn = id, deps
	return s
}

// succeededWithReason waits for task id to succeed (failing the test if it
// does not) and reports whether an event of its history has a reason
// starting with prefix.
func succeededWithReason(ctx context.Context, t *testing.T, c *sdk.Client, id, prefix string) bool {
	t.Helper()
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
		t.Fatalf("%s: %+v %v", id, got, err)
	}
	h, err := c.History(ctx, id)
	if err != nil {
		t.Fatalf("history of %s: %v", id, err)
	}
	for _, ev := range h {
		if strings.HasPrefix(ev.Event.Reason, prefix) {
			return true
		}
	}
	return false
}

// transitions returns a task's history as "from>to" strings.
func transitions(t *testing.T, c *sdk.Client, id string) []string {
	t.Helper()
	h, err := c.History(context.Background(), id)
	if err != nil {
		t.Fatalf("history of %s: %v", id, err)
	}
	var out []string
	for _, ev := range h {
		if ev.Event.Kind == task.KindTransition {
			out = append(out, string(ev.Event.From)+">"+string(ev.Event.To))
		}
	}
	return out
}

func count(list []string, item string) int {
	n := 0
	for _, s := range list {
		if s == item {
			n++
		}
	}
	return n
}

func publishRaw(t *testing.T, nc *nats.Conn, subj string, data []byte, opts ...jetstream.PublishOpt) {
	t.Helper()
	js, _ := jetstream.New(nc)
	if _, err := js.Publish(context.Background(), subj, data, opts...); err != nil {
		t.Fatalf("publish %s: %v", subj, err)
	}
}

func TestIdempotentSubmitBeyondDedupWindow(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Topology: orchestrator.TopologyOptions{DuplicateWindow: 200 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	var runs sync.Map
	ex.HandleFunc("once", func(_ context.Context, j *executor.Job) (any, error) {
		n, _ := runs.LoadOrStore(j.ID, new(int))
		*n.(*int)++
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	s := newSpec("same-id", "once")
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // JetStream's duplicate window has passed
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	// A raw resubmission with no Nats-Msg-Id and another payload.
	publishRaw(t, c.Conn(), subject.Submit("once"), []byte(`{"id":"same-id","type":"once","payload":{"v":2}}`))
	// A marker submitted after both shows they were processed.
	if _, err := c.Submit(ctx, newSpec("marker", "once")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	tr := transitions(t, c, "same-id")
	if count(tr, ">ready") != 1 || count(tr, "ready>succeeded") != 1 {
		t.Fatalf("history %v: want one creation and one success", tr)
	}
	if n, _ := runs.Load("same-id"); *n.(*int) != 1 {
		t.Fatalf("handler ran %d times", *n.(*int))
	}
}

func TestBadInputIsRejectedClearly(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, 30*time.Second)
	big := strings.Repeat("x", task.DefaultMaxPayload+10)
	cases := []struct {
		id, subj, body, want string
	}{
		{"wrong-type", subject.Submit("ok"), `{"id":"wrong-type","type":"ok","priority":"high"}`, `field "priority"`},
		{"prio-range", subject.Submit("ok"), `{"id":"prio-range","type":"ok","priority":9}`, "out of range"},
		{"type-mismatch", subject.Submit("ok"), `{"id":"type-mismatch","type":"other"}`, "does not match"},
		{"too-big", subject.Submit("ok"), `{"id":"too-big","type":"ok","payload":"` + big + `"}`, "exceeds the limit"},
		{"cyc-a", subject.GraphSubmit, `{"tasks":[{"id":"cyc-a","type":"ok","depends_on":["cyc-b"]},{"id":"cyc-b","type":"ok","depends_on":["cyc-a"]}]}`, "cycle"},
		// The invalid spec is the second task: the first must not be created either.
		{"graph-first", subject.GraphSubmit, `{"tasks":[{"id":"graph-first","type":"ok"},{"id":"graph-second","type":"ok","priority":7,"depends_on":["graph-first"]}]}`, "out of range"},
	}
	for _, tc := range cases {
		publishRaw(t, c.Conn(), tc.subj, []byte(tc.body))
	}
	publishRaw(t, c.Conn(), subject.Submit("ok"), []byte(`{not json`))
	publishRaw(t, c.Conn(), subject.Submit("ok"), []byte{0xff, 0xfe, 0x00})
	// The orchestrator keeps working.
	if _, err := c.Submit(ctx, newSpec("after", "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "after"); err != nil || got.State != task.Succeeded {
		t.Fatalf("valid task after bad input: %+v %v", got, err)
	}
	for _, tc := range cases {
		var err error
		var rej *sdk.RejectedError
		testenv.Eventually(t, 15*time.Second, tc.id+" rejected", func() bool {
			_, err = c.Get(ctx, tc.id)
			return errors.As(err, &rej)
		})
		if !strings.Contains(rej.Rejection.Reason, tc.want) {
			t.Errorf("%s: got %v, want a rejection mentioning %q", tc.id, err, tc.want)
		}
	}
	rs, err := c.Rejections(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	anonymous := 0
	for _, r := range rs {
		if r.ID == "" && strings.Contains(r.Reason, "decode task spec") {
			anonymous++
		}
	}
	if anonymous != 2 { // "wrong-type" has an id, so only the two undecodable ones
		t.Fatalf("want 2 rejections of undecodable input, got %d in %+v", anonymous, rs)
	}
}

// TestDAGReleasesExactlyOnce runs many diamonds and fan-ins with two
// orchestrators and every report delivered twice.
func TestDAGReleasesExactlyOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "o1"})
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "o2"})
	dup := testenv.Conn(t, srv.URL())
	djs, _ := jetstream.New(dup)
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 32})
	ex.HandleFunc("step", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	// Duplicate every report: a replay must never release twice.
	sub, err := dup.Subscribe(subject.CompletedAll, func(m *nats.Msg) {
		if m.Header.Get("Ax-Copy") == "" {
			c := nats.NewMsg(m.Subject)
			c.Data, c.Header = m.Data, nats.Header{"Ax-Copy": {"1"}}
			_, _ = djs.PublishMsgAsync(c)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 90*time.Second)
	var downstream []string
	for g := range 30 {
		p := func(s string) string { return fmt.Sprintf("g%d-%s", g, s) }
		specs := []task.Spec{newSpec(p("a"), "step"), newSpec(p("b"), "step", p("a")), newSpec(p("c"), "step", p("a")),
			newSpec(p("d"), "step", p("b"), p("c"))}
		var ups []string
		for i := range 10 {
			specs = append(specs, newSpec(p(fmt.Sprint("u", i)), "step"))
			ups = append(ups, p(fmt.Sprint("u", i)))
		}
		specs = append(specs, newSpec(p("fanin"), "step", append(ups, p("d"))...))
		if _, err := c.SubmitGraph(ctx, specs); err != nil {
			t.Fatal(err)
		}
		downstream = append(downstream, p("b"), p("c"), p("d"), p("fanin"))
	}
	// Out of order: a dependent submitted after its upstream finished.
	if _, err := c.Wait(ctx, "g0-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, newSpec("late", "step", "g0-a")); err != nil {
		t.Fatal(err)
	}
	downstream = append(downstream, "late")
	for _, id := range downstream {
		got, err := c.Wait(ctx, id)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
		tr := transitions(t, c, id)
		if count(tr, "waiting>ready") != 1 || count(tr, "ready>succeeded") != 1 {
			t.Fatalf("%s released or succeeded more than once: %v", id, tr)
		}
	}
}

func TestFailureCancelsDownstreamTransitively(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ex.HandleFunc("bad", func(context.Context, *executor.Job) (any, error) { return nil, errors.New("disk full") })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	a := newSpec("a", "bad")
	a.MaxRetries = new(1)
	if _, err := c.SubmitGraph(ctx, []task.Spec{a, newSpec("b", "ok", "a"), newSpec("c", "ok", "b"), newSpec("d", "ok", "b", "c")}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "a")
	if err != nil || got.State != task.Failed || got.Attempt != 2 {
		t.Fatalf("a: %+v %v", got, err)
	}
	for id, reason := range map[string]string{"b": "upstream a is failed", "c": "upstream b is cancelled", "d": "upstream [bc] is cancelled"} {
		got, err := c.Wait(ctx, id)
		if err != nil || got.State != task.Cancelled || !regexp.MustCompile("^"+reason+"$").MatchString(got.Reason) {
			t.Fatalf("%s: %+v %v; want cancelled because %q", id, got, err, reason)
		}
	}
	// A dependent submitted after the failure is cancelled at once.
	if _, err := c.Submit(ctx, newSpec("e", "ok", "a")); err != nil {
		t.Fatal(err)
	}
	got, err = c.Wait(ctx, "e")
	if err != nil || got.State != task.Cancelled || got.Reason != "upstream a is failed" {
		t.Fatalf("e: %+v %v", got, err)
	}
	var dls []task.DeadLetter
	testenv.Eventually(t, 10*time.Second, "dead letter", func() bool {
		dls, err = c.DeadLetters(ctx)
		return err == nil && len(dls) == 1
	})
	if err != nil || len(dls) != 1 || len(dls[0].Attempts) != 2 || dls[0].Attempts[1].Error != "disk full" {
		t.Fatalf("dead letters %+v %v", dls, err)
	}
}

func TestCancelInEachState(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("snooze", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.RetryAfter(time.Hour, errors.New("later"))
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	ready := newSpec("in-ready", "x")
	ready.Capability = "nobody"
	if _, err := c.SubmitGraph(ctx, []task.Spec{ready, newSpec("in-waiting", "x", "in-ready"), newSpec("in-retrying", "snooze")}); err != nil {
		t.Fatal(err)
	}
	want := map[string]task.State{"in-ready": task.Ready, "in-waiting": task.Waiting, "in-retrying": task.Retrying}
	for id, st := range want {
		testenv.Eventually(t, 10*time.Second, id+" in "+string(st), func() bool {
			got, err := c.Get(ctx, id)
			return err == nil && got.State == st
		})
	}
	for _, id := range []string{"in-retrying", "in-ready"} {
		got, err := c.Cancel(ctx, id, "no longer needed")
		if err != nil || got.State != task.Cancelled {
			t.Fatalf("cancel %s: %+v %v", id, got, err)
		}
	}
	got, err := c.Wait(ctx, "in-waiting")
	if err != nil || got.State != task.Cancelled || got.Reason != "upstream in-ready is cancelled" {
		t.Fatalf("in-waiting: %+v %v", got, err)
	}
	if _, err := c.Cancel(ctx, "in-ready", ""); err == nil || !strings.Contains(err.Error(), "already cancelled") {
		t.Fatalf("second cancel: %v", err)
	}
	// The retry timer was removed with the cancel.
	if n := pendingTimers(t, c, subject.TimerRetry, "in-retrying"); n != 0 {
		t.Fatal("retry timer still pending after the cancel")
	}
}

func TestLateResultOfSupersededAttemptIgnored(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("twice", func(_ context.Context, j *executor.Job) (any, error) {
		if j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return "second", nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := c.Submit(ctx, newSpec("t", "twice")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "t")
	if err != nil || got.State != task.Succeeded || got.Attempt != 2 {
		t.Fatalf("%+v %v", got, err)
	}
	h, _ := c.History(ctx, "t")
	before := len(h)
	// A late "succeeded" from attempt 1 and a late failure of attempt 2's
	// execution id from a stale executor.
	stale := task.Report{ID: "t", Type: "twice", ExecutionID: got.Errors[0].ExecutionID, Attempt: 1, Status: task.OutcomeSucceeded, Executor: "zombie",
		Token: testenv.Token(t, c.Conn(), "t", got.Errors[0].ExecutionID)}
	data, _ := json.Marshal(stale)
	publishRaw(t, c.Conn(), subject.Completed("twice"), data)
	again := task.Report{ID: "t", Type: "twice", ExecutionID: got.ExecutionID, Attempt: 2, Status: task.OutcomeFailed, Error: "late", Executor: "zombie",
		Token: testenv.Token(t, c.Conn(), "t", got.ExecutionID)}
	data, _ = json.Marshal(again)
	publishRaw(t, c.Conn(), subject.Completed("twice"), data)
	publishRaw(t, c.Conn(), subject.Completed("twice"), []byte(`{"garbage":`))
	if _, err := c.Submit(ctx, newSpec("marker", "twice")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	h, _ = c.History(ctx, "t")
	final, _ := c.Get(ctx, "t")
	if len(h) != before || final.State != task.Succeeded || string(final.Result) != `"second"` {
		t.Fatalf("late results changed the task: %d events (was %d), %+v", len(h), before, final)
	}
}

// TestCancelRightAfterSubmit: a cancel sent as soon as the submission is
// acknowledged, while the intake still works through a backlog in front of
// it, cancels the task rather than answering "not found"; a cancel of an id
// never submitted is still answered "not found".
func TestCancelRightAfterSubmit(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	backlog := make([]task.Spec, 1000)
	for i := range backlog {
		backlog[i] = newSpec(fmt.Sprintf("ahead-%d", i), "nobody-runs-this")
	}
	if _, err := c.SubmitMany(ctx, backlog); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, newSpec("late", "nobody-runs-this")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Cancel(ctx, "late", "changed my mind")
	if err != nil || got.State != task.Cancelled {
		t.Fatalf("cancel right after submit: %+v, %v", got, err)
	}
	if _, err := c.Cancel(ctx, "never-submitted", ""); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("cancel of an id never submitted: %v", err)
	}
}
