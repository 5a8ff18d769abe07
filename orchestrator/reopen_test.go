package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TestRedriveWithDependents: a re-drive with dependents re-opens, under
// the same ids, every task the failure cancelled — through a diamond and a
// wide fan-in — and they run; a cleanup step that already ran is left
// alone; the histories say who re-opened what; a plain re-drive leaves them
// cancelled, and asking again with dependents re-opens them then.
func TestRedriveWithDependents(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 16})
	var fixed atomic.Bool
	var mu sync.Mutex
	runs := map[string]int{}
	ex.HandleFunc("step", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil, nil
	})
	ex.HandleFunc("flaky", func(context.Context, *executor.Job) (any, error) {
		if !fixed.Load() {
			return nil, errors.New("not fixed yet")
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 120*time.Second)

	a := newSpec("a", "flaky")
	a.MaxRetries = new(0)
	p := newSpec("p", "flaky")
	p.MaxRetries = new(0)
	specs := []task.Spec{a, newSpec("ok", "step"),
		newSpec("b", "step", "a"), newSpec("c", "step", "b"), newSpec("d", "step", "b", "c"),
		newSpec("f", "step", "a", "ok"),
		withRule(newSpec("cleanup", "step", "a"), task.TriggerAllEnded),
		p, newSpec("q", "step", "p"),
	}
	wideDeps := []string{"a"}
	for i := range task.WideFanIn + 3 {
		id := fmt.Sprintf("u%d", i)
		specs = append(specs, newSpec(id, "step"))
		wideDeps = append(wideDeps, id)
	}
	specs = append(specs, newSpec("wide", "step", wideDeps...))
	if _, err := c.SubmitGraph(ctx, specs); err != nil {
		t.Fatal(err)
	}
	cancelled := []string{"b", "c", "d", "f", "wide", "q"}
	for _, id := range cancelled {
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Cancelled {
			t.Fatalf("%s before the re-drive: %+v, %v", id, got, err)
		}
	}
	if got, err := c.Wait(ctx, "cleanup"); err != nil || got.State != task.Succeeded {
		t.Fatalf("cleanup: %+v, %v", got, err)
	}
	fixed.Store(true)

	// A plain re-drive leaves the dependents cancelled…
	if _, err := c.Redrive(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "p"); err != nil || got.State != task.Succeeded {
		t.Fatalf("p: %+v, %v", got, err)
	}
	if got, err := c.Get(ctx, "q"); err != nil || got.State != task.Cancelled {
		t.Fatalf("q after a plain re-drive: %+v, %v", got, err)
	}
	// …until asked again with them.
	if _, err := c.Redrive(ctx, "p", sdk.WithDependents(), sdk.By("bob")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Redrive(ctx, "a", sdk.WithDependents(), sdk.By("alice")); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(cancelled, "a") {
		got, err := c.Wait(ctx, id)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s after the re-drive with dependents: %s %q, %v", id, got.State, got.Reason, err)
		}
	}
	for id, want := range map[string]string{
		"b": "re-opened by the re-drive of a with its dependents (by alice)", "c": "re-opened by the re-drive of a with its dependents (by alice)",
		"d": "re-opened by the re-drive of a with its dependents (by alice)", "wide": "re-opened by the re-drive of a with its dependents (by alice)",
		"q": "re-opened by the re-drive of p with its dependents (by bob)",
	} {
		h, err := c.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var reopen []string
		for _, ev := range h {
			if ev.Event.From == task.Cancelled && ev.Event.To == task.Waiting {
				reopen = append(reopen, ev.Event.Reason)
			}
		}
		if len(reopen) != 1 || reopen[0] != want {
			t.Errorf("%s: re-open events %q, want one %q", id, reopen, want)
		}
	}
	h, err := c.History(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1].Event; !strings.Contains(transitionsReasons(h), "re-driven from the dead-letter queue with its dependents (by alice)") {
		t.Errorf("a's history does not record the re-drive with dependents: last %q", last.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"b", "c", "d", "f", "wide", "q", "cleanup"} {
		if runs[id] != 1 {
			t.Errorf("%s ran %d times, want once", id, runs[id])
		}
	}
}

func transitionsReasons(h []task.HistoryEntry) string {
	var b strings.Builder
	for _, e := range h {
		b.WriteString(e.Event.Reason + "\n")
	}
	return b.String()
}

// TestRedriveReopensLateDependents: dependents submitted after their
// upstream had already failed cancel themselves (their upstream's record
// never learns of them: it had ended); a re-drive with dependents still
// re-opens them, through two levels, from their stored edges.
func TestRedriveReopensLateDependents(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	var fixed atomic.Bool
	ex.HandleFunc("flaky", func(context.Context, *executor.Job) (any, error) {
		if !fixed.Load() {
			return nil, errors.New("not fixed yet")
		}
		return nil, nil
	})
	ex.HandleFunc("step", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	up := newSpec("late-up", "flaky")
	up.MaxRetries = new(0)
	if _, err := c.Submit(ctx, up); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "late-up"); err != nil || got.State != task.Failed {
		t.Fatalf("late-up: %+v %v", got, err)
	}
	if _, err := c.SubmitGraph(ctx, []task.Spec{newSpec("late-1", "step", "late-up"), newSpec("late-2", "step", "late-1")}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"late-1", "late-2"} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Cancelled {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
	}
	fixed.Store(true)
	if _, err := c.Redrive(ctx, "late-up", sdk.WithDependents(), sdk.By("tester")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"late-up", "late-1", "late-2"} {
		testenv.Eventually(t, time.Minute, id+" to succeed", func() bool {
			got, err := c.Get(ctx, id)
			return err == nil && got.State == task.Succeeded
		})
	}
}
