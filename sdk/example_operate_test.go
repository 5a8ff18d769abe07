package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// List pages through tasks, newest change first, filtered by state, type,
// capability and last change.
func ExampleClient_List() {
	env, err := axtest.New(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	defer env.Close(context.Background())
	ctx := context.Background()
	env.Executor.HandleFunc("report.build", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	for _, id := range []string{"report-1", "report-2", "report-3"} {
		_, _ = env.Client.Submit(ctx, task.Spec{ID: id, Type: "report.build"})
		_, _ = env.Client.Wait(ctx, id)
	}
	f := sdk.ListFilter{State: task.Succeeded, Type: "report.build", Since: time.Now().Add(-time.Hour), Limit: 2}
	for {
		page, err := env.Client.List(ctx, f)
		if err != nil {
			panic(err)
		}
		for _, t := range page.Tasks {
			fmt.Println(t.ID, t.State)
		}
		if page.Next == "" {
			break
		}
		f.Cursor = page.Next
	}
	// Output:
	// report-3 succeeded
	// report-2 succeeded
	// report-1 succeeded
}

// Workers lists the executors running now, idle ones too, with what they
// serve; DiscardDeadLetter removes a dead letter for good (audited).
func ExampleClient_Workers() {
	env, err := axtest.New(context.Background(), &axtest.Options{Executor: executorConfig("billing")})
	if err != nil {
		panic(err)
	}
	defer env.Close(context.Background())
	ctx := context.Background()
	env.Executor.HandleFunc("invoice.send", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.Permanent(errors.New("no such customer"))
	})
	for {
		ws, err := env.Client.Workers(ctx)
		if err == nil && len(ws) == 1 && len(ws[0].Types) == 1 {
			fmt.Println(ws[0].ID, ws[0].Capabilities, ws[0].Types, ws[0].Capacity)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, _ = env.Client.Submit(ctx, task.Spec{ID: "invoice-7", Type: "invoice.send", Capability: "billing"})
	_, _ = env.Client.Wait(ctx, "invoice-7")
	for {
		if err := env.Client.DiscardDeadLetter(ctx, "invoice-7", "customer deleted"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // the dead letter follows the task's end
	}
	dls, _ := env.Client.DeadLetters(ctx)
	fmt.Println(len(dls), "dead letters left")
	// Output:
	// billing-1 [billing] [invoice.send] 16
	// 0 dead letters left
}

func executorConfig(capability string) executor.Config {
	return executor.Config{ID: capability + "-1", Capabilities: []string{capability}}
}
