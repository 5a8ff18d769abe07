package lifecycle

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/task"
)

// TestApprove: an event task waiting for its event is approved (succeeded,
// the approval its result and record) or rejected (failed for good, its
// error "rejected by <who>: <reason>", dead-lettered and its dependents
// resolved); the same decision again is a replay; a task that is not an
// event task, waits for its upstream, or ended is refused saying which; a
// re-drive of a rejected task waits again without the rejection.
func TestApprove(t *testing.T) {
	e := env()
	spec := task.Spec{ID: "ok", Type: "approval", WaitFor: &task.EventWait{Subject: "approval", Match: "ok", Timeout: task.Duration(time.Hour)}}
	spec.Normalize()
	w := Create(&task.Task{Spec: spec, SubmittedAt: e.Now}, "", "", func() bool { return true }, e).Next
	if !AwaitingEvent(&w) {
		t.Fatalf("not waiting: %+v", w)
	}

	yes := Approve(&w, task.Approval{Approved: true, By: "alice", Reason: "looks right"}, e)
	n := yes.Next
	if yes.Verdict != Apply || n.State != task.Succeeded || n.Approval == nil || !n.Approval.Approved || n.Approval.By != "alice" ||
		!n.Approval.At.Equal(e.Now) || yes.Reason != "approved by alice: looks right" || n.FinishedAt == nil {
		t.Fatalf("approve: %+v %q", n, yes.Reason)
	}
	var res map[string]any
	if err := json.Unmarshal(n.Result, &res); err != nil || res["approved"] != true || res["by"] != "alice" || res["reason"] != "looks right" || res["at"] == nil {
		t.Fatalf("approval result %s: %v", n.Result, err)
	}
	if !task.CanTransition(w.State, n.State) {
		t.Fatalf("%s > %s not in the table", w.State, n.State)
	}
	if got := Effects(nil, &n, e.Now); !slices.Contains(got, ReleaseDependents) || !slices.Contains(got, DisarmTimers) {
		t.Fatalf("effects of an approval: %v", got)
	}
	if v := Approve(&n, task.Approval{Approved: true, By: "alice", Reason: "looks right"}, e).Verdict; v != Replay {
		t.Fatalf("the same approval again: %v", v)
	}
	if d := Approve(&n, task.Approval{By: "bob"}, e); d.Verdict != Refuse || !strings.Contains(d.Err.Error(), "already succeeded: approved by alice") {
		t.Fatalf("a rejection after an approval: %v %v", d.Verdict, d.Err)
	}
	// An event that arrives after the approval changes nothing.
	if v := EventArrived(&n, 3, []byte("1"), e).Verdict; v == Apply {
		t.Fatal("an event applied to an approved task")
	}

	no := Approve(&w, task.Approval{By: "bob", Reason: "wrong amount"}, e)
	r := no.Next
	if no.Verdict != Apply || r.State != task.Failed || r.Approval == nil || r.Approval.Approved || len(r.Result) != 0 ||
		len(r.Errors) != 1 || r.Errors[0].Error != "rejected by bob: wrong amount" || no.Reason != "rejected by bob: wrong amount" {
		t.Fatalf("reject: %+v %q", r, no.Reason)
	}
	if got := Effects(nil, &r, e.Now); !slices.Contains(got, DeadLetter) || !slices.Contains(got, CancelDependents) || slices.Contains(got, ArmRetry) {
		t.Fatalf("effects of a rejection: %v", got)
	}
	if got := (task.Approval{}).RejectionError(); got != "rejected" {
		t.Fatalf("anonymous rejection: %q", got)
	}
	// A re-drive of the rejected task waits for its event (or an
	// approval) again.
	rd := Redrive(&r, false, "again", e)
	if rd.Verdict != Apply || !AwaitingEvent(&rd.Next) || rd.Next.Approval != nil || len(rd.Next.Errors) != 0 {
		t.Fatalf("re-drive of a rejection: %+v", rd.Next)
	}

	plain := task.Task{Spec: task.Spec{ID: "plain", Type: "x"}, State: task.Waiting}
	if d := Approve(&plain, task.Approval{Approved: true}, e); d.Verdict != Refuse || !strings.Contains(d.Err.Error(), "not an event task") {
		t.Fatalf("a task without wait_for: %v %v", d.Verdict, d.Err)
	}
	dep := task.Task{Spec: spec, State: task.Waiting}
	dep.DependsOn = []string{"up"}
	if d := Approve(&dep, task.Approval{Approved: true}, e); d.Verdict != Refuse || !strings.Contains(d.Err.Error(), "not waiting for its event yet") {
		t.Fatalf("a task waiting for its upstream: %v %v", d.Verdict, d.Err)
	}
	exp := DeadlinePassed(&w, &Env{Now: w.ExpiresAt.Add(time.Second)}).Next
	if d := Approve(&exp, task.Approval{Approved: true}, e); d.Verdict != Refuse || !strings.Contains(d.Err.Error(), "already expired") {
		t.Fatalf("an expired task: %v %v", d.Verdict, d.Err)
	}
}
