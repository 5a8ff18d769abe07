package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// Direct requests. A producer's submission or graph, and an executor's
// report, are first sent as a core NATS request on ax.direct.<the subject
// they would be stored on>; the orchestrator that takes one applies it
// (creates the tasks, or applies the outcome: the same checks,
// compare-and-sets and effects as from the stream) and only then replies.
// The message itself is never stored: with fsync on every write that is one
// fsync less per submission and per attempt, and in any mode one delivery
// and ack less. Any answer but "applied", or none, and the sender stores
// the message on its own subject as before, where it waits durably for an
// orchestrator. Applying one twice is harmless (a second creation finds
// the task, a second report finds the attempt ended and only ensures its
// effects), so a reply lost after the write costs one redundant stored
// message, never a second task or outcome.

// directTimeout bounds one direct request, from its arrival to its
// answer; senders (internal/direct) wait a little longer before they store
// the message instead.
const directTimeout = 4 * time.Second

// directBacklog bounds the direct requests waiting for a worker: beyond it
// an orchestrator answers "busy" at once and the sender stores the message,
// so a burst goes to the queues, and the wait ahead of a direct request is
// never long.
func (o *Orchestrator) directBacklog() int { return 4 * o.cfg.Workers }

// serveDirect answers direct requests (ax.direct.>) until ctx ends, in one
// queue group with the other orchestrators (serveRequests), and those
// addressed to this orchestrator (subject.DirectTo: the reports of the
// attempts it dispatched). One that finds no room, and when ctx ends each
// still waiting, is answered "busy" or "stopping", so its sender stores it
// at once.
func (o *Orchestrator) serveDirect(ctx context.Context) error {
	subjs := []string{subject.DirectAll, subject.DirectToNode(subject.NodeToken(o.cfg.NodeID))}
	return o.serveRequests(ctx, subjs, o.cfg.Workers, o.directBacklog(), o.answerDirect,
		func(m *nats.Msg) {
			outcome := "busy"
			if ctx.Err() != nil {
				outcome = "stopping"
			}
			o.replyDirect(m, directKind(m.Subject), outcome, "orchestrator "+outcome+": store it")
		})
}

// answerDirect applies one direct request and replies.
func (o *Orchestrator) answerDirect(ctx context.Context, r request) {
	m := r.m
	if d, ok := subject.DirectFromDirectTo(m.Subject); ok {
		m.Subject = d // addressed to this orchestrator: the same request
	}
	due := r.arrived.Add(directTimeout)
	kind := directKind(m.Subject)
	if time.Until(due) < directTimeout/4 {
		// Waited too long for a worker to be applied in time: its
		// sender would store it meanwhile, and pause direct requests.
		o.replyDirect(m, kind, "busy", "orchestrator busy: store it")
		return
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), due)
	defer cancel()
	if stored, ok := subject.StoredFromDirectBatch(m.Subject); ok {
		o.answerDirectBatch(rctx, m, stored)
		return
	}
	var err error
	switch kind {
	case "report":
		stored := subject.StoredFromDirect(m.Subject)
		if isStepReport(m.Data) {
			rep := o.answerStep(rctx, subject.TypeFromCompleted(stored), m.Data)
			outcome := "applied"
			if rep.Error != "" {
				outcome = "failed"
			}
			o.metrics.DirectAnswered(kind, outcome)
			o.respondJSON(m, rep)
			return
		}
		err = o.acceptReport(rctx, subject.TypeFromCompleted(stored), stored, m.Data)
	case "graph", "submission":
		err = o.tracedSubmit(rctx, directMsg{m, subject.StoredFromDirect(m.Subject)})
	default:
		err = fmt.Errorf("%s is not a direct subject", m.Subject)
	}
	if err != nil {
		o.log.Debug("direct request not applied; its sender stores it", slog.String("subject", m.Subject), slog.Any("error", err))
		o.replyDirect(m, kind, "failed", err.Error())
		return
	}
	o.replyDirect(m, kind, "applied", "")
}

// directBatchWorkers bounds the messages of one batch direct request
// applied at once.
const directBatchWorkers = 32

// directBatchItems bounds the messages of all batch direct requests
// applied at once by one orchestrator: what its request workers (Workers)
// could start at directBatchWorkers each, whatever batchWorkers allows one
// batch.
const directBatchItems = 256 * directBatchWorkers

// batchWorkers is how many messages of a batch direct request of n are
// applied at once. With group commit, all of them (up to a group's most,
// groupcommit.DefaultMaxBatch): each waits for its record's write, and a
// synced batch takes milliseconds, so a batch of 256 applied 32 at a time
// waited for eight group commits in series, its sender for all of them
// (ax bench --sync-always --group-commit: about 2,000 tasks/s, capped by
// the executors' report batches).
func (o *Orchestrator) batchWorkers(n int) int {
	if o.committer != nil {
		return max(directBatchWorkers, min(n, groupcommit.DefaultMaxBatch))
	}
	return directBatchWorkers
}

// answerDirectBatch applies the messages of a batch direct request, each
// as if it had been stored on stored (the submissions or the reports of
// one type: the subject carries the type the sender may publish), and
// replies with each one's answer.
func (o *Orchestrator) answerDirectBatch(ctx context.Context, m *nats.Msg, stored string) {
	kind := directKind(subject.Direct(stored))
	var b task.DirectBatch
	var rep task.DirectBatchReply
	switch err := wirejson.Unmarshal(m.Data, &b); {
	case err != nil:
		rep.Error = "malformed batch: " + err.Error()
	case kind != "submission" && kind != "report":
		rep.Error = fmt.Sprintf("%s: a batch holds submissions or reports of one type", m.Subject)
	case len(b.Messages) > directBatchMax:
		rep.Error = fmt.Sprintf("a batch holds at most %d messages, not %d", directBatchMax, len(b.Messages))
	}
	if rep.Error != "" {
		o.metrics.DirectAnswered(kind, "failed")
		o.respondJSON(m, rep)
		return
	}
	rep.Results = make([]task.DirectReply, len(b.Messages))
	inTurn(len(b.Messages), o.batchWorkers(len(b.Messages)), func(i int) {
		select {
		case o.batchItems <- struct{}{}:
		case <-ctx.Done():
			rep.Results[i].Error = "the orchestrator is stopping"
			return
		}
		defer func() { <-o.batchItems }()
		body := b.Messages[i]
		var err error
		if kind == "report" {
			err = o.acceptReport(ctx, subject.TypeFromCompleted(stored), stored, body)
		} else {
			err = o.tracedSubmit(ctx, directMsg{&nats.Msg{Subject: stored, Data: body, Header: m.Header}, stored})
		}
		outcome := "applied"
		if err != nil {
			rep.Results[i].Error, outcome = err.Error(), "failed"
		}
		o.metrics.DirectAnswered(kind, outcome)
	})
	o.respondJSON(m, rep)
}

// directBatchMax bounds the messages of a batch direct request.
const directBatchMax = 1000

func (o *Orchestrator) respondJSON(m *nats.Msg, v any) {
	data, _ := wirejson.Marshal(v)
	if err := m.Respond(data); err != nil {
		o.log.Debug("direct reply not sent", slog.Any("error", err))
	}
}

// directKind is what a direct request stands for: a "report", a "graph",
// a "submission", or "other" (no stored subject of AX's). It picks the
// handler and labels the metric.
func directKind(subj string) string {
	if d, ok := subject.DirectFromDirectTo(subj); ok {
		subj = d
	}
	stored := subject.StoredFromDirect(subj)
	if _, ok := subject.TypeFromSubmit(stored); ok {
		return "submission"
	}
	switch {
	case subject.IsCompleted(stored):
		return "report"
	case stored == subject.GraphSubmit:
		return "graph"
	}
	return "other"
}

// replyDirect answers a direct request (applied when reason is empty) and
// counts the answer.
func (o *Orchestrator) replyDirect(m *nats.Msg, kind, outcome, reason string) {
	o.metrics.DirectAnswered(kind, outcome)
	data, _ := wirejson.Marshal(task.DirectReply{Error: reason})
	if err := m.Respond(data); err != nil {
		o.log.Debug("direct reply not sent", slog.Any("error", err))
	}
}

// directMsg presents a direct request to the stream handlers as the
// message it stands for, on its stored subject. It has no stream metadata
// and nothing to acknowledge: the reply does that.
type directMsg struct {
	m      *nats.Msg
	stored string
}

var errNotStored = errors.New("a direct request is not a stored message")

func (d directMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, errNotStored }
func (d directMsg) Data() []byte                              { return d.m.Data }
func (d directMsg) Headers() nats.Header                      { return d.m.Header }
func (d directMsg) Subject() string                           { return d.stored }
func (d directMsg) Reply() string                             { return d.m.Reply }
func (d directMsg) Ack() error                                { return nil }
func (d directMsg) DoubleAck(context.Context) error           { return nil }
func (d directMsg) Nak() error                                { return nil }
func (d directMsg) NakWithDelay(time.Duration) error          { return nil }
func (d directMsg) InProgress() error                         { return nil }
func (d directMsg) Term() error                               { return nil }
func (d directMsg) TermWithReason(string) error               { return nil }
