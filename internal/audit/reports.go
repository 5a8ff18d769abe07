package audit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// FailureQuery selects failed attempts.
type FailureQuery struct {
	// Since and Until bound when the attempts ended; a zero Until means now.
	Since, Until time.Time
	// Type restricts to one task type when not empty.
	Type string
	// Limit bounds the groups returned. Default 50.
	Limit int
}

// FailureGroup is a set of failed attempts with the same type and error.
type FailureGroup struct {
	Type     string    `json:"type"`
	Error    string    `json:"error"`
	Failures int       `json:"failures"`
	Tasks    int       `json:"tasks"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	// SampleTaskID is one of the tasks, to look at with Timeline.
	SampleTaskID string `json:"sample_task_id"`
}

// Failures groups the failed attempts in a time range by type and error,
// most frequent first. Tasks that failed without ever starting (dispatch
// timeouts exhausted) count too, with their reason as the error.
func (a *Auditor) Failures(ctx context.Context, q FailureQuery) ([]FailureGroup, error) {
	if q.Until.IsZero() {
		q.Until = a.now()
	}
	if q.Limit <= 0 {
		q.Limit = 50
	}
	// Failed attempts, plus tasks that failed without ever starting (no
	// executor took them within their dispatch timeouts).
	typeFilter := ""
	if q.Type != "" {
		typeFilter = " AND type = ?"
	}
	query := `SELECT type, error, COUNT(*), COUNT(DISTINCT task_id), MIN(at), MAX(at), MIN(task_id) FROM (
  SELECT type, COALESCE(error,'') AS error, task_id, finished_at AS at FROM ax_attempts
   WHERE outcome = 'failed' AND finished_at >= ? AND finished_at < ?` + typeFilter + `
  UNION ALL
  SELECT type, COALESCE(reason,''), task_id, at FROM ax_events
   WHERE kind = 'transition' AND from_state = 'ready' AND to_state = 'failed' AND at >= ? AND at < ?` + typeFilter + `
) f GROUP BY type, error ORDER BY COUNT(*) DESC, type, MIN(at) LIMIT ?`
	since, until := q.Since.UTC(), q.Until.UTC()
	var args []any
	for range 2 {
		args = append(args, since, until)
		if q.Type != "" {
			args = append(args, q.Type)
		}
	}
	args = append(args, q.Limit)
	rows, err := a.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("query failures: %w", err)
	}
	defer rows.Close()
	var out []FailureGroup
	for rows.Next() {
		var g FailureGroup
		if err := rows.Scan(&g.Type, &g.Error, &g.Failures, &g.Tasks, &g.First, &g.Last, &g.SampleTaskID); err != nil {
			return nil, fmt.Errorf("query failures: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query failures: %w", err)
	}
	return out, nil
}

// ActiveStates are the states a task can be stuck in.
var ActiveStates = []string{"waiting", "ready", "running", "retrying"}

// StuckQuery selects tasks that have been in one state too long.
type StuckQuery struct {
	// State to look at; empty means any non-terminal state.
	State string
	// OlderThan is how long the task must have been in that state.
	OlderThan time.Duration
	// Type restricts to one task type when not empty.
	Type string
	// Limit bounds the tasks returned. Default 100.
	Limit int
}

// StuckTask is a task that has been in its state longer than asked.
type StuckTask struct {
	ID       string        `json:"id"`
	Type     string        `json:"type"`
	State    string        `json:"state"`
	Since    time.Time     `json:"since"`
	For      time.Duration `json:"for"`
	Attempt  int           `json:"attempt"`
	Executor string        `json:"executor,omitempty"`
	Reason   string        `json:"reason,omitempty"`
}

// Stuck lists the tasks that entered their state longer ago than
// q.OlderThan, oldest first.
func (a *Auditor) Stuck(ctx context.Context, q StuckQuery) ([]StuckTask, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	now := a.now()
	states := ActiveStates
	if q.State != "" {
		states = []string{q.State}
	}
	args := make([]any, 0, len(states)+3)
	for _, s := range states {
		args = append(args, s)
	}
	query := `SELECT id, type, state, state_since, attempt, COALESCE(executor,''), COALESCE(reason,'')
FROM ax_tasks WHERE state IN (` + strings.TrimSuffix(strings.Repeat("?,", len(states)), ",") + `) AND state_since < ?`
	args = append(args, now.Add(-q.OlderThan).UTC())
	if q.Type != "" {
		query += " AND type = ?"
		args = append(args, q.Type)
	}
	query += " ORDER BY state_since LIMIT ?"
	args = append(args, q.Limit)
	rows, err := a.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("query stuck tasks: %w", err)
	}
	defer rows.Close()
	var out []StuckTask
	for rows.Next() {
		var s StuckTask
		if err := rows.Scan(&s.ID, &s.Type, &s.State, &s.Since, &s.Attempt, &s.Executor, &s.Reason); err != nil {
			return nil, fmt.Errorf("query stuck tasks: %w", err)
		}
		s.For = now.Sub(s.Since)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query stuck tasks: %w", err)
	}
	return out, nil
}

// RetryStats summarises retries and dead letters of one task type.
type RetryStats struct {
	Type string `json:"type"`
	// Tasks is the number of distinct tasks with an attempt in the range.
	Tasks int `json:"tasks"`
	// Attempts counts claimed executions.
	Attempts int `json:"attempts"`
	// Retries counts attempts after the first of a series (attempt > 1).
	Retries int `json:"retries"`
	// FailedAttempts counts attempts that ended in failure.
	FailedAttempts int `json:"failed_attempts"`
	// DeadLettered counts transitions to failed (dead-letter entries made).
	DeadLettered int `json:"dead_lettered"`
	// InDLQ counts tasks currently failed (still dead-lettered).
	InDLQ int `json:"in_dlq"`
	// Redrives sums re-drives of tasks of this type.
	Redrives int `json:"redrives"`
}

// Retries returns, per task type, retry and dead-letter counts for attempts
// and events since the given time (zero: everything mirrored). InDLQ and
// Redrives describe the tasks' current rows.
func (a *Auditor) Retries(ctx context.Context, since time.Time) ([]RetryStats, error) {
	byType := map[string]*RetryStats{}
	get := func(t string) *RetryStats {
		if s, ok := byType[t]; ok {
			return s
		}
		s := &RetryStats{Type: t}
		byType[t] = s
		return s
	}
	since = since.UTC()
	queries := []struct {
		sql  string
		args []any
		scan func(typ string, vals []int)
		n    int
	}{
		{`SELECT type, COUNT(DISTINCT task_id), COUNT(*), SUM(attempt > 1), SUM(outcome = 'failed')
FROM ax_attempts WHERE started_at >= ? GROUP BY type`, []any{since}, func(t string, v []int) {
			s := get(t)
			s.Tasks, s.Attempts, s.Retries, s.FailedAttempts = v[0], v[1], v[2], v[3]
		}, 4},
		{`SELECT type, COUNT(*) FROM ax_events WHERE kind = 'transition' AND to_state = 'failed' AND at >= ? GROUP BY type`,
			[]any{since}, func(t string, v []int) { get(t).DeadLettered = v[0] }, 1},
		{`SELECT type, SUM(state = 'failed'), SUM(redrives) FROM ax_tasks GROUP BY type HAVING SUM(state = 'failed') > 0 OR SUM(redrives) > 0`,
			nil, func(t string, v []int) { s := get(t); s.InDLQ, s.Redrives = v[0], v[1] }, 2},
	}
	for _, q := range queries {
		rows, err := a.db.QueryContext(ctx, q.sql, q.args...)
		if err != nil {
			return nil, fmt.Errorf("query retries: %w", err)
		}
		for rows.Next() {
			var typ string
			vals := make([]int, q.n)
			dest := []any{&typ}
			for i := range vals {
				dest = append(dest, &vals[i])
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return nil, fmt.Errorf("query retries: %w", err)
			}
			q.scan(typ, vals)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("query retries: %w", err)
		}
	}
	out := make([]RetryStats, 0, len(byType))
	for _, s := range byType {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Retries+out[i].DeadLettered != out[j].Retries+out[j].DeadLettered {
			return out[i].Retries+out[i].DeadLettered > out[j].Retries+out[j].DeadLettered
		}
		return out[i].Type < out[j].Type
	})
	return out, nil
}
