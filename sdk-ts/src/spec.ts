import { InvalidSpecError } from "./errors.js";
import { newID, toGoDuration, toMillis } from "./util.js";
import { goDurationString } from "./steps.js";
import type { DurationInput, TriggerRule, WireSpec } from "./wire.js";

/**
 * A task to submit. Field names are the wire contract's (subjects.md,
 * "submit a task"); absent fields take its defaults: priority 2,
 * capability "default", 5 retries, a 10 minute timeout, cost 1. Durations
 * are milliseconds or Go duration strings ("30s"); times are Dates or
 * RFC 3339 strings. `P` is the payload's type.
 */
export interface TaskSpec<P = unknown> {
  /** Chosen by the client; a ULID when absent. Submitting an id again never creates a second task. */
  id?: string;
  /** The task type: dot-separated tokens of [A-Za-z0-9_-], e.g. "email.send". */
  type: string;
  /** Any JSON value, handed to the handler. */
  payload?: P;
  /** 0 (highest) … 5 (lowest); default 2. */
  priority?: number;
  /** Routes the task to executors of this capability; default "default". */
  capability?: string;
  /** Ids that must succeed (see trigger_rule) before this task is ready. */
  depends_on?: string[];
  /** Retries after a failed first attempt, 0 … 100; default 5. */
  max_retries?: number;
  /** Bound of one attempt; default 10 minutes. */
  timeout?: DurationInput;
  /** Weight against an executor's capacity; default 1. */
  estimated_cost?: number;
  /** Hold the task this long after it is accepted. */
  delay?: DurationInput;
  /** Hold the task until then (not with delay). */
  run_at?: Date | string;
  /** Expire the task if it has not finished by then. */
  deadline?: Date | string;
  /** Like deadline, relative to acceptance (not with deadline). */
  ttl?: DurationInput;
  /** Re-dispatch a ready task no executor started within this. */
  dispatch_timeout?: DurationInput;
  /** Dispatches per attempt with dispatch_timeout; default 3. */
  max_dispatches?: number;
  /** How long to wait for a depends_on id that does not exist yet. */
  dependency_timeout?: DurationInput;
  /** Which upstream outcomes let the task run (only with depends_on). */
  trigger_rule?: TriggerRule;
  /** One task per key and type within unique_window. */
  unique_key?: string;
  /** How long unique_key holds, 1s … 366 days; required with unique_key. */
  unique_window?: DurationInput;
  /** Run the type's planner first; its shards run as child tasks. */
  shardable?: boolean;
  /** Shardable only: at most this many shards released at once. */
  max_parallel_shards?: number;
  /** Shardable only: the share of shards that must succeed (0: all). */
  min_shard_success?: number;
  /** A tenant sharing its level's dispatches fairly with other keys. */
  fairness_key?: string;
  /** What the key limits' concurrency and rate apply to. */
  concurrency_key?: string;
  /**
   * Makes an event task: it runs no handler and, when it would become
   * ready, waits for an event on `ax.event.<subject>.<match>`
   * (Client.signal) and succeeds with the event's data as its result
   * (dependents read it as any upstream's), or expires at its timeout.
   */
  wait_for?: EventWait;
  /**
   * Cancels the task, as `ax cancel` would (a running handler's signal is
   * aborted, dependents follow their trigger rules), when an event on
   * `ax.event.<subject>.<match>` is stored after the task was accepted and
   * it has not finished. An older event of the subject does not cancel it.
   */
  cancel_on?: EventCancel;
}

/** A spec's `cancel_on`: the event that cancels the task. */
export interface EventCancel {
  /** The event's subject without its match, as EventWait's. */
  subject: string;
  /** The last token of the event's subject, matched exactly, as EventWait's. */
  match: string;
}

/** An event task's wait (a spec's `wait_for`). */
export interface EventWait {
  /** The event's subject without its match: 1–7 dot-separated tokens of [A-Za-z0-9_-], e.g. "payment.received". */
  subject: string;
  /** The last token of the event's subject, matched exactly (e.g. an order id): one token of 1–128 of [A-Za-z0-9_-]. */
  match: string;
  /** How long the task waits once registered, up to 366 days; then it expires. */
  timeout: DurationInput;
}

/** The largest event data (task.MaxEventData, 16 KiB). */
export const MAX_EVENT_DATA = 16 << 10;
const MAX_EVENT_MATCH_LEN = 128;
const MAX_EVENT_SUBJECT_TOKENS = 7;
const MAX_EVENT_TIMEOUT_MS = 366 * 24 * 3_600_000;

function validEventWaitSubject(s: string): boolean {
  return validType(s) && s.split(".").length <= MAX_EVENT_SUBJECT_TOKENS;
}

function validEventMatch(m: string): boolean {
  return m.length > 0 && m.length <= MAX_EVENT_MATCH_LEN && /^[A-Za-z0-9_-]+$/.test(m);
}

/**
 * Reports whether s can be an event's subject (Client.signal): 2–8
 * dot-separated tokens of [A-Za-z0-9_-], the last of which is what a
 * wait_for's match matches (task.ValidEventSubject).
 */
export function validEventSubject(s: string): boolean {
  const dot = s.lastIndexOf(".");
  return dot > 0 && validEventWaitSubject(s.slice(0, dot)) && validEventMatch(s.slice(dot + 1));
}

const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

/** Reports whether s can name a task: 1–128 of [A-Za-z0-9_-=/], starting with a letter or digit. */
export function validID(s: string): boolean {
  return /^[A-Za-z0-9][A-Za-z0-9_\-=/]{0,127}$/.test(s);
}

/** Reports whether s can name a task type (or a key): 1–8 dot-separated tokens of [A-Za-z0-9_-]. */
export function validType(s: string): boolean {
  const parts = s.split(".");
  return parts.length <= 8 && parts.every((p) => TOKEN.test(p));
}

/** Reports whether s can name a capability: one token of [A-Za-z0-9_-]. */
export function validCapability(s: string): boolean {
  return TOKEN.test(s);
}

function time(v: Date | string): string {
  const d = v instanceof Date ? v : new Date(v);
  if (Number.isNaN(d.getTime())) throw new Error(`invalid time ${String(v)}`);
  return v instanceof Date ? d.toISOString() : v;
}

/**
 * Checks a spec as the orchestrator will (the checks the Go SDK makes
 * before sending) and converts it to its wire form, with a ULID when it
 * has no id. A refusal is an InvalidSpecError naming the field.
 */
export function toWire<P>(spec: TaskSpec<P>, maxPayload = 256 << 10): WireSpec {
  const id = spec.id ?? newID();
  const bad = (field: string, reason: string) => new InvalidSpecError(field, reason, id);
  if (!validID(id)) throw bad("id", `${JSON.stringify(id)} is not 1-128 of [A-Za-z0-9_-=/] starting with a letter or digit`);
  if (id.includes("/shard/")) throw bad("id", `${JSON.stringify(id)} contains "/shard/", which is reserved for shards`);
  if (!spec.type || !validType(spec.type)) throw bad("type", `${JSON.stringify(spec.type)} is not dot-separated tokens of [A-Za-z0-9_-]`);
  const w: WireSpec = { id, type: spec.type };
  if (spec.payload !== undefined) {
    const enc = JSON.stringify(spec.payload);
    if (enc === undefined) throw bad("payload", "is not JSON");
    if (Buffer.byteLength(enc) > maxPayload) throw bad("payload", `${Buffer.byteLength(enc)} bytes exceeds the limit of ${maxPayload}`);
    w.payload = spec.payload;
  }
  const int = (field: string, v: number | undefined, lo: number, hi: number) => {
    if (v === undefined) return undefined;
    if (!Number.isInteger(v) || v < lo || v > hi) throw bad(field, `${v} is out of range ${lo}..${hi}`);
    return v;
  };
  const dur = (field: string, v: DurationInput | undefined) => {
    if (v === undefined) return undefined;
    let ms: number;
    try {
      ms = toMillis(v);
    } catch {
      throw bad(field, `${JSON.stringify(v)} is not a duration`);
    }
    if (ms < 0) throw bad(field, "must not be negative");
    return toGoDuration(v);
  };
  w.priority = int("priority", spec.priority, 0, 5);
  if (spec.capability !== undefined) {
    if (!validCapability(spec.capability)) throw bad("capability", `${JSON.stringify(spec.capability)} is not one token of [A-Za-z0-9_-]`);
    w.capability = spec.capability;
  }
  if (spec.depends_on !== undefined) {
    if (spec.depends_on.length > 1000) throw bad("depends_on", `${spec.depends_on.length} dependencies exceed the limit of 1000`);
    const seen = new Set<string>();
    for (const d of spec.depends_on) {
      if (!validID(d)) throw bad("depends_on", `${JSON.stringify(d)} is not a valid task id`);
      if (d === id) throw bad("depends_on", "a task cannot depend on itself");
      if (seen.has(d)) throw bad("depends_on", `${JSON.stringify(d)} is listed twice`);
      seen.add(d);
    }
    w.depends_on = [...spec.depends_on];
  }
  w.max_retries = int("max_retries", spec.max_retries, 0, 100);
  w.timeout = dur("timeout", spec.timeout);
  if (w.timeout !== undefined && toMillis(w.timeout) <= 0) throw bad("timeout", "must be positive");
  if (spec.estimated_cost !== undefined) {
    if (!(spec.estimated_cost > 0) || spec.estimated_cost > 1e9) throw bad("estimated_cost", `${spec.estimated_cost} must be a positive number`);
    w.estimated_cost = spec.estimated_cost;
  }
  w.delay = dur("delay", spec.delay);
  if (spec.run_at !== undefined) {
    if (w.delay !== undefined && toMillis(w.delay) > 0) throw bad("run_at", "give delay or run_at, not both");
    w.run_at = time(spec.run_at);
  }
  w.ttl = dur("ttl", spec.ttl);
  if (spec.deadline !== undefined) {
    if (w.ttl !== undefined && toMillis(w.ttl) > 0) throw bad("deadline", "give deadline or ttl, not both");
    w.deadline = time(spec.deadline);
  }
  w.dispatch_timeout = dur("dispatch_timeout", spec.dispatch_timeout);
  w.max_dispatches = int("max_dispatches", spec.max_dispatches, 0, 100);
  w.dependency_timeout = dur("dependency_timeout", spec.dependency_timeout);
  if (spec.trigger_rule !== undefined) {
    if (!["all_succeeded", "all_ended", "any_failed"].includes(spec.trigger_rule)) throw bad("trigger_rule", `${JSON.stringify(spec.trigger_rule)} is not one of all_succeeded, all_ended, any_failed`);
    if (spec.trigger_rule !== "all_succeeded" && !spec.depends_on?.length) throw bad("trigger_rule", `${spec.trigger_rule} is only for tasks with depends_on`);
    w.trigger_rule = spec.trigger_rule;
  }
  if (spec.unique_key !== undefined) {
    if (Buffer.byteLength(spec.unique_key) > 256) throw bad("unique_key", "exceeds 256 bytes");
    if (spec.unique_window === undefined) throw bad("unique_window", "is required with unique_key");
    w.unique_key = spec.unique_key;
  }
  if (spec.unique_window !== undefined) {
    if (spec.unique_key === undefined) throw bad("unique_window", "is only for tasks with a unique_key");
    w.unique_window = dur("unique_window", spec.unique_window);
    const ms = toMillis(spec.unique_window);
    if (ms < 1000 || ms > 366 * 24 * 3_600_000) throw bad("unique_window", "is out of range 1s..8784h0m0s");
  }
  if (spec.shardable) w.shardable = true;
  if (spec.max_parallel_shards !== undefined) {
    if (!spec.shardable) throw bad("max_parallel_shards", "is only for shardable tasks");
    w.max_parallel_shards = int("max_parallel_shards", spec.max_parallel_shards, 0, 100_000);
  }
  if (spec.min_shard_success !== undefined) {
    if (!spec.shardable) throw bad("min_shard_success", "is only for shardable tasks");
    if (!(spec.min_shard_success >= 0 && spec.min_shard_success <= 1)) throw bad("min_shard_success", `${spec.min_shard_success} is not a fraction in 0..1`);
    w.min_shard_success = spec.min_shard_success;
  }
  if (spec.shardable && id.length > 100) throw bad("id", "a shardable task's id is limited to 100 characters so its shard ids fit");
  for (const k of ["fairness_key", "concurrency_key"] as const) {
    const v = spec[k];
    if (v === undefined) continue;
    if (!validType(v)) throw bad(k, `${JSON.stringify(v)} is not dot-separated tokens of [A-Za-z0-9_-]`);
    w[k] = v;
  }
  if (spec.wait_for !== undefined) {
    // task/event.go's validateWaitFor, in its words.
    const wf = spec.wait_for;
    if (typeof wf !== "object" || wf === null) throw bad("wait_for", "is not an object {subject, match, timeout}");
    if (typeof wf.subject !== "string" || !validEventWaitSubject(wf.subject)) {
      throw bad("wait_for", `subject ${JSON.stringify(wf.subject)} is not 1-${MAX_EVENT_SUBJECT_TOKENS} dot-separated tokens of [A-Za-z0-9_-]`);
    }
    if (typeof wf.match !== "string" || !validEventMatch(wf.match)) {
      throw bad("wait_for", `match ${JSON.stringify(wf.match)} is not one token of 1-${MAX_EVENT_MATCH_LEN} of [A-Za-z0-9_-]`);
    }
    let ms: number;
    try {
      ms = toMillis(wf.timeout);
    } catch {
      throw bad("wait_for", `timeout ${JSON.stringify(wf.timeout)} is not a duration`);
    }
    if (!(ms > 0) || ms > MAX_EVENT_TIMEOUT_MS) {
      throw bad("wait_for", `timeout ${goDurationString(ms)} is out of range (0, ${goDurationString(MAX_EVENT_TIMEOUT_MS)}]`);
    }
    if (spec.shardable) throw bad("wait_for", "an event task is not shardable");
    w.wait_for = { subject: wf.subject, match: wf.match, timeout: toGoDuration(wf.timeout) };
  }
  if (spec.cancel_on !== undefined) {
    // task/event.go's validateCancelOn, in its words.
    const c = spec.cancel_on;
    if (typeof c !== "object" || c === null) throw bad("cancel_on", "is not an object {subject, match}");
    if (typeof c.subject !== "string" || !validEventWaitSubject(c.subject)) {
      throw bad("cancel_on", `subject ${JSON.stringify(c.subject)} is not 1-${MAX_EVENT_SUBJECT_TOKENS} dot-separated tokens of [A-Za-z0-9_-]`);
    }
    if (typeof c.match !== "string" || !validEventMatch(c.match)) {
      throw bad("cancel_on", `match ${JSON.stringify(c.match)} is not one token of 1-${MAX_EVENT_MATCH_LEN} of [A-Za-z0-9_-]`);
    }
    w.cancel_on = { subject: c.subject, match: c.match };
  }
  for (const k of Object.keys(w) as (keyof WireSpec)[]) if (w[k] === undefined) delete w[k];
  return w;
}
