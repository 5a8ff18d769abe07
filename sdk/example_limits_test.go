package sdk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// SetLimit bounds, across the cluster, the tasks of each key matching a
// pattern that are dispatched or running at once: here 2 per customer.
// Tasks name their key in ConcurrencyKey; Limits lists the limits set at
// run time with the keys in use.
func ExampleClient_SetLimit() {
	url, stop := startAX()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _ := sdk.Connect(ctx, url)
	defer c.Close()

	limit := task.KeyLimit{Key: "customer.*", Concurrency: 2}
	if err := c.SetLimit(ctx, limit, "one customer's import must not take every mailer"); err != nil {
		panic(err)
	}
	limits, err := c.Limits(ctx)
	if err != nil {
		panic(err)
	}
	for _, l := range limits {
		fmt.Printf("%s: %d at once (%s)\n", l.Limit.Key, l.Limit.Concurrency, l.Limit.Reason)
	}

	var ids []string
	for range 5 {
		spec, _ := task.New("email.send", nil)
		spec.ConcurrencyKey = "customer.42" // at most 2 of these run at once
		id, _ := c.Submit(ctx, spec)
		ids = append(ids, id)
	}
	for _, id := range ids {
		t, _ := c.Wait(ctx, id)
		fmt.Println(t.State)
	}
	if err := c.DeleteLimit(ctx, "customer.*", "import done"); err != nil {
		panic(err)
	}
	// Output:
	// customer.*: 2 at once (one customer's import must not take every mailer)
	// succeeded
	// succeeded
	// succeeded
	// succeeded
	// succeeded
}
