import { headers, type NatsConnection } from "@nats-io/transport-node";
import {
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type OrderedConsumerOptions,
} from "@nats-io/jetstream";
import type { Codec } from "./codec.js";
import { dial, inbox as newInbox, type ConnectOptions } from "./conn.js";
import { Objects } from "./objects.js";
import { CommandRefusedError, NotFoundError, RejectedError } from "./errors.js";
import { MAX_EVENT_DATA, toWire, validEventSubject, validID, validType, type TaskSpec } from "./spec.js";
import * as subj from "./subjects.js";
import { fnv1a64, jsonBytes, parseJSON, sleep } from "./util.js";
import {
  isTerminal,
  type CommandReply,
  type DirectBatchReply,
  type DirectReply,
  type Rejection,
  type StateReply,
  type TaskEvent,
  type TaskRecord,
  type WireSpec,
} from "./wire.js";

/** Options of a call that may wait. */
export interface CallOptions {
  /** Ends the wait early (the call rejects with the signal's reason). */
  signal?: AbortSignal;
  /** Gives up after this many milliseconds (default: 30 s for commands; waits wait until signal). */
  timeoutMs?: number;
}

/** An orchestrator could not read a state now: ask again. */
export class StateReadError extends Error {
  constructor(id: string, reason: string) {
    super(`state of ${id}: not read: ${reason}`);
    this.name = "StateReadError";
  }
}

/** How long a direct request waits for an orchestrator before the message is stored instead. */
const DIRECT_TIMEOUT = 5000;
/** After a direct request timed out, messages are stored for this long before asking directly again. */
const DIRECT_PAUSE = 30_000;
/** Most messages in one batch direct request (the Go SDK sends at most 256). */
const BATCH_MAX = 256;

/**
 * A producer: submits tasks and reads, waits for and cancels them, over
 * the wire contract of subjects.md. Safe for concurrent use.
 *
 * ```ts
 * const ax = await Client.connect({ servers: "nats://127.0.0.1:4222" });
 * const id = await ax.submit({ type: "email.send", payload: { to: "a@b.c" } });
 * const done = await ax.wait(id);
 * ```
 */
export class Client {
  readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private jsm?: JetStreamManager;
  private readonly owned: boolean;
  private directPausedUntil = 0;
  private objects?: Objects;
  /** The largest payload accepted before sending (bytes); the orchestrator's default is 256 KiB. */
  maxPayload = 256 << 10;
  /** Names who sends commands (`ax.cmd.as.<caller>.…`), one subject token; empty: not named. */
  caller = "";
  /**
   * Encodes every non-empty payload submitted (and decodes the payloads
   * of the records read back); the executors of the types need the same
   * codec. Default none: payloads in clear.
   */
  codec?: Codec;

  /** A client on an existing connection (not closed by close()). */
  constructor(nc: NatsConnection, owned = false) {
    this.nc = nc;
    this.owned = owned;
    this.js = jetstream(nc, { checkAPI: false });
  }

  /** Dials NATS and returns a client that closes its connection on close(). */
  static async connect(o: ConnectOptions): Promise<Client> {
    return new Client(await dial({ name: "ax-sdk-ts", ...o }), true);
  }

  /** Closes the connection if this client opened it. */
  async close(): Promise<void> {
    if (this.owned) await this.nc.close();
  }

  private async manager(): Promise<JetStreamManager> {
    this.jsm ??= await jetstreamManager(this.nc, { checkAPI: false });
    return this.jsm;
  }

  /**
   * Submits a task and returns its id once an orchestrator created it (or
   * recorded its rejection), or JetStream stored the submission: either
   * way it will not be lost. It is handed over directly first
   * (`ax.direct.task.submit-p<N>.<type>`), else published on
   * `task.submit-p<N>.<type>` with `Nats-Msg-Id` = `<id>:<hash>`.
   * Submitting an id again never creates a second task; an id whose
   * earlier submission was rejected is evaluated anew.
   */
  async submit<P>(spec: TaskSpec<P>): Promise<string> {
    const w = this.encoded(toWire(spec, this.maxPayload));
    const data = jsonBytes(w);
    const lane = subj.submitLane(w.priority ?? 2, w.type);
    if (await this.sendDirect(subj.direct(lane), data)) return w.id;
    await this.store(lane, w.id, data);
    return w.id;
  }

  /**
   * Submits several tasks and returns their ids in order once each exists
   * or is stored. Specs of one type go together in batch direct requests
   * (`ax.direct.batch.task.submit.<type>`, up to 256 each); those not
   * applied are published one by one on their lanes.
   */
  async submitMany<P>(specs: TaskSpec<P>[]): Promise<string[]> {
    const wires = specs.map((s) => this.encoded(toWire(s, this.maxPayload)));
    const byType = new Map<string, number[]>();
    wires.forEach((w, i) => {
      const l = byType.get(w.type) ?? [];
      l.push(i);
      byType.set(w.type, l);
    });
    const left: number[] = [];
    const sends: Promise<void>[] = [];
    for (const [type, idx] of byType) {
      for (let i = 0; i < idx.length; i += BATCH_MAX) {
        const chunk = idx.slice(i, i + BATCH_MAX);
        sends.push(
          this.sendBatch(subj.submitUnlaned(type), chunk.map((k) => wires[k] as WireSpec)).then((applied) => {
            chunk.forEach((k, j) => {
              if (!applied[j]) left.push(k);
            });
          }),
        );
      }
    }
    await Promise.all(sends);
    await Promise.all(
      left.map((k) => {
        const w = wires[k] as WireSpec;
        return this.store(subj.submitLane(w.priority ?? 2, w.type), w.id, jsonBytes(w));
      }),
    );
    return wires.map((w) => w.id);
  }

  /**
   * Submits tasks with their edges (depends_on) as one graph: the
   * orchestrator creates all of it or rejects all of it. Returns the ids
   * in order.
   */
  async submitGraph(specs: TaskSpec[]): Promise<string[]> {
    const wires = specs.map((s) => this.encoded(toWire(s, this.maxPayload)));
    if (wires.length === 0) return [];
    const data = jsonBytes({ tasks: wires });
    if (!(await this.sendDirect(subj.direct(subj.GRAPH_SUBMIT), data))) {
      await this.js.publish(subj.GRAPH_SUBMIT, data, { msgID: msgID("graph-" + (wires[0] as WireSpec).id, data) });
    }
    return wires.map((w) => w.id);
  }

  /** A wire spec with its payload encoded by the codec (when there is one and a payload). */
  private encoded(w: WireSpec): WireSpec {
    if (!this.codec || w.payload === undefined) return w;
    const enc = this.codec.encode(jsonBytes(w.payload));
    const out = { ...w, payload: JSON.parse(new TextDecoder().decode(enc)) as unknown };
    if (Buffer.byteLength(JSON.stringify(out.payload)) > this.maxPayload) {
      throw new Error(`task ${w.id}: encoded payload exceeds the limit of ${this.maxPayload} bytes`);
    }
    return out;
  }

  /** A record with its payload decoded by the codec, when it is encoded. */
  private decoded<T extends { payload?: unknown }>(t: T): T {
    if (!this.codec || t.payload === undefined || typeof t.payload !== "object" || t.payload === null || !("ax_codec" in t.payload)) return t;
    t.payload = JSON.parse(new TextDecoder().decode(this.codec.decode(jsonBytes(t.payload)))) as unknown;
    return t;
  }

  /**
   * A task's state through an orchestrator (`ax.state.<id>.<type>`): all
   * a producer whose NATS user may submit only some types may read. It
   * rejects with a RejectedError when the submission was refused, a
   * NotFoundError when there is no task of that id and type, and a
   * StateReadError when the orchestrator could not read it now.
   */
  async state<R = unknown>(type: string, id: string, o: CallOptions = {}): Promise<TaskRecord<R>> {
    if (!validType(type)) throw new Error(`state of ${id}: invalid task type ${JSON.stringify(type)}`);
    if (!validID(id)) throw new NotFoundError(id);
    const m = await this.nc.request(subj.state(id, type), undefined, { timeout: o.timeoutMs ?? 5000 });
    const rep = parseJSON<StateReply>(m.data);
    if (rep.error) throw new StateReadError(id, rep.error);
    if (rep.task) return this.decoded(rep.task as TaskRecord<R>);
    if (rep.rejection) throw new RejectedError(rep.rejection);
    throw new NotFoundError(id);
  }

  /**
   * Waits through state() until the task is terminal (succeeded, failed,
   * cancelled, expired) and returns it: every 50 ms at first, backing off
   * to every second. A task not found yet is asked for again (its
   * submission may still be queued); a rejection ends the wait.
   */
  async waitState<R = unknown>(type: string, id: string, o: CallOptions = {}): Promise<TaskRecord<R>> {
    return this.poll(o, () => this.state<R>(type, id));
  }

  /**
   * A task's current record, read from its history (a leader read of the
   * last message on `ax.task.<id>.>`); needs a NATS user that may read
   * AX_TASKS. Rejects with a RejectedError for a refused submission, a
   * NotFoundError for an unknown id.
   */
  async get<R = unknown>(id: string): Promise<TaskRecord<R>> {
    const ev = await this.lastEvent(id);
    if (ev) return this.decoded(ev.task as TaskRecord<R>);
    const rej = await this.rejection(id);
    if (rej) throw new RejectedError(rej);
    throw new NotFoundError(id);
  }

  /**
   * A succeeded task's result: the record's `result`, or the object it
   * names when it was over 16 KiB (`result_object` in `result_bucket`),
   * checked against `result_digest` (a DigestMismatchError when it differs).
   */
  async result<R = unknown>(t: TaskRecord<R>): Promise<R | undefined> {
    if (!t.result_object) return t.result;
    this.objects ??= new Objects(this.js);
    const data = await this.objects.get(t.result_bucket, t.result_object, t.result_digest);
    return JSON.parse(new TextDecoder().decode(data)) as R;
  }

  /** Every event of a task's history, oldest first. */
  async history(id: string): Promise<TaskEvent[]> {
    const jsm = await this.manager();
    const out: TaskEvent[] = [];
    let seq = 1;
    for (;;) {
      let m;
      try {
        m = await jsm.streams.getMessage(subj.STREAM_TASKS, { seq, next_by_subj: subj.taskHistory(id) } as unknown as { seq: number });
      } catch (e) {
        if (isNotFound(e)) break;
        throw e;
      }
      if (!m) break;
      out.push(m.json<TaskEvent>());
      seq = m.seq + 1;
    }
    return out;
  }

  /**
   * Waits until the task is terminal (succeeded, failed, cancelled,
   * expired) and returns it, as the Go SDK's Wait does: one read of its
   * current record (a task that ended is answered at once), then its
   * history is watched from the next event on (an ordered consumer on
   * `ax.task.<id>.>`), not polled. A task not found yet is watched from
   * its first event (its submission may still be queued); a rejection ends
   * the wait (RejectedError). NATS not answering for a while (a
   * reconnect, a leader election) is waited out. timeoutMs and signal are
   * checked at least every second. Needs read rights on AX_TASKS (a
   * producer limited to some types uses waitState).
   */
  async wait<R = unknown>(id: string, o: CallOptions = {}): Promise<TaskRecord<R>> {
    if (!validID(id)) throw new NotFoundError(id);
    const deadline = o.timeoutMs !== undefined ? Date.now() + o.timeoutMs : Infinity;
    let backoff = 100;
    for (;;) {
      try {
        return await this.watch<R>(id, deadline, o);
      } catch (e) {
        if (!isTransient(e) || e instanceof WaitTimeoutError || Date.now() >= deadline) throw e;
        o.signal?.throwIfAborted();
        await sleep(Math.min(backoff, Math.max(0, deadline - Date.now())), o.signal);
        backoff = Math.min(2 * backoff, 2000);
      }
    }
  }

  /** One watch of a task's history until it is terminal (wait). */
  private async watch<R>(id: string, deadline: number, o: CallOptions): Promise<TaskRecord<R>> {
    const last = await this.lastMessage(id);
    if (last && isTerminal(last.ev.task.state)) return this.decoded(last.ev.task as TaskRecord<R>);
    const opts: Partial<OrderedConsumerOptions> = { filter_subjects: [subj.taskHistory(id)] };
    if (last) {
      opts.deliver_policy = DeliverPolicy.StartSequence;
      opts.opt_start_seq = last.seq + 1;
    } else {
      opts.deliver_policy = DeliverPolicy.All;
    }
    const c = await this.js.consumers.get(subj.STREAM_TASKS, opts);
    let seen = last !== undefined;
    try {
      for (;;) {
        o.signal?.throwIfAborted();
        if (Date.now() >= deadline) throw new WaitTimeoutError(id, o.timeoutMs ?? 0);
        const m = await c.next({ expires: 1000 });
        if (!m) {
          if (!seen) {
            const rej = await this.rejection(id);
            if (rej) throw new RejectedError(rej);
          }
          continue;
        }
        seen = true;
        const ev = eventOf(m);
        if (isTerminal(ev.task.state)) return this.decoded(ev.task as TaskRecord<R>);
      }
    } finally {
      await c.delete().catch(() => undefined);
    }
  }

  /**
   * Asks the orchestrator to cancel a task and waits for its answer (a
   * durable command on `ax.cmd.cancel.<id>` answered on `Ax-Reply-To`).
   * A running task's handler is cancelled. Rejects with a
   * CommandRefusedError (code `not_found`, `conflict`…) when not applied.
   */
  async cancel(id: string, reason = "", o: CallOptions = {}): Promise<TaskRecord> {
    return this.command("cancel", id, { reason }, o);
  }

  /** Starts a fresh attempt series for a failed (dead-lettered) task. */
  async redrive(id: string, withDependents = false, o: CallOptions = {}): Promise<TaskRecord> {
    return this.command("redrive", id, withDependents ? { with_dependents: true } : {}, o);
  }

  private async command(kind: string, id: string, body: Record<string, unknown>, o: CallOptions): Promise<TaskRecord> {
    if (!validID(id)) throw new Error(`${kind}: invalid task id ${JSON.stringify(id)}`);
    const inbox = newInbox(this.nc);
    const sub = this.nc.subscribe(inbox, { max: 1, timeout: o.timeoutMs ?? 30_000 });
    try {
      const h = headers();
      h.set(subj.HEADER_REPLY_TO, inbox);
      const s = this.caller ? subj.commandAs(this.caller, kind, id) : subj.command(kind, id);
      const clean = Object.fromEntries(Object.entries(body).filter(([, v]) => v !== "" && v !== undefined));
      await this.js.publish(s, jsonBytes(clean), { headers: h });
      for await (const m of sub) {
        const rep = parseJSON<CommandReply>(m.data);
        if (!rep.ok) throw new CommandRefusedError(kind, id, rep.code ?? "", rep.error ?? "refused", rep.task);
        if (!rep.task) throw new Error(`${kind} ${id}: applied, but the reply has no task`);
        return this.decoded(rep.task);
      }
      throw new Error(`${kind} ${id}: no answer yet (the command stays queued)`);
    } finally {
      sub.unsubscribe();
    }
  }

  private async poll<T extends { state: TaskRecord["state"] }>(o: CallOptions, read: () => Promise<T>): Promise<T> {
    const deadline = o.timeoutMs !== undefined ? Date.now() + o.timeoutMs : Infinity;
    let every = 50;
    for (;;) {
      o.signal?.throwIfAborted();
      try {
        const t = await read();
        if (isTerminal(t.state)) return t;
      } catch (e) {
        if (!(e instanceof NotFoundError || e instanceof StateReadError || isTransient(e))) throw e;
      }
      if (Date.now() >= deadline) throw new Error(`wait: not terminal within ${o.timeoutMs}ms`);
      await sleep(Math.min(every, deadline - Date.now()), o.signal);
      every = Math.min(2 * every, 1000);
    }
  }

  private async lastEvent(id: string): Promise<TaskEvent | undefined> {
    return (await this.lastMessage(id))?.ev;
  }

  /** A task's last event and its revision (a leader read). */
  private async lastMessage(id: string): Promise<{ ev: TaskEvent; seq: number } | undefined> {
    const jsm = await this.manager();
    try {
      const m = await jsm.streams.getMessage(subj.STREAM_TASKS, { last_by_subj: subj.taskHistory(id) });
      if (!m) return undefined;
      const ev = m.json<TaskEvent>();
      if (subj.parseDispatch(m.subject)) ev.task.dispatch_revision = m.seq;
      return { ev, seq: m.seq };
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  private async rejection(id: string): Promise<Rejection | undefined> {
    const jsm = await this.manager();
    try {
      const m = await jsm.streams.getMessage("AX_REJECTED", { last_by_subj: `ax.rejected.${id}` });
      return m ? m.json<Rejection>() : undefined;
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  /**
   * Publishes an event on `ax.event.<eventSubject>` (stream AX_EVENTS):
   * every task whose wait_for is {subject, match} with
   * "<subject>.<match>" equal to eventSubject succeeds with data as its
   * result — tasks waiting now, and tasks that register their wait later,
   * within AX_EVENTS' retention (7 days). The event is the latest value of
   * its subject: a later signal on the same subject replaces it for tasks
   * that have not received it yet.
   *
   * data is sent as JSON (a Uint8Array as it is; undefined is JSON null),
   * at most 16 KiB. Resolves with the event's sequence in AX_EVENTS once
   * stored. Go's sdk.Client.Signal.
   *
   * ```ts
   * await ax.signal(`payment.${orderID}`, { amount: 42 });
   * ```
   */
  async signal(eventSubject: string, data?: unknown): Promise<number> {
    if (!validEventSubject(eventSubject)) {
      throw new Error(
        `signal ${JSON.stringify(eventSubject)}: not an event subject (<subject>.<match>: 2-8 dot-separated tokens of [A-Za-z0-9_-])`,
      );
    }
    let body: Uint8Array;
    if (data instanceof Uint8Array) body = data;
    else {
      let enc: string | undefined;
      try {
        enc = data === undefined ? "null" : JSON.stringify(data);
      } catch (e) {
        throw new Error(`signal ${eventSubject}: encode data: ${(e as Error).message}`, { cause: e });
      }
      if (enc === undefined) throw new Error(`signal ${eventSubject}: encode data: not JSON`);
      body = new TextEncoder().encode(enc);
    }
    if (body.length > MAX_EVENT_DATA) {
      throw new Error(`signal ${eventSubject}: ${body.length} bytes of data exceed the limit of ${MAX_EVENT_DATA}`);
    }
    try {
      const ack = await this.js.publish(subj.event(eventSubject), body);
      return ack.seq;
    } catch (e) {
      throw new Error(`signal ${eventSubject}: ${(e as Error).message}`, { cause: e });
    }
  }

  /** Sends a direct request; true when an orchestrator applied it. */
  private async sendDirect(subject: string, data: Uint8Array): Promise<boolean> {
    if (Date.now() < this.directPausedUntil) return false;
    try {
      const m = await this.nc.request(subject, data, { timeout: DIRECT_TIMEOUT });
      return !parseJSON<DirectReply>(m.data).error;
    } catch (e) {
      if (isTimeout(e)) this.directPausedUntil = Date.now() + DIRECT_PAUSE;
      return false;
    }
  }

  /** Sends a batch direct request; which messages were applied. */
  private async sendBatch(stored: string, bodies: unknown[]): Promise<boolean[]> {
    const none = bodies.map(() => false);
    if (Date.now() < this.directPausedUntil) return none;
    try {
      const m = await this.nc.request(subj.directBatch(stored), jsonBytes({ messages: bodies }), { timeout: DIRECT_TIMEOUT });
      const rep = parseJSON<DirectBatchReply>(m.data);
      if (rep.error || !rep.results || rep.results.length !== bodies.length) return none;
      return rep.results.map((r) => !r.error);
    } catch (e) {
      if (isTimeout(e)) this.directPausedUntil = Date.now() + DIRECT_PAUSE;
      return none;
    }
  }

  /** Stores a submission on its subject; a de-duplicated one whose earlier submission was rejected is published anew. */
  private async store(subject: string, id: string, data: Uint8Array): Promise<void> {
    const mid = msgID(id, data);
    const ack = await this.js.publish(subject, data, { msgID: mid });
    if (!ack.duplicate) return;
    const rej = await this.rejection(id).catch(() => undefined);
    if (!rej) return;
    const jsm = await this.manager();
    await jsm.streams.purge("AX_REJECTED", { filter: `ax.rejected.${id}` });
    await this.js.publish(subject, data, { msgID: `${mid}:${Date.now().toString(36)}${Math.random().toString(36).slice(2)}` });
  }
}

/** A wait that reached its timeoutMs (not retried as a transient error). */
export class WaitTimeoutError extends Error {
  constructor(id: string, ms: number) {
    super(`wait: ${id} not terminal within ${ms}ms`);
    this.name = "WaitTimeoutError";
  }
}

/** The event of a task's history message (a dispatch's record with its revision). */
function eventOf(m: JsMsg): TaskEvent {
  const ev = m.json<TaskEvent>();
  if (subj.parseDispatch(m.subject)) ev.task.dispatch_revision = m.seq;
  return ev;
}

/** The de-duplication id of a submission: its task id and a hash of its body. */
export function msgID(id: string, data: Uint8Array): string {
  return `${id}:${fnv1a64(data).toString(36)}`;
}

function isNotFound(e: unknown): boolean {
  const err = e as { code?: unknown; api_error?: { err_code?: number; code?: number }; message?: string };
  return (
    err?.api_error?.err_code === 10037 ||
    err?.api_error?.code === 404 ||
    /no message found|message not found/i.test(String(err?.message ?? ""))
  );
}

function isTimeout(e: unknown): boolean {
  const name = (e as Error)?.name ?? "";
  return name === "TimeoutError" || /timeout/i.test(String((e as Error)?.message ?? ""));
}

/** NATS or JetStream not answering for now. */
export function isTransient(e: unknown): boolean {
  const err = e as Error & { code?: unknown };
  const name = err?.name ?? "";
  const msg = String(err?.message ?? "");
  return (
    name === "TimeoutError" ||
    name === "NoRespondersError" ||
    name === "RequestError" ||
    /no responders|timeout|503|reconnect/i.test(msg)
  );
}
