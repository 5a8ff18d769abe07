package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func withRule(s task.Spec, r task.TriggerRule) task.Spec {
	s.TriggerRule = r
	return s
}

// TestTriggerRules: cleanup (all_ended) and compensation (any_failed)
// steps run after failures; the default still cancels; any_failed does
// not wait for its other upstreams and is cancelled when all succeeded;
// narrow and wide (counted) fan-ins, and dependents submitted after the
// failure, follow the same rules.
func TestTriggerRules(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 32})
	compensated := make(chan struct{})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ex.HandleFunc("bad", func(context.Context, *executor.Job) (any, error) { return nil, errors.New("disk full") })
	ex.HandleFunc("compensate", func(context.Context, *executor.Job) (any, error) {
		close(compensated)
		return nil, nil
	})
	// Runs until the compensation ran: any_failed must not wait for it.
	ex.HandleFunc("slow", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-compensated:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 90*time.Second)

	a := newSpec("a", "bad")
	a.MaxRetries = new(0)
	specs := []task.Spec{a, newSpec("b", "ok"), newSpec("slow", "slow"),
		withRule(newSpec("cleanup", "ok", "a", "b"), task.TriggerAllEnded),
		withRule(newSpec("compensate", "compensate", "slow", "a"), task.TriggerAnyFailed),
		withRule(newSpec("no-failure", "ok", "b"), task.TriggerAnyFailed),
		withRule(newSpec("explicit-default", "ok", "a", "b"), task.TriggerAllSucceeded),
		newSpec("default", "ok", "b", "a"),
		newSpec("after-compensate", "ok", "compensate"),
		newSpec("after-no-failure", "ok", "no-failure"),
		withRule(newSpec("cleanup-of-cancelled", "ok", "default"), task.TriggerAllEnded),
	}
	// Wide fan-ins (more than task.WideFanIn upstreams) count ends with markers.
	var wideOK, wideMixed []string
	for i := range task.WideFanIn + 4 {
		ok := fmt.Sprintf("w-ok-%d", i)
		specs = append(specs, newSpec(ok, "ok"))
		wideOK = append(wideOK, ok)
		mixed := fmt.Sprintf("w-mixed-%d", i)
		typ := "ok"
		if i%5 == 0 {
			typ = "bad"
		}
		s := newSpec(mixed, typ)
		s.MaxRetries = new(0)
		specs = append(specs, s)
		wideMixed = append(wideMixed, mixed)
	}
	specs = append(specs,
		withRule(newSpec("wide-ended", "ok", wideMixed...), task.TriggerAllEnded),
		withRule(newSpec("wide-any-failed", "ok", wideMixed...), task.TriggerAnyFailed),
		withRule(newSpec("wide-no-failure", "ok", wideOK...), task.TriggerAnyFailed),
		withRule(newSpec("wide-all-ok-ended", "ok", wideOK...), task.TriggerAllEnded),
	)
	if _, err := c.SubmitGraph(ctx, specs); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		state  task.State
		reason string
	}{
		"cleanup":              {task.Succeeded, ""},
		"compensate":           {task.Succeeded, ""},
		"slow":                 {task.Succeeded, ""},
		"no-failure":           {task.Cancelled, "trigger rule any_failed: no upstream failed"},
		"explicit-default":     {task.Cancelled, "upstream a is failed"},
		"default":              {task.Cancelled, "upstream a is failed"},
		"after-compensate":     {task.Succeeded, ""},
		"after-no-failure":     {task.Cancelled, "upstream no-failure is cancelled"},
		"cleanup-of-cancelled": {task.Succeeded, ""},
		"wide-ended":           {task.Succeeded, ""},
		"wide-any-failed":      {task.Succeeded, ""},
		"wide-no-failure":      {task.Cancelled, "trigger rule any_failed: no upstream failed"},
		"wide-all-ok-ended":    {task.Succeeded, ""},
	}
	for id, w := range want {
		got, err := c.Wait(ctx, id)
		if err != nil || got.State != w.state || (w.reason != "" && got.Reason != w.reason) {
			t.Fatalf("%s: %s %q %v; want %s %q", id, got.State, got.Reason, err, w.state, w.reason)
		}
	}
	// Why each ran is in its history.
	for id, reason := range map[string]string{
		"cleanup":         "dependencies ended (trigger rule all_ended)",
		"compensate":      "upstream a is failed (trigger rule any_failed)",
		"wide-ended":      "dependencies ended (trigger rule all_ended)",
		"wide-any-failed": "upstream w-mixed-", // whichever failure came first
	} {
		h, err := c.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range h {
			if ev.Event.From == task.Waiting && ev.Event.To == task.Ready && strings.HasPrefix(ev.Event.Reason, reason) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no release with reason %q in its history", id, reason)
		}
		if tr := transitions(t, c, id); count(tr, "waiting>ready") != 1 {
			t.Errorf("%s released %d times: %v", id, count(tr, "waiting>ready"), tr)
		}
	}
	// Dependents submitted after the failure resolve at registration.
	late := []task.Spec{withRule(newSpec("late-compensate", "ok", "b", "a"), task.TriggerAnyFailed),
		withRule(newSpec("late-cleanup", "ok", "a"), task.TriggerAllEnded),
		withRule(newSpec("late-no-failure", "ok", "b"), task.TriggerAnyFailed)}
	for _, s := range late {
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for id, st := range map[string]task.State{"late-compensate": task.Succeeded, "late-cleanup": task.Succeeded, "late-no-failure": task.Cancelled} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != st {
			t.Fatalf("%s: %s %q %v; want %s", id, got.State, got.Reason, err, st)
		}
	}
}

// TestTriggerRuleRejected: an unknown rule, or one without depends_on, is
// rejected naming the field.
func TestTriggerRuleRejected(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	publishRaw(t, c.Conn(), subject.Submit("ok"), []byte(`{"id":"bad-rule","type":"ok","depends_on":["x"],"trigger_rule":"one_failed"}`))
	publishRaw(t, c.Conn(), subject.Submit("ok"), []byte(`{"id":"no-deps","type":"ok","trigger_rule":"any_failed"}`))
	for id, want := range map[string]string{"bad-rule": `trigger_rule: "one_failed" is not one of`, "no-deps": "trigger_rule: any_failed is only for tasks with depends_on"} {
		var rej *sdk.RejectedError
		testenv.Eventually(t, 30*time.Second, id+" rejected", func() bool {
			_, err := c.Get(ctx, id)
			return errors.As(err, &rej)
		})
		if !strings.Contains(rej.Rejection.Reason, want) {
			t.Errorf("%s: %q, want %q", id, rej.Rejection.Reason, want)
		}
	}
}
