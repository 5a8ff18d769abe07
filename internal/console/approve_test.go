package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/task"
)

// TestConsoleApproval: the task page of an event task waiting for its
// event shows its wait (event, since, timeout) and, to an operator only,
// Approve and Reject; approving it (confirmed, with a reason) succeeds it
// and releases its dependent, rejecting another fails it and cancels its
// dependent, each audited under the operator's name and shown on the page;
// a viewer is refused, as are a task that is not an event task and one
// decided already; an event that arrived shows its sequence.
func TestConsoleApproval(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	ctx := testenv.Context(t, 2*time.Minute)
	wait := func(id string) task.Spec {
		return task.Spec{ID: id, Type: "console.approval", WaitFor: &task.EventWait{Subject: "approval.console", Match: id, Timeout: task.Duration(time.Hour)}}
	}
	if _, err := f.c.SubmitGraph(ctx, []task.Spec{
		wait("ev-ok"), {ID: "ev-ok-next", Type: demo.TypeNoop, DependsOn: []string{"ev-ok"}},
		wait("ev-no"), {ID: "ev-no-next", Type: demo.TypeNoop, DependsOn: []string{"ev-no"}},
		wait("ev-sig"),
		{ID: "ev-cancel", Type: demo.TypeNoop, Delay: task.Duration(time.Hour), CancelOn: &task.EventCancel{Subject: "order.cancelled", Match: "ev-cancel"}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ev-ok", "ev-no", "ev-sig"} {
		testenv.Eventually(t, time.Minute, id+" waiting for its event", func() bool {
			got, err := f.c.Get(ctx, id)
			return err == nil && got.EventWaitSince != nil
		})
	}

	viewer := f.login(viewerName, viewerSecret)
	// A task with a cancel_on shows the event that cancels it.
	viewer.mustGet("/task/ev-cancel", `id="cancel-on"`, "ax.event.order.cancelled.ev-cancel", "stored after AX_EVENTS sequence")
	body := viewer.mustGet("/task/ev-ok", `id="wait-for"`, "ax.event.approval.console.ev-ok", `id="waiting-since"`, "Timeout at",
		"Waiting for event ax.event.approval.console.ev-ok", "An operator may approve or reject it")
	if strings.Contains(body, `id="approve"`) || strings.Contains(body, `id="reject"`) {
		t.Fatalf("a viewer is shown Approve or Reject\n%s", excerpt(body))
	}
	if code, _ := viewer.act("approve", url.Values{"id": {"ev-ok"}}, true); code != http.StatusForbidden {
		t.Fatalf("a viewer's approval: %d", code)
	}

	op := f.login(operatorName, operatorSecret)
	op.mustGet("/task/ev-ok", `id="approve"`, `id="reject"`, `action="/actions/approve"`, `action="/actions/reject"`)
	if body := op.mustGet("/task/" + f.flaky); strings.Contains(body, `id="approve"`) {
		t.Fatal("Approve shown for a task that is not an event task")
	}
	code, body := op.act("approve", url.Values{"id": {"ev-ok"}, "back": {"/task/ev-ok"}}, false)
	if code != http.StatusOK || !strings.Contains(body, "Approve task ev-ok in place of its event approval.console.ev-ok") || !strings.Contains(body, "Yes, approve") {
		t.Fatalf("confirm page: %d\n%s", code, excerpt(body))
	}
	code, body = op.act("approve", url.Values{"id": {"ev-ok"}, "reason": {"receipt checked"}}, true)
	if code != http.StatusOK || !strings.Contains(body, "now succeeded") {
		t.Fatalf("approve: %d\n%s", code, excerpt(body))
	}
	got, err := f.c.Wait(ctx, "ev-ok")
	if err != nil || got.State != task.Succeeded || got.Approval == nil || !got.Approval.Approved || got.Approval.By != "console:"+operatorName ||
		got.Approval.Reason != "receipt checked" || !strings.Contains(string(got.Result), `"by":"console:alice"`) {
		t.Fatalf("approved task: %+v, %v", got, err)
	}
	if got, err := f.c.Wait(ctx, "ev-ok-next"); err != nil || got.State != task.Succeeded {
		t.Fatalf("the approved task's dependent: %+v, %v", got, err)
	}
	waitAudit(t, f, "approve", "ev-ok")
	body = op.mustGet("/task/ev-ok", `id="approval"`, "Approved by", "console:alice", "receipt checked")
	if strings.Contains(body, `id="approve"`) {
		t.Fatal("Approve still shown once the task is approved")
	}
	// Decided already, or no event task: refused, nothing changed.
	for _, id := range []string{"ev-ok", f.flaky} {
		if code, body := op.act("reject", url.Values{"id": {id}}, true); code != http.StatusBadRequest || !strings.Contains(body, "not an event task waiting for its event") {
			t.Fatalf("reject %s: %d\n%s", id, code, excerpt(body))
		}
	}

	code, body = op.act("reject", url.Values{"id": {"ev-no"}, "reason": {"wrong amount"}}, true)
	if code != http.StatusOK || !strings.Contains(body, "now failed") {
		t.Fatalf("reject: %d\n%s", code, excerpt(body))
	}
	if got, err := f.c.Wait(ctx, "ev-no"); err != nil || got.State != task.Failed || len(got.Errors) != 1 || got.Errors[0].Error != "rejected by console:alice: wrong amount" {
		t.Fatalf("rejected task: %+v, %v", got, err)
	}
	if got, err := f.c.Wait(ctx, "ev-no-next"); err != nil || got.State != task.Cancelled {
		t.Fatalf("the rejected task's dependent: %+v, %v", got, err)
	}
	waitAudit(t, f, "reject", "ev-no")
	op.mustGet("/task/ev-no", `id="approval"`, "Rejected by", "wrong amount")

	seq, err := f.c.Signal(ctx, "approval.console.ev-sig", map[string]bool{"paid": true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.c.Wait(ctx, "ev-sig"); err != nil || got.EventSeq != seq {
		t.Fatalf("ev-sig: %+v, %v", got, err)
	}
	op.mustGet("/task/ev-sig", `id="event-arrived"`, "AX_EVENTS sequence", `&#34;paid&#34;: true`)
}
