import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import {
  Client,
  CommandRefusedError,
  Executor,
  NotFoundError,
  PermanentError,
  RejectedError,
  WaitTimeoutError,
  type AttemptMetrics,
} from "../src/index.js";
import { Kvm } from "@nats-io/kv";
import { DiscardPolicy, jetstreamManager } from "@nats-io/jetstream";
import { startAX, type AX } from "./ax.js";
import { heldTooLong } from "../src/executor.js";
import { Delivery, parseAck, type DeliveryInfo } from "../src/pull.js";
import type { Msg } from "@nats-io/transport-node";

let ax: AX;
let client: Client;
let ex: Executor;
const attempts: AttemptMetrics[] = [];
const aborted = new Map<string, string>();
const release = new Map<string, () => void>();

interface Order {
  sku: string;
  qty: number;
}

before(async () => {
  ax = await startAX();
  client = await Client.connect({ servers: ax.url });
  ex = await Executor.connect(
    { servers: ax.url },
    { capabilities: ["ts-test"], capacity: 8, ackWaitMs: 3000, onAttempt: (m) => attempts.push(m) },
  );
  ex.handle<Order, { total: number }>("order.price", (job) => ({ total: job.payload.qty * 3 }));
  ex.handle("flaky", (job) => {
    if (job.attempt < 2) throw new Error(`attempt ${job.attempt} failed`);
    return job.attempt;
  });
  ex.handle("broken", () => {
    throw new PermanentError("cannot ever work");
  });
  ex.handle(
    "wait.abort",
    (job) =>
      new Promise((_, reject) => {
        job.signal.addEventListener("abort", () => {
          aborted.set(job.id, (job.signal.reason as Error).name);
          reject(job.signal.reason);
        });
      }),
  );
  ex.handle("report.progress", async (job) => {
    job.progress(42.5, "halfway there");
    await new Promise<void>((r) => release.set(job.id, r));
    return "done";
  });
  ex.handle("sum.inputs", async (job) => {
    const ins = await job.inputs();
    return ins.reduce((s, i) => s + (i.result as { total: number }).total, 0);
  });
  await ex.start(AbortSignal.timeout(30_000));
});

after(async () => {
  await ex?.stop({ timeoutMs: 10_000 });
  await client?.close();
  await ax?.stop();
});

test("submit, state and wait: a typed handler's result", async () => {
  const id = await client.submit<Order>({ type: "order.price", capability: "ts-test", payload: { sku: "a", qty: 7 }, priority: 1 });
  const t = await client.wait<{ total: number }>(id, { timeoutMs: 20_000 });
  assert.equal(t.state, "succeeded");
  assert.deepEqual(t.result, { total: 21 });
  assert.equal(t.priority, 1);
  assert.equal(t.executor, ex.id);
  const s = await client.state<{ total: number }>("order.price", id);
  assert.deepEqual(s.result, { total: 21 });
  // Of another type, the task is not found.
  await assert.rejects(client.state("flaky", id), NotFoundError);
  const h = await client.history(id);
  assert.equal(h.at(-1)?.to, "succeeded");
  assert.equal(h[0]?.from ?? "", "");
});

test("retries, then success; a permanent error fails at once", async () => {
  const [flaky, broken] = await client.submitMany([
    { type: "flaky", capability: "ts-test", max_retries: 2 },
    { type: "broken", capability: "ts-test", max_retries: 5 },
  ]);
  const f = await client.waitState("flaky", flaky as string, { timeoutMs: 20_000 });
  assert.equal(f.state, "succeeded");
  assert.equal(f.attempt, 2);
  assert.equal(f.errors?.[0]?.error, "attempt 1 failed");
  const b = await client.wait(broken as string, { timeoutMs: 20_000 });
  assert.equal(b.state, "failed");
  assert.equal(b.attempt, 1);
  assert.match(b.reason ?? "", /permanently: cannot ever work/);
  assert.ok(attempts.some((m) => m.taskType === "broken" && m.outcome === "failed"));
});

test("cancel aborts the running handler's signal; a second cancel is a conflict", async () => {
  const id = await client.submit({ type: "wait.abort", capability: "ts-test" });
  // Wait for the attempt to be marked running (after one heartbeat).
  for (let i = 0; i < 200 && (await client.get(id)).state !== "running"; i++) await new Promise((r) => setTimeout(r, 50));
  const t = await client.cancel(id, "changed my mind");
  assert.equal(t.state, "cancelled");
  for (let i = 0; i < 200 && !aborted.has(id); i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(aborted.get(id), "CancelledError");
  await assert.rejects(client.cancel(id), (e: unknown) => e instanceof CommandRefusedError && e.code === "conflict");
  await assert.rejects(client.cancel("no-such-task"), (e: unknown) => e instanceof CommandRefusedError && e.code === "not_found");
});

test("a timeout aborts the signal with a TimeoutError and fails the attempt", async () => {
  const id = await client.submit({ type: "wait.abort", capability: "ts-test", timeout: 500, max_retries: 0 });
  const t = await client.wait(id, { timeoutMs: 20_000 });
  assert.equal(t.state, "failed");
  assert.match(t.reason ?? "", /timed out after 500ms/);
  assert.equal(aborted.get(id), "TimeoutError");
});

test("a graph: a dependent reads its upstreams' results", async () => {
  const ida = `ga-${Date.now()}`;
  const idb = `gb-${Date.now()}`;
  const ids = await client.submitGraph([
    { id: ida, type: "order.price", capability: "ts-test", payload: { sku: "x", qty: 1 } },
    { id: idb, type: "order.price", capability: "ts-test", payload: { sku: "y", qty: 2 } },
    { type: "sum.inputs", capability: "ts-test", depends_on: [ida, idb] },
  ]);
  const t = await client.wait(ids[2] as string, { timeoutMs: 20_000 });
  assert.equal(t.state, "succeeded");
  assert.equal(t.result, 9);
});

test("wait watches the task's history: one read, then its events, not polling", async () => {
  const id = await client.submit({ type: "report.progress", capability: "ts-test" });
  const spied = client as unknown as { lastMessage: (id: string) => Promise<unknown> };
  const read = spied.lastMessage.bind(client);
  let reads = 0;
  spied.lastMessage = (i: string) => {
    reads++;
    return read(i);
  };
  try {
    const waited = client.wait<string>(id, { timeoutMs: 20_000 });
    for (let i = 0; i < 400 && !release.has(id); i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(release.has(id), "the handler started");
    // Long enough for a poll to have read the record several times.
    await new Promise((r) => setTimeout(r, 1500));
    release.get(id)?.();
    const t = await waited;
    assert.equal(t.state, "succeeded");
    assert.equal(t.result, "done");
    assert.equal(reads, 1);
  } finally {
    spied.lastMessage = read;
  }
});

test("wait for a task submitted after the wait began; wait's timeout", async () => {
  const id = `later-${Date.now()}`;
  const waited = client.wait<{ total: number }>(id, { timeoutMs: 20_000 });
  await new Promise((r) => setTimeout(r, 300));
  await client.submit<Order>({ id, type: "order.price", capability: "ts-test", payload: { sku: "l", qty: 2 } });
  assert.deepEqual((await waited).result, { total: 6 });

  const blocked = await client.submit({ type: "report.progress", capability: "ts-test" });
  await assert.rejects(client.wait(blocked, { timeoutMs: 1500 }), WaitTimeoutError);
  for (let i = 0; i < 400 && !release.has(blocked); i++) await new Promise((r) => setTimeout(r, 20));
  release.get(blocked)?.();
  assert.equal((await client.wait(blocked, { timeoutMs: 20_000 })).state, "succeeded");
});

test("a dispatch held for half the ack wait before it could start is left to its redelivery", async () => {
  assert.equal(heldTooLong(1000, 1000 + 499, 1000), false);
  assert.equal(heldTooLong(1000, 1000 + 500, 1000), true);
  // An executor (not pulling) handed a dispatch as its puller would after
  // a stall (the process stopped, its event loop blocked) longer than
  // that: its handler does not run and the delivery is not answered (an
  // ack or a hand-back would act on a newer delivery to another executor).
  const st = new Executor(client.nc, { id: "stalled", capabilities: ["ts-stall"], ackWaitMs: 1000, log: () => undefined });
  let ran = 0;
  st.handle("stall.quick", () => {
    ran++;
    return "ran";
  });
  const answered: string[] = [];
  const ev = {
    kind: "transition",
    from: "",
    to: "ready",
    at: new Date().toISOString(),
    actor: "n",
    task: { id: "stall-1", type: "stall.quick", capability: "ts-stall", priority: 2, state: "ready", attempt: 1, execution_id: "x1" },
  };
  const reply = "$JS.ACK.AX_TASKS.ax-ready-ts-stall-p2.1.7.7.0.0";
  const msg = {
    subject: "ax.task.stall-1.d.ts-stall.p2.stall.quick",
    data: new TextEncoder().encode(JSON.stringify(ev)),
    reply,
    headers: undefined,
    respond: (p: Uint8Array) => {
      answered.push(new TextDecoder().decode(p));
      return true;
    },
  };
  st.start1(new Delivery(msg as unknown as Msg, parseAck(reply) as DeliveryInfo), Date.now() - 600);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(ran, 0);
  assert.deepEqual(answered, []);
  assert.equal(st.inFlight, 0);
});

test("a submission the orchestrator refuses is a RejectedError", async () => {
  const [id] = await client.submitGraph([
    { id: "cycle-y", type: "order.price", capability: "ts-test", depends_on: ["cycle-x"] },
    { id: "cycle-x", type: "order.price", capability: "ts-test", depends_on: ["cycle-y"] },
  ]);
  await assert.rejects(client.wait(id as string, { timeoutMs: 20_000 }), RejectedError);
});

test("the executor announces itself and its running handlers' progress in AX_WORKERS", async () => {
  const id = await client.submit({ type: "report.progress", capability: "ts-test" });
  const kv = await new Kvm(client.nc).open("AX_WORKERS");
  const key = `ts-test.${Buffer.from(ex.id).toString("base64url")}`;
  let seen: { types?: string[]; running?: { task_id: string; progress?: { percent: number; message?: string } }[] } = {};
  for (let i = 0; i < 200; i++) {
    const e = await kv.get(key);
    if (e && e.value.length > 0) {
      seen = e.json();
      if (seen.running?.some((r) => r.task_id === id && r.progress)) break;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const run = seen.running?.find((r) => r.task_id === id);
  assert.deepEqual(run?.progress && { percent: run.progress.percent, message: run.progress.message }, { percent: 42.5, message: "halfway there" });
  assert.ok(seen.types?.includes("report.progress"));
  release.get(id)?.();
  assert.equal((await client.wait(id, { timeoutMs: 20_000 })).result, "done");
});

test("a stop that gives up hands the running task back; another executor takes it over", async () => {
  const stuck = await Executor.connect({ servers: ax.url }, { capabilities: ["ts-stop"], ackWaitMs: 2000, announceIntervalMs: -1 });
  let stuckAborted = "";
  stuck.handle("hang", (job) => new Promise(() => job.signal.addEventListener("abort", () => (stuckAborted = (job.signal.reason as Error).name))));
  await stuck.start(AbortSignal.timeout(30_000));
  const id = await client.submit({ type: "hang", capability: "ts-stop" });
  for (let i = 0; i < 200 && (await client.get(id)).state !== "running"; i++) await new Promise((r) => setTimeout(r, 50));
  await stuck.stop({ timeoutMs: 100 });
  assert.equal(stuckAborted, "StoppedError");
  const next = await Executor.connect({ servers: ax.url }, { capabilities: ["ts-stop"], ackWaitMs: 2000 });
  next.handle("hang", () => "finished elsewhere");
  await next.start(AbortSignal.timeout(30_000));
  try {
    const t = await client.wait(id, { timeoutMs: 30_000 });
    assert.equal(t.state, "succeeded");
    assert.equal(t.result, "finished elsewhere");
    assert.equal(t.executor, next.id);
  } finally {
    await next.stop();
  }
});

test("a stored report is sent directly again and applied while the stored reports' consumer delivers nothing", async () => {
  // The Go executor's TestStoredReportResentDirectly, for this SDK: the
  // orchestrator cannot write the task (AX_TASKS full), so the report is
  // stored; the orchestrators' consumer of stored reports is paused (in a
  // cluster: without a leader); once AX_TASKS takes writes again, the
  // report's direct resend applies it.
  const jsm = await jetstreamManager(client.nc, { checkAPI: false });
  const rex = await Executor.connect({ servers: ax.url }, { capabilities: ["ts-resend"], announceIntervalMs: -1 });
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  let releaseHeld!: () => void;
  const held = new Promise<void>((r) => (releaseHeld = r));
  let runs = 0;
  rex.handle("resend.held", async () => {
    runs++;
    started();
    await held;
    return "resent";
  });
  await rex.start(AbortSignal.timeout(30_000));
  const tasks = (await jsm.streams.info("AX_TASKS")).config;
  const storedBefore = (await jsm.streams.info("AX_COMPLETED")).state.messages;
  try {
    const id = await client.submit({ type: "resend.held", capability: "ts-resend" });
    await running;
    const now = await jsm.streams.info("AX_TASKS");
    await jsm.streams.update("AX_TASKS", { max_bytes: now.state.bytes, discard: DiscardPolicy.New });
    await jsm.consumers.pause("AX_COMPLETED", "ax-orchestrator-completed", new Date(Date.now() + 3_600_000));
    const delivered = (await jsm.consumers.info("AX_COMPLETED", "ax-orchestrator-completed")).delivered.consumer_seq;
    releaseHeld();
    for (let i = 0; i < 600 && (await jsm.streams.info("AX_COMPLETED")).state.messages === storedBefore; i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal((await jsm.streams.info("AX_COMPLETED")).state.messages, storedBefore + 1, "the report stored");
    await jsm.streams.update("AX_TASKS", { max_bytes: tasks.max_bytes, discard: tasks.discard });
    const t = await client.wait(id, { timeoutMs: 60_000 });
    assert.equal(t.state, "succeeded");
    assert.equal(t.result, "resent");
    const ci = await jsm.consumers.info("AX_COMPLETED", "ax-orchestrator-completed");
    assert.equal(ci.paused, true);
    assert.equal(ci.delivered.consumer_seq, delivered, "applied by the resend, not the consumer");
    assert.equal(runs, 1);
  } finally {
    releaseHeld();
    await jsm.streams.update("AX_TASKS", { max_bytes: tasks.max_bytes, discard: tasks.discard }).catch(() => undefined);
    await jsm.consumers.resume("AX_COMPLETED", "ax-orchestrator-completed").catch(() => undefined);
    await rex.stop();
  }
});
