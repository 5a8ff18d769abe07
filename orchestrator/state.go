package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

const (
	// stateWorkers answer state reads; each is one leader read (two for a
	// task that was rejected or has dependents).
	stateWorkers = 16
	// stateBacklog bounds the state reads waiting for a worker; beyond it
	// a read is answered "busy" and its client asks again.
	stateBacklog = 1024
)

// serveStates answers typed state reads (ax.state.<id>.<type>) until ctx
// ends, in one queue group with the other orchestrators. They are how a
// producer limited to some task types reads its tasks: the server lets it
// request only its types' subjects, and the answer holds a task only if it
// has the subject's type.
func (o *Orchestrator) serveStates(ctx context.Context) error {
	return o.serveRequests(ctx, []string{subject.StateAll}, stateWorkers, stateBacklog,
		func(ctx context.Context, r request) { o.answerState(ctx, r.m) },
		func(m *nats.Msg) { o.replyState(m, task.StateReply{Error: "orchestrator busy: ask again"}) })
}

// answerState reads one task for a state read and replies.
func (o *Orchestrator) answerState(ctx context.Context, m *nats.Msg) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := o.state(rctx, m.Subject)
	if err != nil {
		o.log.Debug("state read failed", slog.String("subject", m.Subject), slog.Any("error", err))
		rep = task.StateReply{Error: err.Error()}
	}
	o.replyState(m, rep)
}

func (o *Orchestrator) replyState(m *nats.Msg, rep task.StateReply) {
	data, err := json.Marshal(rep)
	if err != nil {
		data, _ = json.Marshal(task.StateReply{Error: "encode state: " + err.Error()})
	}
	if err := m.Respond(data); err != nil {
		o.log.Debug("state reply not sent", slog.Any("error", err))
	}
}

// state is the answer to a state read on subj: the task if it has the
// subject's type, else the rejection of a submission of that id and type,
// else not found. A task of another type is not found, so a reader limited
// to some types learns nothing of the others.
func (o *Orchestrator) state(ctx context.Context, subj string) (task.StateReply, error) {
	id, typ, ok := subject.ParseState(subj)
	if !ok || !task.ValidID(id) || !task.ValidType(typ) {
		return task.StateReply{NotFound: true}, nil
	}
	t, rev, err := o.store.Get(ctx, id)
	switch {
	case err == nil && t.Type != typ:
		return task.StateReply{NotFound: true}, nil
	case err == nil:
		if t.HasDependents {
			if t.Dependents, err = o.edges.Dependents(ctx, id); err != nil {
				return task.StateReply{}, fmt.Errorf("dependents of %s: %w", id, err)
			}
		}
		return task.StateReply{Task: &t, Revision: rev}, nil
	case !errors.Is(err, store.ErrNotFound):
		return task.StateReply{}, fmt.Errorf("read %s: %w", id, err)
	}
	rej, err := store.Rejection(ctx, o.js, id)
	if err != nil {
		return task.StateReply{}, err
	}
	if rej != nil {
		if rt, ok := subject.TypeFromSubmit(subject.StoredFromDirect(rej.Subject)); ok && rt == typ {
			return task.StateReply{Rejection: rej}, nil
		}
	}
	return task.StateReply{NotFound: true}, nil
}
