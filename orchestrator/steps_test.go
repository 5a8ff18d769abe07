package orchestrator_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// askStep sends a step report as the executor's direct request and returns
// the answer.
func askStep(t *testing.T, nc *nats.Conn, r task.Report) task.StepReply {
	t.Helper()
	r.Status = task.OutcomeStep
	data, _ := json.Marshal(r)
	m, err := nc.Request(subject.Direct(subject.Completed(r.Type)), data, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep task.StepReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatalf("reply %s: %v", m.Data, err)
	}
	return rep
}

// TestStepIsFencedByTheAttempt: against a real orchestrator, a step is
// stored only with the execution's token, for the executor running the
// attempt and its take-over count; a zombie naming another executor (or
// another take-over) is refused as lost and stores nothing; the first
// result stored stands.
func TestStepIsFencedByTheAttempt(t *testing.T) {
	t.Parallel()
	js, c, running, release := heldVictim(t, orchestrator.Config{})
	defer close(release)
	nc := js.Conn()
	token := testenv.Token(t, nc, running.ID, running.ExecutionID)
	own := task.Report{ID: running.ID, Type: running.Type, ExecutionID: running.ExecutionID, Attempt: running.Attempt,
		Executor: running.Executor, Takeovers: running.Takeovers, Step: "charge", Result: json.RawMessage(`"first"`), Token: token}

	noToken := own
	noToken.Token = ""
	if rep := askStep(t, nc, noToken); rep.Refused == "" || rep.Step != nil {
		t.Fatalf("without a token: %+v", rep)
	}
	zombie := own
	zombie.Executor = "zombie"
	if rep := askStep(t, nc, zombie); !rep.Lost || !strings.Contains(rep.Refused, "taken over") {
		t.Fatalf("another executor: %+v", rep)
	}
	later := own
	later.Takeovers++
	if rep := askStep(t, nc, later); !rep.Lost {
		t.Fatalf("another take-over: %+v", rep)
	}
	rep := askStep(t, nc, own)
	if rep.Step == nil || string(rep.Step.Result) != `"first"` || rep.Revision == 0 {
		t.Fatalf("own step: %+v", rep)
	}
	again := own
	again.Result = json.RawMessage(`"second"`)
	again.StepRevision = rep.Revision
	if rep := askStep(t, nc, again); rep.Step == nil || string(rep.Step.Result) != `"first"` {
		t.Fatalf("asked again: %+v", rep)
	}
	ctx := testenv.Context(t, 30*time.Second)
	got, err := c.Get(ctx, running.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.Running || len(got.Steps) != 1 || got.Steps[0].Executor != running.Executor || got.Reason != running.Reason {
		t.Fatalf("record: %s %q %+v", got.State, got.Reason, got.Steps)
	}
}
