package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Re-drive with dependents: a failed task's end cancelled its dependents
// (each records the upstream in CancelledBy), theirs, and so on. A re-drive
// with dependents re-opens them under the same ids, in the same bounded
// steps as the cancellation: the re-driven task's message re-opens its
// direct dependents (dependentsStep at a time, continued by its cascade
// timer), and each re-opened task's own cascade message re-opens the
// dependents its cancellation cancelled. A re-opened task goes cancelled →
// waiting with the reason "re-opened by the re-drive of <id> with its
// dependents (by <who>)" and resolves against its upstreams as at its
// creation: released when they succeed, cancelled again if another failed.

// redriveOrigin says which re-drive re-opens, and who asked, for the
// reasons of the re-opened tasks.
func redriveOrigin(id string, req task.CommandRequest) string {
	origin := "the re-drive of " + id + " with its dependents"
	return origin + byline(req.By)
}

// reopenDependents continues a re-open cascade at t (the cascade message
// f): it re-opens the dependents t's end cancelled, unless t has ended
// without success again since (its dependents would be cancelled again).
func (o *Orchestrator) reopenDependents(ctx context.Context, t task.Task, f timerFire) error {
	switch t.State {
	case task.Failed, task.Cancelled, task.Expired:
		return nil
	}
	// List the edges even without the has_dependents flag: a dependent
	// registered after t had ended could not set it (it saw the end and
	// cancelled itself), yet its edge is stored and it is to be re-opened.
	t.HasDependents = true
	return o.forDependentsFrom(ctx, t, f, func(ctx context.Context, up task.Task, id string) error {
		return o.reopenDependent(ctx, up, id, f.Reopen)
	})
}

// reopenDependent re-opens dependent id if up's end cancelled it, then
// hands its own dependents to its own cascade message. A dependent still
// unfinished (re-opened by an earlier, interrupted run of the same
// cascade) is handed on too, so a crash mid-way loses no level.
func (o *Orchestrator) reopenDependent(ctx context.Context, up task.Task, id, origin string) error {
	child, rev, err := o.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("re-open dependent %s of %s: %w", id, up.ID, err)
	}
	if lifecycle.ReopenedBy(&child, up.ID) && len(child.DependsOn) > task.WideFanIn {
		// Its counter went with its cancellation; its markers stayed.
		n, err := o.fanin.CountExact(ctx, id)
		if err != nil {
			return fmt.Errorf("re-open dependent %s of %s: %w", id, up.ID, err)
		}
		if err := o.fanin.Add(ctx, id, n, "reopen|"+id+"|"+strconv.FormatUint(rev, 10)); err != nil {
			return fmt.Errorf("re-open dependent %s of %s: %w", id, up.ID, err)
		}
	}
	reopened := false
	cur, err := o.transition(ctx, id, func(c task.Task, rev uint64) (*task.Task, string, error) {
		d := lifecycle.Reopen(&c, up.ID, origin)
		reopened = d.Verdict == lifecycle.Apply
		return o.decided(ctx, c, rev, d)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("re-open dependent %s of %s: %w", id, up.ID, err)
	}
	if !reopened && cur.State.Terminal() {
		return nil
	}
	if reopened {
		// Its deadline, if it has one, counts again (one passed meanwhile
		// expires it at once).
		if err := o.armDeadline(ctx, cur); err != nil {
			return err
		}
	}
	// Its own dependents are looked up from its edges by its own cascade
	// message, flag or not (see reopenDependents).
	return o.armTimer(ctx, subject.TimerCascade, timerFire{ID: id, At: o.now(), Reopen: origin})
}
