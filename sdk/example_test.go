package sdk_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// startAX runs an embedded server, an orchestrator and an executor with an
// "email.send" handler, the way a test or a demo would.
func startAX() (url string, stop func()) {
	dir, _ := os.MkdirTemp("", "ax-example-")
	srv, err := natsserver.Start(natsserver.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	onc, _ := nats.Connect(srv.URL())
	orch, _ := orchestrator.New(onc, orchestrator.Config{})
	_ = orch.Start(context.Background())
	enc, _ := nats.Connect(srv.URL())
	ex, _ := executor.New(enc, executor.Config{})
	ex.HandleFunc("email.send", func(ctx context.Context, j *executor.Job) (any, error) {
		return map[string]string{"status": "sent"}, nil
	})
	_ = ex.Start(context.Background())
	return srv.URL(), func() {
		_ = ex.Stop(context.Background())
		_ = orch.Stop(context.Background())
		enc.Close()
		onc.Close()
		srv.Stop()
		os.RemoveAll(dir)
	}
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
