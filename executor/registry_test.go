package executor_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/task"
)

// An executor announces itself in the workers registry while it runs,
// idle too; a handler that starts shows as running on it (task, execution,
// since, progress) while the task's record still says ready — no record
// write was added to show it; a clean Stop removes the executor at once.
func TestWorkersRegistryShowsWhatRunsWhere(t *testing.T) {
	t.Parallel()
	env := axtest.Start(t, &axtest.Options{Executor: executor.Config{Capabilities: []string{"other"}}})
	ctx := testenv.Context(t, time.Minute)
	ex, err := env.NewExecutor(executor.Config{ID: "reg.host-1", Capabilities: []string{"reg", "reg2"}, Capacity: 3})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	ex.HandleFunc("reg.slow", func(ctx context.Context, j *executor.Job) (any, error) {
		for i := range 1000 { // rate limited: one announcement per quarter second at most
			j.Progress(ctx, float64(i)/10, "step")
		}
		j.Progress(ctx, 40, "copying part 2 of 5")
		close(started)
		<-release
		return nil, nil
	})
	ex.HandleFunc("reg.other", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(testenv.Conn(t, env.URL))
	find := func() *task.Worker {
		ws, err := env.Client.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ws {
			if ws[i].ID == "reg.host-1" {
				return &ws[i]
			}
		}
		return nil
	}
	var w *task.Worker
	testenv.Eventually(t, 30*time.Second, "the idle executor in the registry", func() bool { w = find(); return w != nil })
	if !slices.Equal(w.Capabilities, []string{"reg", "reg2"}) || !slices.Equal(w.Types, []string{"reg.other", "reg.slow"}) ||
		w.Capacity != 3 || len(w.Running) != 0 || w.Version == "" || w.HeartbeatAt.IsZero() || w.StartedAt.IsZero() {
		t.Fatalf("idle announcement: %+v", w)
	}

	seqOfRegistry := func() uint64 {
		st, err := js.Stream(ctx, "KV_"+subject.BucketWorkers)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := seqOfRegistry()
	spec, _ := task.New("reg.slow", nil)
	spec.Capability = "reg"
	id, err := env.Client.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	var x *task.WorkerExecution
	testenv.Eventually(t, 30*time.Second, "the running task in the registry", func() bool {
		var err error
		w, x, err = env.Client.RunningOn(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return x != nil && x.Progress != nil && x.Progress.Percent == 40
	})
	// 1,001 progress reports made a handful of writes of the registry
	// (at most one every quarter second per executor), not one each.
	if writes := seqOfRegistry() - before; writes > 50 {
		t.Errorf("the registry was written %d times for 1,001 progress reports", writes)
	}
	rec, err := env.Client.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != "reg.host-1" || x.ExecutionID != rec.ExecutionID || x.Type != "reg.slow" || x.Capability != "reg" || x.Attempt != 1 ||
		x.Since.IsZero() || x.Progress.Message != "copying part 2 of 5" || w.RunningTotal != 1 || w.InFlight != 1 {
		t.Errorf("running on %+v: %+v", w, x)
	}
	if rec.State != task.Ready {
		// The record moves to running only at the first heartbeat (10 s
		// by default): the registry is what shows it meanwhile.
		t.Errorf("the record says %s: the registry should not have needed a record write", rec.State)
	}
	close(release)
	if got := env.WaitTask(t, id); got.State != task.Succeeded {
		t.Fatalf("task %s", got.State)
	}
	testenv.Eventually(t, 30*time.Second, "the ended handler gone from the registry", func() bool {
		_, x, err := env.Client.RunningOn(ctx, id)
		return err == nil && x == nil
	})
	if err := ex.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if w := find(); w != nil {
		t.Fatalf("a stopped executor is still listed: %+v", w)
	}
	// Started again, it is listed again.
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the restarted executor in the registry", func() bool { return find() != nil })
}

// The announcement of an executor whose process died (no Stop) expires
// after its TTL: three announce intervals.
func TestWorkersRegistryForgetsADeadExecutor(t *testing.T) {
	t.Parallel()
	env := axtest.Start(t, nil)
	ctx := testenv.Context(t, time.Minute)
	nc := testenv.Conn(t, env.URL)
	ex, err := executor.New(nc, executor.Config{ID: "doomed", Capabilities: []string{"doomed"}, AnnounceInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	listed := func() bool {
		ws, err := env.Client.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ws, func(w task.Worker) bool { return w.ID == "doomed" })
	}
	testenv.Eventually(t, 30*time.Second, "the executor listed", listed)
	nc.Close() // its process "dies": no Stop, no more announcements
	testenv.Eventually(t, 30*time.Second, "the dead executor's announcement expired", func() bool { return !listed() })
	stopCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = ex.Stop(stopCtx)
}
