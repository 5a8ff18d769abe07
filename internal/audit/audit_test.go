package audit_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// fixture runs AX with a mirror and a small workload: a chain long → mid →
// leaf where long sleeps (so mid and leaf wait), a flaky task, a failing
// one, and a sharded job some of whose shards fail.
type fixture struct {
	db                   *sql.DB
	long, mid, leaf      string
	flaky, failing, noop string
	delayed, nobody      string
	sharded              string
}

// The fixture's sharded job: splitShards shards, of which the broken ones
// fail for good and shard 2 fails once, then succeeds on its retry.
const (
	typeSplit   = "audit.split"
	splitShards = 12
)

// brokenShard says whether a shard of the sharded job fails for good.
// Shard 10 sorts before 4 as a string: the listing must order numerically.
func brokenShard(i int) bool { return i == 4 || i == 9 || i == 10 }

func setup(t *testing.T) fixture {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	ex.HandleShards(typeSplit, executor.Sharded{
		Plan: func(context.Context, *executor.Job) ([]executor.Shard, error) {
			return make([]executor.Shard, splitShards), nil
		},
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			switch {
			case brokenShard(j.ShardIndex):
				return nil, executor.Permanent(fmt.Errorf("shard %d broken", j.ShardIndex))
			case j.ShardIndex == 2 && j.Attempt == 1:
				return nil, errors.New("shard 2 hiccup")
			}
			return j.ShardIndex, nil
		},
		Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			return map[string]int{"succeeded": s.Succeeded, "failed": len(s.Failed())}, nil
		},
	})
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
		{ID: f.long, Type: demo.TypeSleep, Payload: json.RawMessage(`{"sleep":"60s"}`), Priority: new(2)},
		{ID: f.mid, Type: demo.TypeNoop, DependsOn: []string{f.long}, Priority: new(2)},
		{ID: f.leaf, Type: demo.TypeNoop, DependsOn: []string{f.mid, f.long}, Priority: new(2)},
	}); err != nil {
		t.Fatal(err)
	}
	// Cancel the sleeper before the executor stops, which would wait for it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = c.Cancel(ctx, f.long, "test over")
	})
	if f.flaky, err = c.Submit(ctx, task.Spec{Type: demo.TypeFlaky, Payload: json.RawMessage(`{"fail_times":2}`), Priority: new(1), MaxRetries: new(3)}); err != nil {
		t.Fatal(err)
	}
	if f.failing, err = c.Submit(ctx, task.Spec{Type: demo.TypeFail, Priority: new(1), MaxRetries: new(1)}); err != nil {
		t.Fatal(err)
	}
	if f.noop, err = c.Submit(ctx, task.Spec{Type: demo.TypeNoop, Priority: new(1)}); err != nil {
		t.Fatal(err)
	}
	if f.delayed, err = c.Submit(ctx, task.Spec{Type: demo.TypeNoop, Priority: new(1), Delay: task.Duration(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if f.nobody, err = c.Submit(ctx, task.Spec{Type: demo.TypeNoop, Priority: new(1), Capability: "nobody",
		DispatchTimeout: task.Duration(30 * time.Millisecond), MaxDispatches: 1}); err != nil {
		t.Fatal(err)
	}
	// Enough shards succeed (9 of 12) for min_shard_success 0.5: the job
	// aggregates and succeeds despite its failed shards.
	f.sharded = task.NewID()
	if _, err = c.Submit(ctx, task.Spec{ID: f.sharded, Type: typeSplit, Priority: new(1), MaxRetries: new(1),
		Shardable: true, MinShardSuccess: 0.5}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{f.delayed: "waiting", f.nobody: "failed", f.long: "running", f.mid: "waiting", f.leaf: "waiting", f.flaky: "succeeded", f.failing: "failed", f.noop: "succeeded",
		f.sharded: "succeeded"}
	for i := range splitShards {
		want[task.ShardID(f.sharded, i)] = "succeeded"
		if brokenShard(i) {
			want[task.ShardID(f.sharded, i)] = "failed"
		}
	}
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
		want := "ready retrying ready retrying ready succeeded" // short attempts: never marked running
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

	t.Run("shards", func(t *testing.T) {
		tl, err := a.Timeline(ctx, f.sharded)
		if err != nil {
			t.Fatal(err)
		}
		if tl.Task == nil || tl.Task.IsShard() || tl.Task.State != "succeeded" ||
			len(tl.Shards) != 2 || tl.Shards["succeeded"] != 9 || tl.Shards["failed"] != 3 {
			t.Fatalf("parent timeline: task %+v, shards %v", tl.Task, tl.Shards)
		}
		var kinds []string
		for _, e := range tl.Events {
			kinds = append(kinds, e.Kind)
		}
		if !slices.Contains(kinds, string(task.KindShardsRegistered)) {
			t.Fatalf("parent events lack %s: %v", task.KindShardsRegistered, kinds)
		}
		for _, n := range []int{0, 2, 10} {
			id := task.ShardID(f.sharded, n)
			tl, err := a.Timeline(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if tl.Task == nil || tl.Task.ParentID != f.sharded || tl.Task.ShardIndex != n || tl.Shards != nil {
				t.Fatalf("shard %d timeline: task %+v, shards %v", n, tl.Task, tl.Shards)
			}
			if n == 2 && (len(tl.Attempts) != 2 || tl.Attempts[0].Error != "shard 2 hiccup" || tl.Attempts[1].Outcome != "succeeded") {
				t.Fatalf("shard 2 attempts %+v", tl.Attempts)
			}
		}
		tl, err = a.Timeline(ctx, f.noop)
		if err != nil || tl.Shards != nil || tl.Task.IsShard() {
			t.Fatalf("plain task timeline: shards %v, task %+v, %v", tl.Shards, tl.Task, err)
		}

		r, err := a.Shards(ctx, f.sharded, 0)
		if err != nil {
			t.Fatal(err)
		}
		var idx []int
		for _, s := range r.Failed {
			if s.ID != task.ShardID(f.sharded, s.Index) || s.State != "failed" || s.Attempt != 1 ||
				s.LastError != fmt.Sprintf("shard %d broken", s.Index) || s.FinishedAt == nil {
				t.Fatalf("failed shard %+v", s)
			}
			idx = append(idx, s.Index)
		}
		if r.Task == nil || r.Task.ID != f.sharded || r.Total != splitShards || r.FailedTotal() != 3 || !slices.Equal(idx, []int{4, 9, 10}) {
			t.Fatalf("report %+v (failed shards %v)", r, idx)
		}
		r, err = a.Shards(ctx, f.sharded, 2)
		if err != nil || len(r.Failed) != 2 || r.Failed[1].Index != 9 || r.FailedTotal() != 3 {
			t.Fatalf("limit 2: %+v, %v", r, err)
		}
		r, err = a.Shards(ctx, f.noop, 0)
		if err != nil || r.Task == nil || r.Total != 0 || len(r.Failed) != 0 {
			t.Fatalf("plain task: %+v, %v", r, err)
		}
		if _, err := a.Shards(ctx, task.ShardID(f.sharded, 4), 0); err == nil || !strings.Contains(err.Error(), "is shard 4 of "+f.sharded) {
			t.Fatalf("shards of a shard: %v", err)
		}
		if _, err := a.Shards(ctx, "no-such-task", 0); !errors.Is(err, audit.ErrNotFound) {
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
