package axtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/task"
)

type greeting struct {
	Text string `json:"text"`
}

func TestStartRunAndAssert(t *testing.T) {
	t.Parallel()
	env := axtest.Start(t, nil)
	executor.HandleTyped(env.Executor, "greet", func(_ context.Context, _ *executor.Job, name string) (any, error) {
		return greeting{Text: "hello " + name}, nil
	})
	got := env.RunTask(t, "greet", "gopher")
	axtest.RequireSucceeded(t, got)
	if g := axtest.Result[greeting](t, got); g.Text != "hello gopher" {
		t.Fatalf("result %+v", g)
	}

	// A second executor with its own capability.
	gpu, err := env.NewExecutor(executor.Config{Capabilities: []string{"gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	gpu.HandleFunc("render", func(context.Context, *executor.Job) (any, error) { return "frame", nil })
	if err := gpu.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	spec, _ := task.New("render", nil)
	spec.Capability = "gpu"
	rendered := env.RunSpec(t, spec)
	axtest.RequireSucceeded(t, rendered)
	if rendered.Executor != gpu.ID() {
		t.Fatalf("rendered by %s, want %s", rendered.Executor, gpu.ID())
	}
}

// The helpers fail the test with the task's state and errors; checked on a
// recording testing.TB.
func TestRequireStateReportsWhy(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	failed := &task.Task{Spec: task.Spec{ID: "x", Type: "t"}, State: task.Failed, Reason: "retries exhausted",
		Errors: []task.AttemptError{{Attempt: 1, Error: "boom"}}}
	func() {
		defer func() { _ = recover() }()
		axtest.RequireSucceeded(rec, failed)
	}()
	want := `axtest: task x (t) is failed, want succeeded; reason: "retries exhausted"; errors: [boom]`
	if rec.msg != want {
		t.Fatalf("message %q, want %q", rec.msg, want)
	}
}

// recorder records a Fatalf instead of failing the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}
