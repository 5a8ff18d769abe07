package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// request is a core NATS request an orchestrator answers, and when it
// arrived.
type request struct {
	m       *nats.Msg
	arrived time.Time
}

// serveRequests answers the requests on subj until ctx ends, in one queue
// group (claimQueue) with the other orchestrators: up to backlog wait for
// one of workers, goroutines owned by o.bg, each calling answer. A request
// that finds the backlog full, and each still waiting once ctx ends, is
// handed to full (nil: dropped, its sender asks again after its timeout).
// The subscription's callback never blocks, so NATS drops nothing as a
// slow consumer: the backlog bounds what waits.
func (o *Orchestrator) serveRequests(ctx context.Context, subjs []string, workers, backlog int,
	answer func(context.Context, request), full func(*nats.Msg)) error {
	if full == nil {
		full = func(*nats.Msg) {}
	}
	ch := make(chan request, backlog)
	subs := make([]*nats.Subscription, 0, len(subjs))
	unsubscribe := func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
	for _, subj := range subjs {
		sub, err := o.nc.QueueSubscribe(subj, claimQueue, func(m *nats.Msg) {
			select {
			case ch <- request{m, time.Now()}:
			default:
				full(m)
			}
		})
		if err != nil {
			unsubscribe()
			return fmt.Errorf("subscribe to %s: %w", subj, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		subs = append(subs, sub)
	}
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		<-ctx.Done()
		unsubscribe()
		for {
			select {
			case r := <-ch:
				full(r.m)
			default:
				return
			}
		}
	}()
	for range workers {
		o.bg.Add(1)
		go func() {
			defer o.bg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case r := <-ch:
					answer(ctx, r)
				}
			}
		}()
	}
	return nil
}
