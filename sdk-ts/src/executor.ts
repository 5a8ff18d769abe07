import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { headers, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { isTransient } from "./client.js";
import { dial, type ConnectOptions } from "./conn.js";
import { CancelError, PermanentError, RetryAfterError, SleepError, SnoozeError } from "./errors.js";
import { JobSteps } from "./steps.js";
import { Batcher } from "./batcher.js";
import { acceptsClear, type Codec } from "./codec.js";
import { Objects } from "./objects.js";
import { MAX_SHARDS, type Shard, type ShardOutcome, type ShardOutcomes, type Sharded } from "./shards.js";
import { ConsumerGoneError, fetch, type Delivery } from "./pull.js";
import * as subj from "./subjects.js";
import { after, formatDuration, jsonBytes, parseDuration, parseJSON, sleep, toMillis, truncateError, utf8 } from "./util.js";
import type {
  ClaimReply,
  DurationInput,
  ClaimRequest,
  Input,
  InputsReply,
  Lease,
  PlanRef,
  Report,
  Revocation,
  StepRecord,
  TaskEvent,
  TaskRecord,
} from "./wire.js";

/** A result over this many bytes goes to the object store instead of the report (task.InlineResultLimit). */
export const INLINE_RESULT_LIMIT = 16 << 10;

/** The pull weights of p0 … p5 (smooth weighted round robin), as the Go executor's. */
export const DEFAULT_WEIGHTS: readonly number[] = [40, 25, 15, 10, 6, 4];

/** What a handler is given: the task, its attempt and a signal that aborts when the attempt must stop. */
export interface Job<P = unknown> {
  /** The task's id. */
  readonly id: string;
  /** The task's type, the key its handler is registered under. */
  readonly type: string;
  /** The task's payload as submitted (JSON). */
  readonly payload: P;
  /** 0 (highest) … 5. */
  readonly priority: number;
  /** The capability the task was routed to. */
  readonly capability: string;
  /** The 1-based attempt number in the current attempt series. */
  readonly attempt: number;
  /** How many retries follow a failed first attempt. */
  readonly maxRetries: number;
  /** This dispatch's id; a rerun gets a new one. */
  readonly executionID: string;
  /** What the task counts against the executor's capacity. */
  readonly estimatedCost: number;
  /** The task's upstreams (depends_on). */
  readonly dependsOn: readonly string[];
  /** A shardable task's step: "plan" or "aggregate" ("" for other tasks). */
  readonly phase: string;
  /** A shard's parent ("" for other tasks) and place in its plan. */
  readonly parent: string;
  readonly shardIndex: number;
  /**
   * Aborts when the attempt must stop: its timeout or the task's deadline
   * passed, the task was cancelled (its outcome is then not reported), or
   * the executor stops and gave up waiting, or a step was refused because
   * the attempt is no longer this executor's (its outcome is then not
   * reported). `signal.reason` says which (an Error named TimeoutError,
   * DeadlineError, CancelledError, StoppedError or LostError).
   */
  readonly signal: AbortSignal;
  /** How each upstream in depends_on ended, in that order (asked of the orchestrators once). */
  inputs(): Promise<Input[]>;
  /**
   * The result of the upstream id (one of dependsOn), read from the object
   * store when it was over 16 KiB and checked against its digest. Rejects
   * when the upstream did not succeed.
   */
  upstreamResult<T = unknown>(id: string): Promise<T>;
  /**
   * Reports how far the attempt has come: percent (clamped to 0–100) and
   * a short message (at most 200 bytes). Only memory is updated: the
   * executor's announcement in the workers registry carries the last
   * report (written at most every quarter second), as `ax status` and the
   * console show. No task record is written.
   */
  progress(percent: number, message?: string): void;
  /**
   * A durable step: runs fn once per task and stores its result (JSON)
   * in the task's record through the orchestrator before resolving with
   * it; in every later attempt of the task — a retry, a take-over after
   * this executor died, a re-drive, the run after a sleep — it resolves
   * with the stored result without running fn (the result as JSON
   * decodes it: give T a JSON shape).
   *
   * fn runs at least once, and once its result is stored never again for
   * that task: if the executor dies (or the attempt fails) after fn
   * returned but before the orchestrator answered stored, fn runs again in
   * the next attempt — make it idempotent. fn's error is thrown as is and
   * nothing is stored. Names are unique within the task (1–128 bytes of
   * UTF-8, no control characters, not starting with "ax:"), reached under
   * the same names in every attempt; a task stores at most 100 steps and
   * sleeps; a result over 4 KiB (up to 32 MiB) goes to the capability's
   * object store as `steps/<id>/<execution_id>/<h>`. Breaking a limit is a
   * PermanentError. When the orchestrator says the attempt is no longer
   * this executor's, the step rejects with an AttemptLostError, the
   * handler's signal aborts (reason LostError) and its outcome is not
   * reported.
   *
   * ```ts
   * const charge = await job.step("charge", () => payments.charge(order));
   * ```
   */
  step<T = unknown>(name: string, fn: (signal: AbortSignal) => T | Promise<T>): Promise<T>;
  /**
   * A durable sleep: rejects with a SleepError that the handler lets
   * propagate (do not catch it), which ends the attempt without spending
   * one, frees the executor's capacity, and runs the handler again after
   * d (ms or a Go duration string; on a durable timer). In that run the
   * steps stored before resolve without running, and this sleep resolves
   * at once, as in every later attempt. Sleeps are told apart by their
   * order in the handler's run ("ax:sleep:<n>"): reach them in the same
   * order every run. A d of 0 or less resolves at once; one over 366 days
   * is a PermanentError.
   *
   * ```ts
   * await job.sleep("1h");
   * ```
   */
  sleep(d: DurationInput): Promise<void>;
  /** The steps and sleeps the task had stored when this attempt started and those it stored since. */
  steps(): StepRecord[];
}

/** A task type's handler: returns the result (any JSON value, or undefined) or throws. */
export type Handler<P = unknown, R = unknown> = (job: Job<P>) => R | Promise<R>;

/** One attempt's measurements, given to ExecutorOptions.onAttempt. */
export interface AttemptMetrics {
  taskType: string;
  /** succeeded, failed, snoozed or cancelled. */
  outcome: string;
  /** How long the handler ran, in ms. */
  durationMs: number;
}

/** Log levels of ExecutorOptions.log. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Configures an Executor; every field is optional. */
export interface ExecutorOptions {
  /** Names this executor in task records. Default "executor-ts-<host>-<pid>-<random>". */
  id?: string;
  /** Capabilities served; default ["default"]. */
  capabilities?: string[];
  /** Capacity in cost units: pulls only while the summed estimated_cost running is below it. Default 16. */
  capacity?: number;
  /** Pull weights of p0 … p5. Default 40/25/15/10/6/4. */
  weights?: number[];
  /** How long a task may run without a heartbeat before it is redelivered. Default 30 s. */
  ackWaitMs?: number;
  /** How often a running task's lease is extended. Default ackWaitMs/3. */
  heartbeatMs?: number;
  /** Bound of one pull. Default 256. */
  maxBatch?: number;
  /** How often an idle executor re-checks its queues besides its doorbell. Default 5 s. */
  idleProbeMs?: number;
  /** Take-overs of one attempt before it is failed instead of run again. Default 3. */
  maxTakeovers?: number;
  /** How often the workers registry announcement is rewritten; negative: none. Default 5 s. */
  announceIntervalMs?: number;
  /**
   * Decodes each task's payload before its handler sees it, and encodes
   * the shard payloads a planner returns; use the producers' codec
   * (wrap it with acceptClear to run payloads submitted in clear too). A
   * payload that does not decode fails its attempt permanently, naming the
   * cause. Default none: an encoded payload fails its task permanently.
   */
  codec?: Codec;
  /** Receives every attempt's measurements (the metrics hook). */
  onAttempt?: (m: AttemptMetrics) => void;
  /** Receives logs. Default: none. */
  log?: (level: LogLevel, msg: string, fields?: Record<string, unknown>) => void;
}

interface Config {
  id: string;
  capabilities: string[];
  capacity: number;
  weights: number[];
  ackWaitMs: number;
  heartbeatMs: number;
  maxBatch: number;
  idleProbeMs: number;
  maxTakeovers: number;
  announceIntervalMs: number;
  codec?: Codec;
  onAttempt: (m: AttemptMetrics) => void;
  log: (level: LogLevel, msg: string, fields?: Record<string, unknown>) => void;
}

function withDefaults(o: ExecutorOptions): Config {
  const ackWaitMs = o.ackWaitMs && o.ackWaitMs > 0 ? o.ackWaitMs : 30_000;
  let heartbeatMs = o.heartbeatMs ?? 0;
  if (heartbeatMs <= 0 || heartbeatMs >= ackWaitMs) heartbeatMs = ackWaitMs / 3;
  const caps = o.capabilities?.length ? [...o.capabilities] : ["default"];
  for (const c of caps) if (!/^[A-Za-z0-9_-]{1,64}$/.test(c)) throw new Error(`executor: invalid capability ${JSON.stringify(c)}`);
  const weights = o.weights?.length === subj.LEVELS ? [...o.weights] : [...DEFAULT_WEIGHTS];
  return {
    id: o.id || `executor-ts-${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`,
    capabilities: caps,
    capacity: o.capacity && o.capacity > 0 ? o.capacity : 16,
    weights,
    ackWaitMs,
    heartbeatMs,
    maxBatch: o.maxBatch && o.maxBatch > 0 ? o.maxBatch : 256,
    idleProbeMs: o.idleProbeMs && o.idleProbeMs > 0 ? o.idleProbeMs : 5000,
    maxTakeovers: o.maxTakeovers && o.maxTakeovers > 0 ? o.maxTakeovers : 3,
    announceIntervalMs: o.announceIntervalMs === undefined || o.announceIntervalMs === 0 ? 5000 : o.announceIntervalMs,
    ...(o.codec ? { codec: o.codec } : {}),
    onAttempt: o.onAttempt ?? (() => {}),
    log: o.log ?? (() => {}),
  };
}

/** Errors a handler's signal aborts with. */
function reasonError(name: string, message: string): Error {
  const e = new Error(message);
  e.name = name;
  return e;
}

/** Smooth weighted round robin over the levels (internal/swrr). @internal exported for tests */
export class Picker {
  private readonly current: number[];
  constructor(private readonly weights: number[]) {
    this.current = weights.map(() => 0);
  }
  next(eligible: (i: number) => boolean): number {
    let best = -1;
    let total = 0;
    for (let i = 0; i < this.weights.length; i++) {
      const w = this.weights[i] as number;
      if (w <= 0 || !eligible(i)) continue;
      this.current[i] = (this.current[i] as number) + w;
      total += w;
      if (best < 0 || (this.current[i] as number) > (this.current[best] as number)) best = i;
    }
    if (best >= 0) this.current[best] = (this.current[best] as number) - total;
    return best;
  }
}

/** The summed estimated cost of running tasks against capacity (executor/executor.go's load). */
class Load {
  inFlight = 0;
  private reserve = 0;
  private waiters: (() => void)[] = [];
  constructor(readonly capacity: number) {}
  /** Waits until there is room and returns how many unit-cost tasks would fit (≥ 1), or 0 when signal aborts. */
  async free(signal: AbortSignal): Promise<number> {
    for (;;) {
      if (signal.aborted) return 0;
      const room = this.capacity - this.inFlight;
      if (room > 0 && (this.inFlight === 0 || this.reserve <= room)) return Math.max(Math.ceil(room), 1);
      await new Promise<void>((resolve) => {
        const done = () => {
          signal.removeEventListener("abort", done);
          resolve();
        };
        this.waiters.push(done);
        signal.addEventListener("abort", done, { once: true });
      });
    }
  }
  admit(cost: number): boolean {
    if (this.inFlight > 0 && this.inFlight + cost > this.capacity + 1e-9) {
      this.reserve = Math.max(this.reserve, cost);
      return false;
    }
    if (cost >= this.reserve) this.reserve = 0;
    this.inFlight += cost;
    return true;
  }
  release(cost: number): void {
    this.inFlight -= cost;
    if (this.inFlight < 1e-9) this.inFlight = 0;
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}

/** A counting semaphore. */
class Slots {
  private waiters: (() => void)[] = [];
  constructor(private free: number) {}
  async acquire(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((r) => this.waiters.push(r));
  }
  release(): void {
    const w = this.waiters.shift();
    if (w) w();
    else this.free++;
  }
}

/** A handler run in progress. */
interface Execution {
  executionID: string;
  abort: AbortController;
  /** The task was cancelled: its outcome is not reported. */
  cancelled: boolean;
  /** The executor is stopping: the task is handed back. */
  abandoned: boolean;
  /** The orchestrator's running record's revision (0 until one is written). */
  claimRev: number;
  /** The orchestrator refused to mark it running: heartbeats stop asking. */
  unmarked: boolean;
  /** A step was refused lost: the attempt is no longer this executor's, its outcome is not reported. */
  lost: boolean;
  delivery: Delivery;
  /** Cancels the attempt's timers and heartbeat (a forced stop does not wait for its handler). */
  release: () => void;
  running: {
    task_id: string;
    execution_id: string;
    type: string;
    capability: string;
    attempt: number;
    phase?: string;
    since: string;
    progress?: { percent: number; message?: string; at: string };
  };
}

/** A decoded dispatch. */
interface Dispatch {
  task: TaskRecord;
  revision: number;
  token: string;
  dispatcher: string;
}

/**
 * An executor: pulls the ready tasks of its capabilities by weighted
 * priority over the six levels, runs their handlers within its capacity,
 * heart-beats their leases and reports their outcomes — the wire
 * contract of subjects.md, as the Go executor implements it.
 *
 * ```ts
 * const ex = await Executor.connect({ servers: url }, { capabilities: ["email"] });
 * ex.handle<{ to: string }, { sent: boolean }>("email.send", async (job) => {
 *   await send(job.payload.to, { signal: job.signal });
 *   return { sent: true };
 * });
 * await ex.start();
 * // …
 * await ex.stop({ timeoutMs: 30_000 });
 * ```
 */
export class Executor {
  readonly nc: NatsConnection;
  private readonly cfg: Config;
  private readonly js: JetStreamClient;
  private jsm?: JetStreamManager;
  private readonly owned: boolean;
  private readonly handlers = new Map<string, Handler<any, any>>();
  private readonly sharded = new Map<string, Sharded<any, any, any, any>>();
  private readonly load: Load;
  private readonly running = new Map<string, Execution>();
  private readonly revoked = new Set<string>();
  private readonly runs = new Set<Promise<void>>();
  /** Stored reports being sent directly again (resendStored); they end when pulling stops. */
  private readonly resends = new Set<Promise<void>>();
  private readonly passedTypes = new Set<string>();
  private readonly objects: Objects;
  private readonly reports: Batcher;
  /**
   * A slot per attempt whose handler returned and whose outcome is being
   * reported (4 × capacity, at least 64): when reports cannot be stored,
   * the executor stops taking work once they are all held.
   */
  private readonly reporting: Slots;
  private pullers: Promise<void>[] = [];
  private stopPulling?: AbortController;
  private hardStop = new AbortController();
  private watchers: { stop(): void }[] = [];
  private announcer?: { stop: () => Promise<void>; poke: () => void };
  private startedAt = "";
  private directToPausedUntil = 0;
  private directPausedUntil = 0;
  private starting?: Promise<void>;

  /** An executor on an existing connection (not closed by stop()). */
  constructor(nc: NatsConnection, opts: ExecutorOptions = {}, owned = false) {
    this.nc = nc;
    this.cfg = withDefaults(opts);
    this.js = jetstream(nc, { checkAPI: false });
    this.load = new Load(this.cfg.capacity);
    this.owned = owned;
    this.objects = new Objects(this.js);
    this.reports = new Batcher(nc);
    this.reporting = new Slots(Math.max(64, Math.ceil(4 * this.cfg.capacity)));
  }

  /** Dials NATS and returns an executor that closes its connection when stopped. */
  static async connect(c: ConnectOptions, opts: ExecutorOptions = {}): Promise<Executor> {
    return new Executor(await dial({ name: "ax-executor-ts", ...c }), opts, true);
  }

  /** The executor's id as task records name it. */
  get id(): string {
    return this.cfg.id;
  }

  /** The summed estimated cost of the tasks running now. */
  get inFlight(): number {
    return this.load.inFlight;
  }

  /** Registers the handler of a task type (replacing any earlier one); allowed while running. */
  handle<P = unknown, R = unknown>(type: string, h: Handler<P, R>): this {
    this.handlers.set(type, h as Handler<any, any>);
    this.sharded.delete(type);
    return this;
  }

  /**
   * Registers a shardable task type's planner, shard handler and optional
   * aggregator (see Sharded): the planner's shards are written to the
   * capability's object store as `plans/<id>/<execution_id>` and named in
   * the report's `plan`; the aggregator reads the shards' fan-in markers.
   */
  handleShards<P = unknown, S = unknown, R = unknown, A = unknown>(type: string, s: Sharded<P, S, R, A>): this {
    this.handlers.set(type, s.shard as Handler<any, any>);
    this.sharded.set(type, s as Sharded<any, any, any, any>);
    return this;
  }

  private log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void {
    this.cfg.log(level, msg, { executor: this.cfg.id, ...fields });
  }

  /**
   * Creates (or updates, with this executor's ack wait) the ready
   * consumers of its capabilities, loads the revoked executions and starts
   * pulling. When AX's streams do not exist yet it waits for them until
   * signal aborts.
   */
  async start(signal?: AbortSignal): Promise<void> {
    if (this.stopPulling) return;
    this.starting ??= this.doStart(signal).finally(() => (this.starting = undefined));
    return this.starting;
  }

  private async doStart(signal?: AbortSignal): Promise<void> {
    let wait = 100;
    for (;;) {
      signal?.throwIfAborted();
      try {
        this.jsm ??= await jetstreamManager(this.nc, { checkAPI: false });
        await this.jsm.streams.info(subj.STREAM_TASKS);
        for (const c of this.cfg.capabilities) await this.bindLevelsAtStart(c);
        await this.watchRevocations();
        break;
      } catch (e) {
        this.log("warn", "cannot bind to AX's streams yet; waiting", { error: String(e), retry_in_ms: wait });
        for (const w of this.watchers) w.stop();
        this.watchers = [];
        await sleep(wait, signal);
        // At most 2 s apart: a restarted executor's tasks wait meanwhile.
        wait = Math.min(wait * 2, 2000);
      }
    }
    this.hardStop = new AbortController();
    this.stopPulling = new AbortController();
    const stop = this.stopPulling.signal;
    this.pullers = this.cfg.capabilities.map((c) => new Puller(this, c).run(stop));
    this.startedAt = new Date().toISOString();
    if (this.cfg.announceIntervalMs > 0) this.announcer = this.announce();
    this.log("info", "executor started", { capabilities: this.cfg.capabilities, capacity: this.cfg.capacity });
  }

  /**
   * Drains the executor: stops pulling, waits for running handlers to
   * finish and report, removes its announcement. If timeoutMs passes
   * first, the remaining handlers' signals abort (reason StoppedError)
   * and their tasks are handed back at once for another executor; their
   * outcomes are discarded. Closes the connection if connect() opened it.
   */
  async stop(o: { timeoutMs?: number } = {}): Promise<void> {
    const sp = this.stopPulling;
    if (!sp) {
      if (this.owned && !this.nc.isClosed()) await this.nc.close();
      return;
    }
    sp.abort();
    await Promise.allSettled(this.pullers);
    const drained = Promise.allSettled([...this.runs]).then(() => true);
    const timeout = o.timeoutMs ?? 30_000;
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeout)));
    const ok = await Promise.race([drained, gaveUp]);
    clearTimeout(timer);
    if (!ok) {
      this.log("warn", "executor stopped before its handlers finished; their tasks were handed back", { timeout_ms: timeout });
      for (const ex of this.running.values()) {
        ex.abandoned = true;
        ex.abort.abort(reasonError("StoppedError", "executor stopping"));
        ex.delivery.nak();
        // Its handler may never return: nothing of the attempt may hold
        // the process (timers) or renew its lease any more.
        ex.release();
      }
      this.running.clear();
      this.hardStop.abort();
    }
    await Promise.allSettled([...this.resends]);
    for (const w of this.watchers) w.stop();
    this.watchers = [];
    await this.announcer?.stop();
    this.announcer = undefined;
    this.stopPulling = undefined;
    await this.nc.flush().catch(() => {});
    if (this.owned && !this.nc.isClosed()) await this.nc.close();
    this.log("info", "executor stopped");
  }

  /** @internal Creates or updates a capability's six ready consumers (topology.ReadyConsumer). */
  /**
   * Creates (or updates, with this executor's ack wait) the ready consumers
   * of a capability's levels (all six by default), all at once, each
   * request waiting at most timeoutMs; throws the first failure.
   */
  async bindLevels(capability: string, levels: number[] = LEVEL_LIST, timeoutMs = 5000): Promise<void> {
    const results = await Promise.allSettled(levels.map((p) => this.bindLevel(capability, p, timeoutMs)));
    for (const r of results) if (r.status === "rejected") throw r.reason;
  }

  /**
   * Creates a capability's ready consumers at the start. Levels NATS
   * cannot create for now (no leader, no quorum: a timeout or a 503) are
   * left to the puller, whose pulls of them fail and create them again,
   * while the other levels' tasks run (executor/pull.go newPuller); any
   * other refusal fails the start.
   */
  private async bindLevelsAtStart(capability: string): Promise<void> {
    const results = await Promise.allSettled(LEVEL_LIST.map((p) => this.bindLevel(capability, p, 5000)));
    const failed = results.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
    const refused = failed.find((e) => !isTransient(e));
    if (refused !== undefined) throw refused;
    if (failed.length > 0) {
      this.log("warn", "starting without some ready consumers; creating them again", { error: failed.map(String).join("; "), capability });
    }
  }

  private async bindLevel(capability: string, p: number, timeoutMs: number): Promise<void> {
    const durable = subj.readyConsumer(capability, p);
    const filter = subj.dispatchFilter(capability, p);
    const req = {
      stream_name: subj.STREAM_TASKS,
      config: {
        durable_name: durable,
        filter_subject: filter,
        ack_policy: "explicit",
        ack_wait: Math.round(this.cfg.ackWaitMs * 1e6),
        max_ack_pending: 65536,
        deliver_policy: "new",
      },
    };
    const m = await this.nc.request(`$JS.API.CONSUMER.CREATE.${subj.STREAM_TASKS}.${durable}.${filter}`, jsonBytes(req), {
      timeout: timeoutMs,
    });
    const rep = parseJSON<{ error?: { description?: string; code?: number } }>(m.data);
    if (rep.error) {
      throw new Error(`ready consumer ${durable}: ${rep.error.description ?? JSON.stringify(rep.error)} (code ${rep.error.code ?? "?"})`);
    }
  }

  /** Loads the revoked executions of the executor's capabilities and follows them (AX_REVOKED). */
  private async watchRevocations(): Promise<void> {
    const kv: KV = await new Kvm(this.js).open(subj.BUCKET_REVOKED);
    for (const c of this.cfg.capabilities) {
      // What is stored first, so no dispatch runs before its revocation is known…
      const keys = await kv.keys(subj.revokedCapability(c));
      for await (const k of keys) {
        const e = await kv.get(k);
        if (e && e.value.length > 0) this.revoke(e.value);
      }
      // …then every change.
      const w = await kv.watch({ key: subj.revokedCapability(c), ignoreDeletes: true });
      this.watchers.push({ stop: () => w.stop() });
      void (async () => {
        for await (const e of w) if (e.value.length > 0) this.revoke(e.value);
      })().catch(() => {});
    }
  }

  private revoke(data: Uint8Array): void {
    let r: Revocation;
    try {
      r = parseJSON<Revocation>(data);
    } catch {
      this.log("warn", "ignoring a malformed revocation");
      return;
    }
    if (!r.execution_id || this.revoked.has(r.execution_id)) return;
    this.revoked.add(r.execution_id);
    this.cancelRunning(r.id, r.execution_id);
  }

  private cancelRunning(id: string, executionID: string): void {
    const ex = this.running.get(id);
    if (ex && ex.executionID === executionID) {
      ex.cancelled = true;
      ex.abort.abort(reasonError("CancelledError", "task cancelled"));
      this.log("info", "cancelling running handler", { task_id: id });
    }
  }

  /** Decodes a dispatch: the ready record on its dispatch subject, with its revision and token. */
  private decode(d: Delivery): Dispatch {
    const ev = parseJSON<TaskEvent>(d.data);
    const t = ev.task;
    if (!t?.id || !t.execution_id || t.state !== "ready") throw new Error("not a ready record with an execution id");
    const p = subj.parseDispatch(d.subject);
    const prio = t.priority ?? 2;
    const cap = t.capability || "default";
    if (!p || p.id !== t.id || p.capability !== cap || p.priority !== prio || p.type !== t.type) {
      throw new Error(`its subject does not name its task ${t.id} (capability ${cap}, priority ${prio}, type ${t.type})`);
    }
    t.dispatch_revision = d.info.streamSeq;
    return { task: t, revision: d.info.streamSeq, token: d.header(subj.HEADER_TOKEN), dispatcher: ev.actor ?? "" };
  }

  /**
   * Takes a fetched dispatch: runs it (counting its cost until its handler
   * returns), or passes it on. pulledAt is when the pull that delivered it
   * was sent (Date.now()).
   */
  start1(d: Delivery, pulledAt: number = Date.now()): void {
    let dp: Dispatch;
    try {
      dp = this.decode(d);
    } catch (e) {
      this.log("warn", "dropping malformed dispatch", { error: String(e), subject: d.subject });
      d.term();
      return;
    }
    const t = dp.task;
    if (!this.handlers.has(t.type)) {
      if (this.revoked.has(t.execution_id as string)) return d.ack();
      return this.passOn(d, dp);
    }
    const cost = t.estimated_cost && t.estimated_cost > 0 ? t.estimated_cost : 1;
    if (!this.load.admit(cost)) {
      d.nak();
      return;
    }
    let freed = false;
    const free = () => {
      if (!freed) {
        freed = true;
        this.load.release(cost);
      }
    };
    const run = this.execute(d, dp, free, pulledAt)
      .catch((e) => this.log("error", "execution failed", { task_id: t.id, error: String(e) }))
      .finally(() => {
        free();
        this.runs.delete(run);
      });
    this.runs.add(run);
  }

  /** Hands back a dispatch of a type without a handler here, spending no attempt (executor/pass.go). */
  private passOn(d: Delivery, dp: Dispatch): void {
    let delay = 10;
    for (let i = 2; i < d.info.delivered && delay < 5000; i += 2) delay *= 2;
    delay = Math.min(delay, 5000);
    d.nak(delay);
    if (!this.passedTypes.has(dp.task.type)) {
      this.passedTypes.add(dp.task.type);
      this.log("warn", "tasks of a type this executor has no handler for reach it: passed on", { type: dp.task.type });
    }
    const b = subj.bell(dp.task.capability || "default", dp.task.priority ?? 2);
    setTimeout(() => {
      try {
        this.nc.publish(b);
      } catch {
        // closed
      }
    }, delay).unref();
  }

  /**
   * Claims a dispatch, runs its handler and reports the outcome
   * (executor/run.go's execute). A dispatch held for half the ack wait or
   * more before it could start (the process was stopped, swapped out, its
   * event loop blocked) may have been delivered again to another executor
   * meanwhile, which runs it: it is neither run nor answered (heldTooLong);
   * checked again once claimed, just before the handler starts.
   */
  private async execute(d: Delivery, dp: Dispatch, free: () => void, pulledAt: number): Promise<void> {
    const t0 = dp.task;
    const delivered = d.info.delivered;
    const fields = { task_id: t0.id, execution_id: t0.execution_id, attempt: t0.attempt };
    if (this.revoked.has(t0.execution_id as string)) {
      d.ack();
      return;
    }
    const held = (at: string): boolean => {
      if (!heldTooLong(pulledAt, Date.now(), this.cfg.ackWaitMs)) return false;
      this.log("info", "dispatch held for half its ack wait before it could start: left to its redelivery", {
        ...fields,
        held_ms: Date.now() - pulledAt,
        deliveries: delivered,
        at,
      });
      return true;
    };
    if (held("pulled")) return;
    const claim = await this.claim(dp, delivered);
    switch (claim.kind) {
      case "elsewhere":
        this.log("debug", "running elsewhere; checking again after the ack wait", fields);
        d.nak(this.cfg.ackWaitMs);
        return;
      case "not_found":
        if (delivered >= 2) {
          this.log("warn", "dropping dispatch of an unknown task", fields);
          d.term();
        } else {
          d.nak(500);
        }
        return;
      case "error":
        this.log("warn", "claim failed; will retry", { ...fields, error: claim.error });
        d.nak(1000);
        return;
      case "ended":
        d.ack();
        return;
    }
    // The claim (or a stall after it) took that long: a claim granted now
    // names this executor running without a lease yet, so the
    // redelivery's claim takes the attempt over.
    if (held("claimed")) return;
    const t = claim.task;
    const startedAt = t.started_at ?? new Date().toISOString();
    const abort = new AbortController();
    const ex: Execution = {
      executionID: t.execution_id as string,
      abort,
      cancelled: false,
      abandoned: false,
      claimRev: claim.revision,
      unmarked: false,
      lost: false,
      delivery: d,
      release: () => {},
      running: {
        task_id: t.id,
        execution_id: t.execution_id as string,
        type: t.type,
        capability: t.capability || "default",
        attempt: t.attempt,
        ...(t.phase || t.shardable ? { phase: t.phase || "plan" } : {}),
        since: new Date().toISOString(),
      },
    };
    const timeoutMs = t.timeout ? parseDuration(t.timeout) : 600_000;
    const timers: (() => void)[] = [];
    timers.push(after(timeoutMs, () => abort.abort(reasonError("TimeoutError", `execution timed out after ${t.timeout ?? "10m0s"}`))));
    if (t.expires_at) {
      const left = Date.parse(t.expires_at) - Date.now();
      timers.push(after(Math.max(left, 0), () => abort.abort(reasonError("DeadlineError", `task deadline ${t.expires_at} passed`))));
    }
    if (this.hardStop.signal.aborted) {
      d.nak();
      timers.forEach((cancel) => cancel());
      return;
    }
    this.running.set(t.id, ex);
    this.announcer?.poke();
    if (this.revoked.has(ex.executionID)) this.cancelRunning(t.id, ex.executionID);
    const stopBeat = this.heartbeat(ex, dp, startedAt, delivered);
    ex.release = () => {
      timers.forEach((cancel) => cancel());
      stopBeat();
    };
    const steps = new JobSteps(
      { nc: this.nc, objects: this.objects, log: (level, msg, f) => this.log(level, msg, f) },
      t.capability || "default",
      {
        id: t.id,
        type: t.type,
        execution_id: t.execution_id as string,
        attempt: t.attempt,
        status: "step",
        executor: this.cfg.id,
        started_at: startedAt,
        finished_at: startedAt,
        dispatch_revision: dp.revision,
        token: dp.token,
        ...(t.takeovers ? { takeovers: t.takeovers } : {}),
      },
      () => ex.claimRev,
      () => {
        ex.lost = true;
        abort.abort(reasonError("LostError", "the attempt is no longer this executor's (a step was refused)"));
      },
      abort.signal,
      t.steps,
    );
    let result: unknown;
    let plan: PlanRef | undefined;
    let herr: unknown;
    try {
      if ((t.takeovers ?? 0) > this.cfg.maxTakeovers) {
        throw new Error(`its executor was lost ${t.takeovers} times in a row while running it (a crash loop?); not run again`);
      }
      ({ result, plan } = await this.call(t, dp.token, abort.signal, ex, steps));
    } catch (e) {
      herr = e ?? new Error("handler failed");
    }
    const finished = new Date();
    timers.forEach((cancel) => cancel());
    // The handler's capacity goes to the next task once a report slot is held.
    await this.reporting.acquire();
    free();
    try {
      if (ex.abandoned) {
        this.log("info", "executor stopping: task handed back", fields);
        d.nak();
        return;
      }
      if (ex.cancelled) {
        this.log("info", "task cancelled while running", fields);
        d.ack();
        return;
      }
      if (ex.lost) {
        // Taken over: the dispatch's delivery, and the outcome, are the
        // executor's that runs the attempt now.
        this.log("info", "the attempt is no longer this executor's (a step was refused): outcome not reported", fields);
        return;
      }
      const r: Report = {
        id: t.id,
        type: t.type,
        execution_id: t.execution_id as string,
        attempt: t.attempt,
        status: "succeeded",
        executor: this.cfg.id,
        started_at: startedAt,
        finished_at: finished.toISOString(),
        dispatch_revision: dp.revision,
        token: dp.token,
      };
      if (ex.claimRev) r.claim_revision = ex.claimRev;
      if (steps.stepRevision()) r.step_revision = steps.stepRevision();
      if (t.takeovers) r.takeovers = t.takeovers;
      if (herr === undefined && plan) r.plan = plan;
      if (herr === undefined && result !== undefined) {
        const enc = JSON.stringify(result);
        if (enc === undefined) herr = new Error("encode result: not JSON");
        else if (Buffer.byteLength(enc) > INLINE_RESULT_LIMIT) herr = await this.storeLargeResult(t, r, enc);
        else r.result = result;
      }
      if (herr !== undefined) {
        const reason = abort.signal.reason as Error | undefined;
        if (abort.signal.aborted && herr !== reason && (reason?.name === "TimeoutError" || reason?.name === "DeadlineError")) {
          herr = new Error(`${reason.message}: ${errorText(herr)}`, { cause: herr });
        }
        setOutcome(r, herr);
      }
      this.cfg.onAttempt({ taskType: t.type, outcome: r.status, durationMs: finished.getTime() - Date.parse(startedAt) });
      try {
        await this.report(r, dp.dispatcher);
      } catch (e) {
        this.log("warn", "report not published; handing the task back", { ...fields, error: String(e) });
        d.nak();
        return;
      }
      if (!ex.abandoned) d.ack();
    } finally {
      this.reporting.release();
      stopBeat();
      if (this.running.get(t.id) === ex) this.running.delete(t.id);
      this.announcer?.poke();
    }
  }

  /** Runs the handler (or a shardable task's planner or aggregator) with its job. */
  private async call(
    t: TaskRecord,
    token: string,
    signal: AbortSignal,
    ex: Execution,
    steps: JobSteps,
  ): Promise<{ result?: unknown; plan?: PlanRef }> {
    const h = this.handlers.get(t.type);
    if (!h) throw new Error(`no handler for task type ${JSON.stringify(t.type)} on executor ${this.cfg.id}`);
    let payload = t.payload;
    // (A payload in clear skips a codec that accepts clear ones: no re-encoding.)
    if (this.cfg.codec && payload !== undefined && (isEncoded(payload) || !acceptsClear(this.cfg.codec))) {
      try {
        payload = JSON.parse(new TextDecoder().decode(this.cfg.codec.decode(jsonBytes(payload)))) as unknown;
      } catch (e) {
        throw new PermanentError(`task ${t.id} on executor ${this.cfg.id}: decode payload: ${errorText(e)}`, { cause: e });
      }
    } else if (isEncoded(payload)) {
      const p = payload as { ax_codec?: unknown; key?: unknown };
      throw new PermanentError(
        `the payload is encoded by codec ${JSON.stringify(p.ax_codec)} with key ${JSON.stringify(p.key)} and this executor has no codec: not run`,
      );
    }
    let inputs: Promise<Input[]> | undefined;
    const job: Job = {
      id: t.id,
      type: t.type,
      payload,
      priority: t.priority ?? 2,
      capability: t.capability || "default",
      attempt: t.attempt,
      maxRetries: t.max_retries ?? 5,
      executionID: t.execution_id as string,
      estimatedCost: t.estimated_cost ?? 1,
      dependsOn: t.depends_on ?? [],
      phase: t.phase || (t.shardable ? "plan" : ""),
      parent: t.parent ?? "",
      shardIndex: t.shard_index ?? 0,
      signal,
      inputs: () => (inputs ??= this.readInputs(t, token)),
      progress: (percent: number, message = "") => {
        const p = Math.min(Math.max(Number.isFinite(percent) ? percent : 0, 0), 100);
        ex.running.progress = { percent: p, ...(message ? { message: clipUTF8(message, 200) } : {}), at: new Date().toISOString() };
        this.announcer?.poke();
      },
      upstreamResult: async <T>(id: string): Promise<T> => {
        const i = (t.depends_on ?? []).indexOf(id);
        if (i < 0) throw new Error(`input ${id} of ${t.id}: not an upstream of the task`);
        const u = (await job.inputs())[i];
        if (!u || u.state !== "succeeded") throw new Error(`upstream ${id} of ${t.id} is ${u?.state ?? "unknown"}, not succeeded`);
        if (!u.result_object) return u.result as T;
        const data = await this.objects.get(u.result_bucket, u.result_object, u.result_digest);
        return JSON.parse(new TextDecoder().decode(data)) as T;
      },
      step: <T>(name: string, fn: (signal: AbortSignal) => T | Promise<T>) => steps.step<T>(name, fn),
      sleep: (d: DurationInput) => {
        let ms: number;
        try {
          ms = toMillis(d);
        } catch (e) {
          return Promise.reject(new PermanentError(`sleep of ${t.id}: ${errorText(e)}`));
        }
        return steps.sleep(ms);
      },
      steps: () => steps.list(),
    };
    if (!t.shardable) return { result: await h(job) };
    const sh = this.sharded.get(t.type);
    if (!sh) {
      throw new PermanentError(
        `task type ${JSON.stringify(t.type)} is shardable, but executor ${this.cfg.id} registered it with handle, not handleShards`,
      );
    }
    if (job.phase === "aggregate") {
      if (!sh.aggregate) throw new Error("no aggregator registered for this type on this executor");
      return { result: await sh.aggregate(job, await this.shardOutcomes(t)) };
    }
    return { plan: await this.plan(t, await sh.plan(job)) };
  }

  /** Validates and stores a planner's shards and returns the report's plan reference. */
  private async plan(t: TaskRecord, shards: Shard[]): Promise<PlanRef> {
    if (!Array.isArray(shards)) throw new PermanentError("the planner returned no list of shards");
    if (shards.length > MAX_SHARDS) throw new PermanentError(`the planner returned ${shards.length} shards; the limit is ${MAX_SHARDS}`);
    const plan = {
      shards: shards.map((s, i) => {
        const out: Record<string, unknown> = {};
        if (s.payload !== undefined) {
          out.payload = this.cfg.codec
            ? (JSON.parse(new TextDecoder().decode(this.cfg.codec.encode(jsonBytes(s.payload)))) as unknown)
            : s.payload;
        }
        if (s.priority !== undefined) {
          if (!Number.isInteger(s.priority) || s.priority < 0 || s.priority > 5) throw new PermanentError(`shard ${i}: priority ${s.priority} is out of range 0..5`);
          out.priority = s.priority;
        }
        if (s.capability !== undefined && s.capability !== "") {
          if (!/^[A-Za-z0-9_-]{1,64}$/.test(s.capability)) throw new PermanentError(`shard ${i}: capability ${JSON.stringify(s.capability)} is not one token of [A-Za-z0-9_-]`);
          out.capability = s.capability;
        }
        if (s.estimated_cost !== undefined && s.estimated_cost !== 0) {
          if (!(s.estimated_cost > 0 && s.estimated_cost <= 1e9)) throw new PermanentError(`shard ${i}: estimated_cost ${s.estimated_cost} is out of range`);
          out.estimated_cost = s.estimated_cost;
        }
        return out;
      }),
    };
    const capability = t.capability || "default";
    const ref: PlanRef = {
      object: `plans/${t.id}/${t.execution_id}`,
      shards: shards.length,
      aggregate: this.sharded.get(t.type)?.aggregate !== undefined,
      bucket: subj.objectBucket(capability),
    };
    try {
      ref.digest = await this.objects.put(ref.bucket as string, ref.object, jsonBytes(plan));
    } catch (e) {
      throw new Error(`store plan ${ref.object}: ${errorText(e)}`, { cause: e });
    }
    return ref;
  }

  /** Reads every shard's fan-in marker (`ax.fanin.<id>.*.*`, leader reads), sorted by index then id. */
  private async shardOutcomes(t: TaskRecord): Promise<ShardOutcomes> {
    const want = t.sharding?.shards ?? 0;
    const jsm = (this.jsm ??= await jetstreamManager(this.nc, { checkAPI: false }));
    let wait = 50;
    const until = Date.now() + 60_000;
    for (;;) {
      const out: ShardOutcome[] = [];
      let seq = 1;
      for (;;) {
        let m;
        try {
          m = await jsm.streams.getMessage("AX_FANIN", { seq, next_by_subj: `ax.fanin.${t.id}.*.*` } as unknown as { seq: number });
        } catch (e) {
          if (/no message found|not found/i.test(String((e as Error)?.message))) break;
          throw e;
        }
        if (!m) break;
        out.push(m.json<ShardOutcome>());
        seq = m.seq + 1;
      }
      if (out.length >= want) {
        out.sort((a, b) => a.index - b.index || a.id.localeCompare(b.id));
        const objects = this.objects;
        return {
          shards: out,
          succeeded: out.filter((o) => o.state === "succeeded").length,
          failed: () => out.filter((o) => o.state !== "succeeded"),
          result: async (i: number) => {
            const o = out[i];
            if (!o) throw new Error(`no shard ${i}`);
            if (!o.result_object) return o.result;
            return JSON.parse(new TextDecoder().decode(await objects.get(o.result_bucket, o.result_object, o.result_digest)));
          },
        };
      }
      if (Date.now() > until) throw new Error(`read ${out.length} of ${want} markers of ${t.id}`);
      await sleep(wait);
      wait = Math.min(wait * 2, 5000);
    }
  }

  /** Asks the orchestrators how the task's upstreams ended (`ax.inputs.<capability>`). */
  private async readInputs(t: TaskRecord, token: string): Promise<Input[]> {
    if (!t.depends_on?.length) return [];
    const m = await this.nc.request(
      subj.inputs(t.capability || "default"),
      jsonBytes({ id: t.id, execution_id: t.execution_id, token }),
      { timeout: 10_000 },
    );
    const rep = parseJSON<InputsReply>(m.data);
    if (rep.error) throw new Error(`inputs of ${t.id}: ${rep.error}`);
    return rep.inputs ?? [];
  }

  /**
   * Stores a result over INLINE_RESULT_LIMIT in the task's capability's
   * object store as `results/<id>/<execution_id>` and names it in the
   * report (result_object, result_bucket, result_digest); returns the
   * error that fails the attempt when it cannot be stored.
   */
  private async storeLargeResult(t: TaskRecord, r: Report, enc: string): Promise<Error | undefined> {
    const name = subj.resultObjectName(t.id, t.execution_id as string);
    const bucket = subj.objectBucket(t.capability || "default");
    const data = utf8(enc);
    try {
      r.result_digest = await this.objects.put(bucket, name, data);
    } catch (e) {
      return new Error(`store result (${data.length} bytes) as ${name}: ${errorText(e)}`, { cause: e });
    }
    r.result_object = name;
    r.result_bucket = bucket;
    return undefined;
  }

  /**
   * Decides whether this executor runs a dispatch: a first delivery runs
   * at once (the dispatch is the ready record); a redelivery, or a task
   * with a dispatch timeout, is claimed through the orchestrator
   * (`ax.claim.<capability>`).
   */
  private async claim(
    dp: Dispatch,
    delivered: number,
  ): Promise<
    | { kind: "run"; task: TaskRecord; revision: number }
    | { kind: "elsewhere" }
    | { kind: "not_found" }
    | { kind: "ended" }
    | { kind: "error"; error: string }
  > {
    const t = dp.task;
    const now = new Date().toISOString();
    const dispatchTimeout = t.dispatch_timeout ? parseDuration(t.dispatch_timeout) : 0;
    if (delivered <= 1 && dispatchTimeout <= 0) {
      // The decoded record is this execution's own: claimed in place (task.Claimed).
      t.state = "running";
      t.executor = this.cfg.id;
      t.started_at = now;
      t.updated_at = now;
      t.dispatch_revision = 0;
      return { kind: "run", task: t, revision: 0 };
    }
    const req: ClaimRequest = {
      id: t.id,
      execution_id: t.execution_id as string,
      revision: dp.revision,
      executor: this.cfg.id,
      started_at: now,
      delivered,
      token: dp.token,
    };
    let rep: ClaimReply;
    try {
      rep = await this.askClaim(req, t.capability || "default");
    } catch (e) {
      return { kind: "error", error: String(e) };
    }
    if (rep.error && rep.status !== "ended") return { kind: "error", error: rep.error };
    switch (rep.status) {
      case "granted":
        if (rep.task) return { kind: "run", task: rep.task, revision: rep.revision ?? 0 };
        break;
      case "running_elsewhere":
        return { kind: "elsewhere" };
      case "not_found":
        return { kind: "not_found" };
      case "ended":
        if (rep.error) this.log("warn", "claim refused", { task_id: t.id, reason: rep.error });
        return { kind: "ended" };
    }
    return { kind: "error", error: `unexpected claim reply ${JSON.stringify(rep.status)}` };
  }

  private async askClaim(req: ClaimRequest, capability: string): Promise<ClaimReply> {
    const m = await this.nc.request(subj.claim(capability), jsonBytes(req), { timeout: 10_000 });
    return parseJSON<ClaimReply>(m.data);
  }

  /** The lease's TTL: midway between the heartbeat and the ack wait, whole seconds, at least one. */
  private leaseTTLSeconds(): number {
    return Math.max(1, Math.floor((this.cfg.heartbeatMs + this.cfg.ackWaitMs) / 2 / 1000));
  }

  /**
   * Every heartbeat until the returned function is called: extends the
   * dispatch's ack wait, renews the lease (`ax.lease.<capability>.<id>`)
   * and asks the orchestrator to mark the attempt running until it did.
   */
  private heartbeat(ex: Execution, dp: Dispatch, startedAt: string, delivered: number): () => void {
    const t = dp.task;
    const capability = t.capability || "default";
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    const beat = async () => {
      if (stopped || ex.abandoned) return;
      ex.delivery.working();
      const lease: Lease = { execution_id: ex.executionID, executor: this.cfg.id, at: new Date().toISOString(), token: dp.token };
      try {
        await this.js.publish(subj.lease(capability, t.id), jsonBytes(lease), { ttl: `${this.leaseTTLSeconds()}s`, timeout: 2000 });
      } catch (e) {
        this.log("debug", "lease not renewed", { task_id: t.id, error: String(e) });
      }
      if (ex.claimRev === 0 && !ex.unmarked && !stopped) {
        try {
          const rep = await this.askClaim(
            {
              id: t.id,
              execution_id: ex.executionID,
              revision: dp.revision,
              executor: this.cfg.id,
              started_at: startedAt,
              delivered,
              mark: true,
              token: dp.token,
            },
            capability,
          );
          if (rep.status === "granted") ex.claimRev = rep.revision ?? 0;
          else if (!rep.error || rep.status === "ended") {
            this.log("info", "running mark refused: the attempt is no longer this executor's", { task_id: t.id });
            ex.unmarked = true;
          }
        } catch (e) {
          this.log("debug", "running mark not made; asking again at the next heartbeat", { task_id: t.id, error: String(e) });
        }
      }
      if (!stopped) timer = setTimeout(() => void beat(), this.cfg.heartbeatMs);
    };
    timer = setTimeout(() => void beat(), this.cfg.heartbeatMs);
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }

  /**
   * Hands a report to the orchestrators: directly to the one that
   * dispatched the attempt (`ax.direct-to.<node>.batch.task.completed.<type>`,
   * with the reports of its type that finish meanwhile), else to any
   * (`ax.direct.batch.task.completed.<type>`), else stored on
   * `task.completed.<type>`, retrying until stored or the executor is
   * stopped for good.
   */
  private async report(r: Report, dispatcher: string): Promise<void> {
    const body = JSON.stringify(r);
    const stored = subj.completed(r.type);
    if (await this.sendDirect(stored, body, dispatcher)) return;
    const data = utf8(body);
    let wait = 50;
    for (;;) {
      if (this.hardStop.signal.aborted) throw new Error("executor stopped");
      try {
        await this.js.publish(stored, data, { msgID: `report-${r.execution_id}-${this.cfg.id}`, timeout: 5000 });
        this.resendStored(r, stored, body, dispatcher);
        return;
      } catch (e) {
        this.log("debug", "report not stored yet; retrying", { task_id: r.id, error: String(e) });
      }
      await sleep(wait, this.hardStop.signal);
      wait = Math.min(wait * 2, 2000);
    }
  }

  /**
   * Sends a report directly: to the orchestrator that dispatched its
   * attempt, else to any. Resolves whether one applied it.
   */
  private async sendDirect(stored: string, body: string, dispatcher: string): Promise<boolean> {
    if (dispatcher && Date.now() >= this.directToPausedUntil) {
      const res = await this.reports.send(subj.directTo(subj.nodeToken(dispatcher), "batch." + stored), body);
      if (res === "applied") return true;
      if (res === "timeout") this.directToPausedUntil = Date.now() + 5 * 60_000;
    }
    if (Date.now() >= this.directPausedUntil) {
      const res = await this.reports.send(subj.directBatch(stored), body);
      if (res === "applied") return true;
      if (res === "timeout") this.directPausedUntil = Date.now() + 30_000;
    }
    return false;
  }

  /**
   * A stored report is also sent directly again, every 2 s for 30 s, until
   * an orchestrator applies it (executor/run.go's resendStored): the
   * orchestrators' consumer of stored reports may be without a leader for
   * a while after the store is back. Applying it twice is harmless.
   */
  private resendStored(r: Report, stored: string, body: string, dispatcher: string): void {
    const stop = this.stopPulling?.signal;
    if (!stop || stop.aborted) return;
    const p = (async () => {
      for (let i = 0; i < RESEND_FOR_MS / RESEND_EVERY_MS; i++) {
        await sleep(RESEND_EVERY_MS, stop);
        if (stop.aborted) return;
        try {
          if (await this.sendDirect(stored, body, dispatcher)) {
            this.log("debug", "stored report applied directly", { task_id: r.id, execution_id: r.execution_id });
            return;
          }
        } catch {
          // the connection closing: the stored report stays
        }
      }
    })();
    this.resends.add(p);
    void p.finally(() => this.resends.delete(p));
  }

  /** Announces the executor in the workers registry (AX_WORKERS) until stopped. */
  private announce(): { stop: () => Promise<void>; poke: () => void } {
    const key = `${this.cfg.capabilities[0]}.${Buffer.from(this.cfg.id).toString("base64url")}`;
    const ttl = Math.max(1, Math.floor((3 * this.cfg.announceIntervalMs) / 1000));
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    let last = 0;
    let pending: NodeJS.Timeout | undefined;
    let writing: Promise<void> = Promise.resolve();
    const write = () => {
      if (stopped) return;
      last = Date.now();
      const running = [...this.running.values()].map((x) => x.running).sort((a, b) => a.since.localeCompare(b.since));
      const body = {
        id: this.cfg.id,
        capabilities: this.cfg.capabilities,
        types: [...this.handlers.keys()].sort(),
        capacity: this.cfg.capacity,
        in_flight: this.load.inFlight,
        running: running.slice(0, 1000),
        running_total: running.length,
        version: "sdk-ts@0.1.0",
        host: hostname(),
        pid: process.pid,
        started_at: this.startedAt,
        heartbeat_at: new Date().toISOString(),
        ttl: `${ttl}s`,
      };
      writing = this.js
        .publish(`$KV.AX_WORKERS.${key}`, jsonBytes(body), { ttl: `${ttl}s`, timeout: 2000 })
        .then(() => {})
        .catch((e) => this.log("debug", "workers registry: announcement not written", { error: String(e) }));
      clearTimeout(timer);
      timer = setTimeout(write, this.cfg.announceIntervalMs);
    };
    write();
    return {
      poke: () => {
        if (stopped || pending) return;
        pending = setTimeout(() => {
          pending = undefined;
          write();
        }, Math.max(0, 250 - (Date.now() - last)));
      },
      stop: async () => {
        stopped = true;
        clearTimeout(timer);
        clearTimeout(pending);
        await writing;
        const h = headers();
        h.set("KV-Operation", "PURGE");
        h.set("Nats-Rollup", "sub");
        h.set("Nats-TTL", "60s");
        await this.js.publish(`$KV.AX_WORKERS.${key}`, undefined, { headers: h, timeout: 2000 }).catch(() => {});
      },
    };
  }

  /** @internal The executor's configuration, for its pullers. */
  get config(): Readonly<Config> {
    return this.cfg;
  }

  /** @internal */
  get freeSlots(): Load {
    return this.load;
  }
}

/** Cuts s to at most n UTF-8 bytes, on a character boundary. */
function clipUTF8(s: string, n: number): string {
  const b = Buffer.from(s);
  if (b.length <= n) return s;
  let cut = n;
  while (cut > 0 && ((b[cut] as number) & 0xc0) === 0x80) cut--;
  return b.subarray(0, cut).toString();
}

/** Reports whether a payload is encoded by a codec (an object with an `ax_codec` member). */
function isEncoded(p: unknown): boolean {
  return typeof p === "object" && p !== null && !Array.isArray(p) && "ax_codec" in p;
}

function errorText(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

function isNamed(e: unknown, cls: { new (...a: any[]): Error }, name: string): boolean {
  return e instanceof cls || (e instanceof Error && e.name === name);
}

/**
 * Records a handler's error in its report (executor/outcome.go). The
 * error's cause chain is searched, first found in this order: cancel,
 * sleep, snooze, permanent, retry-after.
 */
export function setOutcome(r: Report, herr: unknown): void {
  const chain: unknown[] = [];
  for (let e: unknown = herr; e !== undefined && chain.length < 16; e = (e as { cause?: unknown })?.cause) {
    chain.push(e);
    if (!(e instanceof Error)) break;
  }
  const find = <T>(cls: { new (...a: any[]): Error }, name: string) => chain.find((e) => isNamed(e, cls, name)) as T | undefined;
  const cancel = find<CancelError>(CancelError, "CancelError");
  if (cancel) {
    r.status = "cancelled";
    r.error = truncateError(cancel.message);
    return;
  }
  const sl = find<SleepError>(SleepError, "SleepError");
  if (sl) {
    r.status = "sleeping";
    r.step = sl.sleepName;
    r.retry_after = formatDuration(Math.max(sl.delayMs ?? 0, 0));
    return;
  }
  const snooze = find<SnoozeError>(SnoozeError, "SnoozeError");
  if (snooze) {
    r.status = "snoozed";
    r.retry_after = formatDuration(Math.max(snooze.delayMs ?? 0, 0));
    return;
  }
  r.status = "failed";
  r.error = truncateError(errorText(herr));
  if (find(PermanentError, "PermanentError")) {
    r.permanent = true;
    return;
  }
  const ra = find<RetryAfterError>(RetryAfterError, "RetryAfterError");
  if (ra) r.retry_after = formatDuration(Math.max(ra.delayMs ?? 0, 0));
}

/** Waits briefly for a task whose publish rang the doorbell. */
const BELL_WAIT = 100;
/** Bounds one try at creating ready consumers again after their pulls failed (executor/pull.go rebindWait). */
const REBIND_WAIT = 2000;
/** Bounds the wait between failed pulls (executor/pull.go maxPullBackoff). */
const MAX_PULL_BACKOFF = 1000;
/** The priority levels, 0 … 5. */
const LEVEL_LIST: number[] = Array.from({ length: subj.LEVELS }, (_, i) => i);

function sum(a: number[]): number {
  return a.reduce((x, y) => x + y, 0);
}

/** How often, and how long, a stored report is sent directly again (resendStored). */
const RESEND_EVERY_MS = 2000;
const RESEND_FOR_MS = 30_000;

/**
 * Whether a dispatch pulled at pulledAt and not started by now was held
 * too long to start without risk: for half the ack wait or more, its
 * delivery may have expired and gone to another executor, which runs it
 * (a first delivery runs without a claim, and a claim of the redelivery
 * finds no lease yet). Such a dispatch is left unanswered (an ack or a
 * hand-back would act on the newer delivery): if it is still the current
 * delivery, it comes again after the ack wait and is claimed then. Pulls
 * wait at most BELL_WAIT, so a dispatch that did not wait is never taken
 * for one. executor/run.go's execute does the same.
 */
export function heldTooLong(pulledAt: number, now: number, ackWaitMs: number): boolean {
  return now - pulledAt >= ackWaitMs / 2;
}
/** How often levels last seen empty are probed while the doorbell is armed. */
const BUSY_PROBE = 200;

/**
 * Pulls one capability's six levels by smooth weighted round robin across
 * the levels that have work (executor/pull.go): each round first probes
 * every level last seen empty (highest priority first), then shares the
 * free capacity among levels with work by their weights. An idle puller
 * sleeps on the capability's doorbell (`ax.bell.<capability>.*`), probing
 * every idle probe interval for redeliveries.
 */
class Puller {
  private readonly picker: Picker;
  private empty: boolean[] = new Array<boolean>(subj.LEVELS).fill(false);
  private bellSub?: Subscription;
  private rung = 0;
  private rang?: () => void;
  private rangFlag = false;
  private failures = 0;
  private probed = 0;
  /** Bit N set: level N's last pull failed as if its consumer did not exist (run creates it again). */
  private gone = 0;

  constructor(
    private readonly e: Executor,
    private readonly capability: string,
  ) {
    this.picker = new Picker(e.config.weights);
  }

  async run(stop: AbortSignal): Promise<void> {
    try {
      while (!stop.aborted) {
        let n = await this.e.freeSlots.free(stop);
        if (n === 0) return;
        n = Math.min(n, this.e.config.maxBatch);
        let got: number;
        try {
          got = await this.round(n, stop);
        } catch (err) {
          if (this.e.nc.isClosed()) return;
          await this.backoff(err, stop);
          if (this.gone !== 0) {
            // Deleted by hand or lost (or leaderless for a moment: a pull
            // then has no responders too): create them again, or nobody
            // would ever pull this capability's tasks.
            const levels = LEVEL_LIST.filter((l) => this.gone & (1 << l));
            try {
              await this.e.bindLevels(this.capability, levels, REBIND_WAIT);
              this.gone = 0;
            } catch (e2) {
              this.e.config.log("warn", "cannot recreate the ready consumers; retrying", { error: String(e2) });
            }
          }
          continue;
        }
        this.failures = 0;
        if (got >= n) {
          this.disarm();
          continue;
        }
        if (got > 0) continue;
        if (!this.bellSub) {
          this.arm();
          this.probed = 0;
          continue;
        }
        await this.sleep(stop);
      }
    } finally {
      this.disarm();
    }
  }

  /**
   * Pulls up to n tasks and starts them; returns how many it took, or
   * throws the first pull error. Each step's pulls of several levels go
   * out together and are answered together (pullLevels): a round costs a
   * round trip or two, not one per level.
   */
  private async round(n: number, stop: AbortSignal): Promise<number> {
    const rung = this.rung;
    this.rung = 0;
    let got = await this.pullOne((lvl) => (rung & (1 << lvl)) !== 0, n, BELL_WAIT);
    if (!this.bellSub || Date.now() - this.probed >= BUSY_PROBE) {
      this.probed = Date.now();
      got += await this.pullOne((lvl) => this.empty[lvl] as boolean, n - got, 0);
    }
    for (let pass = 0; pass < subj.LEVELS + 3 && n - got > 0 && !stop.aborted; pass++) {
      const alloc = new Array<number>(subj.LEVELS).fill(0);
      for (let i = 0; i < n - got; i++) {
        const lvl = this.picker.next((j) => !this.empty[j]);
        if (lvl < 0) break;
        alloc[lvl] = (alloc[lvl] as number) + 1;
      }
      const took = await this.pullLevels(alloc, 0);
      for (let lvl = 0; lvl < subj.LEVELS; lvl++) if ((took[lvl] as number) < (alloc[lvl] as number)) this.empty[lvl] = true;
      got += sum(took);
      if (sum(took) === 0 && this.empty.every(Boolean)) break;
    }
    return got;
  }

  /**
   * Pulls one task from each level pick selects, at most room levels,
   * highest priority first, all at once (pullLevels), and notes which of
   * them were empty. Returns how many it took.
   */
  private async pullOne(pick: (lvl: number) => boolean, room: number, waitMs: number): Promise<number> {
    const want = new Array<number>(subj.LEVELS).fill(0);
    let asked = 0;
    for (let lvl = 0; lvl < subj.LEVELS; lvl++) {
      if (asked < room && pick(lvl)) {
        want[lvl] = 1;
        asked++;
      }
    }
    const took = await this.pullLevels(want, waitMs);
    for (let lvl = 0; lvl < subj.LEVELS; lvl++) if ((want[lvl] as number) > 0) this.empty[lvl] = took[lvl] === 0;
    return sum(took);
  }

  /**
   * Takes up to want[lvl] tasks from each level and starts them, highest
   * priority first: the pulls go out together, then their messages are
   * started in level order. Returns how many each level gave; throws the
   * first failure once every pull that answered was started (a level whose
   * consumer may be gone is marked for run to create again).
   */
  private async pullLevels(want: number[], waitMs: number): Promise<number[]> {
    const pulledAt = Date.now(); // every message of the batch is delivered after this
    const results = await Promise.allSettled(
      want.map((w, lvl) =>
        w > 0 ? fetch(this.e.nc, subj.STREAM_TASKS, subj.readyConsumer(this.capability, lvl), w, waitMs) : Promise.resolve([]),
      ),
    );
    const took = new Array<number>(subj.LEVELS).fill(0);
    let failure: unknown;
    results.forEach((r, lvl) => {
      if (r.status === "fulfilled") {
        for (const m of r.value) this.e.start1(m, pulledAt);
        took[lvl] = r.value.length;
        return;
      }
      failure ??= r.reason;
      if (r.reason instanceof ConsumerGoneError) this.gone |= 1 << lvl;
    });
    if (failure !== undefined) throw failure;
    return took;
  }

  private async backoff(err: unknown, stop: AbortSignal): Promise<void> {
    if (this.failures === 0) this.e.config.log("warn", "pulling failed; retrying with backoff until NATS answers", { error: String(err) });
    this.failures++;
    await sleep(Math.min(100 * 2 ** Math.min(this.failures - 1, 6), MAX_PULL_BACKOFF), stop);
  }

  private arm(): void {
    try {
      this.bellSub = this.e.nc.subscribe(subj.bellCapability(this.capability), {
        callback: (_err, m) => {
          const lvl = subj.bellLevel(m.subject);
          if (lvl >= 0) this.rung |= 1 << lvl;
          this.rangFlag = true;
          this.rang?.();
        },
      });
    } catch (e) {
      this.e.config.log("warn", "cannot subscribe for new work; polling instead", { error: String(e) });
    }
  }

  private disarm(): void {
    this.bellSub?.unsubscribe();
    this.bellSub = undefined;
    this.rangFlag = false;
  }

  private async sleep(stop: AbortSignal): Promise<void> {
    if (this.rangFlag) {
      this.rangFlag = false;
      return;
    }
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.empty.fill(false);
        done();
      }, this.e.config.idleProbeMs);
      const done = () => {
        clearTimeout(t);
        this.rang = undefined;
        stop.removeEventListener("abort", done);
        resolve();
      };
      this.rang = done;
      stop.addEventListener("abort", done, { once: true });
    });
    this.rangFlag = false;
  }
}

// Re-exported for examples and the conformance adapter.
export { utf8 };
