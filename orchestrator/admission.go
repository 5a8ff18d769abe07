package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ax-run/ax/internal/admission"
	"github.com/ax-run/ax/task"
)

// keyAdmitter is the admission of a task with a concurrency key: its
// key's slots and rate (keylimits.go, slots.go). A held task waits, ready,
// with its reason, a marker its key's next freed slot finds, or a watch at
// the time its rate has room.
type keyAdmitter struct{ o *Orchestrator }

func (keyAdmitter) Name() string              { return "key limits" }
func (keyAdmitter) Applies(t *task.Task) bool { return t.ConcurrencyKey != "" }

func (a keyAdmitter) Admit(ctx context.Context, tk *admission.Ticket) (admission.Verdict, error) {
	held, next, rev, err := a.o.admitKey(ctx, tk.Task, tk.Rev)
	if held || err != nil {
		return admission.Hold, err
	}
	tk.Task, tk.Rev = next, rev
	return admission.Admit, nil
}

// fairAdmitter is the admission of a task with a fairness key: while its
// level holds its window of dispatches it queues in this orchestrator for
// its key's turn (fair.go). A queued task's durable trigger is its sweep
// entry, naming this orchestrator.
type fairAdmitter struct{ q *fairQueue }

func (fairAdmitter) Name() string              { return "fairness" }
func (fairAdmitter) Applies(t *task.Task) bool { return t.FairnessKey != "" }

func (a fairAdmitter) Admit(ctx context.Context, tk *admission.Ticket) (admission.Verdict, error) {
	if !a.q.queue(tk.Task, tk.Rev) {
		return admission.Admit, nil
	}
	a.q.o.log.Debug("queued for its fairness key's turn", slog.String("task_id", tk.Task.ID))
	if err := a.q.o.sweeps.add(ctx, tk.Task, a.q.o.instance, time.Time{}, nil); err != nil {
		return admission.Queue, fmt.Errorf("sweep: %w", err)
	}
	return admission.Queue, nil
}
