package orchestrator_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// A command whose Ax-Reply-To names a subject that is not an inbox (here a
// task's history) is carried out, but its reply is not published there: the
// orchestrator writes with its own rights, which cover every record.
func TestCommandReplyOnlyToAnInbox(t *testing.T) {
	t.Parallel()
	srv, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{Capabilities: []string{"none"}})
	nc := testenv.Conn(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	for _, id := range []string{"victim", "target-a", "target-b"} {
		s := newSpec(id, "ok")
		s.Capability = "nobody" // stays ready
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "tasks ready", func() bool {
		for _, id := range []string{"victim", "target-a", "target-b"} {
			if got, err := c.Get(ctx, id); err != nil || got.State != task.Ready {
				return false
			}
		}
		return true
	})
	before, err := c.History(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	spy, err := nc.SubscribeSync(subject.TaskHistory("victim"))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	cmd := nats.NewMsg(subject.Command(subject.CommandCancel, "target-a"))
	cmd.Header.Set(subject.HeaderReplyTo, subject.TaskEvents("victim"))
	if _, err := js.PublishMsg(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "target-a cancelled", func() bool {
		got, err := c.Get(ctx, "target-a")
		return err == nil && got.State == task.Cancelled
	})
	// A command with an inbox is answered. The forged command's reply would
	// have been published right after its transition, which was observed
	// before this round trip started.
	if _, err := c.Cancel(ctx, "target-b", ""); err != nil {
		t.Fatalf("cancel with an inbox: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := spy.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("the orchestrator published a command reply on %s: %s", m.Subject, m.Data)
	}
	after, err := c.History(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("victim's history grew from %d to %d events", len(before), len(after))
	}
}

// A report is about a task of its subject's type: one published on another
// type's completed subject, or naming another type than its task's, is
// dropped, even with the task's current execution id (which any reader of
// AX_TASKS can learn). Executors may publish only the completed subjects of
// the types they serve, so this keeps an executor to its own tasks.
func TestReportBoundToItsSubjectsType(t *testing.T) {
	t.Parallel()
	js, c, running, release := heldVictim(t, orchestrator.Config{})
	// Even with the execution's token (see token_test.go for a forger
	// without it), the type decides.
	tok := testenv.Token(t, c.Conn(), "victim", running.ExecutionID)
	forgeReport(t, js, running, subject.Completed("other"), "held", tok) // the subject of a type the forger may report
	forgeReport(t, js, running, subject.Completed("other"), "other", tok)
	// The same, sent directly (ax.direct.task.completed.<type>): answered, not applied.
	forgeDirect(t, c.Conn(), running, subject.Direct(subject.Completed("other")), "held", tok)
	forgeDirect(t, c.Conn(), running, subject.Direct(subject.Completed("other")), "other", tok)
	forgeriesIgnored(t, c, release)
}
