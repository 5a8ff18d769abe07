package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrNotFound means the mirror has no row for the task (unknown id, not
// mirrored yet, or removed by retention).
var ErrNotFound = errors.New("task not found in the audit database")

// Auditor runs the audit queries against a mirror database.
type Auditor struct {
	db  *sql.DB
	now func() time.Time
}

// New returns an Auditor reading db (opened with mirror.Open). now is the
// clock for "older than" questions; nil means time.Now.
func New(db *sql.DB, now func() time.Time) *Auditor {
	if now == nil {
		now = time.Now
	}
	return &Auditor{db: db, now: now}
}

// Task is a task's current row in the mirror.
type Task struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	State       string     `json:"state"`
	Priority    int        `json:"priority"`
	Capability  string     `json:"capability"`
	Attempt     int        `json:"attempt"`
	MaxRetries  int        `json:"max_retries"`
	Redrives    int        `json:"redrives"`
	Reason      string     `json:"reason,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	Executor    string     `json:"executor,omitempty"`
	ExecutionID string     `json:"execution_id,omitempty"`
	SubmittedAt time.Time  `json:"submitted_at"`
	ReadyAt     *time.Time `json:"ready_at,omitempty"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	RetryAt     *time.Time `json:"retry_at,omitempty"`
	StartAt     *time.Time `json:"start_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Dispatches  int        `json:"dispatches,omitempty"`
	UpdatedAt   time.Time  `json:"updated_at"`
	StateSince  time.Time  `json:"state_since"`
	DependsOn   []string   `json:"depends_on,omitempty"`
	// TriggerRule is the rule of a task with depends_on (all_succeeded,
	// all_ended or any_failed); empty without depends_on.
	TriggerRule string `json:"trigger_rule,omitempty"`
	// UniqueKey is the spec's unique_key; DuplicateOf names the task that
	// held it when this one was submitted (this one never ran).
	UniqueKey   string `json:"unique_key,omitempty"`
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// CancelledBy is the upstream whose end cancelled the task (empty
	// again once a re-drive with dependents re-opened it).
	CancelledBy string   `json:"cancelled_by,omitempty"`
	Dependents  []string `json:"dependents,omitempty"`
	// ParentID is the sharded task this one is a shard of; empty for any
	// other task.
	ParentID string `json:"parent_id,omitempty"`
	// ShardIndex is a shard's place in its parent's plan (from 0); it is
	// meaningful only when ParentID is set, as in task.Task.
	ShardIndex int    `json:"shard_index,omitempty"`
	LastSeq    uint64 `json:"last_seq"`
}

// IsShard reports whether t is a shard of a sharded task.
func (t Task) IsShard() bool { return t.ParentID != "" }

const taskColumns = `id, type, state, priority, capability, attempt, max_retries, redrives,
  COALESCE(reason,''), COALESCE(last_error,''), COALESCE(executor,''), COALESCE(execution_id,''),
  submitted_at, ready_at, started_at, finished_at, retry_at, start_at, expires_at, dispatches, updated_at, state_since,
  depends_on, COALESCE(trigger_rule,''), COALESCE(unique_key,''), COALESCE(duplicate_of,''), COALESCE(cancelled_by,''),
  COALESCE((SELECT JSON_ARRAYAGG(e.dependent_id) FROM ax_edges e WHERE e.upstream_id = ax_tasks.id), dependents),
  COALESCE(parent_id,''), COALESCE(shard_id,''), last_seq`

type scanner interface{ Scan(dest ...any) error }

func scanTask(s scanner) (Task, error) {
	var t Task
	var ready, started, finished, retry, startAt, expiresAt sql.NullTime
	var deps, dependents, shardID string
	err := s.Scan(&t.ID, &t.Type, &t.State, &t.Priority, &t.Capability, &t.Attempt, &t.MaxRetries, &t.Redrives,
		&t.Reason, &t.LastError, &t.Executor, &t.ExecutionID,
		&t.SubmittedAt, &ready, &started, &finished, &retry, &startAt, &expiresAt, &t.Dispatches, &t.UpdatedAt, &t.StateSince,
		&deps, &t.TriggerRule, &t.UniqueKey, &t.DuplicateOf, &t.CancelledBy, &dependents, &t.ParentID, &shardID, &t.LastSeq)
	if err != nil {
		return t, err
	}
	t.ReadyAt, t.StartedAt, t.FinishedAt, t.RetryAt = timePtr(ready), timePtr(started), timePtr(finished), timePtr(retry)
	t.StartAt, t.ExpiresAt = timePtr(startAt), timePtr(expiresAt)
	if err := json.Unmarshal([]byte(deps), &t.DependsOn); err != nil {
		return t, fmt.Errorf("decode depends_on of %s: %w", t.ID, err)
	}
	if err := json.Unmarshal([]byte(dependents), &t.Dependents); err != nil {
		return t, fmt.Errorf("decode dependents of %s: %w", t.ID, err)
	}
	if t.ParentID != "" {
		if t.ShardIndex, err = strconv.Atoi(shardID); err != nil {
			return t, fmt.Errorf("decode shard_id of %s: %w", t.ID, err)
		}
	}
	return t, nil
}

// Task returns a task's current row.
func (a *Auditor) Task(ctx context.Context, id string) (Task, error) {
	t, err := scanTask(a.db.QueryRowContext(ctx, "SELECT "+taskColumns+" FROM ax_tasks WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return t, fmt.Errorf("read task %s: %w", id, err)
	}
	return t, nil
}

// tasks returns the rows of the given ids that exist.
func (a *Auditor) tasks(ctx context.Context, ids []string) (map[string]Task, error) {
	out := make(map[string]Task, len(ids))
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		args := make([]any, len(chunk))
		marks := make([]byte, 0, 2*len(chunk))
		for i, id := range chunk {
			args[i] = id
			if i > 0 {
				marks = append(marks, ',')
			}
			marks = append(marks, '?')
		}
		rows, err := a.db.QueryContext(ctx, "SELECT "+taskColumns+" FROM ax_tasks WHERE id IN ("+string(marks)+")", args...)
		if err != nil {
			return nil, fmt.Errorf("read tasks: %w", err)
		}
		for rows.Next() {
			t, err := scanTask(rows)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("read tasks: %w", err)
			}
			out[t.ID] = t
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("read tasks: %w", err)
		}
	}
	return out, nil
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}
