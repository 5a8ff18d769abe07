package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// ax workers lists every executor (idle ones too) and what runs on each;
// ax status ID shows where a task's handler runs, since when and its
// progress, within a quarter second of its start and while its record
// still says ready.
func TestWorkersAndRunningStatus(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	busy := testenv.Executor(t, srv.URL(), executor.Config{ID: "cli-busy", Capabilities: []string{"cli-busy"}, Capacity: 4})
	started, release := make(chan struct{}), make(chan struct{})
	busy.HandleFunc("cli.block", func(ctx context.Context, j *executor.Job) (any, error) {
		j.Progress(ctx, 25, "chunk 1 of 4")
		close(started)
		<-release
		return nil, nil
	})
	testenv.Start(t, busy)
	idle := testenv.Executor(t, srv.URL(), executor.Config{ID: "cli-idle", Capabilities: []string{"cli-idle"}})
	testenv.Start(t, idle)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	ax := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Run(ctx, append(args, "--nats", srv.URL()), &out, &errOut); code != 0 {
			t.Fatalf("ax %v exited %d: %s%s", args, code, errOut.String(), out.String())
		}
		return out.String()
	}

	testenv.Eventually(t, 30*time.Second, "both executors listed", func() bool {
		out := ax("workers")
		return strings.Contains(out, "cli-busy") && strings.Contains(out, "cli-idle")
	})
	if out := ax("workers"); !strings.Contains(out, "cli.block") || !strings.Contains(out, "0/4") || !strings.Contains(out, "Running now: nothing") {
		t.Errorf("ax workers, idle:\n%s", out)
	}
	id, err := c.Submit(ctx, task.Spec{Type: "cli.block", Capability: "cli-busy"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	testenv.Eventually(t, 30*time.Second, "the running task in ax workers", func() bool {
		out := ax("workers")
		return strings.Contains(out, id) && strings.Contains(out, "25% chunk 1 of 4")
	})
	out := ax("status", id)
	if !strings.Contains(out, "State       ready") || !strings.Contains(out, "Running on  executor cli-busy since") ||
		!strings.Contains(out, "its handler started") || !strings.Contains(out, "25% chunk 1 of 4") {
		t.Errorf("ax status of a running task:\n%s", out)
	}
	var st struct {
		Task       task.Task `json:"task"`
		RunningNow *struct {
			Executor string `json:"executor"`
			task.WorkerExecution
		} `json:"running_now"`
	}
	raw := ax("status", id, "-o", "json")
	checkJSONContract(t, "status", raw)
	if err := json.Unmarshal([]byte(raw), &st); err != nil || st.RunningNow == nil || st.RunningNow.Executor != "cli-busy" ||
		st.RunningNow.ExecutionID != st.Task.ExecutionID || st.RunningNow.Progress == nil || st.RunningNow.Progress.Percent != 25 {
		t.Errorf("ax status -o json: %s (%v)", raw, err)
	}
	var ws []task.Worker
	raw = ax("workers", "--capability", "cli-busy", "-o", "json")
	checkJSONContract(t, "workers", raw)
	if err := json.Unmarshal([]byte(raw), &ws); err != nil || len(ws) != 1 || ws[0].ID != "cli-busy" || len(ws[0].Running) != 1 || ws[0].Running[0].TaskID != id {
		t.Errorf("ax workers --capability -o json: %s (%v)", raw, err)
	}
	if out := ax("status"); !strings.Contains(out, "Executors  2 running (1 idle), 1 handlers running now") {
		t.Errorf("ax status overview:\n%s", out)
	}
	close(release)
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
		t.Fatalf("%+v, %v", got, err)
	}
	if out := ax("status", id); strings.Contains(out, "Running on") || strings.Contains(out, "Waiting") {
		t.Errorf("a finished task shows where it runs:\n%s", out)
	}

	// A ready task that no executor running now can take says why: cli-idle
	// serves its capability but has no handler for its type (it passes its
	// dispatch on); nobody serves capability cli-none.
	for _, tc := range []struct{ capability, want string }{
		{"cli-idle", `no executor handles type "cli.orphan" on capability "cli-idle": the 1 running there (cli-idle) have no handler for it`},
		{"cli-none", `no executor serving capability "cli-none" is running`},
	} {
		id, err := c.Submit(ctx, task.Spec{Type: "cli.orphan", Capability: tc.capability})
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "the orphan ready", func() bool {
			got, err := c.Get(ctx, id)
			return err == nil && got.State == task.Ready
		})
		if out := ax("status", id); !strings.Contains(out, "Waiting     "+tc.want) {
			t.Errorf("ax status of a task no executor can take:\n%s\nwant %q", out, tc.want)
		}
		var st struct {
			Unserved string `json:"unserved"`
		}
		raw := ax("status", id, "-o", "json")
		checkJSONContract(t, "status", raw)
		if err := json.Unmarshal([]byte(raw), &st); err != nil || !strings.Contains(st.Unserved, tc.want) {
			t.Errorf("ax status -o json of a task no executor can take: %s (%v)", raw, err)
		}
	}
}
