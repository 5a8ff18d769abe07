package orchestrator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TestStateReadsAreScopedByType: a state read (sdk.Client.State) answers a
// task or a rejection only under its own type; under another it is not
// found, whether or not the id exists.
func TestStateReadsAreScopedByType(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, 60*time.Second)
	s := newSpec("state-ok", "ok")
	s.Payload = []byte(`{"n":1}`)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := c.WaitState(ctx, "ok", "state-ok")
	if err != nil || got.State != task.Succeeded || got.ID != "state-ok" || string(got.Payload) != `{"n":1}` {
		t.Fatalf("WaitState: %+v %v", got, err)
	}
	want, err := c.Get(ctx, "state-ok")
	if err != nil {
		t.Fatal(err)
	}
	if got.UpdatedAt != want.UpdatedAt || got.ExecutionID != want.ExecutionID {
		t.Fatalf("State %+v differs from Get %+v", got, want)
	}
	for _, typ := range []string{"other", "ok.sub", "o"} {
		if _, err := c.State(ctx, typ, "state-ok"); !errors.Is(err, sdk.ErrNotFound) {
			t.Fatalf("State under type %q: %v, want not found", typ, err)
		}
	}
	if _, err := c.State(ctx, "ok", "never-submitted"); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("State of an unknown id: %v, want not found", err)
	}

	// A rejected submission: its rejection under its type only.
	publishRaw(t, c.Conn(), subject.Submit("ok"), []byte(`{"id":"state-bad","type":"ok","priority":9}`))
	var rej *sdk.RejectedError
	testenv.Eventually(t, 30*time.Second, "state-bad rejected", func() bool {
		_, err = c.State(ctx, "ok", "state-bad")
		return errors.As(err, &rej)
	})
	if rej.Rejection.ID != "state-bad" {
		t.Fatalf("rejection %+v", rej.Rejection)
	}
	if _, err := c.State(ctx, "other", "state-bad"); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("rejection under another type: %v, want not found", err)
	}
	if _, err := c.WaitState(ctx, "ok", "state-bad"); !errors.As(err, &rej) {
		t.Fatalf("WaitState of a rejected submission: %v", err)
	}

	// Subjects that stand for no task are answered, not found.
	for _, subj := range []string{"ax.state.x", "ax.state.a/b.ok.too.many.tokens.in.a.type.here.x", "ax.state.%20.ok"} {
		msg, err := c.Conn().RequestWithContext(ctx, subj, []byte("garbage"))
		if err != nil {
			t.Fatalf("%s: %v", subj, err)
		}
		if string(msg.Data) != `{"not_found":true}` {
			t.Fatalf("%s answered %s", subj, msg.Data)
		}
	}
}
