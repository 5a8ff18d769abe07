package cli

import (
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

// TestApproveCommand runs `ax approve` against a real stack: an approval
// succeeds the event task with {"approved", "by", "reason", "at"} (who:
// --as and --by) and releases its dependent, which reads it as its input;
// a rejection fails it for good, cancelling its all_succeeded dependent
// and running its any_failed one; a second decision, a task that is not
// an event task, one that waits for its upstream, and an unknown id exit
// non-zero saying why. `ax status` shows the wait (event, since, timeout)
// and how it ended (the approval, or the event's sequence).
func TestApproveCommand(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	ax := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := runCLI(ctx, append(args, "--nats", srv.URL())...)
		if (code == 0) != (want == 0) {
			t.Fatalf("ax %s: exit %d, want %d: %s%s", strings.Join(args, " "), code, want, errOut, out)
		}
		return out, errOut
	}
	wait := func(id, subj string, deps ...string) task.Spec {
		return task.Spec{ID: id, Type: "approval", DependsOn: deps,
			WaitFor: &task.EventWait{Subject: subj, Match: id, Timeout: task.Duration(time.Hour)}}
	}
	if _, err := c.SubmitGraph(ctx, []task.Spec{
		wait("ap-ok", "approval.order"),
		{ID: "ap-ship", Type: demo.TypeNoop, DependsOn: []string{"ap-ok"}},
		wait("ap-no", "approval.order"),
		{ID: "ap-next", Type: demo.TypeNoop, DependsOn: []string{"ap-no"}},
		{ID: "ap-undo", Type: demo.TypeNoop, DependsOn: []string{"ap-no"}, TriggerRule: task.TriggerAnyFailed},
		{ID: "ap-gate", Type: demo.TypeNoop, Delay: task.Duration(time.Hour)},
		wait("ap-held", "approval.order", "ap-gate"),
		wait("ap-event", "payment.received"),
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ap-ok", "ap-no", "ap-event"} {
		testenv.Eventually(t, time.Minute, id+" waiting for its event", func() bool {
			got, err := c.Get(ctx, id)
			return err == nil && got.EventWaitSince != nil
		})
	}
	out, _ := ax(0, "status", "ap-ok")
	for _, want := range []string{"Waits for", "event ax.event.approval.order.ap-ok (subject approval.order, match ap-ok, timeout 1h0m0s)", "Waiting since", "Timeout at"} {
		if !strings.Contains(out, want) {
			t.Errorf("ax status of a waiting event task lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Attempt ") {
		t.Errorf("ax status shows an attempt count for an event task:\n%s", out)
	}

	out, _ = ax(0, "approve", "ap-ok", "--reason", "receipt checked", "--by", "cli-test", "--as", "alice")
	if out != "ap-ok\tsucceeded\tapproved by alice for cli-test: receipt checked\n" {
		t.Fatalf("ax approve: %q", out)
	}
	got, err := c.Wait(ctx, "ap-ok")
	var a task.Approval
	if err != nil || json.Unmarshal(got.Result, &a) != nil || !a.Approved || a.By != "alice for cli-test" || a.Reason != "receipt checked" || a.At.IsZero() ||
		got.Approval == nil || *got.Approval != a {
		t.Fatalf("ap-ok: %+v %v", got, err)
	}
	if ship, err := c.Wait(ctx, "ap-ship"); err != nil || ship.State != task.Succeeded {
		t.Fatalf("ap-ship: %+v %v", ship, err)
	}
	if ins, err := c.Inputs(ctx, "ap-ship"); err != nil || len(ins) != 1 || !strings.Contains(string(ins[0].Result), `"approved":true`) {
		t.Fatalf("ap-ship's input: %+v %v", ins, err)
	}
	out, _ = ax(0, "status", "ap-ok")
	if !strings.Contains(out, "Approved by") || !strings.Contains(out, "alice for cli-test at ") || !strings.Contains(out, ": receipt checked") {
		t.Errorf("ax status of an approved task:\n%s", out)
	}
	// The same decision again answers as the first left it; another is refused.
	ax(0, "approve", "ap-ok", "--reason", "receipt checked", "--by", "cli-test", "--as", "alice")
	if _, errOut := ax(1, "approve", "ap-ok", "--reject", "--by", "bob"); !strings.Contains(errOut, "already succeeded: approved by alice for cli-test") {
		t.Errorf("a rejection after the approval: %s", errOut)
	}

	out, _ = ax(0, "approve", "ap-no", "--reject", "--reason", "no receipt", "--by", "bob", "-o", "json")
	var rej task.Task
	if err := json.Unmarshal([]byte(out), &rej); err != nil || rej.State != task.Failed || rej.Reason != "rejected by bob: no receipt" {
		t.Fatalf("ax approve --reject -o json: %s %v", out, err)
	}
	if got, err := c.Wait(ctx, "ap-next"); err != nil || got.State != task.Cancelled {
		t.Fatalf("ap-next: %+v %v", got, err)
	}
	if got, err := c.Wait(ctx, "ap-undo"); err != nil || got.State != task.Succeeded {
		t.Fatalf("ap-undo: %+v %v", got, err)
	}
	if got, _ := c.Get(ctx, "ap-no"); got.Attempt != 0 || len(got.Errors) != 1 || got.Errors[0].Error != "rejected by bob: no receipt" {
		t.Fatalf("ap-no: %+v", got)
	}
	out, _ = ax(0, "status", "ap-no")
	if !strings.Contains(out, "Rejected by") || !strings.Contains(out, "bob at ") {
		t.Errorf("ax status of a rejected task:\n%s", out)
	}

	for id, want := range map[string]string{
		"ap-gate":     "not an event task",
		"ap-held":     "not waiting for its event yet",
		"no-such-one": "not found",
	} {
		if _, errOut := ax(1, "approve", id); !strings.Contains(errOut, want) {
			t.Errorf("ax approve %s: %s; want %q", id, errOut, want)
		}
	}

	// An event that arrived: its sequence in ax status.
	seq, err := c.Signal(ctx, "payment.received.ap-event", map[string]int{"amount": 5})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "ap-event"); err != nil || got.EventSeq != seq {
		t.Fatalf("ap-event: %+v %v", got, err)
	}
	out, _ = ax(0, "status", "ap-event")
	if !strings.Contains(out, "AX_EVENTS sequence") || !strings.Contains(out, `{"amount":5}`) {
		t.Errorf("ax status of an event task that received its event:\n%s", out)
	}
}
