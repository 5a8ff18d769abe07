package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// History retention (Topology.TaskHistoryMaxAge): a finished task's history,
// fan-in markers and edges to its dependents are removed by its own forget timer, armed when it
// ends, once it has been finished for the max age. A stream-wide max age
// would also remove the last event of a task still waiting or delayed —
// its state — so unfinished tasks are never touched.

// armForget arms the removal of a finished task's history, when retention
// is configured.
func (o *Orchestrator) armForget(ctx context.Context, t task.Task) error {
	maxAge := o.cfg.Topology.TaskHistoryMaxAge
	if maxAge <= 0 {
		return nil
	}
	return o.armTimer(ctx, subject.TimerForget, timerFire{ID: t.ID, At: finishedAt(t).Add(maxAge)})
}

// fireForget removes a task's history if it is still finished and old
// enough (it may have been re-driven since).
func (o *Orchestrator) fireForget(ctx context.Context, f timerFire) error {
	t, _, err := o.store.Get(ctx, f.ID)
	if err != nil {
		return ignoreNotFound(err)
	}
	if !t.State.Terminal() {
		return nil // re-driven: it arms a new timer when it ends again
	}
	if due := finishedAt(t).Add(o.cfg.Topology.TaskHistoryMaxAge); due.After(o.now()) {
		return o.armTimer(ctx, subject.TimerForget, timerFire{ID: t.ID, At: due})
	}
	tasks, err := o.js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return fmt.Errorf("forget %s: %w", t.ID, err)
	}
	if err := tasks.Purge(ctx, jetstream.WithPurgeSubject(subject.TaskHistory(t.ID))); err != nil {
		return fmt.Errorf("forget %s: %w", t.ID, err)
	}
	// Events written before the current layout (`ax migrate tasks` kept them).
	if err := tasks.Purge(ctx, jetstream.WithPurgeSubject(subject.LegacyTask(t.ID))); err != nil {
		return fmt.Errorf("forget %s: %w", t.ID, err)
	}
	fanin, err := o.js.Stream(ctx, subject.StreamFanIn)
	if err != nil {
		return fmt.Errorf("forget %s: %w", t.ID, err)
	}
	if err := fanin.Purge(ctx, jetstream.WithPurgeSubject(subject.FanInWaiter(t.ID))); err != nil {
		return fmt.Errorf("forget fan-in markers of %s: %w", t.ID, err)
	}
	if t.HasDependents {
		return o.edges.Forget(ctx, t.ID)
	}
	return nil
}

func finishedAt(t task.Task) time.Time {
	if t.FinishedAt != nil {
		return *t.FinishedAt
	}
	return t.UpdatedAt
}
