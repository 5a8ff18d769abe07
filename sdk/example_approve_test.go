package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Approve decides an event task waiting for its event in place of the
// event: a person's approval (the task succeeds with the approval as its
// result) or rejection (it fails for good, naming who and why).
func ExampleClient_Approve() {
	env, err := axtest.New(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	defer env.Close(context.Background())
	ctx := context.Background()
	c := env.Client
	c.Caller = "alice" // recorded as who decided
	for _, id := range []string{"refund-1", "refund-2"} {
		_, _ = c.Submit(ctx, task.Spec{ID: id, Type: "refund.approval",
			WaitFor: &task.EventWait{Subject: "refund.approved", Match: id, Timeout: task.Duration(24 * time.Hour)}})
		for { // an approval is for a task that waits for its event
			if t, err := c.Get(ctx, id); err == nil && t.EventWaitSince != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t, err := c.Approve(ctx, "refund-1", sdk.ApproveOptions{Reason: "receipt checked"})
	if err != nil {
		panic(err)
	}
	var a task.Approval
	_ = json.Unmarshal(t.Result, &a)
	fmt.Println(t.ID, t.State, a.Approved, a.By, a.Reason)

	t, err = c.Approve(ctx, "refund-2", sdk.ApproveOptions{Reject: true, Reason: "no receipt"})
	if err != nil {
		panic(err)
	}
	fmt.Println(t.ID, t.State, t.Errors[0].Error)

	_, err = c.Approve(ctx, "refund-2", sdk.ApproveOptions{})
	fmt.Println(err)
	// Output:
	// refund-1 succeeded true alice receipt checked
	// refund-2 failed rejected by alice: no receipt
	// approve refund-2: command refused: task refund-2 is already failed: rejected by alice: no receipt
}
