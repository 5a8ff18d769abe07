// Package scan opens short-lived ordered consumers for one-off reads of a
// stream (a task's history, the dead-letter queue, waiting for a task) and
// removes them afterwards: nats.go leaves an ordered consumer on the server
// for five minutes of inactivity, so a client that reads often would pile
// them up until the server refuses new ones.
package scan

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// inactiveThreshold removes a consumer whose reader vanished (a crash before
// Close) soon rather than in five minutes.
const inactiveThreshold = 30 * time.Second

// Open creates an ordered consumer on a stream. The returned close deletes
// it; call it when done reading.
func Open(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, func(), error) {
	if cfg.InactiveThreshold == 0 {
		cfg.InactiveThreshold = inactiveThreshold
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", stream, err)
	}
	return cons, func() {
		info := cons.CachedInfo()
		if info == nil || info.Name == "" {
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, stream, info.Name) // it expires anyway
	}, nil
}
