// Package inputs reads a task's inputs: how each of its upstreams (the ids
// in its depends_on) ended, and their results.
//
// Nothing is copied into the dependent's record or its dispatch: an input
// is read from the upstream's own record (a stream-leader read) when it is
// asked for, so a handler that does not use its inputs costs nothing, and a
// record never grows with its fan-in. A result over task.InlineResultLimit
// is read from the object store the upstream's record names (its
// capability's, where its executor put it; the legacy AX_OBJECTS for older
// records) and checked against the digest recorded with it (internal/object).
package inputs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/task"
)

// readers bounds the upstream records read at once.
const readers = 16

// ErrNotUpstream means an id asked for is not in the task's depends_on.
var ErrNotUpstream = errors.New("not an upstream of the task")

// ErrNotSucceeded means an upstream's result was asked for, but it did not
// succeed (it failed, was cancelled or expired, or has not ended).
var ErrNotSucceeded = errors.New("upstream did not succeed")

// Read returns the inputs of ids, in their order: each upstream's state,
// reason and result (inline, or the name of its object). An upstream whose
// record is gone (forgotten after its retention) is an error wrapping
// store.ErrNotFound.
func Read(ctx context.Context, st *store.Store, ids []string) ([]task.Input, error) {
	out := make([]task.Input, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readers)
	for i, id := range ids {
		g.Go(func() error {
			t, _, err := st.Get(gctx, id)
			if err != nil {
				return fmt.Errorf("read upstream %s: %w", id, err)
			}
			out[i] = task.InputOf(t)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// Result returns a succeeded input's result, reading it from the object
// store when it was too large to keep inline. An input that did not
// succeed is an error wrapping ErrNotSucceeded; an object whose bytes are
// not those its executor reported one wrapping object.ErrDigestMismatch.
func Result(ctx context.Context, objects *object.Stores, in task.Input) (json.RawMessage, error) {
	if in.State != task.Succeeded {
		return nil, fmt.Errorf("upstream %s is %s: %w", in.ID, in.State, ErrNotSucceeded)
	}
	if in.ResultObject == "" {
		return in.Result, nil
	}
	data, err := objects.Get(ctx, in.ResultBucket, in.ResultObject, in.ResultDigest)
	if err != nil {
		return nil, fmt.Errorf("read result %s of upstream %s: %w", in.ResultObject, in.ID, err)
	}
	return data, nil
}
