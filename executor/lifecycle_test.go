package executor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/task"
)

// Stop before Start and a second Stop do nothing; Start after Stop runs the
// executor again.
func TestRestartAfterStop(t *testing.T) {
	t.Parallel()
	env := axtest.Start(t, nil)
	ex, err := env.NewExecutor(executor.Config{Capabilities: []string{"restart"}})
	if err != nil {
		t.Fatal(err)
	}
	ex.HandleFunc("echo", func(_ context.Context, j *executor.Job) (any, error) { return j.Payload, nil })
	ctx := context.Background()
	if err := ex.Stop(ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	run := func(n int) {
		t.Helper()
		spec, _ := task.New("echo", n)
		spec.Capability = "restart"
		if got := env.RunSpec(t, spec); got.State != task.Succeeded || string(got.Result) != string(spec.Payload) || got.Executor != ex.ID() {
			t.Fatalf("run %d: %s by %s, result %s", n, got.State, got.Executor, got.Result)
		}
	}
	for i := range 3 {
		if err := ex.Start(ctx); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if err := ex.Start(ctx); err != nil {
			t.Fatalf("second Start while running: %v", err)
		}
		run(i)
		if err := ex.Stop(ctx); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
		if err := ex.Stop(ctx); err != nil {
			t.Fatalf("second stop %d: %v", i, err)
		}
	}
}

// A handler that ignores its context cannot hold Stop: Stop returns when
// its context ends, and the task is handed back and run by another
// executor. The stuck handler's late outcome is discarded.
func TestStopReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	env := axtest.Start(t, nil)
	stuck, err := env.NewExecutor(executor.Config{ID: "stuck", Capabilities: []string{"slow"}})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	stuck.HandleFunc("report.build", func(context.Context, *executor.Job) (any, error) {
		close(started)
		<-release // ignores its context
		return "late", nil
	})
	t.Cleanup(func() { close(release) })
	ctx := context.Background()
	if err := stuck.Start(ctx); err != nil {
		t.Fatal(err)
	}
	spec, _ := task.New("report.build", nil)
	spec.Capability = "slow"
	id, err := env.Client.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	<-started

	stopCtx, cancel := context.WithCancel(ctx)
	cancel() // no patience at all: Stop must not wait for the handler
	if err := stuck.Stop(stopCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop = %v, want context.Canceled", err)
	}

	healthy, err := env.NewExecutor(executor.Config{ID: "healthy", Capabilities: []string{"slow"}})
	if err != nil {
		t.Fatal(err)
	}
	healthy.HandleFunc("report.build", func(context.Context, *executor.Job) (any, error) { return "done", nil })
	if err := healthy.Start(ctx); err != nil {
		t.Fatal(err)
	}
	got := env.WaitTask(t, id)
	axtest.RequireSucceeded(t, got)
	if got.Executor != "healthy" || string(got.Result) != `"done"` || got.Attempt != 1 {
		t.Fatalf("ran on %s, result %s, attempt %d; want healthy, \"done\", attempt 1", got.Executor, got.Result, got.Attempt)
	}
}

// Stop ends a Start that waits for AX's streams (no orchestrator has
// created them): Start returns ErrStopped instead of holding Stop up.
func TestStopEndsAStartWaitingForStreams(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	waiting := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		close(waiting)
		started <- ex.Start(context.Background()) // no deadline: only Stop ends it
	}()
	<-waiting
	// A Stop before Start began waiting does nothing; one while it waits
	// must end it with ErrStopped.
	for {
		if err := ex.Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		select {
		case err := <-started:
			if !errors.Is(err, executor.ErrStopped) {
				t.Fatalf("Start = %v, want ErrStopped", err)
			}
			return
		case <-time.After(10 * time.Millisecond):
			// Start had not begun waiting yet: stop again.
		}
	}
}
