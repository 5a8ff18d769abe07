/**
 * The JSON shapes of AX's wire contract (subjects.md). Field names are the
 * contract's snake_case names; durations travel as Go duration strings
 * ("30s", "1m30s") and times as RFC 3339 strings.
 */

/** A Go duration string such as "30s" or "1m30s". */
export type GoDuration = string;

/** A duration given to the SDK: milliseconds, or a Go duration string. */
export type DurationInput = number | GoDuration;

/** A task's state (subjects.md, the record's `state`). */
export type TaskState =
  | "waiting"
  | "ready"
  | "running"
  | "retrying"
  | "succeeded"
  | "failed"
  | "cancelled"
  | "expired";

/** The terminal states: a task in one of them never moves again (but a failed one may be re-driven). */
export const TERMINAL_STATES: readonly TaskState[] = ["succeeded", "failed", "cancelled", "expired"];

/** Reports whether a state is terminal. */
export function isTerminal(s: TaskState): boolean {
  return TERMINAL_STATES.includes(s);
}

/** Which upstream outcomes let a task with `depends_on` run. */
export type TriggerRule = "all_succeeded" | "all_ended" | "any_failed";

/**
 * A task spec as submitted on `task.submit-p<N>.<type>` (subjects.md,
 * "submit a task"). Absent fields take the contract's defaults.
 */
export interface WireSpec {
  id: string;
  type: string;
  payload?: unknown;
  priority?: number;
  capability?: string;
  depends_on?: string[];
  max_retries?: number;
  timeout?: GoDuration;
  estimated_cost?: number;
  delay?: GoDuration;
  run_at?: string;
  deadline?: string;
  ttl?: GoDuration;
  dispatch_timeout?: GoDuration;
  max_dispatches?: number;
  dependency_timeout?: GoDuration;
  trigger_rule?: TriggerRule;
  unique_key?: string;
  unique_window?: GoDuration;
  shardable?: boolean;
  max_parallel_shards?: number;
  min_shard_success?: number;
  fairness_key?: string;
  concurrency_key?: string;
  /** An event task: it runs no handler and succeeds with the event's data (subjects.md, `ax.event.<subject>.<match>`). */
  wait_for?: WireEventWait;
  /** The event that cancels the task if it has not finished (subjects.md, "Cancel events"). */
  cancel_on?: WireEventCancel;
}

/** A spec's `cancel_on`: the event on `ax.event.<subject>.<match>`, stored after the task's acceptance, that cancels it. */
export interface WireEventCancel {
  subject: string;
  match: string;
}

/** A spec's `wait_for`: the event on `ax.event.<subject>.<match>` an event task waits for, and how long. */
export interface WireEventWait {
  subject: string;
  match: string;
  timeout: GoDuration;
}

/** A durable step or sleep in a record's `steps` (subjects.md, "Durable steps and sleeps"). */
export interface StepRecord {
  name: string;
  /** The result (JSON) when at most 4 KiB and within the record's share; else in result_object. */
  result?: unknown;
  result_object?: string;
  result_bucket?: string;
  result_digest?: string;
  /** A sleep's end. */
  sleep_until?: string;
  attempt: number;
  execution_id: string;
  executor?: string;
  at: string;
}

/** The answer to a step request: the stored step, why it was refused (`lost`: the attempt is no longer ours), or `error` alone: ask again. */
export interface StepReply {
  error?: string;
  step?: StepRecord;
  revision?: number;
  refused?: string;
  lost?: boolean;
}

/** One failed attempt kept in a record's `errors`. */
export interface AttemptError {
  attempt: number;
  execution_id: string;
  executor?: string;
  error: string;
  at: string;
}

/** A task's record (subjects.md, "Record (`task`) fields"): every spec field plus where it is. */
export interface TaskRecord<R = unknown> extends WireSpec {
  state: TaskState;
  attempt: number;
  execution_id?: string;
  executor?: string;
  has_dependents?: boolean;
  dependents?: string[];
  errors?: AttemptError[];
  result?: R;
  reason?: string;
  retry_at?: string;
  redrives?: number;
  start_at?: string;
  expires_at?: string;
  dispatches?: number;
  dispatch_revision?: number;
  snoozes?: number;
  snoozed?: boolean;
  takeovers?: number;
  cancelled_by?: string;
  duplicate_of?: string;
  result_object?: string;
  result_bucket?: string;
  result_digest?: string;
  trace_parent?: string;
  phase?: string;
  /** A planned task's plan and fan-out state. */
  sharding?: {
    object: string;
    shards: number;
    aggregate?: boolean;
    bucket?: string;
    digest?: string;
    planned_at?: string;
    registered?: boolean;
    ended_by?: string;
  };
  parent?: string;
  shard_index?: number;
  parked?: boolean;
  /** The durable steps and sleeps its handler stored. */
  steps?: StepRecord[];
  /** An event task: when its wait was registered. */
  event_wait_since?: string;
  /** An event task that succeeded: the AX_EVENTS sequence of its event. */
  event_seq?: number;
  /** A task with a cancel_on: AX_EVENTS's last sequence when it was accepted (only a later event cancels it). */
  cancel_on_after?: number;
  /** An event task an operator approved or rejected (ax approve). */
  approval?: { approved: boolean; by?: string; reason?: string; at: string };
  submitted_at: string;
  ready_at?: string;
  started_at?: string;
  finished_at?: string;
  updated_at: string;
}

/** One entry of a task's history (`ax.task.<id>.e`, `ax.task.<id>.d.…`). */
export interface TaskEvent {
  kind: string;
  from?: TaskState;
  to: TaskState;
  at: string;
  actor: string;
  reason?: string;
  task: TaskRecord;
}

/** A refused submission (`ax.rejected.<id>`). */
export interface Rejection {
  id?: string;
  subject: string;
  reason: string;
  input: string;
  rejected_at: string;
}

/** The answer to `ax.state.<id>.<type>`. */
export interface StateReply {
  task?: TaskRecord;
  revision?: number;
  rejection?: Rejection;
  not_found?: boolean;
  error?: string;
}

/** The answer on a command's `Ax-Reply-To`. */
export interface CommandReply {
  ok: boolean;
  error?: string;
  code?: "not_found" | "conflict" | "invalid" | string;
  task?: TaskRecord;
}

/** The answer to a direct request (`ax.direct.<subject>`): no `error` means applied. */
export interface DirectReply {
  error?: string;
}

/** The answer to a batch direct request (`ax.direct.batch.<subject>`). */
export interface DirectBatchReply {
  error?: string;
  results?: DirectReply[];
}

/** An attempt's outcome (`task.completed.<type>`). */
export type OutcomeStatus = "succeeded" | "failed" | "snoozed" | "cancelled" | "sleeping" | "step";

/** A planner's outcome in a report (`plan`). */
export interface PlanRef {
  object: string;
  shards: number;
  aggregate?: boolean;
  bucket?: string;
  digest?: string;
}

/** An attempt's report (subjects.md, `task.completed.<type>`). */
export interface Report {
  id: string;
  type: string;
  execution_id: string;
  attempt: number;
  status: OutcomeStatus;
  error?: string;
  result?: unknown;
  executor: string;
  started_at: string;
  finished_at: string;
  dispatch_revision?: number;
  claim_revision?: number;
  permanent?: boolean;
  retry_after?: GoDuration;
  result_object?: string;
  result_bucket?: string;
  result_digest?: string;
  plan?: PlanRef;
  token?: string;
  /** The step to store (status step) or the sleep to begin (status sleeping). */
  step?: string;
  /** The record's takeovers as the attempt's executor holds it. */
  takeovers?: number;
  /** The task's revision after this attempt's last stored step. */
  step_revision?: number;
}

/** A claim request (`ax.claim.<capability>`). */
export interface ClaimRequest {
  id: string;
  execution_id: string;
  revision: number;
  executor: string;
  started_at: string;
  delivered: number;
  mark?: boolean;
  token?: string;
}

/** The answer to a claim. */
export interface ClaimReply {
  status: "granted" | "running_elsewhere" | "ended" | "not_found" | "";
  task?: TaskRecord;
  revision?: number;
  error?: string;
}

/** A lease (`ax.lease.<capability>.<id>`). */
export interface Lease {
  execution_id: string;
  executor: string;
  at: string;
  token?: string;
}

/** A revoked execution (`AX_REVOKED` values). */
export interface Revocation {
  id: string;
  execution_id: string;
  state: TaskState;
  at: string;
}

/** How an upstream ended, as `ax.inputs.<capability>` answers. */
export interface Input<R = unknown> {
  id: string;
  state: TaskState;
  reason?: string;
  result?: R;
  result_object?: string;
  result_bucket?: string;
  result_digest?: string;
}

/** The answer to `ax.inputs.<capability>`. */
export interface InputsReply {
  inputs?: Input[];
  error?: string;
}
