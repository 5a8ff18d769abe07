package executor_test

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
	"github.com/ax-run/ax/task"
)

// counts counts the runs of each step's fn.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

func (c *counts) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// TestStepsRunOnceAcrossRetries: a handler of three steps that fails after
// its first step in attempt 1 and after its second in attempt 2 runs each
// step's fn once; the later attempts return the stored results (inline,
// and one over the inline limit from the object store), typed or not.
func TestStepsRunOnceAcrossRetries(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	var runs counts
	big := strings.Repeat("x", task.StepInlineLimit+100)
	ex.HandleFunc("steps", func(ctx context.Context, j *executor.Job) (any, error) {
		a, err := executor.Step(ctx, j, "charge", func(context.Context) (int, error) {
			runs.add("charge")
			return 40 + j.Attempt, nil // differs per attempt: a rerun would show
		})
		if err != nil {
			return nil, err
		}
		if j.Attempt == 1 {
			return nil, errors.New("crash after charge")
		}
		b, err := executor.Step(ctx, j, "render", func(context.Context) (string, error) {
			runs.add("render")
			return big + fmt.Sprint(j.Attempt), nil
		})
		if err != nil {
			return nil, err
		}
		if j.Attempt == 2 {
			return nil, errors.New("crash after render")
		}
		raw, err := j.Step(ctx, "send", func(context.Context) (any, error) {
			runs.add("send")
			return map[string]int{"sent": j.Attempt}, nil
		})
		if err != nil {
			return nil, err
		}
		return fmt.Sprintf("%d %d %s", a, len(b), b[len(b)-1:]) + " " + string(raw), nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := c.Submit(ctx, spec(t, "st1", "steps", 2, "default")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "st1")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`"41 %d 2 {\"sent\":3}"`, len(big)+1)
	if got.State != task.Succeeded || got.Attempt != 3 || string(got.Result) != want {
		t.Fatalf("got %s attempt %d result %s; want succeeded in attempt 3 with %s", got.State, got.Attempt, got.Result, want)
	}
	for _, name := range []string{"charge", "render", "send"} {
		if n := runs.get(name); n != 1 {
			t.Errorf("step %s ran %d times, want once", name, n)
		}
	}
	if len(got.Steps) != 3 || got.Steps[0].Name != "charge" || string(got.Steps[0].Result) != "41" ||
		got.Steps[1].ResultObject != task.StepObjectName("st1", got.Steps[1].ExecutionID, "render") || got.Steps[1].ResultDigest == "" ||
		got.Steps[2].Attempt != 3 {
		t.Fatalf("steps in the record: %+v", got.Steps)
	}
	hist, err := c.History(ctx, "st1")
	if err != nil {
		t.Fatal(err)
	}
	stepEvents := 0
	for _, h := range hist {
		if h.Event.Kind == task.KindStep {
			stepEvents++
			if h.Event.From != h.Event.To || !strings.Contains(h.Event.Reason, "stored by") {
				t.Errorf("step event %+v", h.Event)
			}
		}
	}
	if stepEvents != 3 {
		t.Fatalf("%d step events in the history, want 3", stepEvents)
	}
}

// TestStepLimits: bad names and too many steps are permanent errors with a
// clear message; a fn's error stores nothing and is returned as is.
func TestStepLimits(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	var fnErrRuns atomic.Int32
	ex.HandleFunc("badname", func(ctx context.Context, j *executor.Job) (any, error) {
		return j.Step(ctx, "ax:mine", func(context.Context) (any, error) { return 1, nil })
	})
	ex.HandleFunc("many", func(ctx context.Context, j *executor.Job) (any, error) {
		for i := range task.MaxSteps + 1 {
			if _, err := j.Step(ctx, fmt.Sprint("s", i), func(context.Context) (any, error) { return i, nil }); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	ex.HandleFunc("fnerr", func(ctx context.Context, j *executor.Job) (any, error) {
		return j.Step(ctx, "flaky", func(context.Context) (any, error) {
			if fnErrRuns.Add(1) == 1 {
				return nil, errors.New("not yet")
			}
			return "done", nil
		})
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	for _, id := range []string{"badname", "many", "fnerr"} {
		if _, err := c.Submit(ctx, spec(t, id, id, 2, "default")); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Wait(ctx, "badname")
	if err != nil || got.State != task.Failed || got.Attempt != 1 || !strings.Contains(got.Reason, `starts with "ax:", which AX reserves`) {
		t.Fatalf("badname: %+v %v", got, err)
	}
	got, err = c.Wait(ctx, "many")
	if err != nil || got.State != task.Failed || len(got.Steps) != task.MaxSteps || !strings.Contains(got.Reason, "the limit is 100") {
		t.Fatalf("many: %s %q, %d steps, %v", got.State, got.Reason, len(got.Steps), err)
	}
	got, err = c.Wait(ctx, "fnerr")
	if err != nil || got.State != task.Succeeded || got.Attempt != 2 || fnErrRuns.Load() != 2 || len(got.Steps) != 1 {
		t.Fatalf("fnerr: %+v %v (fn ran %d times)", got, err, fnErrRuns.Load())
	}
}

// TestSleepResumesWithoutSpendingAnAttempt: a handler that stores a step,
// sleeps and stores another runs twice, each step once; the sleep ends the
// first run (the task retrying, snoozed, no error recorded), it is listed
// among the steps with its end, and the task succeeds in attempt 1 even
// with max_retries 0.
func TestSleepResumesWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	var runs counts
	const nap = 300 * time.Millisecond
	ex.HandleFunc("napper", func(ctx context.Context, j *executor.Job) (any, error) {
		runs.add("handler")
		if _, err := j.Step(ctx, "before", func(context.Context) (any, error) { runs.add("before"); return "b", nil }); err != nil {
			return nil, err
		}
		if err := j.Sleep(ctx, nap); err != nil {
			return nil, err
		}
		if _, err := j.Step(ctx, "after", func(context.Context) (any, error) { runs.add("after"); return "a", nil }); err != nil {
			return nil, err
		}
		if err := j.Sleep(ctx, nap); err != nil {
			return nil, err
		}
		return "woke twice", nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	s := spec(t, "nap1", "napper", 2, "default")
	s.MaxRetries = new(0)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "nap1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.Succeeded || got.Attempt != 1 || len(got.Errors) != 0 {
		t.Fatalf("got %s attempt %d errors %v: %s", got.State, got.Attempt, got.Errors, got.Reason)
	}
	if runs.get("handler") != 3 || runs.get("before") != 1 || runs.get("after") != 1 {
		t.Fatalf("runs: %v", runs.n)
	}
	if len(got.Steps) != 4 || got.Steps[1].Name != "ax:sleep:1" || got.Steps[1].SleepUntil == nil || got.Steps[3].Name != "ax:sleep:2" {
		t.Fatalf("steps: %+v", got.Steps)
	}
	hist, err := c.History(ctx, "nap1")
	if err != nil {
		t.Fatal(err)
	}
	var slept, woke int
	for _, h := range hist {
		ev := h.Event
		if ev.To == task.Retrying && strings.Contains(ev.Reason, "sleeping for 300ms") && strings.Contains(ev.Reason, "no attempt spent") {
			slept++
			// The wake is no earlier than the sleep's end.
			if ev.Task.RetryAt == nil || ev.Task.RetryAt.Sub(ev.At) < nap {
				t.Errorf("sleep event %+v", ev)
			}
		}
		if ev.From == task.Retrying && ev.To == task.Ready && strings.Contains(ev.Reason, "over; attempt 1 runs again") {
			woke++
			if prev := ev.Task.ReadyAt; prev == nil {
				t.Errorf("wake event %+v", ev)
			}
		}
	}
	if slept != 2 || woke != 2 {
		t.Fatalf("history: %d sleeps, %d wakes; want 2 and 2", slept, woke)
	}
}
