package audit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestAuditDAG: the audit answers "why" for the tasks of a DAG — the
// upstream whose failure cancelled a task (and how to re-open it), the
// task a duplicate submission duplicated, and, for a waiting task with
// the trigger rule all_ended, only the upstreams that have not ended hold
// it (transitively too).
func TestAuditDAG(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	_, db := mirrortest.DB(t)
	m, err := mirror.New(testenv.Conn(t, srv.URL()), db, mirror.Config{FetchWait: 100 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 60*time.Second)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	c := testenv.Client(t, srv.URL())

	ids := map[string]string{}
	for _, n := range []string{"long", "broken", "dep", "ended", "chain", "holder", "dup"} {
		ids[n] = task.NewID()
	}
	unique := func(id string) task.Spec {
		return task.Spec{ID: id, Type: demo.TypeNoop, UniqueKey: "report/customer-42", UniqueWindow: task.Duration(time.Hour)}
	}
	if _, err := c.SubmitGraph(ctx, []task.Spec{
		{ID: ids["long"], Type: demo.TypeSleep, Payload: json.RawMessage(`{"sleep":"60s"}`)},
		{ID: ids["broken"], Type: demo.TypeFail, MaxRetries: new(0)},
		{ID: ids["dep"], Type: demo.TypeNoop, DependsOn: []string{ids["broken"]}},
		{ID: ids["ended"], Type: demo.TypeNoop, DependsOn: []string{ids["broken"], ids["long"]}, TriggerRule: task.TriggerAllEnded},
		{ID: ids["chain"], Type: demo.TypeNoop, DependsOn: []string{ids["ended"]}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = c.Cancel(ctx, ids["long"], "test over")
	})
	if _, err := c.Submit(ctx, unique(ids["holder"])); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, ids["holder"]); err != nil || got.State != task.Succeeded {
		t.Fatalf("holder: %+v, %v", got, err)
	}
	if _, err := c.Submit(ctx, unique(ids["dup"])); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"long": "running", "broken": "failed", "dep": "cancelled", "ended": "waiting", "chain": "waiting",
		"holder": "succeeded", "dup": "cancelled"}
	testenv.Eventually(t, 30*time.Second, "the DAG to be mirrored", func() bool {
		for n, state := range want {
			var got string
			if err := db.QueryRowContext(ctx, "SELECT state FROM ax_tasks WHERE id = ?", ids[n]).Scan(&got); err != nil || got != state {
				return false
			}
		}
		return true
	})
	a := audit.New(db, nil)

	tl, err := a.Timeline(ctx, ids["dep"])
	if err != nil {
		t.Fatal(err)
	}
	if tl.Task.CancelledBy != ids["broken"] || tl.Task.TriggerRule != "all_succeeded" || tl.Task.DuplicateOf != "" {
		t.Fatalf("dep: %+v", tl.Task)
	}
	r, err := a.Waiting(ctx, ids["dep"])
	if err != nil || !strings.Contains(r.Explanation, "cancelled by the end of upstream "+ids["broken"]) ||
		!strings.Contains(r.Explanation, "ax redrive "+ids["broken"]+" --with-dependents") {
		t.Fatalf("dep: %+v, %v", r, err)
	}

	tl, err = a.Timeline(ctx, ids["dup"])
	if err != nil {
		t.Fatal(err)
	}
	if tl.Task.DuplicateOf != ids["holder"] || tl.Task.UniqueKey != "report/customer-42" || len(tl.Attempts) != 0 || tl.Task.TriggerRule != "" {
		t.Fatalf("dup: %+v, attempts %+v", tl.Task, tl.Attempts)
	}
	if r, err := a.Waiting(ctx, ids["dup"]); err != nil || !strings.Contains(r.Explanation, "a duplicate of "+ids["holder"]) ||
		!strings.Contains(r.Explanation, `"report/customer-42"`) {
		t.Fatalf("dup: %+v, %v", r, err)
	}
	if tl, err := a.Timeline(ctx, ids["holder"]); err != nil || tl.Task.UniqueKey != "report/customer-42" || tl.Task.DuplicateOf != "" {
		t.Fatalf("holder: %+v, %v", tl.Task, err)
	}

	// all_ended: the failed upstream has ended and holds nothing.
	r, err = a.Waiting(ctx, ids["ended"])
	if err != nil || r.Task.TriggerRule != "all_ended" || r.Pending != 1 || len(r.Blockers) != 1 || r.Blockers[0].ID != ids["long"] ||
		!strings.Contains(r.Explanation, "1 of 2 dependencies to end (trigger rule all_ended)") {
		t.Fatalf("ended: %+v, %v", r, err)
	}
	// Transitively: chain waits for ended, which waits for long only.
	r, err = a.Waiting(ctx, ids["chain"])
	if err != nil || r.Pending != 1 || len(r.Blockers) != 2 || r.Blockers[0].ID != ids["ended"] || r.Blockers[1].ID != ids["long"] ||
		r.Blockers[1].Depth != 2 || !strings.Contains(r.Explanation, "1 of 1 dependencies") {
		t.Fatalf("chain: %+v, %v", r, err)
	}
}
