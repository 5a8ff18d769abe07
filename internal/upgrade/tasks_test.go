package upgrade_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/internal/upgrade"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// legacy writes a task's history as an earlier version did: events on
// ax.task.<id>, each a compare-and-set on that subject.
func legacy(t *testing.T, ctx context.Context, js jetstream.JetStream, id string, states ...task.State) {
	t.Helper()
	var rev uint64
	from := task.State("")
	for i, st := range states {
		rec := task.Task{Spec: task.Spec{ID: id, Type: "work", Capability: task.DefaultCapability}, State: st,
			Attempt: 1, ExecutionID: "exec-" + id, SubmittedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
		rec.Timeout = task.Duration(time.Minute)
		if id == "waiting" {
			rec.DependsOn = []string{"queued"}
			rec.Attempt, rec.ExecutionID = 0, ""
		}
		if st == task.Running {
			now := time.Now().UTC()
			rec.StartedAt, rec.Executor = &now, "old-executor"
		}
		data, _ := json.Marshal(task.Event{Kind: task.KindTransition, From: from, To: st, At: rec.UpdatedAt, Actor: "v1", Reason: "step " + strconv.Itoa(i), Task: rec})
		msg := nats.NewMsg(subject.LegacyTask(id))
		msg.Data = data
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		rev, from = ack.Sequence, st
	}
}

// TestTasksMovesLegacyHistories: histories of the earlier layout (one
// subject per task, dispatches in AX_READY) stop an orchestrator of this
// version from starting, naming `ax migrate tasks`; once moved, the ready
// and running tasks run, a waiting one is released by its upstream, a
// finished one stays finished with its whole history readable, AX_READY is
// gone, and a second run moves nothing.
func TestTasksMovesLegacyHistories(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc := testenv.Conn(t, srv.URL())
	js, _ := jetstream.New(nc)
	ctx := testenv.Context(t, 2*time.Minute)
	// The topology of an earlier version: no layout recorded, an AX_READY.
	tasks, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tasks.CachedInfo().Config
	delete(cfg.Metadata, topology.TaskLayoutKey)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: subject.StreamReady, Subjects: []string{"task.ready.>"}}); err != nil {
		t.Fatal(err)
	}
	legacy(t, ctx, js, "done", task.Ready, task.Succeeded)
	legacy(t, ctx, js, "queued", task.Ready)
	legacy(t, ctx, js, "running", task.Ready, task.Running)
	legacy(t, ctx, js, "waiting", task.Waiting)

	o, err := orchestrator.New(testenv.Conn(t, srv.URL()), orchestrator.Config{Logger: testenv.SlogLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(ctx); err == nil || !strings.Contains(err.Error(), "ax migrate tasks") {
		t.Fatalf("an orchestrator started on legacy histories: %v", err)
	}

	rep, err := upgrade.Tasks(ctx, js, upgrade.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tasks != 4 || rep.Moved != 4 || rep.Dispatched != 2 || !rep.ReadyStreamRemoved {
		t.Fatalf("report %+v, want 4 tasks moved, 2 dispatched, AX_READY removed", rep)
	}
	if _, err := js.Stream(ctx, subject.StreamReady); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("AX_READY after the migration: %v", err)
	}

	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ran := make(chan string, 8)
	ex.HandleFunc("work", func(_ context.Context, j *executor.Job) (any, error) {
		ran <- j.ID
		return "ok", nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	for _, id := range []string{"queued", "running", "waiting"} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s after the migration: %+v %v", id, got, err)
		}
	}
	close(ran)
	var runs []string
	for id := range ran {
		runs = append(runs, id)
	}
	if len(runs) != 3 {
		t.Fatalf("handlers ran for %v, want queued, running and waiting once each", runs)
	}
	got, err := c.Get(ctx, "done")
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("done after the migration: %+v %v", got, err)
	}
	h, err := c.History(ctx, "done")
	if err != nil || len(h) != 3 || h[0].Event.To != task.Ready || h[1].Event.To != task.Succeeded || h[2].Event.Kind != task.KindMigrated {
		t.Fatalf("history of done: %+v %v", h, err)
	}
	again, err := upgrade.Tasks(ctx, js, upgrade.Options{Force: true})
	if err != nil || again.Moved != 0 || again.Tasks != 4 {
		t.Fatalf("second run: %+v %v", again, err)
	}
}
