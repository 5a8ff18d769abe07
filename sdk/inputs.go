package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-run/ax/internal/inputs"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/task"
)

// Inputs returns the inputs of task id: how each of its upstreams (its
// depends_on, in order) ended, with its reason and its result — inline up
// to task.InlineResultLimit, otherwise the name of its object, which
// Result(ctx, upstream) reads. This is what the task's handler sees
// through executor.Job.Inputs. A task without depends_on has none.
func (c *Client) Inputs(ctx context.Context, id string) ([]task.Input, error) {
	t, _, err := c.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("inputs of %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("inputs of %s: %w", id, err)
	}
	in, err := inputs.Read(ctx, c.store, t.DependsOn)
	if err != nil {
		return nil, fmt.Errorf("inputs of %s: %w", id, err)
	}
	return in, nil
}
