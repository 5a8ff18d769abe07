package e2e

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/permission"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TestSecurityEvents runs event tasks under the enforcing server and the
// permission matrix (part 5 of event tasks): a producer not limited to
// types and an operator may Signal any event, a producer whose events are
// narrowed (--event-subjects psp=payment.>) only its subjects, an executor
// none; only an operator may approve an event task. Each allowed Signal
// completes its waiting task; each refused one is a permissions violation
// in the server's log and leaves its task waiting.
func TestSecurityEvents(t *testing.T) {
	acct := permission.Sample()
	acct.Users = append(acct.Users, permission.User{Name: "psp", Role: permission.Producer, Events: []string{"payment.>"}})
	sec := startSecureNATS(t, t.TempDir(), acct)
	orch, err := orchestrator.New(sec.connect("orchestrator"), orchestrator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := orch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = orch.Stop(ctx)
	})
	ctx := testenv.Context(t, 2*time.Minute)
	client := func(user string) *sdk.Client {
		t.Helper()
		c, err := sdk.New(ctx, sec.connect(user))
		if err != nil {
			t.Fatalf("client of %s: %v", user, err)
		}
		c.Caller = user // commands under its own name, the only ones a user may send
		return c
	}
	prod, psp, op := client("producer"), client("psp"), client("operator")

	ids := []string{"by-producer", "by-psp", "by-operator", "approved", "refused-psp", "refused-executor", "refused-approval"}
	var specs []task.Spec
	for _, id := range ids {
		specs = append(specs, task.Spec{ID: id, Type: "order.wait",
			WaitFor: &task.EventWait{Subject: "payment.received", Match: id, Timeout: task.Duration(time.Hour)}})
	}
	specs[4].WaitFor.Subject = "refund.done" // psp may publish payment.> only
	if _, err := prod.SubmitGraph(ctx, specs); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		testenv.Eventually(t, time.Minute, id+" waiting for its event", func() bool {
			got, err := op.Get(ctx, id)
			return err == nil && got.EventWaitSince != nil
		})
	}

	// Allowed: each Signal completes its task.
	for user, c := range map[string]*sdk.Client{"by-producer": prod, "by-psp": psp, "by-operator": op} {
		if _, err := c.Signal(ctx, "payment.received."+user, map[string]string{"from": user}); err != nil {
			t.Fatalf("signal for %s: %v", user, err)
		}
		if got, err := op.Wait(ctx, user); err != nil || got.State != task.Succeeded || got.EventSeq == 0 {
			t.Fatalf("%s: %+v, %v", user, got, err)
		}
	}
	got, err := op.Approve(ctx, "approved", sdk.ApproveOptions{Reason: "ok"})
	if err != nil || got.State != task.Succeeded || got.Approval == nil || got.Approval.By != "operator" {
		t.Fatalf("the operator's approval: %+v, %v", got, err)
	}

	// Refused: a permissions violation, and the task still waits.
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 2*time.Second) // a denied publish is never acknowledged
		t.Cleanup(cancel)
		return c
	}
	if _, err := psp.Signal(short(), "refund.done.refused-psp", nil); err == nil {
		t.Fatal("psp signalled refund.done, outside its event subjects")
	}
	sec.waitViolation("psp", "Publish", subject.Event("refund.done.refused-psp"))
	js, err := jetstream.New(sec.connect("executor-email"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(short(), subject.Event("payment.received.refused-executor"), []byte("{}")); err == nil {
		t.Fatal("an executor published an event")
	}
	sec.waitViolation("executor-email", "Publish", subject.Event("payment.received.refused-executor"))
	if _, err := prod.Approve(short(), "refused-approval", sdk.ApproveOptions{}); err == nil {
		t.Fatal("a producer approved an event task")
	}
	sec.waitViolation("producer", "Publish", subject.CommandAs("producer", subject.CommandApprove, "refused-approval"))
	for _, id := range []string{"refused-psp", "refused-executor", "refused-approval"} {
		if got, err := op.Get(ctx, id); err != nil || got.State != task.Waiting {
			t.Fatalf("%s after a refused event or approval: %+v, %v", id, got, err)
		}
	}
	for _, user := range []string{"orchestrator", "operator"} {
		if v := sec.violations(user); len(v) > 0 {
			t.Fatalf("violations of %s: %q", user, v)
		}
	}
}
