/**
 * Durable steps and sleeps (subjects.md, "Durable steps and sleeps"), as
 * executor/steps.go implements them in Go. A step's result is stored in
 * the task's record by the orchestrator (a report of status "step", sent
 * as a direct request and answered once the record holds it); the record
 * travels with every later dispatch (and a take-over's claim), so a later
 * attempt finds it without reading anything.
 */
import { createHash } from "node:crypto";
import type { NatsConnection } from "@nats-io/transport-node";
import { AttemptLostError, PermanentError, SleepError } from "./errors.js";
import type { Objects } from "./objects.js";
import * as subj from "./subjects.js";
import { jsonBytes, parseJSON, sleep, utf8 } from "./util.js";
import type { Report, StepRecord, StepReply } from "./wire.js";

/** The most steps and sleeps stored for one task (task.MaxSteps). */
export const MAX_STEPS = 100;
/** The longest step name, in bytes (task.MaxStepNameBytes). */
export const MAX_STEP_NAME_BYTES = 128;
/** The largest step result kept in the task's record (task.StepInlineLimit); larger ones go to the object store. */
export const STEP_INLINE_LIMIT = 4 << 10;
/** The inline step results of one record together (task.StepsInlineTotal): a result that would go over is stored as an object. */
export const STEPS_INLINE_TOTAL = 64 << 10;
/** The largest step result, inline or stored (task.MaxStepResult). */
export const MAX_STEP_RESULT = 32 << 20;
/** The longest durable sleep, in ms: 366 days (task.MaxSleep). */
export const MAX_SLEEP_MS = 366 * 24 * 3_600_000;
/** The names of sleeps: the n-th Job.sleep of a handler's run is "ax:sleep:<n>". */
export const SLEEP_PREFIX = "ax:sleep:";
/** Step names may not start with it (AX's sleeps do). */
export const RESERVED_STEP_PREFIX = "ax:";

/** The name of the n-th (1-based) sleep of a handler's run. */
export function sleepName(n: number): string {
  return `${SLEEP_PREFIX}${n}`;
}

/**
 * The object-store name of a step result stored as an object by the
 * attempt executionID: `steps/<id>/<execution_id>/<h>`, h the first 16
 * bytes of the SHA-256 of the step's name in hex (task.StepObjectName).
 */
export function stepObjectName(id: string, executionID: string, name: string): string {
  const h = createHash("sha256").update(name, "utf8").digest().subarray(0, 16).toString("hex");
  return `steps/${id}/${executionID}/${h}`;
}

/** A lone surrogate: a string that is not UTF-8 once encoded. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Go's %q, near enough for messages: a double-quoted string. */
function q(s: string): string {
  return JSON.stringify(s);
}

/**
 * Says what is wrong with a step's name (undefined when it is fine), in
 * the Go SDK's words (task.ValidateStepName): 1–128 bytes of UTF-8
 * without control characters, not starting with "ax:" (unless sleep).
 */
export function validateStepName(name: string, isSleep = false): string | undefined {
  const n = Buffer.byteLength(name);
  if (name === "") return "a step needs a name";
  if (n > MAX_STEP_NAME_BYTES) return `step name ${q([...name].slice(0, 40).join(""))}… is ${n} bytes; the limit is ${MAX_STEP_NAME_BYTES}`;
  if (LONE_SURROGATE.test(name)) return `step name ${q(name)} is not UTF-8`;
  // unicode.IsControl: C0, DEL and C1.
  if (/[\u0000-\u001f\u007f-\u009f]/.test(name)) return `step name ${q(name)} holds a control character`;
  if (isSleep && !name.startsWith(SLEEP_PREFIX)) return `sleep name ${q(name)} does not start with ${q(SLEEP_PREFIX)}`;
  if (!isSleep && name.startsWith(RESERVED_STEP_PREFIX)) return `step name ${q(name)} starts with ${q(RESERVED_STEP_PREFIX)}, which AX reserves (its sleeps)`;
  return undefined;
}

/** Formats milliseconds as Go's time.Duration.String does ("300ms", "1m30s", "8784h0m0s"), for messages. */
export function goDurationString(ms: number): string {
  if (ms === 0) return "0s";
  if (ms < 0) return "-" + goDurationString(-ms);
  if (ms < 1000) return `${ms}ms`;
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = `${(ms % 60_000) / 1000}s`;
  if (h > 0) return `${h}h${m}m${s}`;
  if (m > 0) return `${m}m${s}`;
  return s;
}

/** What a task's steps need of their executor. */
export interface StepsHost {
  readonly nc: NatsConnection;
  readonly objects: Objects;
  log(level: "debug" | "info" | "warn" | "error", msg: string, fields?: Record<string, unknown>): void;
}

const decoder = new TextDecoder();

/** The JSON bytes of a result, or undefined for none (undefined, or a function). */
function encode(v: unknown): string | undefined {
  return v === undefined ? undefined : JSON.stringify(v);
}

/**
 * A job's view of its task's steps: those its record held when the
 * attempt started and those stored since. @internal
 */
export class JobSteps {
  private readonly stored = new Map<string, StepRecord>();
  private count = 0;
  private inline = 0;
  private lastRev = 0;
  private sleeps = 0;
  private readonly running = new Set<string>();
  private isLost = false;

  constructor(
    private readonly host: StepsHost,
    private readonly capability: string,
    /** The attempt's identity: id, type, execution, token, revisions, takeovers. */
    private readonly base: Report,
    /** The revision of the orchestrator's running mark, which a heartbeat may write while the handler runs. */
    private readonly claimRev: () => number,
    /** Called once when the orchestrator says the attempt is no longer this executor's. */
    private readonly lost: () => void,
    /** Aborts when the handler must stop. */
    private readonly signal: AbortSignal,
    steps: readonly StepRecord[] = [],
  ) {
    for (const st of steps) {
      this.stored.set(st.name, st);
      this.inline += inlineBytes(st);
    }
    this.count = steps.length;
  }

  /** The revision after the attempt's last stored step (0: none). */
  stepRevision(): number {
    return this.lastRev;
  }

  /** The steps and sleeps stored, those of the record first. */
  list(): StepRecord[] {
    return [...this.stored.values()];
  }

  /** Job.step. */
  async step<T>(name: string, fn: (signal: AbortSignal) => T | Promise<T>): Promise<T> {
    const id = this.base.id;
    const bad = validateStepName(name, false);
    if (bad !== undefined) throw new PermanentError(`step of ${id}: ${bad}`);
    const st = this.stored.get(name);
    if (st) return this.result<T>(st);
    if (this.running.has(name)) throw new Error(`step ${q(name)} of ${id}: already running in this attempt (steps need unique names)`);
    if (this.count + this.running.size >= MAX_STEPS) {
      throw new PermanentError(`step ${q(name)} of ${id}: the task has ${this.count} steps and sleeps; the limit is ${MAX_STEPS}`);
    }
    this.running.add(name);
    try {
      const v = await fn(this.signal);
      let enc: string | undefined;
      try {
        enc = encode(v);
      } catch (e) {
        throw new PermanentError(`step ${q(name)} of ${id}: encode result: ${(e as Error).message}`, { cause: e });
      }
      return await this.store<T>(name, enc);
    } finally {
      this.running.delete(name);
    }
  }

  /** Job.sleep: rejects with a SleepError the handler lets propagate, or resolves when there is nothing (more) to sleep. */
  sleep(ms: number): Promise<void> {
    const id = this.base.id;
    this.sleeps++;
    const name = sleepName(this.sleeps);
    if (this.stored.has(name)) return Promise.resolve(); // slept already
    if (!(ms > 0)) return Promise.resolve();
    if (ms > MAX_SLEEP_MS) {
      return Promise.reject(new PermanentError(`sleep of ${id} for ${goDurationString(ms)}: the limit is ${goDurationString(MAX_SLEEP_MS)}`));
    }
    if (this.count + this.running.size >= MAX_STEPS) {
      return Promise.reject(new PermanentError(`sleep of ${id}: the task has ${this.count} steps and sleeps; the limit is ${MAX_STEPS}`));
    }
    return Promise.reject(new SleepError(name, ms));
  }

  /**
   * Has the orchestrator store a step's result: inline or, when over the
   * record's share, as an object first. Asks until the orchestrator
   * answers stored or refused, or the handler's signal aborts.
   */
  private async store<T>(name: string, enc: string | undefined): Promise<T> {
    const id = this.base.id;
    const data = enc === undefined ? undefined : utf8(enc);
    const size = data?.length ?? 0;
    if (size > MAX_STEP_RESULT) throw new PermanentError(`step ${q(name)} of ${id}: its result is ${size} bytes; the limit is ${MAX_STEP_RESULT}`);
    const r: Report = { ...this.base, status: "step", step: name };
    if (enc !== undefined) r.result = JSON.parse(enc) as unknown;
    if (data && (size > STEP_INLINE_LIMIT || this.inline + size > STEPS_INLINE_TOTAL)) {
      delete r.result;
      r.result_object = stepObjectName(id, r.execution_id, name);
      r.result_bucket = subj.objectBucket(this.capability);
      try {
        r.result_digest = await this.host.objects.put(r.result_bucket, r.result_object, data);
      } catch (e) {
        throw new Error(`step ${q(name)} of ${id}: store its result (${size} bytes) as ${r.result_object}: ${(e as Error).message}`, { cause: e });
      }
    }
    let wait = 100;
    for (;;) {
      const claimRev = this.claimRev();
      if (claimRev) r.claim_revision = claimRev;
      if (this.lastRev) r.step_revision = this.lastRev;
      r.finished_at = new Date().toISOString();
      let why: string;
      try {
        const rep = await this.ask(r);
        if (rep.step) {
          if (!this.stored.has(name)) {
            this.stored.set(name, rep.step);
            this.count++;
            this.inline += inlineBytes(rep.step);
          }
          this.lastRev = Math.max(this.lastRev, rep.revision ?? 0);
          if (!rep.step.result_object) return rep.step.result as T; // ours, or one stored before (its first result stands)
          if (rep.step.result_object === r.result_object && rep.step.result_digest === r.result_digest) {
            return JSON.parse(enc as string) as T; // ours, as an object
          }
          return this.result<T>(rep.step);
        }
        if (rep.lost) {
          if (!this.isLost) {
            this.isLost = true;
            this.lost();
          }
          throw new AttemptLostError(`step ${q(name)} of ${id} not stored: ${rep.refused ?? ""}`);
        }
        if (rep.refused) throw new PermanentError(`step ${q(name)} of ${id} not stored: ${rep.refused}`);
        why = rep.error || "no answer";
      } catch (e) {
        if (e instanceof AttemptLostError || e instanceof PermanentError) throw e;
        why = (e as Error)?.message ?? String(e);
      }
      this.host.log("debug", "step not stored yet; asking again", { task_id: id, step: name, error: why, in_ms: wait });
      await sleep(wait, this.signal);
      if (this.signal.aborted) {
        const reason = this.signal.reason as Error | undefined;
        throw new Error(`step ${q(name)} of ${id} not stored (${why}): ${reason?.message ?? "aborted"}`, { cause: reason });
      }
      wait = Math.min(wait * 2, 2000);
    }
  }

  /** One step request: a direct request on the task type's report subject, which the executor may publish already. */
  private async ask(r: Report): Promise<StepReply> {
    const m = await this.host.nc.request(subj.direct(subj.completed(r.type)), jsonBytes(r), { timeout: 5000 });
    try {
      return parseJSON<StepReply>(m.data);
    } catch (e) {
      throw new Error(`unreadable reply: ${(e as Error).message}`);
    }
  }

  /** A stored step's result, read from the object store (digest checked) when it is stored there. */
  private async result<T>(st: StepRecord): Promise<T> {
    if (!st.result_object) return st.result as T;
    let data: Uint8Array;
    try {
      data = await this.host.objects.get(st.result_bucket, st.result_object, st.result_digest);
    } catch (e) {
      throw new Error(`step ${q(st.name)} of ${this.base.id}: read its stored result: ${(e as Error).message}`, { cause: e });
    }
    return JSON.parse(decoder.decode(data)) as T;
  }
}

/** The bytes a stored step's inline result takes in the record. */
function inlineBytes(st: StepRecord): number {
  return st.result === undefined ? 0 : Buffer.byteLength(JSON.stringify(st.result));
}
