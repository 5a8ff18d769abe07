package axtest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/task"
)

// New starts a whole AX in the process; Run submits a task and waits for
// its end. In a test, axtest.Start(t, nil) does the same and closes it when
// the test ends, and RunTask and RequireSucceeded fail the test for you.
func ExampleNew() {
	ctx := context.Background()
	env, err := axtest.New(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer env.Close(ctx)

	env.Executor.HandleFunc("greet", func(_ context.Context, j *executor.Job) (any, error) {
		return "hello " + string(j.Payload), nil
	})
	spec, _ := task.New("greet", "gopher")
	t, err := env.Run(ctx, spec)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, string(t.Result))
	// Output: succeeded "hello \"gopher\""
}

// Failed attempts are retried within milliseconds in an axtest
// environment, so a test of retries and the dead-letter queue is quick.
func ExampleEnv_Run_retries() {
	ctx := context.Background()
	env, err := axtest.New(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer env.Close(ctx)

	env.Executor.HandleFunc("flaky", func(context.Context, *executor.Job) (any, error) {
		return nil, errors.New("upstream down")
	})
	spec, _ := task.New("flaky", nil) // 5 retries by default
	t, _ := env.Run(ctx, spec)
	fmt.Println(t.State, "after", t.Attempt, "attempts")
	// Output: failed after 6 attempts
}
