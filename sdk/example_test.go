package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// startAX runs AX in the process (axtest) with an "email.send" handler and
// returns its URL, as a test or a demo would; a producer connects to it
// like to any NATS server.
func startAX() (url string, stop func()) {
	env, err := axtest.New(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	env.Executor.HandleFunc("email.send", func(ctx context.Context, j *executor.Job) (any, error) {
		return map[string]string{"status": "sent"}, nil
	})
	return env.URL, func() { _ = env.Close(context.Background()) }
}

// The package documentation's program: it needs a NATS server with AX
// running, so it is compiled, not run.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.Connect(ctx, "nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	spec, err := task.New("email.send", map[string]string{"to": "a@example.com"})
	if err != nil {
		log.Fatal(err)
	}
	id, err := c.Submit(ctx, spec) // durable once it returns
	if err != nil {
		log.Fatal(err)
	}
	t, err := c.Wait(ctx, id) // succeeded, failed, cancelled or expired
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.State, string(t.Result))
}

func ExampleClient_Submit() {
	url, stop := startAX()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := sdk.Connect(ctx, url)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	spec, _ := task.New("email.send", map[string]string{"to": "ops@example.com"})
	spec.ID = "welcome-mail-42" // optional: a stable id makes retries of Submit idempotent
	id, err := c.Submit(ctx, spec)
	if err != nil {
		panic(err)
	}
	t, err := c.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, string(t.Result))
	// Output: succeeded {"status":"sent"}
}

func ExampleClient_SubmitGraph() {
	url, stop := startAX()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _ := sdk.Connect(ctx, url)
	defer c.Close()

	a, _ := task.New("email.send", nil)
	b, _ := task.New("email.send", nil)
	a.ID, b.ID = "draft", "send"
	b.DependsOn = []string{"draft"} // send runs once draft succeeded
	if _, err := c.SubmitGraph(ctx, []task.Spec{a, b}); err != nil {
		panic(err)
	}
	t, _ := c.Wait(ctx, "send")
	fmt.Println(t.ID, t.State)
	// Output: send succeeded
}

// Wait blocks until a task ends (succeeded, failed, cancelled or
// expired), riding out NATS outages, until its context ends.
func ExampleClient_Wait() {
	url, stop := startAX()
	defer stop()
	ctx := context.Background()
	c, _ := sdk.Connect(ctx, url)
	defer c.Close()

	spec, _ := task.New("email.send", nil)
	id, _ := c.Submit(ctx, spec)

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second) // how long to wait
	defer cancel()
	t, err := c.Wait(wctx, id)
	var rej *sdk.RejectedError
	switch {
	case errors.As(err, &rej):
		fmt.Println("refused:", rej.Rejection.Reason)
	case err != nil:
		fmt.Println("still running:", err)
	default:
		fmt.Println(t.State, "in attempt", t.Attempt, string(t.Result))
	}
	// Output: succeeded in attempt 1 {"status":"sent"}
}

// A producer whose NATS user may submit only "email.>" tasks reads their
// state through an orchestrator, naming the type: under another type the
// task is not found.
func ExampleClient_WaitState() {
	url, stop := startAX()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _ := sdk.Connect(ctx, url)
	defer c.Close()

	spec, _ := task.New("email.send", nil)
	id, _ := c.Submit(ctx, spec)
	t, err := c.WaitState(ctx, "email.send", id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.State, string(t.Result))
	_, err = c.State(ctx, "pdf.render", id)
	fmt.Println(errors.Is(err, sdk.ErrNotFound))
	// Output:
	// succeeded {"status":"sent"}
	// true
}

// Cancel stops a task wherever it is; a running handler has its context
// cancelled.
func ExampleClient_Cancel() {
	env, err := axtest.New(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	defer env.Close(context.Background())
	ctx := context.Background()

	started := make(chan struct{})
	env.Executor.HandleFunc("video.encode", func(ctx context.Context, _ *executor.Job) (any, error) {
		close(started)
		<-ctx.Done() // a long encode, until cancelled
		return nil, ctx.Err()
	})
	spec, _ := task.New("video.encode", nil)
	id, _ := env.Client.Submit(ctx, spec)
	<-started

	t, err := env.Client.Cancel(ctx, id, "uploaded by mistake")
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, "-", t.Reason)
	// Output: cancelled - uploaded by mistake
}

// A dead-lettered task is run again with Redrive: a fresh attempt series.
func ExampleClient_Redrive() {
	env, err := axtest.New(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	defer env.Close(context.Background())
	ctx := context.Background()

	var fixed atomic.Bool // the bug that made it fail
	env.Executor.HandleFunc("invoice.render", func(context.Context, *executor.Job) (any, error) {
		if !fixed.Load() {
			return nil, executor.Permanent(errors.New("template missing"))
		}
		return "rendered", nil
	})
	spec, _ := task.New("invoice.render", nil)
	t, _ := env.Run(ctx, spec)
	fmt.Println(t.State, "-", t.Reason)

	fixed.Store(true) // deploy the fix, then re-drive
	if _, err := env.Client.Redrive(ctx, t.ID); err != nil {
		panic(err)
	}
	t, _ = env.Client.Wait(ctx, t.ID)
	fmt.Println(t.State, "after", t.Redrives, "re-drive")
	// Output:
	// failed - attempt 1 failed permanently: template missing
	// succeeded after 1 re-drive
}

// A schedule creates a task from its template at every cron slot;
// TriggerSchedule fires it once by hand.
func ExampleClient_CreateSchedule() {
	url, stop := startAX()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _ := sdk.Connect(ctx, url)
	defer c.Close()

	tmpl, _ := task.New("email.send", map[string]string{"to": "team@example.com"})
	s, err := c.CreateSchedule(ctx, task.Schedule{
		Name:     "weekly-digest",
		Cron:     "0 8 * * MON", // Mondays at 08:00
		TimeZone: "Europe/Berlin",
		Template: tmpl,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Name, s.NextFire.Weekday())

	id, _ := c.TriggerSchedule(ctx, "weekly-digest", time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	t, _ := c.Wait(ctx, id)
	fmt.Println(t.ID, t.State)
	// Output:
	// weekly-digest Monday
	// weekly-digest-manual-20261130T080000Z succeeded
}

// Pause holds a task type's new tasks and retries (visibly: waiting,
// "held: …") until Resume, durably across restarts.
func ExampleClient_Pause() {
	url, stop := startAX()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _ := sdk.Connect(ctx, url)
	defer c.Close()

	if err := c.Pause(ctx, "email.send", false, "mail provider maintenance"); err != nil {
		panic(err)
	}
	g, _ := c.Gates(ctx)
	fmt.Println("paused:", g.Pauses["email.send"].Reason)

	spec, _ := task.New("email.send", nil)
	id, _ := c.Submit(ctx, spec) // held while paused
	if err := c.Resume(ctx, "email.send", "maintenance over"); err != nil {
		panic(err)
	}
	t, _ := c.Wait(ctx, id)
	fmt.Println(t.State)
	// Output:
	// paused: mail provider maintenance
	// succeeded
}

// Digest is a payload type that names its task type.
type Digest struct {
	Team string `json:"team"`
}

// Kind returns the task type of Digest payloads.
func (Digest) Kind() string { return "digest.build" }

// SubmitArgs submits a typed payload under its Kind; opts sets the rest
// of the spec.
func ExampleSubmitArgs() {
	env, err := axtest.New(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	defer env.Close(context.Background())
	ctx := context.Background()
	executor.HandleArgs(env.Executor, func(_ context.Context, _ *executor.Job, d Digest) (any, error) {
		return "digest for " + d.Team, nil
	})

	opts, _ := task.New("", nil) // defaults for everything else
	opts.ID, opts.Timeout = "digest-platform", task.Duration(time.Minute)
	id, err := sdk.SubmitArgs(ctx, env.Client, Digest{Team: "platform"}, &opts)
	if err != nil {
		panic(err)
	}
	t, _ := env.Client.Wait(ctx, id)
	fmt.Println(t.ID, t.Type, t.Timeout.Std(), string(t.Result))
	// Output: digest-platform digest.build 1m0s "digest for platform"
}
