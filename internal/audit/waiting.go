package audit

import (
	"context"
	"fmt"
	"time"
)

// maxBlockers bounds how much of an upstream graph Waiting walks.
const maxBlockers = 1000

// Blocker is an upstream task that keeps a task waiting.
type Blocker struct {
	ID string `json:"id"`
	// State is the upstream's state, or "unknown" when the mirror has no row.
	State      string     `json:"state"`
	Type       string     `json:"type,omitempty"`
	StateSince *time.Time `json:"state_since,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	// Depth is 1 for a direct dependency, 2 for one of its dependencies…
	Depth int `json:"depth"`
	// Via is the task whose dependency this is.
	Via string `json:"via"`
}

// WaitReport explains where a task is and, for a waiting task, which
// dependencies (direct and transitive) are not done.
type WaitReport struct {
	Task        Task   `json:"task"`
	Explanation string `json:"explanation"`
	// Pending counts the direct dependencies that hold the task under its
	// trigger rule: those that have not succeeded (all_succeeded), or not
	// ended (all_ended, any_failed).
	Pending  int       `json:"pending"`
	Blockers []Blocker `json:"blockers,omitempty"`
}

// Waiting explains why a task has not run (yet).
func (a *Auditor) Waiting(ctx context.Context, id string) (WaitReport, error) {
	t, err := a.Task(ctx, id)
	if err != nil {
		return WaitReport{}, err
	}
	r := WaitReport{Task: t}
	now := a.now()
	since := func() string {
		return fmt.Sprintf("%s (%s ago)", t.StateSince.Format(time.RFC3339), now.Sub(t.StateSince).Round(time.Second))
	}
	switch t.State {
	case "waiting":
		if err := a.blockers(ctx, &r); err != nil {
			return r, err
		}
		delayed := t.StartAt != nil && t.StartAt.After(now)
		switch {
		case delayed && r.Pending > 0:
			r.Explanation = fmt.Sprintf("waiting since %s for %d of %d dependencies, and delayed until %s (in %s)",
				since(), r.Pending, len(t.DependsOn), t.StartAt.Format(time.RFC3339), t.StartAt.Sub(now).Round(time.Second))
		case delayed:
			r.Explanation = fmt.Sprintf("delayed (delay or run_at) until %s, in %s", t.StartAt.Format(time.RFC3339), t.StartAt.Sub(now).Round(time.Second))
		case r.Pending > 0 && t.TriggerRule != "" && t.TriggerRule != ruleAllSucceeded:
			r.Explanation = fmt.Sprintf("waiting since %s for %d of %d dependencies to end (trigger rule %s)", since(), r.Pending, len(t.DependsOn), t.TriggerRule)
		case r.Pending > 0:
			r.Explanation = fmt.Sprintf("waiting since %s for %d of %d dependencies", since(), r.Pending, len(t.DependsOn))
		default:
			r.Explanation = fmt.Sprintf("waiting since %s although nothing holds it (dependencies succeeded, no delay left): "+
				"the orchestrator should release it at once; if this persists, check the orchestrators and the mirror's lag", since())
		}
	case "ready":
		r.Explanation = fmt.Sprintf("ready since %s: queued on capability %q at priority p%d (attempt %d of %d), "+
			"waiting for an executor of that capability with free capacity, or running on one for less than a heartbeat "+
			"(a short attempt is marked running only if it outlives one)", since(), t.Capability, t.Priority, t.Attempt, t.MaxRetries+1)
		if t.Dispatches > 1 {
			r.Explanation += fmt.Sprintf("; dispatched %d times already without being started", t.Dispatches)
		}
	case "running":
		r.Explanation = fmt.Sprintf("running on executor %s since %s (attempt %d of %d)", t.Executor, since(), t.Attempt, t.MaxRetries+1)
	case "retrying":
		at := "unknown"
		if t.RetryAt != nil {
			at = t.RetryAt.Format(time.RFC3339)
		}
		r.Explanation = fmt.Sprintf("attempt %d of %d failed (%s); next attempt at %s", t.Attempt, t.MaxRetries+1, t.LastError, at)
	default:
		r.Explanation = fmt.Sprintf("not waiting: %s since %s", t.State, since())
		if t.Reason != "" {
			r.Explanation += ": " + t.Reason
		}
		switch {
		case t.DuplicateOf != "":
			r.Explanation += fmt.Sprintf("; a duplicate of %s, which held unique_key %q of type %s when it was submitted: it never ran",
				t.DuplicateOf, t.UniqueKey, t.Type)
		case t.CancelledBy != "":
			r.Explanation += fmt.Sprintf("; cancelled by the end of upstream %s under trigger rule %s: "+
				"`ax redrive %s --with-dependents` re-opens it once %s is fixed", t.CancelledBy, t.TriggerRule, t.CancelledBy, t.CancelledBy)
		}
	}
	return r, nil
}

// The trigger rules as the mirror stores them (task.TriggerRule values).
const (
	ruleAllSucceeded = "all_succeeded"
	ruleAllEnded     = "all_ended"
	ruleAnyFailed    = "any_failed"
)

// holds reports whether an upstream in state keeps a waiting dependent
// with the trigger rule waiting: under all_succeeded until it succeeded
// (one that did not would have cancelled the dependent), under all_ended
// and any_failed until it ended. An unknown upstream ("unknown") holds.
func holds(rule, state string) bool {
	switch state {
	case "succeeded":
		return false
	case "failed", "cancelled", "expired":
		return rule != ruleAllEnded && rule != ruleAnyFailed
	}
	return true
}

// blockers walks the dependency graph breadth-first from r.Task, listing
// every upstream that holds its dependent under that one's trigger rule
// (see holds) and descending into those that wait themselves.
func (a *Auditor) blockers(ctx context.Context, r *WaitReport) error {
	type node struct {
		id, via string
		depth   int
	}
	seen := map[string]bool{r.Task.ID: true}
	rules := map[string]string{r.Task.ID: r.Task.TriggerRule} // of the waiting tasks walked
	var level []node
	for _, d := range r.Task.DependsOn {
		if !seen[d] {
			seen[d] = true
			level = append(level, node{d, r.Task.ID, 1})
		}
	}
	for len(level) > 0 && len(r.Blockers) < maxBlockers {
		ids := make([]string, len(level))
		for i, n := range level {
			ids[i] = n.id
		}
		rows, err := a.tasks(ctx, ids)
		if err != nil {
			return err
		}
		var next []node
		for _, n := range level {
			up, ok := rows[n.id]
			if ok && !holds(rules[n.via], up.State) {
				continue
			}
			if n.depth == 1 {
				r.Pending++
			}
			b := Blocker{ID: n.id, State: "unknown", Depth: n.depth, Via: n.via}
			if ok {
				since := up.StateSince
				b.State, b.Type, b.StateSince, b.Reason = up.State, up.Type, &since, up.Reason
				if up.State == "waiting" {
					rules[up.ID] = up.TriggerRule
					for _, d := range up.DependsOn {
						if !seen[d] {
							seen[d] = true
							next = append(next, node{d, n.id, n.depth + 1})
						}
					}
				}
			}
			r.Blockers = append(r.Blockers, b)
			if len(r.Blockers) >= maxBlockers {
				break
			}
		}
		level = next
	}
	return nil
}
