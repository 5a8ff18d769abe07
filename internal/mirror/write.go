package mirror

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// rowsPerStatement bounds one multi-row INSERT (well under the 65535
// placeholders a prepared statement allows and max_allowed_packet).
const rowsPerStatement = 500

const insertEvents = `INSERT INTO ax_events
  (seq, task_id, type, kind, from_state, to_state, at, attempt, execution_id, actor, reason)
VALUES %s
ON DUPLICATE KEY UPDATE seq = seq`

// upsertTasks overwrites a task's row only with a newer event (higher
// sequence), whatever order events arrive in; ready_at keeps the earliest
// value ever seen. last_seq is assigned last: assignments see the values
// assigned before them.
const upsertTasks = `INSERT INTO ax_tasks
  (id, type, state, priority, capability, attempt, max_retries, redrives, reason, last_error,
   executor, execution_id, submitted_at, ready_at, started_at, finished_at, retry_at, start_at,
   expires_at, dispatches, updated_at, state_since, depends_on, trigger_rule, unique_key, duplicate_of, cancelled_by,
   dependents, parent_id, shard_id, last_seq)
VALUES %s
ON DUPLICATE KEY UPDATE
  ready_at     = COALESCE(LEAST(ready_at, VALUES(ready_at)), ready_at, VALUES(ready_at)),
  type         = IF(VALUES(last_seq) > last_seq, VALUES(type), type),
  state        = IF(VALUES(last_seq) > last_seq, VALUES(state), state),
  priority     = IF(VALUES(last_seq) > last_seq, VALUES(priority), priority),
  capability   = IF(VALUES(last_seq) > last_seq, VALUES(capability), capability),
  attempt      = IF(VALUES(last_seq) > last_seq, VALUES(attempt), attempt),
  max_retries  = IF(VALUES(last_seq) > last_seq, VALUES(max_retries), max_retries),
  redrives     = IF(VALUES(last_seq) > last_seq, VALUES(redrives), redrives),
  reason       = IF(VALUES(last_seq) > last_seq, VALUES(reason), reason),
  last_error   = IF(VALUES(last_seq) > last_seq, VALUES(last_error), last_error),
  executor     = IF(VALUES(last_seq) > last_seq, VALUES(executor), executor),
  execution_id = IF(VALUES(last_seq) > last_seq, VALUES(execution_id), execution_id),
  submitted_at = IF(VALUES(last_seq) > last_seq, VALUES(submitted_at), submitted_at),
  started_at   = IF(VALUES(last_seq) > last_seq, VALUES(started_at), started_at),
  finished_at  = IF(VALUES(last_seq) > last_seq, VALUES(finished_at), finished_at),
  retry_at     = IF(VALUES(last_seq) > last_seq, VALUES(retry_at), retry_at),
  start_at     = IF(VALUES(last_seq) > last_seq, VALUES(start_at), start_at),
  expires_at   = IF(VALUES(last_seq) > last_seq, VALUES(expires_at), expires_at),
  dispatches   = IF(VALUES(last_seq) > last_seq, VALUES(dispatches), dispatches),
  updated_at   = IF(VALUES(last_seq) > last_seq, VALUES(updated_at), updated_at),
  state_since  = IF(VALUES(last_seq) > last_seq, VALUES(state_since), state_since),
  depends_on   = IF(VALUES(last_seq) > last_seq, VALUES(depends_on), depends_on),
  trigger_rule = IF(VALUES(last_seq) > last_seq, VALUES(trigger_rule), trigger_rule),
  unique_key   = IF(VALUES(last_seq) > last_seq, VALUES(unique_key), unique_key),
  duplicate_of = IF(VALUES(last_seq) > last_seq, VALUES(duplicate_of), duplicate_of),
  cancelled_by = IF(VALUES(last_seq) > last_seq, VALUES(cancelled_by), cancelled_by),
  dependents   = IF(VALUES(last_seq) > last_seq, VALUES(dependents), dependents),
  parent_id    = IF(VALUES(last_seq) > last_seq, VALUES(parent_id), parent_id),
  shard_id     = IF(VALUES(last_seq) > last_seq, VALUES(shard_id), shard_id),
  last_seq     = GREATEST(last_seq, VALUES(last_seq))`

// upsertAttempts: the newest event decides executor, outcome, end and
// error; started_at keeps the first claim.
const upsertAttempts = `INSERT INTO ax_attempts
  (execution_id, task_id, type, attempt, executor, started_at, finished_at, outcome, error, last_seq)
VALUES %s
ON DUPLICATE KEY UPDATE
  started_at  = LEAST(started_at, VALUES(started_at)),
  executor    = IF(VALUES(last_seq) > last_seq, VALUES(executor), executor),
  finished_at = IF(VALUES(last_seq) > last_seq, VALUES(finished_at), finished_at),
  outcome     = IF(VALUES(last_seq) > last_seq, VALUES(outcome), outcome),
  error       = IF(VALUES(last_seq) > last_seq, VALUES(error), error),
  last_seq    = GREATEST(last_seq, VALUES(last_seq))`

// insertEdges writes dependency edges once.
const insertEdges = `INSERT IGNORE INTO ax_edges (upstream_id, dependent_id) VALUES %s`

// upsertSteps writes a step once; a sleep begun again (a later event)
// moves its end.
const upsertSteps = `INSERT INTO ax_steps
  (task_id, name, kind, attempt, execution_id, executor, stored_at, sleep_until, result, result_object,
   result_bucket, result_digest, seq)
VALUES %s
ON DUPLICATE KEY UPDATE
  sleep_until = IF(VALUES(seq) > seq, VALUES(sleep_until), sleep_until),
  seq         = GREATEST(seq, VALUES(seq))`

// upsertEventWaits overwrites an event task's row only with a newer event
// (higher sequence), as upsertTasks does.
const upsertEventWaits = `INSERT INTO ax_event_waits
  (task_id, type, subject, match_token, timeout_ms, outcome, waiting_since, timeout_at, event_seq, event_data,
   ended_at, decided_by, decision_reason, updated_at, last_seq)
VALUES %s
ON DUPLICATE KEY UPDATE
  type            = IF(VALUES(last_seq) > last_seq, VALUES(type), type),
  subject         = IF(VALUES(last_seq) > last_seq, VALUES(subject), subject),
  match_token     = IF(VALUES(last_seq) > last_seq, VALUES(match_token), match_token),
  timeout_ms      = IF(VALUES(last_seq) > last_seq, VALUES(timeout_ms), timeout_ms),
  outcome         = IF(VALUES(last_seq) > last_seq, VALUES(outcome), outcome),
  waiting_since   = IF(VALUES(last_seq) > last_seq, VALUES(waiting_since), waiting_since),
  timeout_at      = IF(VALUES(last_seq) > last_seq, VALUES(timeout_at), timeout_at),
  event_seq       = IF(VALUES(last_seq) > last_seq, VALUES(event_seq), event_seq),
  event_data      = IF(VALUES(last_seq) > last_seq, VALUES(event_data), event_data),
  ended_at        = IF(VALUES(last_seq) > last_seq, VALUES(ended_at), ended_at),
  decided_by      = IF(VALUES(last_seq) > last_seq, VALUES(decided_by), decided_by),
  decision_reason = IF(VALUES(last_seq) > last_seq, VALUES(decision_reason), decision_reason),
  updated_at      = IF(VALUES(last_seq) > last_seq, VALUES(updated_at), updated_at),
  last_seq        = GREATEST(last_seq, VALUES(last_seq))`

// writeBatch writes b in one transaction. It is idempotent: writing the same
// events again, or older ones after newer, changes nothing. mid, if not nil,
// runs inside the transaction after the events are inserted (tests use it
// to die mid-batch); its error rolls the transaction back.
func writeBatch(ctx context.Context, db *sql.DB, b batch, mid func() error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin batch: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := execChunks(ctx, tx, insertEvents, 11, len(b.events), func(i int, args []any) []any {
		r := b.events[i]
		return append(args, r.Seq, r.TaskID, r.Type, r.Kind, null(r.From), r.To, r.At, r.Attempt,
			null(r.ExecutionID), r.Actor, null(r.Reason))
	}); err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	if mid != nil {
		if err := mid(); err != nil {
			return err
		}
	}
	if err := execChunks(ctx, tx, upsertTasks, 31, len(b.tasks), func(i int, args []any) []any {
		r := b.tasks[i]
		return append(args, r.ID, r.Type, r.State, r.Priority, r.Capability, r.Attempt, r.MaxRetries, r.Redrives,
			null(r.Reason), null(r.LastError), null(r.Executor), null(r.ExecutionID), r.SubmittedAt,
			nullTime(r.ReadyAt), nullTime(r.StartedAt), nullTime(r.FinishedAt), nullTime(r.RetryAt),
			nullTime(r.StartAt), nullTime(r.ExpiresAt), r.Dispatches, r.UpdatedAt, r.StateSince, r.DependsOn,
			null(r.TriggerRule), null(r.UniqueKey), null(r.DuplicateOf), null(r.CancelledBy),
			r.Dependents, null(r.ParentID), null(r.ShardID), r.LastSeq)
	}); err != nil {
		return fmt.Errorf("upsert tasks: %w", err)
	}
	if err := execChunks(ctx, tx, upsertAttempts, 10, len(b.attempts), func(i int, args []any) []any {
		r := b.attempts[i]
		return append(args, r.ExecutionID, r.TaskID, r.Type, r.Attempt, null(r.Executor), r.StartedAt,
			nullTime(r.FinishedAt), r.Outcome, null(r.Error), r.Seq)
	}); err != nil {
		return fmt.Errorf("upsert attempts: %w", err)
	}
	if err := execChunks(ctx, tx, insertEdges, 2, len(b.edges), func(i int, args []any) []any {
		return append(args, b.edges[i].Upstream, b.edges[i].Dependent)
	}); err != nil {
		return fmt.Errorf("insert edges: %w", err)
	}
	if err := execChunks(ctx, tx, upsertSteps, 13, len(b.steps), func(i int, args []any) []any {
		r := b.steps[i]
		return append(args, r.TaskID, r.Name, r.Kind, r.Attempt, r.ExecutionID, null(r.Executor), r.StoredAt,
			nullTime(r.SleepUntil), null(r.Result), null(r.ResultObject), null(r.ResultBucket), null(r.ResultDigest), r.Seq)
	}); err != nil {
		return fmt.Errorf("upsert steps: %w", err)
	}
	if err := execChunks(ctx, tx, upsertEventWaits, 15, len(b.waits), func(i int, args []any) []any {
		r := b.waits[i]
		var seq any
		if r.EventSeq != 0 {
			seq = r.EventSeq
		}
		return append(args, r.TaskID, r.Type, r.Subject, r.Match, r.TimeoutMS, r.Outcome, nullTime(r.WaitingSince),
			nullTime(r.TimeoutAt), seq, null(r.EventData), nullTime(r.EndedAt), null(r.DecidedBy), null(r.Reason), r.UpdatedAt, r.LastSeq)
	}); err != nil {
		return fmt.Errorf("upsert event waits: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit batch: %w", err)
	}
	return nil
}

// execChunks runs query (with one %s for the VALUES list) over n rows of
// cols columns, rowsPerStatement at a time; row appends row i's values.
func execChunks(ctx context.Context, tx *sql.Tx, query string, cols, n int, row func(i int, args []any) []any) error {
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	for start := 0; start < n; start += rowsPerStatement {
		end := min(start+rowsPerStatement, n)
		args := make([]any, 0, (end-start)*cols)
		for i := start; i < end; i++ {
			args = row(i, args)
		}
		values := strings.TrimSuffix(strings.Repeat(tuple+",", end-start), ",")
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(query, values), args...); err != nil {
			return err
		}
	}
	return nil
}

func null(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return *t
}
