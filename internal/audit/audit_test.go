package audit_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/retry"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// fixture runs AX with a mirror and a small workload: a chain long → mid →
// leaf where long sleeps (so mid and leaf wait), a flaky task, a failing one.
type fixture struct {
	db                   *sql.DB
	long, mid, leaf      string
	flaky, failing, noop string
	delayed, nobody      string
}

func setup(t *testing.T) fixture {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: retry.Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	_, db := mirrortest.DB(t)
	m, err := mirror.New(testenv.Conn(t, srv.URL()), db, mirror.Config{FetchWait: 100 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })

	c := testenv.Client(t, srv.URL())
	f := fixture{db: db, long: task.NewID(), mid: task.NewID(), leaf: task.NewID()}
	if _, err := c.SubmitGraph(ctx, []task.Spec{
		{ID: f.long, Type: demo.TypeSleep, Payload: json.RawMessage(`{"sleep":"60s"}`), Priority: 2},
		{ID: f.mid, Type: demo.TypeNoop, DependsOn: []string{f.long}, Priority: 2},
		{ID: f.leaf, Type: demo.TypeNoop, DependsOn: []string{f.mid, f.long}, Priority: 2},
	}); err != nil {
		t.Fatal(err)
	}
	// Cancel the sleeper before the executor stops, which would wait for it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = c.Cancel(ctx, f.long, "test over")
	})
	if f.flaky, err = c.Submit(ctx, task.Spec{Type: demo.TypeFlaky, Payload: json.RawMessage(`{"fail_times":2}`), Priority: 1, MaxRetries: 3}); err != nil {
		t.Fatal(err)
	}
	if f.failing, err = c.Submit(ctx, task.Spec{Type: demo.TypeFail, Priority: 1, MaxRetries: 1}); err != nil {
		t.Fatal(err)
	}
	if f.noop, err = c.Submit(ctx, task.Spec{Type: demo.TypeNoop, Priority: 1}); err != nil {
		t.Fatal(err)
	}
	if f.delayed, err = c.Submit(ctx, task.Spec{Type: demo.TypeNoop, Priority: 1, Delay: task.Duration(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if f.nobody, err = c.Submit(ctx, task.Spec{Type: demo.TypeNoop, Priority: 1, Capability: "nobody",
		DispatchTimeout: task.Duration(30 * time.Millisecond), MaxDispatches: 1}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{f.delayed: "waiting", f.nobody: "failed", f.long: "running", f.mid: "waiting", f.leaf: "waiting", f.flaky: "succeeded", f.failing: "failed", f.noop: "succeeded"}
	testenv.Eventually(t, 20*time.Second, "the workload to be mirrored", func() bool {
		for id, state := range want {
			var got string
			if err := db.QueryRowContext(ctx, "SELECT state FROM ax_tasks WHERE id = ?", id).Scan(&got); err != nil || got != state {
				return false
			}
		}
		return true
	})
	return f
}

func TestAudit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := testenv.Context(t, 20*time.Second)
	later := func() time.Time { return time.Now().Add(time.Hour) }
	a := audit.New(f.db, later)

	t.Run("timeline", func(t *testing.T) {
		tl, err := a.Timeline(ctx, f.flaky)
		if err != nil {
			t.Fatal(err)
		}
		var path []string
		for _, e := range tl.Events {
			path = append(path, e.To)
		}
		want := "ready running retrying ready running retrying ready running succeeded"
		if strings.Join(path, " ") != want {
			t.Fatalf("path %v, want %s", path, want)
		}
		if tl.Task == nil || tl.Task.State != "succeeded" || tl.Task.Attempt != 3 || len(tl.Attempts) != 3 {
			t.Fatalf("timeline %+v", tl)
		}
		for i, at := range tl.Attempts {
			wantOutcome := "failed"
			if i == 2 {
				wantOutcome = "succeeded"
			}
			if at.Attempt != i+1 || at.Outcome != wantOutcome || at.FinishedAt == nil || at.Executor == "" {
				t.Fatalf("attempt %d: %+v", i, at)
			}
		}
		if _, err := a.Timeline(ctx, "no-such-task"); !errors.Is(err, audit.ErrNotFound) {
			t.Fatalf("unknown task: %v", err)
		}
	})

	t.Run("waiting", func(t *testing.T) {
		r, err := a.Waiting(ctx, f.leaf)
		if err != nil {
			t.Fatal(err)
		}
		if r.Pending != 2 || len(r.Blockers) != 2 || !strings.Contains(r.Explanation, "2 of 2 dependencies") {
			t.Fatalf("report %+v", r)
		}
		states := map[string]string{}
		for _, b := range r.Blockers {
			states[b.ID] = b.State
		}
		if states[f.mid] != "waiting" || states[f.long] != "running" {
			t.Fatalf("blockers %+v", r.Blockers)
		}
		r, err = a.Waiting(ctx, f.mid)
		if err != nil || r.Pending != 1 || r.Blockers[0].ID != f.long {
			t.Fatalf("mid: %+v, %v", r, err)
		}
		r, err = a.Waiting(ctx, f.long)
		if err != nil || !strings.Contains(r.Explanation, "running on executor") {
			t.Fatalf("long: %+v, %v", r, err)
		}
		r, err = a.Waiting(ctx, f.delayed)
		if err != nil || !strings.Contains(r.Explanation, "delayed") || len(r.Blockers) != 0 {
			t.Fatalf("delayed: %+v, %v", r, err)
		}
		r, err = a.Waiting(ctx, f.failing)
		if err != nil || !strings.Contains(r.Explanation, "not waiting: failed") {
			t.Fatalf("failing: %+v, %v", r, err)
		}
	})

	t.Run("failures", func(t *testing.T) {
		gs, err := a.Failures(ctx, audit.FailureQuery{Since: time.Now().Add(-time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[string]audit.FailureGroup{}
		for _, g := range gs {
			byKey[g.Type+"|"+g.Error] = g
		}
		if g := byKey[demo.TypeFail+"|simulated downstream outage: connection refused"]; g.Failures != 2 || g.Tasks != 1 || g.SampleTaskID != f.failing {
			t.Fatalf("fail group %+v in %+v", g, gs)
		}
		if g := byKey[demo.TypeFlaky+"|simulated failure 1 of 2"]; g.Failures != 1 {
			t.Fatalf("flaky group %+v in %+v", g, gs)
		}
		var nobody bool
		for _, g := range gs {
			nobody = nobody || (g.SampleTaskID == f.nobody && strings.Contains(g.Error, `no executor took capability "nobody"`))
		}
		if !nobody {
			t.Fatalf("the task nobody started is not among the failures: %+v", gs)
		}
		gs, err = a.Failures(ctx, audit.FailureQuery{Since: time.Now().Add(-time.Hour), Type: demo.TypeFlaky})
		if err != nil || len(gs) != 2 {
			t.Fatalf("flaky only: %+v, %v", gs, err)
		}
		gs, err = a.Failures(ctx, audit.FailureQuery{Since: time.Now().Add(time.Minute), Until: time.Now().Add(time.Hour)})
		if err != nil || len(gs) != 0 {
			t.Fatalf("empty range: %+v, %v", gs, err)
		}
	})

	t.Run("stuck", func(t *testing.T) {
		st, err := a.Stuck(ctx, audit.StuckQuery{State: "running", OlderThan: 10 * time.Minute})
		if err != nil || len(st) != 1 || st[0].ID != f.long || st[0].For < 50*time.Minute {
			t.Fatalf("running: %+v, %v", st, err)
		}
		st, err = a.Stuck(ctx, audit.StuckQuery{OlderThan: 10 * time.Minute})
		if err != nil || len(st) != 4 { // long, mid, leaf, delayed
			t.Fatalf("any state: %+v, %v", st, err)
		}
		st, err = a.Stuck(ctx, audit.StuckQuery{State: "waiting", OlderThan: 2 * time.Hour})
		if err != nil || len(st) != 0 {
			t.Fatalf("older than the tasks: %+v, %v", st, err)
		}
	})

	t.Run("retries", func(t *testing.T) {
		rs, err := a.Retries(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]audit.RetryStats{}
		for _, r := range rs {
			by[r.Type] = r
		}
		if r := by[demo.TypeFlaky]; r.Attempts != 3 || r.Retries != 2 || r.FailedAttempts != 2 || r.DeadLettered != 0 {
			t.Fatalf("flaky %+v", r)
		}
		if r := by[demo.TypeFail]; r.Attempts != 2 || r.Retries != 1 || r.FailedAttempts != 2 || r.DeadLettered != 1 || r.InDLQ != 1 {
			t.Fatalf("fail %+v", r)
		}
		if r := by[demo.TypeNoop]; r.Attempts != 1 || r.Retries != 0 || r.DeadLettered != 1 || r.InDLQ != 1 {
			t.Fatalf("noop %+v", r)
		}
	})
}
