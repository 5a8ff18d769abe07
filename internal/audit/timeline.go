package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Event is one mirrored task event.
type Event struct {
	Seq         uint64    `json:"seq"`
	Kind        string    `json:"kind"`
	From        string    `json:"from,omitempty"`
	To          string    `json:"to"`
	At          time.Time `json:"at"`
	Attempt     int       `json:"attempt"`
	ExecutionID string    `json:"execution_id,omitempty"`
	Actor       string    `json:"actor"`
	Reason      string    `json:"reason,omitempty"`
}

// Attempt is one claimed execution of a task.
type Attempt struct {
	ExecutionID string     `json:"execution_id"`
	Attempt     int        `json:"attempt"`
	Executor    string     `json:"executor,omitempty"`
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	Outcome     string     `json:"outcome"`
	Error       string     `json:"error,omitempty"`
}

// Timeline is everything the mirror knows about one task.
type Timeline struct {
	// Task is nil when its row was removed by retention but events remain.
	Task     *Task     `json:"task"`
	Events   []Event   `json:"events"`
	Attempts []Attempt `json:"attempts"`
	// Shards counts, for a sharded task, its mirrored shards per state
	// (see Auditor.Shards for those that did not succeed); nil for any
	// other task. A shard names its parent in Task.ParentID.
	Shards map[string]int `json:"shards,omitempty"`
}

// Timeline returns a task's row, every event in order, every attempt and,
// for a sharded task, its shards per state.
func (a *Auditor) Timeline(ctx context.Context, id string) (Timeline, error) {
	var tl Timeline
	t, err := a.Task(ctx, id)
	switch {
	case err == nil:
		tl.Task = &t
	case !errors.Is(err, ErrNotFound):
		return tl, err
	}
	rows, err := a.db.QueryContext(ctx, `SELECT seq, kind, COALESCE(from_state,''), to_state, at, attempt,
		COALESCE(execution_id,''), actor, COALESCE(reason,'') FROM ax_events WHERE task_id = ? ORDER BY seq`, id)
	if err != nil {
		return tl, fmt.Errorf("read events of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.Seq, &e.Kind, &e.From, &e.To, &e.At, &e.Attempt, &e.ExecutionID, &e.Actor, &e.Reason); err != nil {
			return tl, fmt.Errorf("read events of %s: %w", id, err)
		}
		tl.Events = append(tl.Events, e)
	}
	if err := rows.Err(); err != nil {
		return tl, fmt.Errorf("read events of %s: %w", id, err)
	}
	if tl.Attempts, err = a.attempts(ctx, id); err != nil {
		return tl, err
	}
	if tl.Task == nil || !tl.Task.IsShard() {
		if tl.Shards, err = a.shardStates(ctx, id); err != nil {
			return tl, err
		}
		if len(tl.Shards) == 0 {
			tl.Shards = nil
		}
	}
	if tl.Task == nil && len(tl.Events) == 0 {
		return tl, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return tl, nil
}

func (a *Auditor) attempts(ctx context.Context, id string) ([]Attempt, error) {
	rows, err := a.db.QueryContext(ctx, `SELECT execution_id, attempt, COALESCE(executor,''), started_at, finished_at,
		outcome, COALESCE(error,'') FROM ax_attempts WHERE task_id = ? ORDER BY started_at, attempt`, id)
	if err != nil {
		return nil, fmt.Errorf("read attempts of %s: %w", id, err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var at Attempt
		var fin sql.NullTime
		if err := rows.Scan(&at.ExecutionID, &at.Attempt, &at.Executor, &at.StartedAt, &fin, &at.Outcome, &at.Error); err != nil {
			return nil, fmt.Errorf("read attempts of %s: %w", id, err)
		}
		at.FinishedAt = timePtr(fin)
		out = append(out, at)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read attempts of %s: %w", id, err)
	}
	return out, nil
}
