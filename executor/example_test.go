package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Email is the payload of email.send tasks.
type Email struct {
	To string `json:"to"`
}

// Kind names Email's task type.
func (Email) Kind() string { return "email.send" }

// A complete worker program (the package documentation's example; it
// needs a NATS server with AX's streams, so it is compiled, not run).
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect("nats://127.0.0.1:4222", nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	ex, err := executor.New(nc, executor.Config{Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	executor.HandleArgs(ex, func(ctx context.Context, job *executor.Job, e Email) (any, error) {
		if e.To == "" {
			return nil, executor.Permanent(errors.New("no recipient"))
		}
		return "sent to " + e.To, nil
	})
	if err := ex.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done() // SIGTERM

	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ex.Stop(drain); err != nil {
		log.Print(err) // some tasks were handed back to other executors
	}
}

// startEnv starts AX in the process, as a test would with axtest.Start.
func startEnv() (*axtest.Env, func()) {
	env, err := axtest.New(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	return env, func() { _ = env.Close(context.Background()) }
}

// A shardable type: the planner splits a range of days into one shard per
// day, each shard counts that day's orders, the aggregator adds them up.
func ExampleExecutor_HandleShards() {
	env, stop := startEnv()
	defer stop()
	ctx := context.Background()

	env.Executor.HandleShards("orders.count", executor.Sharded{
		Plan: func(_ context.Context, j *executor.Job) ([]executor.Shard, error) {
			var days int
			if err := json.Unmarshal(j.Payload, &days); err != nil {
				return nil, executor.Permanent(err)
			}
			shards := make([]executor.Shard, days)
			for d := range shards {
				shards[d].Payload = d
			}
			return shards, nil
		},
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			var day int
			_ = json.Unmarshal(j.Payload, &day)
			return 100 + day, nil // the day's order count
		},
		Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			total := 0
			for _, o := range s.Shards {
				var n int
				_ = json.Unmarshal(o.Result, &n)
				total += n
			}
			return total, nil
		},
	})

	spec, _ := task.New("orders.count", 7)
	spec.Shardable = true
	spec.MaxParallelShards = 3 // at most three days counted at once
	t, err := env.Run(ctx, spec)
	if err != nil {
		panic(err)
	}
	p, _ := env.Client.Shards(ctx, t.ID)
	fmt.Println(t.State, string(t.Result), p.Total, p.Ended[task.Succeeded])
	// Output: succeeded 721 7 7
}

// Resize is a payload type that names its task type (task.Args).
type Resize struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

// Kind returns the task type of Resize payloads.
func (Resize) Kind() string { return "image.resize" }

// A typed handler gets its payload decoded; sdk.SubmitArgs submits one
// under the same Kind. The compiler checks both sides.
func ExampleHandleArgs() {
	env, stop := startEnv()
	defer stop()
	ctx := context.Background()

	executor.HandleArgs(env.Executor, func(_ context.Context, _ *executor.Job, r Resize) (any, error) {
		return fmt.Sprintf("%s at %dpx", r.URL, r.Width), nil
	})

	id, err := sdk.SubmitArgs(ctx, env.Client, Resize{URL: "cat.png", Width: 640}, nil)
	if err != nil {
		panic(err)
	}
	t, _ := env.Client.Wait(ctx, id)
	fmt.Println(t.State, string(t.Result))
	// Output: succeeded "cat.png at 640px"
}

// HandleTyped decodes the payload into any type, for task types named
// elsewhere; a payload that does not decode fails the task at once.
func ExampleHandleTyped() {
	env, stop := startEnv()
	defer stop()
	ctx := context.Background()

	executor.HandleTyped(env.Executor, "sum", func(_ context.Context, _ *executor.Job, xs []int) (any, error) {
		total := 0
		for _, x := range xs {
			total += x
		}
		return total, nil
	})

	ok, _ := sdk.SubmitTyped(ctx, env.Client, "sum", []int{1, 2, 3}, nil)
	bad, _ := env.Client.Submit(ctx, mustSpec("sum", "one, two"))
	t1, _ := env.Client.Wait(ctx, ok)
	t2, _ := env.Client.Wait(ctx, bad)
	fmt.Println(t1.State, string(t1.Result))
	fmt.Println(t2.State, "after", t2.Attempt, "attempt")
	// Output:
	// succeeded 6
	// failed after 1 attempt
}

func mustSpec(taskType string, payload any) task.Spec {
	s, err := task.New(taskType, payload)
	if err != nil {
		panic(err)
	}
	return s
}

// Permanent fails a task at once, without using its retries: for errors
// that retrying cannot fix.
func ExamplePermanent() {
	env, stop := startEnv()
	defer stop()

	env.Executor.HandleFunc("card.charge", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.Permanent(errors.New("card expired"))
	})

	t, _ := env.Run(context.Background(), mustSpec("card.charge", nil))
	fmt.Println(t.State, "after attempt", t.Attempt)
	fmt.Println(t.Reason)
	// Output:
	// failed after attempt 1
	// attempt 1 failed permanently: card expired
}

// RetryAfter sets the delay before the next attempt, such as a rate
// limit's Retry-After; the attempt still counts against max_retries.
func ExampleRetryAfter() {
	env, stop := startEnv()
	defer stop()

	env.Executor.HandleFunc("api.call", func(_ context.Context, j *executor.Job) (any, error) {
		if j.Attempt == 1 {
			return nil, executor.RetryAfter(20*time.Millisecond, errors.New("429 too many requests"))
		}
		return "ok", nil
	})

	t, _ := env.Run(context.Background(), mustSpec("api.call", nil))
	fmt.Println(t.State, "in attempt", t.Attempt)
	fmt.Println(t.Errors[0].Error)
	// Output:
	// succeeded in attempt 2
	// 429 too many requests (retry after 20ms)
}

// Snooze runs the same attempt again later without counting a failure:
// for work that is not ready yet. A task may snooze task.MaxSnoozes times
// per attempt series.
func ExampleSnooze() {
	env, stop := startEnv()
	defer stop()

	var polls atomic.Int32
	env.Executor.HandleFunc("export.collect", func(context.Context, *executor.Job) (any, error) {
		if polls.Add(1) < 3 {
			return nil, executor.Snooze(10 * time.Millisecond) // the file is not there yet
		}
		return "collected", nil
	})

	t, _ := env.Run(context.Background(), mustSpec("export.collect", nil))
	fmt.Println(t.State, "in attempt", t.Attempt, "after", t.Snoozes, "snoozes,", len(t.Errors), "errors")
	// Output: succeeded in attempt 1 after 2 snoozes, 0 errors
}

// Cancel ends a task cancelled by its handler's decision; its dependents
// are cancelled and nothing is retried or dead-lettered.
func ExampleCancel() {
	env, stop := startEnv()
	defer stop()

	env.Executor.HandleFunc("order.ship", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.Cancel(errors.New("order withdrawn by the customer"))
	})

	t, _ := env.Run(context.Background(), mustSpec("order.ship", nil))
	fmt.Println(t.State)
	fmt.Println(t.Reason)
	// Output:
	// cancelled
	// cancelled by its handler in attempt 1: order withdrawn by the customer
}

// Graceful shutdown: Stop stops pulling, lets running handlers finish and
// report, and returns. If its context ends first, it cancels the
// handlers' contexts and hands their tasks back for another executor. A
// service calls it when signal.NotifyContext's context ends.
func ExampleExecutor_Stop() {
	env, stop := startEnv()
	defer stop()
	ctx := context.Background()

	ex, _ := env.NewExecutor(executor.Config{Capabilities: []string{"batch"}})
	started := make(chan struct{})
	ex.HandleFunc("nightly.report", func(ctx context.Context, _ *executor.Job) (any, error) {
		close(started)
		select {
		case <-time.After(50 * time.Millisecond): // the work
			return "report ready", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	if err := ex.Start(ctx); err != nil {
		panic(err)
	}
	spec := mustSpec("nightly.report", nil)
	spec.Capability = "batch"
	id, _ := env.Client.Submit(ctx, spec)
	<-started

	drain, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ex.Stop(drain); err != nil { // waits for the running report
		panic(err)
	}
	t, _ := env.Client.Wait(ctx, id)
	fmt.Println(t.State, string(t.Result))
	// Output: succeeded "report ready"
}
