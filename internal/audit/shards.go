package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// DefaultShardLimit bounds the failed shards Auditor.Shards lists when no
// limit is given.
const DefaultShardLimit = 100

// FailedShard is a shard that ended without succeeding: failed, cancelled
// or expired.
type FailedShard struct {
	// Index is the shard's place in its parent's plan (from 0).
	Index   int    `json:"index"`
	ID      string `json:"id"`
	State   string `json:"state"`
	Attempt int    `json:"attempt"`
	// LastError is the error of its last failed attempt, if any.
	LastError string `json:"last_error,omitempty"`
	// Reason explains its state (for a cancelled shard, usually that its
	// parent ended).
	Reason     string     `json:"reason,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// ShardReport is what the mirror knows about the shards of a sharded task.
type ShardReport struct {
	Parent string `json:"parent"`
	// Task is the parent's row; nil when retention removed it but shard
	// rows remain.
	Task *Task `json:"task"`
	// Total counts the parent's mirrored shards: all of them once the
	// planner's shards are registered and mirrored, fewer before.
	Total int `json:"total"`
	// States counts the mirrored shards per state.
	States map[string]int `json:"states"`
	// Failed lists the shards that ended without succeeding, by index, at
	// most the limit asked for; States says how many there are in all.
	Failed []FailedShard `json:"failed"`
}

// FailedTotal is the number of shards that ended without succeeding,
// listed or not.
func (r ShardReport) FailedTotal() int {
	return r.States["failed"] + r.States["cancelled"] + r.States["expired"]
}

// Shards reports on the shards of a sharded task: how many are in each
// state, and which ended without succeeding (up to limit, lowest index
// first; limit <= 0 means DefaultShardLimit). A task that has no shard
// rows gives an empty report: it is not shardable, its planner has not run
// yet, or its shards are not mirrored yet.
func (a *Auditor) Shards(ctx context.Context, parent string, limit int) (ShardReport, error) {
	if limit <= 0 {
		limit = DefaultShardLimit
	}
	r := ShardReport{Parent: parent}
	t, err := a.Task(ctx, parent)
	switch {
	case err == nil:
		if t.IsShard() {
			return r, fmt.Errorf("task %s is shard %d of %s, not a sharded task", parent, t.ShardIndex, t.ParentID)
		}
		r.Task = &t
	case !errors.Is(err, ErrNotFound):
		return r, err
	}
	if r.States, err = a.shardStates(ctx, parent); err != nil {
		return r, err
	}
	if r.Task == nil && len(r.States) == 0 {
		return r, fmt.Errorf("%w: %s", ErrNotFound, parent)
	}
	for _, n := range r.States {
		r.Total += n
	}
	if r.FailedTotal() == 0 {
		return r, nil
	}
	rows, err := a.db.QueryContext(ctx, `SELECT CAST(shard_id AS UNSIGNED), id, state, attempt,
		COALESCE(last_error,''), COALESCE(reason,''), finished_at
		FROM ax_tasks WHERE parent_id = ? AND state IN ('failed','cancelled','expired')
		ORDER BY CAST(shard_id AS UNSIGNED) LIMIT ?`, parent, limit)
	if err != nil {
		return r, fmt.Errorf("read failed shards of %s: %w", parent, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s FailedShard
		var fin sql.NullTime
		if err := rows.Scan(&s.Index, &s.ID, &s.State, &s.Attempt, &s.LastError, &s.Reason, &fin); err != nil {
			return r, fmt.Errorf("read failed shards of %s: %w", parent, err)
		}
		s.FinishedAt = timePtr(fin)
		r.Failed = append(r.Failed, s)
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read failed shards of %s: %w", parent, err)
	}
	return r, nil
}

// shardStates counts a parent's mirrored shards per state (along the
// parent_id index); the map is empty for a task without shards.
func (a *Auditor) shardStates(ctx context.Context, parent string) (map[string]int, error) {
	rows, err := a.db.QueryContext(ctx, "SELECT state, COUNT(*) FROM ax_tasks WHERE parent_id = ? GROUP BY state", parent)
	if err != nil {
		return nil, fmt.Errorf("count shards of %s: %w", parent, err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count shards of %s: %w", parent, err)
		}
		out[state] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count shards of %s: %w", parent, err)
	}
	return out, nil
}
