package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Direct reports. An executor first sends its report as a core NATS
// request on ax.report.<type>; the orchestrator that takes it applies it
// (the outcome's compare-and-set, then its effects) and only then replies.
// The report itself is never stored: with fsync on every write that is one
// fsync less per task, and one delivery and ack less in any mode. Any
// answer but "applied", or none, and the executor publishes the report on
// task.completed.<type> as before, where it waits durably for an
// orchestrator. Applying a report twice is harmless (the second finds the
// attempt ended and only ensures its effects), so a reply lost after the
// write costs one redundant stored report, never a second outcome.

const (
	// reportTimeout bounds one direct report's application; the executor
	// waits a little longer (executor.directReportTimeout) before it
	// stores the report instead.
	reportTimeout = 4 * time.Second
)

// reportBacklog bounds the direct reports waiting for a worker: beyond it
// an orchestrator answers "busy" at once and the executor stores the
// report, so the queue ahead of a report never holds it long.
func (o *Orchestrator) reportBacklog() int { return 4 * o.cfg.Workers }

// serveReports answers direct reports (ax.report.<type>) until ctx ends, in
// one queue group with the other orchestrators, on o.cfg.Workers workers
// owned by o.bg. When ctx ends, the reports still queued are answered
// "stopping", so their executors store them at once.
func (o *Orchestrator) serveReports(ctx context.Context) error {
	ch := make(chan *nats.Msg, o.reportBacklog())
	sub, err := o.nc.QueueSubscribe(subject.ReportAll, claimQueue, func(m *nats.Msg) {
		select {
		case ch <- m:
		default:
			o.replyReport(m, "orchestrator busy: store the report")
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", subject.ReportAll, err)
	}
	// No slow-consumer drops: the callback never blocks, the channel
	// bounds what waits.
	_ = sub.SetPendingLimits(-1, -1)
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		<-ctx.Done()
		_ = sub.Unsubscribe()
		for {
			select {
			case m := <-ch:
				o.replyReport(m, "orchestrator stopping: store the report")
			default:
				return
			}
		}
	}()
	for range o.cfg.Workers {
		o.bg.Add(1)
		go func() {
			defer o.bg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-ch:
					o.answerReport(ctx, m)
				}
			}
		}()
	}
	return nil
}

// answerReport applies one direct report and replies.
func (o *Orchestrator) answerReport(ctx context.Context, m *nats.Msg) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	var reason string
	if err := o.acceptReport(rctx, subject.TypeFromReport(m.Subject), m.Subject, m.Data); err != nil {
		o.log.Debug("direct report not applied; its executor stores it", slog.Any("error", err))
		reason = err.Error()
	}
	o.replyReport(m, reason)
}

// replyReport answers a direct report: applied when reason is empty.
func (o *Orchestrator) replyReport(m *nats.Msg, reason string) {
	data, _ := json.Marshal(task.ReportReply{Error: reason})
	if err := m.Respond(data); err != nil {
		o.log.Debug("report reply not sent", slog.Any("error", err))
	}
}
