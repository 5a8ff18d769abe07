package executor_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/task"
)

// Durable steps: an order is charged once, however often its handler
// runs. The first attempt charges the card and then fails (a mail server
// down, say); the retry finds the charge stored and sends the receipt
// without charging again.
func ExampleStep() {
	env, stop := startEnv()
	defer stop()
	ctx := context.Background()

	var charges, mails atomic.Int32
	env.Executor.HandleFunc("order.checkout", func(ctx context.Context, job *executor.Job) (any, error) {
		// The typed form: the result is stored as JSON and decoded back.
		charge, err := executor.Step(ctx, job, "charge", func(ctx context.Context) (string, error) {
			charges.Add(1)
			return "ch_42", nil // the payment provider's charge id
		})
		if err != nil {
			return nil, err
		}
		if job.Attempt == 1 {
			return nil, errors.New("mail server down")
		}
		if _, err := job.Step(ctx, "receipt", func(ctx context.Context) (any, error) {
			mails.Add(1)
			return map[string]string{"sent_for": charge}, nil
		}); err != nil {
			return nil, err
		}
		return charge, nil
	})

	spec, _ := task.New("order.checkout", nil)
	t, err := env.Run(ctx, spec)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, "in attempt", t.Attempt, string(t.Result))
	fmt.Println("charged", charges.Load(), "time(s), mailed", mails.Load(), "time(s)")
	for _, s := range t.Steps {
		fmt.Println("step", s.Name, "stored in attempt", s.Attempt, string(s.Result))
	}
	// Output:
	// succeeded in attempt 2 "ch_42"
	// charged 1 time(s), mailed 1 time(s)
	// step charge stored in attempt 1 "ch_42"
	// step receipt stored in attempt 2 {"sent_for":"ch_42"}
}

// A durable sleep: a trial reminder waits after sign-up without holding
// an executor slot. The handler returns Sleep's error, the task waits
// (retrying, no attempt spent) and its handler runs again after the
// sleep, where the stored step is skipped and Sleep returns nil.
func ExampleJob_Sleep() {
	env, stop := startEnv()
	defer stop()
	ctx := context.Background()

	var runs, welcomes atomic.Int32
	env.Executor.HandleFunc("trial.remind", func(ctx context.Context, job *executor.Job) (any, error) {
		runs.Add(1)
		if _, err := job.Step(ctx, "welcome", func(ctx context.Context) (any, error) {
			welcomes.Add(1)
			return "welcome sent", nil
		}); err != nil {
			return nil, err
		}
		if err := job.Sleep(ctx, 200*time.Millisecond); err != nil { // days, in real life
			return nil, err
		}
		return "reminder sent", nil
	})

	spec, _ := task.New("trial.remind", nil)
	t, err := env.Run(ctx, spec)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, "in attempt", t.Attempt, string(t.Result))
	fmt.Println("handler ran", runs.Load(), "times, welcome sent", welcomes.Load(), "time(s)")
	for _, s := range t.Steps {
		fmt.Println(s.Name, "sleep:", s.IsSleep())
	}
	// Output:
	// succeeded in attempt 1 "reminder sent"
	// handler ran 2 times, welcome sent 1 time(s)
	// welcome sleep: false
	// ax:sleep:1 sleep: true
}
