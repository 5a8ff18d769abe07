// Command orderworkflow is an order workflow on AX: reserve the stock,
// wait for the payment or a timeout, then ship — or release the stock.
//
//	go run ./examples/orderworkflow                   # an embedded NATS and orchestrator
//	go run ./examples/orderworkflow -nats nats://…    # an AX deployment (its orchestrators running)
//
// It is one graph per order (see Submit): reserve, a handler with durable
// steps; payment, an event task (wait_for {subject: "payment", match: the
// order id, timeout}) that succeeds with the data of the event
// sdk.Client.Signal publishes on "payment.<order id>"; ship (all_succeeded)
// reading that data as its input; release (any_failed) when the payment
// expired. It runs two orders: one paid, shipped; one never paid, expired
// and released.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func main() {
	url := flag.String("nats", "", "the NATS URL of an AX deployment (default: start an embedded one)")
	timeout := flag.Duration("payment-timeout", 3*time.Second, "how long an order waits for its payment")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := run(ctx, os.Stdout, *url, *timeout); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// run runs the two orders and returns the final records of their tasks,
// the paid order's first, each in the order reserve, payment, ship, release.
func run(ctx context.Context, out io.Writer, url string, paymentTimeout time.Duration) ([]*task.Task, error) {
	w := NewWarehouse(map[string]int{"book": 10}, map[string]int{"book": 12})
	var (
		c  *sdk.Client
		ex *executor.Executor
	)
	if url == "" {
		env, err := axtest.New(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = env.Close(context.Background()) }()
		c, ex = env.Client, env.Executor
		Register(ex, w)
	} else {
		var err error
		if c, err = sdk.Connect(ctx, url); err != nil {
			return nil, err
		}
		defer c.Close()
		if ex, err = executor.New(c.Conn(), executor.Config{}); err != nil {
			return nil, err
		}
		Register(ex, w)
		if err := ex.Start(ctx); err != nil {
			return nil, err
		}
		defer func() { _ = ex.Stop(context.Background()) }()
	}

	suffix := fmt.Sprint(time.Now().UnixNano()) // fresh ids on a shared deployment
	paid, unpaid := Order{ID: "order-paid-" + suffix, SKU: "book", Qty: 2}, Order{ID: "order-unpaid-" + suffix, SKU: "book", Qty: 3}
	for _, o := range []Order{paid, unpaid} {
		if _, err := Submit(ctx, c, o, paymentTimeout); err != nil {
			return nil, err
		}
	}
	// The paid order: once its payment task waits (an event published
	// earlier would not be lost either), the payment arrives.
	if err := waitRegistered(ctx, c, OrderIDs(paid.ID).Payment); err != nil {
		return nil, err
	}
	if err := Pay(ctx, c, paid.ID, Payment{Amount: 24, Ref: "pay-" + paid.ID}); err != nil {
		return nil, err
	}
	var ended []*task.Task
	for _, o := range []Order{paid, unpaid} {
		ids := OrderIDs(o.ID)
		for _, id := range []string{ids.Reserve, ids.Payment, ids.Ship, ids.Release} {
			t, err := c.Wait(ctx, id)
			if err != nil {
				return nil, err
			}
			ended = append(ended, t)
			fmt.Fprintf(out, "%-40s %-9s %s\n", id, t.State, outcome(t))
		}
	}
	fmt.Fprintf(out, "stock of book: %d (10 - 2 shipped)\n", w.Stock("book"))
	return ended, nil
}

// waitRegistered waits until the event task id waits for its event.
func waitRegistered(ctx context.Context, c *sdk.Client, id string) error {
	for {
		t, err := c.Get(ctx, id)
		switch {
		case err == nil && t.EventWaitSince != nil:
			return nil
		case err == nil && t.State.Terminal():
			return fmt.Errorf("%s ended %s before it waited: %s", id, t.State, t.Reason)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not waiting for its event: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// outcome is a task's result, or why it ended without one.
func outcome(t *task.Task) string {
	if t.State == task.Succeeded {
		var v any
		_ = json.Unmarshal(t.Result, &v)
		b, _ := json.Marshal(v)
		return string(b)
	}
	return t.Reason
}
