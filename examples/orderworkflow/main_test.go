package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/task"
)

// TestOrderWorkflow runs two orders against an embedded NATS and
// orchestrator: one paid (shipped with the payment's data, its release
// cancelled), one never paid (its payment expired, ship cancelled, the
// stock released). The first order's reserve fails once after its
// durable steps (the notification): its retry does not reserve again.
// Outcomes are read from the tasks' records and histories.
func TestOrderWorkflow(t *testing.T) {
	env := axtest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := NewWarehouse(map[string]int{"book": 10}, map[string]int{"book": 12})
	paid, unpaid := Order{ID: "o-1", SKU: "book", Qty: 2}, Order{ID: "o-2", SKU: "book", Qty: 3}
	w.FailNotify(paid.ID, 1)
	Register(env.Executor, w)

	if _, err := Submit(ctx, env.Client, paid, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := Submit(ctx, env.Client, unpaid, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := waitRegistered(ctx, env.Client, OrderIDs(paid.ID).Payment); err != nil {
		t.Fatal(err)
	}
	if err := Pay(ctx, env.Client, paid.ID, Payment{Amount: 24, Ref: "card-1"}); err != nil {
		t.Fatal(err)
	}

	// The paid order.
	ids := OrderIDs(paid.ID)
	reserve := env.WaitTask(t, ids.Reserve)
	axtest.RequireSucceeded(t, reserve)
	if reserve.Attempt != 2 || len(reserve.Steps) != 3 || reserve.Steps[1].Name != "reserve" || reserve.Steps[1].Attempt != 1 ||
		reserve.Steps[2].Name != "notify" || reserve.Steps[2].Attempt != 2 {
		t.Fatalf("reserve: attempt %d, steps %+v; want attempt 2, price and reserve stored in attempt 1, notify in 2", reserve.Attempt, reserve.Steps)
	}
	if got := axtest.Result[Reservation](t, reserve); got != (Reservation{Hold: "hold-o-1", Total: 24}) {
		t.Fatalf("reservation %+v", got)
	}
	payment := env.WaitTask(t, ids.Payment)
	axtest.RequireSucceeded(t, payment)
	if payment.EventSeq == 0 || !strings.Contains(payment.Reason, "event payment.o-1 (sequence") {
		t.Fatalf("payment: event_seq %d, reason %q", payment.EventSeq, payment.Reason)
	}
	ship := env.WaitTask(t, ids.Ship)
	axtest.RequireSucceeded(t, ship)
	if got := axtest.Result[Shipment](t, ship); got != (Shipment{Tracking: "track-o-1", Paid: Payment{Amount: 24, Ref: "card-1"}}) {
		t.Fatalf("shipment %+v", got)
	}
	release := env.WaitTask(t, ids.Release)
	if release.State != task.Cancelled || !strings.Contains(release.Reason, "any_failed: no upstream failed") {
		t.Fatalf("release of the paid order: %s %q", release.State, release.Reason)
	}

	// The unpaid order.
	ids = OrderIDs(unpaid.ID)
	axtest.RequireSucceeded(t, env.WaitTask(t, ids.Reserve))
	payment = env.WaitTask(t, ids.Payment)
	if payment.State != task.Expired || payment.EventWaitSince == nil || !strings.Contains(payment.Reason, "passed while waiting") {
		t.Fatalf("payment of the unpaid order: %s %q (waiting since %v)", payment.State, payment.Reason, payment.EventWaitSince)
	}
	ship = env.WaitTask(t, ids.Ship)
	if ship.State != task.Cancelled || !strings.Contains(ship.Reason, "upstream o-2-payment is expired") {
		t.Fatalf("ship of the unpaid order: %s %q", ship.State, ship.Reason)
	}
	release = env.WaitTask(t, ids.Release)
	axtest.RequireSucceeded(t, release)
	if got := axtest.Result[string](t, release); got != "released 3 of book: payment expired" {
		t.Fatalf("release: %q", got)
	}

	// Histories: the unpaid payment waited, then expired; nothing ran it.
	hist, err := env.Client.History(ctx, ids.Payment)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, h := range hist {
		states = append(states, string(h.Event.To))
		if h.Event.To == task.Running || h.Event.To == task.Ready {
			t.Fatalf("an event task was %s: %+v", h.Event.To, h.Event)
		}
	}
	if states[0] != string(task.Waiting) || states[len(states)-1] != string(task.Expired) {
		t.Fatalf("payment history %v", states)
	}
	// The paid order's ship ran once, read the payment as its input.
	hist, err = env.Client.History(ctx, OrderIDs(paid.ID).Ship)
	if err != nil {
		t.Fatal(err)
	}
	last := hist[len(hist)-1].Event
	var sh Shipment
	if err := json.Unmarshal(last.Task.Result, &sh); err != nil || last.To != task.Succeeded || sh.Paid.Ref != "card-1" {
		t.Fatalf("ship's last event %+v (%v)", last, err)
	}

	// The services: each order reserved once (the retry of o-1's reserve
	// found its step stored), one shipment, one release; the stock is the
	// initial stock less the shipped order.
	if r, s, rel, n := w.Calls("reserve"), w.Calls("ship"), w.Calls("release"), w.Calls("notify"); r != 2 || s != 1 || rel != 1 || n != 3 {
		t.Fatalf("calls: reserve %d ship %d release %d notify %d; want 2 1 1 3", r, s, rel, n)
	}
	if got := w.Stock("book"); got != 8 || w.Held("o-1") != 0 || w.Held("o-2") != 0 {
		t.Fatalf("stock %d, held %d and %d; want 8, 0, 0", got, w.Held("o-1"), w.Held("o-2"))
	}
}

// TestRun runs the command's own path (an embedded AX, two orders).
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	ended, err := run(ctx, &out, "", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := []task.State{task.Succeeded, task.Succeeded, task.Succeeded, task.Cancelled, // paid: shipped
		task.Succeeded, task.Expired, task.Cancelled, task.Succeeded} // unpaid: released
	if len(ended) != len(want) {
		t.Fatalf("%d tasks ended, want %d:\n%s", len(ended), len(want), out.String())
	}
	for i, tk := range ended {
		if tk.State != want[i] {
			t.Fatalf("%s is %s, want %s:\n%s", tk.ID, tk.State, want[i], out.String())
		}
	}
	if !strings.Contains(out.String(), "stock of book: 8") {
		t.Fatalf("output:\n%s", out.String())
	}
}
