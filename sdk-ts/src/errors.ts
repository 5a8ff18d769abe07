import type { Rejection, TaskRecord } from "./wire.js";

/** A spec the SDK refused before sending it: `field` names the JSON field at fault. */
export class InvalidSpecError extends Error {
  constructor(
    readonly field: string,
    readonly reason: string,
    id?: string,
  ) {
    super(`invalid task${id ? " " + id : ""}: ${field}: ${reason}`);
    this.name = "InvalidSpecError";
  }
}

/** A submission the orchestrator refused (recorded on `ax.rejected.<id>`). */
export class RejectedError extends Error {
  constructor(readonly rejection: Rejection) {
    super(`task ${rejection.id ?? "(no id)"} rejected: ${rejection.reason}`);
    this.name = "RejectedError";
  }
}

/** No task (and no rejection) has that id — of that type, for a state read. */
export class NotFoundError extends Error {
  constructor(readonly id: string) {
    super(`task ${id} not found`);
    this.name = "NotFoundError";
  }
}

/** A command (cancel, redrive) the orchestrator did not apply. */
export class CommandRefusedError extends Error {
  constructor(
    readonly kind: string,
    readonly id: string,
    readonly code: string,
    readonly reason: string,
    readonly task?: TaskRecord,
  ) {
    super(`${kind} ${id}: ${reason}${code ? ` (${code})` : ""}`);
    this.name = "CommandRefusedError";
  }
}

/** AX's streams do not exist: no orchestrator (or `ax topology`) created them yet. */
export class NoTopologyError extends Error {
  constructor(cause?: unknown) {
    super("AX's streams do not exist (start an orchestrator or run `ax topology`)", { cause });
    this.name = "NoTopologyError";
  }
}

// Handler outcomes. Throw one of these from a handler (or return
// `Promise.reject(...)`) to ask for something other than a plain failed
// attempt, which is retried with backoff until max_retries and then
// dead-lettered. They mirror executor.Permanent, RetryAfter, Snooze and
// Cancel in the Go SDK.

/** A failure that must not be retried: the task fails at once and is dead-lettered. */
export class PermanentError extends Error {
  constructor(message = "permanent failure", options?: ErrorOptions) {
    super(message, options);
    this.name = "PermanentError";
  }
}

/** A failed attempt whose retry starts after `delayMs` instead of the backoff delay; it still counts against max_retries. */
export class RetryAfterError extends Error {
  constructor(
    readonly delayMs: number,
    message = "retry requested",
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "RetryAfterError";
  }
}

/**
 * Runs the same attempt again after `delayMs` without counting a failure
 * (at most 100 snoozes per attempt series; beyond that a snooze is a failed attempt).
 */
export class SnoozeError extends Error {
  constructor(readonly delayMs: number) {
    super(`snooze for ${delayMs}ms`);
    this.name = "SnoozeError";
  }
}

/** Ends the task cancelled by its handler's decision: nothing is retried or dead-lettered. */
export class CancelError extends Error {
  constructor(message = "cancelled", options?: ErrorOptions) {
    super(message, options);
    this.name = "CancelError";
  }
}

/**
 * Ends the attempt in a durable sleep (Job.sleep rejects with it; let it
 * propagate out of the handler): the task waits, retrying without spending
 * an attempt, and its handler runs again after `delayMs`, where the steps
 * stored before return their results and that sleep resolves.
 */
export class SleepError extends Error {
  constructor(
    /** The sleep's name among the task's steps ("ax:sleep:<n>"). */
    readonly sleepName: string,
    readonly delayMs: number,
  ) {
    super(`sleep for ${delayMs}ms (${sleepName})`);
    this.name = "SleepError";
  }
}

/**
 * The orchestrator refused to store a step because the attempt is no
 * longer this executor's (taken over after it was thought dead,
 * superseded, or the task ended): the handler's signal aborts (reason
 * LostError) and its outcome is not reported — the attempt's current
 * executor reports it. Go's executor.ErrAttemptLost.
 */
export class AttemptLostError extends Error {
  constructor(message: string) {
    super(`${message}: the attempt is no longer this executor's`);
    this.name = "AttemptLostError";
  }
}
