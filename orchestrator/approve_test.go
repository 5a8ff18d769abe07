package orchestrator_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TestApproveRacesEvent: approvals and events sent at the same moment to
// the same event tasks end each task exactly once: either the approval
// won (the Approve call succeeded, the task holds it and no event) or the
// event did (the Approve call was refused as a conflict, the task holds
// the event's data); its history has exactly one end. A decision's
// reason and name are bounded however long the request's.
func TestApproveRacesEvent(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	c.Caller = "racer"
	ctx := testenv.Context(t, 2*time.Minute)
	const n = 30
	var specs []task.Spec
	for i := range n {
		specs = append(specs, eventSpec(fmt.Sprint("race-", i), "race.done", fmt.Sprint("r", i), time.Hour))
	}
	if _, err := c.SubmitGraph(ctx, specs); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		awaiting(ctx, t, c, s.ID)
	}
	approveErr := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			approve := func() { _, approveErr[i] = c.Approve(ctx, specs[i].ID, sdk.ApproveOptions{Reason: "race"}) }
			signal := func() {
				if _, err := c.Signal(ctx, fmt.Sprint("race.done.r", i), i); err != nil {
					t.Error(err)
				}
			}
			// Half of them with the event stored first, half with the
			// approval sent first; each the other right after.
			if i%2 == 0 {
				signal()
				approve()
				return
			}
			var both sync.WaitGroup
			both.Add(1)
			go func() { defer both.Done(); approve() }()
			signal()
			both.Wait()
		}()
	}
	wg.Wait()
	approved := 0
	for i, s := range specs {
		got, err := c.Wait(ctx, s.ID)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v, %v", s.ID, got, err)
		}
		switch {
		case approveErr[i] == nil:
			approved++
			if got.Approval == nil || got.Approval.By != "racer" || got.EventSeq != 0 || !strings.Contains(string(got.Result), `"approved":true`) {
				t.Fatalf("%s: approval accepted, but the task is %+v", s.ID, got)
			}
		case errors.Is(approveErr[i], sdk.ErrConflict):
			if got.Approval != nil || got.EventSeq == 0 || string(got.Result) != fmt.Sprint(i) {
				t.Fatalf("%s: approval refused (%v), but the task is %+v", s.ID, approveErr[i], got)
			}
		default:
			t.Fatalf("%s: approve: %v", s.ID, approveErr[i])
		}
		h, err := c.History(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		ends := 0
		for _, ev := range h {
			if ev.Event.To.Terminal() {
				ends++
			}
		}
		if ends != 1 {
			t.Fatalf("%s ended %d times: %+v", s.ID, ends, h)
		}
	}
	t.Logf("%d of %d approvals won over their event", approved, n)

	// An approval after the event was applied: refused, the event stays.
	after := eventSpec("after-event", "race.done", "after", time.Hour)
	if _, err := c.Submit(ctx, after); err != nil {
		t.Fatal(err)
	}
	awaiting(ctx, t, c, after.ID)
	if _, err := c.Signal(ctx, "race.done.after", "paid"); err != nil {
		t.Fatal(err)
	}
	waitResult(ctx, t, c, after.ID, `"paid"`)
	if _, err := c.Approve(ctx, after.ID, sdk.ApproveOptions{Reject: true}); !errors.Is(err, sdk.ErrConflict) || !strings.Contains(err.Error(), "already succeeded: event race.done.after") {
		t.Fatalf("a rejection after the event: %v", err)
	}

	// A long name and reason are bounded in the record.
	long := eventSpec("long", "race.done", "long", time.Hour)
	if _, err := c.Submit(ctx, long); err != nil {
		t.Fatal(err)
	}
	awaiting(ctx, t, c, "long")
	got, err := c.Approve(ctx, "long", sdk.ApproveOptions{Reject: true, Reason: strings.Repeat("r", 10000), By: strings.Repeat("b", 10000)})
	if err != nil || got.Approval == nil || len(got.Approval.By) > 300 || len(got.Approval.Reason) > task.MaxErrorBytes || len(got.Errors[0].Error) > task.MaxErrorBytes {
		t.Fatalf("a long rejection: by %d bytes, reason %d, %v", len(got.Approval.By), len(got.Approval.Reason), err)
	}
}
