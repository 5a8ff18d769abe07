package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Dead-letter retention: AX_DLQ keeps dead letters for DLQMaxAge, and a
// task type with a shorter retention loses its own sooner (a TTL each);
// its task stays failed. A discarded dead letter goes at once, audited.
func TestDeadLetterRetentionAndDiscard(t *testing.T) {
	t.Parallel()
	srv, ex, c := testenv.Stack(t, orchestrator.Config{
		Topology:            orchestrator.TopologyOptions{DLQMaxAge: 24 * time.Hour},
		DeadLetterRetention: map[string]time.Duration{"brief.fail": time.Second},
	}, executor.Config{})
	fail := func(context.Context, *executor.Job) (any, error) { return nil, executor.Permanent(errors.New("no")) }
	ex.HandleFunc("brief.fail", fail)
	ex.HandleFunc("kept.fail", fail)
	ctx := testenv.Context(t, time.Minute)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	st, err := js.Stream(ctx, subject.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != 24*time.Hour {
		t.Fatalf("AX_DLQ max age %s, want 24h", got)
	}
	for _, s := range []task.Spec{{ID: "brief-1", Type: "brief.fail"}, {ID: "kept-1", Type: "kept.fail"}, {ID: "kept-2", Type: "kept.fail"}} {
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Failed {
			t.Fatalf("%s: %+v, %v", s.ID, got, err)
		}
	}
	has := func(id string) bool {
		_, err := st.GetLastMsgForSubject(ctx, subject.DLQ(id))
		return err == nil
	}
	testenv.Eventually(t, 30*time.Second, "kept-1's dead letter stored", func() bool { return has("kept-1") })
	testenv.Eventually(t, 30*time.Second, "brief-1's dead letter gone after its type's retention", func() bool { return !has("brief-1") })
	if !has("kept-1") || !has("kept-2") {
		t.Fatal("a type without its own retention lost its dead letters")
	}
	if got, err := c.Get(ctx, "brief-1"); err != nil || got.State != task.Failed {
		t.Fatalf("brief-1 after its dead letter expired: %+v, %v", got, err)
	}

	// Discarded by an operator: gone, audited, its task still failed;
	// a second discard, or one of a task without a dead letter, is not found.
	c.Caller = "olga"
	if err := c.DiscardDeadLetter(ctx, "kept-1", "duplicate order"); err != nil {
		t.Fatal(err)
	}
	if has("kept-1") || !has("kept-2") {
		t.Fatal("the discard removed the wrong dead letters")
	}
	for _, id := range []string{"kept-1", "brief-1", "no-such-task"} {
		if err := c.DiscardDeadLetter(ctx, id, ""); !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("discard %s: %v, want not found", id, err)
		}
	}
	evs, err := c.AuditEvents(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ev *task.AuditEvent
	for i := range evs {
		if evs[i].Kind == "dlq" && evs[i].Key == "kept-1" {
			ev = &evs[i]
		}
	}
	if ev == nil || ev.To != "discarded" || ev.Reason != "duplicate order (by olga)" {
		t.Fatalf("audit event of the discard: %+v", ev)
	}
}
