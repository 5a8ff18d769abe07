package cli

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestRedriveCommandWithDependents runs the top-level `ax redrive` with
// --with-dependents: an upstream fails for good and its dependent is
// cancelled; once the fault is fixed, the re-drive runs the upstream again
// and re-opens the dependent under its id, which then succeeds.
func TestRedriveCommandWithDependents(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	var broken atomic.Bool
	broken.Store(true)
	ex.HandleFunc("cli.fixable", func(context.Context, *executor.Job) (any, error) {
		if broken.Load() {
			return nil, errors.New("upstream service down")
		}
		return "fixed", nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	ax := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(ctx, append(args, "--nats", srv.URL())...)
		if code != 0 {
			t.Fatalf("ax %s: exit %d: %s%s", strings.Join(args, " "), code, errOut, out)
		}
		return out
	}

	if _, err := c.SubmitGraph(ctx, []task.Spec{
		{ID: "rd-up", Type: "cli.fixable", MaxRetries: new(0)},
		{ID: "rd-down", Type: demo.TypeNoop, DependsOn: []string{"rd-up"}},
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "rd-up failed and rd-down cancelled", func() bool {
		up, err1 := c.Get(ctx, "rd-up")
		down, err2 := c.Get(ctx, "rd-down")
		return err1 == nil && err2 == nil && up.State == task.Failed && down.State == task.Cancelled
	})

	broken.Store(false)
	if out := ax("redrive", "rd-up", "--with-dependents", "--reason", "service fixed", "--by", "cli-test"); !strings.HasPrefix(out, "rd-up\t") {
		t.Fatalf("ax redrive: %q", out)
	}
	testenv.Eventually(t, time.Minute, "rd-up and rd-down succeeded", func() bool {
		up, err1 := c.Get(ctx, "rd-up")
		down, err2 := c.Get(ctx, "rd-down")
		return err1 == nil && err2 == nil && up.State == task.Succeeded && down.State == task.Succeeded
	})
	if out := ax("status", "rd-down"); !strings.Contains(out, "cli-test") {
		t.Errorf("the re-opened dependent's history does not say who re-drove it:\n%s", out)
	}
	// A task that is not dead-lettered cannot be re-driven.
	if code, _, _ := runCLI(ctx, "redrive", "rd-down", "--nats", srv.URL()); code == 0 {
		t.Error("ax redrive of a succeeded task exited 0")
	}
}
