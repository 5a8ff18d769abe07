package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/task"
)

// claimUnique takes the unique key of a new task's spec, or finds the task
// that holds it (see package unique). It returns the holder's id when
// another task holds it, "" when this one does. A task that exists already
// (a submission seen again, after its window perhaps) is reported through
// exists, so its key is not taken again for it.
func (o *Orchestrator) claimUnique(ctx context.Context, spec task.Spec, now time.Time) (holder string, until time.Time, exists bool, err error) {
	if _, _, err := o.store.Get(ctx, spec.ID); err == nil {
		return "", time.Time{}, true, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", time.Time{}, false, err
	}
	h, err := o.unique.Claim(ctx, spec.Type, spec.UniqueKey, spec.ID, spec.UniqueWindow.Std(), now)
	if err != nil {
		return "", time.Time{}, false, err
	}
	if h.ID == spec.ID {
		return "", time.Time{}, false, nil
	}
	return h.ID, h.Until, false, nil
}

// duplicateReason says why a task was created as a duplicate.
func duplicateReason(spec task.Spec, holder string, until time.Time) string {
	return fmt.Sprintf("duplicate of task %s: it holds unique_key %q of type %s until %s", holder, spec.UniqueKey, spec.Type, until.Format(time.RFC3339))
}
