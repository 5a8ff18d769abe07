package orchestrator

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/topology"
)

// trimInterval is how often the queue streams are trimmed to their
// consumers' acknowledgement floors: what was handled stays stored at most
// about this long.
const trimInterval = time.Second

// trimLoop trims AX's queue streams (submissions, dispatches, reports) by
// consumer position until ctx ends (see internal/queue): acknowledging a
// message costs no delete, and a trim removes any number of handled
// messages in one purge. Several orchestrators trimming at once is
// harmless. A failed trim is tried again at the next tick.
func (o *Orchestrator) trimLoop(ctx context.Context) {
	defer o.bg.Done()
	done := map[string]queue.Trimmed{}
	told := map[string]bool{}
	failures := 0
	t := time.NewTicker(trimInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var failed error
		for _, name := range topology.Queues {
			if done[name] == nil {
				done[name] = queue.Trimmed{}
			}
			if err := queue.Trim(ctx, o.js, name, done[name]); err != nil && ctx.Err() == nil {
				failed = err
			}
			if !told[name] {
				told[name] = true
				o.noteWorkQueue(ctx, name)
			}
		}
		if failed == nil {
			failures = 0
			continue
		}
		if failures++; failures == 1 || failures%60 == 0 {
			o.log.Warn("cannot trim the queue streams; retrying", slog.Any("error", failed), slog.Int("failures", failures))
		}
	}
}

// noteWorkQueue tells the operator once when a queue stream kept the
// work-queue retention of an earlier version.
func (o *Orchestrator) noteWorkQueue(ctx context.Context, name string) {
	st, err := o.js.Stream(ctx, name)
	if err != nil || st.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
		return
	}
	o.log.Info("queue stream has work-queue retention (created by an earlier version): each acknowledgement deletes a message, one fsync each with sync_interval always; recreate the stream when it is drained to trim it by consumer position instead (deploy/README.md)",
		slog.String("stream", name))
}
