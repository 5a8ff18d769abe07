// Package edges stores a DAG's dependency edges outside the task records.
//
// When the orchestrator registers a task that lists an upstream in its
// depends_on, it writes one message, ax.edge.<upstream>.<dependent>, in the
// AX_EDGES stream, created with an expected last sequence of 0 so a replay
// never writes a second one. An upstream's record only carries a flag saying
// it has dependents (task.Task.HasDependents), so its size does not grow with
// its fan-out; when it ends, its dependents are listed from its edges — one
// stream-leader request for the subjects under ax.edge.<upstream>.*, paged by
// the server, never a consumer.
package edges

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
)

// Edges writes and lists dependency edges in the AX_EDGES stream.
type Edges struct {
	js     jetstream.JetStream
	stream *leaderget.Lazy // bound at its first info or purge
}

// New binds to the AX_EDGES stream, which must exist.
func New(ctx context.Context, js jetstream.JetStream) (*Edges, error) {
	e := Open(js)
	if err := e.stream.Bind(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Open returns the edges of AX_EDGES without a request: the stream is
// bound at its first use that needs it (leaderget.Lazy), so that a
// restarted orchestrator does not wait for its leader.
func Open(js jetstream.JetStream) *Edges {
	return &Edges{js: js, stream: leaderget.NewLazy(js, subject.StreamEdges, leaderget.New(js))}
}

// Add records that child depends on up. Adding an edge that exists is a no-op.
func (e *Edges) Add(ctx context.Context, up, child string) error {
	_, err := e.js.Publish(ctx, subject.Edge(up, child), nil,
		jetstream.WithExpectLastSequenceForSubject(0, subject.Edge(up, child)))
	if err != nil && !store.IsConflict(err) {
		return fmt.Errorf("add edge %s -> %s: %w", up, child, err)
	}
	return nil
}

// Dependents lists the tasks that depend on up, sorted by id. It is a
// stream-leader read, so an edge whose write was acknowledged is listed.
func (e *Edges) Dependents(ctx context.Context, up string) ([]string, error) {
	info, err := e.stream.Info(ctx, jetstream.WithSubjectFilter(subject.EdgesOf(up)))
	if err != nil {
		return nil, fmt.Errorf("list dependents of %s: %w", up, err)
	}
	out := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if child, ok := subject.EdgeChild(subj, up); ok {
			out = append(out, child)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Forget removes up's edges (with its history, once it is forgotten).
func (e *Edges) Forget(ctx context.Context, up string) error {
	err := e.stream.Purge(ctx, jetstream.WithPurgeSubject(subject.EdgesOf(up)))
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("forget edges of %s: %w", up, err)
	}
	return nil
}
