package orchestrator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// heldVictim starts a stack whose "held" handler runs until release is
// closed, and returns its running task "victim".
func heldVictim(t *testing.T, cfg orchestrator.Config) (jetstream.JetStream, *sdk.Client, *task.Task, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	srv, ex, c := testenv.Stack(t, cfg, executor.Config{})
	ex.HandleFunc("held", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-release:
			return "real", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return "ok", nil })
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := c.Submit(ctx, newSpec("victim", "held")); err != nil {
		t.Fatal(err)
	}
	var running *task.Task
	testenv.Eventually(t, 30*time.Second, "victim running", func() bool {
		got, err := c.Get(ctx, "victim")
		running = got
		return err == nil && got.State == task.Running
	})
	return js, c, running, release
}

// forgeReport publishes a "succeeded" report of the victim's execution
// naming a type, with a token, on a subject.
func forgeReport(t *testing.T, js jetstream.JetStream, running *task.Task, subj, typ, token string) {
	t.Helper()
	if _, err := js.Publish(context.Background(), subj, forged(running, typ, token)); err != nil {
		t.Fatal(err)
	}
}

// forged is a "succeeded" report of the victim's execution naming a type,
// with a token.
func forged(running *task.Task, typ, token string) []byte {
	data, _ := json.Marshal(task.Report{ID: running.ID, Type: typ, ExecutionID: running.ExecutionID, Attempt: running.Attempt,
		Executor: "forger", StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(),
		Status: task.OutcomeSucceeded, Result: json.RawMessage(`"forged"`), Token: token})
	return data
}

// forgeDirect sends the same forged report as a direct report (a request
// on subj, an ax.direct subject): the orchestrator must answer it (no
// error: dropped, as a stored one is) without applying it.
func forgeDirect(t *testing.T, nc *nats.Conn, running *task.Task, subj, typ, token string) {
	t.Helper()
	m, err := nc.Request(subj, forged(running, typ, token), 30*time.Second)
	if err != nil {
		t.Fatalf("direct report on %s: %v", subj, err)
	}
	var rep task.DirectReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error != "" {
		t.Fatalf("direct report on %s answered %q (%v); want dropped", subj, m.Data, err)
	}
}

// settle runs a task to its end after the forged reports were stored: by
// then they were most likely handled (if one were applied later, the
// victim's result would be the forged one).
func settle(t *testing.T, c *sdk.Client, id string) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := c.Submit(ctx, newSpec(id, "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
		t.Fatalf("%s: %+v %v", id, got, err)
	}
}

// forgeriesIgnored checks that the victim still runs once the forged
// reports were handled, then releases its handler and checks that it ends
// with its own result.
func forgeriesIgnored(t *testing.T, c *sdk.Client, release chan struct{}) {
	t.Helper()
	settle(t, c, "marker")
	ctx := testenv.Context(t, 30*time.Second)
	if got, err := c.Get(ctx, "victim"); err != nil || got.State != task.Running {
		t.Fatalf("victim after forged reports: %+v %v; want still running", got, err)
	}
	close(release)
	got, err := c.Wait(ctx, "victim")
	if err != nil || got.State != task.Succeeded || string(got.Result) != `"real"` {
		t.Fatalf("victim: %+v %v; want succeeded with the real result", got, err)
	}
}

// An executor may report only an execution it was dispatched: a report
// without the dispatch's token, with another execution's, or with a made-up
// one is dropped, although it names the task's current execution id (which
// any reader of AX_TASKS can learn) on a subject its executors may publish.
func TestReportNeedsItsExecutionsToken(t *testing.T) {
	t.Parallel()
	js, c, running, release := heldVictim(t, orchestrator.Config{})
	nc := c.Conn()
	for _, tok := range []string{"", testenv.Token(t, nc, running.ID, "another-execution"),
		testenv.Token(t, nc, "another-task", running.ExecutionID), "AAAAAAAAAAAAAAAAAAAAAA", "not a token"} {
		forgeReport(t, js, running, subject.Completed(running.Type), running.Type, tok)
		forgeDirect(t, nc, running, subject.Direct(subject.Completed(running.Type)), running.Type, tok)
	}
	forgeriesIgnored(t, c, release)
}

// While executors are upgraded (Config.AcceptTokenless), a report without
// a token is applied; a wrong token is refused all the same.
func TestAcceptTokenless(t *testing.T) {
	t.Parallel()
	js, c, running, release := heldVictim(t, orchestrator.Config{AcceptTokenless: true})
	defer close(release)
	forgeReport(t, js, running, subject.Completed(running.Type), running.Type, "AAAAAAAAAAAAAAAAAAAAAA")
	settle(t, c, "marker")
	ctx := testenv.Context(t, 30*time.Second)
	if got, err := c.Get(ctx, "victim"); err != nil || got.State != task.Running {
		t.Fatalf("victim after a report with a wrong token: %+v %v; want still running", got, err)
	}
	forgeReport(t, js, running, subject.Completed(running.Type), running.Type, "")
	got, err := c.Wait(ctx, "victim")
	if err != nil || got.State != task.Succeeded || string(got.Result) != `"forged"` {
		t.Fatalf("victim: %+v %v; want the tokenless report applied", got, err)
	}
}
