package axtest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ax-run/ax/task"
)

// Start is New for a test: it fails the test if AX cannot start and closes
// the environment when the test (and its subtests) end.
func Start(t testing.TB, opts *Options) *Env {
	t.Helper()
	env, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("axtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), env.timeout)
		defer cancel()
		if err := env.Close(ctx); err != nil {
			t.Errorf("axtest: close: %v", err)
		}
	})
	return env
}

// RunTask submits a task of taskType with payload (encoded as JSON, see
// task.New) and defaults for everything else, waits until it ends and
// returns its final record. It fails the test if the task cannot be
// submitted or does not end within Options.Timeout.
func (e *Env) RunTask(t testing.TB, taskType string, payload any) *task.Task {
	t.Helper()
	spec, err := task.New(taskType, payload)
	if err != nil {
		t.Fatalf("axtest: %v", err)
	}
	return e.RunSpec(t, spec)
}

// RunSpec submits spec, waits until the task ends and returns its final
// record, failing the test as RunTask does.
func (e *Env) RunSpec(t testing.TB, spec task.Spec) *task.Task {
	t.Helper()
	id, err := e.Client.Submit(context.Background(), spec)
	if err != nil {
		t.Fatalf("axtest: submit %s task: %v", spec.Type, err)
	}
	return e.WaitTask(t, id)
}

// WaitTask waits until task id ends and returns its final record. It
// fails the test, saying where the task is stuck, if it does not end within
// Options.Timeout.
func (e *Env) WaitTask(t testing.TB, id string) *task.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	got, err := e.Client.Wait(ctx, id)
	if err == nil {
		return got
	}
	if cur, gerr := e.Client.Get(context.Background(), id); gerr == nil {
		t.Fatalf("axtest: task %s did not end within %s: it is %s (%s): %v", id, e.timeout, cur.State, cur.Reason, err)
	}
	t.Fatalf("axtest: wait for task %s: %v", id, err)
	return nil
}

// RequireState fails the test unless got is in state want, naming the
// state it is in, why, and its attempts' errors.
func RequireState(t testing.TB, got *task.Task, want task.State) {
	t.Helper()
	if got == nil {
		t.Fatalf("axtest: task is nil, want %s", want)
	}
	if got.State != want {
		t.Fatalf("axtest: task %s (%s) is %s, want %s; reason: %q; errors: %v", got.ID, got.Type, got.State, want, got.Reason, attemptErrors(got))
	}
}

// RequireSucceeded fails the test unless got succeeded.
func RequireSucceeded(t testing.TB, got *task.Task) {
	t.Helper()
	RequireState(t, got, task.Succeeded)
}

// Result decodes a task's result (JSON) into a T, failing the test if it
// does not decode. A result too large to keep inline (over
// task.InlineResultLimit) is read with sdk.Client.Result instead.
func Result[T any](t testing.TB, got *task.Task) T {
	t.Helper()
	var v T
	if got == nil {
		t.Fatalf("axtest: task is nil")
	}
	if err := json.Unmarshal(got.Result, &v); err != nil {
		t.Fatalf("axtest: decode result of task %s (%s) into %T: %v", got.ID, got.Result, v, err)
	}
	return v
}

func attemptErrors(t *task.Task) []string {
	out := make([]string, 0, len(t.Errors))
	for _, e := range t.Errors {
		out = append(out, e.Error)
	}
	return out
}
