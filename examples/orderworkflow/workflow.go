package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// The task types of the workflow. order.payment has no handler: it is an
// event task (wait_for), ended by a payment event or by its timeout.
const (
	TypeReserve = "order.reserve"
	TypePayment = "order.payment"
	TypeShip    = "order.ship"
	TypeRelease = "order.release"

	// PaymentSubject is the event subject payments are signalled on:
	// "payment.<order id>" (sdk.Client.Signal), matched by the order id.
	PaymentSubject = "payment"
)

// Order is the payload of every task of an order.
type Order struct {
	// ID names the order; it is the payment event's match, so one token
	// of [A-Za-z0-9_-].
	ID  string `json:"id"`
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Payment is the data of a payment event: the payment task's result,
// which ship reads as its input.
type Payment struct {
	Amount int    `json:"amount"`
	Ref    string `json:"ref"`
}

// Reservation is reserve's result.
type Reservation struct {
	Hold  string `json:"hold"`
	Total int    `json:"total"`
}

// Shipment is ship's result.
type Shipment struct {
	Tracking string  `json:"tracking"`
	Paid     Payment `json:"paid"`
}

// IDs are the ids of an order's four tasks.
type IDs struct {
	Reserve, Payment, Ship, Release string
}

// OrderIDs returns the task ids of an order.
func OrderIDs(order string) IDs {
	return IDs{Reserve: order + "-reserve", Payment: order + "-payment", Ship: order + "-ship", Release: order + "-release"}
}

// Submit submits an order's workflow as one graph:
//
//	reserve ──▶ payment (wait_for payment.<order id>, timeout) ──▶ ship     (all_succeeded: paid)
//	                                                          └──▶ release  (any_failed: expired or failed)
//
// payment waits for its event once reserve succeeded; ship runs with the
// payment's data as its input; release runs when payment did not succeed
// (it expired, or reserve failed and cancelled it) and gives the stock back.
// Exactly one of ship and release runs; the other is cancelled by its
// trigger rule.
func Submit(ctx context.Context, c *sdk.Client, o Order, paymentTimeout time.Duration) (IDs, error) {
	ids := OrderIDs(o.ID)
	spec := func(id, typ string) (task.Spec, error) {
		s, err := task.New(typ, o)
		s.ID = id
		return s, err
	}
	reserve, err := spec(ids.Reserve, TypeReserve)
	if err != nil {
		return ids, err
	}
	payment, _ := spec(ids.Payment, TypePayment)
	payment.DependsOn = []string{ids.Reserve}
	payment.WaitFor = &task.EventWait{Subject: PaymentSubject, Match: o.ID, Timeout: task.Duration(paymentTimeout)}
	ship, _ := spec(ids.Ship, TypeShip)
	ship.DependsOn = []string{ids.Payment}
	ship.TriggerRule = task.TriggerAllSucceeded
	release, _ := spec(ids.Release, TypeRelease)
	release.DependsOn = []string{ids.Payment}
	release.TriggerRule = task.TriggerAnyFailed
	if _, err := c.SubmitGraph(ctx, []task.Spec{reserve, payment, ship, release}); err != nil {
		return ids, fmt.Errorf("submit order %s: %w", o.ID, err)
	}
	return ids, nil
}

// Pay signals an order's payment: the order's payment task succeeds with p
// as its result, whether it waits already or registers its wait later.
func Pay(ctx context.Context, c *sdk.Client, order string, p Payment) error {
	_, err := c.Signal(ctx, PaymentSubject+"."+order, p)
	return err
}

// Register registers the workflow's handlers on ex, working on w.
func Register(ex *executor.Executor, w *Warehouse) {
	// reserve: durable steps, so that a retry (the notification below
	// failing, the executor dying) never prices or reserves twice.
	executor.HandleTyped(ex, TypeReserve, func(ctx context.Context, job *executor.Job, o Order) (any, error) {
		total, err := executor.Step(ctx, job, "price", func(context.Context) (int, error) {
			return w.Price(o.SKU, o.Qty)
		})
		if err != nil {
			return nil, executor.Permanent(err)
		}
		hold, err := executor.Step(ctx, job, "reserve", func(context.Context) (string, error) {
			return w.Reserve(o.ID, o.SKU, o.Qty)
		})
		if err != nil {
			return nil, err
		}
		if _, err := job.Step(ctx, "notify", func(context.Context) (any, error) {
			return nil, w.Notify(o.ID, "reserved "+hold)
		}); err != nil {
			return nil, err
		}
		return Reservation{Hold: hold, Total: total}, nil
	})

	// ship: runs once payment succeeded; its input is the payment event's data.
	executor.HandleTyped(ex, TypeShip, func(ctx context.Context, job *executor.Job, o Order) (any, error) {
		var paid Payment
		if err := job.UpstreamResult(ctx, OrderIDs(o.ID).Payment, &paid); err != nil {
			return nil, fmt.Errorf("read the payment of order %s: %w", o.ID, err)
		}
		tracking, err := executor.Step(ctx, job, "ship", func(context.Context) (string, error) {
			return w.Ship(o.ID)
		})
		if err != nil {
			return nil, err
		}
		return Shipment{Tracking: tracking, Paid: paid}, nil
	})

	// release: the compensation, when payment expired (or failed).
	executor.HandleTyped(ex, TypeRelease, func(ctx context.Context, job *executor.Job, o Order) (any, error) {
		in, err := job.Input(ctx, OrderIDs(o.ID).Payment)
		if err != nil {
			return nil, err
		}
		return executor.Step(ctx, job, "release", func(context.Context) (string, error) {
			n := w.Release(o.ID)
			return fmt.Sprintf("released %d of %s: payment %s", n, o.SKU, in.State), nil
		})
	})
}

// Warehouse is an in-memory stand-in for the services the handlers call:
// stock with reservations, shipping and notifications. Reserve, Ship and
// Release are idempotent by order id, as a real service's calls should be
// (a durable step's fn runs at least once).
type Warehouse struct {
	mu       sync.Mutex
	stock    map[string]int
	price    map[string]int
	held     map[string]hold // order → what it holds
	shipped  map[string]string
	calls    map[string]int // "reserve", "ship", "release", "notify" → calls
	failNext map[string]int // "notify" → failures still to inject
}

// NewWarehouse returns a warehouse holding stock of each SKU at a unit price.
func NewWarehouse(stock, price map[string]int) *Warehouse {
	w := &Warehouse{stock: map[string]int{}, price: map[string]int{}, held: map[string]hold{}, shipped: map[string]string{},
		calls: map[string]int{}, failNext: map[string]int{}}
	for k, v := range stock {
		w.stock[k] = v
	}
	for k, v := range price {
		w.price[k] = v
	}
	return w
}

type hold struct {
	sku string
	qty int
}

// ErrOutOfStock is returned by Reserve when there is not enough stock.
var ErrOutOfStock = errors.New("out of stock")

// Price is the order's total.
func (w *Warehouse) Price(sku string, qty int) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.price[sku]
	if !ok || qty <= 0 {
		return 0, fmt.Errorf("no price for %d of %q", qty, sku)
	}
	return p * qty, nil
}

// Reserve holds qty of sku for the order.
func (w *Warehouse) Reserve(order, sku string, qty int) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls["reserve"]++
	if _, ok := w.held[order]; !ok {
		if w.stock[sku] < qty {
			return "", fmt.Errorf("reserve %d of %s: %w", qty, sku, ErrOutOfStock)
		}
		w.stock[sku] -= qty
		w.held[order] = hold{sku, qty}
	}
	return "hold-" + order, nil
}

// Ship ships the order's held stock.
func (w *Warehouse) Ship(order string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls["ship"]++
	if t, ok := w.shipped[order]; ok {
		return t, nil
	}
	if _, ok := w.held[order]; !ok {
		return "", fmt.Errorf("ship %s: nothing held", order)
	}
	delete(w.held, order)
	w.shipped[order] = "track-" + order
	return w.shipped[order], nil
}

// Release gives the order's held stock back and returns how much.
func (w *Warehouse) Release(order string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls["release"]++
	h, ok := w.held[order]
	if !ok {
		return 0
	}
	delete(w.held, order)
	w.stock[h.sku] += h.qty
	return h.qty
}

// Notify tells the customer; FailNotify makes an order's next calls fail.
func (w *Warehouse) Notify(order, msg string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls["notify"]++
	if w.failNext["notify "+order] > 0 {
		w.failNext["notify "+order]--
		return errors.New("mail server down")
	}
	return nil
}

// FailNotify makes the next n notifications of an order fail (to show
// that a retry of reserve does not reserve again). Per order, so which of
// several orders runs first does not decide whose notification fails.
func (w *Warehouse) FailNotify(order string, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failNext["notify "+order] += n
}

// Calls counts the calls of one service (reserve, ship, release, notify).
func (w *Warehouse) Calls(what string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[what]
}

// Stock is the stock of a SKU not held by any order.
func (w *Warehouse) Stock(sku string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stock[sku]
}

// Held is how much an order holds.
func (w *Warehouse) Held(order string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held[order].qty
}
