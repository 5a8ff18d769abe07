package orchestrator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// askClaim sends a claim on capability's subject and decodes the reply.
func askClaim(t *testing.T, ctx context.Context, nc *nats.Conn, capability string, req task.ClaimRequest) task.ClaimReply {
	t.Helper()
	data, _ := json.Marshal(req)
	msg, err := nc.RequestWithContext(ctx, subject.Claim(capability), data)
	if err != nil {
		t.Fatalf("claim request: %v", err)
	}
	var rep task.ClaimReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		t.Fatalf("claim reply %q: %v", msg.Data, err)
	}
	return rep
}

// TestClaimsAreTheOrchestratorsToWrite: the orchestrator, the one writer of
// task records, grants a claim only for the claim subject's capability and
// the current execution; it counts a takeover only of a running attempt
// whose lease expired, and a running mark never takes anything over.
func TestClaimsAreTheOrchestratorsToWrite(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s, _ := task.New("nobody-runs-this", nil)
	s.ID, s.Capability = "claimed", "gpu"
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	var ready task.Task
	testenv.Eventually(t, 30*time.Second, "the task dispatched", func() bool {
		got, err := c.Get(ctx, s.ID)
		if err == nil {
			ready = *got
		}
		return err == nil && got.State == task.Ready
	})
	js, _ := jetstream.New(c.Conn())
	st, err := store.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	_, rev, err := st.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	req := task.ClaimRequest{ID: s.ID, ExecutionID: ready.ExecutionID, Revision: rev, Executor: "exec-a", StartedAt: time.Now().UTC(), Delivered: 1,
		Token: testenv.Token(t, c.Conn(), s.ID, ready.ExecutionID)}

	// Another capability's executor cannot claim it, and nothing is written.
	if rep := askClaim(t, ctx, c.Conn(), "cpu", req); rep.Status != task.ClaimEnded || rep.Error == "" {
		t.Fatalf("claim as another capability: %+v", rep)
	}
	if _, after, _ := st.Get(ctx, s.ID); after != rev {
		t.Fatalf("a refused claim wrote revision %d (was %d)", after, rev)
	}
	// An old execution is over.
	stale := req
	stale.ExecutionID = "an-earlier-execution"
	stale.Token = testenv.Token(t, c.Conn(), s.ID, stale.ExecutionID)
	if rep := askClaim(t, ctx, c.Conn(), "gpu", stale); rep.Status != task.ClaimEnded {
		t.Fatalf("claim of another execution: %+v", rep)
	}
	// Without the execution's token (only its dispatch carries it), or
	// with another execution's, nothing is claimed.
	for _, tok := range []string{"", stale.Token, "AAAAAAAAAAAAAAAAAAAAAA"} {
		forged := req
		forged.Token = tok
		if rep := askClaim(t, ctx, c.Conn(), "gpu", forged); rep.Status != task.ClaimEnded || !strings.Contains(rep.Error, "execution token") {
			t.Fatalf("claim with token %q: %+v", tok, rep)
		}
	}
	if _, after, _ := st.Get(ctx, s.ID); after != rev {
		t.Fatalf("a claim without a token wrote revision %d (was %d)", after, rev)
	}
	// The claim proper: running on exec-a, written by the orchestrator.
	rep := askClaim(t, ctx, c.Conn(), "gpu", req)
	if rep.Status != task.ClaimGranted || rep.Task == nil || rep.Task.State != task.Running || rep.Task.Executor != "exec-a" || rep.Revision <= rev {
		t.Fatalf("claim: %+v", rep)
	}
	h, err := c.History(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1].Event
	if last.From != task.Ready || last.To != task.Running || last.Actor == "exec-a" || last.Task.Takeovers != 0 {
		t.Fatalf("claim event %+v", last)
	}
	// A copy on a first delivery, and a mark by another executor, find it
	// running elsewhere; exec-a's own mark is granted again.
	other := req
	other.Executor = "exec-b"
	if rep := askClaim(t, ctx, c.Conn(), "gpu", other); rep.Status != task.ClaimRunningElsewhere {
		t.Fatalf("a copy's claim: %+v", rep)
	}
	other.Mark, other.Delivered = true, 5
	if rep := askClaim(t, ctx, c.Conn(), "gpu", other); rep.Status != task.ClaimRunningElsewhere {
		t.Fatalf("another executor's mark: %+v", rep)
	}
	mark := req
	mark.Mark = true
	if rep := askClaim(t, ctx, c.Conn(), "gpu", mark); rep.Status != task.ClaimGranted || rep.Revision != h[len(h)-1].Revision {
		t.Fatalf("exec-a's mark: %+v", rep)
	}
	// A redelivery takes it over: exec-a never heart-beat, so no lease.
	takeover := req
	takeover.Executor, takeover.Delivered = "exec-b", 2
	rep = askClaim(t, ctx, c.Conn(), "gpu", takeover)
	if rep.Status != task.ClaimGranted || rep.Task.Executor != "exec-b" || rep.Task.Takeovers != 1 {
		t.Fatalf("takeover: %+v", rep)
	}
	// A lease holds the execution only with its token: a forged one does
	// not keep a takeover away, exec-c's own does.
	lease := func(executor, token string) {
		t.Helper()
		data, _ := json.Marshal(task.Lease{ExecutionID: req.ExecutionID, Executor: executor, At: time.Now().UTC(), Token: token})
		if _, err := js.Publish(ctx, subject.Lease("gpu", s.ID), data); err != nil {
			t.Fatal(err)
		}
	}
	lease("exec-b", "")
	takeover.Executor, takeover.Delivered = "exec-c", 3
	if rep := askClaim(t, ctx, c.Conn(), "gpu", takeover); rep.Status != task.ClaimGranted || rep.Task.Executor != "exec-c" {
		t.Fatalf("takeover past a lease without a token: %+v", rep)
	}
	lease("exec-c", req.Token)
	takeover.Executor, takeover.Delivered = "exec-d", 4
	if rep := askClaim(t, ctx, c.Conn(), "gpu", takeover); rep.Status != task.ClaimRunningElsewhere {
		t.Fatalf("takeover of an execution with a live lease: %+v", rep)
	}
	// A malformed claim is answered, not dropped.
	msg, err := c.Conn().RequestWithContext(ctx, subject.Claim("gpu"), []byte(`{"id":`))
	if err != nil {
		t.Fatal(err)
	}
	var bad task.ClaimReply
	if err := json.Unmarshal(msg.Data, &bad); err != nil || bad.Error == "" || bad.Status == task.ClaimGranted {
		t.Fatalf("malformed claim: %s, %v", msg.Data, err)
	}
}

// TestCommandsRecordTheirCaller: a command sent under a caller's name
// (ax.cmd.as.<caller>.…, which per-user permissions vouch for) is recorded
// with that name, before any name its body claims; a pause's audit event
// names it too.
func TestCommandsRecordTheirCaller(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s, _ := task.New("nobody-runs-this", nil)
	s.ID = "to-cancel"
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	c.Caller = "alice"
	got, err := c.Cancel(ctx, s.ID, "not needed")
	if err != nil || got.Reason != "not needed (by alice)" {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	if err := c.Pause(ctx, "nobody-runs-this", false, "incident"); err != nil {
		t.Fatal(err)
	}
	var pauses []task.AuditEvent
	testenv.Eventually(t, 30*time.Second, "the pause audited", func() bool {
		evs, err := c.AuditEvents(ctx, 100)
		pauses = pauses[:0]
		for _, ev := range evs {
			if ev.Kind == "pause" {
				pauses = append(pauses, ev)
			}
		}
		return err == nil && len(pauses) > 0
	})
	if pauses[len(pauses)-1].Reason != "incident (by alice)" {
		t.Fatalf("pause audit %+v", pauses)
	}
	c.Caller = "not.one.token"
	if _, err := c.Cancel(ctx, "x", ""); err == nil {
		t.Fatal("a caller that is not one subject token was sent")
	}
}
