package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// `ax status <parent>` shows a sharded task's phase and shard counts;
// `ax status <shard>` names its parent.
func TestStatusShowsShardProgress(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s, _ := task.New(demo.TypeSplit, demo.Params{Shards: 12, Size: 10})
	s.ID, s.Shardable, s.MaxParallelShards = "job", true, 4
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "job"); err != nil || got.State != task.Succeeded {
		t.Fatalf("%+v, %v", got, err)
	}
	run := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), append(args, "--nats", srv.URL()), &out, &errOut); code != 0 {
			t.Fatalf("ax %v exited %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	out := run("status", "job")
	for _, want := range []string{"Shards: phase aggregate, 12 planned", "succeeded   12", `"shards":12`, "12 shards registered", "aggregating"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if out := run("status", "job/shard/11"); !strings.Contains(out, "Shard of    job (#11)") {
		t.Errorf("shard status:\n%s", out)
	}
	var js struct {
		Shards struct {
			Total int
			Ended map[string]int
		} `json:"shards"`
	}
	if err := json.Unmarshal([]byte(run("status", "job", "-o", "json")), &js); err != nil || js.Shards.Total != 12 || js.Shards.Ended["succeeded"] != 12 {
		t.Fatalf("json status: %+v, %v", js, err)
	}
}

// `ax status <id>` shows a task's inputs: each upstream's state and its
// result, inline or as a reference into the object store.
func TestStatusShowsInputs(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	big := strings.Repeat("y", task.InlineResultLimit+1)
	ex.HandleFunc("big", func(context.Context, *executor.Job) (any, error) { return big, nil })
	ex.HandleFunc("small", func(context.Context, *executor.Job) (any, error) { return map[string]int{"n": 7}, nil })
	ex.HandleFunc("join", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	spec := func(id, typ string, deps ...string) task.Spec {
		s, _ := task.New(typ, nil)
		s.ID, s.DependsOn = id, deps
		return s
	}
	if _, err := c.SubmitGraph(ctx, []task.Spec{spec("up-big", "big"), spec("up-small", "small"), spec("join", "join", "up-big", "up-small")}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "join"); err != nil || got.State != task.Succeeded {
		t.Fatalf("%+v, %v", got, err)
	}
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"status", "join", "--nats", srv.URL()}, &out, &errOut); code != 0 {
		t.Fatalf("ax status exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{"Inputs:", "up-big    succeeded  object results/up-big/", " in AX_OBJECTS_default", `up-small  succeeded  {"n":7}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// `ax status <id>` lists a task's durable steps and sleeps, and its
// history their events.
func TestStatusShowsSteps(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s, _ := task.New(demo.TypeSteps, demo.StepsParams{Steps: 2, Nap: "100ms", NapAfter: 1})
	s.ID = "stepper"
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "stepper"); err != nil || got.State != task.Succeeded {
		t.Fatalf("%+v, %v", got, err)
	}
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"status", "stepper", "--nats", srv.URL()}, &out, &errOut); code != 0 {
		t.Fatalf("ax status exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{"Steps (3 of at most 100):", "step-1      1", "ax:sleep:1  1", "sleep until ", "step-2      1", `step "step-1" stored by`, "attempt 1 sleeping for 100ms", "ax:sleep:1 over; attempt 1 runs again"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// ax status names the event that cancels a task with a cancel_on, and the
// AX_EVENTS sequence after which such an event counts; a task without one
// shows no event rows.
func TestEventRowsShowCancelOn(t *testing.T) {
	tk := task.Task{Spec: task.Spec{ID: "c1", Type: "demo.sleep", CancelOn: &task.EventCancel{Subject: "order.cancelled", Match: "o-42"}}}
	tk.CancelOnAfter = 17
	rows := eventRows(&tk)
	if len(rows) != 1 || rows[0][0] != "Cancelled by" ||
		rows[0][1] != "event ax.event.order.cancelled.o-42 stored after AX_EVENTS sequence 17 (subject order.cancelled, match o-42)" {
		t.Fatalf("rows of a cancel_on task: %q", rows)
	}
	tk.WaitFor = &task.EventWait{Subject: "payment", Match: "o-42", Timeout: task.Duration(time.Hour)}
	if rows := eventRows(&tk); len(rows) < 2 || rows[0][0] != "Cancelled by" || rows[1][0] != "Waits for" {
		t.Fatalf("rows of an event task with a cancel_on: %q", rows)
	}
	if rows := eventRows(&task.Task{Spec: task.Spec{ID: "plain", Type: "demo.noop"}}); len(rows) != 0 {
		t.Fatalf("rows of a plain task: %q", rows)
	}
}
