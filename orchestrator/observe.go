package orchestrator

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// DefaultSampleInterval is how often an orchestrator with metrics reads
// backlogs, timers and dead letters from JetStream.
const DefaultSampleInterval = 5 * time.Second

// observer feeds Config.Metrics with the transitions this orchestrator
// writes and the state it samples from JetStream. Redeliveries are counted
// and JetStream sampled only when Config.Metrics is set.
type observer struct {
	on bool
	m  Metrics
	// known remembers every backlog level seen, so one that emptied is
	// reported as 0 rather than left at its last value.
	known map[backlogKey]bool
}

type backlogKey struct {
	capability string
	priority   int
}

func newObserver(m Metrics) *observer {
	if m == nil {
		return &observer{m: NopMetrics{}, known: map[backlogKey]bool{}}
	}
	return &observer{on: true, m: m, known: map[backlogKey]bool{}}
}

// notMeasured marks a Transition's duration that this write does not measure.
const notMeasured = time.Duration(-1)

func since(from time.Time, to *time.Time) time.Duration {
	if to == nil || from.IsZero() {
		return notMeasured
	}
	return max(to.Sub(from), 0)
}

// wrote reports the write cur → next that was just made.
func (ob *observer) wrote(cur task.Task, next *task.Task) {
	tr := Transition{Type: next.Type, Priority: next.PriorityLevel(), From: cur.State, To: next.State,
		SchedulingDelay: notMeasured, SubmitToStart: notMeasured, SubmitToFinish: notMeasured}
	if next.State == cur.State {
		ob.m.TransitionWritten(tr)
		return
	}
	if (task.Event{Kind: task.KindTransition, From: cur.State, To: next.State, Task: *next}).EndsAttempt() {
		if cur.StartedAt == nil {
			cur.StartedAt = next.StartedAt // an attempt that ran without a running mark
		}
		tr.AttemptOutcome = string(next.State)
		switch next.State {
		case task.Retrying:
			tr.AttemptOutcome = string(task.Failed)
		case task.Waiting: // a planner succeeded; its shards come next
			tr.AttemptOutcome = string(task.Succeeded)
		}
		if cur.ReadyAt != nil && cur.Takeovers == 0 {
			tr.SchedulingDelay = since(*cur.ReadyAt, cur.StartedAt)
		}
		if cur.Attempt == 1 && cur.Redrives == 0 && cur.Takeovers == 0 {
			tr.SubmitToStart = since(cur.SubmittedAt, cur.StartedAt)
		}
	}
	if next.State == task.Succeeded {
		tr.SubmitToFinish = since(next.SubmittedAt, next.FinishedAt)
	}
	ob.m.TransitionWritten(tr)
}

// countRedeliveries wraps a consumer's handler to count messages it gets
// again.
func (ob *observer) countRedeliveries(consumer string, h consume.Handler) consume.Handler {
	if !ob.on {
		return h
	}
	return func(ctx context.Context, msg jetstream.Msg) error {
		if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
			ob.m.MessageRedelivered(consumer)
		}
		return h(ctx, msg)
	}
}

// sampleLoop samples AX's state from JetStream every interval until ctx ends.
func (o *Orchestrator) sampleLoop(ctx context.Context) {
	defer o.bg.Done()
	t := time.NewTicker(o.cfg.SampleInterval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := o.sample(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			o.obs.m.SampleFailed(err)
			o.log.Debug("metrics sample failed", slog.Any("error", err))
		} else if err == nil {
			o.obs.m.Sampled(s)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample reads the ready backlogs, the orchestrator consumers' pending
// messages and the timer, dead-letter and poison counts: a few requests per
// non-empty capability and priority, whatever the number of tasks.
func (o *Orchestrator) sample(ctx context.Context) (Sample, error) {
	now := o.now()
	s := Sample{InHand: map[string]int{}, ConsumerPending: map[string]uint64{}}
	levels, err := queue.ReadyLevels(ctx, o.js, now)
	if err != nil {
		return s, err
	}
	seen := map[backlogKey]bool{}
	for _, lv := range levels {
		key := backlogKey{lv.Capability, lv.Priority}
		seen[key] = true
		s.InHand[key.capability] += int(lv.InHand)
		s.Backlogs = append(s.Backlogs, Backlog{Capability: key.capability, Priority: key.priority, Pending: lv.Pending, Oldest: lv.Oldest})
		o.obs.known[key] = true
	}
	for key := range o.obs.known {
		if !seen[key] { // its consumer is gone
			s.Backlogs = append(s.Backlogs, Backlog{Capability: key.capability, Priority: key.priority})
		}
	}
	for _, l := range o.loops() {
		stream, err := o.js.Stream(ctx, l.stream)
		if err != nil {
			return s, err
		}
		cons, err := stream.Consumer(ctx, l.consumer)
		if err != nil {
			return s, err
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return s, err
		}
		s.ConsumerPending[l.consumer] = ci.NumPending + uint64(ci.NumAckPending)
	}
	for name, n := range map[string]*uint64{subject.StreamTimers: &s.TimersPending, subject.StreamDLQ: &s.DeadLetters, subject.StreamPoison: &s.Poison} {
		st, err := o.js.Stream(ctx, name)
		if err != nil {
			return s, err
		}
		si, err := st.Info(ctx)
		if err != nil {
			return s, err
		}
		*n = si.State.Msgs
	}
	s.At = o.now()
	return s, nil
}
