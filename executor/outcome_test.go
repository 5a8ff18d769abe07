package executor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func TestOutcomeErrorsAs(t *testing.T) {
	t.Parallel()
	cause := errors.New("card declined")
	wrap := func(err error) error { return fmt.Errorf("charge order 7: %w", err) }

	var perm *executor.PermanentError
	if err := wrap(executor.Permanent(cause)); !errors.As(err, &perm) || perm.Err != cause || !errors.Is(err, cause) {
		t.Fatalf("Permanent: errors.As = %v, %v", perm, err)
	}
	var ra *executor.RetryAfterError
	if err := wrap(executor.RetryAfter(time.Minute, cause)); !errors.As(err, &ra) || ra.Delay != time.Minute || !errors.Is(err, cause) {
		t.Fatalf("RetryAfter: errors.As = %v, %v", ra, err)
	}
	var sn *executor.SnoozeError
	if err := wrap(executor.Snooze(time.Second)); !errors.As(err, &sn) || sn.Delay != time.Second {
		t.Fatalf("Snooze: errors.As = %v, %v", sn, err)
	}
	var ce *executor.CancelError
	if err := wrap(executor.Cancel(cause)); !errors.As(err, &ce) || !errors.Is(err, cause) {
		t.Fatalf("Cancel: errors.As = %v, %v", ce, err)
	}
	if executor.Permanent(nil).Error() == "" || executor.Cancel(nil).Error() == "" || executor.RetryAfter(0, nil).Error() == "" {
		t.Fatal("a nil cause must still give a message")
	}
}

// A snooze runs the same attempt again without recording a failure, so a
// task with no retries still succeeds after snoozing.
func TestSnoozeDoesNotConsumeAnAttempt(t *testing.T) {
	t.Parallel()
	env := axtest.Start(t, nil)
	var mu sync.Mutex
	var attempts []int
	env.Executor.HandleFunc("poll", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, j.Attempt)
		if len(attempts) <= 2 {
			return nil, executor.Snooze(10 * time.Millisecond)
		}
		return "ready", nil
	})
	got := env.RunTask(t, "poll", nil)
	axtest.RequireSucceeded(t, got)
	if got.Attempt != 1 || got.Snoozes != 2 || got.Snoozed || len(got.Errors) != 0 {
		t.Fatalf("attempt %d, snoozes %d, snoozed %v, errors %v; want attempt 1, 2 snoozes, no errors", got.Attempt, got.Snoozes, got.Snoozed, got.Errors)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 1 1]" {
		t.Fatalf("handler saw attempts %v, want [1 1 1]", attempts)
	}
	h, err := env.Client.History(context.Background(), got.ID)
	if err != nil {
		t.Fatal(err)
	}
	var snoozed int
	for _, ev := range h {
		if ev.Event.To == task.Retrying && strings.Contains(ev.Event.Reason, "snoozed") {
			snoozed++
		}
	}
	if snoozed != 2 {
		t.Fatalf("history has %d snooze events, want 2", snoozed)
	}
}

// A handler's Cancel ends the task cancelled, with its reason, and cancels
// its dependents; nothing is retried or dead-lettered.
func TestCancelFromHandler(t *testing.T) {
	t.Parallel()
	env := axtest.Start(t, nil)
	env.Executor.HandleFunc("order.ship", func(context.Context, *executor.Job) (any, error) {
		return nil, fmt.Errorf("check order: %w", executor.Cancel(errors.New("order withdrawn")))
	})
	env.Executor.HandleFunc("order.invoice", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ship, _ := task.New("order.ship", nil)
	invoice, _ := task.New("order.invoice", nil)
	ship.ID, invoice.ID, invoice.DependsOn = "ship-1", "invoice-1", []string{"ship-1"}
	ctx := context.Background()
	if _, err := env.Client.SubmitGraph(ctx, []task.Spec{ship, invoice}); err != nil {
		t.Fatal(err)
	}
	got := env.WaitTask(t, "ship-1")
	axtest.RequireState(t, got, task.Cancelled)
	if !strings.Contains(got.Reason, "cancelled by its handler") || !strings.Contains(got.Reason, "order withdrawn") || len(got.Errors) != 0 {
		t.Fatalf("reason %q, errors %v", got.Reason, got.Errors)
	}
	axtest.RequireState(t, env.WaitTask(t, "invoice-1"), task.Cancelled)
	if dl, err := env.Client.DeadLetters(ctx); err != nil || len(dl) != 0 {
		t.Fatalf("dead letters %v, %v; want none", dl, err)
	}
}

type resize struct {
	Width int `json:"width"`
}

func (resize) Kind() string { return "image.resize" }

// Typed handlers receive the decoded payload; a payload that does not fit
// the type fails at once instead of being retried.
func TestTypedHandler(t *testing.T) {
	t.Parallel()
	env := axtest.Start(t, nil)
	executor.HandleArgs(env.Executor, func(_ context.Context, _ *executor.Job, r resize) (any, error) {
		return r.Width * 2, nil
	})
	ctx := context.Background()
	id, err := sdk.SubmitArgs(ctx, env.Client, resize{Width: 21}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := env.WaitTask(t, id)
	axtest.RequireSucceeded(t, got)
	if n := axtest.Result[int](t, got); n != 42 {
		t.Fatalf("result %d, want 42", n)
	}

	bad, _ := task.New("image.resize", "not an object")
	failed := env.RunSpec(t, bad)
	axtest.RequireState(t, failed, task.Failed)
	if failed.Attempt != 1 || !strings.Contains(failed.Errors[0].Error, "decode payload") {
		t.Fatalf("attempt %d, errors %v; want one attempt failing to decode", failed.Attempt, failed.Errors)
	}

	// SubmitTyped with options: the id and cost come from opts.
	opts, _ := task.New("", nil)
	opts.ID, opts.EstimatedCost = "typed-1", 2
	executor.HandleTyped(env.Executor, "echo", func(_ context.Context, _ *executor.Job, s []string) (any, error) { return s, nil })
	if id, err := sdk.SubmitTyped(ctx, env.Client, "echo", []string{"a", "b"}, &opts); err != nil || id != "typed-1" {
		t.Fatalf("SubmitTyped: %q, %v", id, err)
	}
	echoed := env.WaitTask(t, "typed-1")
	if got := axtest.Result[[]string](t, echoed); fmt.Sprint(got) != "[a b]" || echoed.EstimatedCost != 2 {
		t.Fatalf("result %v, estimated cost %v", got, echoed.EstimatedCost)
	}
}
